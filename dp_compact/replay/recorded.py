"""``--policy recorded``: the session as its tool really ran it (DESIGN §8 "As recorded").

The other policies decide when to compact; this one replays what the recorded tool did, through
the same meter (:class:`~dp_compact.replay.meter.Meter`: cache, TTL, dated prices, tiers, the
measured cache-hit share), so that its total can be checked against the bill computed from the
recorded usage (:mod:`dp_compact.replay.bill`):

- **Prompts as recorded.** A call with a usage record sends the prompt the record states
  (``Recording.recorded_prompts``, provider tokens). A call without one sends the previous prompt
  plus what the messages added since then count on the provider's scale
  (``Recording.counted_prefix``); the first call of a segment, ``V`` as counted
  (``Recording.counted_v``) plus the block a recorded compaction left plus its messages.
- **Its own compactions** (``Recording.cuts``, from ``Session.compaction_records``): before the
  first call after each, a summarization request over the context when it fired (the record's
  ``pre_tokens``; else the last prompt plus its output), cache-aligned as every compaction request
  of the meter, whose output is the summary the tool wrote (its recorded text counted on the
  provider's scale; else S). The cache then keeps V; the next recorded prompt is the tool's own
  (the summary and what followed).
- **No loss, no overflow.** The recording is what happened: the tool's own refetches are calls in
  it, and a prompt the provider accepted did not overflow. ``loss_usd`` is 0, ``overflows`` 0.

:func:`measured_hit_share` measures, from the same recorded prompts, the share of the cached
prefix the provider really served (``ReplayParams.cache_hit_share``, applied to every policy).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from dp_compact.replay.meter import Meter, PolicyResult, call_prices
from dp_compact.replay.recording import RecordedCut, Recording, ReplayParams

__all__ = ["RECORDED", "Recorded", "RecordedCosts", "RecordedState", "measured_hit_share", "recorded_costs", "replay_recorded",
           "unrecorded_shrinks"]

#: The policy's name (``--policy recorded``).
RECORDED = "recorded"

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class RecordedCosts:
    """The recorded replay with its costs per call.

    Attributes
    ----------
    result : PolicyResult
        The ``recorded`` policy's result.
    call_usd : ndarray[float64], shape (C,)
        $ of each call (its prompt and output; the compaction requests apart).
    model_reads : ndarray[float64], shape (C,)
        Tokens of each call's prompt the meter's cache held before it (before the hit share).
    compaction_usd : tuple[float, ...]
        $ of each recorded compaction's request, in order.
    fresh_tokens : ndarray[float64], shape (C,)
        Tokens of each call's prompt not read from the cache (written, or uncached input).
    before_cuts : tuple[RecordedState, ...]
        The replay's state just before each recorded compaction, in order (for its receipt,
        :mod:`dp_compact.replay.receipts`).
    """

    result: PolicyResult
    call_usd: Floats
    model_reads: Floats
    compaction_usd: tuple[float, ...]
    fresh_tokens: Floats = field(default_factory=lambda: np.zeros(0))
    before_cuts: tuple[RecordedState, ...] = ()


@dataclass(frozen=True, slots=True)
class RecordedState:
    """The recorded replay just before a recorded compaction: its call (the first after it),
    the tokens the cache held, the previous call's prompt in its segment (None at a segment's
    start), where that segment starts (history index), the block it began with (tokens), and the
    previous call's time (epoch seconds, NaN when unknown)."""

    call: int
    cached_tokens: int
    last_prompt: int | None
    segment: int
    carry_tokens: int
    last_time: float


def recorded_costs(rec: Recording, params: ReplayParams) -> RecordedCosts:
    """Replay ``rec`` as its tool ran it (module docstring), with each call's $.

    Parameters
    ----------
    rec : Recording
        With its recorded prompts and compactions (:func:`dp_compact.replay.load.prepared_recording`).
    params : ReplayParams
        Prices ($/MTok), V and S (tokens; S for a compaction whose summary is not recorded), TTL
        (s), the cache-hit share.

    Returns
    -------
    RecordedCosts
    """
    meter = Meter(params)
    prices = call_prices(rec, params.prices)
    counted = rec.prefix_tokens if rec.counted_prefix is None else rec.counted_prefix
    v = params.v_tokens if rec.counted_v is None else rec.counted_v
    prompts = rec.recorded_prompts if rec.recorded_prompts is not None else np.full(rec.n_calls, -1, np.int64)
    cuts: dict[int, list[RecordedCut]] = {}
    for cut in rec.cuts:
        cuts.setdefault(cut.call, []).append(cut)
    call_usd, reads = np.zeros(rec.n_calls), np.zeros(rec.n_calls)
    contexts = np.zeros(rec.n_calls, dtype=np.int64)
    compaction_usd: list[float] = []
    fresh, states = np.zeros(rec.n_calls), []
    last: int | None = None  # the previous call's prompt in this segment, tokens
    last_output = segment = carry = 0
    for j in range(rec.n_calls + 1):
        if j < rec.n_calls:
            meter.day = prices[j]
            meter.expire(float(rec.call_times[j]))
        for cut in cuts.get(j, ()):
            context = cut.context_tokens or (last + last_output if last is not None else v + carry + int(counted[cut.position] - counted[segment]))
            summary = params.s_tokens if cut.summary_tokens is None else cut.summary_tokens
            states.append(RecordedState(j, meter.cached, last, segment, carry, meter.last_time))
            before = meter.compaction
            meter.summarize(int(context), v, 0, summary)
            compaction_usd.append((meter.compaction - before) / 1e6)
            meter.schedule.append((j, cut.position))
            last, segment, carry = None, cut.position, summary
        if j == rec.n_calls:
            break
        position = int(rec.call_positions[j])
        if prompts[j] >= 0:
            prompt = int(prompts[j])
        elif last is not None:
            prompt = max(last + int(counted[position] - counted[int(rec.call_positions[j - 1])]), 0)
        else:
            prompt = max(v + carry + int(counted[position] - counted[segment]), 0)
        reads[j] = min(meter.cached, prompt)
        before = meter.total
        meter.request(prompt, int(rec.output_tokens[j]), 0)
        call_usd[j], fresh[j] = (meter.total - before) / 1e6, meter.last_fresh
        meter.last_time = float(rec.call_times[j])
        contexts[j] = prompt
        last, last_output = prompt, int(rec.output_tokens[j])
    contexts.setflags(write=False)
    result = PolicyResult(
        policy=RECORDED, fixed=False, calls=rec.n_calls, cache_read_usd=meter.read / 1e6, input_usd=meter.input / 1e6,
        write_usd=meter.write / 1e6, output_usd=meter.output / 1e6, compaction_usd=meter.compaction / 1e6, loss_usd=0.0,
        compactions=meter.compactions, overflows=0, truncations=0, refetches=0,
        summary_tokens=max((c.summary_tokens or params.s_tokens for c in rec.cuts), default=params.s_tokens),
        peak_context_tokens=int(contexts.max()) if contexts.size else 0,
        mean_context_tokens=float(contexts.mean()) if contexts.size else 0.0, floor_usd=meter.floor / 1e6,
        contexts=contexts, counted_contexts=contexts, schedule=tuple(meter.schedule), call_usd=call_usd, fresh_tokens=fresh,
    )
    return RecordedCosts(result, call_usd, reads, tuple(compaction_usd), fresh, tuple(states))


def replay_recorded(rec: Recording, params: ReplayParams) -> PolicyResult:
    """The ``recorded`` policy's result (:func:`recorded_costs`)."""
    return recorded_costs(rec, params).result


def measured_hit_share(rec: Recording, params: ReplayParams) -> tuple[float, str]:
    """The share of the cached prefix the provider really served from its cache, and a note.

    The recorded replay is run with every cached token read (share 1); over the calls with a
    usage record, the share is the recorded cache reads (``Recording.recorded_reads``) over the
    tokens the meter's cache held for them, at most 1. 1 (no note) without usage records, when
    they record no cache reads at all (a source without a cache split), or when the meter's
    cache held nothing.

    Returns
    -------
    (float, str)
        The share, in (0, 1], and a note stating it ("" when it is 1 for lack of evidence).
    """
    if rec.recorded_reads is None or rec.recorded_prompts is None:
        return 1.0, ""
    recorded = rec.recorded_prompts >= 0
    found = rec.recorded_reads[recorded]
    if not recorded.any() or int(found.sum()) <= 0:
        return 1.0, ""
    held = recorded_costs(rec, replace(params, cache_hit_share=1.0)).model_reads[recorded]
    if held.sum() <= 0:
        return 1.0, ""
    share = float(min(found.sum() / held.sum(), 1.0))
    share = max(share, 0.01)
    read, cached = int(found.sum()), int(held.sum())
    if read >= cached:  # the records read at least what the meter's cache held (more: a prefix the meter does not see)
        note = (f"the provider served all of the cached prefix from its cache (its usage records read {read:,} tokens from"
                f" the cache, the meter's cache held {cached:,}): every policy reads its whole cached prefix")
    else:
        note = (f"the provider served {share * 100:.1f} % of the cached prefix from its cache ({read:,} of"
                f" {cached:,} tokens, its usage records): every policy reads that share of its cached prefix"
                " and writes the rest")
    return share, note


#: A recorded prompt smaller than the one before by more than this share of it, with no compaction
#: recorded between them, is a shrink the file does not show (:func:`unrecorded_shrinks`).
SHRINK_SHARE = 0.05


def unrecorded_shrinks(rec: Recording) -> tuple[int, str]:
    """How many times a recorded prompt fell by more than :data:`SHRINK_SHARE` of the one before
    with no compaction recorded between them, and a note saying what that means ("" when none).

    A tool may take content out of its prompts without writing a compaction into the file (Claude
    Code, for one, clears old tool results on its own): its recorded prompts then fall below what
    the file's messages hold, and the ``recorded`` policy costs less than ``never``, which sends
    every message; no other policy knows what that tool took out.
    """
    prompts = rec.recorded_prompts
    if prompts is None:
        return 0, ""
    calls = np.flatnonzero(prompts >= 0)
    if calls.size < 2:
        return 0, ""
    before, after = prompts[calls[:-1]], prompts[calls[1:]]
    cut_calls = np.array(sorted({cut.call for cut in rec.cuts}), dtype=np.int64)
    recorded_cut = np.searchsorted(cut_calls, calls[1:], side="right") > np.searchsorted(cut_calls, calls[:-1], side="right")
    falls = (after < before * (1.0 - SHRINK_SHARE)) & ~recorded_cut
    count = int(falls.sum())
    if count == 0:
        return 0, ""
    at = int(np.argmax(np.where(falls, before - after, -1)))
    note = (f"the recorded prompts fall {count} time(s) with no compaction in the file (the largest: {int(before[at]):,} ->"
            f" {int(after[at]):,} tokens, call {int(calls[at + 1]) + 1}): the recorded tool took content out of its prompts"
            f" that the file does not record as a compaction{' (Claude Code clears old tool results on its own)' if rec.format == 'claude_code' else ''},"
            " so `recorded` can cost less than `never`, which sends every message the file holds")
    return count, note


@dataclass(frozen=True)
class Recorded:
    """``--policy recorded``: what the tool really did (module docstring); the meter's
    :func:`~dp_compact.replay.meter.replay` hands the recording to :meth:`replay`."""

    name: str = RECORDED
    fixed: bool = False
    tool: str = ""
    replays_recording: bool = True

    def replay(self, rec: Recording, params: ReplayParams) -> PolicyResult:
        """:func:`replay_recorded`."""
        return replay_recorded(rec, params)

    def before_call(self, ctx: object) -> None:
        """Never asked: the recording's own compactions apply."""

    def on_overflow(self, ctx: object) -> None:
        """Never asked: a recorded prompt the provider accepted did not overflow."""
