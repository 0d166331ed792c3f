"""The look-ahead's backward induction and its first compaction equal a plain block-by-block loop.

:func:`dp_compact.core.lookahead._values` prepares the costs of several blocks' own calls at once,
keeps each block's values multiplied by the chance of reaching it and adds the values ahead in
place; :func:`_reference_values` below is the recursion written one block at a time, as the model
states it (the chance of going on times the value ahead). The two must agree to rounding (1e-12
relative) in every value and exactly in where compacting is best (the plan's values, its decision
and its explanation come from them), with and without price tiers, a cold share, a known length
(blocks the session never reaches) and a forced threshold inside the grid.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st

from dp_compact.core import lookahead as la
from dp_compact.core.benefit import compaction_request_cost
from dp_compact.core.tiers import rates_at
from dp_compact.pricing import PriceTier, Prices

PLAIN = Prices("test", 3.0, 0.30, 15.0, 3.75, 200_000, "DESIGN §2")
TIERED = Prices("tiered", 3.0, 0.30, 15.0, 3.75, 1_000_000, "DESIGN §8", tiers=(PriceTier(200_000, 6.0, 0.60, 22.5),))


def _reference_values(grid, alive, blocks, g, v, s, prices, forecast, limit, x0_tails):
    """W_1 on the grid by backward induction, one block at a time (the loop :func:`la._values` must equal)."""
    top = grid[-1]
    value = np.zeros_like(grid)
    compact_at = np.zeros((len(blocks), grid.size), dtype=bool)
    shares = np.array(la.FUTURE_TAIL_SHARES)[:, None]
    least = max(float(np.min(x0_tails)) if x0_tails.size else g, 1.0)
    tails = np.minimum(np.maximum(np.vstack((np.zeros((1, grid.size)), shares * grid[None, :])), least), grid[None, :])
    lost = forecast.tail_loss(grid)[None, :] - forecast.tail_loss(tails)
    rk, rr, rf = rates_at(prices, v + grid), rates_at(prices, v + grid - tails), rates_at(prices, v + s + tails)
    out = forecast.output_tokens
    extra = la._output_extra
    first = (compaction_request_cost(v + grid - tails, 0.0, s, rr) / 1e6 + lost
             + (rf.p_cache * v + rf.p_write * (s + tails)) / 1e6 + extra(prices, rf, out))
    after = (rf.p_cache * (v + s + tails) + rf.p_write * g) / 1e6 + extra(prices, rf, out)
    keep_call = (rk.p_cache * (v - g + grid) + rk.p_write * g) / 1e6 + extra(prices, rk, out)
    growth_read, growth_read_after = rk.p_cache * g / 1e6, rf.p_cache * g / 1e6
    rho = forecast.cold_share
    if rho > 0:
        first = first + rho * (compaction_request_cost(0.0, v + grid - tails, s, rr) - compaction_request_cost(v + grid - tails, 0.0, s, rr)) / 1e6
        after = (1 - rho) * after + rho * (rf.p_write * (v + s + tails + g) / 1e6 + extra(prices, rf, out))
        keep_call = (1 - rho) * keep_call + rho * (rk.p_write * (v + grid) / 1e6 + extra(prices, rk, out))
        growth_read = ((1 - rho) * rk.p_cache + rho * rk.p_write) * g / 1e6
        growth_read_after = ((1 - rho) * rf.p_cache + rho * rf.p_write) * g / 1e6
    totals, ramps, rests, ramps_after, going_ons = la._block_weights(alive, blocks)
    width = grid.size
    for index in range(len(blocks) - 1, -1, -1):
        b = blocks[index][1]
        going_on = going_ons[index]
        targets = np.concatenate((grid + b * g, (s + tails + b * g).ravel()))
        ahead = going_on * np.interp(targets, grid, value)
        if going_on > 0:
            ahead[targets > top] = np.inf
        keep = totals[index] * keep_call + ramps[index] * growth_read + ahead[:width]
        if b > 1:
            keep[v + grid + (b - 1) * g > limit] = np.inf
        else:
            keep[v + grid > limit] = np.inf
        compact = first + rests[index] * after + ramps_after[index] * growth_read_after + ahead[width:].reshape(tails.shape)
        best = compact.min(axis=0)
        compact_at[index] = best < keep
        value = np.minimum(keep, best)
    return value, compact_at


def _reference_first_compaction(compact_at, blocks, grid, x0, g):
    """The first call at which the best schedule compacts after keeping now, block by block."""
    for index, (n, _) in enumerate(blocks):
        x = x0 + g * n
        if x > grid[-1] or compact_at[index, min(int(np.searchsorted(grid, x)), grid.size - 1)]:
            return float(n)
    return None


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    """The same shape, the same infinite entries, finite ones equal to 1e-12 of the largest."""
    scale = np.max(np.abs(b[np.isfinite(b)]), initial=1.0)
    return a.shape == b.shape and np.array_equal(np.isfinite(a), np.isfinite(b)) and \
        bool(np.all(np.abs(a - b)[np.isfinite(b)] <= 1e-12 * scale))


def _case(tiers: bool, window: int, v: int, g: float, calls: int, known: bool, cold: float, output: float, least: float,
          loss_scale: float):
    """The inputs :func:`la.look_ahead` gives :func:`la._values` for one case."""
    prices = TIERED if tiers else PLAIN
    s, limit = 780.0, 0.92 * window
    loss_tokens = np.linspace(0.0, 0.8 * window, 40)
    forecast = la.Forecast(growth_tokens=g, calls_so_far=calls, survival_alpha=1.4, survival_scale=60.0,
                           loss_tail_tokens=loss_tokens, loss_tail_usd=loss_scale * np.sqrt(loss_tokens / window),
                           remaining_calls=float(calls % 37 + 2) if known else None, output_tokens=output, cold_share=cold)
    if known:
        horizon = int(min(max(np.ceil(forecast.remaining_calls), 2), la.MAX_HORIZON_CALLS))
        alive = (np.arange(horizon + 1) < forecast.remaining_calls).astype(np.float64)
        alive[0] = 1.0
    else:
        horizon = la._horizon(calls, forecast.survival_alpha, forecast.survival_scale)
        alive = la.continuation(calls, forecast.survival_alpha, forecast.survival_scale, horizon + 1)
    top = max(max(window, limit) - v, s + g)
    blocks = la._blocks(horizon, max(int(la.BLOCK_GROWTH_SHARE * top / g) // (1 + calls % 3), 1))  # as the room or a cycle caps them
    x0 = 0.5 * window
    grid = la._grid(top, v, g, min(horizon, la.CLIFF_CALLS), prices, np.array([x0, s + least, s + 3 * least]))
    tails = np.array([least, 2 * least, 0.3 * x0])
    return (grid, alive, blocks, g, float(v), s, prices, forecast, limit, tails), x0


@hypothesis_settings(max_examples=60, deadline=None)
@given(st.booleans(), st.sampled_from([128_000, 200_000, 1_000_000]), st.integers(0, 30_000), st.floats(50.0, 40_000.0),
       st.integers(0, 3_000), st.booleans(), st.sampled_from([0.0, 0.2, 1.0]), st.sampled_from([0.0, 800.0]),
       st.floats(1.0, 50_000.0), st.sampled_from([0.0, 0.05, 5.0]))
def test_values_equal_the_block_by_block_loop(tiers, window, v, g, calls, known, cold, output, least, loss_scale):
    args, x0 = _case(tiers, window, v, g, calls, known, cold, output, least, loss_scale)
    value, compact_at, _ = la._values(*args)
    want_value, want_at = _reference_values(*args)
    assert _close(value, want_value) and _same(compact_at, want_at)
    grid, blocks = args[0], args[2]
    for start in (0.0, x0, grid[-1] - g, grid[-1] + 1.0):
        assert la._first_compaction(compact_at, blocks, grid, start, g) == _reference_first_compaction(want_at, blocks, grid, start, g)


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_values_do_not_depend_on_how_many_blocks_are_prepared_at_once(chunk, monkeypatch):
    args, _ = _case(True, 1_000_000, 12_000, 3_000.0, 40, False, 0.2, 800.0, 2_000.0, 0.05)
    monkeypatch.setattr(la, "VALUES_CHUNK_SIZES", chunk)
    value, compact_at, _ = la._values(*args)
    want_value, want_at = _reference_values(*args)
    assert _close(value, want_value) and _same(compact_at, want_at)


def _reference_blocks(horizon: int, most: int, least: int = 1) -> tuple[tuple[int, int], ...]:
    """The time steps after call 0, one at a time: single calls, then about n / BLOCK_DIVISOR calls, at most
    ``most``, from call BLOCK_DIVISOR on at least ``least`` (as far as ``most`` allows)."""
    blocks, n = [], 1
    while n < horizon:
        b = max(1, n // la.BLOCK_DIVISOR)
        if n >= la.BLOCK_DIVISOR:
            b = max(b, least)
        b = min(b, most, horizon - n)
        blocks.append((n, b))
        n += b
    return tuple(blocks)


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.integers(-1, 2 * la.MAX_HORIZON_CALLS), st.integers(1, 3 * la.MAX_HORIZON_CALLS), st.integers(1, 400))
def test_blocks_equal_the_step_by_step_loop(horizon, most, least):
    blocks = la._blocks(horizon, most, least)
    assert tuple(blocks) == _reference_blocks(horizon, most, least)
    firsts, sizes = la._block_columns(blocks)
    assert firsts.tolist() == [n for n, _ in blocks] and sizes.tolist() == [b for _, b in blocks]
    assert la._block_columns(tuple(blocks))[0].tolist() == firsts.tolist()
