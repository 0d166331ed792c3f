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

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.sessions import READERS, read_session
from dp_compact.sessions.model import Message, Session, Usage
from dp_compact.sessions.source import Source, read_source

__all__ = ["Compaction", "History", "call_message_counts", "read_history"]


@dataclass(frozen=True, slots=True)
class Compaction:
    """A compaction recorded in the file.

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
    compactions : tuple[Compaction, ...]
        ``len(segments) - 1`` markers (0 for formats split in one segment only).
    """

    path: str
    format: str
    segments: tuple[Session, ...]
    compactions: tuple[Compaction, ...]

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


def _compaction(line: int, payload: dict[str, Any], fmt: str, after: Session) -> Compaction:
    """What the marker at ``line`` tells about its compaction; ``after`` is the segment it opens."""
    if fmt == "codex":
        text = payload.get("message") if isinstance(payload.get("message"), str) else ""
        return Compaction(line, summary_text=text)
    meta = payload.get("compactMetadata") if isinstance(payload.get("compactMetadata"), dict) else {}
    first: Message | None = after.messages[0] if after.messages else None
    summary = first.text if first is not None and first.role == "user" else ""
    pre, post = meta.get("preTokens"), meta.get("postTokens")
    return Compaction(
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
    whole = read_session(path, lenient=lenient)
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


def call_message_counts(messages: Sequence[Message], usage: Sequence[Usage]) -> npt.NDArray[np.int64]:
    """How many messages each call was sent: the index of the assistant message answering it.

    Parameters
    ----------
    messages : sequence of Message
        A segment's messages, in order.
    usage : sequence of Usage
        The segment's usage records, in call order.

    Returns
    -------
    ndarray[int64], shape (len(usage),)
        ``n`` per call (the prompt held messages ``[0, n)`` besides the prefix V); ``-1`` for a
        call whose response cannot be placed (no assistant message at or before its line, or
        one already claimed by an earlier call).

    Notes
    -----
    A call's response is the last assistant message starting at or before the usage record's
    line: Claude Code and Anthropic lists put the usage on the response's first line, Codex
    writes its ``token_count`` event after the response's items.
    """
    assistant = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    lines = np.array([messages[i].line for i in assistant], dtype=np.int64)
    order = np.argsort(lines, kind="stable")
    assistant, lines = assistant[order], lines[order]
    where = np.searchsorted(lines, np.array([u.line for u in usage], dtype=np.int64), side="right") - 1
    counts = np.full(len(usage), -1, dtype=np.int64)
    claimed: set[int] = set()
    for j, position in enumerate(where.tolist()):
        if position >= 0 and (index := int(assistant[position])) not in claimed:
            claimed.add(index)
            counts[j] = index
    return counts
