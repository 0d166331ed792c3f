"""The look-ahead decision of DESIGN §7: its values, its invariants and the plan it gives."""

from __future__ import annotations

import functools
from typing import Any
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from dp_compact.core.benefit import REFETCH_OUTPUT_TOKENS, compaction_request_cost
from dp_compact.core import lookahead as la
from dp_compact.core.lookahead import FUTURE_TAIL_SHARES, Forecast, continuation, look_ahead
from dp_compact.core.planner import RULE_FIXED_POINT, RULE_LOOKAHEAD, RULE_WAIT, growth_per_call, plan
from dp_compact.pricing import Prices
from dp_compact.conversation import Message, Usage
from dp_compact.settings import load_settings
from tests.strategies import conversations, session_of

PRICES = Prices("test", 3.0, 0.30, 15.0, 3.75, 200_000, "DESIGN §2")


def _brute_force(x0: float, heads: np.ndarray, calls: int, g: float, v: float, s: float, limit: float) -> tuple[float, np.ndarray]:
    """Every schedule over ``calls`` calls (exactly that many, no loss), cheapest by exhaustive recursion:
    the model of :mod:`dp_compact.core.lookahead` written out call by call, without a grid."""
    pc, pw = PRICES.p_cache, PRICES.p_write
    least = float(np.min(x0 - heads))

    def compact_call(x: float, t: float) -> float:
        return (compaction_request_cost(v + x - t, 0.0, s, PRICES) + pc * v + pw * (s + t)) / 1e6

    @functools.cache
    def best(n: int, x: float) -> float:  # the cost from call n on, the context before it being x
        if n >= calls:
            return 0.0
        options = []
        if v + x <= limit:
            options.append((pc * (v + x - g) + pw * g) / 1e6 + best(n + 1, x + g))
        for t in {min(max(share * x, least), x) for share in (0.0, *FUTURE_TAIL_SHARES)}:
            if s + t + g <= limit - v:
                options.append(compact_call(x, t) + best(n + 1, s + t + g))
        return min(options) if options else float("inf")

    keep = (pc * (v + x0 - g) + pw * g) / 1e6 + best(1, x0 + g)
    compacts = np.array([compact_call(x0, x0 - h) + best(1, s + x0 - h + g) for h in heads])
    return keep, compacts


@hypothesis_settings(max_examples=40, deadline=None)
@given(st.integers(20_000, 120_000), st.integers(2, 6), st.integers(500, 6_000), st.integers(1, 4))
def test_values_equal_a_brute_force_over_every_schedule(context, calls, growth, n_cuts):
    """With a known length (no survival curve, no loss), keep and compact-at-each-cut cost what the
    cheapest schedule costs, found by trying every sequence of actions (grid error under 0.5 %)."""
    v, s, limit = 20_000, 800, 180_000
    x0 = context - v
    heads = np.linspace(x0 * 0.3, x0 * 0.9, n_cuts).round()
    forecast = Forecast(growth_tokens=growth, calls_so_far=10, survival_alpha=1.5, survival_scale=50.0, remaining_calls=calls)
    ahead = look_ahead(context, heads.astype(np.int64), np.zeros(n_cuts), forecast, PRICES, v_tokens=v, s_tokens=s,
                       limit_tokens=limit)
    keep, compacts = _brute_force(x0, heads, calls, growth, v, s, limit)
    assert ahead.keep_usd == pytest.approx(keep, rel=5e-3)
    np.testing.assert_allclose(ahead.compact_usd, compacts, rtol=5e-3)


@pytest.mark.parametrize(("calls", "x0", "kept_throughout"), [
    (39, 74_000, True),  # call 38 at V + x0 + 38·g = 132,000: exactly the threshold, allowed (a single call)
    (40, 73_000, True),  # call 39 at 132,000: exactly the threshold, the second call of the block (38, 2)
    (40, 74_000, False),  # call 39 at 133,000: above it, though the block's first call (38) is not
])
def test_values_a_block_may_not_outgrow_the_forced_threshold(calls, x0, kept_throughout, monkeypatch):
    """Keeping is not allowed once V + x *exceeds* the forced threshold (module docstring), at any call
    of a block, not only its first. Calls 32-39 are planned in blocks of two calls; the context grows
    by g = 1,000 a call from x0, and call n sends V + x0 + n·g (threshold 132,000). When no call
    exceeds it, the schedule that waits keeps every call; when the last one does, it must compact
    once, and every compaction here loses $1,000 (no tail it may keep reaches the last 64,000
    tokens, which hold that worth). The grid (127,000 / 127: 1,000 tokens a step) holds every context."""
    monkeypatch.setattr(la, "GRID_POINTS", 128)
    v, s, g, limit, window = 20_000, 800, 1_000, 132_000, 147_000
    forecast = Forecast(growth_tokens=g, calls_so_far=10, survival_alpha=1.5, survival_scale=50.0, remaining_calls=calls,
                        loss_tail_tokens=np.array([63_999.0, 64_000.0]), loss_tail_usd=np.array([0.0, 1_000.0]))
    ahead = look_ahead(v + x0, np.array([x0 - 10_000]), np.zeros(1), forecast, replace(PRICES, max_context_tokens=window),
                       v_tokens=v, s_tokens=s, limit_tokens=limit, window_tokens=window)
    # call n keeps: V + x0 + (n − 1)·g read from cache at 0.30, g written at 3.75
    keep_every_call = sum(0.30 * (v + x0 + (n - 1) * g) + 3.75 * g for n in range(calls)) / 1e6  # about $1.5
    if kept_throughout:
        assert ahead.keep_usd == pytest.approx(keep_every_call, rel=1e-9)
        assert ahead.next_compaction_calls is None
    else:
        assert ahead.keep_usd > 1_000 > keep_every_call  # about $1.5 would mean call 39 was kept above the threshold
        assert ahead.next_compaction_calls is not None


def test_continuation_is_the_conditioned_lomax_survival():
    alive = continuation(100, 1.5, 50.0, 4)
    assert alive[0] == 1.0 and np.all(np.diff(alive) < 0)
    assert alive[3] == pytest.approx(((50 + 100 + 3) / 150) ** -1.5)
    assert continuation(400, 1.5, 50.0, 4)[3] > alive[3]  # a longer session is likelier to go on (Lindy)


def test_growth_per_call_is_the_recent_median_without_compactions():
    assert growth_per_call([1_000, 1_500, 1_600, 800, 2_000], 0, 5) == 500.0
    assert growth_per_call([], 12_000, 4) == 3_000.0  # no prompts: the messages' tokens per call
    assert growth_per_call([5_000], 0, 0) == 1.0


@given(st.lists(st.integers(0, 2_000_000), min_size=2, max_size=60))
def test_growth_per_call_equals_numpy_median(prompts):
    """The median written out (even and odd counts, ties, compactions left out) is numpy's to the bit."""
    from dp_compact.core.planner_lookahead import GROWTH_WINDOW_CALLS

    recent = np.diff(np.asarray(prompts[-GROWTH_WINDOW_CALLS - 1:], dtype=np.float64))
    grown = recent[recent >= 0]
    expected = max(float(np.median(grown)), 1.0) if grown.size else max(0 / max(len(prompts), 1), 1.0)
    assert growth_per_call(prompts, 0, len(prompts)) == expected


def test_expected_loss_makes_the_planner_keep_more():
    """The same session with the recall term off and on: what is lost is priced, so the tail grows."""
    messages = _loop(rounds=30)
    tokens = np.full(len(messages), 2_000, dtype=np.int64)
    usage = tuple(Usage(20_800 + 4_000 * i) for i in range(1, 31))
    session = replace(session_of(messages), usage=usage, llm_calls=30)
    free = plan(session, tokens, load_settings(recall_q0=0.0), PRICES)
    priced = plan(session, tokens, load_settings(recall_q0=0.9, recall_tau=50.0), PRICES)
    assert free.decision == "compact" and free.rule == RULE_LOOKAHEAD
    assert priced.decision == "keep" or priced.k > free.k


@pytest.mark.parametrize("e_fixed", [1.0, 0.5])
def test_plan_refetch_carry_is_capped_by_the_calls_left_and_at_least_one(e_fixed):
    """DESIGN §2 recall term, priced as the replay charges a refetch (DESIGN §6): a refetched message is
    written to the cache (P_write) by the refetch, whose output is a short tool call
    (REFETCH_OUTPUT_TOKENS, not S), and then carried, from cache, by the calls that remain, R − 1 of
    them; the look-ahead carries it for
    min(calls left, (context − V) / g) calls, never fewer than 1 (the refetching call itself). Here the
    context has grown for (21,000 − V) / 2,000 = 10 calls but only R = E · L = e_fixed ≤ 1 call is
    left: no carrying. With one call left there is no future either, so compacting at cut c costs
    its request, the rewritten prompt of the call, and the recall term of its head, all by hand:"""
    messages = _loop(rounds=10)  # 21 messages of 1,000 tokens; one user turn (age 0: q_j = q0 = 1)
    tokens = np.full(len(messages), 1_000, dtype=np.int64)
    usage = tuple(Usage(1_000 + 2_000 * i) for i in range(1, 11))  # g = 2,000; avg = 12,000; context 21,000
    session = replace(session_of(messages), usage=usage, llm_calls=10)
    settings = load_settings(v=1_000, s=100, e_fixed=e_fixed, l=1, recall_q0=1.0, recall_age="turns")
    result = plan(session, tokens, settings, PRICES)
    assert result.estimates.context_tokens == 21_000 and result.estimates.avg_tokens == 12_000
    assert result.benefit.cut.tolist() == list(range(1, 20, 2))  # every assistant message; the last round kept
    v, s, context, avg = 1_000, 100, 21_000, 12_000
    cuts = np.arange(1, 20, 2)
    head = 1_000 * cuts
    request = ((v + head) * 0.30 + 70 * 3.0 + s * 15.0) / 1e6  # V + H from cache, L_instr at P_input, S at P_out
    rewrite = (v * 0.30 + (s + context - v - head) * 3.75) / 1e6  # the next call: V read, S + tail written
    # Σ_head q_j (tok_j · P_write + avg · P_cache + REFETCH_OUTPUT_TOKENS · P_out)
    recall = cuts * (1_000 * 3.75 + avg * 0.30 + REFETCH_OUTPUT_TOKENS * 15.0) / 1e6
    np.testing.assert_allclose(result.lookahead_usd, request + rewrite + recall, rtol=1e-12)


def _loop(rounds: int) -> list[Message]:
    """One user turn, then ``rounds`` tool rounds (assistant call, tool result)."""
    from dp_compact.conversation import ToolCall, ToolResult

    messages = [Message("user", "fix the build", raw={"role": "user", "content": "fix the build"})]
    for i in range(rounds):
        call = ToolCall(f"c{i}", "bash", "{}")
        messages += [Message("assistant", "running", tool_calls=(call,)), Message("tool", tool_results=(ToolResult(f"c{i}", "ok"),))]
    return messages


@hypothesis_settings(max_examples=80, deadline=None)
@given(conversations(), st.integers(5_000, 400_000), st.floats(0.5, 30))
def test_plan_keeps_at_least_the_last_api_round_at_a_feasible_cut(messages, window, e_fixed):
    session = session_of(messages)
    tokens = np.array([300 + 40 * len(m.text) for m in messages], dtype=np.int64)
    result = plan(session, tokens, load_settings(e_fixed=e_fixed), replace(PRICES, max_context_tokens=window))
    assert result.planner == "lookahead"
    n = len(messages)
    if result.decision == "compact":
        assert result.k >= result.min_keep >= 1
        assert result.cut in result.benefit.cut.tolist()  # a feasible cut
        last_call = max((i for i, m in enumerate(messages) if m.role == "assistant" and m.tool_calls), default=None)
        # the last tool call stays with its results, unless a user message came after them (a new round)
        newer_round = last_call is not None and any(m.role not in ("assistant", "tool") for m in messages[last_call + 1:])
        assert last_call is None or newer_round or result.cut <= last_call
        # the context after compacting stays under the forced threshold, unless no allowed cut gets there:
        # then the deepest allowed cut (issue: plan against the window)
        allowed = result.benefit.cut[n - result.benefit.cut >= result.min_keep]
        deepest = int(allowed.max())
        if result.context_after_tokens > result.force_threshold_tokens:
            assert result.cut == deepest, (result.cut, deepest, result.context_after_tokens)
    else:
        assert result.k == n and result.cut == 0


def test_plan_explains_why_now_what_waiting_costs_and_the_context_after():
    messages = _loop(rounds=40)
    tokens = np.full(len(messages), 1_500, dtype=np.int64)
    usage = tuple(Usage(20_800 + 3_000 * i) for i in range(1, 41))
    session = replace(session_of(messages), usage=usage, llm_calls=40)
    settings = load_settings()
    result = plan(session, tokens, settings, PRICES)
    assert result.decision == "compact" and result.rule == RULE_LOOKAHEAD
    info = result.lookahead
    assert info["saves_usd"] == pytest.approx(info["keep_usd"] - info["compact_usd"]) and info["saves_usd"] > 0
    assert f"saves ${info['saves_usd']:.4f} over the best schedule that waits" in result.explanation
    assert f"the {result.head_tokens:,} tokens this compaction drops" in result.explanation
    assert result.context_after_tokens == settings.v + info["summary_tokens"] + result.tail_tokens  # the fixed prefix V stays
    assert f"about {result.context_after_tokens:,} after compacting" in result.explanation
    data = result.to_dict()
    assert data["planner"] == "lookahead" and data["context_after_tokens"] == result.context_after_tokens


def test_plan_waits_on_a_small_context_and_says_when_it_would_compact():
    messages = _loop(rounds=4)
    tokens = np.full(len(messages), 500, dtype=np.int64)
    session = replace(session_of(messages), usage=(Usage(21_000), Usage(22_000)), llm_calls=2)
    result = plan(session, tokens, load_settings(), PRICES)
    assert result.decision == "keep" and result.rule == RULE_WAIT
    assert result.explanation.startswith("waiting is cheaper")
    assert result.lookahead["saves_usd"] < 0


def test_forced_threshold_compacts_even_when_waiting_looks_cheaper():
    messages = _loop(rounds=10)
    tokens = np.full(len(messages), 9_000, dtype=np.int64)
    session = replace(session_of(messages), usage=(Usage(215_000),), llm_calls=10)
    result = plan(session, tokens, load_settings(), replace(PRICES, max_context_tokens=230_000))
    assert result.decision == "compact" and result.rule == "force"
    assert result.lookahead["saves_usd"] is None and result.lookahead["keep_usd"] is None  # keeping is not allowed


def test_just_under_the_threshold_waiting_means_compacting_at_the_next_call_and_the_json_is_strict():
    """Keeping is allowed just under the threshold, but the next call then has to compact (between
    the threshold and the window it must): compacting now is weighed against that, finitely."""
    import json

    messages = _loop(rounds=10)
    tokens = np.full(len(messages), 8_000, dtype=np.int64)
    usage = tuple(Usage(179_976 - 5_000 * (10 - i)) for i in range(1, 11))  # growth 5,000 tokens a call
    session = replace(session_of(messages), usage=usage, llm_calls=10)
    result = plan(session, tokens, load_settings(), PRICES)  # threshold 0.9 · 200,000 = 180,000
    assert result.decision == "compact" and result.rule == RULE_LOOKAHEAD
    assert result.lookahead["next_compaction_calls"] == 1.0 and result.lookahead["saves_usd"] > 0
    text = json.dumps(result.to_dict(), allow_nan=False)  # raises on Infinity or NaN
    assert json.loads(text)["lookahead"]["keep_usd"] == pytest.approx(result.lookahead["keep_usd"])


def test_a_known_length_replaces_the_survival_curve():
    messages = _loop(rounds=10)
    tokens = np.full(len(messages), 2_000, dtype=np.int64)
    session = replace(session_of(messages), usage=(Usage(40_000),), llm_calls=10)
    result = plan(session, tokens, load_settings(e_fixed=3, l=4), PRICES)  # R = E · L = 12 calls
    assert result.lookahead["expected_calls"] == pytest.approx(12)


def test_own_output_with_nothing_new_is_kept_and_anything_new_reopens_the_decision():
    messages = _loop(rounds=40)
    tokens = np.full(len(messages), 1_500, dtype=np.int64)
    usage = tuple(Usage(20_800 + 3_000 * i) for i in range(1, 41))
    session = replace(session_of(messages), usage=usage, llm_calls=40, messages_since_compaction=0)
    assert plan(session, tokens, load_settings(), PRICES).rule == RULE_FIXED_POINT
    moved_on = plan(replace(session, messages_since_compaction=2), tokens, load_settings(), PRICES)
    assert moved_on.rule == RULE_LOOKAHEAD


def test_myopic_and_seed_planners_stay_available():
    messages = _loop(rounds=10)
    tokens = np.full(len(messages), 2_000, dtype=np.int64)
    session = session_of(messages)
    assert plan(session, tokens, load_settings(planner="myopic"), PRICES).planner == "myopic"
    assert plan(session_of([]), np.zeros(0, dtype=np.int64), load_settings(), PRICES).planner == "lookahead"
    seed = plan(session, tokens, load_settings(planner="seed"), PRICES)
    assert seed.planner == "seed" and seed.lookahead is None


def _call_round(i: int, result_chars: int) -> list[Message]:
    """One call: the assistant's tool call, then its result of ``result_chars`` characters."""
    from dp_compact.conversation import ToolCall, ToolResult, new_message

    return [new_message(role="assistant", text=f"step {i}", tool_calls=(ToolCall(f"c{i}", "Read", "{}"),)),
            new_message(role="tool", text="", tool_results=(ToolResult(f"c{i}", "x" * result_chars),))]


def test_growth_after_a_clearing_is_what_each_call_since_added():
    """Cleared results took tokens out, not calls: after a clearing (no usage record since), g is the
    median of what each call after the last cleared result added, not the tokens per call so far;
    a conversation never rewritten keeps the tokens per call so far."""
    from dp_compact.conversation import Session, ToolResult
    from dp_compact.core.planner_lookahead import rewritten_growth
    from dp_compact.measure.clearing import CLEARED_PREFIX

    rounds = [m for i in range(12) for m in _call_round(i, 400)]
    fresh = Session(path="s", format="openai_chat", messages=tuple(rounds))
    tokens = np.asarray([10 if m.role == "assistant" else 100 * (1 + i % 4) for i, m in enumerate(rounds)], dtype=np.int64)
    assert rewritten_growth(fresh, tokens) is None
    cleared = list(rounds)
    for i in range(1, 14, 2):  # the results of the first 7 calls cleared
        cleared[i] = replace(cleared[i], tool_results=(ToolResult(f"c{i // 2}", f"{CLEARED_PREFIX} 400 characters]"),))
    session = Session(path="s", format="openai_chat", messages=tuple(cleared))
    added = sorted(int(tokens[j] + tokens[j + 1]) for j in range(14, 22, 2))  # the complete calls after the last cleared one
    assert rewritten_growth(session, tokens) == (added[1] + added[2]) / 2
    assert rewritten_growth(Session(path="s", format="openai_chat", messages=tuple(cleared[:16])), tokens[:16]) is None  # one call since


def _one_big_round(last_round_tokens: int, rounds: int = 6, earlier_tokens: int = 1_200) -> tuple[Any, np.ndarray]:
    """A tool loop whose last API round (call and result) holds ``last_round_tokens`` and whose earlier
    rounds hold ``earlier_tokens`` each (no usage records: the context is V and the messages)."""
    messages = _loop(rounds)
    tokens = np.array([30] + [20, earlier_tokens] * (rounds - 1) + [20, last_round_tokens], dtype=np.int64)
    return replace(session_of(messages), llm_calls=rounds), tokens


def test_plan_keeps_when_no_action_makes_the_context_smaller():
    """Above the forced threshold, but the last API round alone fills it: compacting could only swap the
    small head for a summary, which leaves the prompt no smaller, so the plan keeps and says why."""
    session, tokens = _one_big_round(50_000, rounds=2, earlier_tokens=300)
    settings = load_settings(max_context_tokens=75_000, clear_tool_results=False)
    result = plan(session, tokens, settings, replace(PRICES, max_context_tokens=75_000))
    assert result.estimates.context_tokens > 0.9 * 75_000 and result.decision == "keep"
    assert result.rule == "no-feasible-cut" and "no compaction or clearing makes it smaller" in result.explanation


def test_forced_threshold_yields_to_the_window_when_no_action_restores_the_margin():
    """The least a compaction can leave (a summary and the last API round) is above DP_FORCE_RATIO · M but
    below the context: acting cannot restore the margin, so the limit becomes M and the plan no longer
    compacts merely because the threshold is passed (it still does where the window forces it)."""
    prices = replace(PRICES, max_context_tokens=100_000)
    session, tokens = _one_big_round(72_000, rounds=6)
    settings = load_settings(max_context_tokens=100_000, clear_tool_results=False)
    result = plan(session, tokens, settings, prices)
    context = result.estimates.context_tokens
    assert 90_000 < context <= 100_000
    assert any("the threshold yields to the window" in note for note in result.notes)
    if result.decision == "compact":  # only when the window forces it (or compacting pays on its own)
        assert result.rule != "force" or context + result.lookahead["growth_tokens"] > 100_000
    smaller = plan(session, tokens, load_settings(max_context_tokens=200_000, clear_tool_results=False),
                   replace(PRICES, max_context_tokens=200_000))
    assert not any("yields" in note for note in smaller.notes)  # a margin that can be kept is not moved
