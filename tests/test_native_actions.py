"""Provider-native context actions (dp_compact.adapters.native), offline against the SDK types and a local stub.

The stub is an HTTP server on 127.0.0.1 started here; the official ``anthropic`` and ``openai``
clients talk to it, so each request is built and each response parsed by the SDK itself.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

from dp_compact.adapters.native import (  # noqa: E402
    ANTHROPIC_COMPACT_BETA,
    ANTHROPIC_CONTEXT_MANAGEMENT_BETA,
    NativeUsage,
    anthropic_clear_tool_uses,
    anthropic_compact,
    anthropic_usage,
    openai_compact,
    openai_compact_call,
)
from dp_compact.pricing import get_prices  # noqa: E402

Reply = Callable[[str, dict[str, Any]], dict[str, Any]]


class Stub:
    """An HTTP server on 127.0.0.1 answering every POST with ``reply(path, body)``; records each request."""

    def __init__(self, reply: Reply) -> None:
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                stub.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                answer = reply(self.path, body)
                if body.get("stream"):  # server-sent events, as the Messages API streams
                    data = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in anthropic_events(answer)).encode()
                else:
                    data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream" if body.get("stream") else "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Stub:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()


def anthropic_message(content: list[dict[str, Any]], *, stop: str = "end_turn", edits: list[dict[str, Any]] | None = None,
                      iterations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {"input_tokens": 1_000, "output_tokens": 20, "cache_read_input_tokens": 30_000, "cache_creation_input_tokens": 500}
    if iterations is not None:
        usage["iterations"] = iterations
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4", "content": content,
               "stop_reason": stop, "stop_sequence": None, "usage": usage}
    if edits is not None:
        message["context_management"] = {"applied_edits": edits}
    return message


def anthropic_events(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream of events of a text-only ``message``, as the Messages API sends it."""
    start = {**message, "content": [], "stop_reason": None}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}]
    for n, block in enumerate(message["content"]):
        events += [{"type": "content_block_start", "index": n, "content_block": {"type": "text", "text": ""}},
                   {"type": "content_block_delta", "index": n, "delta": {"type": "text_delta", "text": block["text"]}},
                   {"type": "content_block_stop", "index": n}]
    usage = {"output_tokens": message["usage"]["output_tokens"]}
    if "iterations" in message["usage"]:
        usage["iterations"] = message["usage"]["iterations"]
    delta = {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None}, "usage": usage}
    if "context_management" in message:
        delta["context_management"] = message["context_management"]
    return [*events, delta, {"type": "message_stop"}]


CLEARED = [{"type": "clear_tool_uses_20250919", "cleared_input_tokens": 4_200, "cleared_tool_uses": 3}]
COMPACTION_ITERATION = {"type": "compaction", "input_tokens": 2_000, "cache_read_input_tokens": 120_000, "cache_creation_input_tokens": 0,
                        "output_tokens": 900}
MESSAGE_ITERATION = {"type": "message", "input_tokens": 1_000, "cache_read_input_tokens": 30_000, "cache_creation_input_tokens": 500,
                     "output_tokens": 20}


# --- the actions and the SDK ------------------------------------------------------------------

def test_native_clear_tool_uses_request_reaches_the_api_as_the_sdk_types_it():
    action = anthropic_clear_tool_uses(trigger_tokens=30_000, keep_tool_uses=2, clear_at_least_tokens=5_000, exclude_tools=("dp_recall",))
    assert (action.kind, action.summary_request, action.cache_rewrite_from) == ("clear_tool_uses", False, "first_cleared")
    with Stub(lambda path, body: anthropic_message([{"type": "text", "text": "ok"}], edits=CLEARED)) as stub:
        client = anthropic.Anthropic(base_url=stub.url, api_key="test", max_retries=0)
        message = client.beta.messages.create(model="claude-sonnet-4", max_tokens=64, messages=[{"role": "user", "content": "hi"}],
                                              **action.anthropic_kwargs())
    path, headers, body = stub.requests[0]
    assert path.startswith("/v1/messages")
    assert ANTHROPIC_CONTEXT_MANAGEMENT_BETA in headers["anthropic-beta"]
    assert body["context_management"] == {"edits": [{
        "type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": 2}, "trigger": {"type": "input_tokens", "value": 30_000},
        "clear_at_least": {"type": "input_tokens", "value": 5_000}, "exclude_tools": ["dp_recall"]}]}
    usage = anthropic_usage(message)  # the SDK's BetaMessage, parsed from the stub's answer
    assert usage == NativeUsage(cleared_input_tokens=4_200, cleared_tool_uses=3)
    assert usage.cost_usd(get_prices("claude-sonnet-4")) == 0.0  # clearing is no request of its own


def test_native_compact_edit_is_billed_by_its_compaction_iteration_only():
    action = anthropic_compact(trigger_tokens=100_000)
    assert action.trigger_tokens == 100_000 and action.summary_request and action.cache_rewrite_from == "start"
    assert anthropic_compact().trigger_tokens == 150_000  # the SDK's documented default
    compaction_block = {"type": "compaction", "content": "Summary of the work so far.", "encrypted_content": None, "signature": None}
    reply = anthropic_message([compaction_block, {"type": "text", "text": "ok"}], iterations=[COMPACTION_ITERATION, MESSAGE_ITERATION])
    with Stub(lambda path, body: reply) as stub:
        client = anthropic.Anthropic(base_url=stub.url, api_key="test", max_retries=0)
        message = client.beta.messages.create(model="claude-sonnet-4", max_tokens=64, messages=[{"role": "user", "content": "hi"}],
                                              **action.anthropic_kwargs())
    _, headers, body = stub.requests[0]
    assert ANTHROPIC_COMPACT_BETA in headers["anthropic-beta"]
    assert body["context_management"] == {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 100_000}}]}
    assert message.content[0].type == "compaction"
    usage = anthropic_usage(message)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens) == (2_000, 120_000, 900)  # not the top-level 1,000
    prices = get_prices("claude-sonnet-4")
    assert usage.cost_usd(prices) == pytest.approx((2_000 * prices.p_input + 120_000 * prices.p_cache + 900 * prices.p_out) / 1e6)


def test_native_invalid_edit_is_refused_by_the_sdk_type():
    with pytest.raises(ValueError, match="clear_tool_uses_20250919"):
        anthropic_clear_tool_uses(keep_tool_uses="three")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a context_management edit"):
        openai_compact().anthropic_kwargs()


def test_native_openai_compact_endpoint_returns_items_and_usage():
    compacted = {
        "id": "cmp_1", "created_at": 1_765_000_000, "object": "response.compaction",
        "output": [
            {"id": "msg_1", "type": "message", "role": "user", "status": "completed", "content": [{"type": "input_text", "text": "fix the test"}]},
            {"id": "cmp_item_1", "type": "compaction", "encrypted_content": "gAAAA-opaque"},
        ],
        "usage": {"input_tokens": 50_000, "input_tokens_details": {"cached_tokens": 40_000, "cache_write_tokens": 0},
                  "output_tokens": 1_200, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 51_200},
    }
    history = [{"role": "user", "content": "fix the test"}, {"role": "assistant", "content": "reading tests/test_a.py"}]
    with Stub(lambda path, body: compacted) as stub:
        client = openai.OpenAI(base_url=f"{stub.url}/v1", api_key="test", max_retries=0)
        items, usage = openai_compact_call(client, model="gpt-5.2", input=history, action=openai_compact())
    path, _, body = stub.requests[0]
    assert path == "/v1/responses/compact" and body == {"model": "gpt-5.2", "input": history}
    assert [i["type"] for i in items] == ["message", "compaction"] and items[1]["encrypted_content"] == "gAAAA-opaque"
    assert usage == NativeUsage(input_tokens=10_000, cache_read_tokens=40_000, output_tokens=1_200)


# --- the LangChain middleware -----------------------------------------------------------------

def _anthropic_replies(steps: int) -> Iterator[dict[str, Any]]:
    for n in range(steps):
        yield anthropic_message([{"type": "tool_use", "id": f"toolu_{n}", "name": "read_file", "input": {"path": f"src/m{n}.py"}}],
                                stop="tool_use", edits=CLEARED if n else [])
    while True:
        yield anthropic_message([{"type": "text", "text": "Done."}], edits=CLEARED)


def _sdk_chat_model() -> Any:
    """A LangChain chat model class that sends its keyword arguments (``context_management``, ``betas``) with
    ``client.beta.messages.create`` of the official SDK, so that the stub sees the request the SDK builds."""
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class AnthropicThroughSdk(BaseChatModel):
        base_url: str
        model_name: str = "claude-sonnet-4"

        @property
        def _llm_type(self) -> str:
            return "anthropic-sdk-stub"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self.bind(**kwargs)

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
            client = anthropic.Anthropic(base_url=self.base_url, api_key="test", max_retries=0)
            wire = [{"role": "assistant" if isinstance(m, AIMessage) else "user", "content": str(m.content) or "(tool call)"} for m in messages]
            reply = client.beta.messages.create(model=self.model_name, max_tokens=256, messages=wire, **kwargs)
            calls = [{"name": b.name, "args": b.input, "id": b.id} for b in reply.content if b.type == "tool_use"]
            text = "".join(b.text for b in reply.content if b.type == "text")
            return ChatResult(generations=[ChatGeneration(message=AIMessage(text, tool_calls=calls))])

    return AnthropicThroughSdk


def test_native_langchain_clearing_is_asked_for_from_the_call_the_plan_clears_at(tmp_path):
    """DP_NATIVE=anthropic-clear: dp plans every call; from the call its plan clears at on, each request
    carries clear_tool_uses_20250919 keeping every tool use after the plan's depth (so the provider clears
    the same results every time), the next plans see those results as placeholders, and the state and the
    history keep every result whole."""
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    from dp_compact.adapters.langchain import DpCompactMiddleware
    from dp_compact.pipeline.archive import ArchiveStore

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return f"{path}: " + "x = 1\n" * 300

    action = anthropic_clear_tool_uses(trigger_tokens=2_000, keep_tool_uses=1, clear_at_least_tokens=500, exclude_tools=("dp_recall", "dp_restore"))
    replies = _anthropic_replies(20)
    with Stub(lambda path, body: next(replies)) as stub:
        model = _sdk_chat_model()(base_url=stub.url, profile={"max_input_tokens": 60_000})
        middleware = DpCompactMiddleware(model, archive=ArchiveStore(tmp_path), native=action)
        agent = create_agent(model, tools=[read_file], middleware=[middleware])
        state = agent.invoke({"messages": [HumanMessage("read the modules")]}, {"configurable": {"thread_id": "native-1"}})
    assert len(stub.requests) == len(middleware.plans) == 21
    assert middleware.settings.native == "anthropic-clear" and middleware.clearings == []  # the provider clears, not dp
    decisions = [p.decision for p in middleware.plans]
    first = decisions.index("clear")  # the 60k window makes clearing pay before the loop ends
    for i, (_, headers, body) in enumerate(stub.requests):
        if i < first:
            assert "context_management" not in body
            continue
        (edit,) = body["context_management"]["edits"]
        uses = sum(1 for m in body["messages"] if m["role"] == "assistant" and m["content"] == "(tool call)")
        assert edit["type"] == "clear_tool_uses_20250919" and "clear_at_least" not in edit
        assert edit["exclude_tools"] == ["dp_recall", "dp_restore"] and edit["trigger"]["type"] == "tool_uses"
        assert 1 <= edit["keep"]["value"] < uses  # the tool uses after the plan's depth, never all
        assert ANTHROPIC_CONTEXT_MANAGEMENT_BETA in headers["anthropic-beta"]
    planned = middleware.plans[first]
    after = middleware.plans[first + 1]  # planned from the conversation as the provider shows it
    assert after.estimates.context_tokens < planned.estimates.context_tokens - planned.clearing["saved_tokens"] // 2
    results = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert len(results) == 20 and all("x = 1" in m.content for m in results)  # the state keeps every result
    assert middleware.history("native-1") == state["messages"]
    with pytest.raises(ValueError, match="Anthropic context-management edit"):
        DpCompactMiddleware(model, archive=None, native=openai_compact())


def test_native_langchain_compaction_is_sent_when_the_plan_priced_as_anthropic_bills_it_says_compact():
    """DP_NATIVE=anthropic-compact: every call is planned with compact_20260112's billing (the whole
    context read, nothing kept, no compaction below its least trigger of 50,000 tokens), and the edit
    goes only with the call the plan compacts at, asked to act on it."""
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool

    from dp_compact.adapters.langchain import DpCompactMiddleware
    from dp_compact.core.native_costs import ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return f"{path}: " + "value = compute(1)\n" * 2_000

    replies = _anthropic_replies(14)
    with Stub(lambda path, body: next(replies)) as stub:
        model = _sdk_chat_model()(base_url=stub.url, profile={"max_input_tokens": 90_000})
        middleware = DpCompactMiddleware(model, archive=None, native=anthropic_compact())
        agent = create_agent(model, tools=[read_file], middleware=[middleware])
        agent.invoke({"messages": [HumanMessage("read the modules")]}, {"configurable": {"thread_id": "native-2"}})
    assert middleware.settings.native == "anthropic-compact" and middleware.compactions == []
    assert len(middleware.plans) == len(stub.requests) == 15
    sent = [body.get("context_management") for _, _, body in stub.requests]
    compacting = [i for i, plan in enumerate(middleware.plans) if plan.decision == "compact"]
    assert compacting, [p.explanation for p in middleware.plans]  # the window forces it before the loop ends
    for plan, edit in zip(middleware.plans, sent, strict=True):
        assert plan.lookahead["native"]["action"] == "anthropic-compact"
        if plan.decision == "compact":
            assert plan.estimates.context_tokens >= ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS and plan.k == 0
            assert edit == {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS}}]}
        else:
            assert edit is None
    for i in compacting:
        assert ANTHROPIC_COMPACT_BETA in stub.requests[i][1]["anthropic-beta"]


# --- the pydantic-ai processor ----------------------------------------------------------------

def test_native_pydantic_ai_anthropic_model_settings_reach_the_api(tmp_path):
    pytest.importorskip("pydantic_ai")
    try:
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider
    except ImportError:
        pytest.skip("pydantic-ai without its anthropic model")
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory

    from dp_compact.adapters.pydantic_ai import DpCompactProcessor

    action = anthropic_compact(trigger_tokens=50_000)
    processor = DpCompactProcessor(archive=None, native=action)
    assert processor.native_model_settings() == {"anthropic_context_management": action.anthropic_kwargs()["context_management"],
                                                 "anthropic_betas": [ANTHROPIC_COMPACT_BETA]}
    reply = anthropic_message([{"type": "text", "text": "ok"}], iterations=[COMPACTION_ITERATION, MESSAGE_ITERATION])
    with Stub(lambda path, body: reply) as stub:
        client = anthropic.AsyncAnthropic(base_url=stub.url, api_key="test", max_retries=0)
        model = AnthropicModel("claude-sonnet-5-5", provider=AnthropicProvider(anthropic_client=client))
        agent = Agent(model, capabilities=[ProcessHistory(processor)], model_settings=processor.native_model_settings())
        result = asyncio.run(agent.run("hi"))
    _, headers, body = stub.requests[0]
    assert body["context_management"] == {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}]}
    assert ANTHROPIC_COMPACT_BETA in headers["anthropic-beta"]
    assert result.output == "ok" and processor.compactions == []
    assert len(processor.history(result.all_messages())) == 2


def test_native_pydantic_ai_anthropic_compaction_goes_with_the_requests_the_plan_compacts_at():
    """native_model(): each request is planned with compact_20260112's billing, and the edit (least trigger)
    goes only with the requests whose plan compacts."""
    pytest.importorskip("pydantic_ai")
    try:
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider
    except ImportError:
        pytest.skip("pydantic-ai without its anthropic model")
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory

    from dp_compact.adapters.pydantic_ai import DpCompactProcessor
    from dp_compact.core.native_costs import ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS

    processor = DpCompactProcessor("claude-sonnet-4", archive=None, native=anthropic_compact(), max_context_tokens=60_000)
    replies = _anthropic_replies(4)
    with Stub(lambda path, body: next(replies)) as stub:
        client = anthropic.AsyncAnthropic(base_url=stub.url, api_key="test", max_retries=0)
        model = processor.native_model(AnthropicModel("claude-sonnet-4", provider=AnthropicProvider(anthropic_client=client)))
        agent = Agent(model, capabilities=[ProcessHistory(processor)])

        @agent.tool_plain
        def read_file(path: str) -> str:
            """Read a file."""
            return f"{path}: " + "x = 1\n" * 6_000

        asyncio.run(agent.run("read the modules"))
    assert len(processor.plans) == len(stub.requests) == 5
    compacting = [p.decision == "compact" for p in processor.plans]
    assert any(compacting) and not all(compacting)  # the first request is small; a 24k-token result on a 31.5k prompt is not
    for plan, (_, headers, body) in zip(processor.plans, stub.requests, strict=True):
        assert plan.lookahead["native"]["action"] == "anthropic-compact"
        if plan.decision == "compact":
            assert body["context_management"] == {"edits": [{"type": "compact_20260112", "trigger": {
                "type": "input_tokens", "value": ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS}}]}
            assert ANTHROPIC_COMPACT_BETA in headers["anthropic-beta"]
        else:
            assert "context_management" not in body
    with pytest.raises(ValueError, match="native_model needs"):
        DpCompactProcessor(archive=None, native=openai_compact()).native_model(model)


def test_native_pydantic_ai_trigger_follows_the_plan():
    pytest.importorskip("pydantic_ai")
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        UserPromptPart,
    )

    from dp_compact.adapters.pydantic_ai import DpCompactProcessor

    processor = DpCompactProcessor("claude-sonnet-4", archive=None, native=openai_compact())
    short = [ModelRequest(parts=[UserPromptPart("hi")]), ModelResponse(parts=[TextPart("hello")]), ModelRequest(parts=[UserPromptPart("bye")])]
    assert processor.native_trigger(short) is False and processor.plans[-1].decision == "keep"
    assert processor(short) is short  # the processor leaves compaction to the provider
    with pytest.raises(ValueError, match="no Anthropic native action"):
        processor.native_model_settings()
    big = [ModelRequest(parts=[UserPromptPart("read everything")])]
    for n in range(30):
        big += [ModelResponse(parts=[TextPart(f"{n}: " + "lorem ipsum dolor " * 2_000)]), ModelRequest(parts=[UserPromptPart(f"go on {n}")])]
    full = DpCompactProcessor("claude-sonnet-4", archive=None, native=openai_compact(), max_context_tokens=64_000)
    assert full.native_trigger(big) is (full.plans[-1].decision == "compact")
    plan = full.plans[-1]
    assert plan.decision == "compact"  # ~300k characters of answers in a 64k window: the plan must compact
    native = plan.lookahead["native"]  # priced as the endpoint bills: the whole input read, the user messages kept
    assert native["action"] == "openai-compact" and native["kept_messages"] == 31 and native["request_tokens"] == plan.estimates.context_tokens
    assert 0 < native["kept_tokens"] < 1_000 < native["dropped_tokens"]
    users = [ModelRequest(parts=[UserPromptPart("lorem ipsum dolor " * 2_000)]) if i % 2 == 0 else ModelResponse(parts=[TextPart("ok")])
             for i in range(61)]
    stuck = DpCompactProcessor("claude-sonnet-4", archive=None, native=openai_compact(), max_context_tokens=64_000)
    assert stuck.native_trigger(users) is False  # what the endpoint keeps (the user messages) is itself above the window
    assert stuck.plans[-1].rule == "no-feasible-cut" and "cannot shrink this context" in stuck.plans[-1].explanation


def _openai_reply(path: str, body: dict[str, Any], steps: int, compacted: dict[str, Any], log: list[Any]) -> dict[str, Any]:
    """The stub's Responses API: ``/responses/compact`` answers ``compacted``; ``/responses`` calls
    ``read_file`` on a new path until ``steps`` results are in its input, then answers."""
    if path.endswith("/responses/compact"):
        return compacted
    done = sum(1 for item in body.get("input", []) if isinstance(item, dict) and item.get("type") == "function_call_output")
    n = len([p for p, _, _ in log if p.endswith("/responses")])  # this request included
    usage = {"input_tokens": 1_000, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0}, "output_tokens": 10,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 1_010}
    if n <= steps and done < steps:
        output: list[dict[str, Any]] = [{"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": "read_file",
                                         "arguments": json.dumps({"path": f"src/m{n}.py"}), "status": "completed"}]
    else:
        output = [{"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}]
    return {"id": f"resp_{n}", "object": "response", "created_at": 1_765_000_000, "model": "gpt-5.4", "status": "completed",
            "output": output, "usage": usage, "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "error": None,
            "incomplete_details": None, "instructions": None, "metadata": {}, "temperature": 1.0, "top_p": 1.0}


def test_native_pydantic_ai_openai_compact_endpoint_when_the_plan_says_compact():
    """dp plans, pydantic-ai's ``OpenAICompaction`` calls ``/responses/compact``, the next request carries the compaction item."""
    pytest.importorskip("pydantic_ai")
    try:
        from pydantic_ai.models.openai import OpenAICompaction, OpenAIResponsesModel
        from pydantic_ai.providers.openai import OpenAIProvider
    except ImportError:
        pytest.skip("pydantic-ai without its OpenAI model")
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.usage import UsageLimits

    from dp_compact.adapters.pydantic_ai import DpCompactProcessor

    compacted = {"id": "cmp_1", "created_at": 1_765_000_000, "object": "response.compaction",
                 "output": [{"id": "msg_u", "type": "message", "role": "user", "status": "completed",
                             "content": [{"type": "input_text", "text": "read the modules"}]},
                            {"id": "cmp_item_1", "type": "compaction", "encrypted_content": "gAAAA-opaque"}],
                 "usage": {"input_tokens": 9_000, "input_tokens_details": {"cached_tokens": 8_000, "cache_write_tokens": 0},
                           "output_tokens": 700, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 9_700}}
    processor = DpCompactProcessor(archive=None, native=openai_compact(), max_context_tokens=16_000, v=500)
    with Stub(lambda path, body: _openai_reply(path, body, 8, compacted, stub.requests)) as stub:
        client = openai.AsyncOpenAI(base_url=f"{stub.url}/v1", api_key="test", max_retries=0)
        model = OpenAIResponsesModel("gpt-5.4", provider=OpenAIProvider(openai_client=client))
        agent = Agent(model, capabilities=[ProcessHistory(processor), OpenAICompaction(trigger=processor.native_trigger)])

        @agent.tool_plain
        def read_file(path: str) -> str:
            """Read a file."""
            return f"{path}\n" + "def f(x): return x + 1  # a line of the module\n" * 300

        result = asyncio.run(agent.run("read the modules", usage_limits=UsageLimits(request_limit=None)))
    log = stub.requests
    paths = [p for p, _, _ in log]
    assert result.output == "Done."
    assert "/v1/responses/compact" in paths, "the plan never said compact: the stub's tool outputs must outgrow the window"
    assert any(p.decision == "compact" for p in processor.plans) and processor.compactions == []
    after = log[paths.index("/v1/responses/compact") + 1][2]
    assert any(item.get("type") == "compaction" and item.get("encrypted_content") == "gAAAA-opaque" for item in after["input"])
    reads = [p for m in processor.history(result.all_messages()) for p in getattr(m, "parts", []) if getattr(p, "tool_name", None) == "read_file"
             and getattr(p, "part_kind", "") == "tool-return"]
    assert len(reads) == 8  # the processor's record keeps every tool result the provider compacted away


def test_native_edit_without_the_anthropic_sdk_names_the_extra(monkeypatch):
    import sys

    from dp_compact.errors import MissingExtraError

    for name in [m for m in sys.modules if m == "anthropic" or m.startswith("anthropic.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "anthropic", None)  # import anthropic now fails
    with pytest.raises(MissingExtraError, match=r'needs the llm extra.*pip install "\.\[llm\]"'):
        anthropic_compact()
    with pytest.raises(MissingExtraError, match="llm extra"):
        anthropic_clear_tool_uses()
