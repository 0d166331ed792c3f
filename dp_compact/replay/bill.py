"""The bill check (DESIGN §8 "As recorded"): the ``recorded`` replay against the bill computed
from the recorded usage, at the same prices, with the difference split into named causes.

The bill is every usage record of the session (``Session.usage``) priced on its own: at the
prices in force on its call's UTC day (:meth:`Prices.on`) and its own prompt's whole-request tier
(:meth:`Prices.at`); uncached input at ``p_input``, cache reads at ``p_cache``, 5-minute writes at
``p_write_5m``, 1-hour writes (``Usage.cache_write_1h_tokens``) at ``p_write_1h``, output at
``p_out``. The recorded replay is :func:`dp_compact.replay.recorded.recorded_costs`.

``recorded − bill`` is split, exactly, into (:data:`CAUSES`, $ each, signed as recorded − bill):

- ``no_replayed_call``: usage records placed on no replayed call (a subagent's or sidechain's
  calls, a record without a source line): in the bill only;
- ``duplicates``: a second record placed on the same call (a retry, a duplicate line): in the
  bill only;
- ``missing_usage``: replayed calls without a usage record: in the replay only;
- ``compaction_requests``: the replay's requests for the recorded compactions less the usage
  records of those requests (Codex writes its own as a record on no call just before the
  marker); Claude Code writes none of its own into the transcript, so the bill lacks them and
  the whole request shows here, named;
- ``cache_model``: the rest, on the calls both have: the meter's cache model (common prefix,
  TTL, measured hit share, the session's write mix) against the recorded reads and writes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np

from dp_compact.conversation import Usage
from dp_compact.measure.estimation import CallPlacement
from dp_compact.pricing import Prices
from dp_compact.replay.recorded import RecordedCosts
from dp_compact.replay.recording import Recording

__all__ = ["BILL_TOLERANCE", "CAUSES", "BillCause", "BillCheck", "bill_check", "usage_cost"]

#: DESIGN §8: the recorded replay must match the bill "within a few percent"; this check takes 5 %.
BILL_TOLERANCE = 0.05

#: The named causes of a difference, in report order, with what each names.
CAUSES = {
    "no_replayed_call": "usage records on no replayed call (subagent or sidechain calls, records on no message)",
    "duplicates": "a second usage record on the same call (retries, duplicate lines)",
    "missing_usage": "replayed calls without a usage record (missing usage)",
    "compaction_requests": "the tool's compaction requests",
    "cache_model": "the meter's cache model against the recorded reads and writes",
}


def usage_cost(usage: Usage, prices: Prices) -> float:
    """$ of one usage record at ``prices`` (the prices of its day), at its own prompt's tier
    (module docstring)."""
    p = prices.at(usage.prompt_tokens)
    one_hour = usage.cache_write_1h_tokens
    five = usage.cache_write_tokens - one_hour
    uncached = usage.prompt_tokens - usage.cache_read_tokens - usage.cache_write_tokens
    return (uncached * p.p_input + usage.cache_read_tokens * p.p_cache + five * p.p_write_5m + one_hour * p.p_write_1h
            + usage.output_tokens * p.p_out) / 1e6


@dataclass(frozen=True, slots=True)
class BillCause:
    """One named part of ``recorded − bill``: its key (:data:`CAUSES`), $ (signed), how many records
    or calls, and what it means."""

    cause: str
    usd: float
    count: int
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """``{"cause", "usd", "count", "detail"}``."""
        return {"cause": self.cause, "usd": self.usd, "count": self.count, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class BillCheck:
    """The recorded replay against the bill of one session ($).

    Attributes
    ----------
    bill_usd : float
        Every usage record priced (module docstring).
    recorded_usd : float
        The ``recorded`` policy's total.
    records, calls : int
        Usage records billed; calls replayed.
    causes : tuple[BillCause, ...]
        ``recorded_usd − bill_usd`` split into named causes; they sum to it.
    """

    bill_usd: float
    recorded_usd: float
    records: int
    calls: int
    causes: tuple[BillCause, ...]

    @property
    def ratio(self) -> float | None:
        """recorded / bill; None for a zero bill."""
        return self.recorded_usd / self.bill_usd if self.bill_usd else None

    @property
    def within(self) -> bool:
        """True when the ratio lies within :data:`BILL_TOLERANCE` of 1."""
        return self.ratio is not None and abs(self.ratio - 1.0) <= BILL_TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (docs/replay.md "Bill check"): ``bill_usd``, ``recorded_usd``, ``ratio``,
        ``difference_usd``, ``within_tolerance``, ``tolerance``, ``records``, ``calls``, ``causes``."""
        return {"bill_usd": self.bill_usd, "recorded_usd": self.recorded_usd, "ratio": self.ratio,
                "difference_usd": self.recorded_usd - self.bill_usd, "within_tolerance": self.within,
                "tolerance": BILL_TOLERANCE, "records": self.records, "calls": self.calls,
                "causes": [c.to_dict() for c in self.causes]}


def _record_prices(lines: np.ndarray, rec: Recording, prices: Prices) -> list[Prices]:
    """The prices of the day of each usage record at source ``lines``: the time of the latest
    replayed call at or before its line (else the first call's), ``prices`` when unknown."""
    if not prices.later or rec.n_calls == 0:
        return [prices] * len(lines)
    call_lines = np.array([rec.messages[int(p)].line for p in rec.call_positions], dtype=np.int64)
    at = np.clip(np.searchsorted(call_lines, lines, side="right") - 1, 0, rec.n_calls - 1)
    chosen = []
    for seconds in rec.call_times[at].tolist():
        day = None if math.isnan(seconds) else datetime.fromtimestamp(seconds, UTC).date().isoformat()
        chosen.append(prices if day is None else prices.on(day))
    return chosen


def bill_check(
    usage: tuple[Usage, ...], placement: CallPlacement, rec: Recording, prices: Prices, costs: RecordedCosts,
) -> BillCheck:
    """The bill check of one session (module docstring).

    Parameters
    ----------
    usage : tuple[Usage, ...]
        Every usage record of the session (``Session.usage``).
    placement : CallPlacement
        Those records placed on the replayed messages (``PreparedSession.placement``).
    rec : Recording
        The replayed recording (calls, times, recorded compactions).
    prices : Prices
        The session's prices ($/MTok; each record at its day's and its tier's).
    costs : RecordedCosts
        The recorded replay of ``rec`` (:func:`dp_compact.replay.recorded.recorded_costs`).

    Returns
    -------
    BillCheck
    """
    lines = np.array([u.line for u in usage], dtype=np.int64)
    cost = np.array([usage_cost(u, p) for u, p in zip(usage, _record_prices(lines, rec, prices), strict=True)])
    slot_of = {id(u): int(s) for u, s in zip(placement.usage, placement.sent.tolist(), strict=True)}
    positions = rec.call_positions
    on_call: dict[int, int] = {}  # call -> index of the record replayed on it (the last placed there)
    kind = np.full(len(usage), "no_replayed_call", dtype=object)
    for index, record in enumerate(usage):
        sent = slot_of.get(id(record), -1)
        call = int(np.searchsorted(positions, sent)) if sent >= 0 else -1
        if 0 <= call < rec.n_calls and positions[call] == sent:
            if call in on_call:
                kind[on_call[call]] = "duplicates"
            on_call[call] = index
            kind[index] = "replayed"
    call_lines = np.array([rec.messages[int(p)].line for p in positions], dtype=np.int64)
    for cut in rec.cuts:  # a record on no call between the last call before the marker and the marker
        after = int(call_lines[cut.call - 1]) if cut.call > 0 else 0
        for index in np.flatnonzero((lines > after) & (lines < cut.line)).tolist():
            if kind[index] == "no_replayed_call":
                kind[index] = "compaction_requests"
    matched = np.zeros(rec.n_calls, dtype=bool)
    matched[list(on_call)] = True

    def billed(name: str) -> tuple[float, int]:
        chosen = kind == name
        return float(cost[chosen].sum()), int(chosen.sum())

    causes = []
    unplaced, n_unplaced = billed("no_replayed_call")
    causes.append(BillCause("no_replayed_call", 0.0 - unplaced, n_unplaced, CAUSES["no_replayed_call"]))
    duplicate, n_duplicate = billed("duplicates")
    causes.append(BillCause("duplicates", 0.0 - duplicate, n_duplicate, CAUSES["duplicates"]))
    missing = float(costs.call_usd[~matched].sum())
    causes.append(BillCause("missing_usage", missing, int((~matched).sum()), CAUSES["missing_usage"]))
    requests, n_requests = billed("compaction_requests")
    replayed = sum(costs.compaction_usd)
    detail = CAUSES["compaction_requests"]
    if costs.compaction_usd and n_requests == 0:
        detail += (f": the transcript records none of the {len(costs.compaction_usd)} compaction request(s) (Claude Code"
                   " writes none of its own into the transcript), so the bill lacks them; the replay charges them")
    elif costs.compaction_usd:
        chosen = [u for u, k in zip(usage, kind.tolist(), strict=True) if k == "compaction_requests"]
        read, prompt = sum(u.cache_read_tokens for u in chosen), sum(u.prompt_tokens for u in chosen)
        detail += (f": {n_requests} recorded as usage (they read {read:,} of their {prompt:,} prompt tokens from the cache),"
                   f" {len(costs.compaction_usd)} replayed (cache-aligned)")
    causes.append(BillCause("compaction_requests", replayed - requests, len(costs.compaction_usd), detail))
    model = float(costs.call_usd[matched].sum()) - float(cost[kind == "replayed"].sum())
    causes.append(BillCause("cache_model", model, int(matched.sum()), CAUSES["cache_model"]))
    return BillCheck(bill_usd=float(cost.sum()), recorded_usd=costs.result.total_usd, records=len(usage),
                     calls=rec.n_calls, causes=tuple(causes))
