"""The real bill in replay (DESIGN §8): dated prices and tiers per request, write lifetimes,
the cache TTL by default, no free overflow, and ``--policy recorded`` on constructed recordings."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.core.benefit import L_INSTR_TOKENS
from dp_compact.core.cuts import message_arrays
from dp_compact.pricing import Prices, PriceTier
from dp_compact.replay.load import resolve_ttl
from dp_compact.replay.meter import ReplayParams, make_recording, replay
from dp_compact.replay.policies import parse_policy
from dp_compact.replay.recorded import Recorded, measured_hit_share, recorded_costs
from dp_compact.replay.recording import RecordedCut
from dp_compact.replay.shell import replay_file
from dp_compact.settings import load_settings
from tests.conftest import SESSIONS, need
from tests.test_replay import MESSAGES, POSITIONS, TOKENS, recordings

# The small session of tests/test_replay.py: prompts under "never" 1,100 / 2,150 / 2,370 / 4,400
# tokens (V = 1,000), outputs 50 / 20 / 30 / 40. Sums in $ · 1e6.


def _day(iso: str) -> float:
    return datetime.fromisoformat(f"{iso}T12:00:00+00:00").astimezone(UTC).timestamp()


def _recording(times=None, recorded=None, cuts=()):
    return make_recording(MESSAGES, TOKENS, message_arrays(MESSAGES), POSITIONS, TOKENS[POSITIONS],
                          None if times is None else np.array(times, dtype=float), recorded=recorded, cuts=cuts)


def _settings():
    return load_settings(v=1000, s=100, planner="myopic")


def _total(result) -> float:
    return round(result.total_usd * 1e6, 6)


def test_each_request_is_priced_at_its_days_prices_and_its_own_prompts_tier():
    later = Prices("t", 4.0, 0.4, 20.0, None, 10_000, "test", tiers=(PriceTier(2200, 8.0, 0.8, 40.0),), price_date="2026-02-01")
    prices = Prices("t", 3.0, 0.3, 15.0, None, 10_000, "test", tiers=(PriceTier(2200, 6.0, 0.6, 30.0),),
                    price_date="2026-01-31", later=(("2026-02-01", later),))
    times = [_day("2026-01-31"), _day("2026-01-31") + 10, _day("2026-02-01"), _day("2026-02-01") + 10]
    result = replay(_recording(times), parse_policy("never", _settings()), ReplayParams(prices, 1000, 100))
    # call 0 (Jan 31, 1,100 <= 2,200: base): 1,100 new · 3 = 3,300; output 50 · 15 = 750
    # call 1 (Jan 31, 2,150: base): 1,100 read · 0.3 = 330, 1,050 new · 3 = 3,150; output 20 · 15 = 300
    # call 2 (Feb 1, 2,370 > 2,200: the later prices' tier): 2,150 · 0.8 = 1,720, 220 · 8 = 1,760; 30 · 40 = 1,200
    # call 3 (Feb 1, 4,400: same tier): 2,370 · 0.8 = 1,896, 2,030 · 8 = 16,240; 40 · 40 = 1,600
    assert _total(result) == 3300 + 750 + 330 + 3150 + 300 + 1720 + 1760 + 1200 + 1896 + 16240 + 1600
    # without times every call is at the session's prices (its tier still per request)
    timeless = replay(_recording(), parse_policy("never", _settings()), ReplayParams(prices, 1000, 100))
    assert _total(timeless) == 3300 + 750 + 330 + 3150 + 300 + 2150 * 0.6 + 220 * 6 + 900 + 2370 * 0.6 + 2030 * 6 + 1200


def test_one_hour_writes_cost_more_than_five_minute_writes_in_the_meter():
    prices = Prices("t", 3.0, 0.3, 15.0, 3.75, 10_000, "test", p_cache_write_1h=6.0)
    five, hour = (replay(_recording(), parse_policy("never", _settings()), ReplayParams(prices.with_write_share(s), 1000, 100))
                  for s in (0.0, 1.0))
    assert round((hour.write_usd - five.write_usd) * 1e6, 6) == 4400 * (6.0 - 3.75)  # the 4,400 tokens written
    assert hour.total_usd > five.total_usd


def test_recorded_policy_sends_the_recorded_prompts_and_charges_the_recorded_compaction():
    cut = RecordedCut(line=0, call=3, position=5, tool="claude-code", context_tokens=2500, summary_tokens=300)
    rec = _recording(recorded=(np.array([1200, 2300, -1, 3500]), np.array([0, 1200, -1, 1000])), cuts=(cut,))
    prices = Prices("t", 3.0, 0.3, 15.0, None, 10_000, "test")
    costs = recorded_costs(rec, ReplayParams(prices, 1000, 100))
    # call 0: 1,200 new · 3 = 3,600, output 750; call 1: 1,200 · 0.3 = 360, 1,100 · 3 = 3,300, output 300
    # call 2 (no record): 2,300 + 220 (messages 3-4) = 2,520: 690 + 660, output 450
    # compaction before call 3: context 2,500 read (750), L_instr 70 · 3 = 210, summary 300 · 15 = 4,500; cache keeps V
    # call 3 (recorded 3,500): 1,000 · 0.3 = 300, 2,500 · 3 = 7,500, output 600
    assert _total(costs.result) == 3600 + 750 + 360 + 3300 + 300 + 690 + 660 + 450 + 5460 + 300 + 7500 + 600
    assert costs.result.contexts.tolist() == [1200, 2300, 2520, 3500]  # after the compaction: the recorded prompt
    assert costs.result.schedule == ((3, 5),) and costs.result.compactions == 1 and costs.result.loss_usd == 0
    assert costs.compaction_usd == (pytest.approx((750 + L_INSTR_TOKENS * 3 + 4500) / 1e6),)
    assert costs.call_usd.sum() + sum(costs.compaction_usd) == pytest.approx(costs.result.total_usd)
    assert replay(rec, Recorded(), ReplayParams(prices, 1000, 100)) == costs.result  # the meter hands it over
    # the measured hit share: recorded reads 0 + 1,200 + 1,000 of the 0 + 1,200 + 1,000 held -> 1; half of them -> 0.5
    share, note = measured_hit_share(rec, ReplayParams(prices, 1000, 100))
    assert share == 1.0 and "served all of the cached prefix" in note and "%" not in note  # never "100.0 % (more of fewer)"
    half = _recording(recorded=(np.array([1200, 2300, -1, 3500]), np.array([0, 600, -1, 500])), cuts=(cut,))
    share, note = measured_hit_share(half, ReplayParams(prices, 1000, 100))
    assert share == 0.5 and "50.0 %" in note
    shared = recorded_costs(half, ReplayParams(prices, 1000, 100, cache_hit_share=share)).result
    # half of every call's cached prefix: 1,200, 2,300 and 1,000 tokens held (the request's read is compaction_usd)
    assert round(shared.cache_read_usd * 1e6, 6) == (600 + 1150 + 500) * 0.3


def test_ttl_is_on_by_default_where_the_recording_has_times_and_says_why():
    hour = Prices("t", 3.0, 0.3, 15.0, 3.75, 10_000, "test", p_cache_write_1h=6.0, write_1h_share=1.0)
    assert resolve_ttl(hour, None, 4)[0] == 3600 and "100 % of the session's cache writes are 1-hour" in resolve_ttl(hour, None, 4)[1]
    five = replace(hour, write_1h_share=0.0)
    assert resolve_ttl(five, None, 4) == (300, "300 s: the provider's default (the session records no 1-hour cache writes)")
    assert resolve_ttl(hour, None, 0) == (None, "none: the recording has no times")
    assert resolve_ttl(hour, 120.0, 0) == (120.0, "120 s: given (--cache-ttl)")


@hypothesis_settings(max_examples=40, deadline=None)
@given(rec=recordings(), window=st.integers(2_000, 20_000))
def test_overflow_is_never_free_for_never(rec, window):
    """Every overflow of ``never`` is a forced summary-only compaction, charged as a request
    (at least its instruction and summary), unless no feasible cut exists at all."""
    prices = Prices("t", 3.0, 0.3, 15.0, None, window + 1000, "test")
    params = ReplayParams(prices, 1000, 100)
    never = replay(rec, parse_policy("never", _settings()), params)
    assert never.compactions == never.forced <= never.overflows
    assert never.compaction_usd * 1e6 >= never.forced * (L_INSTR_TOKENS * 3.0 + 100 * 15.0) - 1e-6
    assert never.truncations <= never.overflows
    if never.overflows:
        assert never.forced + never.truncations > 0 or never.peak_context_tokens > params.window


# ----------------------------------------------------------------------------- real sessions

CLAUDE_CODE = "claude_code/cc_fundwise.jsonl"


def test_real_ttl_defaults_follow_the_recorded_write_lifetime_and_cache_ttl_overrides():
    cc = replay_file(need(SESSIONS / CLAUDE_CODE), load_settings(), ["never"])
    assert cc.params.cache_ttl_s == 3600 and "1-hour entries" in cc.params.ttl_reason
    given_ttl = replay_file(need(SESSIONS / CLAUDE_CODE), load_settings(), ["never"], cache_ttl_s=300)
    assert given_ttl.params.cache_ttl_s == 300 and given_ttl.to_dict()["cache_ttl_reason"] == "300 s: given (--cache-ttl)"
    codex = replay_file(need(SESSIONS / "codex/codex_raze.jsonl"), load_settings(), ["never"])
    assert codex.params.cache_ttl_s == 300 and "provider's default" in codex.params.ttl_reason
    cline = replay_file(need(SESSIONS / "anthropic_messages/cline_api_history_cardgame.jsonl"), load_settings(), ["never"])
    assert cline.params.cache_ttl_s is None and cline.params.ttl_reason == "none: the recording has no times"


def test_real_one_hour_write_session_costs_more_than_at_five_minute_writes():
    report = replay_file(need(SESSIONS / CLAUDE_CODE), load_settings(), ["recorded"])
    assert report.params.prices.write_1h_share > 0.9
    from dp_compact.prepare import prepare
    from dp_compact.replay.load import prepared_recording
    from dp_compact.sessions import read_session

    recording, _ = prepared_recording(prepare(read_session(SESSIONS / CLAUDE_CODE, raw_json=True), load_settings(), history=True))
    totals = {share: recorded_costs(recording, replace(report.params, prices=report.params.prices.with_write_share(share))).result.total_usd
              for share in (0.0, 1.0)}
    assert totals[1.0] > totals[0.0] * 1.02
    assert report.results[0].total_usd == pytest.approx(totals[1.0], rel=0.01)


def test_cli_replay_recorded_reports_ttl_and_bill_check():
    result = CliRunner().invoke(app, ["replay", str(need(SESSIONS / "claude_code/cc_raze_hooks.jsonl")), "--policy", "recorded", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["policies"][0]["policy"] == "recorded"
    assert data["cache_ttl_s"] == 3600 and data["cache_ttl_reason"].startswith("3600 s:")
    assert data["bill_check"]["within_tolerance"] and data["bill_check"]["recorded_usd"] == data["policies"][0]["total_usd"]
    table = CliRunner().invoke(app, ["replay", str(need(SESSIONS / "claude_code/cc_raze_hooks.jsonl")), "--policy", "recorded"])
    assert "bill      $" in table.stdout and "cache     TTL 3600 s:" in table.stdout


def test_recorded_prompts_that_fall_without_a_compaction_record_are_noted():
    from dp_compact.prepare import prepare
    from dp_compact.replay.load import prepared_recording
    from dp_compact.replay.recorded import SHRINK_SHARE, unrecorded_shrinks
    from dp_compact.sessions import read_session
    from dp_compact.settings import Settings

    path = need(SESSIONS / "claude_code" / "cc_task43_develop.jsonl")
    prepared = prepare(read_session(path, raw_json=True), Settings(), history=True)
    rec = prepared_recording(prepared)[0]
    count, note = unrecorded_shrinks(rec)
    prompts = rec.recorded_prompts[rec.recorded_prompts >= 0]
    falls = int(np.sum(prompts[1:] < prompts[:-1] * (1 - SHRINK_SHARE)))  # the file records no compaction
    assert rec.cuts == () and count == falls >= 1 and "Claude Code clears old tool results" in note
    quiet = prepared_recording(prepare(read_session(need(SESSIONS / "claude_code" / "cc_fundwise.jsonl"), raw_json=True),
                                       Settings(), history=True))[0]
    assert unrecorded_shrinks(quiet) == (0, "")


def test_replay_says_which_part_of_a_compacted_recording_plan_reads():
    """A recording that compacted before is replayed whole; the report also gives the messages after its last
    compaction, the ones ``plan`` reads, so that the two counts do not look contradictory."""
    from dp_compact.api import plan_session
    from dp_compact.sessions import read_session

    path = need(SESSIONS / "claude_code" / "cc_posthog_dashboard_compact.jsonl")
    data = replay_file(path, load_settings(), policies=["dp"]).to_dict()["session"]
    planned = plan_session(read_session(path), load_settings())
    assert data["live_messages"] == planned.n_messages < data["messages"]
    shown = CliRunner().invoke(app, ["replay", str(path), "--policy", "dp"], env={"COLUMNS": "200", "NO_DP_COMPACT_SERVER": "1"}).stdout
    assert f"of which plan reads the {planned.n_messages:,} after its last compaction" in shown.splitlines()[0]
