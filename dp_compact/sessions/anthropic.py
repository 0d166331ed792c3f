"""Anthropic Messages API lists: one message per line, or one JSON array (DESIGN §4).

Also reads Cline's ``api_conversation_history`` (tool results returned as plain text in the
user message after a ``tool_use``, linked by position) and the seed agent's conversation file
(real user input has string content; its ``stats.json`` is passed separately).

Which user message is a tool result: one with ``tool_result`` blocks, or, in a Cline history, the
plain user message right after a ``tool_use`` that opens with Cline's result line
``[<that tool's name> ...] Result:``. Every other user message is a user turn
(:attr:`Message.is_user_turn`), even right after a tool call left unanswered there: an
interrupted call, or a server tool (``server_tool_use``, ``mcp_tool_use``) whose result block
(``web_search_tool_result``, ``mcp_tool_result``, ...) the API put in the same assistant
message, which is then a complete API round (Anthropic refuses a client ``tool_result`` for a
``srvtoolu_`` id). The server tool's result is part of that assistant message: its content
(search results' titles and URLs, fetched text, code output) is counted in the message's text
as compact JSON, without the fields the API keeps opaque (``encrypted_content``,
``encrypted_index``: the encrypted page content is billed by the provider but has no size we
can read, so the measured token ratio absorbs it). A fetched document inside it is counted as a
document (:mod:`dp_compact.measure.documents`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from dp_compact.sessions.common import IMAGE_TYPES as IMAGE_BLOCKS
from dp_compact.sessions.common import build_session, dumps, summary_tool, text_and_images
from dp_compact.conversation import (
    LONGEST_MARKER, MARKER_WORDS, Message, RecordedCompaction, Session, ToolCall, ToolResult, Usage, message_kind, new_message,
    not_marker, raw_value, shape_if_kept, unmarked,
)
from dp_compact.sessions.source import SNIFF_RECORDS, Record, Source, each_record
from dp_compact.sessions.usage import token_count, usage_from_api

__all__ = [
    "DESCRIPTION", "FORMAT", "SERVER_CALL_TYPES", "anthropic_message", "answers_by_position", "is_server_result",
    "message_from_anthropic", "read", "server_result_text", "sniff",
]

FORMAT = "anthropic"
DESCRIPTION = "Anthropic messages (one {role, content} per line or a JSON array; Cline API history; seed agent)"

_IMAGE_TYPES = frozenset({"image", "document", "input_image", "image_url"})
# A block whose every value message_from_anthropic sees holds a marker of an image or document
# only as one of those values (conversation.shape_if_kept): a text with the keys {type, text}, a
# tool call with {type, id, name, input}, a tool result given as a string with some of {type,
# tool_use_id, content, is_error}. The reader checks the keys by counting them, and each string
# against the markers inline (conversation.not_marker: longer than LONGEST_MARKER, or none of MARKER_WORDS).
#: Tool calls the API runs itself and answers inside the same assistant message (Messages API
#: "Server tools"; MCP connector ``mcp_tool_use`` / ``mcp_tool_result``): never answered by a user message.
SERVER_CALL_TYPES = frozenset({"server_tool_use", "mcp_tool_use"})
#: The line Cline opens a tool result with, ``[<tool name> for '<argument>'] Result:`` or
#: ``[<tool name>] Result:`` (Cline ``presentAssistantMessage``; shared/sessions/FORMATS.md (d)).
_CLINE_RESULT = re.compile(r"\[([\w-]+)(?: for .*?)?\] Result:", re.S)


#: Fields of a server tool's result the API keeps opaque (sent back as they are, never read).
_OPAQUE_KEYS = frozenset({"encrypted_content", "encrypted_index", "tool_use_id"})


def is_server_result(kind: Any) -> bool:
    """A server tool's result block (``web_search_tool_result``, ``code_execution_tool_result``,
    ``mcp_tool_result``, ``advisor_tool_result``, ...): every ``*_tool_result`` type but ``tool_result``
    itself. The Messages API names each server tool's result so, and a new server tool's result
    is recognised without a list to keep up to date.

    >>> is_server_result("advisor_tool_result"), is_server_result("tool_result"), is_server_result(None)
    (True, False, False)
    """
    return isinstance(kind, str) and kind.endswith("_tool_result")


def server_result_text(block: dict[str, Any]) -> tuple[str, int]:
    """Counted text and image count of a server tool's result block (module docstring).

    Parameters
    ----------
    block : dict
        A ``*_tool_result`` block of an assistant message.

    Returns
    -------
    tuple[str, int]
        Its ``content`` as compact JSON without the opaque fields (``_OPAQUE_KEYS``) and
        without image and document blocks, which are counted in the second value instead.

    >>> server_result_text({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
    ...     {"type": "web_search_result", "url": "https://a.org/", "title": "A", "encrypted_content": "Eo8C", "page_age": None}]})
    ('[{"type":"web_search_result","url":"https://a.org/","title":"A","page_age":null}]', 0)
    """
    images = 0

    def prune(value: Any) -> Any:
        nonlocal images
        if isinstance(value, list):
            kept = [prune(v) for v in value]
            return [v for v in kept if v is not None]
        if not isinstance(value, dict):
            return value
        kind = value.get("type")
        if type(kind) is str and kind in IMAGE_BLOCKS:
            images += 1
            return None
        return {k: prune(v) for k, v in value.items() if k not in _OPAQUE_KEYS}

    return dumps(prune(block.get("content"))), images


def _result_text(content: Any) -> tuple[str, int]:
    """Text and image count of a ``tool_result`` content (a string or blocks, images at any depth)."""
    return text_and_images(content)


def message_from_anthropic(obj: dict[str, Any], *, line: int = 0, nbytes: int = 0, lines: int = 1) -> Message:
    """A :class:`Message` from an Anthropic ``{role, content}`` dict (``line``: its 1-based source
    line; ``nbytes``, ``lines``: the bytes and lines it was read from).

    Raises
    ------
    ValueError
        If ``role`` is not user/assistant or ``content`` is neither a string nor a list.
    """
    return anthropic_message(obj, line, nbytes, lines)


#: The rules a message's role and content break, as the errors say them (:func:`anthropic_message`, the reader).
_ROLE_RULE = "role must be 'user' or 'assistant', not {!r}"
_CONTENT_RULE = "content must be a string or a list of blocks"


def anthropic_message(obj: dict[str, Any], line: int, nbytes: int, lines: int) -> Message:
    """:func:`message_from_anthropic` with its arguments given in order, for the readers that make
    one per line (a keyword argument costs a call about a tenth more)."""
    role, content = obj.get("role"), obj.get("content")
    if role not in ("user", "assistant"):
        raise ValueError(_ROLE_RULE.format(role))
    # a {role, content} source whose blocks are all seen here keeps its shape without a search of
    # its JSON text for image and document markers (shape_if_kept; None when not keeping shapes).
    shape = shape_if_kept(content) if type(obj) is dict and len(obj) == 2 and type(content) in (str, list) else None
    if isinstance(content, str):
        raw = shape if shape is not None and not_marker(content) else obj
        return new_message(role, content, line=line, source_bytes=nbytes, source_lines=lines, raw=raw)
    if content is None:
        content = []
    if not isinstance(content, list):
        raise ValueError(_CONTENT_RULE)
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    results: list[ToolResult] = []
    images, signed = 0, False
    for block in content:  # exact-type checks first: the usual blocks hold strings as they are
        if type(block) is not dict and not isinstance(block, dict):
            shape = None
            continue
        kind = block.get("type")
        if type(kind) is not str:  # a type that is not a string names no block (and may not be hashable)
            kind = ""
        if kind == "text":
            text = block.get("text", "")
            if type(text) is str:
                texts.append(text)
                # its keys are "type" and "text" only ("type" is there, its value read above)
                if shape is not None and not (
                    len(block) == 2 and "text" in block and (len(text) > LONGEST_MARKER or text not in MARKER_WORDS)
                ):
                    shape = None
            else:
                texts.append(str(text))
                shape = None
        elif kind == "thinking":
            thinking.append(str(block.get("thinking", "")))
            signed = signed or bool(block.get("signature"))
            shape = None
        elif kind == "redacted_thinking":
            signed = True
            shape = None
        elif kind == "tool_use" or kind in SERVER_CALL_TYPES:
            call_id, name, arguments = block.get("id", ""), block.get("name", ""), block.get("input", {})
            if type(call_id) is str and type(name) is str:
                calls.append(ToolCall(call_id, name, arguments if type(arguments) is str else dumps(arguments)))
                if shape is not None and not (  # its keys are type, id, name, input
                    len(block) == 4 and "id" in block and "name" in block and "input" in block and kind == "tool_use"
                    and (len(call_id) > LONGEST_MARKER or call_id not in MARKER_WORDS)
                    and (len(name) > LONGEST_MARKER or name not in MARKER_WORDS)
                    and unmarked(arguments, 3)
                ):
                    shape = None
            else:
                calls.append(ToolCall(str(call_id), str(name), dumps(arguments)))
                shape = None
        elif kind == "tool_result":
            answered, result, error = block.get("tool_use_id", ""), block.get("content"), block.get("is_error", False)
            if type(result) is str:
                text = result
                if shape is not None and not (  # its keys among type, tool_use_id, content, is_error ("type" is there)
                    len(block) == 1 + ("tool_use_id" in block) + ("content" in block) + ("is_error" in block)
                    and type(answered) is str and (len(answered) > LONGEST_MARKER or answered not in MARKER_WORDS)
                    and (len(result) > LONGEST_MARKER or result not in MARKER_WORDS) and type(error) is bool
                ):
                    shape = None
            else:
                text, n_images = _result_text(result)
                images += n_images
                shape = None
            results.append(ToolResult(answered if type(answered) is str else str(answered), text, error if error is False else bool(error)))
        elif kind in _IMAGE_TYPES:
            images += 1
            shape = None
        elif is_server_result(kind) and role == "assistant":
            text, n_images = server_result_text(block)
            texts.append(text)
            images += n_images
            shape = None
        else:
            if isinstance(block.get("text"), str):
                texts.append(block["text"])
            shape = None
    resolved = "tool" if (role == "user" and results) else role
    return new_message(
        resolved, texts[0] if len(texts) == 1 else "\n".join(texts), tuple(calls), tuple(results),
        thinking="\n".join(thinking) if thinking else "", signed_thinking=signed, images=images, line=line,
        source_bytes=nbytes, source_lines=lines, raw=obj if shape is None else shape,
    )


def _is_anthropic_message(value: Any) -> bool:
    """A ``{role: user|assistant, content: str|list}`` dict without OpenAI-only keys."""
    return (
        isinstance(value, dict)
        and value.get("role") in ("user", "assistant")
        and isinstance(value.get("content"), (str, list))
        and "tool_calls" not in value
        and "tool_call_id" not in value
        and "type" not in value
    )


def _items(source: Source, limit: int | None = None) -> Sequence[Record] | None:
    """The message records of the source (the first ``limit`` when given; JSONL records are read
    one at a time, not held), or None when it is not a list of messages."""
    if source.records is not None:
        return source.records if limit is None else source.sample[:limit]
    if isinstance(source.document, list):
        return [Record(0, v, len(dumps(v).encode())) for v in source.document[:limit]]
    return None


#: Share of the first records (``SNIFF_RECORDS``) that must be Anthropic messages (or all but one of
#: them) for a file no other reader takes to be read as one: the others are then errors naming their
#: line and rule (skipped with ``--lenient``), not a refusal of the whole file.
SNIFF_SHARE = 0.9


def sniff(source: Source) -> bool:
    """True when the first records (``SNIFF_RECORDS``) are Anthropic messages: all of them, or at least
    two and all but :data:`SNIFF_SHARE` of them or one (this reader is tried last; it checks every record).

    >>> from dp_compact.sessions.source import Source
    >>> odd = [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}, {"role": "assistant", "content": "c"}]
    >>> sniff(Source("x.json", None, odd)), sniff(Source("x.json", None, odd[1:2]))
    (True, False)
    """
    items = _items(source, SNIFF_RECORDS)
    if not items:
        return False
    found = sum(1 for r in items if _is_anthropic_message(r.value))
    return found == len(items) or (found >= 2 and len(items) - found <= max(1.0, (1.0 - SNIFF_SHARE) * len(items)))


def _not_a_message(value: Any) -> str:
    """Why ``value`` is not an Anthropic message (the first rule it breaks)."""
    if not isinstance(value, dict):
        return f"a message must be an object, not {type(value).__name__}"
    if value.get("role") not in ("user", "assistant"):
        return _ROLE_RULE.format(value.get("role"))
    if not isinstance(value.get("content"), (str, list)):
        return _CONTENT_RULE
    keys = [key for key in ("tool_calls", "tool_call_id", "type") if key in value]
    return f"not an Anthropic message ({{role: user|assistant, content: string or blocks}}): it has {', '.join(map(repr, keys))}"


def _usage(obj: dict[str, Any], line: int) -> Usage | None:
    """Usage of an assistant message: Cline ``metrics.tokens`` (prompt + cached) or an API ``usage``
    object (:func:`~dp_compact.sessions.usage.usage_from_api`); None when it records no prompt.

    Raises ValueError for a count that is not a non-negative whole number (:func:`token_count`).
    """
    tokens = (obj.get("metrics") or {}).get("tokens") if isinstance(obj.get("metrics"), dict) else None
    if isinstance(tokens, dict) and (tokens.get("prompt") or tokens.get("cached")):
        prompt = token_count(tokens.get("prompt"), "metrics.tokens.prompt")
        cached = token_count(tokens.get("cached"), "metrics.tokens.cached")
        output = token_count(tokens.get("completion"), "metrics.tokens.completion")
        return (Usage(prompt + cached, cache_read_tokens=cached, output_tokens=output, line=line, cache_split_estimated=True)
                if prompt + cached else None)
    usage = obj.get("usage")
    if isinstance(usage, dict) and "input_tokens" in usage:
        return usage_from_api(usage, line)
    return None


def split_cline_cached(usage: Usage, previous: Usage | None) -> Usage:
    """Cline's ``metrics.tokens.cached`` (cache reads plus cache writes, one number: FORMATS.md)
    split into reads and writes; any other record unchanged.

    The reads are what the previous call left cached, at most: that call's cached tokens (reads
    and writes, the prefix Cline's cache breakpoints covered), so ``reads = min(cached, previous
    cached)`` and the rest of ``cached`` was written (0 reads for the first call). An estimate,
    marked by ``cache_split_estimated``; checked against Cline's UI log of the same task, which
    records both (``cacheReads``, ``cacheWrites``).
    """
    if not usage.cache_split_estimated or usage.cache_write_tokens:
        return usage
    cached = usage.cache_read_tokens
    before = previous.cache_read_tokens + previous.cache_write_tokens if previous is not None else 0
    reads = min(cached, before)
    return replace(usage, cache_read_tokens=reads, cache_write_tokens=cached - reads)


def _client_calls(value: Any) -> dict[str, str]:
    """``{id: name}`` of the client ``tool_use`` calls in a message's source (server tools answer themselves)."""
    content = value.get("content") if isinstance(value, dict) else None
    blocks = content if isinstance(content, list) else ()
    return {str(b.get("id", "")): str(b.get("name", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"}


def _answers(previous: Message, previous_value: Any, message: Message, value: Any) -> bool:
    """:func:`answers_by_position` over the messages and their parsed sources."""
    if message.role != "user" or previous.role != "assistant" or not previous.tool_calls:
        return False
    if not _CLINE_RESULT.match(message.text):  # the first text block opens the text
        return False
    content = value.get("content") if isinstance(value, dict) else None
    first = content[0] if isinstance(content, list) and content else None
    text = first.get("text") if isinstance(first, dict) and first.get("type") == "text" else None
    found = _CLINE_RESULT.match(text) if isinstance(text, str) else None
    return found is not None and found.group(1) in _client_calls(previous_value).values()


def answers_by_position(previous: Message | None, message: Message) -> bool:
    """True when ``message`` is Cline's plain-text result of the client tool call just before it.

    Cline's API history has no ``tool_result`` blocks: the user message after a ``tool_use``
    answers it, opening with ``[<tool name> ...] Result:`` (``_CLINE_RESULT``) for that call's
    name. Any other plain user message after a call is a user turn (module docstring).

    Parameters
    ----------
    previous : Message or None
        The message before ``message`` (None at the start).
    message : Message
        A message as :func:`message_from_anthropic` reads it; both are read from their ``raw``.

    Returns
    -------
    bool
        False for a message with ``tool_result`` blocks (linked by id), a string content, or any
        text that does not open with the result line of one of ``previous``'s ``tool_use`` names.
    """
    if previous is None:
        return False
    return _answers(previous, raw_value(previous.raw), message, raw_value(message.raw))


def _as_result(previous: Message, previous_value: Any, message: Message) -> Message:
    """``message`` (:func:`answers_by_position` of ``previous``) as the result of every client call of ``previous``."""
    client = _client_calls(previous_value)
    results = tuple(ToolResult(call.id, message.text) for call in previous.tool_calls if call.id in client)
    return new_message(
        role="tool", text="", tool_results=results, thinking=message.thinking, images=message.images,
        line=message.line, source_bytes=message.source_bytes, source_lines=message.source_lines, raw=message.raw,
    )


class _Reader:
    """The reader's state after the records given so far, in file order (:meth:`add`); :meth:`session`
    makes the session of them. :func:`read` uses it for a whole file, :mod:`dp_compact.hot.lines`
    keeps it between reads of a file that grows.

    Attributes
    ----------
    messages : list[Message]
        One per record, Cline's positional results linked.
    usage : list[Usage]
        Each assistant message's usage record, in order (Cline's cached tokens split).
    model : str or None
        The last model a message names.
    times : list
        Each assistant message's ``timestamp`` value (None when it has none).
    previous_value : Any
        The parsed source of the last message (a Cline result reads it).
    """

    __slots__ = ("messages", "usage", "model", "times", "previous_value")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.usage: list[Usage] = []
        self.model: str | None = None
        self.times: list[Any] = []
        self.previous_value: Any = None

    def add(self, record: Record) -> None:
        """Read one record (a ``{role, content}`` message); ValueError when it is not one, or its usage is malformed."""
        value = record.value
        if not _is_anthropic_message(value):
            raise ValueError(_not_a_message(value))
        messages = self.messages
        message = anthropic_message(value, record.line, record.nbytes, 1)
        if messages and _answers(messages[-1], self.previous_value, message, value):  # Cline: linked by position
            message = _as_result(messages[-1], self.previous_value, message)
        messages.append(message)
        self.previous_value = value
        if message.role == "assistant":
            self.times.append(value.get("timestamp"))
            if (u := _usage(value, record.line)) is not None:
                usage = self.usage
                usage.append(split_cline_cached(u, usage[-1] if usage else None))
        self.model = _recorded_model(value) or self.model

    def session(self, path: str, skipped: int, jsonl: bool) -> Session:
        """The session of the records read (``skipped``: lines left out; ``jsonl``: read from JSONL lines, which carry call times)."""
        messages = self.messages
        # a user message's kind is "summary" exactly when its text reads as one (Message, no kind given here)
        kinds = list(map(message_kind, messages))
        markers = [i for i, kind in enumerate(kinds) if kind == "summary"] if "summary" in kinds else []
        return build_session(
            path=path,
            format=FORMAT,
            messages=messages,
            usage=self.usage,
            live_start=markers[-1] if markers else 0,
            compactions=len(markers),
            skipped_lines=skipped,
            model=self.model,
            compaction_records=tuple(
                RecordedCompaction(summary_tool(messages[i].text), messages[i].line, summary_text=messages[i].text) for i in markers
            ),
            call_times=tuple(self.times) if jsonl else (),  # a line's own ``timestamp``
        )


def read(source: Source) -> Session:
    """Read an Anthropic message list into a :class:`Session`.

    Raises
    ------
    MalformedLineError
        If a record is not a valid Anthropic message, or its usage holds a count that is not a
        non-negative whole number (``path:line``; the message index in a JSON array). With a
        lenient source the line is counted in ``skipped_lines`` instead: a bad message is left
        out, a message with a bad usage object is kept without its usage record (as the Claude
        Code reader does), so that its tool calls still answer their results.
    """
    reader = _Reader()
    skipped = each_record(source, _items(source) or [], reader.add)
    return reader.session(source.path, source.skipped + skipped, source.records is not None)


def _recorded_model(value: dict[str, Any]) -> str | None:
    """The model a message names (Cline ``modelInfo.modelId``, or an API ``model`` key), if any;
    the session's is the last one named."""
    info = value.get("modelInfo")
    if isinstance(info, dict) and isinstance(info.get("modelId"), str):
        return info["modelId"]
    if isinstance(value.get("model"), str):
        return value["model"]
    return None
