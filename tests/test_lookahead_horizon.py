"""The look-ahead's horizon cut to a few fills of the window, with the calls past it priced at the
cost per call of the cheapest repeating schedule (:data:`dp_compact.core.lookahead.HORIZON_FILLS`)."""

from __future__ import annotations

import numpy as np
import pytest

from dp_compact.core import lookahead as la
from dp_compact.core.lookahead import Forecast, look_ahead
from dp_compact.pricing import Prices

PRICES = Prices("test", 3.0, 0.30, 15.0, 3.75, 200_000, "DESIGN §2")
V, S = 12_000, 780

#: (context, growth per call, calls so far, window): sessions whose window fills in 15-120 calls.
CASES = [(90_000, 3_000.0, 40, 200_000), (170_000, 5_000.0, 250, 200_000), (60_000, 1_500.0, 5, 128_000),
         (300_000, 8_000.0, 120, 400_000)]


def _ahead(context: int, growth: float, calls: int, window: int, cold: float = 0.0):
    x0 = context - V
    heads = np.linspace(0.3, 0.95, 7) * x0
    tokens = np.linspace(0.0, window, 40)
    forecast = Forecast(growth_tokens=growth, calls_so_far=calls, survival_alpha=1.55, survival_scale=72.2,
                        loss_tail_tokens=tokens, loss_tail_usd=0.4 * np.sqrt(tokens / window), cold_share=cold)
    return look_ahead(context, heads.round().astype(np.int64), np.linspace(0.02, 0.3, 7), forecast, PRICES, v_tokens=V,
                      s_tokens=S, limit_tokens=0.9 * window, window_tokens=window)


def _options(ahead) -> np.ndarray:
    return np.append(ahead.compact_usd, ahead.keep_usd)


@pytest.mark.parametrize(("context", "growth", "calls", "window"), CASES)
def test_the_cut_horizon_decides_as_the_whole_survival_horizon(context, growth, calls, window, monkeypatch):
    """Cut to HORIZON_FILLS fills of the window or HORIZON_CYCLES cycles of the cheapest repeating
    schedule, the look-ahead makes the decision the whole survival horizon makes, the differences
    between its choices within 0.1 % of their cost, and states the same expected number of calls."""
    cut = _ahead(context, growth, calls, window)
    monkeypatch.setattr(la, "HORIZON_FILLS", 10**9)
    monkeypatch.setattr(la, "HORIZON_CYCLES", 10**9)
    whole = _ahead(context, growth, calls, window)
    assert cut.horizon_calls < whole.horizon_calls  # the cut applies in every case
    assert cut.expected_calls == pytest.approx(whole.expected_calls)
    mine, theirs = _options(cut), _options(whole)
    assert int(np.argmin(mine)) == int(np.argmin(theirs))
    assert np.max(np.abs((mine - mine.min()) - (theirs - theirs.min()))) <= 1e-3 * theirs.min()


@pytest.mark.parametrize(("context", "growth", "calls", "window"), CASES[:3])
def test_the_calls_past_the_cut_are_priced_near_a_call_by_call_induction(context, growth, calls, window, monkeypatch):
    """Against a backward induction over every single call of the whole survival horizon (no block
    of several calls, no cut), the stated costs from now on are within 10 % and the decision is the
    same; without the price of the calls past the cut they would be far lower."""
    cut = _ahead(context, growth, calls, window)
    monkeypatch.setattr(la, "HORIZON_FILLS", 10**9)
    monkeypatch.setattr(la, "HORIZON_CYCLES", 10**9)
    monkeypatch.setattr(la, "BLOCK_DIVISOR", 10**9)
    exact = _ahead(context, growth, calls, window)
    assert _options(cut) == pytest.approx(_options(exact), rel=0.10)
    assert int(np.argmin(_options(cut))) == int(np.argmin(_options(exact)))
    monkeypatch.undo()
    monkeypatch.setattr(la, "_cheapest_cycle", lambda *args, **kwargs: (0.0, float("inf")))
    assert _ahead(context, growth, calls, window).keep_usd < 0.8 * exact.keep_usd


@pytest.mark.parametrize(("growth", "window", "cold"), [(3_000.0, 200_000, 0.0), (800.0, 128_000, 0.2), (12_000.0, 400_000, 0.0)])
def test_cheapest_cycle_is_the_cheapest_repeating_schedule_call_by_call(growth, window, cold):
    """The cost per call of compacting at X to each future tail and keeping until the context is back
    at X, summed call by call over every X of the grid, is what :func:`la._cheapest_cycle` gives, to
    within 2 % (it integrates the kept calls), and its cycle is one of a schedule within 5 % of that (its calls rounded)."""
    top, least = 0.9 * window - V, 2_000.0
    tokens = np.linspace(0.0, window, 40)
    forecast = Forecast(growth_tokens=growth, calls_so_far=10, survival_alpha=1.55, survival_scale=72.2,
                        loss_tail_tokens=tokens, loss_tail_usd=0.4 * np.sqrt(tokens / window), cold_share=cold)
    fast, cycle = la._cheapest_cycle(top, growth, V, S, PRICES, forecast, least, 0.9 * window)
    points = np.linspace(0.0, top, la.GRID_POINTS)
    tails, first, _, keep_call, _, _ = la._call_costs(points, growth, V, S, PRICES, forecast, least)
    best, candidates = np.inf, []
    for j, x in enumerate(points):
        if V + x - growth > 0.9 * window:
            continue
        for r in range(tails.shape[0]):
            t = tails[r, j]
            calls = int(round((x - S - t) / growth))
            if calls < 1:
                continue
            kept = sum(float(np.interp(S + t + k * growth, points, keep_call)) for k in range(1, calls))
            best = min(best, (first[r, j] + kept) / calls)
            candidates.append(((first[r, j] + kept) / calls, (x - S - t) / growth))
    assert fast == pytest.approx(best, rel=0.02)
    assert cycle >= 1.0 and any(abs(cycle - c) < 1e-9 and cost <= 1.05 * best for cost, c in candidates)  # rounded to whole calls


@pytest.mark.parametrize(("context", "growth", "calls", "window"),
                         CASES + [(400_000, 300.0, 900, 1_000_000), (150_000, 1_200.0, 30, 1_000_000)])
def test_the_far_blocks_on_a_coarser_grid_decide_as_every_block_on_the_fine_grid(context, growth, calls, window, monkeypatch):
    """Without price tiers the blocks from call FAR_CALLS on are valued on FAR_GRID_POINTS sizes: the
    decision is the one every block on GRID_POINTS makes, and the differences between the options are
    within 0.2 % of their cost (the stated costs themselves move by up to 10 %: the far future is coarse
    either way, see test_the_calls_past_the_cut_are_priced_near_a_call_by_call_induction)."""
    assert la.FAR_GRID_POINTS < la.GRID_POINTS
    monkeypatch.setattr(la, "HORIZON_CYCLES", 10**9)  # horizons of fills: far blocks in every case
    spied = []
    far_grid = la._far_grid
    monkeypatch.setattr(la, "_far_grid", lambda *args, **kwargs: spied.append(far_grid(*args, **kwargs)) or spied[-1])
    coarse = _ahead(context, growth, calls, window)
    assert spied and spied[-1].size == la.FAR_GRID_POINTS  # no tier, no trigger: evenly spaced sizes alone
    assert coarse.horizon_calls > la.FAR_CALLS  # blocks start past FAR_CALLS: the coarser grid values them
    monkeypatch.setattr(la, "FAR_CALLS", 10**9)
    fine = _ahead(context, growth, calls, window)
    mine, theirs = _options(coarse), _options(fine)
    assert int(np.argmin(mine)) == int(np.argmin(theirs))
    assert np.max(np.abs((mine - mine.min()) - (theirs - theirs.min()))) <= 2e-3 * theirs.min()
    assert mine == pytest.approx(theirs, rel=0.10)
