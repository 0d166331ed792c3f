"""JSONL sessions of the one-pass readers read once and then only where they grew.

The Anthropic messages reader (:mod:`dp_compact.sessions.anthropic`: one ``{role, content}``
message a line, as the Messages API, Cline's API history and the seed agent's conversation file
write it) is one pass over the file's records in file order. Its state after the file's complete
lines is kept (:class:`LinesState`), and a file that grew by an append is read from where that
state stopped (:mod:`dp_compact.hot.common_lines`, which the readers of Codex rollouts,
:mod:`dp_compact.hot.codex_lines`, OpenAI chat JSONL, :mod:`dp_compact.hot.openai_lines`, and
Gemini CLI stream-json, :mod:`dp_compact.hot.gemini_lines`, share). The session made is the one
:func:`dp_compact.sessions.read_session` makes of the whole file with ``raw_json=True``; anything
these modules do not handle the same way raises :class:`~dp_compact.hot.transcript.NotIncremental`
and the caller reads the whole file.

Handled: complete JSONL lines, blank lines, a UTF-8 byte order mark, lines whose lone surrogate
escapes are replaced (``Session.repaired_lines``), a half-written last line (left out,
``Session.partial_line``) and a last line without a line break that is whole JSON (read, not
kept in the state: more may be written to it).

Raises NotIncremental: the file is not an append of what the state read; it is one JSON document
(an array, ``{"messages": [...]}``, a pretty-printed file) or its first line is not a JSON
object; a line is not JSON or breaks the reader's rules (a whole read raises the error); the
whole file would be read as another format (:func:`dp_compact.sessions.read_session` tells it
from the first :data:`~dp_compact.sessions.source.SNIFF_RECORDS` records: a line that is not an
Anthropic message, or an OpenAI-only key on a message while no ``tool_use`` or ``tool_result``
block is among those records); a NUL byte among the first
:data:`~dp_compact.sessions.source.BINARY_SNIFF_BYTES` bytes. Lenient reading is not offered.

:func:`read_grown_any` picks the reader of a kept state's format, or of the file's format when
there is no state (Claude Code: :func:`dp_compact.hot.transcript.read_grown`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


from dp_compact.conversation import Session
from dp_compact.hot.codex_lines import CodexState, read_grown_codex
from dp_compact.hot.common_lines import (
    _LAYOUT,
    MAX_CHUNK_MESSAGES,
    Chunk,
    _first_line_object,
    _grown_as,
    _records,
    _sealed,
    _State,
    _unsealed,
)
from dp_compact.hot.document import DocumentState, read_document
from dp_compact.hot.gemini_lines import GeminiState, read_grown_gemini
from dp_compact.hot.openai_lines import ChatState, read_grown_chat
from dp_compact.hot.transcript import NotIncremental, TranscriptState
from dp_compact.hot.transcript import read_grown as read_grown_transcript
from dp_compact.sessions import READERS, anthropic, codex, gemini_cli, openai_chat
from dp_compact.sessions.openai_chat import _has_anthropic_blocks, _openai_evidence
from dp_compact.sessions.source import SNIFF_RECORDS, Record, Source

__all__ = [
    "INCREMENTAL_FORMATS",
    "IN_PLACE_STATES",
    "MAX_CHUNK_MESSAGES",
    "ChatState",
    "CodexState",
    "GeminiState",
    "LinesState",
    "read_grown",
    "read_grown_any",
    "read_grown_chat",
    "read_grown_codex",
    "read_grown_gemini",
]

#: The formats :func:`read_grown_any` continues from a kept state (the others are read whole each run).
INCREMENTAL_FORMATS = frozenset({"anthropic", "codex", "claude_code", "openai_chat", "gemini_cli"})


class _ReadsAsChat(NotIncremental):
    """An Anthropic messages state that cannot continue on an OpenAI chat message: the file may read as OpenAI chat."""


class LinesState(_State):
    """The Anthropic reader's state after the first ``consumed`` bytes of a file (:class:`~dp_compact.hot.common_lines._State`).

    ``reader`` is a :class:`dp_compact.sessions.anthropic._Reader` after every complete line;
    ``blocked`` is True once a message among the first
    :data:`~dp_compact.sessions.source.SNIFF_RECORDS` holds a ``tool_use`` or ``tool_result``
    block (the file is then never read as OpenAI chat).

    Pickled (:func:`pickle.dumps`) as its chunks (:func:`~dp_compact.hot.common_lines._sealed`) and a few values. A read changes
    the state in place; after :class:`~dp_compact.hot.transcript.NotIncremental` it is not to be used again.
    """

    __slots__ = ("blocked",)

    def __init__(self, reader: anthropic._Reader, consumed: int, next_line: int, digest: bytes) -> None:
        super().__init__(reader, consumed, next_line, digest)
        self.blocked = False

    def __reduce__(self) -> tuple[Any, ...]:
        reader = self.reader
        chunks = _sealed(self.chunks, reader.messages, reader.usage, reader.times)
        return _restored_lines, (_LAYOUT, self._common(), self.blocked, reader.model, reader.previous_value, chunks)


def _restored_lines(layout: Any, common: tuple[Any, ...], blocked: bool, model: str | None, previous: Any,
                    chunks: list[Chunk]) -> LinesState:
    """The :class:`LinesState` that :meth:`LinesState.__reduce__` wrote (ValueError: another layout)."""
    reader = anthropic._Reader()
    reader.messages, reader.usage, reader.times = _unsealed(layout, chunks)
    reader.model, reader.previous_value = model, previous
    state = LinesState(reader, 0, 0, b"")
    state._set_common(common, chunks)
    state.blocked = blocked
    return state


def _read_anthropic(state: LinesState, records: list[Record]) -> None:
    """``records`` (the lines after those ``state`` read) handed to its reader.

    Raises NotIncremental for a record that is not an Anthropic message or breaks the reader's
    rules, and when the file read so far would be read as OpenAI chat (module docstring).
    """
    add, index, blocked, evidence = state.reader.add, state.records, state.blocked, False
    for record in records:
        value = record.value
        if not anthropic._is_anthropic_message(value):
            refused = _ReadsAsChat if openai_chat._is_message(value) else NotIncremental
            raise refused(f"line {record.line} is not an Anthropic message")
        if not blocked:
            if index < SNIFF_RECORDS and _has_anthropic_blocks(value):
                blocked = True
            elif _openai_evidence(value):
                evidence = True
        index += 1
        try:
            add(record)
        except ValueError as exc:
            raise NotIncremental(f"line {record.line} breaks the format") from exc
    state.records, state.blocked = index, blocked
    if evidence and not blocked:
        raise _ReadsAsChat("the file reads as OpenAI chat")


def read_grown(path: Path | str, data: bytes, state: LinesState | None) -> tuple[Session, bytes]:
    """The session of the Anthropic messages file whose bytes are ``data``, read from where ``state`` stopped.

    Parameters, returns and errors as :func:`dp_compact.hot.transcript.read_grown`, but for
    ``state`` a :class:`LinesState` (changed in place to the new state), the session that of
    :func:`~dp_compact.sessions.read_session` with ``raw_json=True``, and NotIncremental also as
    the module docstring says.
    """
    name = str(path)
    return _grown_as(LinesState, anthropic._Reader, "an Anthropic messages file", path, data, state, _read_anthropic,
                     lambda work: work.reader.session(name, 0, True))


def _sniffed(path: Path | str, data: bytes) -> str | None:
    """The format :func:`~dp_compact.sessions.read_session` reads ``data`` as, told from its first
    complete lines (None when they are not JSONL records of any format).

    Raises NotIncremental when the first line is not a JSON object, or a line among them is not JSON.
    """
    start = _first_line_object(data)
    stop, count = start, 0
    while count < SNIFF_RECORDS:  # the lines of the first SNIFF_RECORDS records
        found = data.find(b"\n", stop)
        if found < 0:
            break
        count += bool(data[stop:found].strip())
        stop = found + 1
    records = _records(_State(None, 0, 0, b""), data, start, stop, 1)[0]
    source = Source(str(path), records)
    return next((reader.FORMAT for reader in READERS if reader.sniff(source)), None)


def read_grown_any(path: Path | str, data: bytes, state: Any | None) -> tuple[Session, bytes]:
    """The session of the file whose bytes are ``data``, read from ``state`` by the incremental
    reader of its format: :func:`read_grown` (Anthropic messages), :func:`read_grown_codex`
    (Codex rollouts), :func:`read_grown_chat` (OpenAI chat JSONL), :func:`read_grown_gemini`
    (Gemini CLI stream-json) or :func:`dp_compact.hot.transcript.read_grown` (Claude Code transcripts).

    Parameters
    ----------
    path : Path or str
        The file, as the session names it.
    data : bytes
        The file's bytes now.
    state : LinesState, CodexState, ChatState, GeminiState, TranscriptState, DocumentState or None
        The state kept from an earlier read (unpickled); None reads the file whole, its format
        told from its first lines as :func:`~dp_compact.sessions.read_session` tells it (a
        :class:`~dp_compact.hot.document.DocumentState`, which :func:`~dp_compact.hot.document.read_document`
        reads whole each time, is kept for one JSON document only: never started here).

    Returns
    -------
    (Session, bytes)
        As the chosen reader returns them.

    Raises
    ------
    NotIncremental
        No incremental reader reads this file, or the chosen one cannot continue from ``state``.
    """
    if state is None:
        kind = _sniffed(path, data)
        read = _READER_OF_FORMAT.get(kind)  # type: ignore[arg-type]
        if read is None:
            raise NotIncremental(f"no incremental reader for {kind or 'this file'}")
        if kind != anthropic.FORMAT:
            return read(path, data, None)
        try:
            return read(path, data, None)
        except _ReadsAsChat:  # an OpenAI-only key after the first records
            return read_grown_chat(path, data, None)
    read = _READER_OF_STATE.get(type(state))
    if read is None:
        raise NotIncremental("a state of no incremental reader")
    return read(path, data, state)


#: The incremental reader of each format, and of each kind of kept state (:func:`read_grown_any`).
_READER_OF_FORMAT: dict[str, Callable[[Path | str, bytes, Any], tuple[Session, bytes]]] = {
    anthropic.FORMAT: read_grown, codex.FORMAT: read_grown_codex, openai_chat.FORMAT: read_grown_chat,
    gemini_cli.FORMAT: read_grown_gemini, "claude_code": read_grown_transcript,
}
_READER_OF_STATE: dict[type, Callable[[Path | str, bytes, Any], tuple[Session, bytes]]] = {
    LinesState: read_grown, CodexState: read_grown_codex, ChatState: read_grown_chat,
    GeminiState: read_grown_gemini, TranscriptState: read_grown_transcript, DocumentState: read_document,
}
#: The kept states a read brings up to date in place, and the state of a JSON document, which a read
#: leaves as it is (the plan server keeps them in memory between runs).
IN_PLACE_STATES = (LinesState, CodexState, ChatState, GeminiState, DocumentState)
