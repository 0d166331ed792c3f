"""Reading a session file into JSON records, before its format is known (DESIGN §4).

A file is either JSONL (one record per line) or one JSON document, decided by content, not
by the file name: a ``.json`` file may be JSONL and a ``.jsonl`` file may be one document.

A UTF-8 byte order mark at the start of the file is skipped, for every format. Two kinds of
input are told apart before any line is parsed, so that the error says what the
file is rather than "line 1 is not valid JSON": compressed files (gzip, bzip2, xz, zstd, zip,
by their magic numbers) and binary data (a NUL byte in the first :data:`BINARY_SNIFF_BYTES`).

Agents append to their logs while we read them: a last line that is not valid JSON and has no
line break after it is an unfinished write, not damage. It is left out and its line number kept
in :attr:`Source.partial_line` (the commands print a note); a bad line anywhere else is a
:class:`~dp_compact.errors.MalformedLineError`.
"""

from __future__ import annotations

import contextlib
import json
import re
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, overload

import numpy as np
import orjson

from dp_compact._fast import maker
from dp_compact.errors import MalformedLineError, SessionError

__all__ = [
    "BINARY_SNIFF_BYTES", "NEAR_BYTES", "PIECE_BYTES", "SNIFF_RECORDS", "Records", "UTF8_BOM", "Record", "Source", "each_record", "partial_line_note", "repaired_lines_note", "skipped_lines_note", "loads_replacing_surrogates",
    "read_source",
]

#: Records (JSONL lines, or entries of a JSON array) a reader's ``sniff`` looks at: a format is
#: told from the start of a file, so telling it costs the same for any length; the reader then
#: checks every record against its format's rules (a record that breaks them is an error
#: naming its line).
SNIFF_RECORDS = 1_000
#: Bytes searched for a NUL to call a file binary (git's ``buffer_is_binary`` reads 8,000).
BINARY_SNIFF_BYTES = 8_000
#: Magic numbers of compressed files: (prefix, what it is, the command that undoes it).
_COMPRESSED = (
    (b"\x1f\x8b", "gzip-compressed", "gunzip"),
    (b"BZh", "bzip2-compressed", "bunzip2"),
    (b"\xfd7zXZ\x00", "xz-compressed", "unxz"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "unzstd"),
    (b"PK\x03\x04", "zip archive", "unzip"),
)
#: Byte order marks of UTF-16 text, which holds NUL bytes without being binary.
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
#: The UTF-8 byte order mark some Windows editors write first; read as nothing (``utf-8-sig``).
UTF8_BOM = b"\xef\xbb\xbf"
#: The first character of a file that is not white space, and what white space is.
_FIRST_VALUE = re.compile(rb"\S")
_WHITE_SPACE = b" \t\n\r\x0b\x0c"
#: A JSON string escape of a printable ASCII character (``\u0041`` for ``A``), and a string whose
#: every character is printable ASCII that JSON writes as itself (:meth:`Records.absent_after`).
_ESCAPED_ASCII = re.compile(rb"\\u00[2-7][0-9a-fA-F]")
_PLAIN_STRING = re.compile(r'[ !#-\[\]-~]*')


#: A UTF-16 surrogate code point, which in a parsed string is always a lone one (JSON.stringify
#: writes ``"\\ud83d"`` for half of a cut emoji; UTF-8 cannot encode it).
_SURROGATE = re.compile("[\ud800-\udfff]")
#: The character a lone surrogate becomes (Unicode's REPLACEMENT CHARACTER).
REPLACEMENT_CHARACTER = "\ufffd"


def _without_surrogates(value: Any) -> Any:
    """``value`` with every lone surrogate of its strings (keys included) replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub(REPLACEMENT_CHARACTER, value)
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    return value


def loads_replacing_surrogates(data: bytes | memoryview, error: orjson.JSONDecodeError) -> Any:
    """The JSON value of ``data`` that orjson refused for a lone surrogate escape (``"\\ud800"``),
    each lone surrogate replaced by U+FFFD; re-raises ``error`` when that was not the reason.

    >>> loads_replacing_surrogates(b'{"t": "a\\\\ud83d"}', orjson.JSONDecodeError("surrogate", "", 0))
    {'t': 'a\ufffd'}
    """
    if "surrogate" not in error.msg:
        raise error
    try:
        value = json.loads(bytes(data))
    except (ValueError, RecursionError):
        raise error from None
    return _without_surrogates(value)


def _key_value(key: str, value: bytes) -> re.Pattern[bytes]:
    """The pattern of ``"key": <value>`` as JSON spells an object's entry (``value`` a pattern of
    the value's spelling, quotes included), white space allowed around the colon."""
    return re.compile(b'"' + re.escape(key.encode()) + rb'"\s*:\s*' + value)


def is_plain_string(text: str) -> bool:
    """True when ``text`` is printable ASCII without quote or backslash: JSON spells it only as
    itself (or with ``\\u00XX`` escapes), so a search of the bytes for it quoted finds it.

    >>> is_plain_string("5c71e148-52db"), is_plain_string('say "hi"'), is_plain_string("caf\u00e9")
    (True, False, False)
    """
    return _PLAIN_STRING.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class Record:
    """One parsed JSONL line: its 1-based ``line``, the JSON ``value`` and the line's UTF-8 ``nbytes``."""

    line: int
    value: Any
    nbytes: int


#: ``Record(line, value, nbytes)`` without ``__init__``, for the one record made per line (dp_compact._fast).
_make_record = maker(Record)


class Records(Sequence[Record]):
    """The records of a JSONL file, parsed when read, not all at once.

    Knows where each non-blank line lies; iterating parses one line at a time, so a reader that
    keeps only what it needs from each record never holds every parsed record at once (a
    session of a million lines is read in the memory of its messages). Each pass parses again.

    A file larger than :data:`PIECE_BYTES` is not held whole: it is read a piece at a time (a
    piece ends at a line break), one piece held at once, and a piece passed is read again from
    the file when a reader goes back to it. Agents only append to their logs, so the bytes read
    again are the same; a piece that comes back shorter, or no longer ending where a line did,
    raises :class:`~dp_compact.errors.SessionError` (the file was rewritten while it was read).

    A line that is not valid JSON raises :class:`~dp_compact.errors.MalformedLineError`
    (``path:line``) when it is reached; with ``lenient`` it is skipped and its number kept in
    :attr:`bad_lines` (counted once however often it is read).
    """

    __slots__ = ("_whole", "_bounds", "_piece", "_spans", "_path", "_lenient", "_escape_at", "_plain_from", "bad_lines", "repaired_lines")

    def __init__(self, path: str, data: bytes | None, spans: array[int], lenient: bool, bounds: array[int] | None = None) -> None:
        """``data``: the file's bytes held whole; else ``bounds``: where each piece of the file
        starts, and the end of the last (byte offsets; ``spans`` are offsets in the file)."""
        self._whole, self._bounds, self._spans, self._path, self._lenient = data, bounds, spans, path, lenient
        self._piece: tuple[int, bytes] | None = None  # the piece last read: its number and bytes
        self._escape_at = -1  # the furthest escaped printable ASCII character found so far (-1: none found)
        self._plain_from: int | None = None  # from this byte on the file holds no such escape (None: not known)
        self.bad_lines: set[int] = set()
        self.repaired_lines: set[int] = set()  # lines whose lone surrogates became U+FFFD

    def __len__(self) -> int:
        """Non-blank lines (a malformed one included)."""
        return len(self._spans) // 3

    def _read_piece(self, number: int) -> bytes:
        """Piece ``number`` of a file not held whole, read from the file (see the class docstring)."""
        bounds = self._bounds
        assert bounds is not None
        start, end = bounds[number], bounds[number + 1]
        try:
            with open(self._path, "rb") as file:
                file.seek(start)
                data = file.read(end - start)
        except OSError as exc:
            raise SessionError(self._path, None, f"cannot read the file again: {exc.strerror or exc}") from exc
        if len(data) != end - start or (number + 2 < len(bounds) and not data.endswith(b"\n")):
            raise SessionError(self._path, None, "the file was rewritten while it was read (its earlier lines changed); read it again")
        return data

    def _holding(self, offset: int) -> tuple[int, bytes]:
        """The first byte offset and the bytes of the part of the file that holds ``offset``."""
        if self._whole is not None:
            return 0, self._whole
        bounds = self._bounds
        assert bounds is not None
        number = bisect_right(bounds, offset) - 1
        if self._piece is None or self._piece[0] != number:
            self._piece = (number, self._read_piece(number))
        return bounds[number], self._piece[1]

    def _parse(self, index: int) -> Record | None:
        """Record of the ``index``-th non-blank line; None for a malformed one when lenient."""
        spans = self._spans
        start, end, line = spans[3 * index], spans[3 * index + 1], spans[3 * index + 2]
        base, data = self._holding(start)
        text = memoryview(data)[start - base : end - base]
        try:
            return _make_record(line, orjson.loads(text), end - start)
        except orjson.JSONDecodeError as exc:
            with contextlib.suppress(orjson.JSONDecodeError):
                value = loads_replacing_surrogates(text, exc)
                self.repaired_lines.add(line)
                return _make_record(line, value, end - start)
            if not self._lenient:
                rule = f"line {line} is not valid JSON ({exc.msg} at column {exc.colno})"
                if index == 0 and data[start - base : end - base].lstrip()[:1] not in (b"{", b"["):  # not even an opening
                    rule += ": the file does not open as JSON, so it is not a session transcript (JSON or JSONL)"
                raise MalformedLineError(self._path, line, rule) from exc
            self.bad_lines.add(line)
            return None

    def _walk(self, records: bool) -> Iterator[Any]:
        """Each line in order, a piece read at a time, parsed: its :class:`Record` (``records``)
        or its value (:attr:`SKIPPED` for a malformed line skipped when lenient, which yields no
        record). One generator between the bytes and the reader: a file may have a million lines."""
        spans, loads = self._spans, orjson.loads
        at, total = 0, len(spans)
        while at < total:
            base, data = self._holding(spans[at])
            view, limit = memoryview(data), base + len(data)
            if spans[at + 1] > limit:  # a piece holds whole lines (_read_piece checks it came back whole)
                raise SessionError(self._path, spans[at + 2], "the file was rewritten while it was read; read it again")
            while at < total and (end := spans[at + 1]) <= limit:
                start = spans[at]
                try:
                    value = loads(view[start - base : end - base])
                except orjson.JSONDecodeError:
                    record = self._parse(at // 3)  # raises, or counts the line
                    if record is not None:
                        yield record if records else record.value
                    elif not records:
                        yield self.SKIPPED
                else:
                    yield _make_record(spans[at + 2], value, end - start) if records else value
                at += 3

    #: What :meth:`values` gives for a malformed line skipped when lenient.
    SKIPPED: Any = object()

    def values(self) -> Iterator[Any]:
        """The JSON value of each line by position (``self[i].value``), :attr:`SKIPPED` for a
        malformed line skipped when lenient; no :class:`Record` is made."""
        return self._walk(False)

    def __iter__(self) -> Iterator[Record]:
        return self._walk(True)

    def _parts_after(self, offset: int) -> Iterator[tuple[int, bytes]]:
        """``(first offset, bytes)`` of the parts of the file from the one holding ``offset`` to the end."""
        if self._whole is not None:
            yield 0, self._whole
            return
        bounds = self._bounds
        assert bounds is not None
        for number in range(max(bisect_right(bounds, offset) - 1, 0), len(bounds) - 1):
            yield self._holding(bounds[number])

    def absent_after(self, line: int, text: str) -> bool:
        """True when no JSON string after line ``line`` of the file can be ``text``: its plain
        spelling, quoted, is not found in the bytes that follow, and it could not be spelled
        otherwise (``text`` is printable ASCII without quote or backslash, and no ``\\u00XX``
        escape of a printable ASCII character follows). False when unsure: a reader that asks
        takes the longer way.
        """
        if not is_plain_string(text):
            return False
        quoted = b'"' + text.encode() + b'"'  # a quoted string holds no line break: none spans two pieces
        for data, start in self._plain_parts_after(self._end_of(line)):
            if data is None or data.find(quoted, start) >= 0:
                return False
        return True

    def spelled_soon(self, line: int, key: str, text: str) -> bool:
        """True when ``"key": "text"`` is spelled in the :data:`NEAR_BYTES` bytes after line ``line``
        (white space allowed around the colon); False when it is not there, which does not say it
        is nowhere further on. Both must be plain (:func:`is_plain_string`), else False. Only the part of the
        file that holds those bytes is searched: the one being read, as a rule.
        """
        if not (is_plain_string(key) and is_plain_string(text)):
            return False
        end = self._end_of(line)
        if self._bounds is not None and end >= self._bounds[-1]:
            return False
        base, data = self._holding(end)
        start = end - base
        pattern = _key_value(key, b'"' + re.escape(text.encode()) + b'"')
        return pattern.search(data, start, min(len(data), start + NEAR_BYTES)) is not None

    def plain_values_after(self, line: int, key: str) -> set[str] | None:
        """The plain string values (:func:`is_plain_string`) of every ``key`` of a JSON object after
        line ``line`` of the file, nested ones included: each ``"key": "value"`` spelled in the bytes
        that follow (a value that is not plain is left out). None when unsure: ``key`` is not
        plain, or a ``\\u00XX`` escape of a printable ASCII character follows (a key or value may
        be spelled otherwise). One search of the rest of the file.
        """
        if not is_plain_string(key):
            return None
        pattern = _key_value(key, rb'"([ !#-\[\]-~]*)"')
        found: set[str] = set()
        for data, start in self._plain_parts_after(self._end_of(line)):
            if data is None:
                return None
            found.update(m.group(1).decode() for m in pattern.finditer(data, start))
        return found

    def _end_of(self, line: int) -> int:
        """The byte offset where line ``line`` ends (its last byte + 1; 0 before the first line)."""
        spans = self._spans
        lines = np.frombuffer(spans, dtype=np.int64)[2::3]
        at = int(np.searchsorted(lines, line, side="right"))
        return spans[3 * at - 2] if at else 0

    def _plain_parts_after(self, end: int) -> Iterator[tuple[bytes | None, int]]:
        """``(bytes, where byte end is in them)`` of each part of the file from byte ``end`` on, read
        once, while checking that no ``\\u00XX`` escape of a printable ASCII character lies there:
        ``(None, 0)`` ends the parts when one does (what is learnt is kept for the next call)."""
        if self._escape_at >= end:
            yield None, 0
            return
        known_plain = self._plain_from is not None and self._plain_from <= end
        for base, data in self._parts_after(end):
            start = max(end - base, 0)
            if not known_plain and (found := _ESCAPED_ASCII.search(data, start)) is not None:
                self._escape_at = max(self._escape_at, base + found.start())
                yield None, 0
                return
            yield data, start
        if not known_plain:
            self._plain_from = end

    @overload
    def __getitem__(self, index: int) -> Record: ...

    @overload
    def __getitem__(self, index: slice) -> list[Record]: ...

    def __getitem__(self, index: int | slice) -> Record | list[Record]:
        """One record by position (IndexError if that line is malformed and skipped), or the parsed
        records of a slice (malformed lines left out when lenient)."""
        if isinstance(index, slice):
            found = (self._parse(i) for i in range(*index.indices(len(self))))
            return [r for r in found if r is not None]
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError(index)
        record = self._parse(position)
        if record is None:
            raise IndexError(f"line {self._spans[3 * position + 2]} is malformed and skipped")
        return record


@dataclass(frozen=True, slots=True)
class Source:
    """A parsed session file.

    Exactly one of ``records`` (JSONL) and ``document`` (one JSON value) is set, except for an
    empty file, where ``records`` is empty. :attr:`skipped` counts lines dropped as not JSON
    with ``lenient=True``; ``nbytes`` is the file size. ``lenient`` tells the readers to skip
    records that break their format's rules too (counting them) instead of failing.
    ``partial_line`` is the 1-based number of a half-written last line left out (module
    docstring), else None; it is not counted in :attr:`skipped`. ``rejected`` holds the lines
    whose records a reader skipped (lenient) as breaking its format's rules (:func:`each_record`).
    """

    path: str
    records: Sequence[Record] | None
    document: Any = None
    nbytes: int = 0
    lenient: bool = False
    partial_line: int | None = None
    rejected: set[int] = field(default_factory=set, compare=False)
    document_repaired: set[int] = field(default_factory=set, compare=False)
    _sample: list[Record] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def is_document(self) -> bool:
        """True when the file is a single JSON document rather than JSONL."""
        return self.records is None

    @property
    def sample(self) -> Sequence[Record]:
        """The first :data:`SNIFF_RECORDS` records, which a reader's ``sniff`` looks at (empty for a
        document); parsed once, when first asked for, however many readers look."""
        if self._sample is None:
            object.__setattr__(self, "_sample", list((self.records or ())[:SNIFF_RECORDS]))
        return self._sample  # type: ignore[return-value]

    @property
    def skipped(self) -> int:
        """Lines skipped so far as not JSON (lenient): found when the :class:`Records` were read."""
        return len(getattr(self.records, "bad_lines", ()))

    def repaired_line_numbers(self) -> tuple[int, ...]:
        """1-based numbers of the lines read so far whose lone surrogate escapes became U+FFFD (a
        document: line 1), in order (:func:`repaired_lines_note`)."""
        return tuple(sorted(set(getattr(self.records, "repaired_lines", ())) | self.document_repaired))

    def skipped_line_numbers(self) -> tuple[int, ...]:
        """1-based numbers of the lines skipped so far (lenient), as not JSON or rejected by the reader, in order."""
        return tuple(sorted(set(getattr(self.records, "bad_lines", ())) | self.rejected))


class _BrokenDocument(Exception):
    """A file that is one JSON document (spread over lines) and is not valid JSON past its first line."""

    def __init__(self, error: orjson.JSONDecodeError) -> None:
        super().__init__(error.msg)
        self.error = error


def _whole_value(text: bytes, start: int) -> bool:
    """True when the first non-blank line at or after ``start`` is a whole JSON value by itself."""
    first = _FIRST_VALUE.search(text, start)
    if first is None:
        return False
    end = text.find(b"\n", first.start())
    try:
        orjson.loads(memoryview(text)[first.start() : len(text) if end < 0 else end])
    except orjson.JSONDecodeError:
        return False
    return True


def _jsonl_by_first_line(text: bytes) -> bool:
    """True when ``text`` is JSONL by its first line alone: its first value does not open a
    document, or its first line is a whole JSON value followed by more text (the whole cannot
    be one value then)."""
    first = _FIRST_VALUE.search(text)
    if first is None:
        return False
    if first.group() not in (b"{", b"["):
        return True
    end = text.find(b"\n", first.start())
    return end >= 0 and _FIRST_VALUE.search(text, end) is not None and _whole_value(text, first.start())


def _as_document(text: bytes) -> tuple[Any | None, bool]:
    """The whole file as one JSON value, or None when it is not one (or is a one-line record), and
    whether lone surrogates were replaced in it.

    A file that is JSONL by its first line (:func:`_jsonl_by_first_line`) is not parsed whole
    here. Raises :class:`_BrokenDocument` when the text opens a document whose first two lines
    are no records by themselves (a pretty-printed file) and it is not valid JSON past its first
    line: the error is where the parser stopped, not at line 1.
    """
    first = _FIRST_VALUE.search(text)  # no copy of the file, as strip() would make
    if first is None or _jsonl_by_first_line(text):
        return None, False
    start = first.start()
    line_end = text.find(b"\n", start)
    try:
        repaired = False
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            value, repaired = loads_replacing_surrogates(text, exc), True
    except orjson.JSONDecodeError as exc:
        if line_end >= 0 and exc.lineno > text.count(b"\n", 0, start) + 1 and not _whole_value(text, line_end + 1):
            raise _BrokenDocument(exc) from exc  # neither its first nor its second line is a record: a document
        return None, False
    end = len(text)
    while end > start and text[end - 1] in _WHITE_SPACE:
        end -= 1
    if isinstance(value, dict) and text.find(b"\n", start, end) < 0:
        return None, False  # a JSONL file of one record
    return value, repaired


#: Bytes after a line that :meth:`Records.spelled_soon` searches. A Claude Code record written
#: before its parent (a tool result before its call) is a few lines before it, as a rule: a search
#: of the bytes just after it finds the parent without a search of the rest of the file.
NEAR_BYTES = 1 << 18
#: Bytes of a JSONL file read at once: a larger file is read and held a piece of about this
#: size at a time (:class:`Records`), so that reading it holds its messages, not its text.
PIECE_BYTES = 1 << 22
#: Bytes of the file looked at at once for line breaks (:func:`_line_spans`): bounds the
#: temporary arrays, whatever the file's size.
_SCAN_BYTES = 1 << 22
_IS_WHITE = np.zeros(256, dtype=bool)
_IS_WHITE[list(_WHITE_SPACE)] = True


def _line_spans(data: bytes, limit: int | None = None, offset: int = 0, first_line: int = 1) -> tuple[array[int], int]:
    """Where each non-blank line of ``data[:limit]`` lies: ``start, end, line`` (byte offsets
    plus ``offset``, the end excluded; 1-based line number counted from ``first_line``) for
    each, flat, in order, and how many line breaks there are. No line is copied.

    Lines end at ``b"\\n"``; a line is blank when it holds white space only. Line breaks are
    found :data:`_SCAN_BYTES` at a time with numpy; a line whose first byte is white space is
    searched for a value on its own.
    """
    size = len(data) if limit is None else limit
    view = np.frombuffer(data, dtype=np.uint8, count=size)
    breaks = [np.flatnonzero(view[at : at + _SCAN_BYTES] == 10) + at for at in range(0, size, _SCAN_BYTES)]
    ends = np.concatenate([*breaks, np.array([size])]).astype(np.int64)
    starts = np.concatenate([np.zeros(1, dtype=np.int64), ends[:-1] + 1])
    full = ends > starts
    first = view[np.minimum(starts, max(size - 1, 0))] if size else np.zeros(len(starts), dtype=np.uint8)
    keep = full & ~_IS_WHITE[first]
    for i in np.flatnonzero(full & _IS_WHITE[first]).tolist():  # opens with white space: a value further on?
        keep[i] = _FIRST_VALUE.search(data, int(starts[i]), int(ends[i])) is not None
    kept = np.flatnonzero(keep)
    table = np.empty((len(kept), 3), dtype=np.int64)
    table[:, 0], table[:, 1], table[:, 2] = starts[kept] + offset, ends[kept] + offset, kept + first_line
    spans: array[int] = array("q")
    spans.frombytes(table.tobytes())
    return spans, len(ends) - 1


def _read_in_pieces(file: Any, head: bytes, start: int) -> tuple[array[int], array[int], bytes, int]:
    """Line spans of a JSONL file read a piece at a time (:class:`Records`), ``head`` its first
    bytes and ``start`` where its text starts (after a byte order mark).

    Returns the spans, where each piece starts (and the end of the last), the last piece's bytes
    and the file's size as read.
    """
    spans: array[int] = array("q")
    bounds: array[int] = array("q", [start])
    carry, base, line = head[start:], start, 1
    while True:
        more = file.read(PIECE_BYTES)
        data = carry + more if more else carry
        cut = data.rfind(b"\n") + 1 if more else len(data)
        if more and cut == 0:  # one line longer than a piece: it makes a longer piece
            carry = data
            continue
        found, breaks = _line_spans(data, cut, base, line)
        spans.extend(found)
        if cut:
            bounds.append(base + cut)
        if not more:
            return spans, bounds, data, base + len(data)
        carry, base, line = data[cut:], base + cut, line + breaks


def _check_not_binary(path: Path | str, data: bytes) -> None:
    """Raise SessionError naming what the file is when it is compressed or binary (module docstring)."""
    for magic, what, command in _COMPRESSED:
        if data.startswith(magic):
            raise SessionError(path, None, f"this is a {what} file; decompress it first ({command})")
    head = data[:BINARY_SNIFF_BYTES]
    if head.startswith(_UTF16_BOMS):
        raise SessionError(path, None, "UTF-16 text, not UTF-8; convert it first (iconv -f UTF-16 -t UTF-8)")
    if b"\x00" in head:
        raise SessionError(path, None, "binary data, not a JSON/JSONL transcript")


_Item = TypeVar("_Item")


def each_record(
    source: Source, items: Iterable[_Item], handle: Callable[[_Item], object], *, label: str = "message", first: int = 0
) -> int:
    """Hand each item of a session to its reader, the one malformed-record rule of every format.

    Parameters
    ----------
    source : Source
        The file the items come from (its path, and whether it is read ``lenient``).
    items : iterable
        :class:`Record` lines of a JSONL file, or the entries of a JSON document.
    handle : callable
        The reader's step; a ``ValueError`` it raises means the item breaks the format's rules.
    label, first : str, int
        How an item without a source line is named in the error (``"message 3: ..."``,
        ``"step 1: ..."``): the label and the number of the first item.

    Returns
    -------
    int
        Items skipped (lenient only); the lines of those that have one are added to ``source.rejected``.

    Raises
    ------
    MalformedLineError
        Without ``lenient``, for the first item ``handle`` rejects: ``path:line: why``, or
        ``path: <label> <n>: why`` for an item that has no line.
    """
    skipped = 0
    for index, item in enumerate(items, first):
        try:
            handle(item)
        except ValueError as exc:
            line = getattr(item, "line", 0) or None
            if not source.lenient:
                where = "" if line else f"{label} {index}: "
                raise MalformedLineError(source.path, line, where + str(exc)) from exc
            skipped += 1
            if line:
                source.rejected.add(line)
    return skipped


def repaired_lines_note(lines: Sequence[int]) -> str:
    """What a command says of lines whose lone surrogate escapes were replaced by U+FFFD.

    >>> repaired_lines_note([3])
    'line 3: lone UTF-16 surrogate escape(s) (half of a cut emoji) replaced by U+FFFD'
    """
    shown = ", ".join(map(str, lines[:SKIPPED_LINES_SHOWN])) + (f" and {len(lines) - SKIPPED_LINES_SHOWN} more" if len(lines) > SKIPPED_LINES_SHOWN else "")
    return f"line{'s' if len(lines) > 1 else ''} {shown}: lone UTF-16 surrogate escape(s) (half of a cut emoji) replaced by U+FFFD"


def partial_line_note(path: str, line: int) -> str:
    """The note a command prints for a half-written last line it left out (``path:line: ...``)."""
    return f"{path}:{line}: half-written last line left out (no line break after it: the agent is still writing it)"


#: Line numbers a :func:`skipped_lines_note` lists before it says how many more there are.
SKIPPED_LINES_SHOWN = 10


def skipped_lines_note(count: int, lines: Sequence[int]) -> str:
    """What a command says of the ``count`` malformed lines ``--lenient`` skipped, naming the first
    :data:`SKIPPED_LINES_SHOWN` of their 1-based ``lines`` (fewer than ``count``: a JSON document's
    entries have no line).

    >>> skipped_lines_note(2, [5, 9]), skipped_lines_note(1, [])
    ('skipped 2 malformed line(s) (--lenient): lines 5, 9', 'skipped 1 malformed line(s) (--lenient)')
    >>> skipped_lines_note(12, range(1, 13))
    'skipped 12 malformed line(s) (--lenient): lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 2 more'
    """
    shown = ", ".join(map(str, lines[:SKIPPED_LINES_SHOWN]))
    more = f" and {len(lines) - SKIPPED_LINES_SHOWN} more" if len(lines) > SKIPPED_LINES_SHOWN else ""
    return f"skipped {count} malformed line(s) (--lenient)" + (f": line{'s' if len(lines) > 1 else ''} {shown}{more}" if shown else "")


def read_source(path: Path | str, *, lenient: bool = False, partial_last_line: bool = True) -> Source:
    """Read ``path`` as JSONL or as one JSON document.

    Parameters
    ----------
    path : Path or str
        The session file; it is only read, never modified.
    lenient : bool
        Skip malformed JSONL lines (counted in ``Source.skipped`` as they are read) instead of failing.
    partial_last_line : bool
        Leave out a last line that is not valid JSON and has no line break after it (an agent
        still appending; its number goes to ``Source.partial_line``). False treats it as any
        other malformed line (a file that should be complete, such as one we wrote).

    Returns
    -------
    Source
        A UTF-8 byte order mark opening the file is left out of its first record.

    Raises
    ------
    SessionError
        If the file cannot be read, or is compressed (names the format and the command that
        decompresses it), UTF-16 text or binary data.

    The lines are parsed when the records are read (:class:`Records`): a line that is not
    valid JSON raises :class:`~dp_compact.errors.MalformedLineError` (``path:line``) then,
    unless ``lenient``.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     live = pathlib.Path(folder) / "live.jsonl"
    ...     _ = live.write_bytes(b'{"role": "user", "content": "hi"}\\n{"role": "assi')
    ...     source = read_source(live)
    >>> len(source.records), source.partial_line
    (1, 2)
    """
    bounds: array[int] | None = None
    try:
        with open(path, "rb") as file:
            head = max(PIECE_BYTES, BINARY_SNIFF_BYTES)
            data = file.read(head)
            _check_not_binary(path, data)
            start = len(UTF8_BOM) if data.startswith(UTF8_BOM) else 0
            if len(data) == head and _jsonl_by_first_line(data[start:]):
                spans, bounds, data, size = _read_in_pieces(file, data, start)
                base = bounds[-1] - len(data)  # where the last piece starts: data is its bytes
            else:
                data += file.read()
    except IsADirectoryError as exc:
        empty = " (an empty path is the current folder: did the command that finds the transcript find none?)" if str(path) == "." else ""
        raise SessionError(path, None, f"a folder, not a session file: give one file here (replay and calibrate read folders){empty}") from exc
    except OSError as exc:
        raise SessionError(path, None, f"cannot read the file: {exc.strerror or exc}") from exc
    if bounds is None:
        size = len(data)
        data = data.removeprefix(UTF8_BOM)
        try:
            document, repaired = _as_document(data)
        except _BrokenDocument as broken:
            error = broken.error
            raise MalformedLineError(path, error.lineno, (
                f"not valid JSON ({error.msg} at line {error.lineno} column {error.colno}): the file is one JSON document"
                " and is cut off or damaged there")) from error
        if document is not None:
            return Source(str(path), None, document, nbytes=size, lenient=lenient, document_repaired={1} if repaired else set())
        spans, base = _line_spans(data)[0], 0  # offsets in data, after a byte order mark
    partial: int | None = None
    if partial_last_line and spans and spans[-2] - base == len(data) and not data.endswith(b"\n"):
        try:  # no b"\n" after the last line: still being written if it is not whole JSON
            orjson.loads(memoryview(data)[spans[-3] - base : spans[-2] - base])
        except orjson.JSONDecodeError:
            partial = spans[-1]
            del spans[-3:]
    records = Records(str(path), data if bounds is None else None, spans, lenient, bounds)
    return Source(str(path), records, None, nbytes=size, lenient=lenient, partial_line=partial)
