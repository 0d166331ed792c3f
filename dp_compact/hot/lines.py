"""JSONL sessions of the one-pass readers read once and then only where they grew.

The Anthropic messages reader (:mod:`dp_compact.sessions.anthropic`: one ``{role, content}``
message a line, as the Messages API, Cline's API history and the seed agent's conversation file
write it) and the Codex rollout reader (:mod:`dp_compact.sessions.codex`) are one pass over the
file's records in file order. The reader's state after the file's complete lines is kept
(:class:`LinesState`, :class:`CodexState`), and a file that grew by an append is read from where
that state stopped. The session made is the one :func:`dp_compact.sessions.read_session` makes
of the whole file with ``raw_json=True``; anything this module does not handle the same way
raises :class:`~dp_compact.hot.transcript.NotIncremental` and the caller reads the whole file.

Handled: complete JSONL lines, blank lines, a UTF-8 byte order mark, lines whose lone surrogate
escapes are replaced (``Session.repaired_lines``), a half-written last line (left out,
``Session.partial_line``) and a last line without a line break that is whole JSON (read, not
kept in the state: more may be written to it).

Raises NotIncremental: the file is not an append of what the state read; it is one JSON document
(an array, ``{"messages": [...]}``, a pretty-printed file) or its first line is not a JSON
object; a line is not JSON or breaks the reader's rules (a whole read raises the error); the
whole file would be read as another format (:func:`dp_compact.sessions.read_session` tells it
from the first :data:`~dp_compact.sessions.source.SNIFF_RECORDS` records: for Anthropic
messages, a line that is not one, or an OpenAI-only key on a message while no ``tool_use`` or
``tool_result`` block is among those records; for Codex, a Claude Code record among them, or no
Codex envelope yet); a NUL byte among the first
:data:`~dp_compact.sessions.source.BINARY_SNIFF_BYTES` bytes. Lenient reading is not offered.

:func:`read_grown_any` picks the reader of a kept state's format, or of the file's format when
there is no state (Claude Code: :func:`dp_compact.hot.transcript.read_grown`).

The kept state holds every message: its pickle is about the size of the messages' text. It is
written in chunks (:func:`_sealed`): the chunks of earlier reads are kept as pickled bytes and
copied, so a read after an append pickles only the new messages (and, now and then, merges chunks).
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from dataclasses import fields, replace
from itertools import chain, islice
from operator import attrgetter
from pathlib import Path
from typing import Any

import orjson
from xxhash import xxh3_128_digest

from dp_compact._fast import maker
from dp_compact.conversation import _SHAPES, Message, Session, ToolCall, ToolResult, Usage, raw_as_json
from dp_compact.hot.transcript import NotIncremental, TranscriptState
from dp_compact.hot.transcript import read_grown as read_grown_transcript
from dp_compact.io import bulk_allocation
from dp_compact.sessions import READERS, anthropic, codex
from dp_compact.sessions.claude_code import _is_message_record
from dp_compact.sessions.openai_chat import _has_anthropic_blocks, _openai_evidence
from dp_compact.sessions.source import BINARY_SNIFF_BYTES, SNIFF_RECORDS, UTF8_BOM, Record, Source, loads_replacing_surrogates

__all__ = ["INCREMENTAL_FORMATS", "CodexState", "LinesState", "read_grown", "read_grown_any", "read_grown_codex"]

#: The formats :func:`read_grown_any` continues from a kept state (the others are read whole each run).
INCREMENTAL_FORMATS = frozenset({"anthropic", "codex", "claude_code"})

#: Messages a chunk of the pickled state grows to by merging (:func:`_sealed`): a chunk this large
#: is never written again, so a read after an append writes at most this many messages.
MAX_CHUNK_MESSAGES = 4096

_MESSAGE_FIELDS = tuple(f.name for f in fields(Message))
_CALL_FIELDS = tuple(f.name for f in fields(ToolCall))
_RESULT_FIELDS = tuple(f.name for f in fields(ToolResult))
_USAGE_FIELDS = tuple(f.name for f in fields(Usage))
_LAYOUT = (_MESSAGE_FIELDS, _CALL_FIELDS, _RESULT_FIELDS, _USAGE_FIELDS)
_CALLS, _RESULTS, _RAW = (_MESSAGE_FIELDS.index(name) for name in ("tool_calls", "tool_results", "raw"))
_message_fields, _call_fields = attrgetter(*_MESSAGE_FIELDS), attrgetter(*_CALL_FIELDS)
_result_fields, _usage_fields = attrgetter(*_RESULT_FIELDS), attrgetter(*_USAGE_FIELDS)
_make_message, _make_call, _make_result, _make_usage = maker(Message), maker(ToolCall), maker(ToolResult), maker(Usage)
_make_record = maker(Record)
#: The shared shapes :func:`~dp_compact.conversation.raw_as_json` keeps as a message's raw, written
#: as their position here and read back as the same objects (their identity says "no blocks").
_SHAPE_LIST = tuple(_SHAPES.values())
_SHAPE_CODE = {id(shape): code for code, shape in enumerate(_SHAPE_LIST)}
_WHITE = frozenset(b" \t\n\r\x0b\x0c")
#: ``(messages, usage records, call times)`` counts at the end of a chunk, and the chunk's bytes.
Chunk = tuple[tuple[int, int, int], bytes]


def _columns(objects: list[Any], get: Any, width: int) -> tuple[tuple[Any, ...], ...]:
    """The field values of ``objects`` (``get`` gives them), one tuple per field (``width`` fields)."""
    return tuple(zip(*map(get, objects), strict=True)) if objects else ((),) * width


def _encode(messages: list[Message], usage: list[Usage], times: list[Any]) -> bytes:
    """``messages``, ``usage`` and ``times`` pickled a field at a time (read back by :func:`_decode`)."""
    columns = list(_columns(messages, _message_fields, len(_MESSAGE_FIELDS)))
    calls, results = columns[_CALLS], columns[_RESULTS]
    columns[_CALLS], columns[_RESULTS] = tuple(map(len, calls)), tuple(map(len, results))
    columns[_RAW] = tuple([_SHAPE_CODE.get(id(raw), raw) for raw in columns[_RAW]])
    flat_calls = _columns(list(chain.from_iterable(calls)), _call_fields, len(_CALL_FIELDS))
    flat_results = _columns(list(chain.from_iterable(results)), _result_fields, len(_RESULT_FIELDS))
    usage_columns = _columns(usage, _usage_fields, len(_USAGE_FIELDS))
    return pickle.dumps((columns, flat_calls, flat_results, usage_columns, times), protocol=pickle.HIGHEST_PROTOCOL)


def _grouped(items: Any, counts: tuple[int, ...]) -> list[tuple[Any, ...]]:
    """``items`` cut into consecutive tuples of ``counts`` items each."""
    it, empty = iter(items), ()
    return [tuple(islice(it, n)) if n else empty for n in counts]


def _decode(blob: bytes) -> tuple[list[Message], list[Usage], list[Any]]:
    """The messages, usage records and call times :func:`_encode` wrote."""
    columns, flat_calls, flat_results, usage_columns, times = pickle.loads(blob)
    columns[_CALLS] = _grouped(map(_make_call, *flat_calls), columns[_CALLS])
    columns[_RESULTS] = _grouped(map(_make_result, *flat_results), columns[_RESULTS])
    columns[_RAW] = [_SHAPE_LIST[raw] if type(raw) is int else raw for raw in columns[_RAW]]
    return list(map(_make_message, *columns)), list(map(_make_usage, *usage_columns)), times


def _sealed(chunks: list[Chunk], messages: list[Message], usage: list[Usage], times: list[Any]) -> list[Chunk]:
    """``chunks`` (changed in place) written up to the end of ``messages``, ``usage`` and ``times``
    (lists that only grow): a new chunk for what follows the last one, then the last two merged
    while the one before is no larger (at most :data:`MAX_CHUNK_MESSAGES` messages), so there are
    about log2 of the messages' chunks and a message is written again about that many times."""
    now = (len(messages), len(usage), len(times))
    start = chunks[-1][0] if chunks else (0, 0, 0)
    if start == now:
        return chunks
    chunks.append((now, b""))
    while len(chunks) >= 2:
        first = chunks[-3][0] if len(chunks) >= 3 else (0, 0, 0)
        middle = chunks[-2][0]
        if middle[0] - first[0] > now[0] - middle[0] or now[0] - first[0] > MAX_CHUNK_MESSAGES:
            break
        del chunks[-2]
        start = first
    m, u, t = start
    chunks[-1] = (now, _encode(messages[m:], usage[u:], times[t:]))
    return chunks


def _unsealed(layout: Any, chunks: list[Chunk]) -> tuple[list[Message], list[Usage], list[Any]]:
    """The messages, usage records and call times of ``chunks``.

    Raises ValueError for chunks written with other message fields (``layout``).
    """
    if layout != _LAYOUT:
        raise ValueError("the state was written with other message fields")
    messages: list[Message] = []
    usage: list[Usage] = []
    times: list[Any] = []
    with bulk_allocation():
        for _, blob in chunks:
            more = _decode(blob)
            messages += more[0]
            usage += more[1]
            times += more[2]
    return messages, usage, times


class _State:
    """What both states keep besides their reader.

    Attributes
    ----------
    consumed : int
        Bytes of the file read into the reader: up to and including its last line break.
    next_line : int
        1-based number of the line that starts at ``consumed``.
    digest : bytes
        XXH3-128 of the file's first ``consumed`` bytes: a file whose first bytes differ was not
        appended to.
    records : int
        Non-blank lines read.
    repaired : list[int]
        Lines read whose lone surrogate escapes were replaced.
    chunks : list[Chunk]
        The pickled chunks of the messages (:func:`_sealed`).
    """

    __slots__ = ("reader", "consumed", "next_line", "digest", "records", "repaired", "chunks")

    def __init__(self, reader: Any, consumed: int, next_line: int, digest: bytes) -> None:
        self.reader, self.consumed, self.next_line, self.digest = reader, consumed, next_line, digest
        self.records = 0
        self.repaired: list[int] = []
        self.chunks: list[Chunk] = []

    def _common(self) -> tuple[Any, ...]:
        return (self.consumed, self.next_line, self.digest, self.records, self.repaired)

    def _set_common(self, common: tuple[Any, ...], chunks: list[Chunk]) -> None:
        self.consumed, self.next_line, self.digest, self.records, self.repaired = common
        self.chunks = chunks


class LinesState(_State):
    """The Anthropic reader's state after the first ``consumed`` bytes of a file (:class:`_State`).

    ``reader`` is a :class:`dp_compact.sessions.anthropic._Reader` after every complete line;
    ``blocked`` is True once a message among the first
    :data:`~dp_compact.sessions.source.SNIFF_RECORDS` holds a ``tool_use`` or ``tool_result``
    block (the file is then never read as OpenAI chat).

    Pickled (:func:`pickle.dumps`) as its chunks (:func:`_sealed`) and a few values. A read changes
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


#: Attributes of the Codex reader that are not pickled with its other values: the source, the line
#: being read, and the lists kept in chunks.
_CODEX_APART = frozenset({"source", "envelope", "messages", "times", "counts"})


class CodexState(_State):
    """The Codex reader's state after the first ``consumed`` bytes of a rollout (:class:`_State`).

    ``reader`` is a :class:`dp_compact.sessions.codex._Reader` after every complete line, its
    open response not emitted (:meth:`~dp_compact.sessions.codex._Reader.flush` is called on a
    copy); ``codex_seen`` is True once a Codex envelope is among the first
    :data:`~dp_compact.sessions.source.SNIFF_RECORDS` records.

    Pickled as :class:`LinesState` is; changed in place by a read.
    """

    __slots__ = ("codex_seen",)

    def __init__(self, reader: codex._Reader, consumed: int, next_line: int, digest: bytes) -> None:
        super().__init__(reader, consumed, next_line, digest)
        self.codex_seen = False

    def __reduce__(self) -> tuple[Any, ...]:
        reader = self.reader
        counts = reader.counts
        chunks = _sealed(self.chunks, reader.messages, counts.usage, reader.times)
        values = {k: v for k, v in vars(reader).items() if k not in _CODEX_APART}
        return _restored_codex, (_LAYOUT, self._common(), self.codex_seen, values, counts.context_window, counts._previous, chunks)


def _restored_codex(layout: Any, common: tuple[Any, ...], seen: bool, values: dict[str, Any], window: int | None,
                    previous: str | None, chunks: list[Chunk]) -> CodexState:
    """The :class:`CodexState` that :meth:`CodexState.__reduce__` wrote (ValueError: another layout)."""
    reader = codex._Reader(None)  # type: ignore[arg-type]
    vars(reader).update(values)
    reader.messages, reader.counts.usage, reader.times = _unsealed(layout, chunks)
    reader.counts.context_window, reader.counts._previous = window, previous
    state = CodexState(reader, 0, 0, b"")
    state._set_common(common, chunks)
    state.codex_seen = seen
    return state


def _first_line_object(data: bytes) -> int:
    """Where the file's text starts (after a byte order mark, which the readers skip).

    Raises NotIncremental when its first line (to a line break, or the end) is not a JSON object.
    """
    start = len(UTF8_BOM) if data.startswith(UTF8_BOM) else 0
    first_end = data.find(b"\n", start)
    text = memoryview(data)[start : len(data) if first_end < 0 else first_end]
    try:
        try:
            first = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            first = loads_replacing_surrogates(text, exc)
    except orjson.JSONDecodeError as exc:
        raise NotIncremental("the first line is not JSON") from exc
    if type(first) is not dict:
        raise NotIncremental("the first line is not a JSON object")
    return start


def _records(state: _State, data: bytes, start: int, end: int, line: int) -> tuple[list[Record], int]:
    """The records of the lines of ``data[start:end]`` (each ending in a line break, or the last
    one without), numbered from ``line``, blank lines left out; and the number of the line after
    them. Lines whose lone surrogates were replaced are added to ``state.repaired``.

    Raises NotIncremental for a line that is not JSON.
    """
    records = []
    view, white, loads, find = memoryview(data), _WHITE, orjson.loads, data.find
    at = start
    while at < end:
        stop = find(b"\n", at, end)
        stop = end if stop < 0 else stop
        if stop > at and (data[at] not in white or data[at:stop].strip()):
            text = view[at:stop]
            try:
                value = loads(text)
            except orjson.JSONDecodeError as exc:
                try:
                    value = loads_replacing_surrogates(text, exc)
                except orjson.JSONDecodeError as error:
                    raise NotIncremental(f"line {line} is not JSON") from error
                state.repaired.append(line)
            records.append(_make_record(line, value, stop - at))
        at = stop + 1
        line += 1
    return records, line


def _read_anthropic(state: LinesState, records: list[Record]) -> None:
    """``records`` (the lines after those ``state`` read) handed to its reader.

    Raises NotIncremental for a record that is not an Anthropic message or breaks the reader's
    rules, and when the file read so far would be read as OpenAI chat (module docstring).
    """
    add, index, blocked, evidence = state.reader.add, state.records, state.blocked, False
    for record in records:
        value = record.value
        if not anthropic._is_anthropic_message(value):
            raise NotIncremental(f"line {record.line} is not an Anthropic message")
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
        raise NotIncremental("the file reads as OpenAI chat")


def _read_codex(state: CodexState, records: list[Record]) -> None:
    """``records`` (the lines after those ``state`` read) handed to its reader.

    Raises NotIncremental for a record that breaks the reader's rules, or a Claude Code record
    among the first :data:`~dp_compact.sessions.source.SNIFF_RECORDS` (the file reads as Claude Code).
    """
    reader, index, seen = state.reader, state.records, state.codex_seen
    for record in records:
        value = record.value
        if index < SNIFF_RECORDS:
            if _is_message_record(value):
                raise NotIncremental(f"line {record.line} is a Claude Code record")
            seen = seen or (type(value) is dict and value.get("type") in ("session_meta", "response_item", "compacted")
                            and isinstance(value.get("payload"), dict))
        index += 1
        try:
            reader.record(value, record.line, record.nbytes)
        except ValueError as exc:
            raise NotIncremental(f"line {record.line} breaks the format") from exc
    state.records, state.codex_seen = index, seen


def _forked(state: _State) -> _State:
    """A copy of ``state`` whose reader can read on without changing ``state``'s: its lists copied
    (their items are never changed in place); the chunks are ``state``'s own."""
    forked = object.__new__(type(state))  # not copy.copy: that would pickle the state
    for name in (*_State.__slots__, *type(state).__slots__):
        setattr(forked, name, getattr(state, name))
    reader = forked.reader = copy.copy(state.reader)
    for name in ("messages", "usage", "times", "system", "records", "markers", "texts", "thinking", "calls"):
        if isinstance(getattr(reader, name, None), list):
            setattr(reader, name, list(getattr(reader, name)))
    if isinstance(getattr(reader, "counts", None), codex.TokenCounts):
        reader.counts = copy.copy(reader.counts)
        reader.counts.usage = list(reader.counts.usage)
    forked.repaired = list(state.repaired)
    return forked


def _grown(path: Path | str, data: bytes, state: _State, read: Callable[[Any, list[Record]], None],
           session_of: Callable[[Any], Session]) -> tuple[Session, bytes]:
    """:func:`read_grown` for a state checked to be of the right kind: ``read`` hands records to
    its reader, ``session_of`` makes the session of a state (it may change the state's reader)."""
    if len(data) < state.consumed or xxh3_128_digest(memoryview(data)[: state.consumed]) != state.digest:
        raise NotIncremental("the file was rewritten, not appended to")
    if data.find(b"\x00", 0, BINARY_SNIFF_BYTES) >= 0:
        raise NotIncremental("binary data")
    end = max(data.rfind(b"\n") + 1, state.consumed)
    tail, partial = data[end:], None
    if tail.strip():  # no line break after it: read when whole JSON, else left out as half-written
        try:
            orjson.loads(tail)
        except orjson.JSONDecodeError:
            partial, tail = state.next_line + data.count(b"\n", state.consumed, end), b""
    else:
        tail = b""
    with bulk_allocation(), raw_as_json():
        if end > state.consumed:
            records, next_line = _records(state, data, state.consumed, end, state.next_line)
            read(state, records)
            state.consumed, state.next_line, state.digest = end, next_line, xxh3_128_digest(memoryview(data)[:end])
        kept = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
        work = _forked(state)
        if tail:  # read, not kept
            read(work, _records(work, data, end, len(data), work.next_line)[0])
        if not work.records:
            raise NotIncremental("no record yet")
        session = session_of(work)
    if partial is not None:
        session = replace(session, partial_line=partial)
    if work.repaired:
        session = replace(session, repaired_lines=tuple(work.repaired))
    return session, kept


def read_grown(path: Path | str, data: bytes, state: LinesState | None) -> tuple[Session, bytes]:
    """The session of the Anthropic messages file whose bytes are ``data``, read from where ``state`` stopped.

    Parameters
    ----------
    path : Path or str
        The file, as the session names it (``Session.path``).
    data : bytes
        The file's bytes now.
    state : LinesState or None
        The state kept from an earlier read of this file (changed in place to the new state);
        None reads it whole.

    Returns
    -------
    (Session, bytes)
        The session (equal to :func:`~dp_compact.sessions.read_session` of the file with
        ``raw_json=True``), and the new state, pickled, to keep for the next read.

    Raises
    ------
    NotIncremental
        ``data`` does not start with the bytes ``state`` read, or the file needs the whole reader
        (module docstring).
    """
    if state is None:
        start = _first_line_object(data)
        state = LinesState(anthropic._Reader(), start, 1, xxh3_128_digest(data[:start]))
    elif type(state) is not LinesState:
        raise NotIncremental("the state is not of an Anthropic messages file")
    name = str(path)
    return _grown(path, data, state, _read_anthropic, lambda work: work.reader.session(name, 0, True))


def _codex_session(path: str) -> Callable[[CodexState], Session]:
    """The session of a (forked) Codex state's records, its open response emitted, named ``path``."""

    def session_of(work: CodexState) -> Session:
        if not work.codex_seen:
            raise NotIncremental("no Codex envelope among the first records")
        reader = work.reader
        reader.flush()
        return reader.session(path, reader.skipped)

    return session_of


def read_grown_codex(path: Path | str, data: bytes, state: CodexState | None) -> tuple[Session, bytes]:
    """The session of the Codex rollout whose bytes are ``data``, read from where ``state`` stopped.

    Parameters, returns and errors as :func:`read_grown` (``state`` a :class:`CodexState`).
    """
    if state is None:
        start = _first_line_object(data)
        state = CodexState(codex._Reader(None), start, 1, xxh3_128_digest(data[:start]))  # type: ignore[arg-type]
    elif type(state) is not CodexState:
        raise NotIncremental("the state is not of a Codex rollout")
    return _grown(path, data, state, _read_codex, _codex_session(str(path)))


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
    (Codex rollouts) or :func:`dp_compact.hot.transcript.read_grown` (Claude Code transcripts).

    Parameters
    ----------
    path : Path or str
        The file, as the session names it.
    data : bytes
        The file's bytes now.
    state : LinesState, CodexState, TranscriptState or None
        The state kept from an earlier read (unpickled); None reads the file whole, its format
        told from its first lines as :func:`~dp_compact.sessions.read_session` tells it.

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
        if kind == anthropic.FORMAT:
            return read_grown(path, data, None)
        if kind == codex.FORMAT:
            return read_grown_codex(path, data, None)
        if kind == "claude_code":
            return read_grown_transcript(path, data, None)
        raise NotIncremental(f"no incremental reader for {kind or 'this file'}")
    if type(state) is LinesState:
        return read_grown(path, data, state)
    if type(state) is CodexState:
        return read_grown_codex(path, data, state)
    if type(state) is TranscriptState:
        return read_grown_transcript(path, data, state)
    raise NotIncremental("a state of no incremental reader")
