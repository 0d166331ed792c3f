"""The hindsight-optimal compaction schedule of a recording (DESIGN §6, ``--policy oracle``).

The oracle knows the whole recording and chooses, before each call, to keep the conversation
or to compact it at any feasible cut (DESIGN §1; the tail keeps at least one message), so that
the replay's total (:mod:`dp_compact.replay.meter`: cache reads and writes, output, compaction
requests, lost information) is the least possible. Its compactions write a summary of S
tokens (``ReplayParams.s_tokens``); it pins nothing and truncates nothing.

Backward dynamic programming over the state before call ``j``:

- ``s``, the first live message (0 = never compacted; otherwise a summary block of S tokens
  stands before ``[s, p_j)``, so "summary block present" is ``s > 0``);
- with the lost-information charge, ``k``: which recorded uses came after the last compaction.
  Refetched messages stay in the context until the next compaction, so the carried tokens
  depend on when it happened; only the calls with uses matter (``Q``, sorted), so ``k`` is the
  number of them before the last compaction.

Every cost of a call is a function of the state, and a compaction from ``s`` to ``i`` costs a
part of ``s`` plus a part of ``i`` (the request reads the cached prefix, whose end is fixed by
the call, not by the cut), so the best cut for every ``s`` at once is a suffix minimum over
``i > s``: O(N · |Q|) numpy work per call, no loop over cuts. The cut rule's only
state-dependent case (a tool call before ``s`` no longer binds its result) is handled cut by
cut for the few cuts it concerns.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from dp_compact.core.benefit import L_INSTR_TOKENS
from dp_compact.core.cuts import ROLE_TOOL
from dp_compact.replay.meter import REFETCH_OUTPUT_TOKENS, Recording, ReplayParams

__all__ = ["OracleSchedule", "oracle_schedule"]

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class OracleSchedule:
    """The hindsight optimum of one recording.

    Attributes
    ----------
    total_usd : float
        Its total cost, $ (the meter's total when the schedule is replayed).
    schedule : tuple[tuple[int, int], ...]
        ``(call, cut)`` of each compaction, calls increasing: before call ``call`` the live head
        is summarized and the tail starts at history message ``cut``.
    feasible : bool
        False when no schedule keeps every prompt within the window (a single message larger
        than it); the schedule is then the optimum without the window, and its replay overflows.
    """

    total_usd: float
    schedule: tuple[tuple[int, int], ...]
    feasible: bool = True


def _expired(rec: Recording, params: ReplayParams) -> npt.NDArray[np.bool_]:
    """Whether the cache is empty before each call: the first call, and gaps longer than the TTL."""
    expired = np.zeros(rec.n_calls, dtype=bool)
    if rec.n_calls:
        expired[0] = True
    if params.cache_ttl_s is not None and rec.n_calls > 1:
        gaps = np.diff(rec.call_times)
        expired[1:] = np.nan_to_num(gaps, nan=-np.inf) > params.cache_ttl_s
    return expired


def _blockers(rec: Recording) -> list[npt.NDArray[np.int64]]:
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
        if m + 1 < rows and lo < hi:
            grid[m + 1, lo + 1] += weight
            grid[m + 1, hi + 1] -= weight
    return np.cumsum(np.cumsum(grid, axis=0), axis=1)[:rows, :cols]


def oracle_schedule(rec: Recording, params: ReplayParams) -> OracleSchedule:
    """The hindsight-optimal compaction schedule of ``rec`` under ``params`` (module docstring).

    Parameters
    ----------
    rec : Recording
        The recorded calls, message tokens, cut structure and uses.
    params : ReplayParams
        Prices ($/MTok), window M, V and S (tokens), cache TTL (s), loss mode.

    Returns
    -------
    OracleSchedule
        Its total ($) and the ``(call, cut)`` of each compaction.
    """
    result = _solve(rec, params, window=float(params.window))
    if result is not None:
        return result
    unbounded = _solve(rec, params, window=np.inf)
    assert unbounded is not None  # every cost is finite without the window
    return replace(unbounded, feasible=False)


def _solve(rec: Recording, params: ReplayParams, *, window: float) -> OracleSchedule | None:
    """The backward pass and the forward read-out; None when no schedule fits ``window``."""
    prices = params.prices
    p_cache, p_write, p_out = prices.p_cache, prices.p_write, prices.p_out
    v, s_tok = float(params.v_tokens), float(params.s_tokens)
    prefix = rec.prefix_tokens.astype(np.float64)
    n, calls = rec.arrays.n, rec.n_calls
    positions, outputs = rec.call_positions, rec.output_tokens.astype(np.float64)
    starts = np.append(rec.arrays.roles != ROLE_TOOL, False)
    expired, blockers = _expired(rec, params), _blockers(rec)
    charge = params.loss == "refetch" and rec.use_calls.size > 0
    use_calls = np.unique(rec.use_calls) if charge else np.zeros(0, np.int64)
    cols = use_calls.size + 1
    states = np.arange(n + 1)
    summary = np.where(states > 0, s_tok, 0.0)
    request = L_INSTR_TOKENS * prices.p_input + s_tok * p_out
    tokens = rec.message_tokens.astype(np.float64)
    # previous use (as an index into use_calls) of each use, and the latest use per message so far
    prev_use, last_use = np.full(rec.use_calls.size, -1, np.int64), {}
    for u, (m, q) in enumerate(zip(rec.use_messages.tolist(), rec.use_calls.tolist(), strict=True)):
        if charge:
            prev_use[u] = last_use.get(m, -1)
            last_use[m] = int(np.searchsorted(use_calls, q))
    bounds = np.searchsorted(rec.use_calls, np.arange(calls + 1))
    # carried[s, k]: refetched tokens in the context at the current call (messages < s whose latest
    # use so far has index >= k); built for the last call, then peeled off call by call going back
    carried = _rectangles(n + 1, cols, [(m, -1, q, tokens[m]) for m, q in last_use.items()])

    later = np.zeros((n + 1, cols))  # value from call j + 1 on, per state (s, k)
    decisions: list[tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]] = [None] * calls  # type: ignore[list-item]
    for j in range(calls - 1, -1, -1):
        p = int(positions[j])
        k_now = int(np.searchsorted(use_calls, j))  # uses before call j: the class of a compaction now
        prompt = v + summary + prefix[p] - prefix
        cached = np.zeros(n + 1) if expired[j] else v + summary + prefix[int(positions[j - 1])] - prefix
        read = np.minimum(cached, prompt)
        call_cost = read * p_cache + (prompt - read) * p_write + outputs[j] * p_out
        # lost information at call j per state: refetches (count, tokens) and the carried tokens
        carried_before, loss_now = np.zeros((n + 1, cols)), np.zeros((n + 1, cols))
        if charge:
            here = range(int(bounds[j]), int(bounds[j + 1]))
            first = [(int(rec.use_messages[u]), int(prev_use[u]), k_now, 1.0) for u in here]
            weighted = [(m, lo, hi, tokens[m]) for m, lo, hi, _ in first]
            count, fresh = _rectangles(n + 1, cols, first), _rectangles(n + 1, cols, weighted)
            carried_before = carried - fresh  # what the previous call carried
            carried = carried_before
            loss_now = (count * (prompt[:, None] * p_cache + REFETCH_OUTPUT_TOKENS * p_out) + fresh * p_write
                        + (carried_before + fresh) * p_cache)
        keep = call_cost[:, None] + loss_now + later
        keep[prompt > window] = np.inf
        # compaction to cut i: the request reads the cached prefix, whose end is the previous call's
        if expired[j]:
            from_state, to_cut = (v + summary - prefix) * p_write, prefix * p_write
        else:
            previous = prefix[int(positions[j - 1])]
            from_state = (v + summary - prefix) * p_cache
            to_cut = np.where(prefix <= previous, prefix * p_cache, previous * p_cache + (prefix - previous) * p_write)
        after_prompt = v + s_tok + prefix[p] - prefix
        after = to_cut + v * p_cache + (after_prompt - v) * p_write + outputs[j] * p_out
        after = after + loss_now[:, k_now] + later[:, k_now]  # nothing is carried yet in the new class
        after[after_prompt > window] = np.inf
        candidates = starts.copy()
        candidates[p:] = False
        candidates[0] = False
        best, best_cut = _best_cuts(after, candidates, blockers[j])
        compact = (from_state + request)[:, None] + carried_before * p_cache + best[:, None]
        value = np.minimum(keep, compact)
        value[max(p, 1):] = np.inf  # a live tail is never empty
        decisions[j] = (compact < keep, best_cut)
        later = value
    total = float(later[0, 0])
    if not np.isfinite(total):
        return None
    schedule, s, k = [], 0, 0
    for j in range(calls):
        better, best_cut = decisions[j]
        if better[s, k]:
            s, k = int(best_cut[s]), int(np.searchsorted(use_calls, j))
            schedule.append((j, s))
    return OracleSchedule(total_usd=total / 1e6, schedule=tuple(schedule))


def _best_cuts(after: Floats, candidates: npt.NDArray[np.bool_], lo: npt.NDArray[np.int64]) -> tuple[Floats, npt.NDArray[np.int64]]:
    """For every state ``s``: the least ``after[i]`` over feasible cuts ``i > s`` and that cut (ties: smaller i).

    Cuts that no earlier tool call binds (``lo < 0``) are a suffix minimum; the others are
    feasible only for ``lo[i] < s < i`` and are folded in one by one.
    """
    size = after.shape[0]
    index = np.arange(size)
    free = np.where(candidates & (lo < 0), after, np.inf)
    suffix = np.minimum.accumulate(free[::-1])[::-1]
    record = np.where(free == suffix, index, size)
    first = np.minimum.accumulate(record[::-1])[::-1]
    best, cut = np.full(size, np.inf), np.full(size, -1, dtype=np.int64)
    best[:-1], cut[:-1] = suffix[1:], first[1:]
    for i in np.flatnonzero(candidates & (lo >= 0)).tolist():
        span = slice(int(lo[i]) + 1, i)
        better = after[i] < best[span]
        best[span] = np.where(better, after[i], best[span])
        cut[span] = np.where(better, i, cut[span])
    return best, cut
