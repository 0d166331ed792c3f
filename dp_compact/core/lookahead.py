"""The look-ahead decision of DESIGN §7: compact now, later, or never, by backward induction.

:func:`look_ahead` is pure: it takes the current context, the session's feasible cuts (their
head and tail tokens and the expected cost of losing each head), a :class:`Forecast` of the
future, prices and V, S, M, and returns a :class:`LookAhead` with the value of keeping and of
compacting at every cut.

The model (units: tokens, $/MTok; values in $):

- Time runs in LLM calls. Call 0 is the one about to be made; call n > 0 happens with the
  probability that the session lasts that long given it reached call 0 (:func:`continuation`,
  a Lomax survival curve of session lengths fitted by ``dp-compact calibrate``; it replaces the
  fixed E of DESIGN §2).
- Before each call the live context ``x`` (tokens beyond V) has grown by ``g`` since the
  previous call (:attr:`Forecast.growth_tokens`, the recent median growth of the prompt).
- **Keep**: the call reads ``V + x − g`` from the prompt cache and writes the ``g`` new tokens
  (``P_write``, else ``P_input``: DESIGN §2 "Cache writes"); next ``x + g``. Keeping is not allowed
  once ``V + x`` exceeds ``DP_FORCE_RATIO · M`` (the forced rule of DESIGN §2).
- **Compact to a tail of ``t`` tokens**: the cache-aligned summary request (DESIGN §2 ③: ``V + H``
  from cache, ``L_INSTR_TOKENS`` at ``P_input``, S output tokens), the expected cost of what is
  dropped, then the call reads V and writes ``S + t``; next ``S + t + g``. At call 0 the tails
  are the session's real feasible cuts and the loss is the recall term of their heads (DESIGN §2
  ④); later, tails of :data:`FUTURE_TAIL_SHARES` of the context, never below the present's
  smallest eligible tail (one API round, DESIGN §7, or ``DP_MIN_VERBATIM_TOKENS``: ``eligible``), and the loss comes from the same recall term by distance from the end
  (:attr:`Forecast.loss_tail_usd`), so that the present and the future agree.
- Output tokens are the same under every schedule (the recording's assumption, DESIGN §6) and
  are left out, but for what a price tier adds to them (below).
- **Price tiers** (DESIGN §8): every request is priced at the tier of its own prompt
  (:func:`~dp_compact.core.tiers.rates_at`, vectorized over the grid): a kept call at ``V + x``,
  a summary request at ``V + H``, the call after a compaction at ``V + S + t``; the output of a
  call (:attr:`Forecast.output_tokens`) pays what its tier adds to the base output price. A block
  of several calls is priced at the tier of its first call (its last call may pass a threshold a
  block early; the first :data:`BLOCK_DIVISOR` calls are single steps and exact).
- **Time** (DESIGN §8): the call about to be made finds the cache cold with chance ``p``
  (``cold_chance``: 1 when the silence already exceeds the TTL, ``cold_now``; at the end of an
  assistant turn, the idle hazard). A cold call writes its whole prompt; a summary request made
  on a cold cache writes ``V + H`` (then the next call reads V). Three present choices:
  **keep** (``p`` · cold + (1 − p) · warm), **compact now** (the request while the cache is warm,
  the next call after the pause: ``V + S + t`` written when cold) and, when ``0 < p < 1``,
  **decide on resume** (``p`` · the best of keeping and compacting on a cold cache + (1 − p) · the
  best on a warm one: "compact on resume if the cache has expired"). A later call (and a later
  summary request) finds the cache cold with the session's own recent share of gaps beyond the
  TTL (:attr:`Forecast.cold_share`; 0 for a timeless forecast).

The values are computed on a grid of context sizes (:data:`GRID_POINTS`; with price tiers, both
sides of each price cliff, and a coarser grid for the blocks after the first :data:`CLIFF_CALLS`
calls; a coarser one still, :data:`FAR_GRID_POINTS` sizes, for the blocks from call
:data:`FAR_CALLS` on; a tier that starts at or above the window is no tier: no prompt above it is sent), backwards from a
horizon where the session has ended with probability ≥ 1 − :data:`SURVIVAL_EPSILON` (at most
:data:`MAX_HORIZON_CALLS` calls), interpolating linearly between grid points. The first
:data:`BLOCK_DIVISOR` future calls are single steps; later a step covers a block of about
``n / BLOCK_DIVISOR`` calls, deciding at its first call (the far future is planned coarsely), and,
as far as :data:`CYCLE_CAPPED_BLOCKS` allows, no longer than a quarter of the cycle of the cheapest
repeating schedule (:data:`CYCLE_BLOCK_SHARE`), so that a far block does not keep through compactions
the best schedule would make, and no shorter than a sixteenth of it (:data:`CYCLE_LEAST_BLOCK_SHARE`),
so that a long cycle is not resolved more finely than its decisions need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from dp_compact.core.benefit import compaction_request_cost
from dp_compact.core.tiers import rates_at
from dp_compact.pricing import Prices

__all__ = [
    "BLOCK_DIVISOR",
    "BLOCK_GROWTH_SHARE",
    "CYCLE_BLOCK_SHARE",
    "CYCLE_CAPPED_BLOCKS",
    "CYCLE_LEAST_BLOCK_SHARE",
    "CLIFF_CALLS",
    "CLIFF_PATHS",
    "FAR_CALLS",
    "FAR_GRID_POINTS",
    "FUTURE_TAIL_SHARES",
    "GRID_POINTS",
    "GRID_POINTS_TIERED",
    "HORIZON_CYCLES",
    "HORIZON_FILLS",
    "MAX_HORIZON_CALLS",
    "MIN_HORIZON_CALLS",
    "SURVIVAL_EPSILON",
    "Forecast",
    "LookAhead",
    "continuation",
    "look_ahead",
]

#: Context sizes of the value grid, from 0 to the forced threshold (tokens beyond V).
GRID_POINTS = 128
#: With price tiers the values jump at each cliff, and linear interpolation smears a jump over a
#: grid cell (8 % of the value in cases of tests/test_tiers.py's brute force with 512 evenly spaced
#: sizes alone). So the grid has this many evenly spaced sizes...
GRID_POINTS_TIERED = 128
#: ... the present's own paths, keeping from now and from after compacting at up to this many of
#: its cuts (evenly spaced by tail), call by call for :data:`CLIFF_CALLS` calls (exact there)...
CLIFF_PATHS = 8
#: ... and also holds both sides of where keeping reaches a cliff within this many calls (the value
#: function jumps there; two points per call and threshold). Only the blocks starting within these
#: calls are valued on that grid; the later ones on :data:`GRID_POINTS_TIERED` evenly spaced sizes
#: and both sides of where a call passes a cliff (:func:`_far_grid`). On 700 random tiered sessions
#: (1M window, a tier at 200,000, 50-8,000 tokens a call; 2026-12-07) against a backward induction
#: over every single call: the decision of 696 (699 with 16 calls and the blocks of n / 16 calls
#: before :data:`CYCLE_BLOCK_SHARE`), the others within 0.06 % of the best; a third fewer
#: instructions than with 16 calls.
CLIFF_CALLS = 8
#: The blocks from this call on are valued on :data:`FAR_GRID_POINTS` evenly spaced sizes (and both
#: sides of each price cliff and of ``compact_from_tokens``, :func:`_far_grid`), the nearer ones on
#: the finer grids above: the far future reaches the present only through the values where the near
#: blocks end, and is planned at coarse times already. On 500 random sessions (128k-1M windows,
#: 50-8,000 tokens a call, with and without a price tier and a cold share; 2026-12-06) against a
#: backward induction over every single call: the same decision in 497 (495 with every block on the
#: finer grids; the others within 0.004 % of the best), the differences between the choices within
#: 0.19 % of their values; on 300 sessions with a price tier (1M window, tier at 200,000): 300 against
#: 296, within 0.07 % (0.45 %); the replay of every shared session the same to the cent. A LangChain
#: agent at 1,000 messages with a 1M window (119 blocks, 74 of them far) runs 18 % fewer instructions
#: per call, 13 % with Gemini 2.5 Pro's tier.
FAR_CALLS = 64
FAR_GRID_POINTS = 32
#: Shares of the live context a future compaction may keep (besides one call's growth): a small
#: menu is enough for the future; the present decision takes every feasible cut.
FUTURE_TAIL_SHARES = (0.05, 0.15, 0.3, 0.5)
#: The horizon ends where the session has gone on with probability below this.
SURVIVAL_EPSILON = 1e-3
#: ... or after this many calls (the Lomax tail is long; later calls weigh little).
MAX_HORIZON_CALLS = 5000
#: ... or, when shorter, after this many fills of the window at the forecast growth (at least
#: :data:`MIN_HORIZON_CALLS` calls): the calls past it are priced at the cost per call of the
#: cheapest repeating schedule (:func:`_cheapest_cycle`; the same for every present choice).
#: On 80 random sessions of 800-8,000 tokens a call and 128k-400k windows (2026-12-06), against the
#: survival horizon: every decision the same, the differences between the choices within 0.08 %
#: of their values, 1.2 ms instead of 4.6 ms (median).
HORIZON_FILLS = 8
MIN_HORIZON_CALLS = 64
#: ... or, when shorter still, after this many cycles of the cheapest repeating schedule
#: (:func:`_cheapest_cycle`): past its first compactions the best schedule no longer depends on the
#: present choice (measured with the blocks below: :data:`CYCLE_CAPPED_BLOCKS`).
HORIZON_CYCLES = 8
#: Time steps after the first calls cover about n / BLOCK_DIVISOR calls each (n: calls ahead)...
BLOCK_DIVISOR = 8
#: ... and grow the context by at most this share of the room under the forced threshold, so
#: that a block never outgrows the window between two decisions...
BLOCK_GROWTH_SHARE = 0.25
#: ... and last at most this share of the cycle of the cheapest repeating schedule (compact at X, keep
#: until the context is back at X: :func:`_cheapest_cycle`), so that the far future can compact as
#: often as the best schedule does (a block decides once, at its first call)...
CYCLE_BLOCK_SHARE = 0.25
#: ... but at least ``horizon / CYCLE_CAPPED_BLOCKS`` calls, which bounds the work when the cycle is short.
#: On 500 random sessions (128k-1M windows, 50-8,000 tokens a call, with and without a price tier and a
#: cold share; 2026-12-07) against a backward induction over every single call of the horizon of
#: :data:`HORIZON_FILLS` alone: the same decision in 497 (497 with blocks of n / 16 calls bounded by the
#: room alone, no horizon in cycles and :data:`CLIFF_CALLS` 16), the others within 0.007 % of the best
#: (0.004 %), the differences between the choices within 0.35 % of their values (0.19 %), the stated cost
#: of the best choice 4.1-4.5 % high at the median, 48 % at the 90th percentile (11-12 % and 65 %), 56
#: blocks on average (108). With a price tier (700 sessions, 1M window, tier at 200,000) the stated cost
#: is 17-22 % high at the median (32-34 %). On the 15 shared conversations 52 blocks at the median instead
#: of 119; the replay of the shared sessions moved by at most 2 cents in total (gemini_cli_stream_figma,
#: whose tier the near grid prices: +$0.016 under the verbatim detector, -$0.008 under the strict one).
CYCLE_CAPPED_BLOCKS = 96
#: From call :data:`BLOCK_DIVISOR` on, a block lasts at least this share of the cycle of the cheapest repeating
#: schedule (as far as the caps above allow): when the best schedule compacts every few hundred calls, blocks of
#: n / BLOCK_DIVISOR calls resolve the first hundreds of calls more finely than any decision there needs. Against
#: the backward induction over every single call (2026-12-07): on the 500 mixed sessions of :data:`CYCLE_CAPPED_BLOCKS`
#: the same decision in 496 (497 without it; the new difference within 0.005 % of the best), on the 700 with a
#: price tier in 696 (696), the differences between the choices within 0.49 % of their values (0.35 %), the stated
#: costs as high; a LangChain agent at 1,000 messages with a 1M window (a cycle of 600-900 calls) values 44-51
#: blocks instead of 73-77.
CYCLE_LEAST_BLOCK_SHARE = 1 / 16
#: Values the backward induction prepares at once (blocks x actions x grid sizes): the costs of
#: that many blocks' own calls are computed together, before the blocks are visited one by one.
VALUES_CHUNK_SIZES = 1 << 13

Floats = npt.NDArray[np.float64]

try:  # np.interp's own function, without the checks np.interp makes of arguments it does not need here (float64 values)
    from numpy._core.multiarray import interp as _interp
except ImportError:  # pragma: no cover - another numpy layout
    def _interp(x: Floats, xp: Floats, fp: Floats, left: float | None, right: float | None) -> Floats:
        return np.interp(x, xp, fp, left, right)


@dataclass(frozen=True, slots=True)
class Forecast:
    """What the session is expected to do next (DESIGN §7 "Forecast from the session itself").

    Attributes
    ----------
    growth_tokens : float
        g, tokens the prompt grows by per call (recent median; > 0).
    calls_so_far : int
        LLM calls the session has made (the survival curve is conditioned on them).
    survival_alpha, survival_scale : float
        Lomax survival of session lengths in calls, ``P(length > n) = (1 + n / scale) ** −alpha``
        (calibrated: ``DP_SURVIVAL_ALPHA``, ``DP_SURVIVAL_SCALE``).
    loss_tail_tokens, loss_tail_usd : ndarray[float64], shape (P,)
        The loss profile: keeping only the last ``loss_tail_tokens[i]`` tokens (ascending) loses
        what the rest would have been used for, and the messages within that many tokens of the
        end are expected to be worth ``loss_tail_usd[i]`` $ (non-decreasing). A future compaction
        from ``x`` to a tail of ``t`` tokens loses ``Λ(x) − Λ(t)`` (Λ interpolated, constant
        beyond the profile: older text is not used): the present's recall term (DESIGN §2 ④), by
        distance from the end of the conversation. Empty: no loss.
    remaining_calls : float or None
        A known length instead of the survival curve: exactly this many calls from now on, the
        present one included (``DP_E_FIXED`` · L when the user sets E); None = the curve.
    output_tokens : float
        Output tokens per call (recent median); only what a price tier adds to their price is
        counted (module docstring).
    cold_share : float
        Chance that a later call finds the cache cold (the session's recent gaps longer than the
        TTL, DESIGN §8): such a call, or summary request, writes its whole prompt. 0: every later
        call is warm (a timeless forecast).
    """

    growth_tokens: float
    calls_so_far: int
    survival_alpha: float
    survival_scale: float
    loss_tail_tokens: Floats = field(default_factory=lambda: np.zeros(0))
    loss_tail_usd: Floats = field(default_factory=lambda: np.zeros(0))
    remaining_calls: float | None = None
    output_tokens: float = 0.0
    cold_share: float = 0.0

    def tail_loss(self, tokens: Floats | float) -> Floats:
        """Λ(tokens): the expected worth of the last ``tokens`` tokens, $ (module docstring)."""
        if self.loss_tail_tokens.size == 0:
            return np.zeros(np.shape(tokens))
        return np.interp(tokens, self.loss_tail_tokens, self.loss_tail_usd)


@dataclass(frozen=True, slots=True)
class LookAhead:
    """The values of the present decision (DESIGN §7), in $ of the calls to come (output apart).

    Attributes
    ----------
    keep_usd : float
        Expected cost from now on when the present call keeps everything (inf when keeping is
        not allowed: the context is above the forced threshold).
    compact_usd : ndarray[float64], shape (n_cuts,)
        Expected cost from now on when compacting now at each cut (the request, the loss, the
        rewritten cache and the best schedule afterwards).
    action_usd : ndarray[float64], shape (n_cuts,)
        What the compaction itself costs, the loss apart: its request and the rewritten prompt of
        the call after it.
    horizon_calls : int
        Calls looked ahead.
    expected_calls : float
        Expected calls from now on (the present one included), up to where the session has ended
        with probability 1 − :data:`SURVIVAL_EPSILON` (past a horizon cut to :data:`HORIZON_FILLS` too).
    next_compaction_calls : float or None
        When keeping now, the first future call at which the best schedule compacts (with the
        session still running); None when it never does within the horizon.
    cold_chance : float
        Chance that the next call finds the cache cold (module docstring, "Time").
    cold_now : bool
        The silence already exceeds the TTL: compacting now is compacting on a cold cache.
    resume_usd : float or None
        Expected cost when deciding on resume (``0 < cold_chance < 1`` only): the best of keeping
        and compacting once the state of the cache is known; None otherwise.
    resume_cold_cut, resume_warm_cut : int or None
        What deciding on resume does: the index of the cut it compacts at if the cache has
        expired / is still warm, None when it keeps then.
    unbounded_usd : ndarray[float64], shape (n_cuts,)
        ``compact_usd`` before the ``eligible`` mask of :func:`look_ahead` (every cut priced, the
        future as bounded): what a cut the bound excludes would have cost, to say when it binds.
    clear_usd : ndarray[float64], shape (n_depths,)
        Expected cost from now on when clearing old tool results now at each depth of
        :func:`look_ahead`'s ``clear_saved_tokens`` (DESIGN §9: no request; the loss of the cleared
        results, the prompt rewritten from the first cleared one, the best schedule afterwards);
        inf where the prompt after clearing is still above the forced threshold; empty without depths.
    resume_cold_clear, resume_warm_clear : int or None
        When deciding on resume clears (instead of keeping or compacting) if the cache has
        expired / is still warm: the index of its depth; None otherwise.
    """

    keep_usd: float
    compact_usd: Floats
    action_usd: Floats
    horizon_calls: int
    expected_calls: float
    next_compaction_calls: float | None = None
    cold_chance: float = 0.0
    cold_now: bool = False
    resume_usd: float | None = None
    resume_cold_cut: int | None = None
    resume_warm_cut: int | None = None
    unbounded_usd: Floats = field(default_factory=lambda: np.zeros(0))
    clear_usd: Floats = field(default_factory=lambda: np.zeros(0))
    resume_cold_clear: int | None = None
    resume_warm_clear: int | None = None

    @property
    def best_clear(self) -> int | None:
        """Index of the cheapest clearing depth (ties: the first, the shallowest), or None without one."""
        finite = np.isfinite(self.clear_usd)
        return int(np.argmin(self.clear_usd)) if finite.any() else None

    @property
    def best(self) -> int | None:
        """Index of the cheapest cut (ties: the first, i.e. the deepest when cuts ascend), or None."""
        return int(np.argmin(self.compact_usd)) if self.compact_usd.size else None

    @property
    def saving_usd(self) -> float:
        """What compacting now at the best cut saves over the best schedule that waits, $ (may be
        < 0; inf when keeping is not allowed, -inf without a cut)."""
        if self.best is None:
            return float("-inf")
        if np.isinf(self.keep_usd):
            return float("inf")
        return float(self.keep_usd - self.compact_usd[self.best])


def continuation(calls_so_far: int, alpha: float, scale: float, horizon: int) -> Floats:
    """Chance that call ``n`` (0 = the one about to be made) happens, for n in [0, horizon).

    ``P(length > j + n) / P(length > j)`` under a Lomax survival ``(1 + n / scale) ** −alpha``
    conditioned on the ``j = calls_so_far`` calls made; entry 0 is 1.

    >>> continuation(0, 1.0, 10.0, 3).round(3).tolist()
    [1.0, 0.909, 0.833]
    """
    n = np.arange(horizon, dtype=np.float64)
    base = scale + max(calls_so_far, 0)
    return (base / (base + n)) ** alpha


def _horizon(calls_so_far: int, alpha: float, scale: float) -> int:
    """Calls until the chance of going on falls below SURVIVAL_EPSILON, at most MAX_HORIZON_CALLS."""
    base = scale + max(calls_so_far, 0)
    n = base * (SURVIVAL_EPSILON ** (-1.0 / alpha) - 1.0)
    return int(min(max(np.ceil(n), 2), MAX_HORIZON_CALLS))


def look_ahead(
    context_tokens: int,
    head_tokens: npt.NDArray[np.int64],
    head_loss_usd: Floats,
    forecast: Forecast,
    prices: Prices,
    *,
    v_tokens: int,
    s_tokens: int,
    limit_tokens: float,
    window_tokens: float | None = None,
    cold_chance: float = 0.0,
    cold_now: bool = False,
    eligible: npt.NDArray[np.bool_] | None = None,
    clear_saved_tokens: Floats | None = None,
    clear_kept_tokens: float = 0.0,
    clear_loss_usd: Floats | None = None,
    request_tokens: Floats | None = None,
    future_tail_shares: Sequence[float] | None = None,
    whole_requests: bool = False,
    compact_from_tokens: float = 0.0,
) -> LookAhead:
    """Expected cost of keeping now and of compacting now at each cut, with the best schedule after.

    Parameters
    ----------
    context_tokens : int
        The prompt about to be sent, V included, tokens.
    head_tokens : ndarray[int64], shape (n_cuts,)
        H per feasible cut (tokens dropped); the tail is ``context − V − H``.
    head_loss_usd : ndarray[float64], shape (n_cuts,)
        Expected cost of losing each head, $ (DESIGN §2 ④ recall term).
    forecast : Forecast
        Growth per call, calls so far, survival curve, future loss per token.
    prices : Prices
        $/MTok (``p_write``: the cache-write price, else P_input).
    v_tokens, s_tokens : int
        V and S, tokens.
    limit_tokens : float
        The forced threshold ``DP_FORCE_RATIO · M``: no prompt is kept above it, tokens.
    window_tokens : float, optional
        The window M, tokens: a prompt between the threshold and M must be compacted, one above
        M cannot be sent. Default: ``limit_tokens``.
    cold_chance : float
        Chance in [0, 1] that the next call finds the cache cold (DESIGN §8; module docstring).
    cold_now : bool
        The cache is cold already (the silence exceeds the TTL): the summary request, too, finds
        it cold; ``cold_chance`` is then 1.
    eligible : ndarray[bool], shape (n_cuts,), optional
        The cuts the present may take (``DP_MIN_VERBATIM_TOKENS``: those keeping enough); the
        others are priced (``unbounded_usd``) but cost inf in ``compact_usd``, and the future
        never keeps less than the smallest eligible tail. Default: every cut.
    clear_saved_tokens : ndarray[float64], shape (n_depths,), optional
        The present's clearing depths (DESIGN §9): tokens each takes out of the context (non-decreasing
        with depth). A clearing sends no request; the next call reads V and ``clear_kept_tokens``
        from the cache and writes the rest of the smaller prompt (all of it when the cache is cold).
        Future calls keep or compact as the value grid says (they do not clear again).
    clear_kept_tokens : float
        Tokens beyond V before the first message a clearing changes (still a cache hit).
    clear_loss_usd : ndarray[float64], shape (n_depths,), optional
        Expected cost of losing the cleared results at each depth, $ (the recall term of their
        messages); default 0.
    request_tokens : ndarray[float64], shape (n_cuts,), optional
        What the present compaction's request reads beyond V, tokens; default the head
        (``head_tokens``: dp's cache-aligned request). A provider-native compaction reads the whole
        context (DESIGN §9; :mod:`dp_compact.core.native_costs`).
    future_tail_shares : sequence of float, optional
        Shares of the context a future compaction keeps; default :data:`FUTURE_TAIL_SHARES`. A
        native compaction keeps what the provider keeps (nothing, or the user messages).
    whole_requests : bool
        Future compactions' requests read the whole context (a native compaction), not the head.
    compact_from_tokens : float
        No compaction, present or future, of a prompt below this many tokens (V included): a
        provider's least trigger (Anthropic ``compact_20260112``: 50,000); 0: none.

    Returns
    -------
    LookAhead

    Raises
    ------
    ValueError
        If the arrays differ in shape, or growth or the survival parameters are not positive.
    """
    heads = np.asarray(head_tokens, dtype=np.float64)
    losses = np.asarray(head_loss_usd, dtype=np.float64)
    if heads.shape != losses.shape:
        raise ValueError("head_tokens and head_loss_usd must have the same shape")
    reads = heads if request_tokens is None else np.asarray(request_tokens, dtype=np.float64)
    if reads.shape != heads.shape:
        raise ValueError("request_tokens must have the shape of head_tokens")
    shares = FUTURE_TAIL_SHARES if future_tail_shares is None else tuple(float(x) for x in future_tail_shares)
    mask = np.ones(heads.shape, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    if mask.shape != heads.shape:
        raise ValueError("eligible must have the shape of head_tokens")
    if not (forecast.growth_tokens > 0 and forecast.survival_alpha > 0 and forecast.survival_scale > 0):
        raise ValueError("growth and the survival parameters must be positive")
    v, s, g = float(v_tokens), float(s_tokens), float(forecast.growth_tokens)
    p = 1.0 if cold_now else min(max(float(cold_chance), 0.0), 1.0)
    if forecast.remaining_calls is not None:
        horizon = int(min(max(np.ceil(forecast.remaining_calls), 2), MAX_HORIZON_CALLS))
        alive = (np.arange(horizon + 1) < forecast.remaining_calls).astype(np.float64)
        alive[0] = 1.0
    else:
        horizon = _horizon(forecast.calls_so_far, forecast.survival_alpha, forecast.survival_scale)
        alive = continuation(forecast.calls_so_far, forecast.survival_alpha, forecast.survival_scale, horizon + 1)
    top = max((limit_tokens if window_tokens is None else max(window_tokens, limit_tokens)) - v, s + g)
    prices = _sendable_tiers(prices, v + top)
    expected_calls = float(alive[:-1].sum())
    x0 = max(float(context_tokens) - v, 0.0)
    tails = np.maximum(x0 - heads, 0.0)
    present = tails[mask] if mask.any() else tails  # the tails the present may keep
    least = _least_tail(present, g)
    paths = np.zeros(0)
    if prices.tiers:  # the present's paths are grid points only with tiers (:func:`_grid`)
        distinct = _unique(tails)
        landing = distinct[_unique(np.linspace(0, max(distinct.size - 1, 0), CLIFF_PATHS).round()).astype(np.int64)] \
            if tails.size else tails
        paths = np.concatenate(([x0], s + landing))
    # the horizon is cut below to at least MIN_HORIZON_CALLS > CLIFF_CALLS calls: the near grid's calls are known now
    grid = _grid(top, v, g, min(horizon, CLIFF_CALLS), prices, paths, shares, whole_requests)
    evenly = not prices.tiers  # the grid is the cheapest cycle's GRID_POINTS evenly spaced sizes
    if compact_from_tokens > v:  # the values jump where keeping reaches the size compacting is allowed from, within
        # CLIFF_CALLS calls: both sides of each such size are grid points, as for a price cliff
        reach = float(compact_from_tokens) - v - g * np.arange(min(horizon, CLIFF_CALLS), dtype=np.float64)
        edges = np.concatenate((reach - 1.0, reach))
        grid, evenly = _unique(np.concatenate((grid, edges[(edges > 0.0) & (edges < top)]))), False
    # the later blocks are valued on coarser grids (:func:`_far_grid`): with tiers from CLIFF_CALLS, and all from FAR_CALLS
    later_grids = [(_far_grid(top, v, s, prices, shares, whole_requests, float(compact_from_tokens), points), start)
                   for points, start in ([(GRID_POINTS_TIERED, CLIFF_CALLS)] if prices.tiers else [])
                   + [(FAR_GRID_POINTS, max(FAR_CALLS, CLIFF_CALLS if prices.tiers else 0))]]
    # what a future call costs on every grid at once, the cheapest cycle's sizes first (unless they are the grid)
    grids = [grid] + [points for points, _ in later_grids] + ([] if evenly else [_evenly(top, GRID_POINTS)])
    costs = _costs_on(grids, g, v, s, prices, forecast, least, shares, whole_requests, float(compact_from_tokens))
    per_call, cycle_calls = _cheapest_cycle(top, g, v, s, prices, forecast, least, limit_tokens, shares,
                                            whole_requests, float(compact_from_tokens), costs=costs[0 if evenly else -1])
    beyond = 0.0  # the chance-weighted calls past a horizon cut to HORIZON_FILLS fills of the window or HORIZON_CYCLES cycles
    if forecast.remaining_calls is None:
        cut = int(np.ceil(min(HORIZON_FILLS * top / g, HORIZON_CYCLES * cycle_calls)))  # cycle_calls may be inf
        cut = max(cut, MIN_HORIZON_CALLS)
        if cut < horizon:
            beyond = float(alive[cut:horizon].sum())
            horizon, alive = cut, alive[:cut + 1]
    most = BLOCK_GROWTH_SHARE * top / g
    if np.isfinite(cycle_calls):  # blocks short enough to follow the cheapest cycle, but not too many
        most = min(most, max(CYCLE_BLOCK_SHARE * cycle_calls, horizon / CYCLE_CAPPED_BLOCKS))
    least_block = int(CYCLE_LEAST_BLOCK_SHARE * cycle_calls) if np.isfinite(cycle_calls) else 1
    blocks = _blocks(horizon, max(int(most), 1), max(least_block, 1))
    later, compact_at, far = _values(grid, alive, blocks, g, v, s, prices, forecast, limit_tokens, present,
                                     shares, whole_requests, float(compact_from_tokens), later_grids, costs[:len(later_grids) + 1])
    r0 = rates_at(prices, v + x0)
    extra0 = _output_extra(prices, r0, forecast.output_tokens)
    read_write = (r0.p_cache * max(v + x0 - g, 0.0) + r0.p_write * min(g, v + x0)) / 1e6 + extra0
    beyond_usd = 0.0  # the calls past the horizon, at the cost per call of the cheapest repeating schedule
    if beyond > 0 and alive[1] > 0:
        beyond_usd = per_call * beyond if np.isfinite(per_call) else 0.0

    def after(x: Floats | float) -> Floats:  # the calls after this one, if the session goes on
        return alive[1] * _at(grid, later, x) + beyond_usd if alive[1] > 0 else np.zeros(np.shape(x))

    can_keep = v + x0 <= limit_tokens
    keep_after = float(after(x0 + g)) if can_keep else float("inf")
    keep_warm = float(read_write) + keep_after
    keep_cold = float(r0.p_write * (v + x0) / 1e6 + extra0) + keep_after
    rr, ra = rates_at(prices, v + reads), rates_at(prices, v + s + tails)
    request_warm = compaction_request_cost(v + reads, 0.0, s, rr) / 1e6
    request_cold = compaction_request_cost(0.0, v + reads, s, rr) / 1e6
    if v + x0 < compact_from_tokens:  # below the provider's least trigger: no compaction now
        mask = np.zeros_like(mask)
    call_warm = (ra.p_cache * v + ra.p_write * (s + tails)) / 1e6 + _output_extra(prices, ra, forecast.output_tokens)
    call_cold = call_warm + (ra.p_write - ra.p_cache) * v / 1e6
    after_compacting = after(s + tails + g)
    rest = np.where(mask, losses + after_compacting, np.inf)
    saved = np.zeros(0) if clear_saved_tokens is None else np.asarray(clear_saved_tokens, dtype=np.float64)
    clear_loss = np.zeros(saved.shape) if clear_loss_usd is None else np.asarray(clear_loss_usd, dtype=np.float64)
    if clear_loss.shape != saved.shape:
        raise ValueError("clear_saved_tokens and clear_loss_usd must have the same shape")
    cleared = np.maximum(x0 - saved, 0.0)  # the context beyond V after clearing at each depth
    rc = rates_at(prices, v + cleared)
    unchanged = np.minimum(max(float(clear_kept_tokens), 0.0), cleared)
    clear_extra = _output_extra(prices, rc, forecast.output_tokens)
    clear_warm = (rc.p_cache * (v + unchanged) + rc.p_write * (cleared - unchanged)) / 1e6 + clear_extra
    clear_cold = rc.p_write * (v + cleared) / 1e6 + clear_extra
    clear_rest = np.where(v + cleared <= limit_tokens, clear_loss + after(cleared + g), np.inf)
    resume = cold_cut = warm_cut = cold_clear = warm_clear = None
    if cold_now:
        keep, action = keep_cold, request_cold + call_warm
        clear_values = clear_cold + clear_rest
    elif p > 0.0:
        keep = p * keep_cold + (1.0 - p) * keep_warm
        action = request_warm + p * call_cold + (1.0 - p) * call_warm
        clear_values = p * clear_cold + (1.0 - p) * clear_warm + clear_rest
        cold_values, warm_values = request_cold + call_warm + rest, request_warm + call_warm + rest
        cold_best, cold_cut, cold_clear = _branch(keep_cold, cold_values, clear_cold + clear_rest)
        warm_best, warm_cut, warm_clear = _branch(keep_warm, warm_values, clear_warm + clear_rest)
        resume = float(p * cold_best + (1.0 - p) * warm_best)
    else:
        keep, action = keep_warm, request_warm + call_warm
        clear_values = clear_warm + clear_rest
    unbounded = action + losses + after_compacting  # summed in this order: timeless, tierless plans as before
    compact = np.where(mask, unbounded, np.inf)
    return LookAhead(
        keep_usd=float(keep), compact_usd=compact, action_usd=action, horizon_calls=horizon, expected_calls=expected_calls,
        next_compaction_calls=_first_compaction(compact_at, blocks, grid, x0, g, far), cold_chance=p, cold_now=cold_now,
        resume_usd=resume, resume_cold_cut=cold_cut, resume_warm_cut=warm_cut, unbounded_usd=unbounded,
        clear_usd=np.asarray(clear_values, dtype=np.float64), resume_cold_clear=cold_clear, resume_warm_clear=warm_clear,
    )


def _sendable_tiers(prices: Prices, largest: float) -> Prices:
    """``prices`` without the tiers no request pays: those starting at or above ``largest``, the largest
    prompt sent (the window; a tier applies to a prompt above its start, DESIGN §8), so that a model
    whose tier lies beyond its window is planned as the model without tiers it is."""
    if not prices.tiers or prices.tiers[-1].start_tokens < largest:  # ascending: every tier is sent
        return prices
    return replace(prices, tiers=tuple(t for t in prices.tiers if t.start_tokens < largest))


def _branch(keep: float, compacts: Floats, clears: Floats) -> tuple[float, int | None, int | None]:
    """The best of keeping, compacting at a cut and clearing at a depth once the state of the cache
    is known (deciding on resume): its value, the cut's index (None unless compacting) and the
    depth's (None unless clearing). Ties go to keeping, then to compacting."""
    cut, depth = _best_below(compacts, keep), None
    best = keep if cut is None else float(compacts[cut])
    depth = _best_below(clears, best)
    if depth is not None:
        return float(clears[depth]), None, depth
    return best, cut, None


def _grid(top: float, v: float, g: float, calls: int, prices: Prices, starts: Floats,
          shares: Sequence[float] = FUTURE_TAIL_SHARES, whole_requests: bool = False) -> Floats:
    """The context sizes of the value grid: :data:`GRID_POINTS` evenly from 0 to ``top``; with price
    tiers :data:`GRID_POINTS_TIERED`, and the sizes either side of where keeping reaches each
    cliff within ``calls`` calls (``threshold − V − k·g`` and one token more) and where a future
    summary request from there to a share of :data:`FUTURE_TAIL_SHARES` does, so that
    interpolation does not smear a cliff over a grid cell; and the present's paths (``starts``:
    the context now and after compacting at some of its cuts, then ``k·g`` more each call).
    Without tiers, :data:`GRID_POINTS` evenly spaced sizes only. ``shares``, ``whole_requests``: as
    :func:`look_ahead`'s ``future_tail_shares`` and ``whole_requests``."""
    if not prices.tiers:
        return _evenly(top, GRID_POINTS)
    grid = _evenly(top, GRID_POINTS_TIERED)
    steps = g * np.arange(max(calls, 1), dtype=np.float64)
    keep_at = np.array([start - v - steps for start in prices.tier_starts]).ravel()
    # a future summary request from x to a share of x has the prompt V + (1 − share)·x
    kept = np.ones((1, 1)) if whole_requests else 1.0 - np.array(shares)[:, None]
    request_at = (keep_at[None, :] / kept).ravel()
    paths = (starts[:, None] + g * np.arange(1, max(calls, 1) + 1)[None, :]).ravel()  # the present's keep paths, after each action
    at = np.concatenate((keep_at, request_at))
    sizes = np.concatenate((at, at + 1.0, paths))  # both sides of each cliff; the paths' own sizes
    return _unique(np.concatenate((grid, sizes[(sizes > 0) & (sizes < top)])))


@lru_cache(maxsize=16)
def _evenly(top: float, points: int) -> Floats:
    """``np.linspace(0, top, points)``, read-only, made once per size of the window (the same every call of a session)."""
    grid = np.linspace(0.0, top, points)
    grid.setflags(write=False)
    return grid


def _unique(values: Floats) -> Floats:
    """Sorted distinct values, as ``np.unique`` gives them without the import of ``numpy.ma`` it makes
    (10-15 ms a process, which the status line pays on every call)."""
    ordered = np.sort(np.asarray(values, dtype=np.float64).ravel())
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if ordered.size else ordered


def _best_below(values: Floats, bound: float) -> int | None:
    """Index of the smallest of ``values`` (ties: the first) when it is below ``bound``, else None."""
    if values.size == 0 or not np.isfinite(values).any():
        return None
    best = int(np.argmin(values))
    return best if values[best] < bound else None


def _output_extra(prices: Prices, rates: object, output_tokens: float) -> Floats | float:
    """What a tier adds to a call's output, $ (0 without tiers: output is the same under every schedule)."""
    if not prices.tiers or output_tokens <= 0:
        return 0.0
    return (rates.p_out - prices.p_out) * output_tokens / 1e6  # type: ignore[attr-defined]


def _at(grid: Floats, values: Floats, x: Floats | float) -> Floats:
    """Values at contexts ``x`` (linear between grid points); inf beyond the grid."""
    inside = np.asarray(x) <= grid[-1]
    return np.where(inside, np.interp(x, grid, values), np.inf)


class _Blocks(tuple):  # type: ignore[type-arg]
    """``(first call, calls)`` pairs of :func:`_blocks`, with the same as read-only int64 columns
    (``firsts``, ``sizes``, shape (n_blocks,)), made once."""

    firsts: npt.NDArray[np.int64]
    sizes: npt.NDArray[np.int64]


def _block_size(n: int, most: int, divisor: int) -> int:
    """Calls of the time step starting at call ``n``: about ``n / divisor`` (:data:`BLOCK_DIVISOR`), at least 1, at most ``most``."""
    return min(max(1, n // divisor), most)


@lru_cache(maxsize=4)
def _uncapped_blocks(divisor: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """First calls and sizes of the blocks of :func:`_blocks` with no cap on their size, until one
    ends at or past :data:`MAX_HORIZON_CALLS`."""
    firsts, sizes, n = [], [], 1
    while n < MAX_HORIZON_CALLS:
        b = _block_size(n, MAX_HORIZON_CALLS, divisor)
        firsts.append(n)
        sizes.append(b)
        n += b
    return np.array(firsts, dtype=np.int64), np.array(sizes, dtype=np.int64)


def _blocks(horizon: int, most: int, least: int = 1) -> _Blocks:
    """``(first call, calls)`` of the time steps after call 0: single calls first, then blocks of
    about ``n / BLOCK_DIVISOR`` calls, at most ``most``, from call :data:`BLOCK_DIVISOR` on at least
    ``least`` (as far as ``most`` allows: :data:`CYCLE_LEAST_BLOCK_SHARE`), the last one ending at
    ``horizon`` (decisions far ahead are made at coarser times)."""
    least = min(least, most)
    if least > 1:
        return _floored_blocks(horizon, most, least, BLOCK_DIVISOR)
    return _divided_blocks(horizon, most, BLOCK_DIVISOR)


@lru_cache(maxsize=64)
def _divided_blocks(horizon: int, most: int, divisor: int) -> _Blocks:
    """:func:`_blocks` with blocks of about ``n / divisor`` calls. The sizes grow with n, so the
    capped sequence is the uncapped one (:func:`_uncapped_blocks`, made once) up to its first block
    of ``most`` calls or more, and steps of ``most`` calls from there."""
    firsts, sizes = _uncapped_blocks(divisor)
    capped = int(np.searchsorted(sizes, most, side="left"))  # sizes ascend: the blocks before are smaller than most
    out_firsts, out_sizes = firsts[:capped].tolist(), sizes[:capped].tolist()
    n = out_firsts[-1] + out_sizes[-1] if capped else 1
    if capped == firsts.size and n < horizon:  # past the uncapped blocks (a horizon beyond MAX_HORIZON_CALLS)
        while n < horizon and (b := _block_size(n, most, divisor)) < most:
            out_firsts.append(n)
            out_sizes.append(b)
            n += b
    return _ending_at(out_firsts, out_sizes, n, horizon, most)


@lru_cache(maxsize=64)
def _floored_blocks(horizon: int, most: int, least: int, divisor: int) -> _Blocks:
    """:func:`_blocks` with blocks of at least ``least`` calls from call ``divisor`` on (``1 < least ≤ most``):
    single calls before it, steps of ``least`` calls until ``n / divisor`` reaches ``least``, then about
    ``n / divisor`` calls until ``most``, and steps of ``most`` calls from there."""
    out_firsts, out_sizes = list(range(1, min(divisor, horizon))), [1] * max(min(divisor, horizon) - 1, 0)
    n = divisor
    if n < horizon:  # steps of least calls while n / divisor is below least
        steps = np.arange(n, min(divisor * least, horizon), least, dtype=np.int64).tolist()
        out_firsts.extend(steps)
        out_sizes.extend([least] * len(steps))
        n += least * len(steps)
    while n < horizon and (b := _block_size(n, most, divisor)) < most:
        out_firsts.append(n)
        out_sizes.append(b)
        n += b
    return _ending_at(out_firsts, out_sizes, n, horizon, most)


def _ending_at(out_firsts: list[int], out_sizes: list[int], n: int, horizon: int, most: int) -> _Blocks:
    """The blocks ``out_firsts``/``out_sizes`` (ending at call ``n``), then steps of ``most`` calls until
    ``horizon``, the blocks starting before it, the last one cut short to end there."""
    if n < horizon:  # steps of most calls
        steps = np.arange(n, horizon, most, dtype=np.int64).tolist()
        out_firsts.extend(steps)
        out_sizes.extend([most] * len(steps))
    kept = int(np.searchsorted(out_firsts, horizon, side="left"))  # the blocks starting before the horizon
    blocks = list(zip(out_firsts[:kept], out_sizes[:kept], strict=True))
    if blocks and (last := blocks[-1])[0] + last[1] > horizon:  # the last one cut short to end there
        blocks[-1] = (last[0], horizon - last[0])
    out = _Blocks(blocks)
    out.firsts, out.sizes = _block_columns(blocks)
    return out


def _block_columns(blocks: Sequence[tuple[int, int]]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The first calls and the sizes (calls) of ``blocks`` (:func:`_blocks`) as read-only int64 arrays, shape (n_blocks,)."""
    if isinstance(blocks, _Blocks):
        return blocks.firsts, blocks.sizes
    firsts = np.array([n for n, _ in blocks], dtype=np.int64)
    sizes = np.array([b for _, b in blocks], dtype=np.int64)
    firsts.setflags(write=False)
    sizes.setflags(write=False)
    return firsts, sizes


def _block_weights(alive: Floats, blocks: Sequence[tuple[int, int]]) -> tuple[Floats, ...]:
    """Per block, given its first call: Σ w_i, Σ i·w_i, Σ_{i≥1} w_i, Σ_{i≥1} (i − 1)·w_i, and the chance of the next block."""
    starts, sizes = _block_columns(blocks)
    ends = starts + sizes
    k = np.arange(alive.size, dtype=np.float64)
    s0 = np.concatenate(([0.0], np.cumsum(alive)))
    s1 = np.concatenate(([0.0], np.cumsum(k * alive)))
    first = alive[starts]
    reached = first > 0  # a block the session never reaches costs nothing

    def per_first(values: Floats) -> Floats:
        return np.divide(values, first, out=np.zeros_like(values), where=reached)

    total = per_first(s0[ends] - s0[starts])
    ramp = per_first((s1[ends] - s1[starts]) - starts * (s0[ends] - s0[starts]))
    rest = np.where(reached, total - 1.0, 0.0)
    ramp_after = ramp - rest  # Σ_{i≥1} (i − 1)·w_i = Σ i·w_i − Σ_{i≥1} w_i
    return total, ramp, rest, ramp_after, per_first(alive[ends])


def _values(
    grid: Floats, alive: Floats, blocks: Sequence[tuple[int, int]], g: float, v: float, s: float, prices: Prices,
    forecast: Forecast, limit: float, x0_tails: Floats, tail_shares: Sequence[float] = FUTURE_TAIL_SHARES,
    whole_requests: bool = False, compact_from: float = 0.0, later_grids: Sequence[tuple[Floats, int]] = (),
    costs: Sequence[tuple[Floats, ...]] | None = None,
) -> tuple[Floats, npt.NDArray[np.bool_], tuple[tuple[Floats, npt.NDArray[np.bool_]], ...]]:
    """W_1 on ``grid`` by backward induction over the blocks, and per block where compacting is best
    (``tail_shares``, ``whole_requests``, ``compact_from``: :func:`look_ahead`'s ``future_tail_shares``,
    ``whole_requests`` and ``compact_from_tokens``).

    ``later_grids`` (:func:`_far_grid`): ``(grid, first call)`` pairs, by first call: the blocks that
    start at or after a pair's call (and before the next pair's) are valued on its grid, the nearer
    blocks on ``grid``, each stage from the values of the one after it.
    ``costs``: :func:`_call_costs` on ``grid`` and on each later grid, in that order (:func:`_costs_on`),
    when the caller has them; computed here otherwise.
    Returns ``(value, compact_at, later)``: ``compact_at`` (bool, shape (blocks valued on ``grid``, grid
    size)), and ``later`` = ``(grid, its compact_at)`` per later stage that holds blocks.
    """
    totals, ramps, rests, ramps_after, going_ons = _block_weights(alive, blocks)
    firsts, block_sizes = _block_columns(blocks)
    # Each block's values are kept multiplied by the chance q of reaching its first call (U = q·W):
    # U_b = min over actions of (q_b · the block's own costs + U_{b+1} interpolated), which spares the
    # multiplication of every value ahead by the chance of going on. The blocks the session never
    # reaches (a known length) come after the last one it reaches and are not visited.
    reach = alive[firsts] if firsts.size else np.zeros(0)
    reached = int(np.count_nonzero(reach > 0))  # alive is non-increasing: the reached blocks come first
    sizes = block_sizes.astype(np.float64)
    moves, last_moves = sizes * g, (sizes - 1.0) * g  # growth over each block, and before its last call, tokens
    keep_weights, ramp_weights = totals * reach, ramps * reach
    rest_weights, ramp_after_weights = rests * reach, ramps_after * reach
    rights = [np.inf if going_on > 0 else None for going_on in going_ons.tolist()]  # beyond the grid: inf while the session may go on
    least = _least_tail(x0_tails, g)

    def induct(points: Floats, point_costs: tuple[Floats, ...], lo_block: int, hi_block: int, value: Floats,
               xp: Floats) -> tuple[Floats, npt.NDArray[np.bool_]]:
        """Blocks lo_block..hi_block-1, backwards, valued on ``points`` (times the chance of reaching
        each; ``point_costs``: :func:`_call_costs` there), from ``value`` on ``xp`` after the last."""
        tails, first, after, keep_call, growth_read, growth_read_after = point_costs
        width, rows = points.size, tails.shape[0] + 1
        starts = np.concatenate((points, (s + tails).ravel()))  # the contexts a block starts from: kept, then compacted per share
        compact_at = np.zeros((hi_block - lo_block, width), dtype=bool)
        # keeping is not allowed once a call of the block passes the limit: from the first such size on (the sizes ascend)
        allowed = width - np.count_nonzero(v + points + last_moves[lo_block:hi_block, None] > limit, axis=1)
        sizes_at = np.arange(width)
        visit = min(hi_block, max(reached, lo_block))
        if visit < hi_block:  # never reached: compacting is "best" only where keeping is not allowed (as with weights 0)
            compact_at[visit - lo_block:] = (sizes_at >= allowed[visit - lo_block:, None]) & np.isfinite(first.min(axis=0))
            value, xp = np.zeros_like(points), points
        chunk = max(1, VALUES_CHUNK_SIZES // (rows * width))
        for stop in range(visit, lo_block, -chunk):
            lo = max(stop - chunk, lo_block)
            costs = np.empty((stop - lo, rows, width))  # each block's own calls: keeping (row 0), compacting to each share
            costs[:, 0] = keep_weights[lo:stop, None] * keep_call + ramp_weights[lo:stop, None] * np.asarray(growth_read)
            costs[:, 1:] = (reach[lo:stop, None, None] * first + rest_weights[lo:stop, None, None] * after) \
                + ramp_after_weights[lo:stop, None, None] * np.asarray(growth_read_after)
            costs[:, 0][sizes_at >= allowed[lo - lo_block:stop - lo_block, None]] = np.inf
            targets = starts + moves[lo:stop, None]
            values = np.empty((stop - lo, width))
            flat = costs.reshape(stop - lo, rows * width)  # the same costs, one row of rows x width per block
            for total, block_costs, target, out, right in zip(flat[::-1], costs[::-1], targets[::-1], values[::-1],
                                                              rights[lo:stop][::-1], strict=True):  # the blocks backwards
                total += _interp(target, xp, value, None, right)
                value = np.minimum.reduce(block_costs, axis=0, out=out)  # the best of keeping and of compacting to each share
                xp = points
            np.less(values, costs[:, 0], out=compact_at[lo - lo_block:stop - lo_block])  # compacting is best where it is below keeping
        return value, compact_at

    def per_chance(value: Floats) -> Floats:  # W_1 from U_1
        return value / reach[0] if reached else np.zeros_like(value)

    if not len(blocks):  # the session ends now: nothing ahead
        return np.zeros_like(grid), np.zeros((0, grid.size), dtype=bool), ()
    grids = [grid] + [points for points, _ in later_grids]
    if costs is None:
        costs = _costs_on(grids, g, v, s, prices, forecast, least, tail_shares, whole_requests, compact_from)
    bounds = [0] + [int(np.searchsorted(firsts, start)) for _, start in later_grids] + [len(blocks)]
    value, xp, stages = np.zeros_like(grids[-1]), grids[-1], []
    for points, point_costs, lo, hi in reversed(list(zip(grids, costs, bounds[:-1], bounds[1:], strict=True))):
        if hi == lo:  # a later stage without blocks passes the values on (the first holds call 1's block)
            continue
        value, at = induct(points, point_costs, lo, hi, value, xp)
        xp = points
        stages.append((points, at))
    stages.reverse()
    return per_chance(value), stages[0][1], tuple(stages[1:])


def _least_tail(x0_tails: Floats, g: float) -> float:
    """The least tail a future compaction keeps, tokens: the present's smallest (one API round, or
    ``DP_MIN_VERBATIM_TOKENS``), else one call's growth; at least 1."""
    return max(float(np.min(x0_tails)) if x0_tails.size else g, 1.0)


def _call_costs(points: Floats, g: float, v: float, s: float, prices: Prices, forecast: Forecast, least: float,
                tail_shares: Sequence[float] = FUTURE_TAIL_SHARES, whole_requests: bool = False,
                compact_from: float = 0.0) -> tuple[Floats, ...]:
    """What one future call costs at each context of ``points`` (tokens beyond V), $: ``(tails, first, after,
    keep_call, growth_read, growth_read_after)``. ``tails`` (shape (1 + shares, n)): the tail a compaction
    keeps (``least``, then each share of :data:`FUTURE_TAIL_SHARES`, at least ``least``, at most the
    context); ``first``: the compacting call (its request, the loss, the call after it, shape of
    ``tails``); ``after``: each later call of a block after it, before its growth is read; ``keep_call``
    (shape (n,)): a call that keeps; ``growth_read``, ``growth_read_after``: what reading one call's
    growth from the cache adds per call of a block (module docstring: tiers, cold share)."""
    shares = np.array(tail_shares, dtype=np.float64)[:, None]
    out, rho = forecast.output_tokens, forecast.cold_share
    tails = np.minimum(np.maximum(np.vstack((np.zeros((1, points.size)), shares * points[None, :])), least), points[None, :])
    lost = forecast.tail_loss(points)[None, :] - forecast.tail_loss(tails)
    # the prompt of a future request, V included: the whole context, or the head (V + x − t, summed in this order)
    request = np.broadcast_to(v + points, tails.shape) if whole_requests else v + points - tails
    rk, rr, rf = rates_at(prices, v + points), rates_at(prices, request), rates_at(prices, v + s + tails)  # each request at its tier
    first = (compaction_request_cost(request, 0.0, s, rr) / 1e6 + lost
             + (rf.p_cache * v + rf.p_write * (s + tails)) / 1e6 + _output_extra(prices, rf, out))  # the compacting call itself
    after = (rf.p_cache * (v + s + tails) + rf.p_write * g) / 1e6 + _output_extra(prices, rf, out)  # each later call of the block, before its growth is read
    keep_call = (rk.p_cache * (v - g + points) + rk.p_write * g) / 1e6 + _output_extra(prices, rk, out)
    growth_read, growth_read_after = rk.p_cache * g / 1e6, rf.p_cache * g / 1e6
    if rho > 0:  # a later call finds the cache cold with this chance: it writes its whole prompt
        first = first + rho * (compaction_request_cost(0.0, request, s, rr) - compaction_request_cost(request, 0.0, s, rr)) / 1e6
        after = (1 - rho) * after + rho * (rf.p_write * (v + s + tails + g) / 1e6 + _output_extra(prices, rf, out))
        keep_call = (1 - rho) * keep_call + rho * (rk.p_write * (v + points) / 1e6 + _output_extra(prices, rk, out))
        growth_read = ((1 - rho) * rk.p_cache + rho * rk.p_write) * g / 1e6
        growth_read_after = ((1 - rho) * rf.p_cache + rho * rf.p_write) * g / 1e6
    if compact_from > 0:  # no compaction of a prompt below the provider's least trigger
        first = np.where(v + points[None, :] < compact_from, np.inf, first)
    return tails, first, after, keep_call, growth_read, growth_read_after


def _costs_on(grids: Sequence[Floats], g: float, v: float, s: float, prices: Prices, forecast: Forecast, least: float,
              tail_shares: Sequence[float] = FUTURE_TAIL_SHARES, whole_requests: bool = False,
              compact_from: float = 0.0) -> list[tuple[Floats, ...]]:
    """:func:`_call_costs` on each of ``grids`` (tokens beyond V), from one call on all of their sizes:
    every cost is computed size by size, so each grid's are the ones a call on it alone gives, for
    the price of one call's numpy operations."""
    if len(grids) == 1:
        return [_call_costs(grids[0], g, v, s, prices, forecast, least, tail_shares, whole_requests, compact_from)]
    whole = _call_costs(np.concatenate(grids), g, v, s, prices, forecast, least, tail_shares, whole_requests, compact_from)
    out, lo = [], 0
    for points in grids:
        hi = lo + points.size
        out.append(tuple(cost[..., lo:hi] if isinstance(cost, np.ndarray) else cost for cost in whole))
        lo = hi
    return out


def _cheapest_cycle(top: float, g: float, v: float, s: float, prices: Prices, forecast: Forecast, least: float, limit: float,
                    tail_shares: Sequence[float] = FUTURE_TAIL_SHARES, whole_requests: bool = False,
                    compact_from: float = 0.0, costs: tuple[Floats, ...] | None = None) -> tuple[float, float]:
    """The cheapest repeating schedule: its cost per call, $, and its cycle, calls. It compacts at a context X
    to one of the future tails t (:func:`_call_costs`), keeps the ``(X − S − t) / g − 1`` calls the context
    takes to grow back to X, compacts again; X on :data:`GRID_POINTS` sizes from 0 to ``top`` whose call
    before was allowed to keep (``V + X − g ≤ limit``). The kept calls are summed as the integral of the
    keep cost along the way (trapezoids on the sizes). The price of the calls past the horizon
    (:data:`HORIZON_FILLS`) and the bound on the blocks (:data:`CYCLE_BLOCK_SHARE`); ``(inf, inf)`` when no
    such schedule exists. ``costs``: :func:`_call_costs` on those sizes, when the caller has them."""
    points = _evenly(top, GRID_POINTS)
    if costs is None:
        costs = _call_costs(points, g, v, s, prices, forecast, least, tail_shares, whole_requests, compact_from)
    tails, first, _, keep_call, _, _ = costs
    integral = np.concatenate(([0.0], np.cumsum((keep_call[1:] + keep_call[:-1]) * np.diff(points) / 2.0)))
    calls = (points[None, :] - s - tails) / g  # calls of one cycle: the compacting one and the kept ones
    kept = (integral[None, :] - np.interp(s + tails, points, integral)) / g - keep_call[None, :]  # the kept calls, X's own excluded
    per_call = np.where((calls >= 1.0) & (v + points[None, :] - g <= limit), (first + np.maximum(kept, 0.0)) / np.maximum(calls, 1.0), np.inf)
    best = int(np.argmin(per_call))  # flat index: ties go to the first tail, then the smallest X
    cost = float(per_call.flat[best])
    return (cost, float(calls.flat[best])) if np.isfinite(cost) else (float("inf"), float("inf"))


def _far_grid(top: float, v: float, s: float, prices: Prices, shares: Sequence[float] = FUTURE_TAIL_SHARES,
              whole_requests: bool = False, compact_from: float = 0.0, points: int = GRID_POINTS_TIERED) -> Floats:
    """The value grid of the later blocks (from call :data:`CLIFF_CALLS` on with price tiers, from
    :data:`FAR_CALLS` without): ``points`` evenly spaced sizes (:data:`GRID_POINTS_TIERED`, or
    :data:`FAR_GRID_POINTS` without tiers) and both sides of each size where a call made there passes a
    tier's start (kept: ``V + x``; a summary request keeping a share: ``V + (1 − share)·x``, or ``V + x``
    whole; the call after it: ``V + S + share·x``) or reaches ``compact_from`` (tokens, V included). The
    present's paths and the cliffs several calls away (:func:`_grid`) only matter to the nearer blocks."""
    grid = _evenly(top, points)
    edges = []
    for start in prices.tier_starts:
        x = float(start) - v
        edges.append(x)
        edges.extend([x] if whole_requests else [x / (1.0 - share) for share in shares if share < 1.0])
        edges.extend((x - s) / share for share in shares if share > 0.0)
    if compact_from > v:
        edges.append(float(compact_from) - v - 1.0)
    at = np.asarray(edges, dtype=np.float64)
    cliffs = np.concatenate((at, at + 1.0))
    return _unique(np.concatenate((grid, cliffs[(cliffs > 0) & (cliffs < top)])))


def _first_compaction(
    compact_at: npt.NDArray[np.bool_], blocks: Sequence[tuple[int, int]], grid: Floats, x0: float, g: float,
    later: Sequence[tuple[Floats, npt.NDArray[np.bool_]]] = (),
) -> float | None:
    """The first call at which the best schedule compacts after keeping now (the context grows by g a call);
    ``compact_at`` and ``later`` as :func:`_values` returns them."""
    if not blocks:
        return None
    firsts = _block_columns(blocks)[0].astype(np.float64)
    done = 0
    for points, at_points in [(grid, compact_at), *later]:
        rows = at_points.shape[0]
        calls = firsts[done:done + rows]
        contexts = x0 + g * calls
        at = np.minimum(np.searchsorted(points, contexts), points.size - 1)
        found = np.flatnonzero((contexts > points[-1]) | at_points[np.arange(rows), at])
        if found.size:
            return float(calls[found[0]])
        done += rows
    return None
