"""The conversation every reader produces and the core reads (DESIGN §1, §4).

Value types (:class:`Message`, :class:`ToolCall`, :class:`ToolResult`, :class:`Usage`,
:class:`Session`, :class:`RecordedCompaction`, :class:`SeedStats`) and the format-neutral rules
over them: what a user turn is (:attr:`Message.is_user_turn`, from :attr:`Message.kind`) and the
counts of user turns and LLM calls, carried over the summaries of ours (how a summary reads is
:mod:`dp_compact.text.summary_text`, whose names are re-exported here).
A :class:`Session` holds the *live* conversation (the messages after the last compaction
marker, which is what the model sees now), the usage records of the LLM calls, and counters over
the whole file (user turns, LLM calls, compactions). Everything is immutable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from operator import attrgetter, countOf
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import orjson

from dp_compact._fast import maker
from dp_compact.text.patterns import is_injected_text
from dp_compact.text.summary_text import (
    SUMMARY_PREFIXES,
    CompactingTool,
    is_summary_text,
    summary_counts,
    summary_kept,
    summary_recorded,
    summary_tool,
)

__all__ = [
    "BLOCK_MARKERS",
    "LONGEST_MARKER",
    "MARKER_WORDS",
    "MESSAGE_KINDS",
    "SUMMARY_PREFIXES",
    "CompactingTool",
    "CompactionMarker",
    "Message",
    "RawJSON",
    "MessageKind",
    "RecordedCompaction",
    "SeedStats",
    "Session",
    "ToolCall",
    "ToolResult",
    "Usage",
    "call_seconds",
    "epoch_seconds",
    "first_call_day",
    "count_llm_calls",
    "count_user_turns",
    "is_summary_text",
    "last_own_summary",
    "message_kind",
    "message_raw",
    "new_message",
    "not_marker",
    "raw_as_json",
    "holds_no_blocks",
    "positions_holding_blocks",
    "raw_value",
    "recorded_history",
    "shape_if_kept",
    "summary_counts",
    "summary_kept",
    "summary_recorded",
    "summary_tool",
    "unmarked",
]

Role = Literal["user", "assistant", "tool"]


class RawJSON(bytes):
    """A message's source shape kept as compact JSON text (UTF-8) instead of Python objects.

    A session read to be planned, not rewritten, keeps each :attr:`Message.raw` so
    (:func:`raw_as_json`): the whole JSON when it holds an image or document block (which token
    counting reads), else only whether its ``content`` is a string or a list (which the cuts
    read), ``{"content":""}`` or ``{"content":[]}`` (``{}`` for neither), one shared object for
    all. :func:`raw_value` gives the parsed value back either way.
    """

    __slots__ = ()


#: How messages made now keep their ``raw`` (:func:`raw_as_json`): ``""`` as given, ``"whole"``
#: its whole JSON text, ``"shape"`` the whole JSON only where images or documents need it.
_RAW_AS_JSON: ContextVar[str] = ContextVar("raw_as_json", default="")
#: What the JSON text of any image or document block holds: the words of both patterns
#: (:data:`~dp_compact.measure.images.IMAGE_MARKERS`, :data:`~dp_compact.measure.documents.DOCUMENT_MARKERS`)
#: in one search, factored by their openings (half the time of the plain alternation); a test
#: checks that it matches the same words.
BLOCK_MARKERS = re.compile(rb'"(?:i(?:mage(?:_url)?|nput_(?:image|file)|nline(?:Data|_data))|document|file(?:Data|_data)?)"')
#: The words :data:`BLOCK_MARKERS` finds quoted: a JSON text holds a marker exactly where one of
#: its keys or strings is one of these (a quote inside a string is escaped; a test checks the list).
MARKER_WORDS = frozenset({"image", "image_url", "input_image", "input_file", "inlineData", "inline_data", "document", "file",
                          "fileData", "file_data"})
#: Characters of the longest of :data:`MARKER_WORDS`: a longer string is none of them (:func:`not_marker`).
LONGEST_MARKER = max(map(len, MARKER_WORDS))
#: Source bytes from which a message's raw is walked for markers (:func:`unmarked`) rather than
#: written as JSON and searched: the walk costs a few function calls per block and nesting
#: level, the search a pass over every byte. Measured on the messages of real Claude Code and
#: Anthropic sessions (walked against searched, µs): 0.96 / 0.84 below 1 KB, 1.53 / 1.30 from 1 to
#: 2 KB, 1.91 / 2.16 from 2 to 4 KB, 2.24 / 4.23 from 4 to 16 KB, 2.79 / 9.00 past 16 KB.
WALK_FROM_BYTES = 2048
_UNMARKED_DEPTH = 6
_INT_MIN, _INT_END = -(2**63), 2**64
_SHAPES = {str: RawJSON(b'{"content":""}'), list: RawJSON(b'{"content":[]}'), None: RawJSON(b"{}")}
_SHAPE_IDS = frozenset(map(id, _SHAPES.values()))


@contextmanager
def raw_as_json(*, whole: bool = False) -> Iterator[None]:
    """Within this block, every :class:`Message` made keeps its ``raw`` as :class:`RawJSON`.

    For reading sessions to plan, replay or calibrate them, where ``raw`` is only searched for
    images and documents and asked whether its content is a string: the parsed source of each
    message is freed as soon as its message is made, and a message without images or documents
    keeps only its content's kind. A reader that needs a message's source after the message
    is made keeps the parsed value itself for as long as it needs it (the Anthropic reader links
    Cline's positional results to the message just before). ``whole`` keeps every message's whole
    JSON text; inside a block without ``whole`` it changes nothing outside one. A value ``orjson``
    cannot serialise is kept as given.
    """
    current = _RAW_AS_JSON.get()
    token = _RAW_AS_JSON.set("whole" if whole or current == "whole" else "shape")
    try:
        yield
    finally:
        _RAW_AS_JSON.reset(token)


def _scalar_unmarked(item: Any, kind: type) -> bool:
    """:func:`unmarked` of a value that is neither a dict nor a list, of type ``kind``."""
    if kind is str:
        return not_marker(item)
    if kind is int:
        return _INT_MIN <= item < _INT_END
    return kind is float or kind is bool or item is None


def unmarked(value: Any, depth: int = 0) -> bool:
    """True when ``value`` is sure to be JSON without a marker: dicts with string keys, lists,
    strings, booleans, None, 64-bit integers and floats, nested at most six deep, with no key or
    string among :data:`MARKER_WORDS`; then :data:`BLOCK_MARKERS` finds nothing in
    ``orjson.dumps(value)``, whose text is not written. False when it holds a marker or is
    anything else (unsure: search its JSON text).

    >>> unmarked({"content": [{"type": "text", "text": "a file"}]}), unmarked({"content": [{"type": "image"}]})
    (True, False)
    """
    kind = type(value)
    if kind is dict:
        if depth >= _UNMARKED_DEPTH or not MARKER_WORDS.isdisjoint(value):
            return False
        for key in value:
            if type(key) is not str:
                return False
        items = value.values()
    elif kind is list:
        if depth >= _UNMARKED_DEPTH:
            return False
        items = value
    else:
        return _scalar_unmarked(value, kind)
    for item in items:
        kind = type(item)
        if kind is str:  # the common case, checked here rather than in a call
            if len(item) <= LONGEST_MARKER and item in MARKER_WORDS:
                return False
        elif kind is dict or kind is list:
            if not unmarked(item, depth + 1):
                return False
        elif not _scalar_unmarked(item, kind):
            return False
    return True


def _shape(raw: Any) -> RawJSON:
    """The shape kept of a ``raw`` without markers: whether its ``content`` is a string or a list."""
    content = raw.get("content") if isinstance(raw, dict) else None
    return _SHAPES[list] if isinstance(content, list) else _SHAPES[str] if isinstance(content, str) else _SHAPES[None]


def _kept_raw(raw: Any, how: str, nbytes: int = 0) -> Any:
    """``raw`` as :func:`raw_as_json` keeps it (``how``: ``"whole"`` or ``"shape"``; ``nbytes``:
    the message's source bytes, from :data:`WALK_FROM_BYTES` on walked for markers first)."""
    if how != "whole" and nbytes >= WALK_FROM_BYTES and unmarked(raw):
        return _shape(raw)
    try:
        text = orjson.dumps(raw, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # not JSON (an adapter's own objects): kept as given
        return raw
    if how == "whole" or BLOCK_MARKERS.search(text) is not None:
        return RawJSON(text)
    content = raw.get("content") if type(raw) is dict else None  # _shape, inline (one call per message)
    return _SHAPES[list] if type(content) is list else _shape(raw)


def shape_if_kept(content: Any) -> RawJSON | None:
    """The shape :func:`raw_as_json` keeps of a ``{role, content}`` source that a reader has
    found to hold no marker (:data:`MARKER_WORDS`: every block walked, see
    :func:`~dp_compact.sessions.anthropic.message_from_anthropic`), while messages made now keep
    shapes; None otherwise (the source is then kept as :func:`new_message` decides). The same
    shape as the search of its JSON text would give, without writing the text.
    """
    return (_SHAPES[list] if type(content) is list else _SHAPES[str]) if _RAW_AS_JSON.get() == "shape" else None


def not_marker(text: str) -> bool:
    """True when the string ``text``, as a JSON key or value, is none of :data:`MARKER_WORDS`."""
    return len(text) > LONGEST_MARKER or text not in MARKER_WORDS


def holds_no_blocks(raw: Any) -> bool:
    """True when ``raw`` holds no image or document block: None, or a shape kept by
    :func:`raw_as_json` for a message without any (where :func:`raw_value` gives back the shape only).

    >>> with raw_as_json():
    ...     plain, pictured = Message("user", "hi", raw={"content": "hi"}), Message("user", raw={"content": [{"type": "image"}]})
    >>> holds_no_blocks(plain.raw), holds_no_blocks(pictured.raw), holds_no_blocks({"content": "hi"})
    (True, False, False)
    """
    return raw is None or id(raw) in _SHAPE_IDS


#: ``message_raw(m)`` is ``m.raw``; the ids of the values :func:`holds_no_blocks` is True of, as an array.
message_raw = attrgetter("raw")
_NO_BLOCK_IDS = np.array(sorted({*_SHAPE_IDS, id(None)}), dtype=np.uintp)


def positions_holding_blocks(messages: Sequence[Message]) -> npt.NDArray[np.intp]:
    """Positions of the messages whose ``raw`` may hold image or document blocks: those
    :func:`holds_no_blocks` is False of; shape (≤ len(messages),), ascending. One pass in C over
    the messages (their ``raw``'s identity), for sessions of millions of messages.
    """
    ids = np.fromiter(map(id, map(message_raw, messages)), dtype=np.uintp, count=len(messages))
    return np.flatnonzero(~np.isin(ids, _NO_BLOCK_IDS))


def raw_value(raw: Any) -> Any:
    """``raw`` parsed when it is :class:`RawJSON`, else ``raw`` itself.

    >>> raw_value(RawJSON(b'{"role":"user","content":"hi"}')), raw_value({"role": "user"})
    ({'role': 'user', 'content': 'hi'}, {'role': 'user'})
    """
    return orjson.loads(memoryview(raw)) if isinstance(raw, RawJSON) else raw  # orjson takes no bytes subclass


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of an assistant message.

    ``id`` links it to its :class:`ToolResult` (OpenAI ``tool_call_id``, Anthropic
    ``tool_use_id``, Codex ``call_id``); ``arguments`` is the JSON text or free text as sent.
    """

    id: str
    name: str
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result of one tool call, ``call_id`` naming the :class:`ToolCall` it answers."""

    call_id: str
    text: str
    is_error: bool = False


#: What a message is, set once by its reader (:attr:`Message.kind`).
MessageKind = Literal["prompt", "injected", "summary", "tool_result", "assistant"]
#: Every :data:`MessageKind`; the first three are user messages (``role == "user"``).
MESSAGE_KINDS: tuple[MessageKind, ...] = ("prompt", "injected", "summary", "tool_result", "assistant")
_USER_KINDS = frozenset({"prompt", "injected", "summary"})


@dataclass(frozen=True, slots=True)
class Message:
    """One message of the conversation as sent to the API (DESIGN §1).

    Attributes
    ----------
    role : {"user", "assistant", "tool"}
        ``"tool"`` is a message that carries tool results (an Anthropic user message with
        ``tool_result`` blocks, an OpenAI ``tool`` message, a Codex ``function_call_output``).
    text : str
        All visible text blocks, joined by newlines.
    tool_calls, tool_results : tuple
        Tool calls made (assistant) or answered (tool).
    thinking : str
        Visible thinking / reasoning text (its signature or encrypted payload is not counted).
    signed_thinking : bool
        True when the message carries a signed ``thinking`` or ``redacted_thinking`` block,
        which must be sent back byte-identical (DESIGN §1).
    images : int
        Image or other binary blocks; charged a flat cost each, never their base64 length.
    line : int
        1-based line of the source file where the message starts (0 when unknown).
    source_bytes, source_lines : int
        UTF-8 bytes and number of the source lines it came from (the ``bytes4`` estimate).
    raw : Any
        The message as read (a dict in the source's API shape), kept for the pipeline;
        ignored by equality. Read to be planned (:func:`raw_as_json`), it is its JSON text,
        :class:`RawJSON`; :func:`raw_value` parses it.
    kind : {"prompt", "injected", "summary", "tool_result", "assistant"}
        What the message is, decided once by its reader:

        - ``"prompt"``: a user message typed by a person (a user turn, DESIGN §1);
        - ``"injected"``: a user message the client or a compaction wrote (task notifications,
          attachments, hook and local-command output, system reminders, interruption markers,
          Codex's environment context, copies of earlier prompts a compaction put back);
        - ``"summary"``: the hand-over summary of a compaction (:func:`is_summary_text`);
        - ``"tool_result"``: ``role == "tool"``; ``"assistant"``: ``role == "assistant"``.

        Not given (None), it follows from ``role`` and, for a user message, from the text
        (``"summary"`` when :func:`is_summary_text`, else ``"prompt"``). A ``"prompt"``, given or
        inferred, whose text a client wrote (:func:`~dp_compact.text.patterns.is_injected_text`) is
        ``"injected"``, whatever the reader, so a file converted to another format keeps its
        user turns. For a tool or assistant
        message the role decides whatever is given, so a reader that turns a user message into
        a tool message (a result linked by position) cannot leave a stale kind.

    Notes
    -----
    Readers, which make one per message of sessions of millions, call :func:`new_message`: the
    same arguments and rules, made about four times as fast (:mod:`dp_compact._fast`).
    """

    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    thinking: str = ""
    signed_thinking: bool = False
    images: int = 0
    line: int = 0
    source_bytes: int = 0
    source_lines: int = 1
    raw: Any = field(default=None, compare=False, hash=False, repr=False)
    kind: MessageKind | None = None

    def __post_init__(self) -> None:
        """The kind decided and ``raw`` kept by the rules :func:`new_message` applies."""
        object.__setattr__(self, "kind", _decided_kind(self.role, self.text, self.kind))
        object.__setattr__(self, "raw", _raw_to_keep(self.raw, self.source_bytes))

    @property
    def is_user_turn(self) -> bool:
        """True for a user turn: a prompt typed by a person (``kind == "prompt"``, DESIGN §1).

        The one rule the counters (``Session.user_turns``, :func:`count_user_turns`), the turn
        index of the cuts and ages (:func:`dp_compact.core.cuts.message_arrays`), the estimates, the
        timeline and the pipeline share. Injected context and compaction summaries are user
        messages (a cut may start there, :attr:`is_user_message`) but not user turns.

        >>> Message("user", "fix the bug").is_user_turn, Message("user", "[summary] earlier").is_user_turn
        (True, False)
        >>> Message("user", "<task-notification>done</task-notification>", kind="injected").is_user_turn
        False
        """
        return self.kind == "prompt"

    @property
    def is_user_message(self) -> bool:
        """True for any message sent with the user role that carries no tool result: a prompt,
        injected context or a summary (a tail may start there, :mod:`dp_compact.core.cuts`)."""
        return self.role == "user"


def _decided_kind(role: Role, text: str, kind: MessageKind | None) -> MessageKind:
    """The kind a message gets (:class:`Message`): the role decides for a tool or assistant
    message, the text for a user message without a user kind, and a ``"prompt"`` whose text a
    client wrote is ``"injected"`` (one rule for every reader: patterns.INJECTED_PREFIXES)."""
    if role == "assistant":
        return "assistant"
    if role == "tool":
        return "tool_result"
    if kind not in _USER_KINDS:
        kind = "summary" if is_summary_text(text) else "prompt"
    return "injected" if kind == "prompt" and is_injected_text(text) else kind  # type: ignore[return-value]


def _raw_to_keep(raw: Any, source_bytes: int) -> Any:
    """``raw`` as :func:`raw_as_json` asks it kept; itself outside it, or already :class:`RawJSON`."""
    if raw is not None and not isinstance(raw, RawJSON) and (how := _RAW_AS_JSON.get()):
        return _kept_raw(raw, how, source_bytes)
    return raw


#: A Message from all its fields in order, without ``__init__`` (dp_compact._fast; only new_message calls it).
_make_message = maker(Message)


def new_message(
    role: Role,
    text: str = "",
    tool_calls: tuple[ToolCall, ...] = (),
    tool_results: tuple[ToolResult, ...] = (),
    thinking: str = "",
    signed_thinking: bool = False,
    images: int = 0,
    line: int = 0,
    source_bytes: int = 0,
    source_lines: int = 1,
    raw: Any = None,
    kind: MessageKind | None = None,
) -> Message:
    """``Message(...)`` for readers, which make one per message of sessions of millions.

    The same arguments and the same rules (the kind decided, ``raw`` kept as
    :func:`raw_as_json` asks: :class:`Message`) and an equal message, made without the
    dataclass's ``__init__`` by :func:`dp_compact._fast.maker`: about 5,600 CPU instructions
    where ``Message(...)`` takes 24,700 (2026-12-06).

    >>> new_message("user", "fix the bug", line=3) == Message("user", "fix the bug", line=3)
    True
    """
    return _make_message(role, text, tool_calls, tool_results, thinking, signed_thinking, images, line, source_bytes,
                         source_lines, _raw_to_keep(raw, source_bytes), _decided_kind(role, text, kind))


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one LLM call, as the provider reported it.

    ``prompt_tokens`` is the whole prompt of the call (uncached input + cache reads + cache
    writes), in tokens; the other fields split it or give the output. ``line`` is the 1-based
    source line of the record (0 when unknown: such a record cannot be placed among the
    messages). ``convention`` tells how the source's usage object was read
    (:func:`~dp_compact.sessions.usage.usage_from_api`): ``"anthropic"`` (``input_tokens``
    excludes the cache reads and writes, which are added), ``"openai"`` (``input_tokens`` /
    ``prompt_tokens`` already include the cached tokens) or ``""`` (no cache split, or a
    format with one fixed meaning). ``cache_write_1h_tokens`` is the part of
    ``cache_write_tokens`` written as 1-hour cache entries (Anthropic
    ``cache_creation.ephemeral_1h_input_tokens``, billed at 2 × input; DESIGN §8); the rest are
    5-minute entries. ``cache_split_estimated`` is True when the source records reads and writes
    as one number and the reader split them (Cline ``metrics.tokens.cached``).
    """

    prompt_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    line: int = 0
    convention: str = ""
    cache_write_1h_tokens: int = 0
    cache_split_estimated: bool = False


@dataclass(frozen=True, slots=True)
class RecordedCompaction:
    """A compaction a tool recorded in the file (evidence for DESIGN §6: summary size, window).

    Attributes
    ----------
    tool : {"claude-code", "codex", "other"}
        Who compacted: Claude Code (its ``compact_boundary``, or a conversion of one), Codex
        (``compacted`` / ``context_compacted``), or another tool (a summary message only).
    line : int
        1-based source line of the marker (0 when the source has no lines: a JSON document).
    trigger : {"auto", "manual"} or None
        How it was started, when the file records it (Claude Code ``compactMetadata.trigger``).
    pre_tokens : int or None
        Context size when it fired, tokens as the provider counts them: Claude Code
        ``compactMetadata.preTokens``; Codex: the prompt of the last non-zero ``token_count``
        before the marker. None when the file does not tell.
    summary_text : str
        The hand-over summary the tool wrote (Claude Code: the ``isCompactSummary`` message;
        Codex: ``compacted.message``; converted files: the summary message); ``""`` if not found.
    """

    tool: CompactingTool
    line: int
    trigger: str | None = None
    pre_tokens: int | None = None
    summary_text: str = ""


@dataclass(frozen=True, slots=True)
class CompactionMarker:
    """A compaction marker that splits a file's history into segments (Claude Code
    ``system``/``compact_boundary``, Codex ``compacted``), as its reader found it.

    Attributes
    ----------
    line : int
        1-based source line of the marker.
    summary_text : str
        The hand-over summary the tool wrote: Claude Code, the first message after the marker
        when it is a user message; Codex, ``compacted.message``; ``""`` when the file does not hold it.
    pre_tokens, post_tokens : int or None
        Context size before and after, tokens, as the tool reported it (Claude Code
        ``compactMetadata.preTokens`` / ``postTokens``); None when the file does not tell.
    messages_before : int
        Messages of ``Session.history`` written before the marker: the next segment starts there.
    usage_before : int
        Usage records (``Session.usage``) of the calls made before the marker.
    """

    line: int
    summary_text: str = ""
    pre_tokens: int | None = None
    post_tokens: int | None = None
    messages_before: int = 0
    usage_before: int = 0


@dataclass(frozen=True, slots=True)
class SeedStats:
    """The seed agent's ``stats.json`` counters (DESIGN §4); missing keys are None."""

    current_turn_count: int | None = None
    agent_request_count: int | None = None
    compact_request_count: int | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    total_cache_read_tokens: int | None = None
    total_cache_creation_tokens: int | None = None
    current_context_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Session:
    """A normalized session.

    Attributes
    ----------
    path : str
        The file it was read from.
    format : str
        The reader's ``FORMAT`` name (``"anthropic"``, ``"claude_code"``, ...).
    messages : tuple[Message, ...]
        The live conversation: messages after the last compaction marker, in order.
    usage : tuple[Usage, ...]
        One record per distinct LLM call of the whole file, in order (deduplicated).
    user_turns : int
        User turns in the whole file, before and after compactions (t of DESIGN §2).
    llm_calls : int
        LLM calls in the whole file: distinct usage records, else assistant messages.
    compactions : int
        Compaction markers in the file, ours and other tools' (c of DESIGN §2).
    system_text : str
        System / developer prompt text when the file has it (part of the prefix V, not a message).
    model : str or None
        The model name the session records, if any.
    context_window : int or None
        The context window the session records (Codex ``model_context_window``), if any.
    window_source : str
        Where ``context_window`` is recorded, in the words of the plan's window note (``""`` without one).
    skipped_lines : int
        Lines skipped with ``lenient=True``.
    skipped_line_numbers : tuple[int, ...]
        The 1-based numbers of the lines skipped (JSONL; a JSON document's entries have none).
        Ignored by equality.
    repaired_lines : tuple[int, ...]
        1-based numbers of the lines whose lone UTF-16 surrogate escapes were read as U+FFFD
        (a JSON document: line 1). Ignored by equality.
    partial_line : int or None
        1-based number of a half-written last line left out (the agent was still writing it:
        no line break after it, not valid JSON), else None. Not counted in ``skipped_lines``.
    stats : SeedStats or None
        The seed agent's counters when given (``--stats``).
    earlier_messages : int
        Messages that the last summary of ours in the live conversation replaced, as it states
        them (its head; an earlier summary there counts as one message; 0 without one): with
        ``messages`` they make the N the conversation had when it was compacted, which the
        planner's least kept share is taken of, so that a compacted file re-plans as before.
    messages_since_compaction : int or None
        Messages added after what the last summary of ours in the live conversation states it
        was followed by (0: the file is that compaction's output, nothing new); None without
        such a summary.
    recorded_avg_tokens : float or None
        avg of DESIGN §2 (mean prompt tokens per call) that the last summary of ours in the live
        conversation states for the conversation it compacted: the planner's avg when the file
        has no usage records of its own (a compacted file keeps its usage evidence). None otherwise.
    recorded_token_ratio : float or None
        Provider tokens per cl100k token that summary states was measured on the compacted
        conversation, used when the file's own usage cannot measure one. None otherwise.
    recorded_prefix_tokens : int or None
        The fixed prefix V (tokens) that summary, or the statement of a file ``dp-compact shrink``
        wrote, states was measured from the compacted conversation's usage records: the V the
        file is planned with when its own usage cannot measure one. None otherwise.
    recorded_write_1h_share : float or None
        The share of cache writes made as 1-hour entries that summary states for the compacted
        conversation: the write lifetime the file is priced with when its own usage records none.
        None otherwise.
    recorded_context : tuple[int, int] or None
        (tokens, messages): the current context a file ``dp-compact shrink`` wrote states it had
        when written, and the live messages it had then; the current context of such a file
        without usage records is that figure plus what was appended after it. None otherwise.
    system_messages : tuple
        The source's system / developer messages as read (raw dicts, in order), which belong
        to the fixed prefix and are written back unchanged by the pipeline.
    history : tuple[Message, ...]
        Every message the file records, in order, before and after its compaction markers
        (``messages`` is its tail from the last marker on), including what a recorded
        compaction inserted (its summary, Codex's replacement history). Used by the replay
        (DESIGN §6); empty for an empty file. Ignored by equality.
    compaction_records : tuple[RecordedCompaction, ...]
        The compactions the file records, in file order, with what each tells (trigger, size
        when it fired, summary). Usually one per marker counted in ``compactions``; a Codex
        ``context_compacted`` event without its ``compacted`` line adds a record (no summary)
        but is not counted there. Ignored by equality.
    markers : tuple[CompactionMarker, ...]
        The compaction markers that split ``history`` into segments (Claude Code, Codex), in file
        order, each with where it falls in ``history`` and ``usage`` (:func:`dp_compact.sessions.segments.segments`);
        empty for the other formats. Ignored by equality.
    call_times : tuple
        When each LLM call was made, as the file writes it: one value per assistant message of
        ``history`` (a call's response), in order, the ``timestamp`` of the source line the
        response starts on (ISO 8601 text, or epoch seconds or milliseconds), None where that
        line has none; empty when the format records no times (:func:`call_seconds` gives epoch
        seconds). Ignored by equality.
    """

    path: str
    format: str
    messages: tuple[Message, ...]
    usage: tuple[Usage, ...] = ()
    user_turns: int = 0
    llm_calls: int = 0
    compactions: int = 0
    system_text: str = ""
    model: str | None = None
    context_window: int | None = None
    window_source: str = ""
    skipped_lines: int = 0
    stats: SeedStats | None = None
    earlier_messages: int = 0
    messages_since_compaction: int | None = None
    partial_line: int | None = None
    recorded_avg_tokens: float | None = None
    recorded_token_ratio: float | None = None
    recorded_prefix_tokens: int | None = None
    recorded_write_1h_share: float | None = None
    recorded_context: tuple[int, int] | None = None
    system_messages: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    history: tuple[Message, ...] = field(default=(), compare=False, repr=False)
    compaction_records: tuple[RecordedCompaction, ...] = field(default=(), compare=False, repr=False)
    skipped_line_numbers: tuple[int, ...] = field(default=(), compare=False, repr=False)
    repaired_lines: tuple[int, ...] = field(default=(), compare=False, repr=False)
    markers: tuple[CompactionMarker, ...] = field(default=(), compare=False, repr=False)
    call_times: tuple[Any, ...] = field(default=(), compare=False, repr=False)


#: ``message_kind(m)`` is ``m.kind``: mapped over a session's messages without a Python loop.
message_kind = attrgetter("kind")


def last_own_summary(messages: Sequence[Message]) -> int | None:
    """Index of the last summary message of ours that states its counts (:func:`summary_counts`), if any."""
    kinds = list(map(message_kind, messages))
    if "summary" not in kinds:
        return None
    for at in range(len(kinds) - 1, -1, -1):
        if kinds[at] == "summary" and any(summary_counts(messages[at].text)):
            return at
    return None


def _carried(messages: Sequence[Message], field: int, kind: str, last: int | None) -> int:
    """What the last of our summaries (``last``) states (``summary_counts`` field) plus the
    messages of ``kind`` after it."""
    start = 0 if last is None else last + 1
    carried = 0 if last is None else summary_counts(messages[last].text)[field]
    return carried + countOf(map(message_kind, messages[start:]), kind)


_UNSET: Any = object()


def count_user_turns(messages: Sequence[Message], *, last: int | None = _UNSET) -> int:
    """User turns in ``messages`` (:attr:`Message.is_user_turn`: kind ``"prompt"``), the turns
    before the last of our summaries counted by what it states (they are gone from the file);
    ``last`` is that summary's :func:`last_own_summary` when known."""
    return _carried(messages, 1, "prompt", last_own_summary(messages) if last is _UNSET else last)


def count_llm_calls(messages: Sequence[Message], *, last: int | None = _UNSET) -> int:
    """LLM calls behind ``messages``: assistant messages, those before the last of our summaries
    counted by what it states (``last`` as in :func:`count_user_turns`)."""
    return _carried(messages, 2, "assistant", last_own_summary(messages) if last is _UNSET else last)


def recorded_history(session: Any) -> tuple[Any, ...]:
    """The messages a replay appends and calibration judges: the whole history of ``session``
    without what its recorded compactions inserted (their summary message, and what was written
    on the summary's line, such as Codex's replacement history); a file that records no
    compaction gives its live conversation (``Session.messages``).
    """
    if not session.compactions or not session.history:
        return session.messages
    inserted = {m.line for m in session.history if m.kind == "summary"}
    return tuple(m for m in session.history if m.kind != "summary" and not (m.line > 0 and m.line in inserted))


#: An epoch time above this is in milliseconds (1e11 s is the year 5138; 1e11 ms is 1973).
_EPOCH_MS_FROM = 1e11


def epoch_seconds(value: Any) -> float:
    """A recorded time (ISO 8601 text, or epoch seconds or milliseconds) in epoch seconds; NaN for anything else
    (:func:`call_seconds` reads each call time so; epoch values above 1e11 are milliseconds)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) / 1000.0 if value > _EPOCH_MS_FROM else float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return math.nan
    return math.nan


def first_call_day(session: Session) -> date | None:
    """UTC date of the first LLM call of ``session`` with a known time (:func:`call_seconds`'s
    reading of ``Session.call_times``), None when none has one: the day whose prices apply
    (DESIGN §8, dated prices)."""
    for value in session.call_times:
        seconds = epoch_seconds(value)
        if seconds == seconds:  # not NaN
            try:
                return datetime.fromtimestamp(seconds, UTC).date()
            except (OverflowError, OSError, ValueError):  # a time no calendar holds: not evidence
                return None
    return None


def call_seconds(session: Session) -> npt.NDArray[np.float64]:
    """Epoch seconds of each LLM call of ``session``: ``Session.call_times`` read as times.

    Returns
    -------
    ndarray[float64], shape (len(call_times),)
        One per assistant message of ``session.history``, in order; NaN where the file gives no
        time (or one that is neither ISO 8601 text nor a number). Empty when the format records none.

    >>> call_seconds(Session(path="", format="", messages=(), call_times=("1970-01-01T00:01:00+00:00", 1_700_000_000_000, None))).tolist()
    [60.0, 1700000000.0, nan]
    """
    return np.fromiter(map(epoch_seconds, session.call_times), dtype=np.float64, count=len(session.call_times))
