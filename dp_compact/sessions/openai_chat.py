"""OpenAI chat-completions messages in their common containers (DESIGN §4, FORMATS.md (c)).

Containers: one message per line (tau-bench, the regression cases); a ``{messages: [...]}``
document (converted Claude Code sessions, the ``meta.token_counts`` variant); a SWE-agent
``.traj`` document (``history`` is the conversation); a bare JSON array (mini-swe-agent).

- ``system``/``developer`` messages are the fixed prefix (``system_text``), not messages. A
  ``[compact_boundary]`` system message and a user message opening "This session is being
  continued ..." are compaction markers (one marker when both appear together); the live
  conversation starts at the summary message. Each is kept as a
  :class:`~dp_compact.conversation.RecordedCompaction` with the summary's text; its tool is
  ``claude-code`` when the summary uses Claude Code's hand-over sentence or the marker is Claude
  Code's ``[compact_boundary]`` (a converted Claude Code session), ``codex`` for Codex's
  hand-over prefix, else ``other``.
- Tool calls come from ``tool_calls``, else from ``tool_call`` content blocks (never both: the
  held-out variant duplicates them) or a legacy ``function_call``. Results are linked by
  ``tool_call_id``, SWE-agent's ``tool_call_ids`` list (the text goes to the first id), else by
  position to the latest unanswered call.
- Trajectories without tool calls (SWE-agent's older history, mini-swe-agent's fenced bash
  actions): the first user message is the task; a user message right after an assistant
  message is the observation of that assistant's action, so it becomes a ``tool`` message
  answering a synthetic call ``obs-<n>`` added to the assistant message (``raw`` is unchanged).
  Long single-task runs stay cuttable between rounds.
- Usage: ``meta.token_counts`` (Codex token_count objects) when present; SWE-agent's
  ``info.model_stats.api_calls`` gives the number of LLM calls, never per-call usage.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import islice
from typing import Any

from dp_compact.errors import MalformedLineError
from dp_compact.sessions.codex import TokenCounts
from dp_compact.sessions.common import build_session, dumps, is_summary_text, relink, summary_tool, text_and_images
from dp_compact.conversation import Message, RecordedCompaction, Session, ToolCall, ToolResult, new_message
from dp_compact.sessions.source import SNIFF_RECORDS, Record, Source, each_record
from dp_compact.text.summary_text import is_boundary_text

__all__ = ["DESCRIPTION", "FORMAT", "LiveReader", "read", "sniff"]

FORMAT = "openai_chat"
DESCRIPTION = "OpenAI chat messages (role/tool_calls/tool_call_id; JSONL, {messages}, SWE-agent .traj, mini-swe-agent array)"

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_EVIDENCE_KEYS = ("tool_calls", "tool_call_id", "tool_call_ids", "function_call")
_INTERRUPTED = "[Request interrupted by user"
_ACTION_MARKS = ("```mswea_bash_command", "<returncode>")


def _container(source: Source, limit: int | None = None) -> tuple[Sequence[Record], dict[str, Any] | None] | None:
    """The message records and the enclosing document (None for JSONL or a bare array); the
    first ``limit`` of them when given (JSONL records are read one at a time, not held)."""
    if source.records is not None:
        return (source.records if limit is None else source.sample[:limit]), None
    document = source.document
    items: Any = None
    if isinstance(document, list):
        items, document = document, None
    elif isinstance(document, dict):
        items = document.get("history") if isinstance(document.get("history"), list) else document.get("messages")
    if not isinstance(items, list):
        return None
    return [Record(0, v, len(dumps(v).encode())) for v in items[:limit]], document


def _is_message(value: Any) -> bool:
    """A ``{role, content | tool_calls}`` dict with an OpenAI role."""
    if not isinstance(value, dict):
        return False
    role = value.get("role")
    return type(role) is str and role in _ROLES and ("content" in value or "tool_calls" in value or "function_call" in value)


def _has_anthropic_blocks(value: dict[str, Any]) -> bool:
    """True when the content holds Anthropic ``tool_use``/``tool_result`` blocks."""
    content = value.get("content")
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") in ("tool_use", "tool_result") for b in content)


def _openai_evidence(value: dict[str, Any]) -> bool:
    """Something only OpenAI-style messages have (a role or key Anthropic messages lack)."""
    return value.get("role") in ("system", "developer", "tool", "function") or any(k in value for k in _EVIDENCE_KEYS)


def sniff(source: Source) -> bool:
    """True when most of the first records (``SNIFF_RECORDS``) are OpenAI messages and the file
    shows an OpenAI-only trait.

    A ``{messages}``/``{history}`` document qualifies by its container; JSONL and bare arrays
    need a system/tool role or a tool-call key anywhere in the file, so plain Anthropic lists
    are left to that reader.
    """
    found = _container(source, SNIFF_RECORDS)
    if found is None or not found[0]:
        return False
    records, document = found
    messages = [r.value for r in records if _is_message(r.value)]
    if 2 * len(messages) < len(records) or any(_has_anthropic_blocks(m) for m in messages):
        return False
    if document is not None:
        return len(messages) == len(records)
    if any(_openai_evidence(m) for m in messages):
        return True
    rest = (r.value for r in islice(source.records, SNIFF_RECORDS, None)) if source.records is not None else source.document[SNIFF_RECORDS:]
    return any(_openai_evidence(v) for v in rest if _is_message(v))


def _call(spec: Any) -> ToolCall:
    """A ToolCall from an OpenAI ``tool_calls`` entry or a ``tool_call`` content block."""
    if not isinstance(spec, dict):
        raise ValueError("a tool call must be an object")
    function = spec.get("function") if isinstance(spec.get("function"), dict) else spec
    call_id = spec.get("id") or spec.get("tool_call_id") or spec.get("call_id")
    if not isinstance(call_id, str):
        raise ValueError("a tool call needs an 'id'")
    return ToolCall(call_id, str(function.get("name", "")), dumps(function.get("arguments", "")))


def _content(content: Any) -> tuple[str, int, list[ToolCall], list[tuple[str | None, str]]]:
    """Text, images, ``tool_call`` blocks and ``tool_output`` blocks (call id, text) of a content."""
    if content is not None and not isinstance(content, (str, list, dict)):
        raise ValueError("content must be a string, a list of parts or null")
    if not isinstance(content, list):
        text, images = text_and_images(content)
        return text, images, [], []
    texts: list[str] = []
    images = 0
    calls: list[ToolCall] = []
    outputs: list[tuple[str | None, str]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_call":
            calls.append(_call(block))
        elif kind == "tool_output":
            text, n = text_and_images(block.get("text", block.get("output", block.get("content"))))
            outputs.append((block.get("tool_call_id"), text))
            images += n
        else:
            text, n = text_and_images([block])
            texts.append(text)
            images += n
    return "\n".join(t for t in texts if t), images, calls, outputs


class _Reader:
    """State of one pass over the messages."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.system: list[str] = []
        self.system_raw: list[dict[str, Any]] = []  # every system/developer message as read, markers too
        self.live_start = 0
        self.compactions = 0
        self.after_boundary = False
        self.records: list[RecordedCompaction] = []
        self.times: list[Any] = []  # each assistant message's ``timestamp`` (Session.call_times, JSONL only)

    def add(self, value: dict[str, Any], line: int, nbytes: int) -> None:
        """Handle one message dict (raises ValueError when it breaks the format's rules)."""
        role = value["role"]
        text, images, block_calls, outputs = _content(value.get("content"))
        boundary, self.after_boundary = self.after_boundary, False
        if role in ("system", "developer"):
            self.system_raw.append(value)
            if is_boundary_text(text):
                self.compactions += 1
                self.live_start, self.after_boundary = len(self.messages), True
                self.records.append(RecordedCompaction("claude-code", line))
            elif text:
                self.system.append(text)
            return
        if role == "user":
            summary = is_summary_text(text)
            if summary:
                if boundary:
                    self.records[-1] = replace(self.records[-1], summary_text=text)
                else:
                    self.compactions += 1
                    self.records.append(RecordedCompaction(summary_tool(text), line, summary_text=text))
                self.live_start = len(self.messages)
            kind = "summary" if summary else "injected" if text.lstrip().startswith(_INTERRUPTED) else "prompt"
            message = new_message("user", text, images=images, line=line, source_bytes=nbytes, raw=value, kind=kind)
        elif role == "assistant":
            calls = self._calls(value, block_calls)
            message = new_message("assistant", text, calls, thinking=_thinking(value), images=images, line=line, source_bytes=nbytes, raw=value)
            self.times.append(value.get("timestamp"))
        else:
            results = self._results(value, text, outputs)
            message = new_message("tool", tool_results=results, images=images, line=line, source_bytes=nbytes, raw=value)
        self.messages.append(message)

    def _calls(self, value: dict[str, Any], block_calls: list[ToolCall]) -> tuple[ToolCall, ...]:
        """Calls from ``tool_calls`` (preferred), ``tool_call`` blocks, or a legacy ``function_call``."""
        specs = value.get("tool_calls")
        if specs is not None and not isinstance(specs, list):
            raise ValueError("tool_calls must be a list")
        if specs:
            return tuple([_call(s) for s in specs])
        if block_calls:
            return tuple(block_calls)
        legacy = value.get("function_call")
        if isinstance(legacy, dict):
            return (ToolCall(f"function-{len(self.messages)}", str(legacy.get("name", "")), dumps(legacy.get("arguments", ""))),)
        return ()

    def _results(self, value: dict[str, Any], text: str, outputs: list[tuple[str | None, str]]) -> tuple[ToolResult, ...]:
        """Results of a tool/function message, linked by id or by position."""
        ids = value.get("tool_call_ids")
        if isinstance(value.get("tool_call_id"), str):
            ids = [value["tool_call_id"]]
        elif not (isinstance(ids, list) and ids and all(isinstance(i, str) for i in ids)):
            ids = [o[0] for o in outputs if isinstance(o[0], str)] or [self._open_call()]
        body = text or "\n".join(o[1] for o in outputs)
        return (ToolResult(ids[0], body), *[ToolResult(call_id, "") for call_id in ids[1:]])

    def _open_call(self) -> str:
        """The first call of the latest assistant message not answered yet ('' when none)."""
        answered: set[str] = set()
        for message in reversed(self.messages):
            if message.role == "assistant":
                return next((c.id for c in message.tool_calls if c.id not in answered), "")
            answered.update(r.call_id for r in message.tool_results)
        return ""


def _thinking(value: dict[str, Any]) -> str:
    """Reasoning text some providers return beside the content."""
    for key in ("reasoning_content", "reasoning", "thinking"):
        if isinstance(value.get(key), str):
            return value[key]
    return ""


def _is_action_trajectory(messages: list[Message], document: dict[str, Any] | None) -> bool:
    """A run whose actions live in the assistant text and whose observations come back as user."""
    if any(m.tool_calls or m.tool_results for m in messages):
        return False
    if document is not None and isinstance(document.get("history"), list):
        return True
    return any(mark in m.text for m in messages for mark in _ACTION_MARKS)


def _link_observations(messages: list[Message]) -> list[Message]:
    """Make each user message that follows an assistant action (after the task) a tool result."""
    out: list[Message] = []
    seen_user = False
    for index, message in enumerate(messages):
        if message.role == "user" and seen_user and out and out[-1].role == "assistant":
            call = ToolCall(f"obs-{index}", "action")
            out[-1] = replace(out[-1], tool_calls=out[-1].tool_calls + (call,))
            message = replace(message, role="tool", text="", tool_results=(ToolResult(call.id, message.text),))
        seen_user = seen_user or message.role == "user"
        out.append(message)
    return out


def read(source: Source) -> Session:
    """Read OpenAI chat messages into a :class:`Session`.

    Parameters
    ----------
    source : Source
        JSONL messages, a ``{messages}`` or SWE-agent ``{history}`` document, or a JSON array.

    Returns
    -------
    Session
        Live messages after the last compaction marker; ``usage`` from ``meta.token_counts``
        (tokens) when present, else none; ``llm_calls`` from the usage, SWE-agent's
        ``api_calls`` or the assistant messages; ``compaction_records`` one per marker;
        ``call_times`` (JSONL) each assistant line's ``timestamp`` key, when it has one.

    Raises
    ------
    MalformedLineError
        A record that is not a message, or a message with invalid content or tool calls
        (``path:line`` for JSONL; the message index for documents); skipped when lenient.
    """
    records, document = _container(source) or ([], None)
    reader = _Reader()
    def add(record: Record) -> None:
        if not _is_message(record.value):
            raise ValueError("not an OpenAI chat message ({role, content | tool_calls})")
        reader.add(record.value, record.line, record.nbytes)

    skipped = each_record(source, records, add)
    messages = reader.messages
    if _is_action_trajectory(messages, document):
        messages = _link_observations(messages)
    meta = document.get("meta") if document is not None else None
    counts = TokenCounts()
    if isinstance(meta, dict) and isinstance(meta.get("token_counts"), list):
        for index, event in enumerate(meta["token_counts"]):
            try:
                counts.add(event)
            except ValueError as exc:
                if not source.lenient:
                    raise MalformedLineError(source.path, None, f"meta.token_counts[{index}]: {exc}") from exc
    return build_session(
        path=source.path,
        format=FORMAT,
        messages=relink(messages, reader.live_start),
        usage=counts.usage,
        live_start=reader.live_start,
        compactions=reader.compactions,
        llm_calls=len(counts.usage) or _api_calls(document) or None,
        system_text="\n\n".join(reader.system),
        system_messages=tuple(reader.system_raw),
        model=_model(document),
        context_window=counts.context_window,
        window_source="Codex's model_context_window, kept in the file's meta.token_counts" if counts.context_window else "",
        skipped_lines=source.skipped + skipped,
        compaction_records=tuple(reader.records),
        call_times=tuple(reader.times) if source.records is not None else (),  # a line's own ``timestamp``
    )


def _api_calls(document: dict[str, Any] | None) -> int:
    """SWE-agent's ``info.model_stats.api_calls`` (0 when absent)."""
    info = document.get("info") if document is not None else None
    stats = info.get("model_stats") if isinstance(info, dict) else None
    calls = stats.get("api_calls") if isinstance(stats, dict) else None
    return calls if isinstance(calls, int) and calls > 0 else 0


def _model(document: dict[str, Any] | None) -> str | None:
    """The model name a container records, if any."""
    if document is None:
        return None
    for holder in (document, document.get("meta")):
        if isinstance(holder, dict) and isinstance(holder.get("model"), str):
            return holder["model"]
    return None


class LiveReader:
    """:func:`read` of a conversation that grows by appends (the adapters' live conversations).

    :meth:`add` reads the records appended since the last call and :meth:`session` builds the
    :class:`Session`: equal to ``read(Source(path=path, records=<every record added>))``, at the
    cost of the records added (the per-record pass of :func:`read` is not repeated; the session is
    assembled in one pass over the messages). A record :func:`read` rejects raises the same
    :class:`~dp_compact.errors.MalformedLineError`, and the reader is then unusable (``broken``).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.broken = False
        self._reader = _Reader()
        self._has_calls = False  # some message calls tools or answers a call: not an action trajectory

    def add(self, records: Sequence[Record]) -> None:
        """Read ``records`` (JSONL records: line numbers continuing the earlier ones)."""
        if self.broken:
            raise ValueError("the reader rejected a record earlier: read again from the start")
        before = len(self._reader.messages)
        try:
            for record in records:
                if not _is_message(record.value):
                    raise ValueError("not an OpenAI chat message ({role, content | tool_calls})")
                self._reader.add(record.value, record.line, record.nbytes)
        except ValueError as exc:
            self.broken = True
            raise MalformedLineError(self.path, getattr(record, "line", 0) or None, str(exc)) from exc
        self._has_calls = self._has_calls or any(m.tool_calls or m.tool_results for m in self._reader.messages[before:])

    def session(self) -> Session:
        """The session of every record added, as :func:`read` makes it from a JSONL source."""
        reader = self._reader
        messages = reader.messages
        if not self._has_calls and _is_action_trajectory(messages, None):
            messages = _link_observations(messages)
        return build_session(
            path=self.path, format=FORMAT, messages=relink(messages, reader.live_start), usage=(), live_start=reader.live_start,
            compactions=reader.compactions, llm_calls=None, system_text="\n\n".join(reader.system),
            system_messages=tuple(reader.system_raw), model=None, context_window=None, window_source="", skipped_lines=0,
            compaction_records=tuple(reader.records), call_times=tuple(reader.times),
        )
