"""The oracle with clearing in its action set (DESIGN §9, oracle.py module docstring).

Before each call the oracle may keep, summarize at a feasible cut, or clear the long tool results
before a depth, while the conversation was never summarized and nothing was fetched again since
the last clearing; a summary after clearing cuts at or after the clearing depth. The brute force
walks every such schedule of tiny recordings whose tool results are clearable and prices each
through the meter; the oracle's total is the least, and the meter charges its schedule (clearings
included) exactly that.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from dp_compact.conversation import Message, ToolCall, ToolResult
from dp_compact.core.cuts import message_arrays
from dp_compact.measure.clearing import clearing_facts, tool_result_layout
from dp_compact.replay.meter import (
    Clearing,
    Compaction,
    Recording,
    ReplayParams,
    make_recording,
    replay,
    tail_cut_mask,
)
from dp_compact.replay.oracle import oracle_schedule
from dp_compact.replay.planned import Oracle, Schedule
from dp_compact.replay.policies import DEFAULT_POLICIES
from tests.conftest import SESSIONS, need
from tests.strategies import conversations
from tests.test_oracle_bill import EVENING, NEXT_DAY, _anthropic, _openai


@st.composite
def clearable_recordings(draw: st.DrawFn) -> tuple[Recording, ReplayParams]:
    """A tiny recording whose tool results are clearable (random savings), with call times (silences
    beyond the TTL, past midnight), uses, tiers, dated prices, a write mix, a warm cache and a hit share."""
    messages = tuple(draw(conversations(max_turns=3)))
    positions = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    if positions.size == 0 or positions.size > 5:
        messages = (messages[0], Message("assistant", "", tool_calls=(ToolCall("c", "bash", "{}"),)),
                    Message("tool", tool_results=(ToolResult("c", "x"),)), Message("assistant", "done"))
        positions = np.array([1, 3], dtype=np.int64)
    n = len(messages)
    tokens = np.array(draw(st.lists(st.integers(0, 3_000), min_size=n, max_size=n)), dtype=np.int64)
    outputs = np.array(draw(st.lists(st.integers(0, 500), min_size=positions.size, max_size=positions.size)), np.int64)
    owners = tool_result_layout(messages, min_chars=0).message_index
    shares = np.array(draw(st.lists(st.floats(0, 1), min_size=owners.size, max_size=owners.size)))
    per = np.bincount(owners, minlength=n)
    removed = np.floor(tokens[owners] * shares / np.maximum(per[owners], 1)).astype(np.int64)
    added = np.minimum(removed, draw(st.integers(0, 60)))
    facts = clearing_facts(tokens, owners, removed, added, np.ones(owners.size, bool))
    pairs = []
    for call, position in enumerate(positions.tolist()):
        pairs += [(m, call) for m in draw(st.lists(st.integers(0, max(position - 1, 0)), max_size=2)) if m < position]
    uses = (np.array([m for m, _ in pairs], np.int64), np.array([c for _, c in pairs], np.int64))
    gaps = draw(st.lists(st.sampled_from([10.0, 400.0, 4_000.0]), min_size=positions.size, max_size=positions.size))
    times = EVENING + np.cumsum(gaps) - gaps[0]
    rec = make_recording(messages, tokens, message_arrays(messages), positions, outputs, times, uses=uses, clearing=facts)
    v, s = draw(st.sampled_from([0, 1_000])), draw(st.sampled_from([50, 700]))
    total = int(tokens.sum()) + v + s
    window = draw(st.sampled_from([200_000, total // 2 + 2_000, v + s + int(tokens.max(initial=0)) // 2 + 1]))
    tier = draw(st.sampled_from([None, max(total // 3, 1), max(total // 2, 1)]))
    make, share = draw(st.sampled_from([_anthropic, _openai])), draw(st.sampled_from([0.0, 0.5, 1.0]))
    prices = make(window, tier, share)
    if draw(st.booleans()):  # prices change at midnight
        later = make(window, None if tier is None else tier + 500, share, dearer=draw(st.sampled_from([0.5, 2.0])))
        prices = replace(prices, later=((NEXT_DAY, later),))
    params = ReplayParams(
        prices=prices, v_tokens=v, s_tokens=s, cache_ttl_s=draw(st.sampled_from([None, 300.0, 3_600.0])),
        loss=draw(st.sampled_from(["refetch", "none"])), warm_tokens=draw(st.integers(0, v)),
        cache_hit_share=draw(st.sampled_from([1.0, 0.75])),
    )
    return rec, params


def brute_force(rec: Recording, params: ReplayParams) -> tuple[float, float]:
    """The least (overflows, $) over every schedule of the oracle's action set, each priced by the meter."""
    best = (math.inf, math.inf)
    v, s, window = params.v_tokens, params.s_tokens, params.window
    prefix, saved = rec.prefix_tokens, rec.cleared_prefix
    clearable = np.flatnonzero(rec.clearable_messages)

    def leaf(cuts: dict[int, int], clearings: dict[int, int]) -> None:
        nonlocal best
        result = replay(rec, Schedule("brute", dict(cuts), clearings=dict(clearings)), params)
        if any(event.call < call for call in clearings for event in result.refetch_log):
            return  # a clearing after something was fetched again: outside the action set
        best = min(best, (result.overflows, result.total_usd))

    def walk(call: int, start: int, depth: int, summarized: bool, cuts: dict[int, int], clearings: dict[int, int]) -> None:
        if call == rec.n_calls:
            leaf(cuts, clearings)
            return
        end = int(rec.call_positions[call])
        kept = v + (s if start else 0) + int(prefix[end] - prefix[start]) - int(saved[depth] - saved[start] if depth > start else 0)
        if kept > window:  # an overflow: a forced summary-only compaction
            walk(call + 1, end, 0, True, cuts, clearings)
        else:
            walk(call + 1, start, depth, summarized, cuts, clearings)
        for cut in (start + np.flatnonzero(tail_cut_mask(rec, start, end))).tolist():
            if cut >= depth and v + s + int(prefix[end] - prefix[cut]) <= window:
                walk(call + 1, cut, 0, True, {**cuts, call: cut}, clearings)
        if summarized:
            return
        seen = int(rec.call_positions[call - 1]) if call else 0  # the meter clears only what a call has read
        for m in clearable[(clearable >= depth) & (clearable < min(end, seen))].tolist():
            if v + int(prefix[end] - saved[m + 1]) <= window:
                walk(call + 1, start, m + 1, False, cuts, {**clearings, call: m + 1})

    walk(0, 0, 0, False, {}, {})
    return best


EXAMPLES = hypothesis_settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@given(clearable_recordings())
@EXAMPLES
def test_oracle_equals_brute_force_over_every_schedule_with_clearing(case: tuple[Recording, ReplayParams]) -> None:
    rec, params = case
    oracle = oracle_schedule(rec, params)
    overflows, usd = brute_force(rec, params)
    assert oracle.overflows == overflows
    assert oracle.total_usd == pytest.approx(usd, rel=1e-9, abs=1e-12)


@given(clearable_recordings())
@EXAMPLES
def test_the_meter_charges_the_oracle_schedule_with_its_clearings_what_the_oracle_says(
        case: tuple[Recording, ReplayParams]) -> None:
    rec, params = case
    oracle = oracle_schedule(rec, params)
    result = replay(rec, Oracle(), params)
    assert (result.overflows, result.truncations) == (oracle.overflows, 0)
    assert result.total_usd == pytest.approx(oracle.total_usd, rel=1e-9, abs=1e-12)
    assert result.schedule == oracle.schedule
    assert result.clearings == len(oracle.clearings)
    assert [(e.call, e.cut) for e in result.events if e.action == "clear"] == list(oracle.clearings)
    steps = oracle.actions(params.s_tokens)
    assert [call for call, _ in steps] == sorted(call for call, _ in steps)
    assert {(call, a.depth) for call, a in steps if isinstance(a, Clearing)} == set(oracle.clearings)
    assert {(call, a.cut) for call, a in steps if isinstance(a, Compaction)} == set(oracle.schedule)


@given(clearable_recordings())
@hypothesis_settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_clearing_never_makes_the_oracle_dearer(case: tuple[Recording, ReplayParams]) -> None:
    """Without clearable results the action set is keep or summarize: the oracle with clearing is never above it."""
    rec, params = case
    plain = make_recording(rec.messages, rec.message_tokens, rec.arrays, rec.call_positions, rec.output_tokens,
                           rec.call_times, uses=(rec.use_messages, rec.use_calls),
                           clearing=clearing_facts(rec.message_tokens, np.zeros(0, np.int64), np.zeros(0, np.int64),
                                                   np.zeros(0, np.int64), np.zeros(0, bool)))
    with_clearing, without = oracle_schedule(rec, params), oracle_schedule(plain, params)
    assert not without.clearings
    assert (with_clearing.overflows, with_clearing.total_usd) <= (without.overflows, without.total_usd + 1e-12)


def _loop(results: list[int], saved: list[int]) -> Recording:
    """One user turn, then a tool loop: a call per assistant message; each result clearable, saving as given."""
    messages = [Message("user", "go")]
    for i in range(len(results)):
        messages += [Message("assistant", "", tool_calls=(ToolCall(f"c{i}", "bash", "{}"),)),
                     Message("tool", tool_results=(ToolResult(f"c{i}", "x"),))]
    messages.append(Message("assistant", "done"))
    positions = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    tokens = np.array([10] + [t for r in results for t in (20, r)] + [20], dtype=np.int64)
    owners = np.arange(2, 2 * len(results) + 1, 2)
    facts = clearing_facts(tokens, owners, np.array(saved) + 10, np.full(len(saved), 10), np.ones(len(saved), bool))
    return make_recording(tuple(messages), tokens, message_arrays(messages), positions, np.full(positions.size, 50),
                          clearing=facts)


def test_oracle_clears_a_large_result_no_later_call_uses_rather_than_summarize() -> None:
    """A 30,000-token result read by call 1 (position 3) and used by no later call: clearing it once
    the model has read it, before call 2, costs one cache rewrite and no request (not before call 1:
    the meter never clears a result no call has read)."""
    rec = _loop([30_000, 500, 500, 500, 500, 500, 500], [29_000, 0, 0, 0, 0, 0, 0])
    params = ReplayParams(prices=_anthropic(200_000, None, 0.0), v_tokens=2_000, s_tokens=700)
    oracle = oracle_schedule(rec, params)
    assert oracle.clearings == ((2, 3),) and oracle.schedule == ()
    assert oracle.actions(params.s_tokens) == ((2, Clearing(3)),)
    unseen = replay(rec, Schedule("early", {}, clearings={1: 3}), params)  # capped: nothing is cleared at call 1
    assert unseen.clearings == 0
    result = replay(rec, Oracle(), params)
    assert (result.clearings, result.compactions) == (1, 0)
    assert result.total_usd == pytest.approx(oracle.total_usd, rel=1e-12)
    assert oracle.total_usd == pytest.approx(brute_force(rec, params)[1], rel=1e-12)
    assert oracle.total_usd < replay(rec, Schedule("never", {}), params).total_usd


def test_oracle_clears_again_only_when_nothing_was_fetched_again() -> None:
    """Call 2 fetches result 0 (message 2) again, so a schedule clearing it before call 2 and result 2
    (message 6) later is outside the action set (its state would need when each result was
    cleared); the oracle clears each once a call has read it and after the refetch, and the meter
    agrees."""
    loop = _loop([8_000, 500, 40_000, 500, 500, 500, 500], [0] * 7)
    facts = clearing_facts(loop.message_tokens, np.array([2, 6]), np.array([7_910, 39_910]), np.array([10, 10]),
                           np.ones(2, bool))
    rec = make_recording(loop.messages, loop.message_tokens, loop.arrays, loop.call_positions, loop.output_tokens,
                         uses=(np.array([2]), np.array([2])), clearing=facts)
    params = ReplayParams(prices=_anthropic(200_000, None, 0.0), v_tokens=2_000, s_tokens=700)
    oracle = oracle_schedule(rec, params)
    assert oracle.clearings == ((3, 3), (4, 7))
    result = replay(rec, Oracle(), params)
    assert (result.clearings, result.refetches) == (2, 0)
    assert result.total_usd == pytest.approx(oracle.total_usd, rel=1e-12)
    assert oracle.total_usd == pytest.approx(brute_force(rec, params)[1], rel=1e-12)
    outside = replay(rec, Schedule("outside", {}, clearings={2: 3, 4: 7}), params)
    assert outside.refetches == 1 and outside.total_usd > oracle.total_usd


def test_schedule_carries_out_clearings_as_clearing_actions() -> None:
    from dp_compact.replay.context import CallContext, Live

    rec = _loop([3_000, 500], [2_900, 0])
    params = ReplayParams(prices=_anthropic(200_000, None, 0.0), v_tokens=2_000, s_tokens=700)
    ctx = CallContext(rec, Live(end=int(rec.call_positions[1])), params, call=1)
    assert Schedule("s", {}, clearings={1: 3}).before_call(ctx) == Clearing(3)


# ----------------------------------------------------------------------------- shared sessions


@pytest.mark.slow
def test_shared_sessions_oracle_is_at_most_every_policy_under_both_detectors() -> None:
    from dp_compact.fleet.jobs import replay_directory
    from dp_compact.settings import load_settings

    policies = (*DEFAULT_POLICIES, "clear:0.3:3")
    report = replay_directory(need(SESSIONS), load_settings(), policies, workers=2, detector="both")
    assert report.sessions
    for session in report.sessions:
        for run in session.by_detector:
            totals = {result.policy: result.total_usd for result in run.results}
            for policy, total in totals.items():
                assert totals["oracle"] <= total + 1e-9, (session.path, run.detector, policy)


@pytest.mark.slow
@pytest.mark.parametrize("detector", ["verbatim", "strict"])
def test_shared_sessions_meter_charges_the_oracle_schedule_what_the_oracle_says(detector: str) -> None:
    """On real recordings (tiers, TTL, dated prices, measured hit share), clearings included."""
    from dp_compact.errors import DpCompactError
    from dp_compact.io import session_files
    from dp_compact.prepare import prepare
    from dp_compact.replay.load import prepared_recording, replay_params, resolve_ttl
    from dp_compact.replay.recorded import measured_hit_share
    from dp_compact.replay.shell import summary_tokens
    from dp_compact.sessions import read_session
    from dp_compact.settings import load_settings

    settings, cleared = load_settings(), 0
    for path in session_files(need(SESSIONS)):
        try:
            prepared = prepare(read_session(path, raw_json=True), settings, history=True)
        except DpCompactError:  # a file that is not a session (the replay skips it too)
            continue
        rec, _ = prepared_recording(prepared, detector=detector)
        ttl, _ = resolve_ttl(prepared.prices, None, int(np.isfinite(rec.call_times).sum()))
        params = replace(replay_params(prepared, ttl)[0], s_tokens=summary_tokens("dp_compact", settings))
        params = replace(params, cache_hit_share=measured_hit_share(rec, params)[0])
        oracle = oracle_schedule(rec, params)
        result = replay(rec, Oracle(), params)
        assert result.total_usd == pytest.approx(oracle.total_usd, rel=1e-9), path
        assert (result.clearings, result.overflows) == (len(oracle.clearings), oracle.overflows), path
        cleared += result.clearings
    assert cleared > 0
