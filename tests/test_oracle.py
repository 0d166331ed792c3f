"""The hindsight optimum (DESIGN §6): brute force over every schedule, replay agreement, real sessions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from dp_compact.core.cuts import message_arrays
from dp_compact.pricing import Prices
from dp_compact.replay.meter import (
    Recording,
    ReplayParams,
    make_recording,
    replay,
    tail_cut_mask,
)
from dp_compact.replay.oracle import oracle_schedule
from dp_compact.replay.policies import Schedule
from tests.strategies import conversations

SONNET = Prices("test", 3.00, 0.30, 15.00, 3.75, 200_000, "test")
OPENAI = Prices("test-openai", 2.50, 1.25, 10.00, None, 200_000, "test")


@st.composite
def recordings(draw: st.DrawFn) -> tuple[Recording, ReplayParams]:
    """A tiny recording: a conversation, random token counts, a call per assistant message, random uses."""
    messages = draw(conversations(max_turns=3))
    positions = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    if positions.size == 0 or positions.size > 5:
        messages = messages[:1] + [messages[0].__class__("assistant", "hi")]
        positions = np.array([1], dtype=np.int64)
    n = len(messages)
    tokens = np.array(draw(st.lists(st.integers(0, 3_000), min_size=n, max_size=n)), dtype=np.int64)
    outputs = np.array(draw(st.lists(st.integers(0, 500), min_size=positions.size, max_size=positions.size)), np.int64)
    pairs = []
    for call, position in enumerate(positions.tolist()):
        for message in draw(st.lists(st.integers(0, max(position - 1, 0)), max_size=2)):
            if message < position:
                pairs.append((message, call))
    uses = (np.array([m for m, _ in pairs], np.int64), np.array([c for _, c in pairs], np.int64))
    times = np.cumsum(draw(st.lists(st.sampled_from([10.0, 400.0]), min_size=positions.size, max_size=positions.size)))
    rec = make_recording(tuple(messages), tokens, message_arrays(messages), positions, outputs, times, uses=uses)
    window = draw(st.sampled_from([200_000, int(tokens.sum()) // 2 + 2_000]))
    prices = draw(st.sampled_from([SONNET, OPENAI]))
    params = ReplayParams(
        prices=Prices(prices.name, prices.p_input, prices.p_cache, prices.p_out, prices.p_cache_write, max(window, 1), "test"),
        v_tokens=draw(st.sampled_from([0, 1_000])), s_tokens=draw(st.sampled_from([50, 700])),
        cache_ttl_s=draw(st.sampled_from([None, 300.0])), loss=draw(st.sampled_from(["refetch", "none"])),
    )
    return rec, params


def brute_force(rec: Recording, params: ReplayParams) -> float:
    """The least total over every schedule (keep, or compact at any feasible cut, before each call) that never overflows.

    The strategy's tool results are too short to be cleared, so these are all of the oracle's actions
    (clearing: tests/test_oracle_clear.py)."""
    best = np.inf

    def walk(call: int, start: int, cuts: dict[int, int]) -> None:
        nonlocal best
        if call == rec.n_calls:
            result = replay(rec, Schedule("brute", dict(cuts)), params)
            if result.overflows == 0:
                best = min(best, result.total_usd)
            return
        end = int(rec.call_positions[call])
        walk(call + 1, start, cuts)
        mask = tail_cut_mask(rec, start, end)
        for cut in (start + np.flatnonzero(mask)).tolist():
            walk(call + 1, cut, {**cuts, call: cut})

    walk(0, 0, {})
    return best


@given(recordings())
@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_oracle_equals_brute_force_over_every_schedule(case: tuple[Recording, ReplayParams]) -> None:
    rec, params = case
    oracle = oracle_schedule(rec, params)
    expected = brute_force(rec, params)
    if np.isfinite(expected):
        assert oracle.feasible
        assert oracle.total_usd == pytest.approx(expected, rel=1e-9, abs=1e-12)


@given(recordings())
@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_replaying_the_oracle_schedule_costs_what_the_oracle_says(case: tuple[Recording, ReplayParams]) -> None:
    rec, params = case
    oracle = oracle_schedule(rec, params)
    result = replay(rec, Schedule("oracle", dict(oracle.schedule)), params)
    if oracle.feasible:
        assert result.overflows == 0
        assert result.total_usd == pytest.approx(oracle.total_usd, rel=1e-9, abs=1e-12)
        assert result.schedule == oracle.schedule


def test_brute_force_is_not_trivial() -> None:
    """The enumeration really visits compactions: a long tool loop under a small window must compact."""
    from dp_compact.conversation import Message, ToolCall, ToolResult

    messages = [Message("user", "go")]
    for i in range(4):
        messages += [Message("assistant", "", tool_calls=(ToolCall(f"c{i}", "bash", "{}"),)),
                     Message("tool", tool_results=(ToolResult(f"c{i}", "x"),))]
    messages.append(Message("assistant", "done"))
    positions = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    tokens = np.array([10] + [20, 4_000] * 4 + [20], dtype=np.int64)
    rec = make_recording(tuple(messages), tokens, message_arrays(messages), positions, np.full(positions.size, 50))
    params = ReplayParams(prices=Prices("t", 3.0, 0.3, 15.0, 3.75, 9_000, "t"), v_tokens=1_000, s_tokens=100)
    oracle = oracle_schedule(rec, params)
    assert oracle.schedule, "the window forces at least one compaction"
    assert oracle.total_usd == pytest.approx(brute_force(rec, params), rel=1e-12)
    assert replay(rec, Schedule("none", {}), params).overflows > 0  # keeping everything does not fit
