"""Receipts: every compaction of a replay, what it cost, what it saved, when it paid back.

For each compaction a policy made (``--policy dp``, any policy) or the recorded tool made
(``--policy recorded``), computed from the replay's own results, never re-estimated:

- **cost**: its summarization request (``request_usd``: exactly what the meter charged, so the
  requests of a policy sum to its ``compaction_usd``) and the **cache rewrite** it caused on the
  next call (``rewrite_usd``): the tokens that call wrote to the cache (or sent uncached) beyond
  what it would have written had the compaction not happened, at that call's write price
  (``p_write``, else ``p_input``; 0 when the cache had gone cold anyway);
- **saved**: on the calls that followed, up to the next compaction (or truncation), what they
  cost without it (the **counterfactual**: the same calls, the same cache rule and lost-information
  charge, from the state just before it) less what they cost with it. The calls' actual cost is
  the replay's, or, under ``--policy recorded``, the recorded usage's (each call's recorded
  prompt, priced by the same meter, :func:`~dp_compact.replay.recorded.recorded_costs`);
  ``source`` says which. The first call's saving leaves the rewrite out (it is in the cost), so
  ``net_usd = saved_usd - cost_usd`` = counterfactual − actual − request over those calls;
- **paid back**: the first call (index and time) at which the cumulative saving exceeds the cost,
  else None ("not by the next compaction", or "not by the end");
- **needed**: where, without it, a prompt would not have fitted the window: the counterfactual
  stops there (``needed_at_call``), the compaction was necessary;
- **used again**: what it dropped that a later call used (DESIGN §6 detector): each refetch the
  replay charged for a message this compaction dropped last, with the message's index, the call
  and its $. Under ``recorded`` the tool's own re-reads are calls of the recording, already in
  its cost: they are listed (first use per message after the compaction) with ``usd`` None.

Pure: a :class:`~dp_compact.replay.Recording`, :class:`~dp_compact.replay.ReplayParams` and a
:class:`~dp_compact.replay.PolicyResult` in, values out (rendered by :mod:`dp_compact.cli.render`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.pricing import Prices
from dp_compact.replay.events import CompactionEvent, snapshot
from dp_compact.replay.meter import Meter, PolicyResult, call_prices
from dp_compact.replay.recorded import (
    RECORDED,
    RecordedCosts,
    RecordedState,
    recorded_costs,
)
from dp_compact.replay.recording import Recording, ReplayParams

__all__ = ["PolicyReceipts", "Receipt", "UsedAgain", "policy_receipts", "receipts", "recorded_receipts"]

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class UsedAgain:
    """A message a compaction dropped that call ``call`` used again: its history index
    ``message``, its ``tokens``, and the $ of fetching it again (None under ``recorded``: the
    tool's own re-read is a call of the recording, already in its cost)."""

    call: int
    message: int
    tokens: int
    usd: float | None

    def to_dict(self) -> dict[str, Any]:
        """``{"call", "message", "tokens", "usd"}``."""
        return {"call": self.call, "message": self.message, "tokens": self.tokens, "usd": self.usd}


@dataclass(frozen=True, slots=True)
class Receipt:
    """One compaction's receipt (module docstring); $ and tokens.

    Attributes
    ----------
    number : int
        1-based, in order.
    call : int
        The call it came before (0-based); ``time``: that call's epoch seconds (NaN unknown).
    cut : int
        History index where the kept tail starts.
    dropped_messages, summary_tokens, head_prompt_tokens : int
        Messages it dropped; the block it left, tokens; its request's prompt ``V + H``, tokens.
    forced : bool
        An overflow forced it.
    request_usd, rewrite_usd : float
        Its summarization request; the cache rewrite it caused on the next call ($).
    rewrite_tokens : int
        The tokens of that rewrite.
    until_call : int
        The calls compared are ``[call, until_call)``: up to the next compaction (or the end,
        or ``needed_at_call``).
    next_compaction : bool
        True when the comparison ends at a later compaction, False at the end of the recording.
    saved_usd : float
        What those calls cost without it less with it, the first call's rewrite left out ($).
    saved_tokens : int
        Prompt tokens those calls did not send.
    paid_back_call : int or None
        First call at which the cumulative saving exceeds ``cost_usd``; ``paid_back_time`` its
        epoch seconds (NaN unknown).
    needed_at_call : int or None
        The call whose prompt would not have fitted the window without it.
    used_again : tuple[UsedAgain, ...]
        What it dropped that was used again.
    source : str
        ``"replay"`` or ``"recorded usage"``: where the calls' actual cost comes from.
    action : str
        ``"summarize"``, or ``"clear"`` for a clearing of old tool results (DESIGN §9): no
        request, ``cut`` is its depth, ``dropped_messages`` the messages it cleared and
        ``summary_tokens`` the tokens it took out of the prompt.
    """

    number: int
    call: int
    time: float
    cut: int
    dropped_messages: int
    summary_tokens: int
    head_prompt_tokens: int
    forced: bool
    request_usd: float
    rewrite_usd: float
    rewrite_tokens: int
    until_call: int
    next_compaction: bool
    saved_usd: float
    saved_tokens: int
    paid_back_call: int | None
    paid_back_time: float
    needed_at_call: int | None
    used_again: tuple[UsedAgain, ...]
    source: str
    action: str = "summarize"

    @property
    def cost_usd(self) -> float:
        """The request and the rewrite, $."""
        return self.request_usd + self.rewrite_usd

    @property
    def net_usd(self) -> float:
        """``saved_usd − cost_usd``, $."""
        return self.saved_usd - self.cost_usd

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (docs/replay.md "Receipts"); times as ISO 8601 UTC strings or None."""
        return {
            "number": self.number, "call": self.call, "time": _iso(self.time), "cut": self.cut,
            "dropped_messages": self.dropped_messages, "summary_tokens": self.summary_tokens,
            "head_prompt_tokens": self.head_prompt_tokens, "forced": self.forced, "request_usd": self.request_usd,
            "rewrite_usd": self.rewrite_usd, "rewrite_tokens": self.rewrite_tokens, "cost_usd": self.cost_usd,
            "until_call": self.until_call, "next_compaction": self.next_compaction, "saved_usd": self.saved_usd,
            "saved_tokens": self.saved_tokens, "net_usd": self.net_usd, "paid_back_call": self.paid_back_call,
            "paid_back_time": _iso(self.paid_back_time), "needed_at_call": self.needed_at_call,
            "used_again": [u.to_dict() for u in self.used_again], "source": self.source,
            "action": self.action,
        }


@dataclass(frozen=True, slots=True)
class PolicyReceipts:
    """Every receipt of one policy's replay, with its sums ($)."""

    policy: str
    receipts: tuple[Receipt, ...]

    def to_dict(self) -> dict[str, Any]:
        """``{"policy", "compactions", "clearings", "request_usd", "rewrite_usd", "saved_usd", "net_usd", "paid_back",
        "receipts"}``; ``compactions`` counts the summarizing ones, ``clearings`` the clearings of old tool results."""
        r = self.receipts
        clearings = sum(x.action == "clear" for x in r)
        return {"policy": self.policy, "compactions": len(r) - clearings, "clearings": clearings, "request_usd": sum(x.request_usd for x in r),
                "rewrite_usd": sum(x.rewrite_usd for x in r), "saved_usd": sum(x.saved_usd for x in r),
                "net_usd": sum(x.net_usd for x in r), "paid_back": sum(x.paid_back_call is not None for x in r),
                "receipts": [x.to_dict() for x in r]}


def _iso(seconds: float) -> str | None:
    """Epoch seconds as ``2026-04-26T14:03:07Z``; None when unknown."""
    if math.isnan(seconds):
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fresh_price(prices: Prices, prompt: float) -> float:
    """$/MTok of a prompt token not read from the cache: the write price where priced, else input."""
    p = prices.at(prompt)
    return p.p_input if p.p_cache_write is None and p.p_cache_write_1h is None else p.p_write


@dataclass(frozen=True, slots=True)
class _Counterfactual:
    """The calls from a compaction's call on, as they would have gone without it: $ and prompt
    tokens per call, the first call's fresh tokens, and the call that would have overflowed."""

    usd: Floats
    prompts: Floats
    first_fresh: float
    needed_at: int | None


def _calls(rec: Recording, params: ReplayParams, meter: Meter, start: int, until: int, prices: list[Prices],
           prompt_at: Callable[[int], int], charge_uses: Callable[[int, int], None] | None = None) -> _Counterfactual:
    """Calls ``[start, until)`` priced on ``meter``, their prompts given by ``prompt_at(k)``;
    ``charge_uses(k, prompt)`` charges what call ``k`` fetches again before it is sent."""
    usd, prompts, first, needed = [], [], 0.0, None
    for k in range(start, until):
        prompt = prompt_at(k)
        meter.day = prices[k]
        if k > start:
            meter.expire(float(rec.call_times[k]))
        else:
            first = prompt - min(meter.cached, prompt) * params.cache_hit_share
        if prompt > params.window:
            needed = k
            break
        before = meter.total
        carried = charge_uses(k, prompt) if charge_uses is not None else 0
        meter.request(prompt, int(rec.output_tokens[k]), carried)
        meter.last_time = float(rec.call_times[k])
        usd.append((meter.total - before) / 1e6)
        prompts.append(prompt)
    return _Counterfactual(np.array(usd), np.array(prompts, dtype=np.float64), first, needed)


def _without(rec: Recording, params: ReplayParams, event: CompactionEvent, until: int, prices: list[Prices]) -> _Counterfactual:
    """The calls ``[event.call, until)`` of a meter replay had ``event`` not happened (module docstring)."""
    live, meter = snapshot(event.live_before), Meter(params)
    meter.cached, meter.last_time = event.cached_before, event.last_time
    bounds = np.searchsorted(rec.use_calls, np.arange(rec.n_calls + 1))

    def prompt_at(k: int) -> int:
        live.end = int(rec.call_positions[k])
        return params.v_tokens + live.tokens(rec)

    def charge_uses(k: int, prompt: int) -> int:
        if params.loss != "refetch":
            return live.refetched_tokens
        for message in rec.use_messages[bounds[k]:bounds[k + 1]].tolist():
            if live.missing(message, rec):
                meter.refetch(prompt, int(rec.message_tokens[message]))
                live.refetched.add(message)
                live.refetched_tokens += int(rec.message_tokens[message])
        return live.refetched_tokens

    return _calls(rec, params, meter, event.call, until, prices, prompt_at, charge_uses)


def _settle(cf: _Counterfactual, actual: Floats, contexts: npt.NDArray[np.int64], call: int,
            request: float, rewrite: float) -> tuple[float, int, int | None]:
    """(saved $, saved tokens, paid-back call) of the calls the counterfactual covers."""
    n = cf.usd.size
    savings = cf.usd - actual[call:call + n]
    if n:
        savings[0] += rewrite
    cumulative = np.cumsum(savings)
    paid = np.flatnonzero(cumulative > request + rewrite)
    saved_tokens = int(cf.prompts.sum() - contexts[call:call + n].sum())
    return float(savings.sum()), saved_tokens, (call + int(paid[0]) if paid.size else None)


def policy_receipts(rec: Recording, params: ReplayParams, result: PolicyResult) -> PolicyReceipts:
    """The receipts of a meter replay (every policy but ``recorded``; module docstring).

    Parameters
    ----------
    rec : Recording
    params : ReplayParams
        The params the policy was replayed with (its own S).
    result : PolicyResult
        Its replay (:func:`~dp_compact.replay.meter.replay`), with its events and per-call $.

    Returns
    -------
    PolicyReceipts
        One receipt per summarizing compaction and per clearing (hard truncations only end a comparison).
    """
    prices = call_prices(rec, params.prices)
    events, out = result.events, []
    for index, event in enumerate(events):
        if event.action == "truncate":
            continue
        later = index + 1 < len(events)
        until = events[index + 1].call if later else rec.n_calls
        cf = _without(rec, params, event, until, prices)
        rewrite_tokens = 0
        if until > event.call:
            rewrite_tokens = max(round(result.fresh_tokens[event.call] - cf.first_fresh), 0)
        rewrite = rewrite_tokens * _fresh_price(prices[event.call], float(result.contexts[event.call])) / 1e6
        saved, saved_tokens, paid = _settle(cf, result.call_usd, result.contexts, event.call, event.request_usd, rewrite)
        used = tuple(UsedAgain(r.call, r.message, r.tokens, r.usd) for r in result.refetch_log if r.event == index)
        out.append(Receipt(
            number=len(out) + 1, call=event.call, time=float(rec.call_times[event.call]) if event.call < rec.n_calls else math.nan,
            cut=event.cut, dropped_messages=len(event.dropped), summary_tokens=event.summary_tokens,
            head_prompt_tokens=event.head_prompt_tokens, forced=event.forced, request_usd=event.request_usd,
            rewrite_usd=rewrite, rewrite_tokens=rewrite_tokens, until_call=event.call + cf.usd.size,
            next_compaction=later and cf.needed_at is None, saved_usd=saved, saved_tokens=saved_tokens, paid_back_call=paid,
            paid_back_time=float(rec.call_times[paid]) if paid is not None else math.nan, needed_at_call=cf.needed_at,
            used_again=used, source="replay", action=event.action))
    return PolicyReceipts(result.policy, tuple(out))


def _recorded_without(rec: Recording, params: ReplayParams, state: RecordedState, until: int,
                      prices: list[Prices]) -> _Counterfactual:
    """The calls ``[state.call, until)`` of the recorded replay had its compaction not happened:
    the prompt before it grown by what the messages since added, on the provider's scale."""
    counted = rec.prefix_tokens if rec.counted_prefix is None else rec.counted_prefix
    v = params.v_tokens if rec.counted_v is None else rec.counted_v
    meter = Meter(params)
    meter.cached, meter.last_time = state.cached_tokens, state.last_time

    def prompt_at(k: int) -> int:
        position = int(rec.call_positions[k])
        if state.last_prompt is not None:
            return max(state.last_prompt + int(counted[position] - counted[int(rec.call_positions[state.call - 1])]), 0)
        return max(v + state.carry_tokens + int(counted[position] - counted[state.segment]), 0)

    return _calls(rec, params, meter, state.call, until, prices, prompt_at)


def recorded_receipts(rec: Recording, params: ReplayParams, costs: RecordedCosts | None = None) -> PolicyReceipts:
    """The receipts of the compactions the recorded tool made (``--policy recorded``; module docstring).

    ``costs``: :func:`~dp_compact.replay.recorded.recorded_costs` of ``rec`` under ``params``
    (computed when None). The actual side is each call's recorded prompt priced by the meter.
    """
    costs = recorded_costs(rec, params) if costs is None else costs
    prices = call_prices(rec, params.prices)
    contexts = costs.result.contexts
    out = []
    for index, (cut, state) in enumerate(zip(rec.cuts, costs.before_cuts, strict=True)):
        later = index + 1 < len(rec.cuts)
        until = rec.cuts[index + 1].call if later else rec.n_calls
        cf = _recorded_without(rec, params, state, until, prices)
        rewrite_tokens = max(round(costs.fresh_tokens[cut.call] - cf.first_fresh), 0) if until > cut.call else 0
        rewrite = rewrite_tokens * _fresh_price(prices[cut.call], float(contexts[cut.call])) / 1e6 if rewrite_tokens else 0.0
        request = costs.compaction_usd[index]
        saved, saved_tokens, paid = _settle(cf, costs.call_usd, contexts, cut.call, request, rewrite)
        out.append(Receipt(
            number=index + 1, call=cut.call, time=float(rec.call_times[cut.call]) if cut.call < rec.n_calls else math.nan,
            cut=cut.position, dropped_messages=cut.position - state.segment,
            summary_tokens=cut.summary_tokens if cut.summary_tokens is not None else params.s_tokens,
            head_prompt_tokens=int(cut.context_tokens or 0), forced=False, request_usd=request, rewrite_usd=rewrite,
            rewrite_tokens=rewrite_tokens, until_call=cut.call + cf.usd.size, next_compaction=later and cf.needed_at is None,
            saved_usd=saved, saved_tokens=saved_tokens, paid_back_call=paid,
            paid_back_time=float(rec.call_times[paid]) if paid is not None else math.nan, needed_at_call=cf.needed_at,
            used_again=_recorded_uses(rec, index), source="recorded usage"))
    return PolicyReceipts(RECORDED, tuple(out))


def _recorded_uses(rec: Recording, index: int) -> tuple[UsedAgain, ...]:
    """Uses of the messages the recorded compaction ``index`` dropped (written before it and after
    the one before; the tool never sends them again), by calls after it: the first use of each."""
    cut = rec.cuts[index]
    segment = rec.cuts[index - 1].position if index else 0
    seen, out = set(), []
    for message, call in zip(rec.use_messages.tolist(), rec.use_calls.tolist(), strict=True):
        if segment <= message < cut.position and cut.call <= call and message not in seen:
            seen.add(message)
            out.append(UsedAgain(call, message, int(rec.message_tokens[message]), None))
    return tuple(sorted(out, key=lambda u: (u.call, u.message)))


def receipts(rec: Recording, params: ReplayParams, result: PolicyResult) -> PolicyReceipts:
    """:func:`recorded_receipts` for the ``recorded`` policy, else :func:`policy_receipts`."""
    if result.policy == RECORDED:
        return recorded_receipts(rec, params)
    return policy_receipts(rec, params, result)
