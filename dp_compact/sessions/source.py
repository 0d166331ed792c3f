"""Reading a session file into JSON records, before its format is known (DESIGN §4).

A file is either JSONL (one record per line) or one JSON document, decided by content, not
by the file name: a ``.json`` file may be JSONL and a ``.jsonl`` file may be one document.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from dp_compact.errors import MalformedLineError, SessionError

__all__ = ["Record", "Source", "read_source"]


@dataclass(frozen=True, slots=True)
class Record:
    """One parsed JSONL line: its 1-based ``line``, the JSON ``value`` and the line's UTF-8 ``nbytes``."""

    line: int
    value: Any
    nbytes: int


@dataclass(frozen=True, slots=True)
class Source:
    """A parsed session file.

    Exactly one of ``records`` (JSONL) and ``document`` (one JSON value) is set, except for an
    empty file, where ``records`` is empty. ``skipped_lines`` counts lines dropped as malformed
    with ``lenient=True``; ``nbytes`` is the file size. ``lenient`` tells the readers to skip
    records that break their format's rules too (counting them) instead of failing.
    """

    path: str
    records: tuple[Record, ...] | None
    document: Any = None
    nbytes: int = 0
    skipped_lines: int = 0
    lenient: bool = False

    @property
    def is_document(self) -> bool:
        """True when the file is a single JSON document rather than JSONL."""
        return self.records is None


def _as_document(text: bytes) -> Any | None:
    """The whole file as one JSON value, or None when it is not one (or is a one-line record)."""
    stripped = text.strip()
    if not stripped or stripped[:1] not in (b"{", b"["):
        return None
    try:
        value = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return None
    if isinstance(value, dict) and b"\n" not in stripped:
        return None  # a JSONL file of one record
    return value


def read_source(path: Path | str, *, lenient: bool = False) -> Source:
    """Read ``path`` as JSONL or as one JSON document.

    Parameters
    ----------
    path : Path or str
        The session file; it is only read, never modified.
    lenient : bool
        Skip malformed JSONL lines (counted in ``skipped_lines``) instead of failing.

    Returns
    -------
    Source

    Raises
    ------
    SessionError
        If the file cannot be read.
    MalformedLineError
        If a line is not valid JSON (``path:line``), unless ``lenient``.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SessionError(path, None, f"cannot read the file: {exc.strerror or exc}") from exc
    document = _as_document(data)
    if document is not None:
        return Source(str(path), None, document, nbytes=len(data), lenient=lenient)
    records: list[Record] = []
    skipped = 0
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            if lenient:
                skipped += 1
                continue
            raise MalformedLineError(path, number, f"line {number} is not valid JSON ({exc})") from exc
        records.append(Record(number, value, len(raw)))
    return Source(str(path), tuple(records), None, nbytes=len(data), skipped_lines=skipped, lenient=lenient)
