"""Helpers shared by the session readers: content blocks, tool-result links, building a Session.

The format-neutral rules (summary detection, counts of user turns and LLM calls) live in
:mod:`dp_compact.conversation` and are re-exported here for the readers.
"""

from __future__ import annotations

import json

from collections.abc import Iterable, Sequence
from dataclasses import replace
from itertools import chain, repeat
from operator import attrgetter
import re
from typing import Any

import orjson

from dp_compact.measure.images import find_blocks
from dp_compact.text.summary_text import (
    recorded_prefix,
    recorded_usage,
    recorded_write_share,
    summary_prefix,
    summary_usage,
    summary_write_share,
)
from dp_compact.conversation import (
    SUMMARY_PREFIXES,
    Message,
    Session,
    Usage,
    count_llm_calls,
    count_user_turns,
    is_summary_text,
    last_own_summary,
    recorded_history,
    summary_counts,
    summary_kept,
    summary_recorded,
    summary_tool,
)

__all__ = [
    "IMAGE_TYPES",
    "SUMMARY_PREFIXES",
    "build_session",
    "count_llm_calls",
    "count_user_turns",
    "summary_counts",
    "summary_kept",
    "summary_recorded",
    "summary_usage",
    "count_images",
    "dumps",
    "json_size",
    "is_summary_text",
    "recorded_history",
    "link_tool_results",
    "relink",
    "summary_tool",
    "text_and_images",
]

#: Content-block types that carry an image or other binary payload (Anthropic, OpenAI chat and
#: Responses, Gemini ``inlineData``); counted in ``Message.images``, never put into text.
IMAGE_TYPES = frozenset({"image", "document", "input_image", "image_url", "input_file", "file", "input_audio"})
_BINARY_KEYS = frozenset({"inlineData", "inline_data", "image_url", "source", "data", "fileData", "file_data"})


def dumps(value: object) -> str:
    """Compact JSON text of ``value`` (tool-call arguments given as objects); an integer beyond
    64 bits, which orjson refuses, is written by the standard library instead.

    >>> dumps({"n": 2**64 + 1})
    '{"n":18446744073709551617}'
    """
    return value if isinstance(value, str) else _json_bytes(value).decode()


def _json_bytes(value: object) -> bytes:
    """:func:`dumps` of ``value`` as UTF-8 bytes (orjson's own output, not decoded and encoded again)."""
    if isinstance(value, str):
        return value.encode()
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode()


def json_size(value: object) -> int:
    """``len(dumps(value).encode())``, bytes: the size of ``value`` as compact UTF-8 JSON (a record's size),
    without decoding orjson's bytes to text and encoding them again.

    >>> json_size({"a": "é"}) == len(dumps({"a": "é"}).encode())
    True
    """
    return len(_json_bytes(value))


def _is_image(block: dict[str, Any]) -> bool:
    """True for a block that holds an image or file rather than text."""
    kind = block.get("type")
    return (type(kind) is str and kind in IMAGE_TYPES) or "inlineData" in block or "inline_data" in block


def count_images(value: Any) -> int:
    """Image/file blocks anywhere inside ``value`` (nested lists and ``content`` included)."""
    return len(find_blocks(value, lambda block: block if _is_image(block) else None))


def text_and_images(content: Any) -> tuple[str, int]:
    """Visible text and image count of a message or tool-result ``content`` of any shape.

    Parameters
    ----------
    content : str, list, dict or None
        A string, a list of blocks (``text``/``output_text``/``input_text``, images, nested
        ``content`` lists) or any other JSON value.

    Returns
    -------
    tuple[str, int]
        Text blocks joined by newlines (other blocks as compact JSON without their binary
        fields) and the number of image/file blocks found at any depth.
    """
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    if isinstance(content, dict):
        content = [content]
    if not isinstance(content, list):
        return dumps(content), 0
    texts: list[str] = []
    images = 0
    for block in content:
        if isinstance(block, str):
            texts.append(block)
        elif not isinstance(block, dict):
            texts.append(dumps(block))
        elif _is_image(block):
            images += 1
        elif isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif isinstance(block.get("content"), (str, list)):
            text, n = text_and_images(block["content"])
            texts.append(text)
            images += n
        else:
            images += count_images(block)
            texts.append(dumps({k: v for k, v in block.items() if k != "type" and k not in _BINARY_KEYS}))
    return "\n".join(texts), images


def link_tool_results(messages: Sequence[Message]) -> list[Message]:
    """Repair tool-call linking so every tool result follows the message holding its call.

    Two source quirks are fixed, leaving ``raw`` untouched:

    - a tool message written *before* the assistant message holding its call (converters and
      streamed tool execution) is moved to right after that assistant message and the results
      already following it;
    - a call id reused by a later call (SWE-agent replays) is renamed ``<id>#<n>`` in the later
      call and in the results after it, so each result names exactly one call.

    Parameters
    ----------
    messages : sequence of Message
        In source order.

    Returns
    -------
    list of Message
        The same messages, reordered and renamed only where needed.
    """
    later: dict[str, int] = {}
    calls = 0
    early = False  # a result whose call is not before it: it may have to move (the second pass)
    for index, message in enumerate(messages):  # plain loops: one pass over every message of a session
        results = message.tool_results
        if results and not early:
            for result in results:
                if result.call_id not in later:
                    early = True
                    break
        made = message.tool_calls
        if made:
            calls += len(made)
            for call in made:
                if call.id not in later:
                    later[call.id] = index
    ordered = _results_after_their_calls(messages, later) if early else list(messages)  # else the order stands
    return ordered if calls == len(later) else _unique_call_ids(ordered)  # no id used twice: nothing to rename


def _results_after_their_calls(messages: Sequence[Message], later: dict[str, int]) -> list[Message]:
    """The second pass of :func:`link_tool_results`: each tool message whose calls all come later
    (``later``: where each call id is first made) moved right after the first message holding one
    of them and the results already following it."""
    ordered: list[Message] = []
    deferred: dict[int, list[Message]] = {}
    seen: set[str] = set()
    for index, message in enumerate(messages):
        if message.tool_results:
            ids = [r.call_id for r in message.tool_results]
            waiting = [later[c] for c in ids if c not in seen and c in later and later[c] > index]
            if message.role == "tool" and waiting and len(waiting) == len(ids):
                deferred.setdefault(min(waiting), []).append(message)
                continue
        ordered.append(message)
        if message.tool_calls:
            seen.update([call.id for call in message.tool_calls])
        if deferred and index in deferred:
            ordered.extend(deferred.pop(index))
    for rest in deferred.values():
        ordered.extend(rest)
    return ordered


def relink(messages: Sequence[Message], live_start: int) -> list[Message]:
    """:func:`link_tool_results` on the part before ``live_start`` and on the live part apart.

    Keeps ``live_start`` valid: no message crosses a compaction marker.
    """
    return link_tool_results(messages[:live_start]) + link_tool_results(messages[live_start:])


def _unique_call_ids(messages: list[Message]) -> list[Message]:
    """Rename reused call ids (``id#2``, ...) and point results at the latest call of that id."""
    current: dict[str, str] = {}
    uses: dict[str, int] = {}
    out: list[Message] = []
    changed = False
    for message in messages:
        calls = message.tool_calls
        if message.tool_results and any(current.get(r.call_id, r.call_id) != r.call_id for r in message.tool_results):
            results = tuple(replace(r, call_id=current.get(r.call_id, r.call_id)) for r in message.tool_results)
            message, changed = replace(message, tool_results=results), True
        if calls:
            renamed = []
            for call in calls:
                uses[call.id] = uses.get(call.id, 0) + 1
                new_id = call.id if uses[call.id] == 1 else f"{call.id}#{uses[call.id]}"
                current[call.id] = new_id
                renamed.append(call if new_id == call.id else replace(call, id=new_id))
            if any(a is not b for a, b in zip(renamed, calls, strict=True)):
                message, changed = replace(message, tool_calls=tuple(renamed)), True
        out.append(message)
    return out if changed else list(messages)


#: Header of a preview ``dp-compact shrink`` wrote, and the statement its first one carries
#: (:func:`dp_compact.pipeline.shrink.shrunk_statement`).
_SHRUNK_HEADER = "[tool result shrunk by dp-compact:"
#: A cleared tool result's placeholder (:data:`dp_compact.measure.clearing.CLEARED_PREFIX`): the first one
#: of a cleared file carries the same statement as a shrunk file's first preview.
_STATED_HEADERS = (_SHRUNK_HEADER, "[cleared by dp-compact:")
_SHRUNK_STATEMENT = re.compile(r"; conversation when shrunk: ([^\]\n]*)\]")
_SHRUNK_CONTEXT = re.compile(r"^context (\d[\d,]*) tokens in (\d+) messages$")
_SHRUNK_TOTALS = re.compile(r"^history (\d[\d,]*) user turns, (\d[\d,]*) LLM calls, (\d[\d,]*) compactions$")


def shrunk_recorded(text: str) -> dict[str, Any]:
    """What the first preview of a file ``dp-compact shrink`` wrote states about its conversation:
    any of ``model``, ``context_window``, ``recorded_context`` (tokens, messages),
    ``recorded_avg_tokens``, ``recorded_token_ratio``, ``recorded_prefix_tokens`` and
    ``recorded_totals`` (user turns, LLM calls, compactions of the whole conversation); empty for
    any other text.

    >>> shrunk_recorded("[tool result shrunk by dp-compact: 900 characters, 3 lines of text; conversation when shrunk:"
    ...                 " model m-1; window 1,000,000 tokens; context 12,345 tokens in 9 messages; avg 4,100 prompt"
    ...                 " tokens per call]\\nfirst: …")
    {'model': 'm-1', 'context_window': 1000000, 'recorded_context': (12345, 9), 'recorded_avg_tokens': 4100.0}
    """
    found = _SHRUNK_STATEMENT.search(text[:1000]) if text.startswith(_STATED_HEADERS) else None
    recorded: dict[str, Any] = {}
    for part in (found.group(1).split("; ") if found else ()):
        if part.startswith("model "):
            recorded["model"] = part.removeprefix("model ").strip()
        elif part.startswith("window ") and (digits := part.split(" ")[1].replace(",", "")).isdigit():
            recorded["context_window"] = int(digits)
        elif context := _SHRUNK_CONTEXT.match(part):
            recorded["recorded_context"] = (int(context.group(1).replace(",", "")), int(context.group(2)))
        elif totals := _SHRUNK_TOTALS.match(part):
            recorded["recorded_totals"] = tuple(int(g.replace(",", "")) for g in totals.groups())
    avg, ratio = recorded_usage(found.group(1)) if found else (None, None)
    if avg:
        recorded["recorded_avg_tokens"] = avg
    if ratio:
        recorded["recorded_token_ratio"] = ratio
    if found and (prefix := recorded_prefix(found.group(1))):
        recorded["recorded_prefix_tokens"] = prefix
    if found and (share := recorded_write_share(found.group(1))) is not None:
        recorded["recorded_write_1h_share"] = share
    return recorded


_RESULTS, _TEXT = attrgetter("tool_results"), attrgetter("text")


def _last_shrunk(messages: Sequence[Message], after: int) -> tuple[int, dict[str, Any]] | None:
    """Index and statement of the last preview statement in ``messages[after:]``, if any."""
    texts = map(_TEXT, chain.from_iterable(map(_RESULTS, messages[after:])))  # every tool result's text, without a Python loop
    if not any(map(str.startswith, texts, repeat(_STATED_HEADERS))):
        return None
    for index in range(len(messages) - 1, after - 1, -1):
        results = messages[index].tool_results
        if results:
            for result in results:
                if result.text.startswith(_STATED_HEADERS) and (recorded := shrunk_recorded(result.text)):
                    return index, recorded
    return None


def build_session(
    *,
    path: str,
    format: str,
    messages: Sequence[Message],
    usage: Iterable[Usage] = (),
    live_start: int = 0,
    compactions: int = 0,
    llm_calls: int | None = None,
    conversation_start: int = 0,
    **extra: object,
) -> Session:
    """A :class:`Session` whose live conversation is ``messages[live_start:]``.

    ``Session.user_turns`` counts the user turns of the conversation, ``messages`` from
    ``conversation_start`` on (0: the whole file, compacted parts included), by the one rule,
    :attr:`Message.is_user_turn` (:func:`~dp_compact.conversation.count_user_turns`): a reader
    says what is typed by giving each message its ``kind``. ``conversation_start`` is where a
    reader saw another conversation begin in the same file (a restart, not a compaction: what
    came before is no part of this one, nor of its counts). ``llm_calls`` defaults to the number
    of usage records, else of the conversation's assistant messages. ``Session.history`` holds
    all of ``messages``.

    Raises ValueError when ``conversation_start`` is after ``live_start``.
    """
    if not 0 <= conversation_start <= live_start:
        raise ValueError(f"conversation_start {conversation_start} is not within 0..live_start ({live_start})")
    usage = tuple(usage)
    all_messages = tuple(messages)
    conversation = all_messages[conversation_start:]
    own = last_own_summary(conversation)
    last = None if own is None else conversation_start + own
    user_turns = count_user_turns(conversation, last=own)
    if llm_calls is None:
        llm_calls = len(usage) or count_llm_calls(conversation, last=own)
    earlier, since = 0, None
    if last is not None:
        stated = summary_counts(all_messages[last].text)
        compactions = max(compactions, stated[3])
        earlier = stated[0] if last >= live_start else 0
        kept = summary_kept(all_messages[last].text) if last >= live_start else None
        since = None if kept is None else len(all_messages) - last - 1 - kept
        if last >= live_start:  # what the conversation ran with, where the file records nothing
            model, window = summary_recorded(all_messages[last].text)
            if model and not extra.get("model"):
                extra["model"] = model
            if window and not extra.get("context_window"):
                extra["context_window"], extra["window_source"] = window, "the summary of an earlier dp-compact compaction"
            extra["recorded_avg_tokens"], extra["recorded_token_ratio"] = summary_usage(all_messages[last].text)
            extra["recorded_prefix_tokens"] = summary_prefix(all_messages[last].text)
            extra["recorded_write_1h_share"] = summary_write_share(all_messages[last].text)
    after_summary = live_start if last is None or last < live_start else last + 1
    shrunk = _last_shrunk(all_messages, after_summary)
    if shrunk is not None:  # a file dp-compact shrink wrote: what the conversation ran with, where the file records nothing
        index, recorded = shrunk
        totals = recorded.pop("recorded_totals", None)
        if totals is not None:  # t, calls and c of the whole conversation, plus what was appended since
            stated = recorded.get("recorded_context", (0, len(all_messages) - live_start))[1]
            appended = all_messages[live_start + stated:]
            user_turns = totals[0] + count_user_turns(appended)
            llm_calls = totals[1] + count_llm_calls(appended)
            compactions = max(compactions, totals[2])
        for key, value in recorded.items():
            if not extra.get(key):
                extra[key] = value
                if key == "context_window":
                    extra["window_source"] = "the statement of an earlier dp-compact shrink"
    return Session(
        path=path,
        format=format,
        messages=all_messages[live_start:],
        usage=usage,
        user_turns=user_turns,
        llm_calls=llm_calls,
        compactions=compactions,
        earlier_messages=earlier,
        messages_since_compaction=since,
        history=all_messages,
        **extra,  # type: ignore[arg-type]
    )


