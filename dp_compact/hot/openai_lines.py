"""OpenAI chat-completions JSONL read once and then only where it grew (:mod:`dp_compact.hot.common_lines`).

The OpenAI chat reader (:mod:`dp_compact.sessions.openai_chat`) reads a JSONL file (one
``{role, content | tool_calls}`` message a line, as tau-bench and the regression cases write
it) in one pass over its messages in file order: its
:class:`~dp_compact.sessions.openai_chat.LiveReader` after the file's complete lines is kept
(:class:`ChatState`), and a file that grew by an append is read from where it stopped. The
session made is the one :func:`dp_compact.sessions.read_session` makes of the whole file with
``raw_json=True``. Handled as :mod:`dp_compact.hot.lines` handles Anthropic messages files (blank
lines, a byte order mark, repaired lone surrogates, a half-written last line, a last line without
a line break). A ``{messages: [...]}``, SWE-agent or mini-swe-agent document is one JSON value:
read whole each time.

Raises NotIncremental: the file is not an append of what the state read; its first line is not a
JSON object (a document); a line is not JSON or not an OpenAI chat message, or breaks the
reader's rules (a whole read raises the error); the whole file would be read as another format
(:func:`dp_compact.sessions.read_session` tells it from the first
:data:`~dp_compact.sessions.source.SNIFF_RECORDS` records: a Claude Code record, a Codex envelope,
a Gemini CLI stream event or an Anthropic ``tool_use``/``tool_result`` block among them, or every
one of them a Cline UI entry; and from the whole file: no message with an OpenAI-only role or
key yet, when it reads as Anthropic messages); a NUL byte among the first
:data:`~dp_compact.sessions.source.BINARY_SNIFF_BYTES` bytes.

The kept session is assembled from every message at each read
(:meth:`~dp_compact.sessions.openai_chat.LiveReader.session`): its per-message work is not
repeated, but a file without tool calls has its messages' text searched for action marks
(mini-swe-agent's fenced commands) each time.
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
    _with_copied_lists,
)
from dp_compact.hot.transcript import NotIncremental
from dp_compact.sessions import cline_ui, gemini_cli, openai_chat
from dp_compact.sessions.claude_code import _is_message_record
from dp_compact.sessions.source import SNIFF_RECORDS, Record

__all__ = ["ChatState", "read_grown_chat"]

#: Attributes of the OpenAI chat reader kept in chunks rather than with its other values.
_CHAT_APART = frozenset({"messages", "times"})


class ChatState(_State):
    """The OpenAI chat reader's state after the first ``consumed`` bytes of a JSONL file (:class:`~dp_compact.hot.common_lines._State`).

    ``reader`` is a :class:`dp_compact.sessions.openai_chat.LiveReader` after every complete line;
    ``evidence`` is True once a message has an OpenAI-only role or key (before that the file reads
    as Anthropic messages); ``cline`` is True while every record among the first
    :data:`~dp_compact.sessions.source.SNIFF_RECORDS` is a Cline UI entry (the file then reads as
    Cline's UI messages).

    Pickled as :class:`~dp_compact.hot.lines.LinesState` is; changed in place by a read.
    """

    __slots__ = ("cline", "evidence")

    def __init__(self, reader: openai_chat.LiveReader, consumed: int, next_line: int, digest: bytes) -> None:
        super().__init__(reader, consumed, next_line, digest)
        self.evidence = False
        self.cline = True

    def __reduce__(self) -> tuple[Any, ...]:
        live = self.reader
        inner = live._reader
        chunks = _sealed(self.chunks, inner.messages, [], inner.times)
        values = {k: v for k, v in vars(inner).items() if k not in _CHAT_APART}
        return _restored_chat, (_LAYOUT, self._common(), self.evidence, self.cline, live._has_calls, values, chunks)

    def _fork_reader(self, reader: openai_chat.LiveReader) -> openai_chat.LiveReader:
        """A copy of ``reader`` that reads on without changing it, its message reader too."""
        twin = _with_copied_lists(reader)
        twin._reader = _with_copied_lists(reader._reader)
        return twin


def _restored_chat(layout: Any, common: tuple[Any, ...], evidence: bool, cline: bool, has_calls: bool,
                   values: dict[str, Any], chunks: list[Chunk]) -> ChatState:
    """The :class:`ChatState` that :meth:`ChatState.__reduce__` wrote (ValueError: another layout)."""
    live = openai_chat.LiveReader("")
    inner = live._reader
    vars(inner).update(values)
    inner.messages, _, inner.times = _unsealed(layout, chunks)
    live._has_calls = has_calls
    state = ChatState(live, 0, 0, b"")
    state._set_common(common, chunks)
    state.evidence, state.cline = evidence, cline
    return state


def _read_chat(state: ChatState, records: list[Record]) -> None:
    """``records`` (the lines after those ``state`` read) handed to its reader.

    Raises NotIncremental for a record that is not an OpenAI chat message or breaks the reader's
    rules, and for one among the first :data:`~dp_compact.sessions.source.SNIFF_RECORDS` that
    makes the file another format (module docstring).
    """
    index, evidence, cline = state.records, state.evidence, state.cline
    for record in records:
        value = record.value
        if not openai_chat._is_message(value):
            raise NotIncremental(f"line {record.line} is not an OpenAI chat message")
        if index < SNIFF_RECORDS:
            if (_is_message_record(value) or _is_codex_envelope(value) or gemini_cli._is_stream_event(value)
                    or openai_chat._has_anthropic_blocks(value)):
                raise NotIncremental(f"line {record.line} makes the file another format")
            cline = cline and cline_ui._is_entry(value)
        evidence = evidence or openai_chat._openai_evidence(value)
        index += 1
    try:
        state.reader.add(records)
    except ValueError as exc:  # MalformedLineError
        raise NotIncremental(f"a line breaks the format: {exc}") from exc
    state.records, state.evidence, state.cline = index, evidence, cline


def _chat_session(path: str) -> Callable[[ChatState], Session]:
    """The session of a (forked) OpenAI chat state's records, named ``path``."""

    def session_of(work: ChatState) -> Session:
        if not work.evidence:
            raise NotIncremental("no OpenAI-only role or key yet: the file reads as Anthropic messages")
        if work.cline:
            raise NotIncremental("the first records are Cline UI entries")
        work.reader.path = path
        return work.reader.session()

    return session_of


def read_grown_chat(path: Path | str, data: bytes, state: ChatState | None) -> tuple[Session, bytes]:
    """The session of the OpenAI chat JSONL file whose bytes are ``data``, read from where ``state`` stopped.

    Parameters, returns and errors as :func:`dp_compact.hot.lines.read_grown` (``state`` a
    :class:`ChatState`; NotIncremental also as the module docstring says).
    """
    return _grown_as(ChatState, lambda: openai_chat.LiveReader(str(path)), "an OpenAI chat file", path, data, state, _read_chat,
                     _chat_session(str(path)))
