"""The planner prices what the replay's meter charges (DESIGN §8): the measured cache-hit share.

A provider that serves only a share ``h`` of a cached prefix from its cache (OpenAI's automatic
cache: 0.76 on codex_pharma) bills the rest as written or uncached input. The meter applies
``ReplayParams.cache_hit_share``; the planner must expect the same dollars, or it under-prices
keeping a long context on exactly the sessions where that costs most.
"""

from __future__ import annotations

import numpy as np
import pytest

from dp_compact.conversation import Message, Session, Usage
from dp_compact.core.hits import (
    FULL_HITS,
    HitShare,
    hit_share_from_usage,
    served_prices,
)
from dp_compact.core.lookahead import Forecast, look_ahead
from dp_compact.core.planner import plan
from dp_compact.pricing import PROFILES
from dp_compact.replay.meter import Meter
from dp_compact.replay.recording import ReplayParams
from dp_compact.settings import load_settings

V, CONTEXT, GROWTH, CALLS = 10_000, 60_000, 2_000, 4
HIT = 0.76


def _prices(name: str):
    prices = PROFILES[name]
    return prices.with_write_share(0.5) if prices.p_cache_write_1h is not None else prices


def _meter_reference(prices, hit: float) -> float:
    """$ of CALLS kept calls, call by call through the replay's own meter (its cache warm with the
    previous prompt, every prompt ``GROWTH`` larger)."""
    params = ReplayParams(prices, V, 500, warm_tokens=CONTEXT - GROWTH, cache_hit_share=hit)
    meter = Meter(params)
    for call in range(CALLS):
        meter.request(CONTEXT + call * GROWTH, 0, 0)
    return meter.total / 1e6


@pytest.mark.parametrize("name", ["gpt-5", "claude-sonnet-4", "gemini-2.5-pro"])
@pytest.mark.parametrize("hit", [1.0, HIT, 0.3])
def test_expected_keep_cost_matches_the_meter_call_by_call(name: str, hit: float):
    """With every compaction made ruinous (its loss), the look-ahead's keep value is the bill of
    CALLS kept calls; priced with the hit share, it equals the meter's charge call by call."""
    prices = _prices(name)
    forecast = Forecast(growth_tokens=GROWTH, calls_so_far=50, survival_alpha=1.5, survival_scale=70.0,
                        loss_tail_tokens=np.array([0.0, 1e8]), loss_tail_usd=np.array([0.0, 1e8]), remaining_calls=CALLS)
    heads = np.array([20_000], dtype=np.int64)
    ahead = look_ahead(CONTEXT, heads, np.array([1e6]), forecast, served_prices(prices, hit), v_tokens=V, s_tokens=500,
                       limit_tokens=10_000_000)
    assert ahead.keep_usd == pytest.approx(_meter_reference(prices, hit), rel=1e-9)
    if hit < 1.0:  # and the hit share matters: full hits would under-price it
        full = look_ahead(CONTEXT, heads, np.array([1e6]), forecast, prices, v_tokens=V, s_tokens=500, limit_tokens=10_000_000)
        assert full.keep_usd < ahead.keep_usd * 0.95


def test_served_prices_per_tier_and_write_mix():
    """A cached token costs h · P_cache + (1 − h) · P_write in every tier, at the session's write mix."""
    sonnet = PROFILES["claude-sonnet-4"].with_write_share(0.25)
    assert served_prices(sonnet, HIT).p_cache == pytest.approx(HIT * 0.30 + (1 - HIT) * (0.75 * 3.75 + 0.25 * 6.00))
    pro = PROFILES["gemini-2.5-pro"]
    assert served_prices(pro, 0.5).at(300_000).p_cache == pytest.approx(0.5 * 0.25 + 0.5 * 2.50)
    assert served_prices(pro, 1.0) is pro


def _session(hit: float) -> tuple[Session, np.ndarray]:
    """Ten tool rounds of 4,000 tokens each, with usage records whose cache reads are ``hit`` ×
    the previous prompt."""
    messages, usage, prompt = [Message("user", "build the report")], [], V
    for i in range(10):
        messages.append(Message("assistant", f"step {i}", raw={"role": "assistant", "content": f"step {i}"}))
        messages.append(Message("user", f"result {i}", raw={"role": "user", "content": f"result {i}"}))
        previous, prompt = prompt, prompt + 4_000
        usage.append(Usage(prompt, cache_read_tokens=int(hit * previous) if i else 0, output_tokens=200))
    tokens = np.full(len(messages), 2_000, dtype=np.int64)
    return Session(path="hits.jsonl", format="anthropic", messages=tuple(messages), usage=tuple(usage), user_turns=1,
                   llm_calls=10), tokens


def test_hit_share_measured_from_usage_records():
    session, _ = _session(HIT)
    measured = hit_share_from_usage(session.usage)
    assert measured.share == pytest.approx(HIT, abs=0.001)
    assert "usage records" in measured.source
    assert hit_share_from_usage(_session(1.0)[0].usage).share == pytest.approx(1.0, abs=0.001)
    no_reads = [Usage(u.prompt_tokens) for u in session.usage]
    assert hit_share_from_usage(no_reads) is FULL_HITS
    # a silence longer than the TTL empties the cache: that call's misses are not the provider's
    times = np.arange(10, dtype=np.float64) * 60.0
    times[5:] += 7_200.0
    cold = [Usage(u.prompt_tokens, cache_read_tokens=0 if i == 5 else u.cache_read_tokens) for i, u in enumerate(session.usage)]
    assert hit_share_from_usage(cold, times, 300.0).share == pytest.approx(HIT, abs=0.001)
    assert hit_share_from_usage(cold).share < HIT - 0.03


def test_plan_notes_say_which_hit_share_applied_and_where_it_came_from():
    session, tokens = _session(HIT)
    settings, prices = load_settings(), PROFILES["gpt-5"]
    share = hit_share_from_usage(session.usage)
    result = plan(session, tokens, settings, prices, v_tokens=V, cache_hit=share)
    assert any("cache-hit share 0.760" in note and "usage records" in note for note in result.notes)
    assert result.prices == prices  # the plan reports the provider's prices; the share is in how it weighs them
    plain = plan(session, tokens, settings, prices, v_tokens=V)
    same = plan(session, tokens, settings, prices, v_tokens=V, cache_hit=HitShare(1.0))
    assert (plain.decision, plain.cut, plain.lookahead) == (same.decision, same.cut, same.lookahead)
    assert not any("cache-hit" in note for note in plain.notes)


def test_a_lower_hit_share_makes_keeping_dearer():
    """Keeping re-reads the whole context every call; at a lower hit share part of it is written
    again, so the expected cost of keeping rises more than that of compacting."""
    session, tokens = _session(HIT)
    settings, prices = load_settings(), PROFILES["gpt-5"]
    full = plan(session, tokens, settings, prices, v_tokens=V, cache_hit=HitShare(1.0))
    low = plan(session, tokens, settings, prices, v_tokens=V, cache_hit=HitShare(0.5, "test"))
    assert low.lookahead["keep_usd"] > full.lookahead["keep_usd"]
    rise_keep = low.lookahead["keep_usd"] - full.lookahead["keep_usd"]
    rise_compact = (low.lookahead["compact_usd"] or np.inf) - (full.lookahead["compact_usd"] or np.inf)
    assert rise_keep > rise_compact


def test_replay_planner_prices_the_replays_hit_share():
    """``dp`` in replay is told the share the meter applies (ReplayParams.cache_hit_share)."""
    from types import SimpleNamespace

    from dp_compact.replay.planned import PlannerPolicy

    policy = PlannerPolicy(load_settings())
    ctx = SimpleNamespace(params=ReplayParams(PROFILES["gpt-5"], V, 500, cache_hit_share=HIT))
    assert policy.hit_at(ctx).share == HIT and "usage records" in policy.hit_at(ctx).source  # type: ignore[arg-type]
    ctx = SimpleNamespace(params=ReplayParams(PROFILES["gpt-5"], V, 500))
    assert policy.hit_at(ctx).share == 1.0  # type: ignore[arg-type]
