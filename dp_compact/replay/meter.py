"""Replay: what a recorded session would have cost, call by call, under a compaction policy.

The replay model (docs/replay.md):

1. The recorded messages are appended in order. Before recorded LLM call ``j`` the conversation
   holds messages ``[0, p_j)`` (``p_j``: the call's position; the assistant message it produced
   comes next), and the policy may compact first.
2. The prompt of a call is ``V + pinned + carry + tail``: the fixed prefix V (``ReplayParams.v_tokens``,
   the same for every policy: the session's own, measured from its usage records, unless
   ``DP_V`` is given; :func:`dp_compact.replay.load.replay_v_tokens`), the first messages a
   policy keeps verbatim (OpenHands' ``keep_first``), the block a compaction left (summary S,
   plus Codex's kept user messages) and the verbatim messages ``[start, p_j)``.
3. Prompt caching: the longest prefix unchanged since the previous request is cached; of it,
   the share ``ReplayParams.cache_hit_share`` the provider really serves (measured from the
   session's usage records, 1 without them) is a cache read (``P_cache``), the rest uncached
   input (``P_input``) or, where the profile prices writes, a cache write at ``P_write`` (the
   session's mix of 5-minute and 1-hour writes, DESIGN §8). Before the first request the cache
   holds ``ReplayParams.warm_tokens`` of V (what the recorded first call found cached, written by
   an earlier session). A gap longer than the TTL (``ReplayParams.cache_ttl_s``: on by default
   where the recording has times, :func:`dp_compact.replay.load.resolve_ttl`) between two
   requests empties the cache. The call's recorded output tokens are charged at ``P_out``.
   Every request (call, compaction request, refetch call) is priced at the prices in force on
   its call's UTC day (:meth:`Prices.on`; unknown time: the session's prices) and at the
   whole-request tier of its own prompt (:meth:`Prices.at`).
4. A compaction costs its summarization request, DESIGN §2 ③ made cache-aware: prompt ``V + H``
   (H = everything before the new tail) read from cache where still cached, the rest at the
   uncached price, ``L_instr`` instruction tokens at ``P_input``, S output tokens at ``P_out``.
   Its block replaces the head; the cache keeps only ``V + pinned``.
5. No free overflow (DESIGN §8): a prompt above the window M is rejected (counted in
   ``overflows``; the rejected request costs nothing), then the tool's own rule runs: the
   policy's fallback compaction, charged as a compaction request; a policy without one
   (``never``, ``langchain``) gets a forced summary-only compaction (charged, counted in
   ``forced``). A hard truncation (drop the oldest messages at a feasible cut; no summary, no
   request; counted in ``truncations``) remains only when even that does not fit.
5b. Clearing (DESIGN §9, :class:`Clearing`): a policy may instead clear the long tool results of
   the live messages before a depth d (:mod:`dp_compact.measure.clearing`). No message is
   removed and no request is made; the prompt loses what the cleared results held less their
   placeholders (:attr:`Recording.cleared_prefix`, provider tokens), and the cache keeps only V
   and the live prompt before the first message it changes (the rest is written by the next
   call). A later use of a cleared message is a refetch (point 6), as for a dropped message.
   Clearing composes with compaction: a later compaction drops cleared messages as usual. Only
   results an earlier call has read are cleared: the depth is capped at the previous call's
   position (before the first call, nothing), since clearing a result before the model has seen
   it would save its tokens without the model ever using them (no tool works so).
6. Lost information (DESIGN §6, ``loss="refetch"``, the default): the recording is fixed, so a
   message that a later call *uses* (:mod:`dp_compact.measure.reuse`) but that the policy dropped must be
   fetched again. Before that call: one extra call (the prompt about to be sent, read from
   cache, and ``REFETCH_OUTPUT_TOKENS`` of output), the message's tokens written fresh
   (``P_write``), and those tokens carried, read from cache, by every later call and by the next
   compaction's request, which drops them again. A message is dropped when it is neither pinned,
   nor kept in the compaction block (Codex's user messages), nor in the verbatim tail; once
   fetched it counts as live until the next compaction. Refetched tokens are charged, not added
   to the prompt's size (they never cause an overflow). All of it is the ``loss`` column.

The recording is taken as fixed (:data:`FIXED_RECORDING`): later messages, tool outputs and
output tokens are the same under every policy.

7. What the recorded tool counted: a transcript does not show everything its tool sent (Claude
   Code's attachments, task notifications and reminders, tool schemas loaded on demand), and the
   provider's tokenizer is not ours. Costs are measured on the transcript's messages, the same for
   every policy; but a preset that stands for a tool triggering on the provider's usage (Claude
   Code, Codex) must fire where that tool did, so it sees the prompt *as the provider counted it*
   (:attr:`CallContext.counted_tokens`): each message as the usage records counted it
   (:func:`counted_tokens_per_message`: what arrived unseen is counted with the messages it
   arrived with, and is gone when they are dropped).

The ``recorded`` policy (what the tool really did, DESIGN §8) is handed the recording whole
(:mod:`dp_compact.replay.recorded`, through its ``replays_recording`` flag) and prices it with
this module's :class:`Meter`.

Everything here is pure: :func:`replay` maps a :class:`Recording`, a policy and
:class:`ReplayParams` (both in :mod:`dp_compact.replay.recording`) to a :class:`PolicyResult`. Files are read in
:mod:`dp_compact.replay.shell`; the policies live in :mod:`dp_compact.replay.policies`, the
hindsight optimum in :mod:`dp_compact.replay.oracle`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.core.benefit import L_INSTR_TOKENS, compaction_request_cost
from dp_compact.pricing import Prices
from dp_compact.replay.context import (
    CallContext,
    Clearing,
    Compaction,
    Live,
    Policy,
    forced_summary,
    tail_cut_mask,
    tail_tokens,
    truncation,
)
from dp_compact.replay.events import CompactionEvent, RefetchEvent, live_messages, snapshot
from dp_compact.replay.recording import (
    FIXED_RECORDING,
    LOSS_MODES,
    REFETCH_OUTPUT_TOKENS,
    Recording,
    ReplayParams,
    counted_tokens_per_message,
    make_recording,
)

Int64s = npt.NDArray[np.int64]

__all__ = [
    "FIXED_RECORDING",
    "LOSS_MODES",
    "REFETCH_OUTPUT_TOKENS",
    "CallContext",
    "Clearing",
    "Compaction",
    "Live",
    "Meter",
    "Policy",
    "PolicyResult",
    "Recording",
    "ReplayParams",
    "call_prices",
    "make_recording",
    "prefix_floor_usd",
    "replay",
    "tail_cut_mask",
    "truncation",
    "counted_tokens_per_message",
]

@dataclass(frozen=True, slots=True)
class PolicyResult:
    """The cost of one recording under one policy.

    Attributes
    ----------
    policy : str
        Its name (``dp``, ``threshold:0.8``, ``claude-code``, ``oracle``, ...).
    fixed : bool
        True for a fixed rule (all but ``dp``, ``seed`` and ``oracle``).
    calls : int
        LLM calls replayed, C.
    cache_read_usd, input_usd, write_usd, output_usd : float
        $ of the calls' cache reads, uncached input (``P_input``), cache writes (``P_write``,
        profiles that price them) and output.
    compaction_usd : float
        $ of the summarization requests (all their tokens).
    loss_usd : float
        $ of lost information (module docstring, point 6): the refetch calls, the refetched
        tokens and their carrying; 0 with ``loss="none"``.
    compactions, overflows, truncations, refetches : int
        Compactions (hard truncations apart; forced ones included), prompts above the window,
        hard truncations (only where even a summary-only compaction does not fit), dropped
        messages fetched again.
    summary_tokens : int
        S charged per compaction, tokens.
    peak_context_tokens : int
        Largest prompt sent (V included), tokens.
    mean_context_tokens : float
        Mean prompt sent, tokens.
    floor_usd : float
        This policy's prompts all read from cache plus the output, $: its cost is never lower.
    contexts : ndarray[int64], shape (C,)
        Prompt tokens of each call as sent; not serialized.
    counted_contexts : ndarray[int64], shape (C,)
        The same prompts as the recorded tool's provider would have counted them (module point
        7; equal to ``contexts`` without usage records); not serialized.
    schedule : tuple[tuple[int, int], ...]
        ``(call, cut)`` of each compaction, in order; not serialized.
    forced : int
        Forced summary-only compactions on an overflow of a policy without a fallback of its own
        (``never``, ``langchain``): counted in ``compactions`` too.
    call_usd : ndarray[float64], shape (C,)
        $ of each call: its request, its refetches and the refetched tokens it and any
        compaction request before it carry; the compaction requests apart (``call_usd.sum() +
        compaction_usd == total_usd``). Empty when not recorded; not serialized.
    fresh_tokens : ndarray[float64], shape (C,)
        Tokens of each call's prompt not read from the cache (written, or uncached input); not serialized.
    events : tuple[CompactionEvent, ...]
        Each compaction and hard truncation as it happened (:mod:`dp_compact.replay.events`); not serialized.
    refetch_log : tuple[RefetchEvent, ...]
        Each dropped (or cleared) message fetched again, and which event dropped (or cleared) it; not serialized.
    clearings : int
        Clearings of old tool results (DESIGN §9): no request, not counted in ``compactions``.
    cleared_tokens : int
        Tokens those clearings took out of the prompt (results less placeholders), summed.
    """

    policy: str
    fixed: bool
    calls: int
    cache_read_usd: float
    input_usd: float
    write_usd: float
    output_usd: float
    compaction_usd: float
    loss_usd: float
    compactions: int
    overflows: int
    truncations: int
    refetches: int
    summary_tokens: int
    peak_context_tokens: int
    mean_context_tokens: float
    floor_usd: float
    contexts: Int64s = field(compare=False, repr=False)
    counted_contexts: Int64s = field(default_factory=lambda: np.zeros(0, np.int64), compare=False, repr=False)
    schedule: tuple[tuple[int, int], ...] = field(default=(), compare=False, repr=False)
    forced: int = 0
    call_usd: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)
    fresh_tokens: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0), compare=False, repr=False)
    events: tuple[CompactionEvent, ...] = field(default=(), compare=False, repr=False)
    refetch_log: tuple[RefetchEvent, ...] = field(default=(), compare=False, repr=False)
    clearings: int = 0
    cleared_tokens: int = 0

    @property
    def total_usd(self) -> float:
        """Total $: the calls (reads, input, writes, output), the compaction requests and the loss."""
        return (self.cache_read_usd + self.input_usd + self.write_usd + self.output_usd + self.compaction_usd
                + self.loss_usd)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields with ``total_usd``, without ``contexts`` and ``schedule``."""
        names = ("policy", "fixed", "calls", "cache_read_usd", "input_usd", "write_usd", "output_usd", "compaction_usd",
                 "loss_usd", "compactions", "forced", "overflows", "truncations", "refetches", "summary_tokens",
                 "peak_context_tokens", "mean_context_tokens", "floor_usd", "clearings", "cleared_tokens")
        return {"total_usd": self.total_usd, **{name: getattr(self, name) for name in names}}


def call_prices(rec: Recording, prices: Prices) -> list[Prices]:
    """The prices in force on each call's UTC day (:meth:`Prices.on`; DESIGN §8 dated prices), one
    per call; ``prices`` itself for a call without a known time. Tiers are applied per request
    by the meter (:meth:`Prices.at`)."""
    if not prices.later:
        return [prices] * rec.n_calls
    by_day: dict[str, Prices] = {}
    chosen = []
    for seconds in rec.call_times.tolist():
        if math.isnan(seconds):  # unknown time
            chosen.append(prices)
            continue
        day = datetime.fromtimestamp(seconds, UTC).date().isoformat()
        chosen.append(by_day.setdefault(day, prices.on(day)))
    return chosen


class Meter:
    """Running sums of one replay in $ · 1e6 (tokens · $/MTok), counts, and the cache state.

    Every request is priced at ``day.at(its prompt tokens)``: ``day`` is the prices in force on
    the call's day (set by the caller before each call, :func:`call_prices`), ``at`` its
    whole-request tier (DESIGN §8). Cache writes at ``p_write`` (the session's mix of 5-minute
    and 1-hour writes). Reads are ``ReplayParams.cache_hit_share`` × the cached prefix.
    """

    def __init__(self, params: ReplayParams) -> None:
        self.params = params
        self.day = params.prices
        self.hit = params.cache_hit_share
        self.read = self.input = self.write = self.output = self.compaction = self.loss = self.floor = 0.0
        self.compactions = self.overflows = self.truncations = self.refetches = self.forced = 0
        self.clearings = self.cleared_tokens = 0
        self.cached = params.warm_tokens  # tokens of the live prompt's prefix still in the cache (at first: of V, from an earlier session)
        self.last_time = float("nan")
        self.last_fresh = 0.0  # tokens of the last request's prompt not read from the cache
        self.schedule: list[tuple[int, int]] = []
        self.events: list[CompactionEvent] = []
        self.refetch_log: list[RefetchEvent] = []
        self.dropped_by: dict[int, int] = {}  # message -> index of the event that dropped it last
        self.forcing = False  # True while an overflow's fallback is applied

    @property
    def total(self) -> float:
        """$ · 1e6 charged so far."""
        return self.read + self.input + self.write + self.output + self.compaction + self.loss

    def expire(self, now: float) -> None:
        """Empty the cache when more than the TTL passed since the last request (unknown times never do)."""
        ttl = self.params.cache_ttl_s
        if ttl is not None and now - self.last_time > ttl:  # NaN compares False
            self.cached = 0

    def _prompt(self, prompt: int, prices: Prices) -> tuple[float, float, float]:
        """(read, input, write) $·1e6 of a request's prompt: its cached prefix (times the hit share), the rest uncached."""
        read = min(self.cached, prompt) * self.hit
        fresh = prompt - read
        if prices.p_cache_write is None and prices.p_cache_write_1h is None:
            return read * prices.p_cache, fresh * prices.p_input, 0.0
        return read * prices.p_cache, 0.0, fresh * prices.p_write

    def request(self, prompt: int, output: int, carried: int) -> None:
        """Charge one call (``carried`` refetched tokens read from cache as loss); its prompt is cached afterwards."""
        prices = self.day.at(prompt)
        read, fresh_input, fresh_write = self._prompt(prompt, prices)
        self.last_fresh = prompt - min(self.cached, prompt) * self.hit
        self.read, self.input, self.write = self.read + read, self.input + fresh_input, self.write + fresh_write
        self.output += output * prices.p_out
        self.loss += carried * prices.p_cache
        self.floor += prompt * min(prices.p_cache, prices.p_input, prices.p_write) + output * prices.p_out
        self.cached = prompt

    def summarize(self, head_prompt: int, kept_prefix: int, carried: int, summary_tokens: int | None = None) -> None:
        """Charge a summarization request over ``V + H`` tokens (DESIGN §2 ③, cache-aware) plus carried
        refetches; ``summary_tokens`` output (S of the params when None)."""
        prices = self.day.at(head_prompt + L_INSTR_TOKENS)
        read = min(self.cached, head_prompt) * self.hit
        summary = self.params.s_tokens if summary_tokens is None else summary_tokens
        self.compaction += compaction_request_cost(read, head_prompt - read, summary, prices)
        self.loss += carried * prices.p_cache
        self.compactions += 1
        self.cached = kept_prefix

    def refetch(self, prompt: int, message_tokens: int) -> None:
        """Charge fetching one dropped message again before a call whose prompt is ``prompt`` tokens."""
        prices = self.day.at(prompt)
        self.loss += prompt * prices.p_cache + REFETCH_OUTPUT_TOKENS * prices.p_out + message_tokens * prices.p_write
        self.refetches += 1


#: The meter's former private name.
_Meter = Meter


def _clear(ctx: CallContext, meter: Meter, clearing: Clearing) -> None:
    """Carry out a clearing (module point 5b): no request; the cache keeps V and the live prompt
    before the first message it changes. Nothing happens when it changes no live message."""
    live, rec, v = ctx.live, ctx.rec, ctx.params.v_tokens
    if not 0 <= clearing.depth <= live.end:
        raise ValueError(f"clearing depth {clearing.depth} outside [0, {live.end}]")
    old = live.cleared_depth
    seen = int(rec.call_positions[ctx.call - 1]) if ctx.call > 0 else 0  # only results a call has read are cleared
    depth = min(clearing.depth, max(seen, old))
    changed = np.flatnonzero(rec.clearable_messages[old:max(depth, old)]) + old
    changed = changed[(changed < live.pinned) | ((changed >= live.start) & (changed < live.end))]
    if changed.size == 0:
        return
    first = int(changed[0])
    if first < live.pinned:
        kept = int(rec.prefix_tokens[first]) - live.saved(rec, 0, first)
    else:
        kept = live.tokens(rec) - int(tail_tokens(ctx, np.array([first]))[0])
    before, cached_before = snapshot(live), meter.cached
    size = live.tokens(rec)
    live.cleared_depth = max(depth, old)
    saved = size - live.tokens(rec)
    ctx.prompt_tokens = v + live.tokens(rec)
    meter.cached = min(meter.cached, v + kept)
    meter.clearings += 1
    meter.cleared_tokens += saved
    cleared = frozenset(changed.tolist())
    meter.dropped_by.update(dict.fromkeys(cleared, len(meter.events)))
    meter.events.append(CompactionEvent(
        call=ctx.call, cut=clearing.depth, summarize=False, forced=meter.forcing, request_usd=0.0, summary_tokens=saved,
        head_prompt_tokens=0, live_before=before, cached_before=cached_before, last_time=meter.last_time, dropped=cleared,
        action="clear"))


def _apply(ctx: CallContext, meter: Meter, compaction: Compaction | Clearing) -> None:
    """Carry out a compaction or hard truncation on the live state, charging its request (a clearing: :func:`_clear`)."""
    if isinstance(compaction, Clearing):
        _clear(ctx, meter, compaction)
        return
    live, rec, v = ctx.live, ctx.rec, ctx.params.v_tokens
    if not live.start <= compaction.cut <= live.end or compaction.pinned > compaction.cut:
        raise ValueError(f"compaction cut {compaction.cut} outside the live tail [{live.start}, {live.end}]")
    head_prompt = v + live.tokens(rec) - int(tail_tokens(ctx, np.array([compaction.cut]))[0])
    kept_prefix = v + int(rec.prefix_tokens[compaction.pinned]) - live.saved(rec, 0, compaction.pinned)
    before, cached_before, charged = snapshot(live), meter.cached, meter.compaction
    if compaction.summarize:
        live.head_messages = compaction.cut - live.start + (live.carry_tokens > 0)
        meter.summarize(head_prompt, kept_prefix, live.refetched_tokens)
        meter.schedule.append((ctx.call, compaction.cut))
        live.compactions += 1
    else:
        meter.truncations += 1
        meter.cached = min(meter.cached, kept_prefix)
    live.pinned, live.carry_tokens, live.start = compaction.pinned, compaction.carry_tokens, compaction.cut
    live.kept, live.refetched, live.refetched_tokens = compaction.kept, set(), 0
    ctx.prompt_tokens = v + live.tokens(rec)
    dropped = live_messages(before) - live_messages(live)
    meter.dropped_by.update(dict.fromkeys(dropped, len(meter.events)))
    meter.events.append(CompactionEvent(
        call=ctx.call, cut=compaction.cut, summarize=compaction.summarize, forced=meter.forcing,
        request_usd=(meter.compaction - charged) / 1e6, summary_tokens=compaction.carry_tokens,
        head_prompt_tokens=head_prompt if compaction.summarize else 0, live_before=before, cached_before=cached_before,
        last_time=meter.last_time, dropped=dropped, action="summarize" if compaction.summarize else "truncate"))


def _fit(ctx: CallContext, policy: Policy, meter: Meter) -> None:
    """An overflow (module point 5): count it (the rejected request costs nothing), apply the
    policy's fallback or, for a policy without one, a forced summary-only compaction (charged,
    counted in ``forced``), then a hard truncation only if even that does not fit."""
    meter.overflows += 1
    meter.forcing = True
    fallback = policy.on_overflow(ctx)
    if fallback is None and (fallback := forced_summary(ctx)) is not None:
        meter.forced += 1
    if fallback is not None:
        _apply(ctx, meter, fallback)
    if ctx.prompt_tokens > ctx.params.window and (cut := truncation(ctx)) is not None:
        _apply(ctx, meter, cut)
    meter.forcing = False


def _refetch(ctx: CallContext, meter: Meter, messages: Int64s) -> None:
    """Fetch again the dropped messages among ``messages`` (used by the coming call), in order."""
    live, tokens = ctx.live, ctx.rec.message_tokens
    for message in messages.tolist():
        if live.missing(message, ctx.rec):
            before = meter.loss
            meter.refetch(ctx.prompt_tokens, int(tokens[message]))
            meter.refetch_log.append(RefetchEvent(ctx.call, message, int(tokens[message]), (meter.loss - before) / 1e6,
                                                  meter.dropped_by.get(message, -1)))
            live.refetched.add(message)
            live.refetched_tokens += int(tokens[message])


def replay(rec: Recording, policy: Policy, params: ReplayParams) -> PolicyResult:
    """Price ``rec`` call by call under ``policy`` (the model of this module's docstring).

    Parameters
    ----------
    rec : Recording
        Messages, their tokens, the recorded calls (positions, output tokens, times) and uses.
    policy : Policy
        Decides before each call whether to compact, and what to do on an overflow.
    params : ReplayParams
        Prices ($/MTok), window M, V and S (tokens), cache TTL (s), loss mode.

    Returns
    -------
    PolicyResult
        $ per term, counts, peak and mean context, the compaction schedule.

    Raises
    ------
    ValueError
        If the policy returns a cut outside the live tail.
    """
    if getattr(policy, "replays_recording", False):  # the recorded policy (dp_compact.replay.recorded)
        return policy.replay(rec, params)  # type: ignore[attr-defined, no-any-return]
    live = Live()
    ctx = CallContext(rec, live, params)
    meter = Meter(params)
    prices = call_prices(rec, params.prices)
    contexts = np.zeros(rec.n_calls, dtype=np.int64)
    counted = np.zeros(rec.n_calls, dtype=np.int64)
    call_usd, fresh = np.zeros(rec.n_calls), np.zeros(rec.n_calls)
    charge_loss = params.loss == "refetch"
    bounds = np.searchsorted(rec.use_calls, np.arange(rec.n_calls + 1))
    for j in range(rec.n_calls):
        live.end = int(rec.call_positions[j])
        ctx.call, ctx.prompt_tokens = j, params.v_tokens + live.tokens(rec)
        now = float(rec.call_times[j])
        meter.day = prices[j]
        meter.expire(now)
        spent = meter.total - meter.compaction
        if (decision := policy.before_call(ctx)) is not None:
            _apply(ctx, meter, decision)
        if ctx.prompt_tokens > params.window:
            _fit(ctx, policy, meter)
        if charge_loss and bounds[j + 1] > bounds[j]:
            _refetch(ctx, meter, rec.use_messages[bounds[j]:bounds[j + 1]])
        meter.request(ctx.prompt_tokens, int(rec.output_tokens[j]), live.refetched_tokens)
        meter.last_time = now
        call_usd[j], fresh[j] = (meter.total - meter.compaction - spent) / 1e6, meter.last_fresh
        contexts[j] = ctx.prompt_tokens
        counted[j] = ctx.counted_tokens
        ctx.prompts.append(ctx.prompt_tokens)
    for array in (contexts, counted, call_usd, fresh):
        array.setflags(write=False)
    return PolicyResult(
        policy=policy.name, fixed=policy.fixed, calls=rec.n_calls, cache_read_usd=meter.read / 1e6,
        input_usd=meter.input / 1e6, write_usd=meter.write / 1e6, output_usd=meter.output / 1e6,
        compaction_usd=meter.compaction / 1e6, loss_usd=meter.loss / 1e6, compactions=meter.compactions,
        overflows=meter.overflows, truncations=meter.truncations, forced=meter.forced, refetches=meter.refetches,
        summary_tokens=params.s_tokens, peak_context_tokens=int(contexts.max()) if contexts.size else 0,
        mean_context_tokens=float(contexts.mean()) if contexts.size else 0.0, floor_usd=meter.floor / 1e6,
        contexts=contexts, counted_contexts=counted, schedule=tuple(meter.schedule), call_usd=call_usd,
        fresh_tokens=fresh, events=tuple(meter.events), refetch_log=tuple(meter.refetch_log), clearings=meter.clearings,
        cleared_tokens=meter.cleared_tokens,
    )


def prefix_floor_usd(rec: Recording, params: ReplayParams) -> float:
    """A floor for every policy, $: each call reads at least V (``params.v_tokens``, tokens) from cache
    and pays its recorded output, at the prices of its day and of a V-sized request's tier."""
    total = 0.0
    for day, output in zip(call_prices(rec, params.prices), rec.output_tokens.tolist(), strict=True):
        prices = day.at(params.v_tokens)
        total += params.v_tokens * min(prices.p_cache, prices.p_input, prices.p_write) + output * prices.p_out
    return total / 1e6
