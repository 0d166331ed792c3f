"""The adapters carry out the planner's clearing of old tool results (DESIGN §9).

A real transcript of ../shared/sessions is replayed round by round through the LangChain
middleware and the pydantic-ai processor, as an agent grows it (a model call before each
assistant message, the list the adapter returns adopted, the provider's usage measured from what
was sent). Where a plan clears, the output must be the input with every long tool result before
the plan's depth replaced by a placeholder naming the archive key, everything else unchanged
(tool call ids, pairing, user and assistant messages); the archive and the recall tools must give
the originals back; the next call must plan from the changed history as a fresh full read does.
Then the scripted agent loops of test_adapter_langchain.py and test_adapter_pydantic_ai.py run
with clearing on, through the frameworks' own state handling.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain", reason="the langchain extra is not installed")
pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart  # noqa: E402
from pydantic_ai.usage import RequestUsage, UsageLimits  # noqa: E402

from dp_compact.adapters import langchain as lc  # noqa: E402
from dp_compact.adapters import pydantic_ai as pai  # noqa: E402
from dp_compact.adapters.live import adapter_decision  # noqa: E402
from dp_compact.measure.clearing import CLEAR_MIN_CHARS, is_cleared_text  # noqa: E402
from dp_compact.pipeline.archive import ArchiveStore  # noqa: E402
from dp_compact.pipeline.extract import paths  # noqa: E402
from dp_compact.pipeline.validate import validate_messages  # noqa: E402
from tests.conftest import SESSIONS, need  # noqa: E402
from tests.test_adapter_live import CALL_S, USER_S, Clock, _full_langchain_plan, _prompt_tokens, _rounds  # noqa: E402

#: A Codex transcript whose long tool outputs make the look-ahead clear old results (32k and 200k windows).
TRANSCRIPT = "codex/codex_raze.jsonl"
WINDOW = 200_000


def _ref_of(text: str) -> str:
    """The ``archive://...#msg-N`` a placeholder names."""
    return text.rsplit("dp-compact restore ", 1)[1].rstrip("]")


def replay_langchain(path: Path, middleware: lc.DpCompactMiddleware, clock: Clock) -> list[tuple[list[Any], list[Any] | None, dict[str, float], float]]:
    """Grow the transcript's LangChain messages through ``middleware`` (its output adopted, usage measured
    from what was sent): ``(given, output, times, now)`` per call, ``times`` the call time of each AIMessage id."""
    state: list[Any] = []
    times: dict[str, float] = {}
    calls = []
    for number, (user, text, tool_calls) in enumerate(_rounds(path)):
        if user is not None:
            clock.now += USER_S
            state = [*state, HumanMessage(user, id=f"h{number}")]
        given = list(state)
        update = middleware.before_model({"messages": given}, None)  # type: ignore[arg-type] # the hook, outside a graph
        out = update["messages"][1:] if update is not None else None  # after RemoveMessage(id=REMOVE_ALL_MESSAGES)
        calls.append((given, out, dict(times), clock.now))
        state = out if out is not None else given
        prompt, cached = _prompt_tokens(sum(len(json.dumps(lc.to_openai(m))) for m in state))
        ai = AIMessage(text, id=f"a{number}", tool_calls=[{"name": n, "args": a, "id": c} for c, n, a, _ in tool_calls],
                       usage_metadata={"input_tokens": prompt, "output_tokens": 100, "total_tokens": prompt + 100,
                                       "input_token_details": {"cache_read": cached}})
        times[ai.id] = clock.now
        state = [*state, ai, *(ToolMessage(o, tool_call_id=c, name=n, id=f"t{c}") for c, n, _, o in tool_calls)]
        clock.now += CALL_S
    return calls


def replay_pydantic(path: Path, processor: pai.DpCompactProcessor, clock: Clock) -> list[tuple[list[Any], list[Any]]]:
    """As :func:`replay_langchain` with pydantic-ai messages: ``(given, output)`` per request."""
    state: list[Any] = []
    pending: list[Any] = []
    calls = []
    for user, text, tool_calls in _rounds(path):
        if user is not None:
            clock.now += USER_S
            pending.append(UserPromptPart(user))
        if pending:
            state = [*state, ModelRequest(parts=pending)]
        given = list(state)
        state = processor(given)
        calls.append((given, state))
        prompt, cached = _prompt_tokens(sum(len(json.dumps(w)) for w, _, _ in pai.to_openai(state)))
        parts: list[Any] = ([TextPart(text)] if text else []) + [ToolCallPart(n, a, c) for c, n, a, _ in tool_calls]
        state = [*state, ModelResponse(parts=parts or [TextPart("(done)")], model_name="claude-sonnet-4",
                                       usage=RequestUsage(input_tokens=prompt, cache_read_tokens=cached, output_tokens=100))]
        pending = [ToolReturnPart(n, o, c) for c, n, _, o in tool_calls]
        clock.now += CALL_S
    return calls


@pytest.fixture(scope="module")
def langchain_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[lc.DpCompactMiddleware, list[Any], list[Any], Path]:
    path = need(SESSIONS / TRANSCRIPT)
    root = tmp_path_factory.mktemp("archive")
    clock = Clock()
    middleware = lc.DpCompactMiddleware("claude-sonnet-4", archive=ArchiveStore(root), max_context_tokens=WINDOW, clock=clock,
                                        clear_tool_results=True)
    calls = replay_langchain(path, middleware, clock)
    return middleware, calls, [p for p in middleware.plans], root


def _clearing_calls(calls: list[Any], plans: list[Any]) -> list[tuple[int, Any]]:
    """(call index, plan) of every call whose plan cleared."""
    assert len(calls) == len(plans)
    return [(j, plan) for j, plan in enumerate(plans) if plan.decision == "clear"]


def test_langchain_clears_old_tool_results_where_the_plan_says(langchain_run):
    middleware, calls, plans, _ = langchain_run
    cleared = _clearing_calls(calls, plans)
    assert cleared, "the transcript must make the plan clear"
    assert [r.plan for r in middleware.clearings] == [plan for _, plan in cleared]  # each clearing recorded with its plan
    assert all(p.decision != "clear" for p in plans if not any(p is c.plan for c in middleware.clearings))
    for j, plan in cleared:
        given, out, _, _ = calls[j]
        result = middleware.clearings[[p for _, p in cleared].index(plan)]
        depth = plan.clearing["depth"]
        assert result.depth == depth and out is not None and len(out) == len(given)
        changed = 0
        for n, (before, after) in enumerate(zip(given, out, strict=True)):
            assert after.id == before.id and type(after) is type(before)
            if not isinstance(before, ToolMessage):
                assert after is before  # user messages, assistant text and tool calls: the same objects
                continue
            assert after.tool_call_id == before.tool_call_id and after.name == before.name
            clearable = n < depth and len(str(before.content)) >= CLEAR_MIN_CHARS and not is_cleared_text(str(before.content))
            if clearable:
                changed += 1
                assert is_cleared_text(after.content) and _ref_of(after.content) == f"{result.archive_ref}#msg-{n}"
                assert len(after.content) < len(before.content)
            else:
                assert after is before
        assert changed == len(result.cleared_message_indices) > 0
        assert validate_messages([lc.to_openai(m) for m in out], "openai") == ()  # every result still answers its call


def test_langchain_recall_restores_a_cleared_result(langchain_run):
    middleware, calls, plans, root = langchain_run
    j, plan = _clearing_calls(calls, plans)[0]
    given, out, _, _ = calls[j]
    n = next(i for i, (a, b) in enumerate(zip(given, out, strict=True)) if a is not b)
    original, placeholder = given[n], out[n]
    restore = next(t for t in middleware.tools if t.name == "dp_restore")
    page = restore.invoke({"ref": _ref_of(placeholder.content)})
    restored = json.loads(page.splitlines()[1])
    assert restored == lc.to_openai(original)
    assert ArchiveStore(root).restore(_ref_of(placeholder.content)) == [lc.to_openai(original)]
    found = paths(str(original.content))
    if found:  # the clearing's archive is indexed by the paths its results name
        hits = middleware.recall.search(found[0], limit=20)
        assert middleware.clearings[0].archive_ref in hits
    assert original in middleware.history()  # the application's record keeps the result as it was
    assert all(not is_cleared_text(str(m.content)) for m in middleware.history() if isinstance(m, ToolMessage))


def test_langchain_replans_a_cleared_history_as_a_full_read_does(langchain_run):
    """The call after a clearing rebuilds the kept state (the list changed) and plans as a fresh full read of the
    same messages does: the usage recorded before the clearing is stale, the first placeholder states the evidence."""
    middleware, calls, plans, _ = langchain_run
    cleared = [j for j, _ in _clearing_calls(calls, plans)]
    assert cleared[0] + 1 < len(calls)
    assert middleware.transcripts["langchain"].rebuilds >= 1
    for j in (j + 1 for j in cleared if j + 1 < len(calls)):
        given, _, times, now = calls[j]
        assert any(isinstance(m, ToolMessage) and is_cleared_text(str(m.content)) for m in given)
        assert plans[j].to_dict() == _full_langchain_plan(middleware, given, times, now).to_dict(), j
    first = cleared[0]
    before, after = calls[first][0], calls[first + 1][0]
    stale = {m.id for m in before if isinstance(m, AIMessage)}
    usages = dict(zip((m.id for m in after), lc._usages(after), strict=True))
    assert stale and all(usages[i] is None for i in stale)  # measured prompts that held the cleared results
    fresh = usages[f"a{max(int(i[1:]) for i in stale) + 1}"]  # the record of the call made after the clearing
    estimates = plans[first + 1].estimates
    assert fresh is not None and estimates.context_source == "usage"
    assert f"the last call's prompt ({fresh.prompt_tokens:,} tokens" in estimates.context_note  # not a stale, larger one


def test_pydantic_ai_clears_and_restores_and_replans(tmp_path):
    path = need(SESSIONS / TRANSCRIPT)
    clock = Clock()
    processor = pai.DpCompactProcessor("claude-sonnet-4", archive=ArchiveStore(tmp_path), max_context_tokens=WINDOW, clock=clock,
                                       clear_tool_results=True)
    calls = replay_pydantic(path, processor, clock)
    cleared = _clearing_calls(calls, processor.plans)
    assert cleared and len(processor.clearings) == len(cleared)
    for k, (j, plan) in enumerate(cleared):
        given, out = calls[j]
        result = processor.clearings[k]
        assert result.plan is plan and len(out) == len(given)
        changed = 0
        for index, ((wire, n, parts), (new_wire, new_n, new_parts)) in enumerate(zip(pai.to_openai(given), pai.to_openai(out), strict=True)):
            assert (n, parts, wire.get("tool_call_id"), wire["role"]) == (new_n, new_parts, new_wire.get("tool_call_id"), new_wire["role"])
            if new_wire == wire:
                continue
            changed += 1
            assert wire["role"] == "tool" and index < result.depth and len(wire["content"]) >= CLEAR_MIN_CHARS
            assert _ref_of(new_wire["content"]) == f"{result.archive_ref}#msg-{index}"
            assert processor.recall.restore(_ref_of(new_wire["content"])).splitlines()[1] == json.dumps(wire, ensure_ascii=False)
        assert changed == len(result.cleared_message_indices) > 0
        for before, after in zip(given, out, strict=True):
            if isinstance(before, ModelResponse):
                assert after is before
        assert validate_messages([w for w, _, _ in pai.to_openai(out)], "openai") == ()
    j = cleared[0][0]
    assert j + 1 < len(calls) and len(processor.plans) == len(calls)  # the next requests planned without error
    following = calls[j + 1][0]
    responses = [n for n, m in enumerate(following) if isinstance(m, ModelResponse)]
    usages = pai._usages(following)
    assert all(usages[n] is None for n in responses[:-1]) and usages[responses[-1]] is not None  # only the post-clearing record counts
    history = processor.history()
    assert all(not is_cleared_text(str(p.content)) for m in history if isinstance(m, ModelRequest) for p in m.parts
               if isinstance(p, ToolReturnPart))


def test_clearing_off_by_setting_clears_nothing(monkeypatch, tmp_path):
    path = need(SESSIONS / TRANSCRIPT)
    monkeypatch.setenv("DP_CLEAR_TOOL_RESULTS", "false")
    clock = Clock()
    middleware = lc.DpCompactMiddleware("claude-sonnet-4", archive=ArchiveStore(tmp_path / "lc"), max_context_tokens=WINDOW, clock=clock)
    calls = replay_langchain(path, middleware, clock)
    assert not middleware.settings.clear_tool_results and not middleware.clearings
    assert all(p.decision != "clear" and p.clearing is None for p in middleware.plans)
    assert not any(isinstance(m, ToolMessage) and is_cleared_text(str(m.content)) for _, out, _, _ in calls for m in out or ())
    processor = pai.DpCompactProcessor("claude-sonnet-4", archive=ArchiveStore(tmp_path / "pai"), max_context_tokens=WINDOW, clock=clock)
    replay_pydantic(path, processor, clock)
    assert not processor.clearings and all(p.decision != "clear" for p in processor.plans)


def test_adapters_without_an_archive_or_with_a_native_action_plan_no_clearing_of_their_own():
    from dp_compact.adapters.native import anthropic_clear_tool_uses, anthropic_compact, openai_compact

    assert lc.DpCompactMiddleware("claude-sonnet-4").settings.clear_tool_results  # the default: on
    assert pai.DpCompactProcessor("claude-sonnet-4").settings.clear_tool_results
    assert lc.DpCompactMiddleware("claude-sonnet-4", clear_tool_results=True).settings.clear_tool_results
    assert not lc.DpCompactMiddleware("claude-sonnet-4", archive=None, clear_tool_results=True).settings.clear_tool_results
    assert not lc.DpCompactMiddleware("claude-sonnet-4", native=anthropic_compact(), clear_tool_results=True).settings.clear_tool_results
    assert not pai.DpCompactProcessor("claude-sonnet-4", native=openai_compact(), clear_tool_results=True).settings.clear_tool_results
    # the provider's clear_tool_uses carries the plan's clearings out: planned, with or without an archive, unless turned off
    assert lc.DpCompactMiddleware("claude-sonnet-4", archive=None, native=anthropic_clear_tool_uses()).settings.clear_tool_results
    assert not lc.DpCompactMiddleware("claude-sonnet-4", native=anthropic_clear_tool_uses(), clear_tool_results=False).settings.clear_tool_results


def test_adapter_decision_carries_a_clear_plan_out(langchain_run):
    _, _, plans, _ = langchain_run
    plan = next(p for p in plans if p.decision == "clear")
    assert adapter_decision(plan) == ("clear", plan)


def test_langchain_agent_loop_clears_through_the_graph_state(tmp_path):
    """The scripted 64-step create_agent loop with clearing on: the graph's state takes the cleared list, every
    request is valid, each message keeps its id from call to call, and the thread's history keeps the originals."""
    from tests.test_adapter_langchain import STEPS, ScriptedModel, run
    from tests.test_adapter_langchain import WINDOW as LOOP_WINDOW

    model = ScriptedModel(profile={"max_input_tokens": LOOP_WINDOW}, calls=[])
    middleware = lc.DpCompactMiddleware(model, archive=ArchiveStore(tmp_path), clear_tool_results=True)
    state = run([middleware], model)
    assert len(model.calls) == STEPS + 1 and state["messages"][-1].content == "All modules read."
    assert middleware.clearings and len(middleware.plans) == STEPS + 1
    for j, sent in enumerate(model.calls):
        assert validate_messages([lc.to_openai(m) for m in sent], "openai") == (), j
        if j and middleware.plans[j].decision in ("clear", "keep"):  # nothing removed: the same ids, in order, then the new ones
            previous = model.calls[j - 1]
            assert [m.id for m in sent[: len(previous)]] == [m.id for m in previous]
            assert [getattr(m, "tool_call_id", None) for m in sent[: len(previous)]] == [getattr(m, "tool_call_id", None) for m in previous]
        if middleware.plans[j].decision == "clear":
            assert any(isinstance(m, ToolMessage) and is_cleared_text(m.content) for m in sent)
    history = middleware.history("t-1")
    tools = [m for m in history if isinstance(m, ToolMessage)]
    assert len(tools) == STEPS and not any(is_cleared_text(m.content) for m in tools)


def test_pydantic_ai_agent_loop_clears_and_keeps_the_full_history(tmp_path):
    from tests.test_adapter_pydantic_ai import STEPS, _agent
    from tests.test_adapter_pydantic_ai import WINDOW as LOOP_WINDOW

    processor = pai.DpCompactProcessor(session_id="pai-clear", archive=ArchiveStore(tmp_path), max_context_tokens=LOOP_WINDOW, v=1_000,
                                       clear_tool_results=True)
    seen: list[Any] = []
    agent = _agent(processor, seen)
    result = asyncio.run(agent.run("Read every module under src/.", usage_limits=UsageLimits(request_limit=None)))
    assert result.output == "All modules read." and processor.clearings
    for j, messages in enumerate(seen):
        assert validate_messages([w for w, _, _ in pai.to_openai(messages)], "openai") == (), j
    j = processor.plans.index(processor.clearings[0].plan)
    returns = [p for m in seen[j] if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
    assert [p.tool_call_id for p in returns] == [f"call_{i}" for i in range(j)]
    assert any(is_cleared_text(str(p.content)) for p in returns)
    full = processor.history(result.all_messages())
    originals = [p for m in full if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
    assert len(originals) == STEPS and not any(is_cleared_text(str(p.content)) for p in originals)


def test_the_environment_turns_clearing_off_in_the_adapters(monkeypatch):
    monkeypatch.setenv("DP_CLEAR_TOOL_RESULTS", "0")
    assert not lc.DpCompactMiddleware("claude-sonnet-4").settings.clear_tool_results
    assert not pai.DpCompactProcessor("claude-sonnet-4").settings.clear_tool_results
