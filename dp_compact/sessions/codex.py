"""OpenAI Codex CLI rollouts (``~/.codex/sessions/.../rollout-*.jsonl``, DESIGN §4).

Every line is an envelope ``{timestamp, type, payload}`` (``sessions/FORMATS.md`` (b)):

- ``response_item`` payloads are the conversation as sent to the Responses API. Consecutive
  assistant-side items (``reasoning``, assistant ``message``, ``function_call``,
  ``custom_tool_call``) form ONE assistant message; a ``token_count`` event (the response is
  complete) or any other item closes it. Each ``*_output`` item is one ``tool`` message (the
  OpenAI shape), so ``raw`` is an OpenAI-chat dict.
- ``developer`` messages and ``session_meta.base_instructions`` are the fixed prefix
  (``system_text``), not messages. User messages that only carry injected context
  (``<environment_context>``, ``# AGENTS.md``, ``<turn_aborted>``, ...) stay messages (they
  are sent) of kind ``injected``, not user turns.
- ``event_msg/token_count``: ``info.last_token_usage`` is one LLM call (prompt =
  ``input_tokens``, which includes ``cached_input_tokens``). Repeats of the previous event and
  zero-input events (right after a compaction) are dropped.
- ``compacted`` is a compaction marker: the live conversation is its ``replacement_history``
  (copies of earlier prompts, kind ``injected``, plus the summary; not user turns again) and what follows.
  It is kept as a :class:`~dp_compact.conversation.RecordedCompaction` (summary =
  ``payload.message``; size when it fired = the prompt of the last non-zero ``token_count``
  before it). The ``event_msg/context_compacted`` event that follows belongs to it; one with no
  ``compacted`` line of its own is recorded too, without a summary (and not counted as a marker).
  Each ``compacted`` line is also a :class:`~dp_compact.conversation.CompactionMarker` (summary =
  ``payload.message`` when it is text; where it splits the history).
- A response's time is the ``timestamp`` of the envelope its first item is on (``Session.call_times``).
- ``event_msg`` copies (``user_message``, ``agent_message``, ``exec_command_end``, ...) duplicate
  response items and are not messages. Unknown types and keys are skipped.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dp_compact.text.patterns import is_injected_text
from dp_compact.sessions.common import build_session, dumps, is_summary_text, relink, text_and_images
from dp_compact.conversation import CompactionMarker, Message, RecordedCompaction, Session, ToolCall, ToolResult, Usage, new_message
from dp_compact.sessions.source import Source, each_record
from dp_compact.sessions.usage import token_count, usage_from_api

__all__ = ["DESCRIPTION", "FORMAT", "TokenCounts", "read", "sniff"]

FORMAT = "codex"
DESCRIPTION = "OpenAI Codex CLI rollout JSONL ({timestamp, type, payload}: session_meta/response_item/event_msg)"

_CALL_TYPES = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output"})


def sniff(source: Source) -> bool:
    """True for JSONL with Codex envelopes (``session_meta``/``response_item``/``compacted`` + payload) among its first records (``Source.sample``)."""
    return source.records is not None and any(
        isinstance(r.value, dict)
        and r.value.get("type") in ("session_meta", "response_item", "compacted")
        and isinstance(r.value.get("payload"), dict)
        for r in source.sample
    )


class TokenCounts:
    """Collects Codex ``token_count`` events into :class:`Usage` records, one per LLM call.

    Also used for the ``meta.token_counts`` side list of converted OpenAI-chat files.
    """

    def __init__(self) -> None:
        self.usage: list[Usage] = []
        self.context_window: int | None = None
        self._previous: str | None = None

    def add(self, event: Any, line: int = 0) -> bool:
        """Add one event (a ``token_count`` payload or its ``info``); True when it added a record.

        An event equal to the previous one (same total and last usage) is a repeat and is
        dropped, as is one whose ``last_token_usage.input_tokens`` is 0. The prompt is
        ``input_tokens`` (cached included, OpenAI's convention) unless the object says otherwise
        (:func:`~dp_compact.sessions.usage.usage_from_api`).

        Raises
        ------
        ValueError
            If a count is not a non-negative whole number.
        """
        if not isinstance(event, dict):
            return False
        if isinstance(event.get("payload"), dict):
            event = event["payload"]
        info = event.get("info") if "info" in event else event
        if not isinstance(info, dict):
            return False
        window = info.get("model_context_window")
        if isinstance(window, int) and window > 0:
            self.context_window = window
        key = dumps([info.get("total_token_usage"), info.get("last_token_usage")])
        if key == self._previous:
            return False
        self._previous = key
        last = info.get("last_token_usage")
        if not isinstance(last, dict) or token_count(last.get("input_tokens"), "input_tokens") <= 0:
            return False
        usage = usage_from_api(last, line)
        if usage is None:
            return False
        self.usage.append(usage)
        return True


def _reasoning_text(payload: dict[str, Any]) -> str:
    """Visible text of a reasoning item: its summary and content parts (not the encrypted blob)."""
    parts = []
    for key in ("summary", "content"):
        text, _ = text_and_images(payload.get(key))
        if text:
            parts.append(text)
    return "\n".join(parts)


def _output_text(output: Any) -> tuple[str, int]:
    """Text and images of a tool output (a string, a list of content items, or an object)."""
    if isinstance(output, dict) and "content" in output:
        output = output["content"]
    return text_and_images(output)


def _summary_of(payload: dict[str, Any]) -> str:
    """The hand-over summary of a ``compacted`` payload: its ``message``, else the summary message
    of its replacement history ("Another language model started ..."), else ``""``."""
    if isinstance(payload.get("message"), str) and payload["message"]:
        return payload["message"]
    history = payload.get("replacement_history")
    for item in history if isinstance(history, list) else ():
        if isinstance(item, dict) and item.get("type") == "message" and item.get("role") == "user":
            text, _ = text_and_images(item.get("content"))
            if is_summary_text(text):
                return text
    return ""


class _Reader:
    """State of one pass over the envelopes."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.messages: list[Message] = []
        self.counts = TokenCounts()
        self.system: list[str] = []
        self.live_start = 0
        self.compactions = 0
        self.model: str | None = None
        self.skipped = 0
        self.records: list[RecordedCompaction] = []
        self.markers: list[CompactionMarker] = []
        self.times: list[Any] = []  # the timestamp of each assistant message emitted (Session.call_times)
        self.envelope: dict[str, Any] = {}  # the line being read
        self._open_record: tuple[str, int] | None = None  # (what opened the last record, usage count then)
        self._reset_group()

    def _reset_group(self) -> None:
        self.texts: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[ToolCall] = []
        self.signed = False
        self.images = 0
        self.first_line = 0
        self.first_time: Any = None
        self.nbytes = 0
        self.nlines = 0

    def flush(self) -> None:
        """Emit the open assistant message, if any."""
        if not self.nlines:
            return
        text = "\n".join(self.texts)
        raw: dict[str, Any] = {"role": "assistant", "content": text or None}
        if self.calls:
            raw["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in self.calls
            ]
        self.messages.append(
            new_message(
                role="assistant", text=text, tool_calls=tuple(self.calls), thinking="\n".join(self.thinking),
                signed_thinking=self.signed, images=self.images, line=self.first_line,
                source_bytes=self.nbytes, source_lines=self.nlines, raw=raw,
            )
        )
        self.times.append(self.first_time)
        self._reset_group()

    def _grow(self, line: int, nbytes: int) -> None:
        if not self.nlines:
            self.first_line = line
            self.first_time = self.envelope.get("timestamp")
        self.nbytes += nbytes
        self.nlines += 1

    def record(self, value: Any, line: int, nbytes: int) -> None:
        """Handle one envelope (raises ValueError when it breaks the format's rules)."""
        if not isinstance(value, dict):
            raise ValueError("a Codex rollout line must be a JSON object")
        self.envelope = value
        kind, payload = value.get("type"), value.get("payload")
        if kind in ("session_meta", "response_item", "compacted", "turn_context", "event_msg") and not isinstance(payload, dict):
            raise ValueError(f"a Codex {kind!r} line needs a 'payload' object")
        if kind == "response_item":
            self.item(payload, line, nbytes, replayed=False)
        elif kind == "event_msg":
            self.event(payload, line)
        elif kind == "compacted":
            self.compacted(payload, line)
        elif kind == "session_meta":
            base = payload.get("base_instructions") or payload.get("instructions")
            text = base.get("text") if isinstance(base, dict) else base
            if isinstance(text, str) and text:
                self.system.insert(0, text)
        elif kind == "turn_context" and isinstance(payload.get("model"), str):
            self.model = payload["model"]

    def session(self, path: str, skipped: int) -> Session:
        """The session of the envelopes read (``skipped``: lines left out); the open response is emitted first by :meth:`flush`."""
        return build_session(
            path=path,
            format=FORMAT,
            messages=relink(self.messages, self.live_start),
            usage=self.counts.usage,
            live_start=self.live_start,
            compactions=self.compactions,
            system_text="\n\n".join(self.system),
            model=self.model,
            context_window=self.counts.context_window,
            window_source="Codex's model_context_window" if self.counts.context_window else "",
            skipped_lines=skipped,
            compaction_records=tuple(self.records),
            markers=tuple(self.markers),
            call_times=tuple(self.times),
        )

    def event(self, payload: dict[str, Any], line: int) -> None:
        """``token_count`` gives usage and ends the open response; ``task_started`` the window."""
        kind = payload.get("type")
        if kind == "token_count":
            if self.counts.add(payload, line):
                self.flush()
        elif kind == "task_started" and isinstance(payload.get("model_context_window"), int):
            self.counts.context_window = payload["model_context_window"]
        elif kind == "context_compacted":
            self.record_compaction("event", line, "")

    def record_compaction(self, what: str, line: int, summary: str) -> None:
        """A ``compacted`` line or ``context_compacted`` event: a new record, or the other half of the open one.

        The two halves of one compaction come in either order with no LLM call between them.
        """
        opened = self._open_record
        self._open_record = None
        if opened is not None and opened[0] != what and opened[1] == len(self.counts.usage):
            if what == "compacted":
                self.records[-1] = replace(self.records[-1], line=line, summary_text=summary)
            return
        pre = self.counts.usage[-1].prompt_tokens if self.counts.usage else None
        self.records.append(RecordedCompaction("codex", line, pre_tokens=pre, summary_text=summary))
        self._open_record = (what, len(self.counts.usage))

    def compacted(self, payload: dict[str, Any], line: int) -> None:
        """A compaction: the live conversation restarts with the replacement history."""
        self.flush()
        self.compactions += 1
        self.live_start = len(self.messages)
        history = payload.get("replacement_history")
        self.record_compaction("compacted", line, _summary_of(payload))
        message = payload.get("message")
        self.markers.append(CompactionMarker(line, summary_text=message if isinstance(message, str) else "",
                                             messages_before=len(self.messages), usage_before=len(self.counts.usage)))
        if isinstance(history, list):
            for item in history:
                if isinstance(item, dict):
                    self.item(item, line, len(dumps(item).encode()), replayed=True)
            self.flush()
        elif isinstance(payload.get("message"), str):
            text = payload["message"]
            self.messages.append(
                new_message(role="user", text=text, line=line, source_bytes=len(text.encode()), raw={"role": "user", "content": text}, kind="summary")
            )

    def item(self, payload: dict[str, Any], line: int, nbytes: int, *, replayed: bool) -> None:
        """One Responses-API item; ``replayed`` items (replacement history) are not new user turns."""
        kind = payload.get("type")
        if type(kind) is not str:
            raise ValueError(f"a response item's 'type' must be a string, not {type(kind).__name__}")
        if kind == "message":
            self.message(payload, line, nbytes, replayed=replayed)
        elif kind == "reasoning":
            self._grow(line, nbytes)
            text = _reasoning_text(payload)
            if text:
                self.thinking.append(text)
            self.signed = self.signed or bool(payload.get("encrypted_content"))
        elif kind in _CALL_TYPES:
            call_id = payload.get("call_id") or payload.get("id")
            if not isinstance(call_id, str):
                raise ValueError(f"a {kind} item needs a 'call_id'")
            arguments = payload.get("arguments", payload.get("input", payload.get("action", "")))
            self._grow(line, nbytes)
            self.calls.append(ToolCall(call_id, str(payload.get("name") or kind), dumps(arguments)))
        elif kind in _OUTPUT_TYPES:
            call_id = payload.get("call_id")
            if not isinstance(call_id, str):
                raise ValueError(f"a {kind} item needs a 'call_id'")
            self.flush()
            text, images = _output_text(payload.get("output"))
            self.messages.append(
                new_message(
                    role="tool", tool_results=(ToolResult(call_id, text),), images=images, line=line,
                    source_bytes=nbytes, raw={"role": "tool", "tool_call_id": call_id, "content": text},
                )
            )
        elif kind == "web_search_call":
            self._grow(line, nbytes)
            self.texts.append(dumps(payload.get("action", {})))

    def message(self, payload: dict[str, Any], line: int, nbytes: int, *, replayed: bool) -> None:
        """A ``message`` item: developer -> prefix, assistant -> open response, user -> message."""
        role = payload.get("role")
        text, images = text_and_images(payload.get("content"))
        if role in ("developer", "system"):
            self.flush()
            if text and text not in self.system:
                self.system.append(text)
        elif role == "assistant":
            self._grow(line, nbytes)
            self.texts.append(text)
            self.images += images
        elif role == "user":
            self.flush()
            head = text.lstrip()
            kind = "summary" if is_summary_text(head) else "injected" if replayed or is_injected_text(head) else "prompt"
            self.messages.append(
                new_message(role="user", text=text, images=images, line=line, source_bytes=nbytes, raw={"role": "user", "content": text}, kind=kind)
            )


def read(source: Source) -> Session:
    """Read a Codex rollout into a :class:`Session`.

    Parameters
    ----------
    source : Source
        JSONL envelopes of the rollout.

    Returns
    -------
    Session
        Live messages after the last ``compacted`` line (its replacement history first); one
        usage record per distinct ``token_count`` (tokens; prompt = ``input_tokens``, cached
        included); ``context_window`` from ``model_context_window``; ``system_text`` = base
        instructions and developer messages; ``llm_calls`` = ``len(usage)``; ``compaction_records``
        one per ``compacted`` line (summary, prompt tokens before it); ``markers`` one per
        ``compacted`` line (where it splits the history); ``call_times`` each response's envelope ``timestamp``.

    Raises
    ------
    MalformedLineError
        A line that is not an object, an envelope without a ``payload`` object, or a tool
        call/output without ``call_id`` (``path:line``); skipped when the source is lenient.
    """
    reader = _Reader(source)
    reader.skipped += each_record(source, source.records or (), lambda r: reader.record(r.value, r.line, r.nbytes))
    reader.flush()
    return reader.session(source.path, source.skipped + reader.skipped)
