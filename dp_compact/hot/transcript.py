"""A Claude Code transcript read once and then only where it grew (:class:`TranscriptState`).

The Claude Code reader (:mod:`dp_compact.sessions.claude_code`) is one pass over the file's
records in file order: its state after the file's complete lines is kept
(:class:`TranscriptState`), and a transcript that grew by an append is read from where that
state stopped. The session made is the one :func:`dp_compact.sessions.read_session` makes of
the whole file; anything this module does not handle the same way raises :class:`NotIncremental`
and the caller reads the whole file (see the package README's list).

Handled: complete JSONL lines of a Claude Code transcript whose records come after their parent
(every line that arrives in order, the usual case), blank lines, a half-written last line (left
out as the reader leaves it out) and a last line without a line break that is whole JSON (read,
not kept in the state: more may be written to it).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from functools import cache
from operator import attrgetter
from pathlib import Path
from typing import Any

import orjson
from xxhash import xxh3_128_digest

from dp_compact._fast import maker
from dp_compact.conversation import Session, raw_as_json
from dp_compact.sessions.claude_code import FORMAT, _Reader, _with_summaries
from dp_compact.sessions.common import build_session, relink
from dp_compact.sessions.source import UTF8_BOM, Record

__all__ = ["NotIncremental", "TranscriptState", "dumps", "read_grown", "start_state"]


class NotIncremental(Exception):
    """The file cannot be continued from the state kept (rewritten, not Claude Code, a record
    out of order, a line that is not JSON or breaks the format): read the whole file."""


@dataclass(slots=True)
class TranscriptState:
    """The Claude Code reader's state after the first ``consumed`` bytes of a transcript.

    Attributes
    ----------
    reader : _Reader
        :class:`dp_compact.sessions.claude_code._Reader` after every complete line so far, read in
        file order, its ``source`` dropped.
    consumed : int
        Bytes of the file read into ``reader``: up to and including its last line break.
    next_line : int
        1-based number of the line that starts at ``consumed``.
    digest : bytes
        XXH3-128 of the file's first ``consumed`` bytes: a file whose first bytes differ was not
        appended to.
    emitted : set[str]
        uuids of the records handed to ``reader``.
    dangling : set[str]
        Parents named by records handed to ``reader`` in file order because no record before
        ``consumed`` has that uuid (:func:`_feed`).
    """

    reader: _Reader
    consumed: int
    next_line: int
    digest: bytes
    emitted: set[str]
    dangling: set[str]


@cache
def _fields_of(cls: type) -> Any:
    """A getter of all the fields of ``cls`` in order when :func:`~dp_compact._fast.maker` can make it, else None."""
    try:
        maker(cls)
    except TypeError:
        return None
    names = [f.name for f in fields(cls)]
    return attrgetter(*names) if len(names) > 1 else (lambda obj, get=attrgetter(names[0]): (get(obj),))


@cache
def _maker_of(cls: type) -> Any:
    """:func:`~dp_compact._fast.maker` of ``cls``, made once."""
    return maker(cls)


def _made(cls: type, values: tuple[Any, ...]) -> Any:
    """An instance of the frozen dataclass ``cls`` from its fields' values (unpickling, :func:`dumps`)."""
    return _maker_of(cls)(*values)


class _Pickler(pickle.Pickler):
    """A pickler that writes a frozen slotted dataclass (messages, records) as its fields' values:
    the dataclass's own pickling calls :func:`dataclasses.fields` per object, three times slower."""

    def reducer_override(self, obj: Any) -> Any:
        get = _fields_of(type(obj)) if hasattr(type(obj), "__dataclass_fields__") else None
        if get is None:
            return NotImplemented
        return _made, (type(obj), get(obj))


def dumps(state: TranscriptState) -> bytes:
    """``state`` pickled (:class:`_Pickler`); :func:`pickle.loads` reads it back."""
    out = io.BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(state)
    return out.getvalue()


def start_state(data: bytes) -> TranscriptState:
    """An empty state for a file whose bytes are ``data`` (its opening byte order mark skipped, as the reader skips it).

    Raises
    ------
    NotIncremental
        The file does not open with a JSON object on a line of its own.
    """
    start = len(UTF8_BOM) if data.startswith(UTF8_BOM) else 0
    first_end = data.find(b"\n", start)
    if first_end < 0:
        raise NotIncremental("no complete first line")
    try:
        first = orjson.loads(data[start:first_end])
    except orjson.JSONDecodeError as exc:
        raise NotIncremental("the first line is not JSON") from exc
    if not isinstance(first, dict):  # a JSONL file by its first line; which reader reads it, the caller checks once
        raise NotIncremental("the first line is not a JSON object")
    reader = _Reader(None)  # type: ignore[arg-type]
    reader.in_order = False  # the order is _feed's
    return TranscriptState(reader, start, 1, xxh3_128_digest(data[:start]), set(), set())


def _records(data: bytes, start: int, end: int, line: int) -> tuple[list[Record], int]:
    """The records of the lines of ``data[start:end]`` (each ending in a line break, or the last
    one without), numbered from ``line``, blank lines left out; and the number of the line after them."""
    records = []
    at = start
    while at < end:
        stop = data.find(b"\n", at, end)
        stop = end if stop < 0 else stop
        text = data[at:stop]
        if text.strip():
            try:
                records.append(Record(line, orjson.loads(text), len(text)))
            except orjson.JSONDecodeError as exc:
                raise NotIncremental(f"line {line} is not JSON") from exc
        at = stop + 1
        line += 1
    return records, line


def _feed(state: TranscriptState, records: list[Record]) -> None:
    """Hand ``records`` (the lines after those ``state`` read) to its reader in reading order.

    The order is :func:`dp_compact.sessions.claude_code._order`'s: file order, except that a record
    whose parent is a record further on follows that parent. Only the records given here are
    known, so a parent missing from them is taken never to come and kept in ``state.dangling``: a
    record with that uuid in a later call means the records before it were placed wrongly
    (:class:`NotIncremental`).
    """
    links = [(r.value.get("uuid"), r.value.get("parentUuid")) if type(r.value) is dict else (None, None) for r in records]
    last_at = {uuid: at for at, (uuid, _) in enumerate(links) if type(uuid) is str}
    emitted, dangling, reader = state.emitted, state.dangling, state.reader
    held: set[str] = set()
    waiting: dict[str, list[int]] = {}
    for at, (uuid, parent) in enumerate(links):
        if type(uuid) is str and uuid in dangling:
            raise NotIncremental(f"line {records[at].line}: a parent taken as missing came")
        if type(parent) is str and parent not in emitted:
            if parent in held or parent == uuid or last_at.get(parent, -1) > at:
                waiting.setdefault(parent, []).append(at)
                if type(uuid) is str:
                    held.add(uuid)
                continue
            dangling.add(parent)
        stack = [at]
        while stack:
            current = stack.pop()
            _record(reader, records[current])
            child = links[current][0]
            if type(child) is str:
                emitted.add(child)
                stack.extend(reversed(waiting.pop(child, [])))
    if waiting:
        raise NotIncremental("records wait for a parent that never came before them")


def _grown(state: TranscriptState, data: bytes, end: int) -> TranscriptState:
    """``state`` after the lines of ``data`` up to byte ``end`` (a line break, or the end of ``data``)."""
    if end > state.consumed:
        records, state.next_line = _records(data, state.consumed, end, state.next_line)
        _feed(state, records)
        state.consumed, state.digest = end, xxh3_128_digest(memoryview(data)[:end])
    return state


def appended_lines(data: bytes, consumed: int, line_at: Callable[[int], int]) -> tuple[int, bytes, int | None]:
    """What of ``data`` (a JSONL file's bytes, the first ``consumed`` read already) to read now:
    ``(end, tail, partial)``, ``end`` the end of its last whole line (at least ``consumed``),
    ``tail`` the text after it when that is whole JSON without its line break (read, not kept),
    else ``b""``, and ``partial`` the line number (``line_at(end)``) of a half-written last line,
    else None."""
    end = max(data.rfind(b"\n") + 1, consumed)
    tail, partial = data[end:], None
    if tail.strip():  # no line break after it: read when whole JSON, else left out as half-written
        try:
            orjson.loads(tail)
        except orjson.JSONDecodeError:
            partial, tail = line_at(end), b""
    else:
        tail = b""
    return end, tail, partial


def _line_after(state: TranscriptState, data: bytes, end: int) -> int:
    """1-based number of the line that starts at byte ``end`` of ``data`` (after ``state.consumed``)."""
    return state.next_line + data.count(b"\n", state.consumed, end)


def _record(reader: _Reader, record: Record) -> None:
    """One record to ``reader`` (which reads in the order it is given)."""
    try:
        reader.record(record)
    except ValueError as exc:
        raise NotIncremental(f"line {record.line} breaks the format") from exc


def read_grown(path: Path | str, data: bytes, state: TranscriptState | None) -> tuple[Session, bytes]:
    """The session of the transcript whose bytes are ``data``, read from where ``state`` stopped.

    Parameters
    ----------
    path : Path or str
        The transcript, as the session names it (``Session.path``).
    data : bytes
        The file's bytes now.
    state : TranscriptState or None
        The state kept from an earlier read of this file; None reads it whole.

    Returns
    -------
    (Session, bytes)
        The session (equal to :func:`~dp_compact.sessions.read_session` of the file), and the new
        state, pickled, to keep for the next read.

    Raises
    ------
    NotIncremental
        ``data`` does not start with the bytes ``state`` read, or the file needs the whole reader.
    """
    fresh = state is None
    if state is None:
        state = start_state(data)
    elif len(data) < state.consumed or xxh3_128_digest(memoryview(data)[: state.consumed]) != state.digest:
        raise NotIncremental("the file was rewritten, not appended to")
    end, tail, partial = appended_lines(data, state.consumed, lambda at: _line_after(state, data, at))
    with raw_as_json():
        if fresh and tail:  # kept: the complete lines alone; read: with the last line, ordered as one
            kept = dumps(_grown(start_state(data), data, end))
            state = _grown(state, data, len(data))
        else:
            kept = dumps(_grown(state, data, end))
            if tail:
                _feed(state, _records(data, end, len(data), state.next_line)[0])
        reader = state.reader
        reader.flush()
    messages = relink(reader.messages, reader.live_start)
    session = build_session(
        path=str(path), format=FORMAT, messages=messages, usage=list(reader.usage.values()), live_start=reader.live_start,
        compactions=reader.compactions, model=reader.model, skipped_lines=0, compaction_records=tuple(reader.records),
        markers=_with_summaries(reader.markers, messages), call_times=tuple(reader.times),
    )
    if partial is not None:
        session = replace(session, partial_line=partial)
    return session, kept
