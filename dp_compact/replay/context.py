"""What a compaction policy sees and answers during a replay (:mod:`dp_compact.replay.meter`).

The live conversation (:class:`Live`), the call about to be made (:class:`CallContext`), the
policy interface (:class:`Policy`) and its answers (:class:`Compaction`: where the new tail
starts, the block carried over; :class:`Clearing`: clear the long tool results before a depth,
DESIGN §9), and the fallback every policy shares: a hard truncation at a feasible cut
(:func:`truncation`, the cut rules of :mod:`dp_compact.core.cuts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from dp_compact.core.cuts import feasible_cut_mask
from dp_compact.replay.recording import Recording, ReplayParams

__all__ = ["Action", "CallContext", "Clearing", "Compaction", "Live", "Policy", "forced_summary", "tail_cut_mask", "tail_tokens", "truncation"]


@dataclass(slots=True)
class Live:
    """The live conversation: ``history[:pinned] + [carry block] + history[start:end]``; ``compactions`` so far.

    ``kept``: head messages the block holds verbatim (Codex's user messages); ``refetched``:
    dropped messages fetched again since the last compaction, and their ``refetched_tokens``;
    ``head_messages``: messages the last compaction replaced (a block among them counts as one);
    ``cleared_depth``: the long tool results of every live message before it are cleared
    (:class:`Clearing`; :attr:`Recording.cleared_prefix` holds the tokens it saves); a cleared message
    fetched again is in ``refetched``.
    """

    pinned: int = 0
    carry_tokens: int = 0
    start: int = 0
    end: int = 0
    compactions: int = 0
    kept: frozenset[int] = frozenset()
    refetched: set[int] = field(default_factory=set)
    refetched_tokens: int = 0
    head_messages: int = 0
    cleared_depth: int = 0

    def dropped(self, message: int) -> bool:
        """True when history message ``message`` is in no part of the live context."""
        return self.pinned <= message < self.start and message not in self.kept and message not in self.refetched

    def cleared(self, message: int, rec: Recording) -> bool:
        """True when ``message`` is live but its long tool results are cleared (and it was not fetched again)."""
        visible = message < self.pinned or self.start <= message < self.end
        return (visible and message < self.cleared_depth and bool(rec.clearable_messages[message])
                and message not in self.refetched)

    def missing(self, message: int, rec: Recording) -> bool:
        """True when a use of ``message`` needs a refetch: dropped, or its tool results cleared (DESIGN §6, §9)."""
        return self.dropped(message) or self.cleared(message, rec)

    def saved(self, rec: Recording, lo: int, hi: int) -> int:
        """Tokens clearing took out of history messages ``[lo, hi)`` (those before ``cleared_depth``)."""
        s = rec.cleared_prefix
        return int(s[max(min(self.cleared_depth, hi), lo)] - s[lo]) if hi > lo else 0

    def tokens(self, rec: Recording) -> int:
        """Tokens of the live messages (without V), cleared tool results as their placeholders."""
        p = rec.prefix_tokens
        return int(p[self.pinned] + self.carry_tokens + p[self.end] - p[self.start]
                   - self.saved(rec, 0, self.pinned) - self.saved(rec, self.start, self.end))

    def counted(self, rec: Recording) -> int:
        """Tokens of the live messages as the recorded tool's provider counted them (module point 7)."""
        c = rec.prefix_tokens if rec.counted_prefix is None else rec.counted_prefix
        return int(c[self.pinned] + self.carry_tokens + c[self.end] - c[self.start]
                   - self.saved(rec, 0, self.pinned) - self.saved(rec, self.start, self.end))


@dataclass(frozen=True, slots=True)
class Compaction:
    """A policy's action before a call: the live head becomes one block.

    ``cut``: history index where the new tail starts (tail ``[cut, end)``); ``carry_tokens``:
    the block replacing the head (S, or S plus kept user messages); ``pinned``: first messages
    kept before the block; ``summarize``: False for a hard truncation (no request, no block);
    ``kept``: head messages the block holds verbatim (not lost).
    """

    cut: int
    carry_tokens: int
    pinned: int = 0
    summarize: bool = True
    kept: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Clearing:
    """A policy's action before a call: clear the long tool results of the live messages before ``depth``
    (DESIGN §9; :mod:`dp_compact.measure.clearing`).

    No message is removed and no summary is requested; the prompt loses the cleared results'
    tokens less their placeholders', and the cache is rewritten from the first message it changes.
    """

    depth: int


#: What a policy may answer before a call.
Action = Compaction | Clearing


@dataclass(slots=True)
class CallContext:
    """What a policy sees before call ``call``; policies read it and never modify it.

    ``prompt_tokens``: the prompt about to be sent (V included); ``prompts``: the prompts of the
    calls made so far, tokens, as replayed.
    """

    rec: Recording
    live: Live
    params: ReplayParams
    call: int = 0
    prompt_tokens: int = 0
    prompts: list[int] = field(default_factory=list)

    @property
    def counted_tokens(self) -> int:
        """The prompt about to be sent as the recorded tool's provider would count it, tokens
        (module point 7): the fixed prefix as counted, the live messages and what arrived unseen
        with them. Equals :attr:`prompt_tokens` when the recording has no usage records."""
        counted_v = self.params.v_tokens if self.rec.counted_v is None else self.rec.counted_v
        return max(counted_v + self.live.counted(self.rec), 0)


class Policy(Protocol):
    """A compaction policy; ``fixed`` marks a fixed rule (compared as "best fixed policy"); ``tool``
    names the tool whose summary size it is charged (DESIGN §6; "" = ``DP_S``)."""

    name: str
    fixed: bool
    tool: str

    def before_call(self, ctx: CallContext) -> Compaction | Clearing | None:
        """The compaction (or clearing) to make before the call, or None."""
        ...

    def on_overflow(self, ctx: CallContext) -> Compaction | None:
        """The forced fallback when the prompt exceeds the window, or None (hard truncation)."""
        ...


def tail_cut_mask(rec: Recording, start: int, end: int) -> npt.NDArray[np.bool_]:
    """Feasible cuts (DESIGN §1) of the verbatim tail ``[start, end)``; shape (end − start + 1,).

    Entry ``i − start`` tells whether the tail may start at message ``i``; a tool call made before
    ``start`` no longer binds its result. Entries 0 and ``end − start`` are False.
    """
    return feasible_cut_mask(rec.arrays.slice(start, end))


def tail_tokens(ctx: CallContext, cuts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Tokens of the verbatim tail ``[cut, end)`` for each of ``cuts``, cleared results as their placeholders."""
    rec, live = ctx.rec, ctx.live
    s, end = rec.cleared_prefix, live.end
    depth = np.clip(min(live.cleared_depth, end), cuts, None)
    return rec.prefix_tokens[end] - rec.prefix_tokens[cuts] - (s[depth] - s[cuts])


def forced_summary(ctx: CallContext) -> Compaction | None:
    """What a tool without a fallback of its own does when the provider rejects a prompt above the
    window (DESIGN §8 "No free overflow"): a summary-only compaction, every live message but the
    last API round (the deepest feasible cut of the tail) into a summary of S tokens
    (``ReplayParams.s_tokens``); None when the tail has no feasible cut."""
    live = ctx.live
    mask = tail_cut_mask(ctx.rec, live.start, live.end)
    cuts = np.flatnonzero(mask)
    if cuts.size == 0:
        return None
    return Compaction(cut=live.start + int(cuts[-1]), carry_tokens=ctx.params.s_tokens)


def truncation(ctx: CallContext) -> Compaction | None:
    """Hard truncation: the shallowest feasible cut whose prompt fits M, else the deepest; None if none.

    The tail's start itself is a candidate when a pinned part or block is there to drop.
    """
    live, rec, params = ctx.live, ctx.rec, ctx.params
    mask = tail_cut_mask(rec, live.start, live.end)
    mask[0] = live.pinned > 0 or live.carry_tokens > 0
    cuts = live.start + np.flatnonzero(mask)
    if cuts.size == 0:
        return None
    prompts = params.v_tokens + tail_tokens(ctx, cuts)
    fits = np.flatnonzero(prompts <= params.window)
    return Compaction(cut=int(cuts[fits[0]] if fits.size else cuts[-1]), carry_tokens=0, summarize=False)
