"""Structural rules of the target APIs, checked on every output before it is written (DESIGN §5.7).

Anthropic Messages (the Messages API reference and its tool-use and extended-thinking guides):

- every message is ``{"role": "user" | "assistant", "content": str | [blocks]}``, non-empty;
- the first message is a user message (``first-role``); consecutive messages of one role are
  allowed: the Messages API "combines consecutive user or assistant turns" into one (Messages
  API reference, ``messages``), so a tool result must still directly follow its call's message;
- every ``tool_result`` answers a ``tool_use`` of the directly preceding assistant message, and
  the tool results come before any other block of their user message;
- every ``tool_use`` is answered in the next user message; a pending call (no result yet) is
  allowed only in the very last message;
- tool-call ids are unique and answered once; no empty text block, and no text block of only white
  space in a message with no other content (:func:`~dp_compact.pipeline.repairs.refused_texts`);
- ``thinking`` / ``redacted_thinking`` blocks only in assistant messages and only at the start;
- a message has no keys but ``role`` and ``content`` (``unknown-key``); a block of a type not
  listed in :data:`ANTHROPIC_BLOCK_TYPES` is kept as the source recorded it (the API adds types,
  such as ``advisor_tool_result``, faster than any list), with its pairing inferred: a server
  tool's result (``*_tool_result`` with a ``tool_use_id``,
  :func:`~dp_compact.sessions.anthropic.is_server_result`) belongs in an assistant message after
  the ``*_tool_use`` block of that id (``server-result``), where the API returned it.

OpenAI chat completions:

- ``system`` / ``developer`` messages come before every other message;
- a ``tool`` message answers a call of the assistant message found walking back over the
  ``tool`` messages before it; every call is answered (calls may be pending only in the last
  assistant message, when nothing but its tool messages follows it); call ids are unique and answered once;
- an assistant message has content or tool calls;
- a message has only chat-completions keys (``unknown-key``), and list content holds only the
  content-part types of its role (``unknown-part``: e.g. Anthropic ``tool_use`` blocks).

Pure: :func:`validate_messages` maps a list of dicts to a tuple of :class:`Violation`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from dp_compact.pipeline.repairs import refused_texts
from dp_compact.pipeline.types import API_ANTHROPIC, API_OPENAI, Api, Violation
from dp_compact.sessions.anthropic import is_server_result

__all__ = ["ANTHROPIC_BLOCK_TYPES", "OPENAI_PART_TYPES", "validate_messages"]

_THINKING = frozenset({"thinking", "redacted_thinking"})
_OPENAI_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
#: Content block types of the Messages API (request side), from its reference.
ANTHROPIC_BLOCK_TYPES = frozenset({
    "text", "image", "document", "search_result", "tool_use", "tool_result", "thinking", "redacted_thinking",
    "server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
    "bash_code_execution_tool_result", "text_editor_code_execution_tool_result", "mcp_tool_use", "mcp_tool_result",
    "container_upload",
})
#: Content-part types of chat-completions messages (text for every role; media for user input).
OPENAI_PART_TYPES = frozenset({"text", "image_url", "input_audio", "file", "refusal"})


def _unknown_keys(index: int, message: dict[str, Any], api: Api) -> Iterator[Violation]:
    """Keys the API's message does not accept."""
    from dp_compact.pipeline.convert import API_MESSAGE_KEYS

    extra = sorted(set(message) - API_MESSAGE_KEYS[api])
    if extra:
        yield Violation(index, "unknown-key", f"keys {', '.join(extra)} are not part of a {api} message")


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """Content blocks of an Anthropic message (a string content is one text block)."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _server_results(index: int, role: str, blocks: list[dict[str, Any]]) -> Iterator[Violation]:
    """Server-tool results (``*_tool_result`` but ``tool_result``) in an assistant message after their call."""
    used: set[str] = set()
    for block in blocks:
        kind = str(block.get("type"))
        if kind != "tool_result" and kind.endswith("_tool_use") or kind == "server_tool_use":
            used.add(str(block.get("id")))
        elif kind != "tool_result" and is_server_result(kind) and "tool_use_id" in block:
            if role != "assistant":
                yield Violation(index, "server-result", f"{kind} blocks belong to assistant messages, after their server tool call")
            elif str(block.get("tool_use_id")) not in used:
                yield Violation(index, "server-result", f"{kind} {block.get('tool_use_id')} follows no server tool call of its message")


def _anthropic_shape(index: int, message: Any) -> Iterator[Violation]:
    """Role, content type, empty text and block placement of one Anthropic message."""
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        role = message.get("role") if isinstance(message, dict) else type(message).__name__
        yield Violation(index, "role", f"role must be 'user' or 'assistant', not {role!r}")
        return
    content, role = message.get("content"), message["role"]
    if not isinstance(content, (str, list)) or not content:
        yield Violation(index, "empty-content", "content must be a non-empty string or list of blocks")
        return
    yield from _unknown_keys(index, message, API_ANTHROPIC)
    blocks = _blocks(message)
    kinds = [b.get("type") for b in blocks]
    yield from _server_results(index, role, blocks)
    for refused in refused_texts(blocks):
        if refused:
            yield Violation(index, "empty-text", refused)
    if role == "user" and any(k in _THINKING or k == "tool_use" for k in kinds):
        yield Violation(index, "block-in-user", "thinking and tool_use blocks belong to assistant messages")
    if role == "assistant" and "tool_result" in kinds:
        yield Violation(index, "result-in-assistant", "tool_result blocks belong to user messages")
    lead = next((i for i, k in enumerate(kinds) if k not in _THINKING), len(kinds))
    if any(k in _THINKING for k in kinds[lead:]):
        yield Violation(index, "thinking-position", "thinking blocks must come first in the message")
    first_other = next((i for i, k in enumerate(kinds) if k != "tool_result"), len(kinds))
    if "tool_result" in kinds[first_other:]:
        yield Violation(index, "result-position", "tool_result blocks must come before any other block")


def _anthropic(messages: Sequence[Any]) -> Iterator[Violation]:
    """All Anthropic rules (module docstring)."""
    issued: set[str] = set()
    answered: set[str] = set()
    pending: tuple[int, list[str]] | None = None
    for index, message in enumerate(messages):
        problems = list(_anthropic_shape(index, message))
        yield from problems
        if any(p.rule == "role" for p in problems):
            pending = None
            continue
        role, blocks = message["role"], _blocks(message)
        if index == 0 and role != "user":
            yield Violation(index, "first-role", "the first message must be a user message")
        results = [str(b.get("tool_use_id")) for b in blocks if b.get("type") == "tool_result"]
        expected = pending[1] if pending else []
        for call_id in results:
            if call_id not in expected:
                yield Violation(index, "orphan-tool-result", f"tool_result {call_id} answers no tool_use of the previous message")
            if call_id in answered:
                yield Violation(index, "duplicate-result", f"tool_use {call_id} answered twice")
            answered.add(call_id)
        if pending:
            missing = [c for c in pending[1] if c not in results]
            if missing:
                yield Violation(pending[0], "unanswered-tool-use", f"tool_use {', '.join(missing)} not answered in the next message")
        calls = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"] if role == "assistant" else []
        for call_id in calls:
            if call_id in issued:
                yield Violation(index, "duplicate-id", f"tool_use id {call_id} issued twice")
            issued.add(call_id)
        pending = (index, calls) if calls else None
    # a pending call in the very last message is allowed: its result is appended next


def _openai(messages: Sequence[Any]) -> Iterator[Violation]:
    """All OpenAI chat rules (module docstring)."""
    issued: set[str] = set()
    answered: set[str] = set()
    open_calls: tuple[int, list[str]] | None = None
    seen_conversation = False
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _OPENAI_ROLES:
            yield Violation(index, "role", f"unknown role {role!r}")
            continue
        yield from _unknown_keys(index, message, API_OPENAI)
        content = message.get("content")
        parts = {str(p.get("type")) if isinstance(p, dict) else type(p).__name__ for p in content} if isinstance(content, list) else set()
        for kind in sorted(parts - OPENAI_PART_TYPES):
            yield Violation(index, "unknown-part", f"{kind!r} is not a chat-completions content part type")
        if role in ("system", "developer"):
            if seen_conversation:
                yield Violation(index, "system-first", f"{role} message after the conversation started")
            continue
        seen_conversation = True
        if role == "tool":
            call_id = str(message.get("tool_call_id"))
            if open_calls is None or call_id not in open_calls[1]:
                yield Violation(index, "orphan-tool-result", f"tool message {call_id} answers no call of the preceding assistant message")
            if call_id in answered:
                yield Violation(index, "duplicate-result", f"tool call {call_id} answered twice")
            answered.add(call_id)
            continue
        if open_calls is not None:
            missing = [c for c in open_calls[1] if c not in answered]
            if missing:
                yield Violation(open_calls[0], "unanswered-tool-call", f"tool call {', '.join(missing)} not answered")
            open_calls = None
        calls = [str(c.get("id")) for c in message.get("tool_calls") or () if isinstance(c, dict)] if role == "assistant" else []
        if role == "assistant" and not calls and message.get("content") in (None, "", []):
            yield Violation(index, "empty-assistant", "an assistant message needs content or tool_calls")
        for call_id in calls:
            if call_id in issued:
                yield Violation(index, "duplicate-id", f"tool call id {call_id} issued twice")
            issued.add(call_id)
        open_calls = (index, calls) if calls else None
    # calls of the last assistant message, followed only by tool messages, may still be pending


def validate_messages(messages: Sequence[Any], api: Api) -> tuple[Violation, ...]:
    """Every structural rule of ``api`` that ``messages`` break (empty tuple: valid).

    Parameters
    ----------
    messages : sequence of dict
        The whole request body's messages in file order (OpenAI: system messages included).
    api : {"anthropic", "openai"}

    Returns
    -------
    tuple of Violation
        In message order; ``Violation.index`` is the 0-based position in ``messages``.

    Raises
    ------
    ValueError
        If ``api`` is unknown.

    Examples
    --------
    >>> validate_messages([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "anthropic")
    ()
    >>> [v.rule for v in validate_messages([{"role": "assistant", "content": "hello"}], "anthropic")]
    ['first-role']
    """
    if api == API_ANTHROPIC:
        found = list(_anthropic(messages))
    elif api == API_OPENAI:
        found = list(_openai(messages))
    else:
        raise ValueError(f"unknown api {api!r}: use 'anthropic' or 'openai'")
    if not messages:
        found.append(Violation(0, "empty", "no messages"))
    return tuple(found)
