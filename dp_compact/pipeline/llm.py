"""The ``llm`` summarizer: a cache-aligned summary request through the official SDKs (DESIGN §5.5).

The request repeats what the agent sent before, so the provider's prompt cache serves the
prefix: the session's system prompt, its tools and the head messages as raw API dicts, in order.
For OpenAI that is every system / developer message of the session, in order and unchanged (two
stay two, never merged), then the head; for Anthropic the ``system`` parameter (one text block
per system message when there are several). Only the summarization instruction
(``SUMMARY_INSTRUCTION``: 92 cl100k tokens with the section headings, against the L_instr = 70
tokens DESIGN §2 ③ budgets) is new, appended at the end as the last user message.

The request is sized before it is sent (cl100k counts of the JSON of each message, counted once)
for the window of the model asked (:func:`summary_context_window`: the price database's window
for that model, not a fixed size): if head + instruction + output reserve exceed the window, the
shrunk head is used instead, then its tool results are clipped to ``CLIPPED_RESULT_CHARS``, then
the oldest user turns are dropped (never leaving a tool result first), until it fits. The SDKs
(``pip install ".[llm]"``) are imported only when a request is sent, so
``import dp_compact`` never loads them.
"""

from __future__ import annotations

import contextlib
import importlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from dp_compact.errors import CompactionError, SummaryTooShortError, UnknownProfileError, install_hint
from dp_compact.pipeline.convert import call_ids, message_to_api, system_messages_for
from dp_compact.pipeline.summarize import SummaryRequest, check_summary
from dp_compact.pipeline.types import Api
from dp_compact.sessions.common import text_and_images
from dp_compact.conversation import Message
from dp_compact.measure.tokens import MESSAGE_OVERHEAD_TOKENS, count_text_tokens

__all__ = ["CLIPPED_RESULT_CHARS", "LLMSummarizer", "SUMMARY_INSTRUCTION", "count_request_tokens", "summary_context_window"]

#: The summarization instruction, appended as the last user message. ``{sections}`` lists the
#: headings of ``prompts.toml`` [summary.sections] so LLM and extractive summaries share them.
SUMMARY_INSTRUCTION = (
    "Summarize the conversation above to replace it; keep what is needed to continue. Headings, each on its "
    "own line with '- ' items, empty ones skipped: {sections} Copy user instructions verbatim, earlier "
    "summaries' too. Exact file paths, commands, identifiers, errors. About {target_tokens} tokens, plain text, no tool calls."
)
#: Appended to the instruction when the previous summary is not among the messages sent.
PREVIOUS_SUMMARY_NOTE = "\n\nThe previous summary (carry its instructions forward):\n{previous_summary}"
#: Output reserve, tokens, when the request sets no smaller ``max_tokens`` (DESIGN §3: S = 500
#: summary tokens; the pipeline asks for at most 2·S).
DEFAULT_MAX_OUTPUT_TOKENS = 2048
#: Context windows for a model the price database does not know, tokens: Claude (Anthropic
#: models overview, 200K standard) and GPT-4o-class chat models (OpenAI model pages, 128K).
DEFAULT_CONTEXT_WINDOWS = {"anthropic": 200_000, "openai": 128_000}
#: Share of the window the request may fill. The count is cl100k of the JSON text, not the
#: provider's own tokenizer (Claude's differs); 15 % headroom is an assumption, not a measurement.
WINDOW_SAFETY_FACTOR = 0.85
#: Tool-result length, characters, after the second shrinking step (DESIGN §5.3 previews are 400–600).
CLIPPED_RESULT_CHARS = 240
#: Seconds per HTTP request, and retries on connection errors, 429 and 5xx (both SDKs' default is 2).
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_RETRIES = 2

_OMITTED = "[earlier messages omitted]"

def _dumps(obj: Any) -> str:
    """Compact JSON text of a request part, as counted."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def count_request_tokens(system: Any, tools: Sequence[Any], messages: Sequence[Any]) -> int:
    """Estimated prompt size of a summary request, tokens (cl100k of the JSON of each part).

    Parameters
    ----------
    system : str, list or None
        System prompt (Anthropic ``system``; ``None`` for OpenAI, whose system prompt is a message).
    tools : sequence of dict
        Tool definitions as sent.
    messages : sequence of dict
        Messages as sent, instruction included.

    Returns
    -------
    int
        Tokens of the JSON text of each part plus ``MESSAGE_OVERHEAD_TOKENS`` per message.
    """
    parts = [_dumps(system) if system else "", _dumps(list(tools)) if tools else ""]
    parts += [_dumps(m) for m in messages]
    return int(count_text_tokens(parts).sum()) + MESSAGE_OVERHEAD_TOKENS * len(messages)


def summary_context_window(api: Api, model: str, explicit: int | None = None) -> tuple[int, str]:
    """The context window a summary request to ``model`` must fit, tokens, and where it comes from.

    Parameters
    ----------
    api : {"anthropic", "openai"}
        The API the request goes to.
    model : str
        The model asked (``--llm-model``).
    explicit : int, optional
        A window given by the caller (``--llm-context-window``), tokens: wins when set.

    Returns
    -------
    (int, str)
        The window in tokens and one sentence naming its source: the price database's window
        for ``model`` (:func:`dp_compact.pricing.get_prices`), or the smallest window the model
        runs with when that one is offered on request only (Claude: 200,000 without the 1M
        opt-in; GPT-5: 272,000 input tokens; :func:`dp_compact.measure.windows.known_windows`); for a
        model the database does not know, ``DEFAULT_CONTEXT_WINDOWS[api]``.

    Raises
    ------
    ValueError
        If ``explicit`` is not a positive number of tokens.

    Examples
    --------
    >>> summary_context_window("openai", "gpt-4.1")
    (1000000, "the price database's window for gpt-4.1")
    >>> summary_context_window("openai", "my-local-model")[0]
    128000
    """
    from dp_compact.pricing import get_prices
    from dp_compact.measure.windows import known_windows

    if explicit is not None:
        if explicit <= 0:
            raise ValueError(f"a context window must be > 0 tokens, not {explicit!r}")
        return explicit, "given with the summarizer (--llm-context-window)"
    try:
        prices = get_prices(model)
    except UnknownProfileError:
        window = min(known_windows(model, DEFAULT_CONTEXT_WINDOWS[api]))
        return window, f"{model} is not in the price database: the smallest window known for its family, else the {api} default"
    window = min(known_windows(model, prices.max_context_tokens))
    if window != prices.max_context_tokens:
        return window, f"the smallest window {prices.name} runs with (the price database lists {prices.max_context_tokens:,})"
    return window, f"the price database's window for {prices.name}"


def _anthropic_system(request: SummaryRequest) -> str | list[dict[str, str]] | None:
    """The Anthropic ``system`` parameter: one text block per system message when there are several, else the text."""
    texts = [text_and_images(m.get("content"))[0] for m in request.system_messages if isinstance(m, dict)]
    texts = [t for t in texts if t.strip()]
    if len(texts) > 1:
        return [{"type": "text", "text": t} for t in texts]
    return request.system_text or (texts[0] if texts else None)


def _groups(messages: Sequence[Message], api: Api) -> list[list[dict[str, Any]]]:
    """The API messages carrying each head message, as sent before (raw dicts where in shape)."""
    groups: list[list[dict[str, Any]]] = []
    issued: set[str] = set()
    for message in messages:
        group = message_to_api(message, api, issued=issued)
        issued |= call_ids(group)
        groups.append(group)
    return groups


def _clip_results(message: Message) -> Message:
    """``message`` with each tool result cut to ``CLIPPED_RESULT_CHARS`` (rebuilt, so sent in converted shape)."""
    from dataclasses import replace

    def clip(text: str) -> str:
        if len(text) <= CLIPPED_RESULT_CHARS:
            return text
        return f"{text[: CLIPPED_RESULT_CHARS // 2]}\n[... {len(text):,} chars, clipped ...]\n{text[-CLIPPED_RESULT_CHARS // 2 :]}"

    if not message.tool_results or all(len(r.text) <= CLIPPED_RESULT_CHARS for r in message.tool_results):
        return message
    results = tuple(replace(r, text=clip(r.text)) for r in message.tool_results)
    return replace(message, tool_results=results, raw=None)


def _tools_for(groups: Sequence[Sequence[dict[str, Any]]], api: Api) -> list[dict[str, Any]]:
    """Minimal tool definitions for the tool names called in ``groups`` (when the session's are unknown)."""
    names: set[str] = set()
    for group in groups:
        for wire in group:
            for call in wire.get("tool_calls") or ():
                names.add(call.get("function", {}).get("name", ""))
            content = wire.get("content")
            for block in content if isinstance(content, list) else ():
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    names.add(block.get("name", ""))
    names.discard("")
    if api == "anthropic":
        return [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in sorted(names)]
    return [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in sorted(names)]


class LLMSummarizer:
    """Summarize a head with an LLM through the ``anthropic`` or ``openai`` SDK, cache-aligned.

    Parameters
    ----------
    api : {"anthropic", "openai"}
        ``anthropic``: Messages API (``/v1/messages``); ``openai``: Chat Completions.
    model : str
        Model name sent with the request.
    client : optional
        A ready SDK client (``anthropic.Anthropic`` / ``openai.OpenAI``); not closed here.
        Default: one is made per request from ``base_url``, ``api_key``, ``timeout`` and
        ``max_retries`` (unset values fall back to the SDK's environment variables) and closed.
    base_url, api_key : str, optional
        Endpoint and key for the client made here.
    tools : sequence of dict, optional
        The session's tool definitions in ``api``'s shape, as the agent sent them. Without them,
        minimal definitions are made from the tool names the head calls (no cache hit then).
    max_output_tokens : int
        Output reserve and ``max_tokens`` of the request, tokens.
    context_window : int, optional
        Window the request must fit, tokens; default the model's own window
        (:func:`summary_context_window`), its source in ``window_source``.
    timeout : float
        Seconds per HTTP request.
    max_retries : int
        SDK retries on connection errors, 429 and 5xx.

    Notes
    -----
    Calling it with a :class:`~dp_compact.pipeline.summarize.SummaryRequest` returns the summary
    text, or raises :class:`~dp_compact.errors.SummaryTooShortError` (empty or too short, by
    :func:`~dp_compact.pipeline.summarize.check_summary`) or
    :class:`~dp_compact.errors.CompactionError` (HTTP or SDK error, missing SDK, answer cut off
    at the output limit, request that cannot fit). ``max_tokens`` of the request is
    ``min(max_output_tokens, request.max_tokens)``.
    """

    def __init__(
        self,
        api: Api,
        model: str,
        *,
        client: Any = None,
        base_url: str | None = None,
        api_key: str | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
        max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS,
        context_window: int | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> None:
        if api not in DEFAULT_CONTEXT_WINDOWS:
            raise ValueError(f"unknown api {api!r}: use 'anthropic' or 'openai'")
        self.api: Api = api
        self.model = model
        self.name = f"llm:{api}:{model}"
        self.tools = list(tools) if tools is not None else None
        self.max_output_tokens = max_output_tokens
        self.context_window, self.window_source = summary_context_window(api, model, context_window)
        self.timeout, self.max_retries = timeout, max_retries
        self._client, self._base_url, self._api_key = client, base_url, api_key

    def __call__(self, request: SummaryRequest) -> str:
        """The summary of ``request.head``; errors as in the class Notes."""
        system, tools, messages = self.build_request(request)
        output_tokens = self._output_tokens(request)
        with self._open_client() as client:
            if self.api == "anthropic":
                text, truncated = self._send_anthropic(client, system, tools, messages, output_tokens)
            else:
                text, truncated = self._send_openai(client, tools, messages, output_tokens)
        where = f"{self.api} model {self.model}"
        try:
            text = check_summary(text, request.head)
        except SummaryTooShortError as exc:
            raise SummaryTooShortError(f"{where}: {exc}") from exc
        if truncated:
            raise CompactionError(f"the summary from {where} was cut off at {output_tokens} output tokens: compaction aborted")
        return text

    def _output_tokens(self, request: SummaryRequest) -> int:
        """``max_tokens`` of the request: the constructor's reserve, capped by ``request.max_tokens``."""
        cap = request.max_tokens or self.max_output_tokens
        return max(1, min(self.max_output_tokens, cap))

    def build_request(self, request: SummaryRequest) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
        """(system, tools, messages) to send: cache-aligned and sized to fit the window.

        ``system`` is the Anthropic ``system`` parameter (None for OpenAI, where the session's
        system messages open ``messages``, each unchanged). Raises CompactionError when the head
        is empty or even its last turn cannot fit.
        """
        head = tuple(request.head)
        if not head:
            raise CompactionError("nothing to summarize: the head is empty")
        budget = int(self.context_window * WINDOW_SAFETY_FACTOR) - self._output_tokens(request)
        prefix = system_messages_for(request.system_messages, request.system_text or "", self.api)
        system = _anthropic_system(request) if self.api == "anthropic" else None
        shrunk = tuple(request.shrunk_head or head)
        variants = (head, shrunk, tuple(_clip_results(m) for m in shrunk))
        for step, messages in enumerate(variants):
            groups = _groups(messages, self.api)
            tools = self._tools(request, groups)
            worst = [*prefix, self._instruction(request, ()), *([{"role": "user", "content": _OMITTED}] if self.api == "anthropic" else [])]
            fixed = count_request_tokens(system, tools, worst)
            sizes = count_text_tokens([_dumps(g) for g in groups]) + MESSAGE_OVERHEAD_TOKENS * np.array([len(g) for g in groups])
            kept_tokens = np.cumsum(sizes[::-1])[::-1]  # tokens of messages[i:]
            start = self._first_fitting_start(messages, kept_tokens, budget - fixed, last=step == len(variants) - 1)
            if start is not None:
                break
        else:
            raise CompactionError(
                f"summary request cannot fit a {self.context_window:,}-token window with a {self._output_tokens(request):,}-token "
                f"output reserve, even with only the last message of the head"
            )
        kept = messages[start:]
        body = [w for g in groups[start:] for w in g]
        if self.api == "anthropic" and body[0]["role"] != "user":
            body.insert(0, {"role": "user", "content": _OMITTED})
        instruction = self._instruction(request, kept)
        return system, self._tools(request, groups[start:]), [*prefix, *body, instruction]

    def _first_fitting_start(self, messages: Sequence[Message], kept_tokens: Any, room: int, *, last: bool) -> int | None:
        """Index of the first head message to send: 0 when all fit; with ``last``, the oldest turn start that fits."""
        if int(kept_tokens[0]) <= room:
            return 0
        if not last:
            return None
        turn_starts = [i for i, m in enumerate(messages) if i > 0 and m.is_user_turn]
        other_starts = [i for i, m in enumerate(messages) if i > 0 and m.role == "assistant"]
        for candidates in (turn_starts, other_starts):
            for i in candidates:
                if int(kept_tokens[i]) <= room:
                    return i
        return None

    def _tools(self, request: SummaryRequest, groups: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
        """The session's tools (request, then constructor), else minimal ones when the head calls tools."""
        tools = request.tools or self.tools
        return list(tools) if tools else _tools_for(groups, self.api)

    def _instruction(self, request: SummaryRequest, sent: Sequence[Message]) -> dict[str, Any]:
        """The instruction user message; it quotes the previous summary unless a sent message holds it."""
        from dp_compact.pipeline.texts import texts

        text = SUMMARY_INSTRUCTION.format(sections=" ".join(texts().headings.values()), target_tokens=request.target_tokens)
        previous = (request.previous_summary or "").strip()
        if previous and not any(previous in m.text for m in sent):
            text += PREVIOUS_SUMMARY_NOTE.format(previous_summary=previous)
        return {"role": "user", "content": text}

    @contextlib.contextmanager
    def _open_client(self) -> Iterator[Any]:
        """The given client, or a new SDK client closed on exit; CompactionError when the SDK is missing."""
        if self._client is not None:
            yield self._client
            return
        try:
            sdk = importlib.import_module(self.api)
        except ImportError as exc:
            raise CompactionError(f"the llm summarizer needs the {self.api} SDK: {install_hint('llm')}") from exc
        factory = sdk.Anthropic if self.api == "anthropic" else sdk.OpenAI
        try:
            client = factory(api_key=self._api_key, base_url=self._base_url, timeout=self.timeout, max_retries=self.max_retries)
        except (sdk.AnthropicError if self.api == "anthropic" else sdk.OpenAIError) as exc:
            raise CompactionError(f"cannot set up the {self.api} client: {exc}") from exc
        if self.api == "anthropic" and not (getattr(client, "api_key", None) or getattr(client, "auth_token", None)):
            client.close()  # the Anthropic SDK only notices a missing key when the request is sent, as a TypeError
            raise CompactionError("cannot set up the anthropic client: no API key (set ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN)")
        with client:
            yield client

    def _failed(self, exc: BaseException) -> CompactionError:
        """The CompactionError for an SDK exception (HTTP status, connection error, bad response)."""
        status = getattr(exc, "status_code", None)
        what = f"HTTP {status}" if status is not None else type(exc).__name__
        return CompactionError(f"summary request to {self.api} model {self.model} failed ({what}): {exc}")

    def _send_anthropic(self, client: Any, system: Any, tools: list, messages: list, output_tokens: int) -> tuple[str, bool]:
        """POST /v1/messages; (text of the text blocks, stopped at max_tokens)."""
        import anthropic

        extra = {"system": system} if system else {}
        try:
            reply = client.messages.create(
                model=self.model, max_tokens=output_tokens, messages=messages, timeout=self.timeout,
                **extra, **({"tools": tools} if tools else {}),
            )
        except anthropic.AnthropicError as exc:
            raise self._failed(exc) from exc
        text = "".join(getattr(b, "text", "") for b in reply.content or () if getattr(b, "type", "") == "text")
        return text, reply.stop_reason == "max_tokens"

    def _send_openai(self, client: Any, tools: list, messages: list, output_tokens: int) -> tuple[str, bool]:
        """POST /v1/chat/completions; (first choice's content, stopped at the length limit)."""
        import openai

        try:
            reply = client.chat.completions.create(
                model=self.model, max_completion_tokens=output_tokens, messages=messages, timeout=self.timeout,
                **({"tools": tools} if tools else {}),
            )
        except openai.OpenAIError as exc:
            raise self._failed(exc) from exc
        if not reply.choices:
            return "", False
        choice = reply.choices[0]
        return choice.message.content or "", choice.finish_reason == "length"
