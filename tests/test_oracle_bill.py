"""The oracle under the real bill's rules (DESIGN §6, §8): warm cache, per-request price tiers,
dated prices, write lifetimes, cache expiry after silence and no free overflow.

Three ways to price a schedule must agree: the oracle's own total, :func:`rules_total` (the
rules written out call by call, independently of the meter) and the meter
(:func:`dp_compact.replay.meter.replay` with :class:`Schedule`). The brute force walks every
schedule of tiny recordings: before each call keep, or compact at any feasible cut whose prompt
fits the window; a kept prompt above the window is an overflow (a forced summary-only
compaction). The least (overflows, $) over all of them is the oracle's.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from dp_compact.conversation import Message, ToolCall, ToolResult
from dp_compact.core.benefit import L_INSTR_TOKENS
from dp_compact.core.cuts import message_arrays
from dp_compact.pricing import Prices, PriceTier
from dp_compact.replay.meter import (
    REFETCH_OUTPUT_TOKENS,
    Recording,
    ReplayParams,
    make_recording,
    replay,
    tail_cut_mask,
)
from dp_compact.replay.oracle import call_days, oracle_schedule, request_prices
from dp_compact.replay.planned import Oracle, Schedule
from tests.strategies import conversations

#: 2026-03-31 23:55 UTC: a session that runs past midnight, when the dated prices change.
EVENING = datetime(2026, 3, 31, 23, 55, tzinfo=UTC).timestamp()
NEXT_DAY = "2026-04-01"
HAS_HIT_SHARE = "cache_hit_share" in {f.name for f in fields(ReplayParams)}


def _anthropic(window: int, tier: int | None, share: float, *, dearer: float = 1.0) -> Prices:
    """Sonnet-like prices with 1-hour writes and, optionally, a whole-request tier above ``tier`` tokens."""
    tiers = () if tier is None else (PriceTier(tier, 6.0 * dearer, 0.6 * dearer, 22.5 * dearer, 7.5 * dearer, 12.0 * dearer),)
    return Prices("t-anthropic", 3.0 * dearer, 0.3 * dearer, 15.0 * dearer, 3.75 * dearer, window, "test",
                  p_cache_write_1h=6.0 * dearer, write_1h_share=share, tiers=tiers)


def _openai(window: int, tier: int | None, _share: float, *, dearer: float = 1.0) -> Prices:
    """OpenAI-like prices (no write premium) with, optionally, a tier above ``tier`` tokens."""
    tiers = () if tier is None else (PriceTier(tier, 5.0 * dearer, 0.5 * dearer, 15.0 * dearer),)
    return Prices("t-openai", 2.5 * dearer, 0.25 * dearer, 10.0 * dearer, None, window, "test", tiers=tiers)


@st.composite
def timed_recordings(draw: st.DrawFn) -> tuple[Recording, ReplayParams]:
    """A tiny recording with call times (silences beyond the TTL, past midnight), tiers, dated
    prices, a write mix, a warm cache, and windows that bind or that no schedule keeps."""
    messages = draw(conversations(max_turns=3))
    positions = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    if positions.size == 0 or positions.size > 5:
        messages = messages[:1] + [Message("assistant", "hi")]
        positions = np.array([1], dtype=np.int64)
    n = len(messages)
    tokens = np.array(draw(st.lists(st.integers(0, 3_000), min_size=n, max_size=n)), dtype=np.int64)
    outputs = np.array(draw(st.lists(st.integers(0, 500), min_size=positions.size, max_size=positions.size)), np.int64)
    pairs = []
    for call, position in enumerate(positions.tolist()):
        pairs += [(m, call) for m in draw(st.lists(st.integers(0, max(position - 1, 0)), max_size=2)) if m < position]
    uses = (np.array([m for m, _ in pairs], np.int64), np.array([c for _, c in pairs], np.int64))
    gaps = draw(st.lists(st.sampled_from([10.0, 400.0, 4_000.0]), min_size=positions.size, max_size=positions.size))
    times = EVENING + np.cumsum(gaps) - gaps[0]
    if draw(st.booleans()):  # an unknown time
        times[draw(st.integers(0, positions.size - 1))] = np.nan
    rec = make_recording(tuple(messages), tokens, message_arrays(messages), positions, outputs, times, uses=uses)
    v, s = draw(st.sampled_from([0, 1_000])), draw(st.sampled_from([50, 700]))
    total = int(tokens.sum()) + v + s
    window = draw(st.sampled_from([200_000, total // 2 + 2_000, v + s + int(tokens.max(initial=0)) // 2 + 1]))
    tier = draw(st.sampled_from([None, max(total // 3, 1), max(total // 2, 1)]))
    make, share = draw(st.sampled_from([_anthropic, _openai])), draw(st.sampled_from([0.0, 0.5, 1.0]))
    prices = make(window, tier, share)
    if draw(st.booleans()):  # prices change at midnight (dearer, another tier)
        later = make(window, None if tier is None else tier + 500, share, dearer=draw(st.sampled_from([0.5, 2.0])))
        prices = replace(prices, later=((NEXT_DAY, later),))
    extra = {"cache_hit_share": draw(st.sampled_from([1.0, 0.75]))} if HAS_HIT_SHARE else {}
    params = ReplayParams(
        prices=prices, v_tokens=v, s_tokens=s, cache_ttl_s=draw(st.sampled_from([None, 300.0, 3_600.0])),
        loss=draw(st.sampled_from(["refetch", "none"])), warm_tokens=draw(st.integers(0, v)), **extra,
    )
    return rec, params


def rules_total(rec: Recording, params: ReplayParams, cuts: dict[int, int]) -> tuple[int, float]:
    """(overflows, $) of a schedule under the rules of DESIGN §6/§8, call by call, without the meter.

    Before the first call the cache holds ``warm_tokens``; more than the TTL of silence empties
    it; every request (call, compaction request, refetch call) is priced at its call day's prices
    and at the tier of its own prompt (a compaction request's prompt counts its instruction);
    prompts are written at ``p_write``; reads are ``cache_hit_share`` of the cached prefix; a kept
    prompt above the window forces a summary-only compaction.
    """
    v, s, window = params.v_tokens, params.s_tokens, params.window
    hit = getattr(params, "cache_hit_share", 1.0)
    prefix, days = rec.prefix_tokens, call_days(rec)
    state = {"start": 0, "summary": 0, "cached": params.warm_tokens, "carried": 0, "refetched": set(), "usd": 0.0}
    last, overflows = math.nan, 0
    uses = list(zip(rec.use_messages.tolist(), rec.use_calls.tolist(), strict=True))

    def compact(cut: int, day: str) -> None:
        head = v + state["summary"] + int(prefix[cut] - prefix[state["start"]])
        q = request_prices(params.prices, day, head + L_INSTR_TOKENS)
        read = min(state["cached"], head) * hit
        state["usd"] += (read * q.p_cache + (head - read) * q.p_write + L_INSTR_TOKENS * q.p_input + s * q.p_out
                         + state["carried"] * q.p_cache)
        state.update(start=cut, summary=s, cached=v, carried=0, refetched=set())

    for j, (p, now) in enumerate(zip(rec.call_positions.tolist(), rec.call_times.tolist(), strict=True)):
        day = days[j]
        if params.cache_ttl_s is not None and now - last > params.cache_ttl_s:
            state["cached"] = 0
        cut = cuts.get(j)
        if cut is not None and state["start"] < cut < p:
            compact(cut, day)
        prompt = v + state["summary"] + int(prefix[p] - prefix[state["start"]])
        if prompt > window:
            overflows += 1
            compact(p, day)
            prompt = v + s
        q = request_prices(params.prices, day, prompt)
        if params.loss == "refetch":
            for m in (m for m, c in uses if c == j):
                if m < state["start"] and m not in state["refetched"]:
                    state["usd"] += prompt * q.p_cache + REFETCH_OUTPUT_TOKENS * q.p_out + int(rec.message_tokens[m]) * q.p_write
                    state["refetched"].add(m)
                    state["carried"] += int(rec.message_tokens[m])
        read = min(state["cached"], prompt) * hit
        state["usd"] += (read * q.p_cache + (prompt - read) * q.p_write + int(rec.output_tokens[j]) * q.p_out
                         + state["carried"] * q.p_cache)
        state["cached"], last = prompt, now
    return overflows, state["usd"] / 1e6


def through_meter(rec: Recording, params: ReplayParams, cuts: dict[int, int]) -> tuple[int, float]:
    """(overflows, $) of a schedule as the meter charges it."""
    result = replay(rec, Schedule("brute", dict(cuts)), params)
    return result.overflows, result.total_usd


def brute_force(rec: Recording, params: ReplayParams, price=rules_total) -> tuple[int, float]:
    """The least (overflows, $) over every schedule of the oracle's actions (module docstring)."""
    best = (math.inf, math.inf)
    v, s = params.v_tokens, params.s_tokens

    def walk(call: int, start: int, cuts: dict[int, int]) -> None:
        nonlocal best
        if call == rec.n_calls:
            best = min(best, price(rec, params, cuts))
            return
        end = int(rec.call_positions[call])
        kept = v + (s if start else 0) + int(rec.prefix_tokens[end] - rec.prefix_tokens[start])
        walk(call + 1, end if kept > params.window else start, cuts)
        for cut in (start + np.flatnonzero(tail_cut_mask(rec, start, end))).tolist():
            if v + s + int(rec.prefix_tokens[end] - rec.prefix_tokens[cut]) <= params.window:
                walk(call + 1, cut, {**cuts, call: cut})

    walk(0, 0, {})
    return best


def _agree(oracle_result, expected: tuple[int, float]) -> None:
    assert oracle_result.overflows == expected[0]
    assert oracle_result.total_usd == pytest.approx(expected[1], rel=1e-9, abs=1e-12)


EXAMPLES = hypothesis_settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@given(timed_recordings())
@EXAMPLES
def test_oracle_equals_brute_force_under_the_bill_rules(case: tuple[Recording, ReplayParams]) -> None:
    rec, params = case
    oracle = oracle_schedule(rec, params)
    _agree(oracle, brute_force(rec, params))
    assert rules_total(rec, params, dict(oracle.schedule)) == (oracle.overflows, pytest.approx(oracle.total_usd, rel=1e-9, abs=1e-12))


@given(timed_recordings())
@EXAMPLES
def test_oracle_equals_brute_force_through_the_meter(case: tuple[Recording, ReplayParams]) -> None:
    rec, params = case
    _agree(oracle_schedule(rec, params), brute_force(rec, params, price=through_meter))


@given(timed_recordings())
@EXAMPLES
def test_replaying_the_oracle_through_the_meter_costs_what_the_oracle_says(case: tuple[Recording, ReplayParams]) -> None:
    rec, params = case
    oracle = oracle_schedule(rec, params)
    result = replay(rec, Oracle(), params)
    assert (result.overflows, result.truncations) == (oracle.overflows, 0)
    assert result.total_usd == pytest.approx(oracle.total_usd, rel=1e-9, abs=1e-12)
    assert result.schedule == oracle.schedule


@given(timed_recordings(), st.randoms(use_true_random=False))
@EXAMPLES
def test_the_meter_charges_every_schedule_what_the_rules_say(case: tuple[Recording, ReplayParams], rng) -> None:
    """Where the oracle and the meter disagree, this names the schedule (and so the rule) that differs."""
    rec, params = case
    cuts, start = {}, 0
    for call, end in enumerate(rec.call_positions.tolist()):
        feasible = (start + np.flatnonzero(tail_cut_mask(rec, start, end))).tolist()
        if feasible and rng.random() < 0.5:
            cuts[call] = start = rng.choice(feasible)
    overflows, usd = rules_total(rec, params, cuts)
    assert through_meter(rec, params, cuts) == (overflows, pytest.approx(usd, rel=1e-9, abs=1e-12)), cuts


# ----------------------------------------------------------------------------- constructed sessions


def _loop(tool_tokens: list[int], *, gaps: list[float] | None = None, start: float = EVENING) -> Recording:
    """One user turn, then a tool loop: a call per assistant message (tokens: user 10, calls 20, results as given)."""
    messages = [Message("user", "go")]
    for i in range(len(tool_tokens)):
        messages += [Message("assistant", "", tool_calls=(ToolCall(f"c{i}", "bash", "{}"),)),
                     Message("tool", tool_results=(ToolResult(f"c{i}", "x"),))]
    messages.append(Message("assistant", "done"))
    positions = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    tokens = np.array([10] + [t for r in tool_tokens for t in (20, r)] + [20], dtype=np.int64)
    times = None if gaps is None else start + np.cumsum([0.0, *gaps])
    return make_recording(tuple(messages), tokens, message_arrays(messages), positions, np.full(positions.size, 50), times)


def test_oracle_counts_the_warm_cache_of_the_first_call() -> None:
    rec = _loop([4_000] * 3)
    cold = ReplayParams(prices=_anthropic(200_000, None, 0.0), v_tokens=5_000, s_tokens=300)
    warm = replace(cold, warm_tokens=4_000)
    saved = oracle_schedule(rec, cold).total_usd - oracle_schedule(rec, warm).total_usd
    assert saved == pytest.approx(4_000 * (3.75 - 0.3) / 1e6, rel=1e-12)  # 4,000 of V read, not written
    assert oracle_schedule(rec, warm).total_usd == pytest.approx(replay(rec, Oracle(), warm).total_usd, rel=1e-12)


def test_oracle_compacts_before_a_price_cliff_when_that_pays() -> None:
    """Every call above 30,000 tokens pays double for every token: the oracle keeps below the cliff."""
    rec = _loop([9_000] * 4)  # the last prompt, 38,090 tokens, would cross the cliff
    flat = ReplayParams(prices=_anthropic(200_000, None, 0.0), v_tokens=2_000, s_tokens=300, loss="none")
    cliff = replace(flat, prices=_anthropic(200_000, 30_000, 0.0))
    for params in (flat, cliff):
        oracle = oracle_schedule(rec, params)
        result = replay(rec, Schedule("oracle", dict(oracle.schedule)), params)
        assert result.total_usd == pytest.approx(oracle.total_usd, rel=1e-12)
    assert max(replay(rec, Oracle(), cliff).contexts) <= 30_000 < max(replay(rec, Oracle(), flat).contexts)


def test_oracle_compacts_before_a_pause_that_empties_the_cache() -> None:
    """A two-hour pause before call 4 empties the 1-hour cache. In hindsight the oracle compacts
    just before it (call 3, its request read from the warm cache, so call 4 rewrites a short
    prompt) instead of after it (call 4, as without the pause)."""
    sizes = [40_000, 8_000, 20_000, 40_000, 20_000, 20_000]
    paused = _loop(sizes, gaps=[5.0, 5.0, 5.0, 7_200.0, 5.0, 5.0])
    steady = _loop(sizes, gaps=[5.0] * 6)
    params = ReplayParams(prices=_anthropic(200_000, None, 1.0), v_tokens=2_000, s_tokens=300, cache_ttl_s=3_600.0, loss="none")
    assert oracle_schedule(steady, params).schedule == ((2, 3), (4, 7), (5, 9))
    oracle = oracle_schedule(paused, params)
    assert oracle.schedule == ((2, 3), (3, 5), (5, 9))
    assert replay(paused, Oracle(), params).total_usd == pytest.approx(oracle.total_usd, rel=1e-12)
    assert oracle.total_usd == pytest.approx(brute_force(paused, params)[1], rel=1e-12)


def test_oracle_prices_each_call_at_its_own_day() -> None:
    """Prices double at midnight: the calls after it cost more, and the oracle's total says so."""
    rec = _loop([3_000] * 4, gaps=[60.0, 60.0, 600.0, 60.0], start=EVENING)
    base = _anthropic(200_000, None, 0.0)
    dated = replace(base, later=((NEXT_DAY, _anthropic(200_000, None, 0.0, dearer=2.0)),))
    assert call_days(rec)[0] == "2026-03-31" and call_days(rec)[-1] == NEXT_DAY
    one = ReplayParams(prices=base, v_tokens=1_000, s_tokens=300, loss="none")
    two = replace(one, prices=dated)
    assert oracle_schedule(rec, two).total_usd > oracle_schedule(rec, one).total_usd
    assert oracle_schedule(rec, two).total_usd == pytest.approx(brute_force(rec, two)[1], rel=1e-12)
    assert oracle_schedule(rec, two).total_usd == pytest.approx(replay(rec, Oracle(), two).total_usd, rel=1e-12)


def test_oracle_pays_an_overflow_no_schedule_avoids() -> None:
    """A tool result larger than the window allows: one rejected request and a forced summary-only compaction."""
    rec = _loop([1_000, 12_000, 1_000])
    params = ReplayParams(prices=_anthropic(10_000, None, 0.0), v_tokens=1_000, s_tokens=300)
    oracle = oracle_schedule(rec, params)
    assert oracle.overflows == 1 and not oracle.feasible
    assert (oracle.overflows, oracle.total_usd) == (brute_force(rec, params)[0], pytest.approx(brute_force(rec, params)[1]))
    result = replay(rec, Oracle(), params)
    assert (result.overflows, result.truncations) == (1, 0)
    assert result.total_usd == pytest.approx(oracle.total_usd, rel=1e-12)
    assert max(result.contexts) <= 10_000
