"""The replay's policies that plan (:mod:`dp_compact.replay`): dp_compact's planner and the hindsight oracle.

``dp`` and ``seed`` (:class:`PlannerPolicy`) ask the planner (DESIGN §2, §7) before every call;
``oracle`` (:class:`Oracle`) carries out the hindsight-optimal schedule of
:func:`~dp_compact.replay.oracle.oracle_schedule` (:class:`Schedule`). The fixed rules of the
other tools and the ``--policy`` parser are :mod:`dp_compact.replay.policies`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dp_compact.conversation import Message, Session, Usage
from dp_compact.core.cuts import ROLE_USER, MessageArrays
from dp_compact.core.hits import HitShare
from dp_compact.core.planner import plan
from dp_compact.core.timing import RECENT_GAPS, Timing
from dp_compact.replay.meter import CallContext, Clearing, Compaction
from dp_compact.replay.oracle import oracle_schedule
from dp_compact.settings import Settings

__all__ = ["ORACLE", "Oracle", "PlannerPolicy", "Schedule"]

#: Stands for the carry block in the planner's view of the live conversation.
_SUMMARY = Message("user", "[summary]", raw={"role": "user", "content": "[summary]"})


@dataclass
class PlannerPolicy:
    """dp_compact's planner (DESIGN §2) consulted before every call, as an agent would call it.

    The planner sees the live conversation (the carry block as one user message of its tokens),
    the token counts and message structure sliced from the recording (never re-tokenized), and
    the usage records of the calls replayed so far and the prompt about to be sent (the current
    context, which the replay knows exactly). On an overflow it is asked again with the rejected
    prompt as the current context, so its forced rule applies.

    V is what ``dp-compact plan`` would take at that point of the session: before the first call
    the settings' ``v`` (``DP_V``: the file records no usage yet); from the first call on, the
    session's own prefix that the first call's usage record measures, as the replay charges it
    (``ReplayParams.v_tokens`` with ``v_source == "measured"``, the prepared V:
    :func:`dp_compact.prepare.prepare`); ``DP_V`` / ``--v`` given, that value throughout. It is
    handed to the planner (``v_tokens``); the settings stay as the user gave them.

    Time (DESIGN §8): the planner is told the seconds since the previous recorded call
    (``Recording.call_times``; unknown before the first call or without times) and the replay's
    cache TTL (``ReplayParams.cache_ttl_s``; None: the cache never expires), so that after a
    pause longer than the TTL it sees the cache cold and may compact on resume, where the
    rewrite is free.

    The cache-hit share (DESIGN §8): the planner prices every cached token at the share the
    replay's meter applies (``ReplayParams.cache_hit_share``, measured from the session's usage
    records by :func:`dp_compact.replay.recorded.measured_hit_share`), so that it expects the bill
    it is judged by (:meth:`hit_at`).
    """

    settings: Settings
    name: str = "dp"
    fixed: bool = False
    tool: str = "dp_compact"
    _usage: list[Usage] = field(default_factory=list, repr=False)

    def v_at(self, ctx: CallContext) -> int:
        """V, tokens, a live plan would use before call ``ctx.call`` (the class docstring's)."""
        if ctx.call < 1 or ctx.params.v_source != "measured" or "v" in self.settings.model_fields_set:
            return self.settings.v
        return ctx.params.v_tokens

    def timing_at(self, ctx: CallContext) -> Timing:
        """What the planner knows of time before call ``ctx.call`` (the class docstring's)."""
        times, j = ctx.rec.call_times, ctx.call
        idle = float(times[j] - times[j - 1]) if 0 < j < times.size else math.nan
        ttl = ctx.params.cache_ttl_s
        recent = tuple(np.diff(times[max(j - RECENT_GAPS, 0):j]).tolist()) if j > 1 else ()
        return Timing(idle if math.isfinite(idle) else None, cache_ttl_s=math.inf if ttl is None else float(ttl), source="replay",
                      imminent=True, recent_gaps_s=recent)

    def hit_at(self, ctx: CallContext) -> HitShare:
        """The cache-hit share the planner prices (the class docstring's), with its source."""
        share = float(getattr(ctx.params, "cache_hit_share", 1.0))
        return HitShare(share, "the replay's share, measured from the session's usage records" if share < 1.0 else "")

    def before_call(self, ctx: CallContext) -> Compaction | Clearing | None:
        del self._usage[len(ctx.prompts):]
        self._usage.extend(Usage(p) for p in ctx.prompts[len(self._usage):])
        return self._ask(ctx, (*self._usage, Usage(ctx.prompt_tokens)))  # the prompt about to be sent is known

    def on_overflow(self, ctx: CallContext) -> Compaction | None:
        return self.before_call(ctx)  # asked again with the rejected prompt as the current context

    def _ask(self, ctx: CallContext, usage: tuple[Usage, ...]) -> Compaction | Clearing | None:
        live, rec = ctx.live, ctx.rec
        if live.pinned:
            raise ValueError("the planner policy never pins messages")
        carry = live.carry_tokens > 0
        messages = ((_SUMMARY,) if carry else ()) + rec.messages[live.start:live.end]
        tokens = rec.message_tokens[live.start:live.end]
        # clearing (DESIGN §9): messages before the cleared depth hold placeholders (live.tokens counts
        # them so); the planner may clear those from it on, by the recording's exact counts
        saved = np.diff(rec.cleared_prefix)[live.start:live.end]
        below = np.arange(live.start, live.end) < live.cleared_depth
        tokens = tokens - np.where(below, saved, 0)
        clear_saved = np.where(below, 0, saved).astype(np.int64)
        if carry:
            tokens = np.concatenate(([live.carry_tokens], tokens))
            clear_saved = np.concatenate(([0], clear_saved))
        arrays = _live_arrays(rec.arrays, live.start, live.end, carry)
        turns = int(rec.arrays.turn_index[live.end - 1]) if live.end else 0  # t: user turns so far, whole history
        session = Session(path=rec.path, format=rec.format, messages=messages, usage=usage, user_turns=turns,
                          llm_calls=max(len(usage) - 1, 0), compactions=live.compactions, earlier_messages=live.head_messages if carry else 0)
        result = plan(session, tokens, self.settings, ctx.params.prices, arrays=arrays, v_tokens=self.v_at(ctx),
                      timing=self.timing_at(ctx), cache_hit=self.hit_at(ctx), clear_saved=clear_saved)
        if result.decision == "clear" and result.clearing is not None:
            return Clearing(depth=live.start + int(result.clearing["depth"]) - int(carry))
        if result.decision != "compact":
            return None
        # a provider's compaction keeping the user messages (DP_NATIVE=openai-compact: its plan cuts at N) carries them
        # with the summary; their later uses are still charged as a loss (an upper bound)
        kept = result.tail_tokens if (result.lookahead or {}).get("native", {}).get("action") == "openai-compact" else 0
        return Compaction(cut=live.start + result.cut - int(carry), carry_tokens=ctx.params.s_tokens + kept)


def _live_arrays(a: MessageArrays, start: int, end: int, carry: bool) -> MessageArrays:
    """MessageArrays of ``[carry block] + history[start:end]``: :meth:`MessageArrays.slice` of the
    recording's arrays, behind the carried summary (a user message, not a user turn) when ``carry``."""
    live = a.slice(start, end)
    if not carry:
        return live
    calls = np.where(live.call_index >= 0, live.call_index + 1, -1)
    return MessageArrays(
        np.concatenate((np.array([ROLE_USER], dtype=np.int8), live.roles)), np.concatenate(([-1], calls)).astype(np.int64),
        np.concatenate(([0], live.turn_index)).astype(np.int64), np.concatenate(([0], live.round_index)).astype(np.int64),
        np.concatenate(([True], live.plain_user)),
    )


@dataclass(frozen=True)
class Schedule:
    """A fixed list of compactions and clearings: before call ``call``, compact to the tail starting
    at ``cut``, or clear the long tool results before ``depth`` (:class:`Clearing`, DESIGN §9).

    The oracle's schedule is replayed through the meter with this policy (``name="oracle"``).
    ``cuts`` maps call -> cut; a cut not strictly inside the live tail is skipped (a cut at the
    call's position is the oracle's record of a forced compaction, which the overflow makes).
    ``clearings`` maps call -> depth (a call has one action: a clearing there wins). On an
    overflow: a forced summary-only compaction (:func:`_summary_only`), the oracle's rule.
    """

    name: str
    cuts: dict[int, int]
    fixed: bool = False
    tool: str = "dp_compact"
    clearings: dict[int, int] = field(default_factory=dict)

    def before_call(self, ctx: CallContext) -> Compaction | Clearing | None:
        depth = self.clearings.get(ctx.call)
        if depth is not None and depth <= ctx.live.end:
            return Clearing(depth)
        cut = self.cuts.get(ctx.call)
        if cut is None or not ctx.live.start < cut < ctx.live.end:
            return None
        return Compaction(cut=cut, carry_tokens=ctx.params.s_tokens)

    def on_overflow(self, ctx: CallContext) -> Compaction | None:
        return _summary_only(ctx)


def _summary_only(ctx: CallContext) -> Compaction:
    """The forced compaction of an overflow that the oracle prices (DESIGN §8 "No free overflow"):
    the whole live conversation summarized into S tokens (``ReplayParams.s_tokens``), an empty
    tail; one compaction request."""
    return Compaction(cut=ctx.live.end, carry_tokens=ctx.params.s_tokens)


#: ``--policy oracle``'s name.
ORACLE = "oracle"


@dataclass
class Oracle:
    """The hindsight optimum as a policy: at the first call of a recording it solves
    :func:`~dp_compact.replay.oracle.oracle_schedule` for that recording and its params, then
    carries the schedule out (:class:`Schedule`), so its replay costs what the oracle says. Where
    no schedule keeps a prompt within the window, the overflow forces a summary-only compaction
    (:func:`_summary_only`), as the oracle priced it."""

    name: str = ORACLE
    fixed: bool = False
    tool: str = "dp_compact"
    _schedule: Schedule | None = field(default=None, repr=False)

    def before_call(self, ctx: CallContext) -> Compaction | Clearing | None:
        if ctx.call == 0 or self._schedule is None:
            best = oracle_schedule(ctx.rec, ctx.params)
            self._schedule = Schedule(self.name, dict(best.schedule), clearings=dict(best.clearings))
        return self._schedule.before_call(ctx)

    def on_overflow(self, ctx: CallContext) -> Compaction | None:
        return _summary_only(ctx)
