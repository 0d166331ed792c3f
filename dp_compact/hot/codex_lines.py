"""Codex rollouts read once and then only where they grew (:mod:`dp_compact.hot.common_lines`).

The Codex rollout reader (:mod:`dp_compact.sessions.codex`) is one pass over the file's records
in file order. Its state after the file's complete lines is kept (:class:`CodexState`), its open
response not emitted, and a file that grew by an append is read from where that state stopped.
The session made is the one :func:`dp_compact.sessions.read_session` makes of the whole file
with ``raw_json=True``. Handled as :mod:`dp_compact.hot.lines` handles Anthropic messages files
(blank lines, a byte order mark, repaired lone surrogates, a half-written last line, a last line
without a line break).

Raises NotIncremental: the file is not an append of what the state read; its first line is not a
JSON object; a line is not JSON or breaks the reader's rules (a whole read raises the error); the
whole file would be read as another format (a Claude Code record among the first
:data:`~dp_compact.sessions.source.SNIFF_RECORDS` records, or no Codex envelope among them yet); a
NUL byte among the first :data:`~dp_compact.sessions.source.BINARY_SNIFF_BYTES` bytes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any


from dp_compact.conversation import Session
from dp_compact.hot.common_lines import (
    _LAYOUT,
    Chunk,
    _grown_as,
    _is_codex_envelope,
    _sealed,
    _State,
    _unsealed,
    _with_copied_lists,
)
from dp_compact.hot.transcript import NotIncremental
from dp_compact.sessions import codex
from dp_compact.sessions.claude_code import _is_message_record
from dp_compact.sessions.source import SNIFF_RECORDS, Record

__all__ = ["CodexState", "read_grown_codex"]


#: Attributes of the Codex reader that are not pickled with its other values: the source, the line
#: being read, and the lists kept in chunks.
_CODEX_APART = frozenset({"source", "envelope", "messages", "times", "counts"})


class CodexState(_State):
    """The Codex reader's state after the first ``consumed`` bytes of a rollout (:class:`_State`).

    ``reader`` is a :class:`dp_compact.sessions.codex._Reader` after every complete line, its
    open response not emitted (:meth:`~dp_compact.sessions.codex._Reader.flush` is called on a
    copy); ``codex_seen`` is True once a Codex envelope is among the first
    :data:`~dp_compact.sessions.source.SNIFF_RECORDS` records.

    Pickled as :class:`~dp_compact.hot.lines.LinesState` is; changed in place by a read.
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

    def _fork_reader(self, reader: codex._Reader) -> codex._Reader:
        """A copy of ``reader`` that reads on without changing it, its token counts too."""
        twin = _with_copied_lists(reader)
        twin.counts = copy.copy(reader.counts)
        twin.counts.usage = list(reader.counts.usage)
        return twin


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
            seen = seen or _is_codex_envelope(value)
        index += 1
        try:
            reader.record(value, record.line, record.nbytes)
        except ValueError as exc:
            raise NotIncremental(f"line {record.line} breaks the format") from exc
    state.records, state.codex_seen = index, seen


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

    Parameters, returns and errors as :func:`dp_compact.hot.lines.read_grown` (``state`` a
    :class:`CodexState`; NotIncremental also as the module docstring says).
    """
    return _grown_as(CodexState, lambda: codex._Reader(None), "a Codex rollout", path, data, state, _read_codex,  # type: ignore[arg-type]
                     _codex_session(str(path)))
