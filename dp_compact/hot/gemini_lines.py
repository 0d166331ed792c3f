"""Gemini CLI stream-json logs read once and then only where they grew (:mod:`dp_compact.hot.common_lines`).

The Gemini CLI reader (:mod:`dp_compact.sessions.gemini_cli`) reads a ``--output-format
stream-json`` log (one event a line) in one pass over its events in file order. Its state after
the file's complete lines is kept (:class:`GeminiState`), its open assistant message and tool
results not emitted, and a file that grew by an append is read from where that state stopped.
The session made is the one :func:`dp_compact.sessions.read_session` makes of the whole file
with ``raw_json=True``. Handled as :mod:`dp_compact.hot.lines` handles Anthropic messages files
(blank lines, a byte order mark, repaired lone surrogates, a half-written last line, a last line
without a line break). A saved chat (one ``{sessionId, messages}`` document) is read whole each time.

Raises NotIncremental: the file is not an append of what the state read; its first line is not a
JSON object (a document); a line is not JSON or breaks the reader's rules (a whole read raises
the error); the whole file would be read as another format (a Claude Code record or a Codex
envelope among the first :data:`~dp_compact.sessions.source.SNIFF_RECORDS` records, or no stream
event, an ``init`` or a tool event, among them yet); a NUL byte among the first
:data:`~dp_compact.sessions.source.BINARY_SNIFF_BYTES` bytes.
"""

from __future__ import annotations

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
)
from dp_compact.hot.transcript import NotIncremental
from dp_compact.sessions import gemini_cli
from dp_compact.sessions.claude_code import _is_message_record
from dp_compact.sessions.common import build_session, relink
from dp_compact.sessions.source import SNIFF_RECORDS, Record

__all__ = ["GeminiState", "read_grown_gemini"]

#: Attributes of the stream reader kept in chunks rather than with its other values.
_STREAM_APART = frozenset({"messages", "times"})


class GeminiState(_State):
    """The Gemini CLI stream reader's state after the first ``consumed`` bytes of a log (:class:`~dp_compact.hot.common_lines._State`).

    ``reader`` is a :class:`dp_compact.sessions.gemini_cli._Stream` after every complete line,
    its open assistant message and tool results not emitted (:meth:`~dp_compact.sessions.gemini_cli._Stream.flush`
    is called on a copy); ``stream_seen`` is True once a stream event (an ``init`` with a session
    id, a ``tool_use`` or ``tool_result`` with a tool id) is among the first
    :data:`~dp_compact.sessions.source.SNIFF_RECORDS` records.

    Pickled as :class:`~dp_compact.hot.lines.LinesState` is; changed in place by a read.
    """

    __slots__ = ("stream_seen",)

    def __init__(self, reader: gemini_cli._Stream, consumed: int, next_line: int, digest: bytes) -> None:
        super().__init__(reader, consumed, next_line, digest)
        self.stream_seen = False

    def __reduce__(self) -> tuple[Any, ...]:
        stream = self.reader
        chunks = _sealed(self.chunks, stream.messages, [], stream.times)
        values = {k: v for k, v in vars(stream).items() if k not in _STREAM_APART}
        return _restored_gemini, (_LAYOUT, self._common(), self.stream_seen, values, chunks)


def _restored_gemini(layout: Any, common: tuple[Any, ...], seen: bool, values: dict[str, Any], chunks: list[Chunk]) -> GeminiState:
    """The :class:`GeminiState` that :meth:`GeminiState.__reduce__` wrote (ValueError: another layout)."""
    stream = gemini_cli._Stream()
    vars(stream).update(values)
    stream.messages, _, stream.times = _unsealed(layout, chunks)
    state = GeminiState(stream, 0, 0, b"")
    state._set_common(common, chunks)
    state.stream_seen = seen
    return state


def _read_gemini(state: GeminiState, records: list[Record]) -> None:
    """``records`` (the lines after those ``state`` read) handed to its reader.

    Raises NotIncremental for a record that breaks the reader's rules, or a Claude Code record or
    Codex envelope among the first :data:`~dp_compact.sessions.source.SNIFF_RECORDS` (the file
    reads as that format).
    """
    stream, index, seen = state.reader, state.records, state.stream_seen
    for record in records:
        value = record.value
        if index < SNIFF_RECORDS:
            if _is_message_record(value) or _is_codex_envelope(value):
                raise NotIncremental(f"line {record.line} makes the file another format")
            seen = seen or gemini_cli._is_stream_event(value)
        index += 1
        try:
            stream.event(value, record.line, record.nbytes)
        except ValueError as exc:
            raise NotIncremental(f"line {record.line} breaks the format") from exc
    state.records, state.stream_seen = index, seen


def _gemini_session(path: str) -> Callable[[GeminiState], Session]:
    """The session of a (forked) stream state's events, its open messages emitted, named ``path``:
    what :func:`dp_compact.sessions.gemini_cli.read` makes of the same events."""

    def session_of(work: GeminiState) -> Session:
        if not work.stream_seen:
            raise NotIncremental("no stream event among the first records")
        stream = work.reader
        stream.flush()
        return build_session(
            path=path, format=gemini_cli.FORMAT, messages=relink(stream.messages, stream.live_start), live_start=stream.live_start,
            compactions=stream.compactions, model=stream.model, skipped_lines=0,
            conversation_start=stream.conversation_start, call_times=tuple(stream.times),
        )

    return session_of


def read_grown_gemini(path: Path | str, data: bytes, state: GeminiState | None) -> tuple[Session, bytes]:
    """The session of the Gemini CLI stream-json log whose bytes are ``data``, read from where ``state`` stopped.

    Parameters, returns and errors as :func:`dp_compact.hot.lines.read_grown` (``state`` a
    :class:`GeminiState`; NotIncremental also as the module docstring says).
    """
    return _grown_as(GeminiState, gemini_cli._Stream, "a Gemini CLI stream-json log", path, data, state, _read_gemini,
                     _gemini_session(str(path)))
