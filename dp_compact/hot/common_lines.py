"""What the hot path's JSONL readers share: the kept state, its pickle in chunks, and the read of an append.

The readers of :mod:`dp_compact.hot.lines` (Anthropic messages), :mod:`dp_compact.hot.codex_lines`
(Codex rollouts), :mod:`dp_compact.hot.openai_lines` (OpenAI chat messages) and
:mod:`dp_compact.hot.gemini_lines` (Gemini CLI stream-json) are one pass over a file's records in
file order. Each keeps its reader's state after the file's complete lines in a subclass of
:class:`_State`, and :func:`_grown` reads a file that grew by an append from where that state
stopped: the lines after it (:func:`_records`), then a last line without a line break when it is
whole JSON (read into a copy of the state, :func:`_forked`, not kept: more may be written to it);
a half-written last line is left out (``Session.partial_line``).

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
from dp_compact.conversation import (
    _SHAPES,
    Message,
    Session,
    ToolCall,
    ToolResult,
    Usage,
    raw_as_json,
)
from dp_compact.hot.transcript import NotIncremental, appended_lines
from dp_compact.io import bulk_allocation
from dp_compact.sessions.source import (
    BINARY_SNIFF_BYTES,
    UTF8_BOM,
    Record,
    loads_replacing_surrogates,
)

__all__ = ["MAX_CHUNK_MESSAGES", "Chunk"]

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
    """What every reader's state keeps besides its reader (subclasses add their own values and
    ``__reduce__``: a pickle of their chunks and a few values).

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

    def _fork_reader(self, reader: Any) -> Any:
        """A copy of ``reader`` that reads on without changing it (:func:`_forked`)."""
        return _with_copied_lists(reader)


def _with_copied_lists(reader: Any) -> Any:
    """A shallow copy of ``reader`` whose list attributes are copies (their items are never changed in place)."""
    twin = copy.copy(reader)
    for name in getattr(type(reader), "__slots__", ()) or list(vars(reader)):
        value = getattr(twin, name, None)
        if type(value) is list:
            setattr(twin, name, list(value))
    return twin


def _is_codex_envelope(value: Any) -> bool:
    """A Codex rollout record (:func:`dp_compact.sessions.codex.sniff` looks for one among the first records)."""
    return (type(value) is dict and value.get("type") in ("session_meta", "response_item", "compacted")
            and isinstance(value.get("payload"), dict))


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


def _forked(state: _State) -> _State:
    """A copy of ``state`` whose reader can read on without changing ``state``'s
    (:meth:`_State._fork_reader`); the chunks are ``state``'s own."""
    forked = object.__new__(type(state))  # not copy.copy: that would pickle the state
    for name in (*_State.__slots__, *type(state).__slots__):
        setattr(forked, name, getattr(state, name))
    forked.reader = state._fork_reader(state.reader)
    forked.repaired = list(state.repaired)
    return forked


def _grown_as(kind: type[_State], new_reader: Callable[[], Any], what: str, path: Path | str, data: bytes, state: _State | None,
              read: Callable[[Any, list[Record]], None], session_of: Callable[[Any], Session]) -> tuple[Session, bytes]:
    """:func:`_grown` from ``state``, or, None, from a new state of ``kind`` around ``new_reader()``
    at the first line's object; NotIncremental when ``state`` is of another kind (a file of
    another format than ``what`` names)."""
    if state is None:
        start = _first_line_object(data)
        state = kind(new_reader(), start, 1, xxh3_128_digest(data[:start]))
    elif type(state) is not kind:
        raise NotIncremental(f"the state is not of {what}")
    return _grown(path, data, state, read, session_of)


def _grown(path: Path | str, data: bytes, state: _State, read: Callable[[Any, list[Record]], None],
           session_of: Callable[[Any], Session]) -> tuple[Session, bytes]:
    """The session of the file named ``path`` whose bytes are ``data``, read from ``state`` (a state
    of the right kind, changed in place), and the new state pickled: ``read`` hands records to
    its reader, ``session_of`` makes the session of a (forked) state (it may change its reader).

    Raises NotIncremental: ``data`` does not start with the bytes ``state`` read; a NUL byte among
    the first :data:`~dp_compact.sessions.source.BINARY_SNIFF_BYTES`; no record yet; or as
    ``read`` and ``session_of`` raise it.
    """
    if len(data) < state.consumed or xxh3_128_digest(memoryview(data)[: state.consumed]) != state.digest:
        raise NotIncremental("the file was rewritten, not appended to")
    if data.find(b"\x00", 0, BINARY_SNIFF_BYTES) >= 0:
        raise NotIncremental("binary data")
    end, tail, partial = appended_lines(data, state.consumed, lambda at: state.next_line + data.count(b"\n", state.consumed, at))
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
