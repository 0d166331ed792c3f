"""Repairs over messages written in a target API's shape (DESIGN §5.7), made only where the source
breaks the target's rules:

- keys that are not part of the API's message (``usage``, ``metrics``, ``modelInfo``, a reader's
  bookkeeping) are dropped, since both APIs refuse unknown fields; the kept values are unchanged;
- a tool result whose tool call is not in the written conversation (already orphaned in the
  source: records lost from a transcript) becomes plain text saying so, and a tool call whose
  result the source never recorded (not the last message: that is a pending call) gets a result
  saying so, since both APIs refuse either;
- Anthropic: text blocks the Messages API refuses are dropped (agents record them from streamed
  responses): an empty one anywhere ("text content blocks must be non-empty"), and one of only
  white space in a message with no other content ("text content blocks must contain non-whitespace
  text"); a white-space block beside text or a tool call is accepted and kept (requests sent to the
  API: experientiallabs/experiential#804, LibreChat-AI/agents#124). A message left with no content
  at all is dropped; nothing else of the message changes;
- a tool result repeated for one call (the same call answered twice: an agent that logged a
  result twice) is written once, the first one; both APIs refuse a call answered twice;
- OpenAI: an assistant message with neither content nor tool calls is dropped (chat completions
  refuse it; it carries nothing);
- Anthropic: adjacent messages of one role are merged into one (the Messages API itself
  "combines consecutive user or assistant turns"), tool results first, and only the leading
  thinking blocks of the merged assistant message are kept (Anthropic's extended-thinking guide
  allows thinking blocks only at the start; signed blocks are never edited, only dropped whole).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dp_compact.pipeline.types import API_ANTHROPIC, API_OPENAI, Api
from dp_compact.sessions.common import text_and_images

__all__ = [
    "API_MESSAGE_KEYS",
    "MISSING_RESULT_TEXT",
    "ORPHAN_RESULT_PREFIX",
    "anthropic_orphans_as_text",
    "api_keys_only",
    "call_ids",
    "merge_same_role",
    "openai_orphans_as_text",
    "refused_texts",
    "repair_notes",
    "without_duplicate_results",
    "without_empty_assistant",
    "without_empty_text",
]

#: Message keys each API accepts (Anthropic Messages API ``MessageParam``; OpenAI chat-completions
#: message params); any other key is dropped when written.
API_MESSAGE_KEYS = {
    API_ANTHROPIC: frozenset({"role", "content"}),
    API_OPENAI: frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "refusal", "audio", "function_call"}),
}
ORPHAN_RESULT_PREFIX = "[result of tool call {id}, whose call is not in this conversation]"
MISSING_RESULT_TEXT = "[no result was recorded for this tool call]"
_THINKING = frozenset({"thinking", "redacted_thinking"})


def call_ids(messages: Sequence[dict[str, Any]]) -> set[str]:
    """Tool-call ids issued by written messages of either API's shape."""
    ids = {str(c.get("id")) for m in messages for c in m.get("tool_calls") or () if isinstance(c, dict)}
    for m in messages:
        content = m.get("content")
        ids |= {str(b.get("id")) for b in content if isinstance(b, dict) and b.get("type") == "tool_use"} if isinstance(content, list) else set()
    return ids


def _blocks(content: Any) -> list[Any]:
    """Anthropic content as a block list (a string becomes one text block; empty text dropped)."""
    if isinstance(content, list):
        return list(content)
    return [{"type": "text", "text": content}] if isinstance(content, str) and content.strip() else []


def _blank_text(block: Any) -> bool:
    """An Anthropic text block that is empty or holds nothing but white space."""
    return isinstance(block, dict) and block.get("type") == "text" and not str(block.get("text", "")).strip()


def refused_texts(blocks: Sequence[Any]) -> list[str | None]:
    """For each of a message's content ``blocks``, why the Messages API refuses it as a text block
    (the API's words), or None when it accepts it (every block that is not a blank text): an empty
    text is refused anywhere, a white-space one only when no other block of the message has content
    (a tool call, an image or non-blank text does; thinking blocks are not counted). Requests sent to
    the API: experientiallabs/experiential#804, LibreChat-AI/agents#124 (module docstring).

    >>> call = {"type": "tool_use", "id": "t1", "name": "x", "input": {}}
    >>> refused_texts([{"type": "text", "text": "\\n\\n"}, call])
    [None, None]
    >>> refused_texts([{"type": "text", "text": " "}])
    ['text content blocks must contain non-whitespace text']
    >>> refused_texts([{"type": "text", "text": ""}, call])
    ['text content blocks must be non-empty', None]
    """
    blank = [_blank_text(b) for b in blocks]
    if not any(blank):
        return [None] * len(blank)
    content = any(not is_blank and isinstance(b, dict) and b.get("type") not in _THINKING for b, is_blank in zip(blocks, blank, strict=True))
    out: list[str | None] = []
    for block, is_blank in zip(blocks, blank, strict=True):
        if is_blank and block.get("text", "") in ("", None):
            out.append("text content blocks must be non-empty")
        elif is_blank and not content:
            out.append("text content blocks must contain non-whitespace text")
        else:
            out.append(None)
    return out


def without_empty_text(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic messages without the text blocks the API refuses (:func:`refused_texts`), and without
    messages left with no content.

    A message that has no refused text block is returned as the same object.

    >>> without_empty_text([{"role": "assistant", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "ok"}]},
    ...                     {"role": "assistant", "content": [{"type": "text", "text": " "}, {"type": "text", "text": "ok"}]},
    ...                     {"role": "user", "content": "  "}])
    [{'role': 'assistant', 'content': [{'type': 'text', 'text': 'ok'}]}, {'role': 'assistant', 'content': [{'type': 'text', 'text': ' '}, {'type': 'text', 'text': 'ok'}]}]
    """
    out = []
    for message in messages:
        content = message.get("content")
        refused = refused_texts(content) if isinstance(content, list) else ()
        if any(refused):
            content = [b for b, why in zip(content, refused, strict=True) if not why]
            message = {**message, "content": content}
        if (isinstance(content, str) and not content.strip()) or (isinstance(content, list) and not content):
            continue
        out.append(message)
    return out


def _merged(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two adjacent Anthropic messages of one role as one (results first; leading thinking only)."""
    blocks = _blocks(first.get("content")) + _blocks(second.get("content"))
    kind = [b.get("type") if isinstance(b, dict) else None for b in blocks]
    if first.get("role") == "user":
        blocks = [b for b, k in zip(blocks, kind, strict=True) if k == "tool_result"] + [
            b for b, k in zip(blocks, kind, strict=True) if k != "tool_result"
        ]
    else:
        lead = next((i for i, k in enumerate(kind) if k not in _THINKING), len(kind))
        blocks = blocks[:lead] + [b for b, k in zip(blocks[lead:], kind[lead:], strict=True) if k not in _THINKING]
    return {"role": first.get("role"), "content": blocks}


def merge_same_role(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic messages with adjacent messages of one role merged (unchanged when they alternate)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if out and out[-1].get("role") == message.get("role"):
            out[-1] = _merged(out[-1], message)
        else:
            out.append(message)
    return out


def api_keys_only(message: dict[str, Any], api: Api) -> dict[str, Any]:
    """``message`` without keys the API does not accept (the same object when it has none)."""
    allowed = API_MESSAGE_KEYS[api]
    return message if message.keys() <= allowed else {k: v for k, v in message.items() if k in allowed}


def _orphan_text(call_id: str, content: Any) -> str:
    """The text written in place of an orphaned tool result."""
    return ORPHAN_RESULT_PREFIX.format(id=call_id) + "\n" + (text_and_images(content)[0] if content is not None else "")


def _missing_results(ids: Sequence[str]) -> list[dict[str, Any]]:
    """Tool results written for calls whose result the source never recorded."""
    return [{"type": "tool_result", "tool_use_id": i, "content": MISSING_RESULT_TEXT, "is_error": True} for i in ids]


def anthropic_orphans_as_text(messages: list[dict[str, Any]], before: set[str]) -> list[dict[str, Any]]:
    """Pair tool calls and results as the Messages API requires, without touching assistant messages.

    A tool result that does not answer the directly preceding assistant message becomes a text
    block; a tool call the next message leaves unanswered (not the last message: a pending call)
    gets a result saying none was recorded, in the next user message or in one inserted for it.
    """
    out: list[dict[str, Any]] = []
    previous: list[str] = list(before)
    for position, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") == "user":
            blocks = _blocks(content) if isinstance(content, list) else ([] if not isinstance(content, str) else None)
            if blocks is not None:
                results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
                orphans = [b for b in results if b.get("tool_use_id") not in previous]
                answered = {b.get("tool_use_id") for b in results}
                missing = _missing_results(list(dict.fromkeys(i for i in previous if i not in answered)))  # an id issued twice: answered once
                if orphans or missing:
                    texts = [{"type": "text", "text": _orphan_text(str(b.get("tool_use_id")), b.get("content"))} for b in orphans]
                    others = [b for b in blocks if not (isinstance(b, dict) and b.get("type") == "tool_result")]
                    message = {**message, "content": [b for b in results if b not in orphans] + missing + texts + others}
            elif previous:
                message = {**message, "content": [*_missing_results(list(dict.fromkeys(previous))), {"type": "text", "text": content}]}
        elif previous and position > 0:
            out.append({"role": "user", "content": _missing_results(list(dict.fromkeys(previous)))})
        previous = [str(b.get("id")) for b in _blocks(message.get("content")) if isinstance(b, dict) and b.get("type") == "tool_use"] \
            if message.get("role") == "assistant" else []
        out.append(message)
    return out


def openai_orphans_as_text(messages: list[dict[str, Any]], before: set[str]) -> list[dict[str, Any]]:
    """Pair tool calls and ``tool`` messages as chat completions require.

    A ``tool`` message answering no call of the assistant message before it becomes user text; a
    call left unanswered before the next non-``tool`` message gets a ``tool`` message saying no
    result was recorded (a call still pending at the end is left as it is).
    """
    out: list[dict[str, Any]] = []
    open_calls, unanswered = set(before), []
    for message in messages:
        role = message.get("role")
        if role == "tool" and message.get("tool_call_id") in open_calls:
            unanswered = [i for i in unanswered if i != message.get("tool_call_id")]
        else:
            if role == "tool":
                message, role = {"role": "user", "content": _orphan_text(str(message.get("tool_call_id")), message.get("content"))}, "user"
            out.extend({"role": "tool", "tool_call_id": i, "content": MISSING_RESULT_TEXT} for i in unanswered)
            open_calls = call_ids([message]) if role == "assistant" else set()
            unanswered = [str(c.get("id")) for c in message.get("tool_calls") or () if isinstance(c, dict)] if role == "assistant" else []
        out.append(message)
    return out


def _result_ids(message: dict[str, Any]) -> list[str]:
    """Ids answered by one written message (Anthropic ``tool_result`` blocks, an OpenAI ``tool`` message)."""
    if message.get("role") == "tool":
        return [str(message.get("tool_call_id"))]
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list):
        return []
    return [str(b.get("tool_use_id")) for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def without_duplicate_results(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Written messages with every tool result after the first one for its call left out.

    A call issued again later (an id reused by the agent) may be answered again. A user message
    left with no content is dropped; messages without a repeated result are the same objects.

    >>> call = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}]}
    >>> result = {"type": "tool_result", "tool_use_id": "t1", "content": "a"}
    >>> without_duplicate_results([call, {"role": "user", "content": [result, result]}])[1]["content"]
    [{'type': 'tool_result', 'tool_use_id': 't1', 'content': 'a'}]
    """
    out: list[dict[str, Any]] = []
    answered: set[str] = set()
    for message in messages:
        answered -= call_ids([message])  # a call issued (again) may be answered
        ids = _result_ids(message)
        if not ids or not answered.intersection(ids) and len(set(ids)) == len(ids):
            answered.update(ids)
            out.append(message)
            continue
        if message.get("role") == "tool":
            continue  # an OpenAI tool message answering a call already answered
        kept, seen = [], set(answered)
        for block in message["content"]:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                if str(block.get("tool_use_id")) in seen:
                    continue
                seen.add(str(block.get("tool_use_id")))
            kept.append(block)
        answered = seen
        if kept:
            out.append({**message, "content": kept})
    return out


def without_empty_assistant(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages without assistant messages that have neither content nor tool calls."""
    return [
        m for m in messages
        if not (m.get("role") == "assistant" and not m.get("tool_calls") and not m.get("function_call")
                and (m.get("content") is None or (isinstance(m.get("content"), str | list) and not m.get("content"))))
    ]


def repair_notes(before: Sequence[Any], after: Sequence[dict[str, Any]], api: Api) -> tuple[str, ...]:
    """What the repairs of :func:`~dp_compact.pipeline.convert.to_api` changed, for the user's notes.

    ``before``: the raw messages given (``Message.raw``); ``after``: what was written for them.
    Counts blank text blocks dropped (Anthropic), messages dropped as empty, and tool results
    written once for a call answered more than once.
    """
    def blank(messages: Sequence[Any]) -> int:
        return sum(1 for m in messages if isinstance(m, dict) and isinstance(m.get("content"), list)
                   for b in m["content"] if _blank_text(b))

    def results(messages: Sequence[Any]) -> int:
        return sum(len(_result_ids(m)) for m in messages if isinstance(m, dict))

    notes = []
    dropped_blocks = blank(before) - blank(after) if api == API_ANTHROPIC else 0
    if dropped_blocks > 0:
        notes.append(f"{dropped_blocks} empty or white-space-only text block(s) dropped (the Messages API refuses them: an empty one anywhere,"
                     " a white-space one in a message with nothing else)")
    empty = sum(1 for m in before if isinstance(m, dict) and m.get("role") == "assistant" and m.get("content") in (None, "", [])
                and not m.get("tool_calls"))
    if empty:
        notes.append(f"{empty} empty assistant message(s) dropped (they carry nothing; the APIs refuse them)")
    duplicates = results(before) - results(after)
    if duplicates > 0:
        notes.append(f"{duplicates} repeated tool result(s) dropped: each call's first result is kept (a call answered twice is refused)")
    return tuple(notes)
