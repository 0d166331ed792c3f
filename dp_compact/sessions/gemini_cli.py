"""Gemini CLI sessions: saved chats and ``--output-format stream-json`` logs (DESIGN §4).

Saved chat (one document ``{sessionId, messages: [...]}``, FORMATS.md (e)): ``type: user``
messages are user turns; a ``type: gemini`` message is one LLM call: an assistant message
(``content``, ``thoughts`` as thinking, ``toolCalls`` as tool calls) followed, when the calls
have results, by ONE tool message holding them all (Gemini returns every ``functionResponse``
of a turn in one content). ``tokens.input`` is that call's whole prompt (``cached`` is part of
it): one usage record per gemini message. ``info``/``error``/``warning`` entries are skipped.

Stream-json (one event per line): ``message`` events (assistant ones with ``delta: true`` are
streamed chunks, concatenated into one message), ``tool_use`` (a call on the current assistant
message, opened if needed), ``tool_result`` (results after one assistant message form one tool
message), ``init`` and ``result``. There is no per-call usage (``result.stats`` holds session
totals only), so ``usage`` stays empty. An ``init`` with a new ``session_id`` is a restart: the
live conversation is the last run, starting at the user messages just before that ``init``.
An assistant message's time is the ``timestamp`` of the event it starts on (``Session.call_times``;
a saved chat records none that is read).

``raw`` is a Gemini-API content dict (``{role: user|model, parts: [...]}``).
"""

from __future__ import annotations

from typing import Any

from dp_compact.errors import MalformedLineError
from dp_compact.sessions.common import build_session, dumps, is_summary_text, relink, text_and_images
from dp_compact.conversation import Message, Session, ToolCall, ToolResult, Usage, new_message
from dp_compact.sessions.source import Source, each_record
from dp_compact.sessions.usage import token_count

__all__ = ["DESCRIPTION", "FORMAT", "read", "sniff"]

FORMAT = "gemini_cli"
DESCRIPTION = "Gemini CLI saved chat {sessionId, messages[type user|gemini]} or stream-json events (init/message/tool_use/tool_result/result)"

_SUMMARY_PREFIX = "<state_snapshot>"  # Gemini CLI's /compress hand-over


def _is_saved_chat(document: Any) -> bool:
    """A ``{sessionId?, messages: [{type, content}]}`` document with Gemini message types."""
    if not isinstance(document, dict) or not isinstance(document.get("messages"), list):
        return False
    items = document["messages"]
    typed = all(isinstance(m, dict) and isinstance(m.get("type"), str) and "role" not in m for m in items)
    return typed and ("sessionId" in document or any(m["type"] == "gemini" for m in items))


def _is_stream_event(value: Any) -> bool:
    """A stream-json ``init`` (with a session id) or ``tool_use``/``tool_result`` (with a tool id)."""
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    return (kind == "init" and "session_id" in value) or (kind in ("tool_use", "tool_result") and "tool_id" in value)


def sniff(source: Source) -> bool:
    """True for a Gemini CLI saved chat document or a stream-json log."""
    if source.records is None:
        return _is_saved_chat(source.document)
    return any(_is_stream_event(r.value) for r in source.sample)


def _is_summary(text: str) -> bool:
    head = text.lstrip()
    return is_summary_text(head) or head.startswith(_SUMMARY_PREFIX)


def _user(text: str, images: int, line: int, nbytes: int) -> Message:
    """A user message: a prompt, or a compaction's summary (:func:`_is_summary`)."""
    return new_message(
        role="user", text=text, images=images, line=line, source_bytes=nbytes, raw={"role": "user", "parts": [{"text": text}]},
        kind="summary" if _is_summary(text) else "prompt",
    )


def _assistant(texts: list[str], calls: list[ToolCall], args: list[Any], thinking: str, line: int, nbytes: int, lines: int) -> Message:
    text = "".join(texts)
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    parts += [{"functionCall": {"id": c.id, "name": c.name, "args": a}} for c, a in zip(calls, args, strict=True)]
    return new_message(
        role="assistant", text=text, tool_calls=tuple(calls), thinking=thinking, line=line,
        source_bytes=nbytes, source_lines=lines, raw={"role": "model", "parts": parts},
    )


def _tool(results: list[tuple[ToolResult, str]], images: int, line: int, nbytes: int, lines: int) -> Message:
    parts = [{"functionResponse": {"id": r.call_id, "name": name, "response": {"output": r.text}}} for r, name in results]
    return new_message(
        role="tool", tool_results=tuple(r for r, _ in results), images=images, line=line,
        source_bytes=nbytes, source_lines=lines, raw={"role": "user", "parts": parts},
    )


def _response_text(result: Any) -> tuple[str, int]:
    """Text and images of a saved tool call's ``result`` (a list of ``functionResponse`` parts)."""
    texts, images = [], 0
    for part in result if isinstance(result, list) else [result]:
        response = part.get("functionResponse", {}).get("response") if isinstance(part, dict) else part
        if isinstance(response, dict):
            response = response.get("output", response.get("error", response))
        text, n = text_and_images(response)
        texts.append(text)
        images += n
    return "\n".join(t for t in texts if t), images


def _read_saved_chat(source: Source) -> Session:
    """Messages, calls, results and per-call usage of a saved chat."""
    messages: list[Message] = []
    usage: list[Usage] = []
    live_start, compactions, model = 0, 0, None
    for index, item in enumerate(source.document["messages"]):
        kind = item.get("type")
        nbytes = len(dumps(item).encode())
        if kind == "user":
            text, images = text_and_images(item.get("content"))
            if _is_summary(text):
                compactions, live_start = compactions + 1, len(messages)
            messages.append(_user(text, images, 0, nbytes))
        elif kind == "gemini":
            calls_spec = item.get("toolCalls") or []
            if not isinstance(calls_spec, list) or not all(isinstance(c, dict) for c in calls_spec):
                if source.lenient:
                    continue
                raise MalformedLineError(source.path, None, f"message {index}: toolCalls must be a list of objects")
            text, _ = text_and_images(item.get("content"))
            thoughts = "\n".join(
                f"{t.get('subject', '')}: {t.get('description', '')}" for t in item.get("thoughts") or [] if isinstance(t, dict)
            )
            calls = [ToolCall(str(c.get("id", f"call-{index}-{n}")), str(c.get("name", "")), dumps(c.get("args", {}))) for n, c in enumerate(calls_spec)]
            messages.append(_assistant([text], calls, [c.get("args", {}) for c in calls_spec], thoughts, 0, nbytes, 1))
            answered = [(call, spec) for call, spec in zip(calls, calls_spec, strict=True) if spec.get("result") is not None]
            if answered:
                results, images = [], 0
                for call, spec in answered:
                    body, n = _response_text(spec["result"])
                    images += n
                    results.append((ToolResult(call.id, body, spec.get("status") == "error"), call.name))
                messages.append(_tool(results, images, 0, 0, 0))
            try:
                usage += _saved_usage(item.get("tokens"))
            except ValueError as exc:
                if not source.lenient:
                    raise MalformedLineError(source.path, None, f"message {index}: {exc}") from exc
            model = item.get("model") if isinstance(item.get("model"), str) else model
    return build_session(
        path=source.path, format=FORMAT, messages=relink(messages, live_start), usage=usage, live_start=live_start,
        compactions=compactions, model=model, skipped_lines=source.skipped,
    )


def _saved_usage(tokens: Any) -> list[Usage]:
    """One usage record from a gemini message's ``tokens`` (output includes thought tokens).

    Raises ValueError for a count that is not a non-negative whole number.
    """
    if not isinstance(tokens, dict) or not token_count(tokens.get("input"), "tokens.input"):
        return []
    output = token_count(tokens.get("output"), "tokens.output") + token_count(tokens.get("thoughts"), "tokens.thoughts")
    cached = token_count(tokens.get("cached"), "tokens.cached")
    return [Usage(token_count(tokens["input"], "tokens.input"), cache_read_tokens=cached, output_tokens=output, convention="openai")]


class _Stream:
    """State of one pass over stream-json events."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.live_start = 0
        self.conversation_start = 0  # where the last run began (an init with a new session_id)
        self.compactions = 0
        self.session_id: Any = None
        self.model: str | None = None
        self.texts: list[str] = []
        self.calls: list[ToolCall] = []
        self.args: list[Any] = []
        self.results: list[tuple[ToolResult, str]] = []
        self.result_images = 0
        self.delta = False
        self.times: list[Any] = []  # the timestamp of each assistant message emitted (Session.call_times)
        self.stamp: Any = None  # that of the event being read
        self.a_time: Any = None  # that of the open assistant message's first event
        self.a_line = self.a_bytes = self.a_lines = 0
        self.r_line = self.r_bytes = self.r_lines = 0

    def flush(self) -> None:
        """Emit the open assistant message and the tool message answering it."""
        if self.a_lines:
            self.messages.append(_assistant(self.texts, self.calls, self.args, "", self.a_line, self.a_bytes, self.a_lines))
            self.times.append(self.a_time)
        if self.r_lines:
            self.messages.append(_tool(self.results, self.result_images, self.r_line, self.r_bytes, self.r_lines))
        self.texts, self.calls, self.args, self.results, self.result_images, self.delta = [], [], [], [], 0, False
        self.a_line = self.a_bytes = self.a_lines = self.r_line = self.r_bytes = self.r_lines = 0

    def _open_assistant(self, line: int, nbytes: int) -> None:
        if self.r_lines:
            self.flush()
        if not self.a_lines:
            self.a_line, self.a_time = line, self.stamp
        self.a_bytes += nbytes
        self.a_lines += 1

    def event(self, value: Any, line: int, nbytes: int) -> None:
        """Handle one event (raises ValueError when it breaks the format's rules)."""
        if not isinstance(value, dict):
            raise ValueError("a stream-json line must be a JSON object")
        self.stamp = value.get("timestamp")
        kind = value.get("type")
        if kind == "init":
            self.flush()
            if self.session_id is not None and value.get("session_id") != self.session_id:
                start = len(self.messages)
                while start > 0 and self.messages[start - 1].role == "user":
                    start -= 1
                # a new conversation: its turns, calls and compactions are counted from here (build_session)
                self.live_start = self.conversation_start = start
                self.compactions = 0
            self.session_id = value.get("session_id")
            self.model = value.get("model") if isinstance(value.get("model"), str) else self.model
        elif kind == "message":
            self.message(value, line, nbytes)
        elif kind == "tool_use":
            if not isinstance(value.get("tool_id"), str):
                raise ValueError("a tool_use event needs a 'tool_id'")
            self._open_assistant(line, nbytes)
            self.calls.append(ToolCall(value["tool_id"], str(value.get("tool_name", "")), dumps(value.get("parameters", {}))))
            self.args.append(value.get("parameters", {}))
            self.delta = False
        elif kind == "tool_result":
            if not isinstance(value.get("tool_id"), str):
                raise ValueError("a tool_result event needs a 'tool_id'")
            self.tool_result(value, line, nbytes)
        elif kind == "result":
            self.flush()

    def message(self, value: dict[str, Any], line: int, nbytes: int) -> None:
        """A user message, or assistant text (``delta`` chunks are concatenated)."""
        role = value.get("role")
        text, images = text_and_images(value.get("content"))
        if role == "user":
            self.flush()
            if _is_summary(text):
                self.compactions, self.live_start = self.compactions + 1, len(self.messages)
            self.messages.append(_user(text, images, line, nbytes))
        elif role == "assistant":
            delta = value.get("delta") is True
            self._open_assistant(line, nbytes)
            if not (delta and self.delta) and self.texts:
                self.texts.append("\n")
            self.texts.append(text)
            self.delta = delta

    def tool_result(self, value: dict[str, Any], line: int, nbytes: int) -> None:
        """One tool result; results after one assistant message form one tool message."""
        output = value.get("output")
        if output is None and isinstance(value.get("error"), dict):
            output = value["error"].get("message")
        text, images = text_and_images(output)
        name = next((c.name for c in self.calls if c.id == value["tool_id"]), "")
        self.results.append((ToolResult(value["tool_id"], text, value.get("status") == "error"), name))
        self.result_images += images
        if not self.r_lines:
            self.r_line = line
        self.r_bytes += nbytes
        self.r_lines += 1


def read(source: Source) -> Session:
    """Read a Gemini CLI saved chat or stream-json log into a :class:`Session`.

    Parameters
    ----------
    source : Source
        The saved-chat document or the stream-json records.

    Returns
    -------
    Session
        Saved chat: one usage record per gemini message (tokens; prompt = ``tokens.input``).
        Stream-json: no usage (only session totals exist); the live conversation is the last run;
        ``call_times`` each assistant message's first event ``timestamp``.

    Raises
    ------
    MalformedLineError
        A stream line that is not an object or a tool event without ``tool_id``; a saved
        message whose ``toolCalls`` is not a list of objects. Skipped when the source is lenient.
    """
    if source.records is None:
        return _read_saved_chat(source)
    stream = _Stream()
    skipped = each_record(source, source.records, lambda r: stream.event(r.value, r.line, r.nbytes))
    stream.flush()
    return build_session(
        path=source.path, format=FORMAT, messages=relink(stream.messages, stream.live_start), live_start=stream.live_start,
        compactions=stream.compactions, model=stream.model, skipped_lines=source.skipped + skipped,
        conversation_start=stream.conversation_start, call_times=tuple(stream.times),
    )
