"""Messages in a target API's shape (DESIGN §5.7): Anthropic Messages or OpenAI chat.

A message whose ``raw`` dict is already a well-formed message of the target API is written as
it is (the same dict, so a kept tail stays byte-for-byte the same values). Otherwise it is
converted from its ``raw`` when that is a well-formed message of the other API (Anthropic
blocks ↔ OpenAI ``tool_calls`` / ``tool`` messages / content parts, images kept), or rebuilt
from the normalized fields (text, tool calls, tool results; images are lost) when the source
is neither (Gemini ``parts``, SWE-agent's stringified ``tool_calls``).

Repairs make a source that breaks the target's rules valid, and only then: ids a reader renamed
to make them unique (``<id>#2``: SWE-agent replays, tau-bench) are written renamed when the
written messages would otherwise issue one id twice, and a tool result a reader linked by
position (Cline's API history answers a ``tool_use`` with a plain user message) is written as a
real ``tool_result`` / ``tool`` message. The repairs over the written messages (unknown keys,
orphaned and missing tool results, adjacent messages of one role) are
:mod:`dp_compact.pipeline.repairs`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from dp_compact.pipeline.repairs import (
    API_MESSAGE_KEYS,
    MISSING_RESULT_TEXT,
    ORPHAN_RESULT_PREFIX,
    anthropic_orphans_as_text,
    api_keys_only,
    call_ids,
    merge_same_role,
    openai_orphans_as_text,
    without_duplicate_results,
    without_empty_assistant,
    without_empty_text,
)
from dp_compact.pipeline.types import API_ANTHROPIC, API_OPENAI, Api
from dp_compact.sessions.common import text_and_images
from dp_compact.conversation import Message

__all__ = [
    "API_MESSAGE_KEYS",
    "EMPTY_TEXT",
    "MISSING_RESULT_TEXT",
    "ORPHAN_RESULT_PREFIX",
    "SYSTEM_ROLES",
    "call_ids",
    "merge_same_role",
    "message_to_api",
    "raw_shape",
    "system_messages_for",
    "to_api",
    "well_formed",
]

#: Text written where a target needs some text and the source had none.
EMPTY_TEXT = "(empty)"
SYSTEM_ROLES = frozenset({"system", "developer"})
_ANTHROPIC_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking", "server_tool_use", "document"})
_OPENAI_PARTS = frozenset({"image_url", "input_audio", "file", "refusal"})


def raw_shape(raw: Any) -> Api | None:
    """The API whose shape ``raw`` has: ``"anthropic"``, ``"openai"``, or None when valid in both."""
    if not isinstance(raw, dict):
        return None
    role = raw.get("role")
    if (type(role) is str and role in SYSTEM_ROLES | {"tool", "function"}) or "tool_calls" in raw or "tool_call_id" in raw:
        return API_OPENAI
    content = raw.get("content")
    kinds = {b.get("type") for b in content if isinstance(b, dict) and type(b.get("type")) is str} if isinstance(content, list) else set()
    if kinds & _ANTHROPIC_BLOCKS or "image" in kinds:  # OpenAI's image part is "image_url"
        return API_ANTHROPIC
    if kinds & _OPENAI_PARTS or (content is None and raw.get("role") == "assistant"):
        return API_OPENAI
    return None


_RENAME_SUFFIX = re.compile(r"#\d+$")


def _written_id(call_id: str, reused: set[str]) -> str:
    """A call id as written: the reader's ``id#n`` rename only where the source id repeats."""
    base = _RENAME_SUFFIX.sub("", call_id)
    return call_id if base in reused else base


def _reused_ids(messages: Sequence[Message]) -> set[str]:
    """Source call ids issued more than once among ``messages`` (the reader renamed the repeats ``id#n``)."""
    seen: set[str] = set()
    reused: set[str] = set()
    for call in (c for m in messages for c in m.tool_calls):
        base = _RENAME_SUFFIX.sub("", call.id)
        (reused if base in seen else seen).add(base)
    return reused


def _renamed(raw: dict[str, Any], message: Message, reused: set[str]) -> dict[str, Any]:
    """``raw`` with renamed call ids (``id#2``) written as renamed where the written ids repeat; else ``raw``."""
    call_ids = [c.id for c in message.tool_calls]
    result_ids = [r.call_id for r in message.tool_results]
    if not any(_written_id(i, reused) != _RENAME_SUFFIX.sub("", i) for i in call_ids + result_ids):
        return raw
    if isinstance(raw.get("tool_calls"), list) and len(raw["tool_calls"]) == len(call_ids):
        calls = [{**c, "id": new} if isinstance(c, dict) else c for c, new in zip(raw["tool_calls"], call_ids, strict=True)]
        raw = {**raw, "tool_calls": calls}
    if "tool_call_id" in raw and len(result_ids) == 1:
        raw = {**raw, "tool_call_id": result_ids[0]}
    content = raw.get("content")
    if isinstance(content, list):
        ids = {"tool_use": iter(call_ids), "tool_result": iter(result_ids)}
        blocks = []
        for block in content:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in ids:
                key = "id" if kind == "tool_use" else "tool_use_id"
                block = {**block, key: next(ids[kind], block.get(key))}
            blocks.append(block)
        raw = {**raw, "content": blocks}
    return raw


def _image_part(block: dict[str, Any]) -> dict[str, Any] | None:
    """An Anthropic image block as an OpenAI ``image_url`` part (None for other sources)."""
    source = block.get("source") or {}
    if source.get("type") == "base64":
        return {"type": "image_url", "image_url": {"url": f"data:{source.get('media_type')};base64,{source.get('data')}"}}
    if source.get("type") == "url":
        return {"type": "image_url", "image_url": {"url": source.get("url")}}
    return None


def _image_block(part: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI ``image_url`` part as an Anthropic image block."""
    url = str((part.get("image_url") or {}).get("url", ""))
    if url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _text(value: Any) -> str:
    """The visible text of a content value (string or blocks)."""
    return text_and_images(value)[0]


def _anthropic_to_openai(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """One Anthropic message as OpenAI chat messages (tool results become ``tool`` messages)."""
    content = raw.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
    if raw.get("role") == "assistant":
        text = "\n".join(b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text").strip()
        calls = [
            {"id": b["id"], "type": "function", "function": {"name": b.get("name", ""), "arguments": json.dumps(b.get("input", {}), ensure_ascii=False)}}
            for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
        return [{"role": "assistant", "content": text or (None if calls else EMPTY_TEXT), **({"tool_calls": calls} if calls else {})}]
    out: list[dict[str, Any]] = [
        {"role": "tool", "tool_call_id": b.get("tool_use_id", ""), "content": _text(b.get("content")) or EMPTY_TEXT}
        for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    parts: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and block.get("text"):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and (part := _image_part(block)) is not None:
            parts.append(part)
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "\n".join(p["text"] for p in parts) if only_text else parts})
    return out


def _tool_input(arguments: Any) -> dict[str, Any]:
    """Anthropic ``tool_use.input`` from OpenAI arguments: the JSON object, else ``{"arguments": text}``."""
    if isinstance(arguments, dict):
        return arguments
    try:
        value = json.loads(arguments) if arguments else {}
    except (TypeError, ValueError):
        value = None
    return value if isinstance(value, dict) else {"arguments": arguments}


def _openai_content_blocks(content: Any) -> list[dict[str, Any]]:
    """OpenAI content (string or parts) as Anthropic text/image blocks, empty text dropped."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content.strip() else []
    blocks = []
    for part in content or ():
        if isinstance(part, dict) and part.get("type") == "image_url":
            blocks.append(_image_block(part))
        elif isinstance(part, dict) and str(part.get("text", "")).strip():
            blocks.append({"type": "text", "text": part["text"]})
    return blocks


def _openai_to_anthropic(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """One OpenAI chat message as Anthropic messages (system messages give none)."""
    role = raw.get("role")
    if role in SYSTEM_ROLES:
        return []
    if role in ("tool", "function"):
        result = {"type": "tool_result", "tool_use_id": raw.get("tool_call_id", raw.get("name", "")), "content": _text(raw.get("content"))}
        return [{"role": "user", "content": [result]}]
    blocks = _openai_content_blocks(raw.get("content"))
    if role == "assistant":
        for call in raw.get("tool_calls") or ():
            function = call.get("function") or {}
            blocks.append({"type": "tool_use", "id": call.get("id", ""), "name": function.get("name", ""), "input": _tool_input(function.get("arguments"))})
    return [{"role": "user" if role == "user" else "assistant", "content": blocks or [{"type": "text", "text": EMPTY_TEXT}]}]


def _linked_results(message: Message, raw: Any, api: Api, reused: set[str]) -> list[dict[str, Any]]:
    """Tool results written as real ones: from a plain user message linked by position, or from the fields."""
    ids = [_written_id(r.call_id, reused) for r in message.tool_results]
    if isinstance(raw, dict):  # one plain message answers the calls: its content goes to the first
        contents = [raw.get("content") if n == 0 else f"(answered with {ids[0]})" for n in range(len(ids))]
    else:
        contents = [r.text for r in message.tool_results]
    if api == API_OPENAI:
        return [{"role": "tool", "tool_call_id": i, "content": _text(c)} for i, c in zip(ids, contents, strict=True)]
    blocks = [
        {"type": "tool_result", "tool_use_id": i, "content": c, **({"is_error": True} if r.is_error else {})}
        for i, c, r in zip(ids, contents, message.tool_results, strict=True)
    ]
    return [{"role": "user", "content": blocks}]


def _from_fields(message: Message, api: Api, reused: set[str]) -> list[dict[str, Any]]:
    """``message`` rebuilt from its normalized fields (no usable ``raw``)."""
    if message.role == "tool":
        return _linked_results(message, None, api, reused)
    calls = [(_written_id(c.id, reused), c) for c in message.tool_calls]
    if api == API_OPENAI:
        wire = [{"id": i, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}} for i, c in calls]
        text = message.text or (None if wire else EMPTY_TEXT)
        return [{"role": message.role, "content": text, **({"tool_calls": wire} if wire else {})}]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message.text}] if message.text.strip() else []
    blocks += [{"type": "tool_use", "id": i, "name": c.name, "input": _tool_input(c.arguments)} for i, c in calls]
    return [{"role": message.role, "content": blocks or [{"type": "text", "text": EMPTY_TEXT}]}]


def _well_formed_openai(raw: dict[str, Any]) -> bool:
    """True when ``raw`` is a chat-completions message as the API takes it (roles, ids, call shapes)."""
    role, content = raw.get("role"), raw.get("content")
    if role not in SYSTEM_ROLES | {"user", "assistant", "tool"} or not isinstance(content, (str, list)):
        if not (role == "assistant" and content is None and "content" in raw):
            return False
    if role == "tool" and not isinstance(raw.get("tool_call_id"), str):
        return False
    calls = raw.get("tool_calls")
    if calls is None:
        return True
    return isinstance(calls, list) and all(
        isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("function"), dict)
        and isinstance(c["function"].get("name"), str) and isinstance(c["function"].get("arguments"), str)
        for c in calls
    )


def _well_formed_anthropic(raw: dict[str, Any]) -> bool:
    """True when ``raw`` is a Messages API message (role, content blocks with their ids)."""
    content = raw.get("content")
    if raw.get("role") not in ("user", "assistant") or not isinstance(content, (str, list)):
        return False
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            return False
        if block["type"] == "tool_use" and not (isinstance(block.get("id"), str) and isinstance(block.get("input"), dict)):
            return False
        if block["type"] == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            return False
    return True


def well_formed(raw: Any, api: Api) -> bool:
    """True when ``raw`` can be written as it is for ``api``: in its shape and structurally sound."""
    if not isinstance(raw, dict) or raw_shape(raw) not in (None, api):
        return False
    return _well_formed_openai(raw) if api == API_OPENAI else _well_formed_anthropic(raw)


def _message_to_api(message: Message, api: Api, issued: set[str], reused: set[str]) -> list[dict[str, Any]]:
    """The target-shape messages for one message; ``issued``: call ids written so far; ``reused``: repeated ids."""
    raw = message.raw
    if not isinstance(raw, dict):
        return _from_fields(message, api, reused)
    raw = _renamed(raw, message, reused)
    shape = raw_shape(raw)
    if message.role == "tool" and shape is None and well_formed(raw, api):  # linked by position by the reader
        linked = all(_written_id(r.call_id, reused) in issued for r in message.tool_results)
        return _linked_results(message, raw, api, reused) if linked else [raw]
    if well_formed(raw, api):
        return [raw]
    if shape is not None and shape != api and well_formed(raw, shape):
        return _anthropic_to_openai(raw) if api == API_OPENAI else _openai_to_anthropic(raw)
    return _from_fields(message, api, reused)


def message_to_api(message: Message, api: Api, *, issued: set[str] | frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """One message in ``api``'s shape, without the repairs that look across messages.

    Parameters
    ----------
    message : Message
    api : {"anthropic", "openai"}
    issued : set of str
        Tool-call ids already written before it (a position-linked result is then written as a
        real tool result).

    Returns
    -------
    list of dict
        The message's raw dict when it is in shape (keys the API refuses dropped), else its
        conversion; an OpenAI tool message with text may become two messages.
    """
    return [api_keys_only(m, api) for m in _message_to_api(message, api, set(issued), set())]


def to_api(messages: Sequence[Message], api: Api, *, issued: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """``messages`` as dicts in ``api``'s shape, in order (see the module docstring).

    Parameters
    ----------
    messages : sequence of Message
        A tail (or a whole conversation) as read.
    api : {"anthropic", "openai"}
    issued : sequence of dict
        Messages already written before these (their tool calls count as issued).

    Returns
    -------
    list of dict
        Raw dicts that are already in shape are returned as the same objects.
    """
    out: list[dict[str, Any]] = []
    ids = call_ids(issued)
    reused = _reused_ids(messages)
    for message in messages:
        converted = _message_to_api(message, api, ids, reused)
        ids |= call_ids(converted)
        out.extend(converted)
    out = [api_keys_only(m, api) for m in out]
    if api == API_ANTHROPIC:
        # Blank text last but for merging: a repeated result dropped may leave a white-space block alone in its message.
        return anthropic_orphans_as_text(merge_same_role(without_empty_text(without_duplicate_results(out))), call_ids(issued[-1:]))
    return openai_orphans_as_text(without_duplicate_results(without_empty_assistant(out)), call_ids(issued))


def system_messages_for(system_raw: Sequence[Any], system_text: str, api: Api) -> list[dict[str, Any]]:
    """The session's system messages to write before the conversation (OpenAI only; Anthropic: none).

    The readers' raw system/developer messages in order, unchanged but for keys the API does not
    accept; else one system message holding ``system_text`` when the session has one.
    """
    if api != API_OPENAI:
        return []
    raws = [api_keys_only(m, API_OPENAI) for m in system_raw if isinstance(m, dict)]
    if raws:
        return raws
    return [{"role": "system", "content": system_text}] if system_text else []
