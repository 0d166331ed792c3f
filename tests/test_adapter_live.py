"""The adapters' state kept between calls (dp_compact.adapters.live) and what they plan with.

A real transcript of ../shared/sessions is replayed message by message through the LangChain
middleware and the pydantic-ai processor, as an agent would grow it (a model call before each
assistant message, the compacted list adopted when the adapter compacts): every plan made from the
kept state must be the plan a fresh full read of the same messages gives. The adapters plan with
the wall clock and the measured cache-hit share, as ``dp-compact plan`` does, and never
empty the context where the plan cannot show a net benefit above its expected loss.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain", reason="the langchain extra is not installed")
pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart  # noqa: E402
from pydantic_ai.usage import RequestUsage  # noqa: E402

from dp_compact.adapters import langchain as lc  # noqa: E402
from dp_compact.adapters import pydantic_ai as pai  # noqa: E402
from dp_compact.adapters.live import RULE_LOSS_GUARD, WALL_CLOCK, adapter_decision, live_session, plan_forced  # noqa: E402
from dp_compact.core.planner_lookahead import round_keep  # noqa: E402
from dp_compact.prepare import plan_prepared, plan_timing, prepare  # noqa: E402
from dp_compact.sessions import read_session  # noqa: E402
from tests.conftest import SESSIONS, need  # noqa: E402

#: Characters a recorded tool output or argument is cut to (keeps the replays quick).
MAX_CHARS = 4_000
#: Fake clock: seconds between two calls of a tool loop, and before a user's next message.
CALL_S, USER_S = 20.0, 600.0
START_S = 1.8e9


def _rounds(path: Path) -> list[tuple[str | None, str, list[tuple[str, str, dict[str, Any], str]]]]:
    """(user text or None, assistant text, [(call id, tool, arguments, output)]) per assistant message of the transcript."""
    session = read_session(path, lenient=True)
    outputs = {r.call_id: r.text for m in session.messages for r in m.tool_results}
    rounds, user = [], None
    for message in session.messages:
        if message.role == "user" and message.text:
            user = message.text[:MAX_CHARS] if user is None else user + "\n" + message.text[:MAX_CHARS]
        elif message.role == "assistant":
            calls = []
            for call in message.tool_calls:
                try:
                    args = json.loads(call.arguments) if call.arguments else {}
                except ValueError:
                    args = {"input": call.arguments}
                args = {k: v[:MAX_CHARS] if isinstance(v, str) else v for k, v in (args if isinstance(args, dict) else {"input": args}).items()}
                name = "".join(c if c.isalnum() or c in "_-" else "_" for c in call.name)[:64] or "tool"
                calls.append((call.id, name, args, outputs.get(call.id, "(none)")[:MAX_CHARS]))
            rounds.append((user, message.text[:MAX_CHARS], calls))
            user = None
    return [r for r in rounds if r[0] is not None or r[1] or r[2]]


class Clock:
    """A fake wall clock the test moves."""

    def __init__(self) -> None:
        self.now = START_S

    def __call__(self) -> float:
        return self.now


def _prompt_tokens(chars: int) -> tuple[int, int]:
    """(prompt, cached) the fake provider reports: 3,000 tokens of prefix plus the messages' characters / 4."""
    prompt = 3_000 + chars // 4
    return prompt, max(prompt - 800, 0)


def replay_langchain(path: Path, middleware: lc.DpCompactMiddleware, clock: Clock, check: Callable[..., None] | None = None) -> None:
    """Grow the transcript's LangChain messages round by round through ``middleware`` (a model call before each
    assistant message); ``check(messages, times, now)`` after each call, with the messages the call was given."""
    state: list[Any] = []
    times: dict[str, float] = {}  # AIMessage.id -> the time of the call that made it
    for number, (user, text, calls) in enumerate(_rounds(path)):
        if user is not None:
            clock.now += USER_S
            state = [*state, HumanMessage(user, id=f"h{number}")]
        given = list(state)
        out = middleware.compact_messages(given)
        if check is not None:
            check(given, times, clock.now)
        state = out if out is not None else given
        prompt, cached = _prompt_tokens(sum(len(json.dumps(lc.to_openai(m))) for m in state))
        ai = AIMessage(text, id=f"a{number}", tool_calls=[{"name": n, "args": a, "id": c} for c, n, a, _ in calls],
                       usage_metadata={"input_tokens": prompt, "output_tokens": 100, "total_tokens": prompt + 100,
                                       "input_token_details": {"cache_read": cached}})
        times[ai.id] = clock.now  # by the message's own id: an object's id() may be reused once a compaction frees it
        state = [*state, ai, *(ToolMessage(o, tool_call_id=c, name=n, id=f"t{c}") for c, n, _, o in calls)]
        clock.now += CALL_S


def _full_langchain_plan(middleware: lc.DpCompactMiddleware, messages: list[Any], times: dict[str, float], now: float) -> Any:
    """The plan of ``messages`` from a fresh full read (no kept state), with the same times and adapter rules."""
    raws = [lc.to_openai(m) for m in messages]
    session = live_session(raws, lc._usages(messages), session_id="langchain", facts=middleware.facts)
    calls = tuple(times.get(m.id) for m, raw in zip(messages, raws, strict=True) if raw["role"] == "assistant")
    session = replace(session, call_times=calls)
    timing = replace(plan_timing(session, now, WALL_CLOCK), imminent=True)
    return adapter_decision(plan_prepared(prepare(session, middleware.settings, use_cache=False), timing=timing))[1]


@pytest.mark.parametrize(("name", "window"), [("claude_code/cc_privacy_x402.jsonl", 32_000), ("codex/codex_raze.jsonl", 200_000)])
def test_langchain_kept_state_plans_equal_full_plans_call_by_call(name, window, tmp_path):
    path = need(SESSIONS / name)
    clock = Clock()
    middleware = lc.DpCompactMiddleware("claude-sonnet-4", archive=None, recall=None, keep_history=False, max_context_tokens=window,
                                        clock=clock)
    compared = []

    def check(messages: list[Any], times: dict[str, float], now: float) -> None:
        full = _full_langchain_plan(middleware, messages, times, now)
        assert middleware.plans[-1].to_dict() == full.to_dict(), f"call {len(compared)}: the kept state planned otherwise"
        compared.append(full.decision)

    replay_langchain(path, middleware, clock, check)
    transcript = middleware.transcripts["langchain"]
    assert len(compared) == len(middleware.plans) > 5
    assert transcript.rebuilds <= len(middleware.compactions) + 1  # rebuilt only after its own compactions (and not before the first call)


@pytest.mark.slow
@pytest.mark.parametrize("window", [32_000, 1_000_000])
def test_langchain_kept_state_equals_full_plans_over_a_long_claude_code_session(window):
    path = need(SESSIONS / "claude_code" / "cc_fundwise.jsonl")
    clock = Clock()
    middleware = lc.DpCompactMiddleware("claude-sonnet-4", archive=None, recall=None, keep_history=False, max_context_tokens=window,
                                        clock=clock)

    def check(messages: list[Any], times: dict[str, float], now: float) -> None:
        assert middleware.plans[-1].to_dict() == _full_langchain_plan(middleware, messages, times, now).to_dict()

    replay_langchain(path, middleware, clock, check)
    assert middleware.compactions


def _pydantic_messages(path: Path) -> tuple[list[Any], list[int]]:
    """The transcript as pydantic-ai messages, and the index of each response (a call before it)."""
    messages: list[Any] = []
    points: list[int] = []
    pending: list[Any] = []
    chars = 0
    for user, text, calls in _rounds(path):
        if user is not None:
            pending.append(UserPromptPart(user))
        if pending:
            messages.append(ModelRequest(parts=pending))
            chars += sum(len(str(p.content)) for p in pending)
        prompt, cached = _prompt_tokens(chars)
        points.append(len(messages))
        parts: list[Any] = ([TextPart(text)] if text else []) + [ToolCallPart(n, a, c) for c, n, a, _ in calls]
        messages.append(ModelResponse(parts=parts or [TextPart("(done)")], model_name="claude-sonnet-4",
                                      usage=RequestUsage(input_tokens=prompt, cache_read_tokens=cached, output_tokens=100)))
        chars += len(text) + sum(len(json.dumps(a)) for _, _, a, _ in calls)
        pending = [ToolReturnPart(n, o, c) for c, n, _, o in calls]
    return messages, points


def test_pydantic_ai_kept_state_plans_equal_full_plans_call_by_call():
    path = need(SESSIONS / "codex" / "codex_raze.jsonl")
    messages, points = _pydantic_messages(path)
    clock = Clock()
    processor = pai.DpCompactProcessor("claude-sonnet-4", archive=None, recall=None, max_context_tokens=1_000_000, clock=clock)
    for point in points:
        clock.now += CALL_S
        given = messages[:point]
        processor(given)  # the compacted list is not adopted: every call is an append to the one before
        wires = pai.to_openai(given)
        session = live_session([w for w, _, _ in wires], [pai._usages(given)[n] for _, n, _ in wires], session_id="pydantic-ai",
                               facts=processor._facts(given))
        times = {id(m): START_S + CALL_S * (k + 1) for k, m in enumerate(m for m in given if isinstance(m, ModelResponse))}
        session = replace(session, call_times=tuple(times.get(id(given[n])) for w, n, _ in wires if w["role"] == "assistant"))
        timing = replace(plan_timing(session, clock.now, WALL_CLOCK), imminent=True)
        full = adapter_decision(plan_prepared(prepare(session, processor.settings, use_cache=False), timing=timing))[1]
        assert processor.plans[-1].to_dict() == full.to_dict()
    assert processor.transcripts["pydantic-ai"].rebuilds == 0  # every call an append


def _conversation(n_rounds: int) -> list[Any]:
    """A small LangChain tool loop with usage (cache reads) on every response."""
    out: list[Any] = [HumanMessage("Fix the failing test in src/app.py", id="u0")]
    for i in range(n_rounds):
        prompt = 3_000 + 900 * i
        out.append(AIMessage(f"Step {i}", id=f"a{i}", tool_calls=[{"name": "read", "args": {"path": f"src/m{i}.py"}, "id": f"c{i}"}],
                             usage_metadata={"input_tokens": prompt, "output_tokens": 50, "total_tokens": prompt + 50,
                                             "input_token_details": {"cache_read": prompt // 2}}))
        out.append(ToolMessage("x = 1\n" * 300, tool_call_id=f"c{i}", name="read", id=f"t{i}"))
    return out


def test_live_transcript_reads_only_the_appended_messages():
    clock = Clock()
    middleware = lc.DpCompactMiddleware("claude-sonnet-4", archive=None, recall=None, max_context_tokens=1_000_000, clock=clock)
    messages = _conversation(6)
    middleware.compact_messages(messages[:7])
    transcript = middleware.transcripts["langchain"]
    first = transcript.raws[:7]
    middleware.compact_messages(messages)
    assert transcript.rebuilds == 0 and transcript.new_from == 7
    assert all(a is b for a, b in zip(first, transcript.raws[:7], strict=True))  # converted once


def test_live_transcript_rebuilds_when_an_earlier_message_is_edited():
    clock = Clock()
    middleware = lc.DpCompactMiddleware("claude-sonnet-4", archive=None, recall=None, max_context_tokens=1_000_000, clock=clock)
    messages = _conversation(6)
    middleware.compact_messages(messages)
    edited = [*messages[:3], ToolMessage("y = 2\n" * 10, tool_call_id="c0", name="read", id="t0"), *messages[4:]]
    edited[2] = messages[2]
    middleware.compact_messages(edited)
    transcript = middleware.transcripts["langchain"]
    assert transcript.rebuilds == 1 and transcript.new_from == 0
    assert transcript.raws[3]["content"] == "y = 2\n" * 10
    fresh = lc.DpCompactMiddleware("claude-sonnet-4", archive=None, recall=None, max_context_tokens=1_000_000, clock=clock)
    fresh.compact_messages(edited)
    assert middleware.plans[-1].to_dict()["T"] == fresh.plans[-1].to_dict()["T"]


def test_live_transcript_takes_a_checkpointers_equal_copies_as_an_append():
    clock = Clock()
    middleware = lc.DpCompactMiddleware("claude-sonnet-4", archive=None, recall=None, max_context_tokens=1_000_000, clock=clock)
    messages = _conversation(4)
    middleware.compact_messages(messages[:5])
    copies = [m.model_copy() for m in messages]
    middleware.compact_messages(copies)
    transcript = middleware.transcripts["langchain"]
    assert transcript.rebuilds == 0 and transcript.new_from == 5
    assert all(a is b for a, b in zip(transcript.items, copies, strict=True))  # the objects given now, for the output


def test_adapter_plans_with_the_wall_clock_and_a_cold_cache_after_a_pause():
    clock = Clock()
    middleware = lc.DpCompactMiddleware("claude-sonnet-4", archive=None, recall=None, max_context_tokens=1_000_000, clock=clock)
    messages = _conversation(5)
    for end in (1, 3, 5, 7, 9, 11):  # a call before each assistant message, 20 s apart
        middleware.compact_messages(messages[:end])
        clock.now += CALL_S
    warm = middleware.plans[-1].timing
    assert warm["source"] == WALL_CLOCK and warm["idle_s"] == pytest.approx(CALL_S) and not warm["cold_now"]
    clock.now += 2 * 3_600  # the last call's answer, then the person comes back two hours later: the cache has expired
    middleware.compact_messages([*messages, AIMessage("Done.", id="a-end"), HumanMessage("and now the docs", id="u1")])
    cold = middleware.plans[-1].timing
    assert cold["cold_now"] and cold["idle_s"] == pytest.approx(2 * 3_600 + CALL_S)


def test_adapter_plans_with_the_hit_share_the_usage_reports():
    middleware = lc.DpCompactMiddleware("claude-sonnet-4", archive=None, recall=None, max_context_tokens=1_000_000, clock=Clock())
    middleware.compact_messages(_conversation(6))
    notes = " ".join(middleware.plans[-1].notes)
    assert "cache-hit share 0." in notes and "measured from the session's usage records" in notes


def test_adapter_decision_keeps_a_compaction_whose_net_benefit_is_below_its_loss():
    clock = Clock()
    middleware = lc.DpCompactMiddleware("claude-sonnet-4", archive=None, recall=None, max_context_tokens=1_000_000, clock=clock)
    middleware.compact_messages(_conversation(6))
    plan = middleware.plans[-1]
    low = replace(plan, decision="compact", rule="benefit", planner="myopic", k=2, cut=plan.n_messages - 2,
                  terms={**plan.terms, "net": 0.01, "info_loss": 0.02})
    action, kept = adapter_decision(low)
    assert action == "keep" and kept.rule == RULE_LOSS_GUARD and kept.decision == "keep" and kept.k == plan.n_messages
    assert adapter_decision(replace(low, terms={**low.terms, "net": 0.03}))[0] == "compact"
    # the look-ahead's own rule of one round already weighed the loss: its plan is carried out as it is
    assert adapter_decision(replace(low, planner="lookahead", rule="lookahead"))[0] == "compact"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["claude_code/cc_fundwise.jsonl", "codex/codex_raze.jsonl"])
@pytest.mark.parametrize("window", [32_000, 200_000, 1_000_000])
def test_adapter_compacts_only_where_the_saving_exceeds_the_expected_loss(name, window):
    """With default settings no compaction empties the context where the plan's net benefit
    at its cut does not exceed the expected loss there, least of all down to a single API round."""
    path = need(SESSIONS / name)
    clock = Clock()
    middleware = lc.DpCompactMiddleware("claude-sonnet-4", archive=None, recall=None, keep_history=False, max_context_tokens=window,
                                        clock=clock)
    rounds: list[bool] = []  # per compaction: the kept tail is one API round

    def check(messages: list[Any], times: dict[str, float], now: float) -> None:
        if len(middleware.compactions) > len(rounds):
            raws = [lc.to_openai(m) for m in messages]
            rounds.append(middleware.compactions[-1].k == round_keep(live_session(raws, [None] * len(raws), session_id="x")))

    replay_langchain(path, middleware, clock, check)
    for result, single in zip(middleware.compactions, rounds, strict=True):
        plan = result.plan
        if plan_forced(plan) or plan.estimates.context_tokens + plan.lookahead["growth_tokens"] > plan.force_threshold_tokens:
            continue  # this call or the next must compact: the rule of one round does not apply
        assert plan.lookahead["saves_usd"] > 0, plan.explanation
        if single:
            assert plan.lookahead["saves_usd"] > plan.lookahead["loss_usd"] > 0, f"one API round kept: {plan.explanation}"


def test_a_compacting_call_plans_once(tmp_path, monkeypatch):
    """The plan that decides a compaction is the one the pipeline carries out: a call plans once, whether it keeps or compacts."""
    import dp_compact.pipeline.compact as pipeline_compact
    import dp_compact.prepare as prepare_module

    made: list[Any] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(plan_prepared(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(prepare_module, "plan_prepared", counted)
    monkeypatch.setattr(pipeline_compact, "plan_prepared", counted)
    clock = Clock()
    middleware = lc.DpCompactMiddleware("claude-sonnet-4", archive=None, recall=None, keep_history=False, max_context_tokens=32_000,
                                        clock=clock)
    calls: list[int] = []
    replay_langchain(need(SESSIONS / "claude_code/cc_privacy_x402.jsonl"), middleware, clock, lambda *_: calls.append(len(made)))
    assert middleware.compactions, "the 32k window makes the middleware compact"
    assert calls == list(range(1, len(calls) + 1)), "a call planned more than once"
