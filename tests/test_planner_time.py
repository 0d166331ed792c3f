"""Time in the planner (DESIGN §8): a cold cache after a pause, the idle hazard at the end of a turn,
the write lifetime that pays, the replay's dp policy after a pause, and the idle-hazard fit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dp_compact.calibration.idle import fit_idle, turn_end_gaps
from dp_compact.conversation import Message, Session, ToolCall, ToolResult
from dp_compact.core._reference import lifetime_costs_reference
from dp_compact.core.cuts import message_arrays
from dp_compact.core.planner import RULE_LOOKAHEAD, RULE_RESUME, RULE_WAIT, plan
from dp_compact.core.timing import (
    IDLE_HAZARD,
    IdleHazard,
    Timing,
    cache_state,
    lifetime_costs,
    parse_instant,
)
from dp_compact.prepare import plan_timing
from dp_compact.pricing import PROFILES
from dp_compact.replay.meter import ReplayParams, make_recording, replay
from dp_compact.replay.planned import PlannerPolicy
from dp_compact.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]
SONNET = PROFILES["claude-sonnet-4"]  # 3.00 / 0.30 / 15.00, writes 3.75 (5 min) and 6.00 (1 h)
#: Three calls from now on (E = 1 turn of L = 3 calls): short enough that compacting on a warm
#: cache (which rewrites the 30,000-token last round) does not pay back, long enough that
#: compacting on a cold one (where keeping rewrites everything anyway) does.
SETTINGS = load_settings(v=2000, s=500, e_fixed=1, l=3)


def _conversation(rounds: int = 10, old_tokens: int = 6000, last_tokens: int = 30_000) -> tuple[tuple[Message, ...], np.ndarray]:
    """A user turn of ``rounds`` tool rounds with ``old_tokens`` results, a last round of
    ``last_tokens`` (the least the look-ahead keeps), a final answer and the next user message."""
    messages, tokens = [Message("user", "start")], [100]
    for r in range(rounds):
        messages += [Message("assistant", "", tool_calls=(ToolCall(f"c{r}", "bash", "{}"),)),
                     Message("tool", tool_results=(ToolResult(f"c{r}", "out"),))]
        tokens += [50, old_tokens]
    messages += [Message("assistant", "", tool_calls=(ToolCall("cz", "bash", "{}"),)),
                 Message("tool", tool_results=(ToolResult("cz", "out"),)), Message("assistant", "done"), Message("user", "next")]
    tokens += [50, last_tokens, 100, 50]
    return tuple(messages), np.array(tokens, dtype=np.int64)


MESSAGES, TOKENS = _conversation()


def _plan(messages, tokens, idle_s, ttl_s, hazard=None):
    session = Session(path="", format="", messages=messages, user_turns=sum(m.is_user_turn for m in messages), llm_calls=12)
    return plan(session, tokens, SETTINGS, SONNET, v_tokens=2000, timing=Timing(idle_s, cache_ttl_s=ttl_s, hazard=hazard))


# --- a two-hour pause: compacting on resume pays --------------------------------------------------

def test_after_a_two_hour_pause_the_planner_compacts_where_a_warm_cache_keeps():
    """The person comes back after two hours (5-minute cache: cold). Keeping rewrites the whole prompt
    anyway, so compacting adds no rewrite of the kept tail and pays; a few seconds later, with the
    cache warm, the same conversation keeps (the rewrite of the 30,000-token tail would not pay back)."""
    timeless = _plan(MESSAGES, TOKENS, None, 300)
    warm = _plan(MESSAGES, TOKENS, 10.0, 300)
    cold = _plan(MESSAGES, TOKENS, 7200.0, 300)
    assert (timeless.decision, timeless.rule) == ("keep", RULE_WAIT) and timeless.timing is None
    assert (warm.decision, warm.rule) == ("keep", RULE_WAIT)
    assert (cold.decision, cold.rule) == ("compact", RULE_LOOKAHEAD)
    assert cold.timing["cold_now"] and cold.timing["cold_chance"] == 1.0 and cold.timing["idle_s"] == 7200.0
    assert "the cache is cold" in cold.explanation
    # the same pause under a cache that never expires is no pause at all
    assert _plan(MESSAGES, TOKENS, 7200.0, float("inf")).decision == "keep"


def test_the_replay_dp_policy_compacts_on_resume_after_the_pause():
    """Replayed with a 5-minute TTL set in ReplayParams, dp compacts before the call that follows the
    two-hour pause, and at no other call; with the same calls ten seconds apart it never compacts."""
    messages = (*MESSAGES, Message("assistant", "", tool_calls=(ToolCall("d1", "bash", "{}"),)),
                Message("tool", tool_results=(ToolResult("d1", "out"),)), Message("assistant", "ok"))
    tokens = np.concatenate((TOKENS, [50, 500, 100]))
    positions = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    resumed = int(np.flatnonzero(positions > len(MESSAGES) - 1)[0])  # the first call after "next"
    steady = 10.0 * np.arange(positions.size)
    paused = steady + np.where(np.arange(positions.size) >= resumed, 7200.0, 0.0)
    params = ReplayParams(prices=SONNET, v_tokens=2000, s_tokens=500, cache_ttl_s=300.0)
    arrays = message_arrays(messages)
    outputs = np.full(positions.size, 100)
    settings = load_settings(v=2000, s=500, e_fixed=1, l=2)  # two calls from every point on
    with_pause = replay(make_recording(messages, tokens, arrays, positions, outputs, paused), PlannerPolicy(settings), params)
    without = replay(make_recording(messages, tokens, arrays, positions, outputs, steady), PlannerPolicy(settings), params)
    paused_calls, steady_calls = [call for call, _ in with_pause.schedule], [call for call, _ in without.schedule]
    assert paused_calls[0] == resumed  # nothing before the pause, then compact on resume
    assert resumed not in steady_calls  # the same call on a warm cache keeps
    # the call after it starts a new round, so the 30,000-token one may go: both compact there
    assert paused_calls[1:] == steady_calls == [resumed + 1]


# --- the end of an assistant turn: the idle hazard ------------------------------------------------

def test_at_the_end_of_a_turn_the_plan_weighs_compacting_now_on_resume_and_keeping():
    """After the final answer the next call waits for the person. With 5-minute entries the cache is
    likely to expire (48 %): compacting now, while the summary request still reads the head from the
    cache, is cheapest (what Claude Code does before an idle cache expires). With 1-hour entries it
    rarely expires (4 %): keep now and compact on resume only if it has."""
    messages, tokens = MESSAGES[:-1], TOKENS[:-1]
    five = _plan(messages, tokens, 0.0, 300)
    hour = _plan(messages, tokens, 0.0, 3600)
    assert five.timing["turn_end"] and five.timing["cold_chance"] == pytest.approx(IDLE_HAZARD.after_5m)
    assert (five.decision, five.rule) == ("compact", RULE_LOOKAHEAD)
    assert five.lookahead["resume_usd"] > five.lookahead["compact_usd"]
    assert (hour.decision, hour.rule) == ("keep", RULE_RESUME)
    ahead = hour.lookahead
    assert ahead["resume_usd"] < min(ahead["keep_usd"], ahead["compact_usd"])
    assert "compact on resume if the cache has expired" in hour.explanation
    # no time known: the timeless plan, unchanged
    assert _plan(messages, tokens, None, 3600).rule == RULE_WAIT


def test_cache_state_conditions_the_hazard_on_the_silence_so_far():
    hazard = IdleHazard(0.5, 0.1)
    session = Session(path="", format="", messages=MESSAGES[:-1])
    assert cache_state(None, SONNET, True) == (False, 0.0)
    assert cache_state(Timing(400.0, cache_ttl_s=300), SONNET, False) == (True, 1.0)
    assert cache_state(Timing(10.0, cache_ttl_s=300, hazard=hazard), SONNET, False) == (False, 0.0)
    assert cache_state(Timing(0.0, cache_ttl_s=300, hazard=hazard), SONNET, True) == (False, 0.5)
    # half an hour of silence already: P(gap > 1 h | gap > 30 min) = 0.1 / P(gap > 30 min)
    at_30m = np.interp(1800.0, [0, 300, 3600], [1.0, 0.5, 0.1])
    assert cache_state(Timing(1800.0, cache_ttl_s=3600, hazard=hazard), SONNET, True)[1] == pytest.approx(0.1 / at_30m)
    assert session.messages[-1].role == "assistant"


def test_plan_timing_reads_the_silence_from_the_last_recorded_call():
    session = Session(path="", format="", messages=(), call_times=("2026-12-06T08:00:00Z", None, "2026-12-06T09:00:00Z"))
    assert plan_timing(session).idle_s == 0.0
    assert plan_timing(session, parse_instant("2026-12-06T11:00:00Z"), "--now").idle_s == 7200.0
    assert plan_timing(session, parse_instant("2026-12-06T08:30:00Z")).idle_s == 0.0  # never negative
    assert plan_timing(Session(path="", format="", messages=())).idle_s is None
    with pytest.raises(ValueError):
        parse_instant("yesterday")


# --- which write lifetime pays ----------------------------------------------------------------

def test_lifetime_costs_price_the_session_own_gaps_and_equal_a_per_call_reference():
    prompts = np.array([10_000, 20_000, 30_000, 40_000, 50_000], dtype=np.float64)
    quick = np.array([5.0, 5.0, 5.0, 5.0])
    pauses = np.array([5.0, 1200.0, 5.0, 1200.0])  # two 20-minute pauses: 5-minute entries expire
    fast, slow = lifetime_costs(quick, prompts, SONNET), lifetime_costs(pauses, prompts, SONNET)
    assert fast["better"] == "5m" and fast["cold_5m"] == 0
    assert slow["better"] == "1h" and (slow["cold_5m"], slow["cold_1h"]) == (2, 0)
    # by hand, 5-minute entries: calls 1 and 3 read the previous prompt and write 10,000; calls 2 and 4 write it all
    by_hand = (0.30 * (10_000 + 30_000) + 3.75 * (10_000 + 10_000) + 3.75 * (30_000 + 50_000)) / 1e6
    assert slow["usd_5m"] == pytest.approx(by_hand)
    assert slow["saves_usd"] == pytest.approx(slow["usd_5m"] - slow["usd_1h"])
    for gaps in (quick, pauses):
        reference = lifetime_costs_reference(gaps, prompts, SONNET)
        result = lifetime_costs(gaps, prompts, SONNET)
        for key in ("usd_5m", "usd_1h"):
            assert result[key] == pytest.approx(reference[key], rel=1e-12)
    assert lifetime_costs(quick, prompts, PROFILES["gpt-5"]) is None  # one lifetime only: nothing to choose


# --- the idle hazard fit --------------------------------------------------------------------------

def test_fit_idle_pools_gaps_and_resamples_sessions():
    gaps = [("a", [30.0, 400.0, 5000.0]), ("b", [10.0]), ("c", []), ("d", [301.0, 299.0, 3601.0, 20.0])]
    fit = fit_idle(gaps, 200, np.random.default_rng(0))
    assert fit.n_gaps == 8 and len(fit.gaps) == 3  # the session without a gap is left out
    assert fit.after_5m.value == pytest.approx(4 / 8) and fit.after_1h.value == pytest.approx(2 / 8)
    assert fit.after_5m.p05 <= fit.after_5m.value <= fit.after_5m.p95
    hazard = fit.hazard("test")
    assert (hazard.after_5m, hazard.after_1h, hazard.gaps) == (0.5, 0.25, 8)
    assert fit_idle([("a", [])], 10, np.random.default_rng(0)) is None


def test_turn_end_gaps_run_from_a_final_answer_to_the_next_call():
    ms = (Message("user", "a"), Message("assistant", "", tool_calls=(ToolCall("x", "bash", "{}"),)),
          Message("tool", tool_results=(ToolResult("x", "out"),)), Message("assistant", "done"),
          Message("user", "b"), Message("assistant", "ok"), Message("user", "c"), Message("assistant", "fine"))
    session = Session(path="", format="claude_code", messages=ms, history=ms, call_times=(0, 10, 910, 5000))
    assert turn_end_gaps(session).tolist() == [900.0, 4090.0]
    assert turn_end_gaps(Session(path="", format="gemini_cli", messages=ms, history=ms, call_times=(0, 10, 910, 5000))).size == 0
    assert turn_end_gaps(Session(path="", format="codex", messages=ms, history=ms, call_times=(0, 10))).size == 0  # unpaired


def test_the_shipped_idle_hazard_is_the_shipped_calibration():
    idle = json.loads((ROOT / "calibration" / "results.json").read_text())["idle"]
    assert IDLE_HAZARD.after_5m == pytest.approx(idle["after_5m"]["value"])
    assert IDLE_HAZARD.after_1h == pytest.approx(idle["after_1h"]["value"])
    assert IDLE_HAZARD.gaps == idle["gaps"] == sum(len(g) for g in idle["gaps_s"].values())
