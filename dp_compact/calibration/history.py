"""A session file's whole history: one segment per stretch between compaction markers.

:func:`dp_compact.sessions.read_session` keeps only the live conversation (after the last
compaction marker, DESIGN §4). Calibration and the timeline also need what came before: the
first call of the file (for V), every call with the messages it was sent (token ratio, the
recall curve), and the compactions themselves (summary sizes S). :func:`read_history` reads the
file once per marker, each time up to the next marker, so the readers' own rules still decide
what a message is.

Markers are split for the formats that write them beside their usage records:
Claude Code (``system``/``compact_boundary``) and Codex (``compacted``). Other formats give one
segment, the live conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dp_compact.conversation import Message, Session
from dp_compact.sessions import READERS, read_session
from dp_compact.sessions.source import Source, read_source

__all__ = ["CompactionMarker", "History", "read_history"]


@dataclass(frozen=True, slots=True)
class CompactionMarker:
    """A compaction marker recorded in the file, with the sizes the tool reported around it.

    Attributes
    ----------
    line : int
        1-based line of the marker.
    summary_text : str
        The hand-over summary the tool wrote (Claude Code: the ``isCompactSummary`` message;
        Codex: ``compacted.message``); empty when the file does not hold it.
    pre_tokens, post_tokens : int or None
        Context size before and after, tokens, as the tool reported it (Claude Code
        ``compactMetadata.preTokens`` / ``postTokens``).
    """

    line: int
    summary_text: str = ""
    pre_tokens: int | None = None
    post_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class History:
    """Every segment of a session file, oldest first.

    Attributes
    ----------
    path, format : str
    segments : tuple[Session, ...]
        Segment ``i`` holds the messages after marker ``i - 1`` up to marker ``i`` and only the
        usage records of the calls made in it; ``user_turns``, ``llm_calls`` and ``compactions``
        count the file up to the segment's end (what the planner would have seen then). The
        last segment's messages are the live conversation; it also keeps the whole file's
        ``compaction_records``.
    compactions : tuple[CompactionMarker, ...]
        ``len(segments) - 1`` markers (0 for formats split in one segment only).
    """

    path: str
    format: str
    segments: tuple[Session, ...]
    compactions: tuple[CompactionMarker, ...]

    @property
    def live(self) -> Session:
        """The live conversation (the last segment)."""
        return self.segments[-1]


def _marker(value: Any, fmt: str) -> dict[str, Any] | None:
    """The marker record's payload when ``value`` is a compaction marker of ``fmt``."""
    if not isinstance(value, dict):
        return None
    if fmt == "claude_code" and value.get("type") == "system" and value.get("subtype") == "compact_boundary":
        return value if value.get("isSidechain") is not True else None
    if fmt == "codex" and value.get("type") == "compacted" and isinstance(value.get("payload"), dict):
        return value["payload"]
    return None


def _compaction(line: int, payload: dict[str, Any], fmt: str, after: Session) -> CompactionMarker:
    """What the marker at ``line`` tells about its compaction; ``after`` is the segment it opens."""
    if fmt == "codex":
        text = payload.get("message") if isinstance(payload.get("message"), str) else ""
        return CompactionMarker(line, summary_text=text)
    meta = payload.get("compactMetadata") if isinstance(payload.get("compactMetadata"), dict) else {}
    first: Message | None = after.messages[0] if after.messages else None
    summary = first.text if first is not None and first.role == "user" else ""
    pre, post = meta.get("preTokens"), meta.get("postTokens")
    return CompactionMarker(
        line, summary_text=summary, pre_tokens=pre if isinstance(pre, int) else None, post_tokens=post if isinstance(post, int) else None
    )


def _reader(source: Source) -> Any:
    """The reader module that accepts ``source`` (as :func:`read_session` picks it)."""
    return next(r for r in READERS if r.sniff(source))


def read_history(path: Path | str, *, lenient: bool = False) -> History:
    """Read ``path`` into its segments between compaction markers.

    Parameters
    ----------
    path : Path or str
        A session file of any supported format; never modified.
    lenient : bool
        Skip malformed lines, as :func:`~dp_compact.sessions.read_session` does.

    Returns
    -------
    History
        One segment per stretch between markers (Claude Code and Codex), else one segment.

    Raises
    ------
    SessionError
        As :func:`~dp_compact.sessions.read_session` (unreadable, malformed, unknown format).
    """
    whole = read_session(path, lenient=lenient, raw_json=True)
    if whole.format not in ("claude_code", "codex") or whole.compactions == 0:
        return History(whole.path, whole.format, (whole,), ())
    source = read_source(path, lenient=lenient)
    records = source.records or ()
    reader = _reader(source)
    marks = [(i, r.line, p) for i, r in enumerate(records) if (p := _marker(r.value, whole.format)) is not None]
    segments: list[Session] = []
    previous_line = 0
    for index, line, _ in marks:
        part = reader.read(replace(source, records=records[:index]))
        segments.append(_only_calls_after(part, previous_line))
        previous_line = line
    segments.append(_only_calls_after(whole, previous_line))
    compactions = tuple(
        _compaction(line, payload, whole.format, segments[n + 1]) for n, (_, line, payload) in enumerate(marks)
    )
    return History(whole.path, whole.format, tuple(segments), compactions)


def _only_calls_after(session: Session, line: int) -> Session:
    """``session`` with only the usage records of calls after source line ``line``."""
    return replace(session, usage=tuple(u for u in session.usage if u.line > line))
