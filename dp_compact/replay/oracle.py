"""The hindsight-optimal compaction schedule of a recording (DESIGN §6, §8, ``--policy oracle``).

The oracle knows the whole recording and chooses, before each call, one action so that the
replay's total (:mod:`dp_compact.replay.meter`) is the least possible. Its action set:

- keep the conversation;
- compact it at any feasible cut (DESIGN §1; the tail keeps at least one message) whose prompt
  fits the window;
- clear old tool results (DESIGN §9, :class:`~dp_compact.replay.context.Clearing`) to any depth
  just after a clearable message (the only depths that differ) that the previous call has read
  (the meter's cap: no result is cleared before the model has seen it), deeper than the last clearing,
  whose prompt fits the window, while the conversation was never summarized and nothing was
  fetched again since the last clearing; a compaction after clearing cuts at or after the
  clearing depth (every cleared result goes into the summary).

The conditions on clearing keep the state small and exact: a refetch of a cleared result
depends on when it was cleared, and with them every cleared result counts as cleared at the last
clearing, so the state is (clearing depth, uses since then). Without them the state would need the
clearing time of every cleared result. Every clear policy of the replay with one clearing and no
summary (``clear:F[:K]`` firing once) lies in the set; on the 16 shared sessions the oracle is at
most every policy under both detectors (tests/test_oracle_clear.py). It minimizes exactly what the
meter charges every policy, from the same cache state:

- the cache before the first call holds ``ReplayParams.warm_tokens`` of V; after more than
  ``ReplayParams.cache_ttl_s`` seconds of silence since the previous call it is empty;
- every request (a call, a compaction request, a refetch call) is priced at
  ``prices.on(<UTC day of the call>).at(<its prompt tokens>)``: the prices in force that day, at
  the whole-request tier of its own prompt (DESIGN §8; a compaction request's prompt is ``V + H``
  and its instruction); prompt tokens are written at ``p_write`` (the session's mix of write
  lifetimes), and a request reads ``ReplayParams.cache_hit_share`` of its cached prefix;
- a compaction writes a summary of S tokens (``ReplayParams.s_tokens``); it pins nothing;
- a clearing makes no request; the prompt loses the cleared results less their placeholders
  (``Recording.cleared_prefix``), and the cache keeps V and the prompt before the first message
  it changes; a later use of a cleared result is a refetch, as for a dropped message;
- lost information (``loss="refetch"``): the refetch calls, the refetched tokens and their
  carrying until the next compaction.

It never sends a prompt above the window. Where no schedule avoids it (a message larger than
the window allows), it pays what the meter charges for an overflow: the rejected request is
free, then a forced summary-only compaction (the whole live conversation summarized, a
compaction request) before the call (:meth:`dp_compact.replay.planned.Oracle.on_overflow`).
It first minimizes the number of such overflows, then the dollars: each overflow adds a penalty
larger than any schedule's total, so one backward pass does both.

Backward dynamic programming over the state before call ``j``:

- ``s``, the first live message (0 = never compacted; otherwise a summary block of S tokens
  stands before ``[s, p_j)``, so "summary block present" is ``s > 0``; ``s = p_j`` after a
  forced summary-only compaction);
- with the lost-information charge, ``k``: which recorded uses came after the last compaction.
  Refetched messages stay in the context until the next compaction, so the carried tokens
  depend on when it happened; only the calls with uses matter (``Q``, sorted), so ``k`` is the
  number of them before the last compaction.

Every cost of a call is a function of the state. A compaction from ``s`` to ``i`` costs a part
of ``s`` plus a part of ``i`` at the prices of its request's tier (the request reads the cached
prefix, whose end is fixed by the previous call, not by the cut), and its prompt ``V + H`` grows
with ``i``, so for each state the cuts of one tier form one band of consecutive cuts: the best
cut per state and tier is a range minimum (a suffix minimum without tiers), O(N log N) numpy
work per call and tier, no loop over cuts. The cut rule's only state-dependent case (a tool call
before ``s`` no longer binds its result) is handled cut by cut for the few cuts it concerns.
Only the states a call can reach are kept (``s <= p_j``, ``k`` up to the uses before call ``j``).

The cleared states (never summarized) are ``(c, k)``: ``c`` clearable messages cleared (the depth
just after the last of them), ``k`` the calls with uses before the last clearing; a message is
missing when it is cleared. Their call costs, loss and compactions are those above with the
prompt ``V + prefix[p] - cleared[c]``; a compaction from ``c`` is a band minimum over the cuts at
or after its depth. A clearing from ``c`` (or from the never-summarized state ``s = 0``) to ``d``
costs the call of state ``(d, k_j)`` reading only the cache it keeps, so per tier of the new
prompt it is a part of ``c`` plus a part of ``d``: a suffix minimum over ``d``. The cleared states
add O(C · (N + uses)) work per call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from dp_compact.core.benefit import L_INSTR_TOKENS
from dp_compact.core.cuts import ROLE_TOOL
from dp_compact.pricing import Prices
from dp_compact.replay.context import Clearing, Compaction
from dp_compact.replay.recording import REFETCH_OUTPUT_TOKENS, Recording, ReplayParams

__all__ = ["OracleSchedule", "call_days", "oracle_schedule", "request_prices"]

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class OracleSchedule:
    """The hindsight optimum of one recording.

    Attributes
    ----------
    total_usd : float
        Its total cost, $ (the meter's total when the schedule is replayed).
    schedule : tuple[tuple[int, int], ...]
        ``(call, cut)`` of each compaction, calls increasing: before call ``call`` the live head
        is summarized and the tail starts at history message ``cut``. A forced summary-only
        compaction (an overflow) has ``cut`` = the call's position (an empty tail).
    overflows : int
        Calls whose prompt no schedule keeps within the window (a message larger than it allows):
        each a rejected request and a forced summary-only compaction. 0 for almost every session.
    clearings : tuple[tuple[int, int], ...]
        ``(call, depth)`` of each clearing of old tool results, calls increasing: before call
        ``call`` the long tool results of the messages before ``depth`` are cleared
        (:class:`~dp_compact.replay.context.Clearing`); ``depth`` is just after a clearable message.
    """

    total_usd: float
    schedule: tuple[tuple[int, int], ...]
    overflows: int = 0
    clearings: tuple[tuple[int, int], ...] = ()

    @property
    def feasible(self) -> bool:
        """True when every prompt of the schedule fits the window (no overflow)."""
        return self.overflows == 0

    def actions(self, s_tokens: int) -> tuple[tuple[int, Compaction | Clearing], ...]:
        """``(call, action)`` of each step, calls increasing: a :class:`Compaction` to its cut with a summary of
        ``s_tokens`` (a forced one: cut = the call's position) or a :class:`Clearing` to its depth."""
        steps = [(call, Compaction(cut=cut, carry_tokens=s_tokens)) for call, cut in self.schedule]
        steps += [(call, Clearing(depth)) for call, depth in self.clearings]
        return tuple(sorted(steps, key=lambda step: step[0]))


def call_days(rec: Recording) -> list[str]:
    """UTC ISO day of each call (``""`` where its time is unknown: the session's own prices apply)."""
    return ["" if math.isnan(t) else datetime.fromtimestamp(t, UTC).date().isoformat() for t in rec.call_times.tolist()]


def request_prices(prices: Prices, day: str, prompt_tokens: float) -> Prices:
    """The prices of one request (DESIGN §8): those in force on ``day`` (UTC ISO date; ``""``:
    ``prices`` as given) at the whole-request tier of its ``prompt_tokens``."""
    return (prices.on(day) if day else prices).at(prompt_tokens)


@dataclass(frozen=True, slots=True)
class _Table:
    """One day's prices per tier: ``rows[t] = (p_input, p_cache, p_write, p_out)`` of tier row ``t``
    (0 = base, ``t`` = a prompt above ``starts[t - 1]``), $/MTok."""

    starts: Floats
    rows: Floats

    @classmethod
    def of(cls, prices: Prices) -> _Table:
        tiers = [prices] + [prices.at(start + 1) for start in prices.tier_starts]
        rows = np.array([[p.p_input, p.p_cache, p.p_write, p.p_out] for p in tiers], dtype=np.float64)
        return cls(np.array(prices.tier_starts, dtype=np.float64), rows)

    def at(self, prompts: Floats) -> tuple[Floats, Floats, Floats, Floats]:
        """(p_input, p_cache, p_write, p_out) of requests of ``prompts`` tokens, each shaped like ``prompts``."""
        if self.starts.size == 0:
            return tuple(np.full(prompts.shape, price) for price in self.rows[0])  # type: ignore[return-value]
        picked = self.rows[np.searchsorted(self.starts, prompts, side="left")]
        return picked[..., 0], picked[..., 1], picked[..., 2], picked[..., 3]


def _tables(rec: Recording, params: ReplayParams) -> list[_Table]:
    """Per call, the price table of its day (one table per distinct day)."""
    by_day: dict[str, _Table] = {}
    return [by_day.setdefault(day, _Table.of(params.prices.on(day) if day else params.prices)) for day in call_days(rec)]


def _expired(rec: Recording, params: ReplayParams) -> npt.NDArray[np.bool_]:
    """Whether the cache is empty before each call: more than the TTL since the previous call
    (the meter's rule; an unknown time never expires it, and the first call finds the warm cache)."""
    expired = np.zeros(rec.n_calls, dtype=bool)
    if params.cache_ttl_s is not None and rec.n_calls > 1:
        gaps = np.diff(rec.call_times)
        expired[1:] = np.nan_to_num(gaps, nan=-np.inf) > params.cache_ttl_s
    return expired


def _blockers(rec: Recording) -> list[Ints]:
    """Per call, ``lo[i]``: the latest tool call before cut ``i`` whose result is in ``[i, p_j)`` (−1: none).

    Cut ``i`` is feasible from a tail starting at ``s`` only when ``lo[i] < s``
    (:func:`dp_compact.replay.meter.tail_cut_mask`). Shape (N + 1,) each; computed incrementally.
    """
    calls = rec.arrays.call_index
    results = np.flatnonzero(calls >= 0)
    lo = np.full(rec.arrays.n + 1, -1, dtype=np.int64)
    out, added = [], 0
    for position in rec.call_positions.tolist():
        while added < results.size and results[added] < position:
            r, c = int(results[added]), int(calls[results[added]])
            np.maximum(lo[c + 1:r + 1], c, out=lo[c + 1:r + 1])
            added += 1
        out.append(lo.copy())
    return out


def _rectangles(rows: int, cols: int, corners: list[tuple[int, int, int, float]]) -> Floats:
    """Sum of weights over rectangles ``s > m, lo < k <= hi`` (``corners``: m, lo, hi, weight); shape (rows, cols)."""
    grid = np.zeros((rows + 1, cols + 1))
    for m, lo, hi, weight in corners:
        hi = min(hi, cols - 1)
        if m + 1 < rows and lo < hi:
            grid[m + 1, lo + 1] += weight
            grid[m + 1, hi + 1] -= weight
    return np.cumsum(np.cumsum(grid, axis=0), axis=1)[:rows, :cols]


def _penalty(rec: Recording, params: ReplayParams, tables: list[_Table]) -> float:
    """A power of two above any schedule's total ($·1e6): the price of one overflow in the pass."""
    top = max([float(t.rows.max()) for t in tables] + [0.0])
    tokens = (params.v_tokens + params.s_tokens + float(rec.prefix_tokens[-1]) + L_INSTR_TOKENS + REFETCH_OUTPUT_TOKENS
              + float(rec.output_tokens.max(initial=0)))
    bound = 8.0 * (rec.n_calls + rec.use_calls.size + 1) * tokens * top
    return 2.0 ** math.ceil(math.log2(max(bound, 1.0)))


def oracle_schedule(rec: Recording, params: ReplayParams) -> OracleSchedule:
    """The hindsight-optimal compaction schedule of ``rec`` under ``params`` (module docstring).

    Parameters
    ----------
    rec : Recording
        The recorded calls (positions, output tokens, times), message tokens, cut structure and uses.
    params : ReplayParams
        Prices ($/MTok; tiers, dated prices and write mix), window M, V, S and warm cache
        (tokens), cache TTL (s), loss mode.

    Returns
    -------
    OracleSchedule
        Its total ($), the ``(call, cut)`` of each compaction and the overflows no schedule avoids.

    Notes
    -----
    Assumes ``V + S`` fits the window (a forced summary-only compaction then always fits).
    """
    if rec.n_calls == 0:
        return OracleSchedule(total_usd=0.0, schedule=())
    return _Solver(rec, params).solve()


class _Solver:
    """The backward pass (:meth:`_call`, one call at a time) and the forward read-out."""

    def __init__(self, rec: Recording, params: ReplayParams) -> None:
        self.rec, self.params = rec, params
        self.v, self.s_tok = float(params.v_tokens), float(params.s_tokens)
        self.window = float(params.window)
        self.prefix = rec.prefix_tokens.astype(np.float64)
        self.outputs = rec.output_tokens.astype(np.float64)
        self.starts = np.append(rec.arrays.roles != ROLE_TOOL, False)
        self.tables = _tables(rec, params)
        self.expired, self.blockers = _expired(rec, params), _blockers(rec)
        self.penalty = _penalty(rec, params, self.tables)
        self.hit = float(getattr(params, "cache_hit_share", 1.0))  # the share of a cached prefix the provider serves
        self.charge = params.loss == "refetch" and rec.use_calls.size > 0
        self.use_calls = np.unique(rec.use_calls) if self.charge else np.zeros(0, np.int64)
        self.tokens = rec.message_tokens.astype(np.float64)
        # previous use (as an index into use_calls) of each use, and the latest use per message so far
        self.prev_use, last_use = np.full(rec.use_calls.size, -1, np.int64), {}
        for u, (m, q) in enumerate(zip(rec.use_messages.tolist(), rec.use_calls.tolist(), strict=True)):
            if self.charge:
                self.prev_use[u] = last_use.get(m, -1)
                last_use[m] = int(np.searchsorted(self.use_calls, q))
        self.bounds = np.searchsorted(rec.use_calls, np.arange(rec.n_calls + 1))
        # carried[s, k]: refetched tokens in the context at the current call (messages < s whose latest
        # use so far has index >= k); built for the last call, then peeled off call by call going back
        rows, cols = rec.arrays.n + 1, self.use_calls.size + 1
        self.carried = _rectangles(rows, cols, [(m, -1, q, self.tokens[m]) for m, q in last_use.items()])
        self.decisions: list[npt.NDArray[np.int32]] = [np.zeros(0, np.int32)] * rec.n_calls
        # clearing (never summarized): state c = how many clearable messages are cleared, depth[c] just after the last
        self.clearable = np.flatnonzero(rec.clearable_messages).astype(np.int64)
        self.clears = self.clearable.size > 0
        self.depth = np.concatenate(([0], self.clearable + 1))
        self.saved = rec.cleared_prefix.astype(np.float64)[self.depth]  # tokens cleared at each state c
        self.rank = {int(m): r for r, m in enumerate(self.clearable.tolist())}
        # tokens of V and the live prompt before the first message a clearing from state c changes (c < C)
        first = self.clearable
        self.kept = np.append(self.v + self.prefix[first] - rec.cleared_prefix.astype(np.float64)[first], 0.0)
        cleared_uses = [(self.rank[m], q) for m, q in last_use.items() if m in self.rank]
        rows_c = self.clearable.size + 1
        self.carried_c = _rectangles(rows_c, cols, [(r, -1, q, self.tokens[self.clearable[r]]) for r, q in cleared_uses])
        self.held_c = _rectangles(rows_c, cols, [(r, -1, q, 1.0) for r, q in cleared_uses])
        self.decisions_c: list[npt.NDArray[np.int32]] = [np.zeros(0, np.int32)] * rec.n_calls

    def solve(self) -> OracleSchedule:
        rec = self.rec
        last = rec.n_calls - 1
        later = np.zeros((int(rec.call_positions[last]) + 1, self._classes(last)))
        later_c = np.zeros((self.clearable.size + 1, self._classes(last)))
        for j in range(last, -1, -1):
            later, later_c = self._call(j, later, later_c)
        schedule, clearings, s, c, k, overflows = [], [], 0, 0, 0, 0
        for j in range(rec.n_calls):
            p = int(rec.call_positions[j])
            action = int(self.decisions_c[j][c, k] if c else self.decisions[j][s, k])
            if action <= -2:  # a clearing, to state -2 - action
                c, k = -2 - action, self._classes(j) - 1
                clearings.append((j, int(self.depth[c])))
                continue
            prompt = self.v + self.prefix[p] - self.saved[c] if c else self._prompt(s, p)
            if action < 0 and prompt <= self.window:
                continue
            overflows += action < 0
            s, c, k = (p if action < 0 else action), 0, self._classes(j) - 1
            schedule.append((j, s))
        total = float(later[0, 0]) - overflows * self.penalty
        return OracleSchedule(total_usd=total / 1e6, schedule=tuple(schedule), overflows=overflows,
                              clearings=tuple(clearings))

    def _classes(self, j: int) -> int:
        """Values of ``k`` reachable before call ``j``: 1 + the calls with uses before it."""
        return int(np.searchsorted(self.use_calls, j)) + 1

    def _prompt(self, s: int, p: int) -> float:
        return self.v + (self.s_tok if s > 0 else 0.0) + float(self.prefix[p] - self.prefix[s])

    def _call(self, j: int, later: Floats, later_c: Floats) -> tuple[Floats, Floats]:
        """The values before call ``j`` per reachable state, ``(s, k)`` and cleared ``(c, k)``, from those after it."""
        rec, v, s_tok = self.rec, self.v, self.s_tok
        p, cols = int(rec.call_positions[j]), self._classes(j)
        k_now, rows = cols - 1, p + 1
        later = later[:rows, :cols]
        prefix = self.prefix[:rows]
        base = v + np.where(np.arange(rows) > 0, s_tok, 0.0) - prefix  # a(s): the prompt is a(s) + prefix[end]
        prompt = base + self.prefix[p]
        table = self.tables[j]
        _, p_cache, p_write, p_out = table.at(prompt)
        cached, read_of_state, read_of_cut = self._cached(j, base, prefix)
        hit = self.hit
        read = np.minimum(cached, prompt) * hit
        call_cost = read * p_cache + (prompt - read) * p_write + self.outputs[j] * p_out
        carried_before, loss_now = self._loss(j, rows, cols, prompt, p_cache, p_write, p_out)
        keep = call_cost[:, None] + loss_now + later
        # after a compaction to cut i (state i, class k_now): the call reads V, writes the rest
        after = (hit * v * p_cache + (prompt - hit * v) * p_write + self.outputs[j] * p_out + loss_now[:, k_now]
                 + later[:, k_now])
        over = prompt > self.window
        if over.any():  # keep overflows: the meter forces a summary-only compaction (to cut p), its own tier
            keep[over] = self._forced(table, prompt[over], read[over], carried_before[over]) + (after[p] + self.penalty)
        fits = ~over
        reads = (read_of_state * hit, read_of_cut * hit)
        best, best_cut = self._compactions(j, p, base, reads, carried_before, after, fits)
        better = best < keep
        value = np.where(better, best, keep)
        decision = np.where(better, best_cut, -1)
        if not self.clears:
            self.decisions[j] = decision.astype(np.int32)
            return value, later_c
        value_c, clear, target = self._cleared(j, later_c, (cached[0], after, fits))
        if target[0] >= 0:  # never summarized: clearing is an action too
            better = clear[0] < value[0]
            value[0] = np.where(better, clear[0], value[0])
            decision[0] = np.where(better, -2 - target[0], decision[0])
        self.decisions[j] = decision.astype(np.int32)
        return value, value_c

    def _cached(self, j: int, base: Floats, prefix: Floats) -> tuple[Floats, Floats, Floats]:
        """Per state (``base``: a(s)) the cache before call ``j``, and its part read by a compaction to each cut:
        ``read_of_state`` per state plus ``read_of_cut`` per cut (``prefix``: of each cut)."""
        rows, cuts = base.shape[0], prefix.shape[0]
        if self.expired[j]:
            return np.zeros(rows), np.zeros(rows), np.zeros(cuts)
        if j == 0:  # the warm cache: part of V, written by an earlier session
            warm = float(self.params.warm_tokens)
            return np.full(rows, warm), np.zeros(rows), np.minimum(self.v + prefix, warm)
        previous = self.prefix[int(self.rec.call_positions[j - 1])]
        return base + previous, base, np.minimum(prefix, previous)

    def _forced(self, table: _Table, prompt: Floats, read: Floats, carried: Floats) -> Floats:
        """A forced summary-only compaction of the whole live prompt (an overflow): its request and the carried refetches."""
        q_in, q_cache, q_write, q_out = table.at(prompt + L_INSTR_TOKENS)
        forced = read * q_cache + (prompt - read) * q_write + L_INSTR_TOKENS * q_in + self.s_tok * q_out
        return forced[:, None] + carried * q_cache[:, None]

    def _cleared(self, j: int, later_c: Floats, never: tuple[float, Floats, npt.NDArray[np.bool_]]
                 ) -> tuple[Floats, Floats, Ints]:
        """Before call ``j``: the values of the cleared states ``(c, k)`` (never summarized, ``c`` results cleared),
        and the best clearing from each ``c`` (0: the never-summarized, never-cleared state) with its target.

        ``never``: the cache of state ``s = 0``, and per cut the value after a compaction and whether it fits.
        """
        rec, v, hit = self.rec, self.v, self.hit
        p, cols = int(rec.call_positions[j]), self._classes(j)
        k_now, rows = cols - 1, int(np.searchsorted(self.depth, p, side="right"))  # the states with depth <= p
        cached_zero, after, fits = never
        later_c = later_c[:rows, :cols]
        live = np.arange(rows) > 0
        base = v - self.saved[:rows]  # the prompt of state c is base[c] + prefix[p]
        prompt = base + self.prefix[p]
        table = self.tables[j]
        _, p_cache, p_write, p_out = table.at(prompt)
        cached, read_of_state, read_of_cut = self._cached(j, base, self.prefix[:p + 1])
        read = np.minimum(cached, prompt) * hit
        call_cost = read * p_cache + (prompt - read) * p_write + self.outputs[j] * p_out
        carried_before, loss_now, held = self._loss_cleared(j, rows, cols, prompt, p_cache, p_write, p_out)
        keep = call_cost[:, None] + loss_now + later_c
        over = prompt > self.window
        if over.any():
            keep[over] = self._forced(table, prompt[over], read[over], carried_before[over]) + (after[p] + self.penalty)
        # a compaction cuts at or after the clearing depth (the cleared results all go into the summary)
        reads = (read_of_state * hit, read_of_cut * hit)
        best, best_cut = self._compactions(j, p, base, reads, carried_before, after, fits, first=np.maximum(self.depth[:rows], 1))
        better = best < keep
        value, decision = np.where(better, best, keep), np.where(better, best_cut, -1)
        # a clearing from c to a deeper d: no request; the cache keeps V and the prompt before the first changed
        # message; the call is state (d, k_now). Only while nothing was fetched again since the last clearing.
        from_cache = np.where(np.arange(rows) == 0, cached_zero, cached)
        settled = np.minimum(from_cache, self.kept[:rows]) * hit  # the last state has no deeper clearing
        onward = prompt * p_write + self.outputs[j] * p_out + loss_now[:, k_now] + later_c[:, k_now]
        seen = self.depth[:rows] <= (int(rec.call_positions[j - 1]) if j > 0 else 0)  # results a call has read (meter 5b)
        clear, target = _clearings(table, prompt, settled, onward, live & ~over & seen)
        open_ = held == 0
        cleared = open_ & (clear[:, None] < value)
        cleared[0] = False  # row 0 is the never-cleared state: the caller weighs its clearing
        value = np.where(cleared, clear[:, None], value)
        decision = np.where(cleared, -2 - target[:, None], decision)
        value[0] = np.inf
        self.decisions_c[j] = decision.astype(np.int32)
        return value, clear, target

    def _loss(self, j: int, rows: int, cols: int, prompt: Floats, p_cache: Floats, p_write: Floats,
              p_out: Floats) -> tuple[Floats, Floats]:
        """Per state, the refetched tokens carried before call ``j`` and the loss charged at it ($·1e6)."""
        if not self.charge:
            return np.zeros((rows, cols)), np.zeros((rows, cols))
        here = range(int(self.bounds[j]), int(self.bounds[j + 1]))
        carried = self.carried[:rows, :cols]
        if not here:
            return carried, carried * p_cache[:, None]
        k_now = cols - 1
        firsts = [(int(self.rec.use_messages[u]), int(self.prev_use[u]), k_now, 1.0) for u in here]
        count = _rectangles(rows, cols, firsts)
        fresh = _rectangles(rows, cols, [(m, lo, hi, self.tokens[m]) for m, lo, hi, _ in firsts])
        carried -= fresh  # in place: what the previous call carried (earlier calls read only this corner)
        loss = (count * (prompt * p_cache + REFETCH_OUTPUT_TOKENS * p_out)[:, None] + fresh * p_write[:, None]
                + (carried + fresh) * p_cache[:, None])
        return carried, loss

    def _loss_cleared(self, j: int, rows: int, cols: int, prompt: Floats, p_cache: Floats, p_write: Floats,
                      p_out: Floats) -> tuple[Floats, Floats, Floats]:
        """Per cleared state ``(c, k)``: the refetched tokens carried before call ``j``, the loss charged at it
        ($·1e6) and how many cleared messages were fetched again since the last clearing (its class ``k``)."""
        if not self.charge:
            return np.zeros((rows, cols)), np.zeros((rows, cols)), np.zeros((rows, cols))
        carried, held = self.carried_c[:rows, :cols], self.held_c[:rows, :cols]
        k_now = cols - 1
        firsts = [(self.rank[m], int(self.prev_use[u]), k_now)
                  for u in range(int(self.bounds[j]), int(self.bounds[j + 1]))
                  if (m := int(self.rec.use_messages[u])) in self.rank]
        if not firsts:
            return carried, carried * p_cache[:, None], held
        count = _rectangles(rows, cols, [(r, lo, hi, 1.0) for r, lo, hi in firsts])
        fresh = _rectangles(rows, cols, [(r, lo, hi, self.tokens[self.clearable[r]]) for r, lo, hi in firsts])
        carried -= fresh  # in place, as in _loss
        held -= count
        loss = (count * (prompt * p_cache + REFETCH_OUTPUT_TOKENS * p_out)[:, None] + fresh * p_write[:, None]
                + (carried + fresh) * p_cache[:, None])
        return carried, loss, held

    def _compactions(self, j: int, p: int, base: Floats, reads: tuple[Floats, Floats], carried: Floats, after: Floats,
                     fits: npt.NDArray[np.bool_], first: Ints | None = None) -> tuple[Floats, Ints]:
        """The least cost of compacting before call ``j`` per state ``(s, k)`` and its cut (−1: none).

        The request's prompt is ``base[s] + prefix[i]``, read ``read_of_state[s] + read_of_cut[i]``
        from the cache, priced at the tier of the request (its prompt and the instruction, as the
        meter prices it): per tier, the cost is a part of ``s`` plus a part of ``i``. ``first``: per
        state, the first cut allowed (a cleared state: its depth, nothing live before it; else ``s + 1``,
        and a tool call before ``s`` no longer binds its result).
        """
        rows, cols = carried.shape
        cuts = p + 1
        read_of_state, read_of_cut = reads
        prefix, table = self.prefix[:cuts], self.tables[j]
        lo_block = self.blockers[j][:cuts]
        candidates = self.starts[:cuts] & fits
        candidates[0] = False
        candidates[p:] = False
        free = candidates & (lo_block < 0)
        best, best_cut = np.full((rows, cols), np.inf), np.full((rows, cols), -1, dtype=np.int64)
        uppers = [*table.starts.tolist(), np.inf]
        shifted = base + L_INSTR_TOKENS  # the request's tier counts its instruction
        largest = float(np.max(base, initial=-np.inf)) + float(self.prefix[p]) + L_INSTR_TOKENS  # no request is larger
        least = np.arange(1, rows + 1) if first is None else first
        for t, (p_in, p_cache, p_write, p_out) in enumerate(table.rows.tolist()):
            if t and uppers[t - 1] >= largest:
                break  # this tier and those above are out of reach
            request = L_INSTR_TOKENS * p_in + self.s_tok * p_out
            of_state = read_of_state * (p_cache - p_write) + base * p_write + request
            of_cut = read_of_cut * (p_cache - p_write) + prefix * p_write + after
            lower = uppers[t - 1] if t else -np.inf
            lo = np.searchsorted(prefix, lower - shifted, side="right") if t else np.zeros(rows, np.int64)
            lo = np.maximum(lo, least)
            hi = np.searchsorted(prefix, uppers[t] - shifted, side="right") if t < len(uppers) - 1 else np.full(rows, cuts)
            value, cut = _band_minima(of_cut, free, lo, hi)
            total = (of_state + value)[:, None] + carried * p_cache
            _fold(best, best_cut, total, cut[:, None], slice(0, rows))
        if first is not None:
            return best, best_cut
        for i in np.flatnonzero(candidates & (lo_block >= 0)).tolist():
            span = slice(int(lo_block[i]) + 1, i)
            p_in, p_cache, p_write, p_out = table.at(shifted[span] + prefix[i])
            request = L_INSTR_TOKENS * p_in + self.s_tok * p_out
            cost = ((read_of_state[span] + read_of_cut[i]) * (p_cache - p_write) + (base[span] + prefix[i]) * p_write
                    + request + after[i])
            _fold(best, best_cut, cost[:, None] + carried[span] * p_cache[:, None], np.full((1, 1), i), span)
        return best, best_cut


def _clearings(table: _Table, prompt: Floats, settled: Floats, onward: Floats, usable: npt.NDArray[np.bool_]
               ) -> tuple[Floats, Ints]:
    """Per cleared state ``c`` (0: none), the least cost of clearing to a deeper ``d`` (``usable[d]``) and that ``d``
    (−1: none). The call after it reads ``settled[c]`` (the cache the clearing keeps, read share applied) and
    writes the rest of ``prompt[d]``, at the tier of ``prompt[d]``; ``onward[d]`` holds the rest of its cost."""
    rows = prompt.shape[0]
    tier = np.searchsorted(table.starts, prompt, side="left") if table.starts.size else np.zeros(rows, np.int64)
    clear, target = np.full(rows, np.inf), np.full(rows, -1, dtype=np.int64)
    for t, (_, p_cache, p_write, _) in enumerate(table.rows.tolist()):
        chosen = usable & (tier == t)
        if chosen.any():
            least, at = _band_minima(onward, chosen, np.arange(1, rows + 1), np.full(rows, rows))
            _fold(clear, target, settled * (p_cache - p_write) + least, at, slice(0, rows))
    return clear, target


def _fold(best: Floats, best_cut: Ints, cost: Floats, cut: Ints, span: slice) -> None:
    """Keep, in ``best[span]`` and ``best_cut[span]``, the cheaper of what is there and ``cost`` at ``cut`` (ties: kept)."""
    better = cost < best[span]
    best[span] = np.where(better, cost, best[span])
    best_cut[span] = np.where(better, cut, best_cut[span])


def _band_minima(values: Floats, candidates: npt.NDArray[np.bool_], lo: Ints, hi: Ints) -> tuple[Floats, Ints]:
    """Per query ``q``: the least ``values[i]`` over candidates ``i`` in ``[lo[q], hi[q])`` and that ``i``
    (ties: the smaller ``i``); ``inf`` and −1 where the band holds none.

    Candidates are ranked by value (then index); a suffix minimum of the ranks answers bands that
    run to the end, a sparse table of them (O(N log N)) any other band.
    """
    size = values.shape[0]
    index = np.flatnonzero(candidates)
    if index.size == 0:
        return np.full(lo.shape, np.inf), np.full(lo.shape, -1, dtype=np.int64)
    order = index[np.argsort(values[index], kind="stable")]
    none = order.size
    rank = np.full(size + 1, none, dtype=np.int64)
    rank[order] = np.arange(order.size)
    lo, hi = np.minimum(lo, size), np.minimum(hi, size)
    if np.all(hi == size):
        found = np.minimum.accumulate(rank[::-1])[::-1][lo]
    else:
        found = _range_min(rank[:size], lo, hi, none)
    found = np.where(hi > lo, found, none)
    ordered = np.append(order, -1)
    cut = ordered[found]
    return np.where(cut >= 0, values[np.maximum(cut, 0)], np.inf), cut


def _range_min(ranks: Ints, lo: Ints, hi: Ints, none: int) -> Ints:
    """``min(ranks[lo[q]:hi[q]])`` per query (``none`` for an empty range), by a sparse table."""
    size = ranks.shape[0]
    levels = max(1, int(size).bit_length())
    table = np.full((levels, size + (1 << levels)), none, dtype=np.int64)
    table[0, :size] = ranks
    for level in range(1, levels):
        width = 1 << (level - 1)
        table[level, :size] = np.minimum(table[level - 1, :size], table[level - 1, width:size + width])
    length = np.maximum(hi - lo, 1)
    level = np.frexp(length.astype(np.float64))[1].astype(np.int64) - 1  # floor(log2(length)), exact
    right = np.maximum(hi - (1 << level), lo)
    return np.minimum(table[level, lo], table[level, right])
