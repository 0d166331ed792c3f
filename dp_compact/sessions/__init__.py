"""Session readers: detect a file's format by content and normalize it (DESIGN §4).

Each reader module is a :class:`Reader`: ``FORMAT`` (a short name), ``DESCRIPTION`` (one
line), ``sniff(source) -> bool`` and ``read(source) -> Session``. ``READERS`` is the static
registry, most specific first; the first whose ``sniff`` accepts the file reads it.

The readers are the only modules that look at a file's records: what else a command needs from
the file is on the :class:`Session` they return, read in the same pass (the whole history, the
compaction markers that split it, ``Session.markers``, and when each LLM call was made,
``Session.call_times``). :mod:`dp_compact.sessions.segments` cuts a session into its segments.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import orjson

from dp_compact.conversation import Message, RecordedCompaction, SeedStats, Session, ToolCall, ToolResult, Usage, raw_as_json
from dp_compact.errors import SessionError, UnknownFormatError
from dp_compact.io import bulk_allocation
from dp_compact.sessions import anthropic, atif, claude_code, cline_ui, codex, gemini_cli, openai_chat
from dp_compact.sessions.source import UTF8_BOM, Source, read_source

__all__ = [
    "READERS",
    "Message",
    "Reader",
    "RecordedCompaction",
    "SeedStats",
    "Session",
    "ToolCall",
    "ToolResult",
    "Usage",
    "read_seed_stats",
    "read_session",
    "supported_formats",
]

class Reader(Protocol):
    """What a reader module provides (DESIGN §4).

    ``FORMAT`` names the format in ``Session.format``; ``DESCRIPTION`` is one line for the list
    of supported formats; ``sniff`` tells by content whether the file is of this format;
    ``read`` normalizes it, giving every message its :attr:`~dp_compact.conversation.Message.kind`
    (and raises :class:`~dp_compact.errors.MalformedLineError` naming ``path:line``, through
    :func:`~dp_compact.sessions.source.each_record`). A module may set ``IS_SESSION = False``
    when it recognizes a file that is not a conversation, only to say so.
    """

    FORMAT: str
    DESCRIPTION: str

    def sniff(self, source: Source) -> bool: ...

    def read(self, source: Source) -> Session: ...


#: The readers, most specific first (the first whose ``sniff`` accepts a file reads it).
READERS: tuple[Reader, ...] = (claude_code, codex, gemini_cli, atif, cline_ui, openai_chat, anthropic)  # type: ignore[assignment]


def supported_formats() -> list[str]:
    """One line per supported format: ``name: description``."""
    return [f"{r.FORMAT}: {r.DESCRIPTION}" for r in READERS if getattr(r, "IS_SESSION", True)]


def read_session(path: Path | str, *, lenient: bool = False, stats: Path | str | None = None, raw_json: bool = False) -> Session:
    """Read a session file of any supported format into a normalized :class:`Session`.

    Parameters
    ----------
    path : Path or str
        The session file (JSONL or one JSON document, whatever its name). Never modified.
    lenient : bool
        Skip malformed lines (counted in ``Session.skipped_lines``) instead of failing.
    stats : Path or str, optional
        The seed agent's ``stats.json`` (DESIGN §4), attached as ``Session.stats``.
    raw_json : bool
        Keep each message's source shape as its JSON text (``Message.raw`` a
        :class:`~dp_compact.conversation.RawJSON`, :func:`~dp_compact.conversation.raw_as_json`):
        for a session read to be planned, replayed or calibrated, whose ``raw`` is only searched
        for images and documents. It then takes about the memory of its text; a rewrite
        (``compact``, ``shrink``) reads with the default.

    Returns
    -------
    Session
        An empty file gives a session with no messages (format ``"empty"``). A half-written
        last line (an agent still appending) is left out, its number in ``Session.partial_line``.

    Raises
    ------
    SessionError
        The file cannot be read, or is compressed or binary (the message says which).
    MalformedLineError
        A line is not valid JSON or not a valid record (names ``path:line``).
    UnknownFormatError
        No reader accepts the file; the message lists the supported formats.
    NotASessionError
        The file belongs to a known tool but is not a conversation (e.g. Cline's UI log).
    """
    with bulk_allocation(), (raw_as_json() if raw_json else nullcontext()):
        return _read(path, lenient=lenient, stats=stats)


def _read(path: Path | str, *, lenient: bool, stats: Path | str | None) -> Session:
    """:func:`read_session` without the collector's pause."""
    source = read_source(path, lenient=lenient)
    seed_stats = read_seed_stats(stats) if stats is not None else None
    sample = source.sample
    lone = sample[0].value if source.records is not None and len(source.records) == 1 and sample else None
    nothing = source.records is not None and not sample and not any(True for _ in source.records)  # lenient: every line malformed
    if nothing or source.document in ([], {}, {"messages": []}) or lone == {"messages": []}:
        return Session(
            path=str(path), format="empty", messages=(), skipped_lines=source.skipped, stats=seed_stats,
            partial_line=source.partial_line, skipped_line_numbers=source.skipped_line_numbers(),
        )
    reader = next((r for r in READERS if r.sniff(source)), None)
    if reader is None and isinstance(lone, dict) and source.partial_line is None:
        # one line holding one JSON object that no JSONL reader takes: a document written on one line
        # (json.dump without indent), read as the document it is
        source = Source(source.path, None, lone, nbytes=source.nbytes, lenient=lenient,
                        document_repaired={1} if source.repaired_line_numbers() else set())
        reader = next((r for r in READERS if r.sniff(source)), None)
    if reader is not None:
        session = reader.read(source)
        if seed_stats is not None:
            session = replace(session, stats=seed_stats)
        if source.partial_line is not None:
            session = replace(session, partial_line=source.partial_line)
        if session.skipped_lines:
            session = replace(session, skipped_line_numbers=source.skipped_line_numbers())
        if source.repaired_line_numbers():
            session = replace(session, repaired_lines=source.repaired_line_numbers())
        return session
    formats = "; ".join(supported_formats())
    raise UnknownFormatError(path, None, f"{UnknownFormatError.OPENING}. Supported formats: {formats}")


def read_seed_stats(path: Path | str) -> SeedStats:
    """Read the seed agent's ``stats.json`` (DESIGN §4).

    Accepts the key names of DESIGN §4 (``current_turn_count``, ...) and the golden file's
    ``s0_current_turn_count`` style. Unknown keys are ignored.

    Raises
    ------
    SessionError
        If the file is missing, not JSON, or a counter is not a non-negative integer.
    """
    try:
        data = orjson.loads(Path(path).read_bytes().removeprefix(UTF8_BOM))
    except OSError as exc:
        raise SessionError(path, None, f"cannot read the stats file: {exc.strerror or exc}") from exc
    except orjson.JSONDecodeError as exc:
        raise SessionError(path, None, f"stats file is not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise SessionError(path, None, "stats file must be a JSON object")
    values: dict[str, int] = {}
    for key, value in data.items():
        name = key.split("_", 1)[1] if key[:1] == "s" and key[1:2].isdigit() else key
        if name in SeedStats.__dataclass_fields__:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SessionError(path, None, f"{key} must be a non-negative integer, not {value!r}")
            values[name] = value
    return SeedStats(**values)
