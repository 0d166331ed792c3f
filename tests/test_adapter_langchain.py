"""DpCompactMiddleware inside a real LangChain ``create_agent`` loop, with a scripted chat model.

The script is fixed (the same tool call at every step whatever the prompt), so that two
middlewares are compared on the same work: what changes is what each request carries.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="the langchain extra is not installed")

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import SummarizationMiddleware  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage  # noqa: E402
from langchain_core.messages.utils import count_tokens_approximately  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

from dp_compact.adapters.langchain import METADATA_KEY, DpCompactMiddleware, model_facts, to_openai, usage_of  # noqa: E402
from dp_compact.pipeline.archive import ArchiveStore  # noqa: E402
from dp_compact.pipeline.validate import validate_messages  # noqa: E402
from dp_compact.pricing import get_prices  # noqa: E402

STEPS = 64  # tool-calling model calls before the final answer
WINDOW = 64_000  # the scripted model's profile window, tokens
PREFIX_TOKENS = 3_000  # what the provider counts beside the messages (system prompt, tool schemas)
OUTPUT_TOKENS = 60
SUMMARY_TOKENS = 500  # the fake summary model's answer, for SummarizationMiddleware
PRICES = get_prices("claude-sonnet-4")


class ScriptedModel(BaseChatModel):
    """Calls ``read_file`` on a new module at every step, then answers; reports usage like a provider."""

    model_name: str = "claude-sonnet-4"
    calls: list[list[BaseMessage]] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self

    def step(self, n: int) -> tuple[str, dict[str, Any] | None]:
        """The text and tool call (None: the final answer) of call ``n``."""
        if n < STEPS:
            return f"Reading module {n}.", {"name": "read_file", "args": {"path": f"src/mod_{n}.py"}, "id": f"call_{n}"}
        return "All modules read.", None

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        n = len(self.calls)
        self.calls.append(list(messages))
        prompt = prompt_tokens(messages)
        usage = {"input_tokens": prompt, "output_tokens": OUTPUT_TOKENS, "total_tokens": prompt + OUTPUT_TOKENS}
        text, call = self.step(n)
        message = AIMessage(content=text, tool_calls=[call] if call else [], usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])


class FakeSummaryModel(BaseChatModel):
    """SummarizationMiddleware's summary model: records each prompt, answers SUMMARY_TOKENS of text."""

    prompts: list[int] = []

    @property
    def _llm_type(self) -> str:
        return "fake-summary"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.prompts.append(count_tokens_approximately(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="summary " * SUMMARY_TOKENS))])


@tool
def read_file(path: str) -> str:
    """Read a source file."""
    return "\n".join(f"{path}:{i}: def function_{i}(x): return x * {i}  # body of the function" for i in range(120))


def prompt_tokens(messages: list[BaseMessage]) -> int:
    """The prompt the scripted provider reports: prefix plus LangChain's approximate message count."""
    return PREFIX_TOKENS + count_tokens_approximately(messages)


def request_costs(calls: list[list[BaseMessage]]) -> tuple[float, int]:
    """($ of the agent's model calls, calls over the window): the longest unchanged message prefix is a
    cache read, the rest a cache write, the output at P_out (DESIGN §6 "Cache")."""
    total, overflows, previous = 0.0, 0, []
    for messages in calls:
        shared = 0
        while shared < min(len(messages), len(previous)) and to_openai(messages[shared]) == to_openai(previous[shared]):
            shared += 1
        prompt = prompt_tokens(messages)
        cached = PREFIX_TOKENS + count_tokens_approximately(messages[:shared]) if previous else 0
        total += (cached * PRICES.p_cache + (prompt - cached) * PRICES.p_write + OUTPUT_TOKENS * PRICES.p_out) / 1e6
        overflows += prompt > WINDOW
        previous = messages
    return total, overflows


def run(middleware: list[Any], model: ScriptedModel) -> dict[str, Any]:
    agent = create_agent(model, tools=[read_file], middleware=middleware)
    task = HumanMessage("Read every module under src/ and tell me what each one does.")
    return agent.invoke({"messages": [task]}, {"recursion_limit": 4 * STEPS + 20, "configurable": {"thread_id": "t-1"}})


@pytest.fixture(scope="module")
def dp_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[DpCompactMiddleware, ScriptedModel, dict[str, Any], Path]:
    root = tmp_path_factory.mktemp("archive")
    model = ScriptedModel(profile={"max_input_tokens": WINDOW}, calls=[])
    # compactions under test: clearing old tool results off (tests/test_adapter_clear.py runs this loop with it on)
    middleware = DpCompactMiddleware(model, archive=ArchiveStore(root), clear_tool_results=False)
    state = run([middleware], model)
    return middleware, model, state, root


def test_langchain_agent_runs_sixty_steps_and_compacts(dp_run):
    middleware, model, state, _ = dp_run
    assert len(model.calls) == STEPS + 1
    assert state["messages"][-1].content == "All modules read."
    assert len(middleware.plans) == STEPS + 1  # one plan before every model call
    assert len(middleware.compactions) >= 2


def test_langchain_compacts_exactly_where_the_planner_says(dp_run):
    middleware, model, _, _ = dp_run
    compactions = iter(middleware.compactions)
    for j, plan in enumerate(middleware.plans):
        sent = model.calls[j]
        if plan.decision != "compact":  # untouched: the previous request plus what the loop appended
            if j:
                assert [m.id for m in sent[: len(model.calls[j - 1])]] == [m.id for m in model.calls[j - 1]]
            continue
        result = next(compactions)
        assert result.plan is plan and result.cut == plan.cut and result.k == plan.k
        assert plan.n_messages == len(model.calls[j - 1]) + 2  # the state the plan saw: last request, response, tool result
        assert len(sent) == len(result.messages)
        summary = sent[0]
        assert isinstance(summary, HumanMessage) and summary.additional_kwargs[METADATA_KEY]["archive_ref"] == result.archive_ref
        kept = sent[len(sent) - plan.k :]
        assert all(isinstance(m, BaseMessage) and m.id for m in kept)
    assert next(compactions, None) is None


def test_langchain_every_request_is_valid_for_the_provider(dp_run):
    _, model, _, _ = dp_run
    for j, messages in enumerate(model.calls):
        violations = validate_messages([to_openai(m) for m in messages], "openai")
        assert violations == (), (j, violations)


def test_langchain_kept_messages_are_the_same_objects(dp_run):
    middleware, model, _, _ = dp_run
    first = middleware.compactions[0]
    j = middleware.plans.index(first.plan)
    before = {m.id: m for m in model.calls[j - 1]}
    for message in model.calls[j][len(model.calls[j]) - first.k :]:
        if message.id in before:
            assert message is before[message.id] or message == before[message.id]


def test_langchain_head_is_archived_and_recallable(dp_run):
    middleware, _, _, root = dp_run
    store = ArchiveStore(root)
    first = middleware.compactions[0]
    hits = store.search("src/mod_0.py")
    assert first.archive_ref in [h.ref for h in hits]  # later heads hold earlier summaries that name it too
    assert {h.ref for h in hits} <= {r.archive_ref for r in middleware.compactions}
    restored = store.restore(first.archive_ref)
    assert restored[0]["content"].startswith("Read every module")
    assert any(m.get("tool_call_id") == "call_0" for m in restored)
    assert hits[0].session == "t-1"  # the graph's thread id


def test_langchain_usage_after_compaction_is_not_reused(dp_run):
    """A kept AIMessage's usage measured the prompt before compaction: the summary names it stale."""
    middleware, model, _, _ = dp_run
    first = middleware.compactions[0]
    j = middleware.plans.index(first.plan)
    info = model.calls[j][0].additional_kwargs[METADATA_KEY]
    kept_ai = [m.id for m in model.calls[j][len(model.calls[j]) - first.k :] if isinstance(m, AIMessage)]
    assert info["stale_usage_ids"] == kept_ai and kept_ai
    again = DpCompactMiddleware(ScriptedModel(profile={"max_input_tokens": WINDOW}, calls=[]), archive=None)
    assert again.compact_messages(model.calls[j]) is None  # a compaction is a fixed point of the plan
    replanned = again.plans[0]
    assert replanned.estimates.context_source == "estimate"  # V + T, not the stale record of the old prompt
    assert replanned.estimates.context_tokens == replanned.settings["v"] + replanned.total_tokens
    # V: the one the compaction's plan measured, stated in its summary (the compacted messages measure none)
    assert first.plan.v_source == "measured" and (replanned.settings["v"], replanned.v_source) == (first.plan.settings["v"], "recorded")


def test_langchain_cost_against_summarization_middleware(dp_run, capsys):
    _, dp_model, _, _ = dp_run
    dp_usd, dp_overflows = request_costs(dp_model.calls)
    dp_usd += sum(
        (PRICES.p_cache * (PREFIX_TOKENS + r.head_tokens) + PRICES.p_input * 70 + PRICES.p_out * r.summary_tokens) / 1e6
        for r in dp_run[0].compactions
    )  # each compaction charged as an LLM summary request would cost (DESIGN §2 ③), though the extractive one costs nothing

    plain = ScriptedModel(profile={"max_input_tokens": WINDOW}, calls=[])
    run([SummarizationMiddleware(plain, summarizer=FakeSummaryModel(prompts=[]))], plain)  # its defaults: no trigger
    plain_usd, plain_overflows = request_costs(plain.calls)

    model = ScriptedModel(profile={"max_input_tokens": WINDOW}, calls=[])
    summarizer = FakeSummaryModel(prompts=[])
    run([SummarizationMiddleware(model, trigger=("fraction", 0.8), summarizer=summarizer)], model)
    sm_usd, sm_overflows = request_costs(model.calls)
    sm_usd += sum(p * PRICES.p_input + SUMMARY_TOKENS * PRICES.p_out for p in summarizer.prompts) / 1e6
    sm_compactions = sum(len(b) < len(a) for a, b in zip(model.calls, model.calls[1:], strict=False))
    lost = sum("too long to summarize" in str(c[0].content) for c in model.calls if c)

    with capsys.disabled():
        print(f"\n{STEPS + 1} calls, window {WINDOW:,}, {PRICES.name} prices")
        print(f"  dp-compact middleware              ${dp_usd:.4f}  {len(dp_run[0].compactions)} compactions, {dp_overflows} over the window")
        print(f"  SummarizationMiddleware defaults   ${plain_usd:.4f}  never triggers, {plain_overflows} over the window")
        print(f"  SummarizationMiddleware 0.8 · M    ${sm_usd:.4f}  {sm_compactions} compactions, {len(summarizer.prompts)} summary calls, {sm_overflows} over the window")
        if lost:
            print(f"    its default trim (4,000 tokens from a human message) kept nothing in {lost} requests: 'too long to summarize'")
    assert dp_overflows == 0 and plain_overflows > 0
    assert dp_usd < plain_usd


def test_langchain_model_facts_from_profile_and_usage_metadata():
    model = ScriptedModel(profile={"max_input_tokens": 32_000}, calls=[])
    facts = model_facts(model)
    assert (facts.name, facts.window) == ("claude-sonnet-4", 32_000)
    middleware = DpCompactMiddleware(model, archive=None, p_out=9.0)
    assert middleware.settings.p_out == 9.0
    assert model_facts("anthropic:claude-sonnet-4").name == "claude-sonnet-4"
    message = AIMessage("x", usage_metadata={"input_tokens": 900, "output_tokens": 7, "total_tokens": 907,
                                             "input_token_details": {"cache_read": 800}})
    usage = usage_of(message)
    assert (usage.prompt_tokens, usage.cache_read_tokens, usage.output_tokens) == (900, 800, 7)
    assert usage_of(HumanMessage("x")) is None


def test_langchain_short_conversation_is_left_untouched():
    middleware = DpCompactMiddleware("claude-sonnet-4", archive=None)
    messages = [HumanMessage("hi", id="1"), AIMessage("hello", id="2"), HumanMessage("bye", id="3")]
    assert middleware.compact_messages(messages) is None
    assert [p.decision for p in middleware.plans] == ["keep"]


BIG_STEPS = 12  # tool calls with large outputs before the final answer


def search_rows(query: str) -> str:
    """A ~40k-character tool output holding no path, command or error line."""
    return "\n".join(f"{query} result {i}: value {i * 7} lorem ipsum dolor sit amet consectetur" for i in range(560))


class ScriptedSearchModel(ScriptedModel):
    """Calls ``search`` with a new query at every step (each output ~40k characters), then answers."""

    calls: list[list[BaseMessage]] = []

    @property
    def _llm_type(self) -> str:
        return "scripted-search"

    def step(self, n: int) -> tuple[str, dict[str, Any] | None]:
        if n < BIG_STEPS:
            return "", {"name": "search", "args": {"query": f"quarter {n}"}, "id": f"call_{n}"}
        return "Done.", None


def test_langchain_tool_loop_with_large_outputs_stays_under_the_window(caplog):
    """A short prompt and tool calls with ~40k-character outputs: every forced compaction succeeds
    (the extractive summary names the calls), so no request goes over the window."""

    @tool
    def search(query: str) -> str:
        """Search the data."""
        return search_rows(query)

    model = ScriptedSearchModel(profile={"max_input_tokens": WINDOW}, calls=[])
    middleware = DpCompactMiddleware(model, archive=None)
    agent = create_agent(model, tools=[search], middleware=[middleware])
    with caplog.at_level("WARNING"):
        agent.invoke({"messages": [HumanMessage("Sum the sales.")]}, {"recursion_limit": 4 * BIG_STEPS + 20})
    assert "compaction skipped" not in caplog.text
    assert len(model.calls) == BIG_STEPS + 1 and middleware.compactions
    assert max(prompt_tokens(m) for m in model.calls) < WINDOW
    assert all(plan.estimates.context_tokens < WINDOW for plan in middleware.plans if plan.decision != "compact")
    assert all("search(query=quarter" in r.summary for r in middleware.compactions if r.cut > 1)  # heads holding a call
