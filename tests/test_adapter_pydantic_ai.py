"""DpCompactProcessor inside a real pydantic-ai Agent loop, with a FunctionModel calling a tool 60+ times."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, UserPromptPart  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.usage import RequestUsage, UsageLimits  # noqa: E402

from dp_compact.adapters.pydantic_ai import METADATA_KEY, DpCompactProcessor, to_openai, usage_of  # noqa: E402
from dp_compact.pipeline.archive import ArchiveStore  # noqa: E402
from dp_compact.pipeline.validate import validate_messages  # noqa: E402

STEPS = 62
WINDOW = 64_000


def _agent(processor: DpCompactProcessor, seen: list[list[ModelMessage]]) -> Agent:
    """An agent whose model reads a new module at every step (whatever the history), then answers."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        n = len(seen) - 1
        if n < STEPS:
            return ModelResponse(parts=[TextPart(f"Reading module {n}."), ToolCallPart("read_file", {"path": f"src/mod_{n}.py"}, f"call_{n}")])
        return ModelResponse(parts=[TextPart("All modules read.")])

    try:
        from pydantic_ai.capabilities import ProcessHistory

        agent = Agent(FunctionModel(respond, model_name="claude-sonnet-4"), system_prompt="You read code.",
                      capabilities=[ProcessHistory(processor)])
    except ImportError:  # pydantic-ai 1.x
        agent = Agent(FunctionModel(respond, model_name="claude-sonnet-4"), system_prompt="You read code.", history_processors=[processor])

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a source file."""
        return "\n".join(f"{path}:{i}: def function_{i}(x): return x * {i}  # body of the function" for i in range(120))

    return agent


@pytest.fixture(scope="module")
def loop(tmp_path_factory: pytest.TempPathFactory) -> tuple[DpCompactProcessor, list[list[ModelMessage]], object, Path]:
    root = tmp_path_factory.mktemp("archive")
    # compactions under test: clearing old tool results off (tests/test_adapter_clear.py runs this loop with it on)
    processor = DpCompactProcessor(session_id="pai-1", archive=ArchiveStore(root), max_context_tokens=WINDOW, v=1_000, clear_tool_results=False)
    seen: list[list[ModelMessage]] = []
    agent = _agent(processor, seen)  # asyncio.run closes its event loop (run_sync leaves one for the garbage collector)
    result = asyncio.run(agent.run("Read every module under src/.", usage_limits=UsageLimits(request_limit=None)))
    return processor, seen, result, root


def test_pydantic_ai_run_leaves_no_unclosed_resource(loop, recwarn):
    gc.collect()
    assert not [w for w in recwarn if issubclass(w.category, ResourceWarning)]


def test_pydantic_ai_loop_runs_and_compacts(loop):
    processor, seen, result, _ = loop
    assert len(seen) == STEPS + 1 and result.output == "All modules read."
    assert len(processor.plans) == STEPS + 1
    assert len(processor.compactions) >= 2


def test_pydantic_ai_compacts_where_the_planner_says_and_keeps_the_tail(loop):
    processor, seen, _, _ = loop
    compactions = iter(processor.compactions)
    for j, plan in enumerate(processor.plans):
        if plan.decision != "compact":
            if j:  # untouched: the previous history plus the response and the tool results
                assert seen[j][: len(seen[j - 1])] == seen[j - 1]
            continue
        result = next(compactions)
        assert result.plan is plan
        sent = seen[j]
        first = sent[0]
        assert isinstance(first, ModelRequest) and first.metadata[METADATA_KEY]["archive_ref"] == result.archive_ref
        assert first.parts[0].part_kind == "system-prompt" and isinstance(first.parts[-1], UserPromptPart)
        assert first.parts[-1].content.startswith("[summary]")
        tail = [w for w, _, _ in to_openai(sent)][-plan.k:]
        assert len(tail) == plan.k
        assert [w.get("tool_call_id") for w in tail if w["role"] == "tool"][-1] == f"call_{j - 1}"
    assert next(compactions, None) is None


def test_pydantic_ai_every_request_is_valid(loop):
    _, seen, _, _ = loop
    for j, messages in enumerate(seen):
        assert validate_messages([w for w, _, _ in to_openai(messages)], "openai") == (), j
        assert isinstance(messages[-1], ModelRequest)


def test_pydantic_ai_head_is_archived(loop):
    processor, _, _, root = loop
    store = ArchiveStore(root)
    first = processor.compactions[0]
    assert first.archive_ref in [h.ref for h in store.search("src/mod_0.py", session="pai-1")]
    restored = store.restore(first.archive_ref)
    assert restored[0] == {"role": "user", "content": "Read every module under src/."}


def test_pydantic_ai_usage_of_a_response():
    response = ModelResponse(parts=[TextPart("x")], usage=RequestUsage(input_tokens=900, cache_read_tokens=800, output_tokens=5))
    usage = usage_of(response)
    assert (usage.prompt_tokens, usage.cache_read_tokens, usage.output_tokens) == (900, 800, 5)
    assert usage_of(ModelRequest(parts=[UserPromptPart("x")])) is None


def test_pydantic_ai_short_history_is_returned_as_is():
    processor = DpCompactProcessor("claude-sonnet-4", archive=None)
    history = [ModelRequest(parts=[UserPromptPart("hi")]), ModelResponse(parts=[TextPart("hello")]), ModelRequest(parts=[UserPromptPart("bye")])]
    assert processor(history) is history


def test_pydantic_ai_tool_loop_with_large_outputs_stays_under_the_window(caplog):
    """A short prompt and tool calls with ~40k-character outputs: forced compactions succeed (the
    extractive summary names the calls), so the estimated context stays under the window."""
    steps = 12
    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        n = len(seen) - 1
        if n < steps:
            return ModelResponse(parts=[ToolCallPart("search", {"query": f"quarter {n}"}, f"call_{n}")])
        return ModelResponse(parts=[TextPart("Done.")])

    processor = DpCompactProcessor(archive=None, max_context_tokens=WINDOW, v=1_000)
    try:
        from pydantic_ai.capabilities import ProcessHistory

        agent = Agent(FunctionModel(respond, model_name="claude-sonnet-4"), capabilities=[ProcessHistory(processor)])
    except ImportError:  # pydantic-ai 1.x
        agent = Agent(FunctionModel(respond, model_name="claude-sonnet-4"), history_processors=[processor])

    @agent.tool_plain
    def search(query: str) -> str:
        """Search the data."""
        return "\n".join(f"{query} result {i}: value {i * 7} lorem ipsum dolor sit amet consectetur" for i in range(560))

    with caplog.at_level("WARNING"):
        asyncio.run(agent.run("Sum the sales.", usage_limits=UsageLimits(request_limit=None)))
    assert "compaction skipped" not in caplog.text
    assert len(seen) == steps + 1 and processor.compactions
    assert all(plan.estimates.context_tokens < WINDOW for plan in processor.plans if plan.decision != "compact")
    assert all(r.output_tokens + processor.settings.v < WINDOW for r in processor.compactions)
    assert all("search(query=quarter" in r.summary for r in processor.compactions if r.cut > 1)


@pytest.mark.parametrize(("given", "recorded", "priced"), [
    ("gemini-2.5-pro", "function:respond:", "gemini-2.5-pro"),  # a FunctionModel's own name: no prices, the given one wins
    ("gemini-2.5-pro", "claude-sonnet-4", "claude-sonnet-4"),  # a model a price list knows: what was really called
    (None, "function:respond:", "function:respond:"),  # nothing given: the recorded name (priced by the default provider)
])
def test_pydantic_ai_prices_the_given_model_when_the_recorded_one_has_no_prices(given, recorded, priced):
    processor = DpCompactProcessor(given, archive=None)
    history = [ModelRequest(parts=[UserPromptPart("hi")]), ModelResponse(parts=[TextPart("hello")], model_name=recorded),
               ModelRequest(parts=[UserPromptPart("more")])]
    assert processor._facts(history).name == priced
    processor(history)
    if given == "gemini-2.5-pro" and priced == given:
        assert processor.plans[-1].to_dict()["prices"]["max_context_tokens"] == 1_048_576  # Gemini 2.5 Pro's window, not the default's
