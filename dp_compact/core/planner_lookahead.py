"""The look-ahead decision of DESIGN §7: compact now only when it costs less than the best schedule that waits.

:func:`plan_ahead` is the ``DP_PLANNER=lookahead`` path of :func:`dp_compact.core.planner.plan` (with
``DP_MODEL=recall``): over the feasible cuts keeping at least one API round (:func:`round_keep`)
and at least ``DP_MIN_VERBATIM_TOKENS`` tokens verbatim (:func:`verbatim_bound`),
it prices compacting now and every schedule that waits with :func:`dp_compact.core.lookahead.look_ahead`,
from the growth per call (:func:`growth_per_call`) and the summary size it expects
(:func:`summary_tokens`). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact._fast import replacer
from dp_compact.core.benefit import REFETCH_OUTPUT_TOKENS, BenefitInputs, BenefitTerms, recall_costs
from dp_compact.conversation import Session
from dp_compact.core.decision import (NO_TERMS, RULE_CLEAR, RULE_FIXED_POINT, RULE_FORCE, RULE_LOOKAHEAD, RULE_NO_CUT,
                                      RULE_RESUME, RULE_WAIT, Plan)
from dp_compact.measure.clearing import CLEAR_KEEP_TOOL_RESULTS, is_cleared_text
from dp_compact.measure.columns import usage_columns
from dp_compact.measure.estimation import Estimates
from dp_compact.core.lookahead import Forecast, LookAhead, look_ahead
from dp_compact.core.native_costs import NATIVE_COMPACTIONS, NativeCompaction, native_compaction
from dp_compact.core.tiers import next_cliff
from dp_compact.core.timing import Timing, at_turn_end, cache_state, timing_facts
from dp_compact.pricing import Prices
from dp_compact.settings import Settings

#: :func:`dataclasses.replace` of the benefit inputs and of the look-ahead's values, once per plan (:func:`~dp_compact._fast.replacer`).
_replace_inputs, _replace_ahead = replacer(BenefitInputs), replacer(LookAhead)

__all__ = ["EXTRACTIVE_SUMMARY_TOKENS", "GROWTH_WINDOW_CALLS", "clear_depths", "growth_per_call", "output_per_call", "plan_ahead",
           "rewritten_growth", "round_keep", "summary_tokens", "verbatim_bound"]

#: What the extractive summarizer writes, tokens: median over the 16 shared sessions of
#: ``dp-compact compact --force --dry-run --json``'s ``summary_tokens`` (531-2,243, median 908,
#: measured 2026-12-07 with the summary that lists every request and changed file; DESIGN §6
#: "Summary size per policy"). The look-ahead planner expects this S unless ``DP_S`` is given.
EXTRACTIVE_SUMMARY_TOKENS = 908
#: Calls whose prompt growth gives the forecast's growth per call (DESIGN §7 "recent median").
GROWTH_WINDOW_CALLS = 20


def summary_tokens(settings: Settings) -> int:
    """S the look-ahead planner expects: ``DP_S`` when given, else what the extractive summarizer
    writes (:data:`EXTRACTIVE_SUMMARY_TOKENS`), tokens."""
    return settings.s if "s" in settings.model_fields_set else EXTRACTIVE_SUMMARY_TOKENS


def growth_per_call(prompts: Sequence[int], total_tokens: int, calls: int) -> float:
    """g of DESIGN §7, tokens per call: the median growth of the last ``GROWTH_WINDOW_CALLS``
    recorded prompts (shrinking steps, i.e. compactions, left out); without two prompts, the
    messages' tokens per call so far; at least 1.

    >>> growth_per_call([1000, 1500, 1600, 800, 2000], 0, 5)
    500.0
    """
    last = prompts[-GROWTH_WINDOW_CALLS - 1:]  # a few values: Python floats do numpy's float64 arithmetic, without arrays
    values = [float(p) for p in (last.tolist() if isinstance(last, np.ndarray) else last)]
    grown = [step for step in (b - a for a, b in zip(values, values[1:], strict=False)) if step >= 0]
    return max(_few_median(grown), 1.0) if grown else max(total_tokens / max(calls, 1), 1.0)


def _few_median(values: list[float]) -> float:
    """:func:`_median` of a few Python floats (n ≥ 1) without arrays: the same float64 arithmetic."""
    ordered = sorted(values)
    return (ordered[(len(ordered) - 1) // 2] + ordered[len(ordered) // 2]) / 2


def _median(values: npt.NDArray[np.float64]) -> float:
    """The median of ``values`` (shape (n,), n ≥ 1) as np.median gives it, without the import of
    numpy.ma that np.median makes (about 10 ms a process)."""
    ordered = np.sort(values)
    return float((ordered[(ordered.size - 1) // 2] + ordered[ordered.size // 2]) / 2)


def rewritten_growth(session: Session, tokens: npt.NDArray[np.int64]) -> float | None:
    """g of DESIGN §7 for a conversation rewritten by a compaction or a clearing of old tool results
    (DESIGN §9) whose usage records no longer measure its prompt (fewer than two since): the median,
    over the last ``GROWTH_WINDOW_CALLS`` calls after the rewrite (after the last cleared tool
    result), of the tokens each call added (``tokens``, int64 shape (N,): its response
    and the messages up to the next response), at least 1. The messages' tokens per call so far
    (:func:`growth_per_call`'s fallback) no longer measure it there: the rewrite took tokens out, not
    calls. None when the conversation was not rewritten or no call since is complete.
    """
    messages, start = session.messages, 0  # the live conversation: a summary of ours, if any, first
    results = chain.from_iterable(map(attrgetter("tool_results"), messages))
    if any(map(is_cleared_text, map(attrgetter("text"), results))):  # no Python loop over a conversation never cleared
        start = next(i for i in range(len(messages) - 1, -1, -1) if any(is_cleared_text(r.text) for r in messages[i].tool_results)) + 1
    if start == 0 and not session.compactions and not any(m.kind == "summary" for m in messages[:1]):
        return None
    calls = [i for i in range(start, len(messages)) if messages[i].role == "assistant"]
    if len(calls) < 2:
        return None
    bounds = np.asarray(calls[-GROWTH_WINDOW_CALLS - 1:], dtype=np.int64)
    prefix = np.concatenate(([0], np.cumsum(tokens, dtype=np.int64)))
    return max(_median((prefix[bounds[1:]] - prefix[bounds[:-1]]).astype(np.float64)), 1.0)


def output_per_call(session: Session) -> float:
    """Output tokens per call the look-ahead expects (for price tiers, DESIGN §8): the median of the
    last ``GROWTH_WINDOW_CALLS`` usage records' output, 0 without records."""
    recent = [float(u.output_tokens) for u in session.usage[-GROWTH_WINDOW_CALLS:]]  # a few values: no arrays
    return _few_median(recent) if recent else 0.0


def round_keep(session: Session) -> int:
    """The least the look-ahead keeps (DESIGN §7 "at least one API round"), messages: from the
    last assistant message that made tool calls (its results are what the agent is working
    from; a final answer after them belongs with them) when no user message came after it,
    else from the last assistant message (a round of plain chat does not keep every message
    since the last tool call)."""
    messages = session.messages
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), None)
    if last is None:
        return min(len(messages), 1)
    calling = last
    for i in range(last, -1, -1):  # back through the round's own assistant and tool messages only
        if messages[i].role == "assistant" and messages[i].tool_calls:
            calling = i
            break
        if messages[i].role not in ("assistant", "tool"):
            break  # a user message: the calls before it belong to an earlier round
    return len(messages) - calling


def plan_ahead(
    session: Session, tokens: npt.NDArray[np.int64], prefix: npt.NDArray[np.int64], ages: npt.NDArray[np.float64],
    cuts: npt.NDArray[np.int64],
    terms: BenefitTerms, inputs: BenefitInputs, est: Estimates, settings: Settings, prices: Prices,
    common: dict[str, Any], timing: Timing | None = None, clear_saved: npt.NDArray[np.int64] | None = None,
) -> Plan:
    """The look-ahead decision (DESIGN §7) over the feasible cuts keeping at least one API round,
    with time and price tiers (DESIGN §8): ``timing`` says how long the cache has been idle.
    ``clear_saved`` (int64, shape (N,), tokens each message's clearable tool results would take
    out; :func:`~dp_compact.measure.clearing.clearable_saved_tokens`) adds clearing at a depth to
    the present's choices (DESIGN §9; :func:`clear_depths`); None: compact or keep only."""
    n, total = len(session.messages), int(common["total_tokens"])
    s, v, window = summary_tokens(settings), inputs.v_tokens, prices.max_context_tokens
    threshold = float(common["force_threshold_tokens"])
    context = est.context_tokens
    columns = usage_columns(session.usage)
    prompts = [u.prompt_tokens for u in session.usage] if columns is None else columns.prompt_tokens
    calls = max(len(prompts), session.llm_calls, session.user_turns - 1)  # a user turn answered was at least one call
    g = growth_per_call(prompts, total, calls)
    if len(prompts) < 2 and (since := rewritten_growth(session, tokens)) is not None:
        g = since
    alpha, scale = settings.survival_alpha, settings.survival_scale
    known = est.remaining_calls if settings.e_fixed > 0 else None  # the user said how long it goes on
    expected_left = known if known is not None else (scale + calls) / (alpha - 1.0) if alpha > 1 else float("inf")
    carry = max(1.0, min(expected_left, max(context - v, 0) / g))  # calls a refetched message is carried
    la_inputs = _replace_inputs(inputs, remaining_calls=carry, s_tokens=s)
    # a refetch priced as the replay charges it (DESIGN §6): a short output, the message written to the cache
    per_message = recall_costs(tokens, ages, prices=prices, inputs=la_inputs, q0=settings.recall_q0, tau=settings.recall_tau,
                               output_tokens=REFETCH_OUTPUT_TOKENS, fresh_usd_per_mtok=prices.p_write)
    lost = np.concatenate(([0.0], per_message.cumsum()))
    # tails as the look-ahead counts them (the context less V and the head) when cutting at N, N−1, ..., 0
    from_end = np.maximum(context - v - prefix[::-1], 0).astype(np.float64)
    worth = lost[-1] - lost[::-1]  # what those tails hold, $ (float64, as lost)
    forecast = Forecast(growth_tokens=g, calls_so_far=calls, survival_alpha=alpha, survival_scale=scale,
                        loss_tail_tokens=from_end, loss_tail_usd=worth, remaining_calls=known,
                        output_tokens=output_per_call(session) if prices.tiers else 0.0,
                        cold_share=timing.cold_share(prices) if timing is not None else 0.0)
    if settings.native in NATIVE_COMPACTIONS:
        native = native_compaction(settings.native, [m.role for m in session.messages], tokens, per_message)
        return _native_plan(native, session, context, forecast, settings, prices, common, timing)
    allowed = (n - cuts >= common["min_keep"]).nonzero()[0]  # cuts: shape (n_cuts,)
    if allowed.size == 0:
        why = f"no feasible cut keeps the last API round ({common['min_keep']} messages) and drops one"
        return Plan("keep", RULE_NO_CUT, why, n, 0, tail_tokens=total, head_tokens=0, terms=dict(NO_TERMS),
                    best_candidate=None, context_after_tokens=context, **common)
    heads = prefix[cuts[allowed]]
    tails = total - heads
    eligible, bound = verbatim_bound(tails, settings.min_verbatim_tokens, forced=context > threshold)
    if not np.count_nonzero(eligible):
        why = (f"no feasible cut keeps {bound['min_tokens']:,} tokens verbatim (DP_MIN_VERBATIM_TOKENS) and drops a"
               f" message: the conversation holds {total:,} tokens")
        return Plan("keep", RULE_NO_CUT, why, n, 0, tail_tokens=total, head_tokens=0, terms=dict(NO_TERMS),
                    best_candidate=None, context_after_tokens=context, **common)
    turn_end = at_turn_end(session)
    cold_now, cold_chance = cache_state(timing, prices, turn_end)
    depths = clear_depths(clear_saved, n, common["min_keep"]) if clear_saved is not None else np.zeros(0, np.int64)
    saved_by_depth = clear_saved[depths - 1].cumsum().astype(np.float64) if depths.size else np.zeros(0)
    loss_by_depth = per_message[depths - 1].cumsum() if depths.size else np.zeros(0)
    unchanged = float(prefix[depths[0] - 1]) if depths.size else 0.0
    verbatim_tails = tails[eligible]  # int64: its least entry by argmin, as min gives it
    least_compacted = v + s + float(verbatim_tails[verbatim_tails.argmin()])
    least_cleared = context - float(saved_by_depth[-1]) if depths.size else float("inf")
    if context + g > threshold and min(least_compacted, least_cleared) >= context:  # acting would not make it smaller
        why = (f"context {context:,} tokens {'is above' if context > threshold else 'nears'} the forced threshold"
               f" ({threshold:,.0f}), but no compaction or clearing makes it smaller: the least it can leave is about"
               f" {min(least_compacted, least_cleared):,.0f} tokens (a summary and the last API round, which alone is that"
               f" large): nothing to gain by acting; context {context:,} tokens, {context / window:.0%} of the {window:,}-token window")
        return Plan("keep", RULE_NO_CUT, why, n, 0, tail_tokens=total, head_tokens=0, terms=dict(NO_TERMS),
                    best_candidate=None, context_after_tokens=context, **common)
    threshold, yield_note = _yielding_threshold(context, g, threshold, window, least_compacted, least_cleared)
    if yield_note:
        common["notes"] = tuple(common.get("notes", ())) + (yield_note,)
    ahead = look_ahead(context, heads, lost[cuts[allowed]], forecast, prices, v_tokens=v, s_tokens=s, limit_tokens=threshold,
                       window_tokens=window, cold_chance=cold_chance, cold_now=cold_now, eligible=eligible,
                       clear_saved_tokens=saved_by_depth, clear_kept_tokens=unchanged, clear_loss_usd=loss_by_depth)
    priced = ahead.compact_usd  # every cut's own value, for curves (``lookahead_usd``)
    round_note = None
    if context + g <= threshold and math.isfinite(ahead.keep_usd):  # not when this or the next call must compact
        ahead, round_note = _one_round_rule(ahead, n - cuts[allowed] <= common["min_keep"], lost[cuts[allowed]])
    cheapest = ahead.best
    common = {**common, "verbatim_bound": _binds(bound, ahead, tails, cheapest)}
    if common["verbatim_bound"]["binds"]:
        common["notes"] = tuple(common.get("notes", ())) + (common["verbatim_bound"]["note"],)
    if round_note:
        common["notes"] = tuple(common.get("notes", ())) + (round_note,)
    values = np.empty(cuts.shape)
    values.fill(np.inf)
    values[allowed] = priced
    priced_now = np.count_nonzero(np.isfinite(ahead.compact_usd)) > 0
    best = int(allowed[cheapest]) if priced_now else int(allowed[eligible.nonzero()[0][-1]])
    compact_value = float(ahead.compact_usd[cheapest]) if priced_now else float("inf")
    can_keep = math.isfinite(ahead.keep_usd)  # not when the next call's growth passes the threshold
    info: dict[str, float | None] = {
        "keep_usd": ahead.keep_usd if can_keep else None, "compact_usd": compact_value if math.isfinite(compact_value) else None,
        "saves_usd": ahead.keep_usd - compact_value if can_keep and math.isfinite(compact_value) else None,
        "next_compaction_calls": ahead.next_compaction_calls,
        "expected_calls": ahead.expected_calls, "horizon_calls": float(ahead.horizon_calls), "growth_tokens": g,
        "summary_tokens": float(s),
        "resume_usd": ahead.resume_usd if ahead.resume_usd is not None and math.isfinite(ahead.resume_usd) else None,
        "loss_usd": float(lost[cuts[best]]),  # the expected cost of the best cut's head (the recall term the rule of one round weighs)
        "loss_rule": round_note is not None,
    }
    chosen_clear = ahead.best_clear
    clear_value = float(ahead.clear_usd[chosen_clear]) if chosen_clear is not None else float("inf")
    clearing = None
    if chosen_clear is not None:
        depth = int(depths[chosen_clear])
        kept_after = max(context - v - float(saved_by_depth[chosen_clear]), 0.0)
        clearing = {"depth": depth, "cleared_messages": int(chosen_clear + 1), "saved_tokens": int(saved_by_depth[chosen_clear]),
                    "rewritten_tokens": int(max(kept_after - unchanged, 0.0)), "first_changed_message": int(depths[0] - 1),
                    "loss_usd": float(loss_by_depth[chosen_clear]), "clear_usd": clear_value if math.isfinite(clear_value) else None,
                    "saves_usd": ahead.keep_usd - clear_value if can_keep and math.isfinite(clear_value) else None}
        if settings.native == "anthropic-clear":  # what clear_tool_uses_20250919 is asked to keep (core.native_costs)
            clearing["native"] = {"action": "anthropic-clear", "keep_tool_uses": sum(len(m.tool_calls) for m in session.messages[depth:])}
        info["clear_usd"] = clear_value if math.isfinite(clear_value) else None
    common = {**common, "timing": timing_facts(session, timing, prices, turn_end, cold_now, cold_chance),
              "tiers": _tier_facts(prices, context, g, ahead, cheapest) if prices.tiers else None}
    best_info = {"k": int(n - cuts[best]), "cut": int(cuts[best]), "net": float(terms.net[best]),
                 "saves_usd": info["saves_usd"]}
    forced = context > threshold or not can_keep
    share = f"{context / window:.0%} of the {window:,}-token window"
    if not forced and session.messages_since_compaction == 0:
        why = ("nothing was added since dp-compact compacted this conversation: the plan that compacted it weighed every"
               f" cut that is left (a compaction is a fixed point); context {context:,} tokens, {share}")
        return Plan("keep", RULE_FIXED_POINT, why, n, 0, tail_tokens=total, head_tokens=0, terms=terms.at(best),
                    best_candidate=best_info, lookahead=info, context_after_tokens=context, lookahead_usd=values, **common)
    clears = clearing is not None and clear_value < compact_value and (forced or clear_value < ahead.keep_usd)
    if clears and (forced or (ahead.resume_usd is None or clear_value <= ahead.resume_usd + 1e-9 * abs(ahead.resume_usd))):
        return _clear_plan(clearing, ahead, context, window, forced, n, total, terms.at(best), best_info, info, values, common,
                           cheapest, chosen_clear)
    resume = _resume(ahead, min(compact_value, clear_value), allowed, cuts, n, depths) if not forced else None
    if resume is not None:
        why = resume + f"; context {context:,} tokens, {share}"
        return Plan("keep", RULE_RESUME, why, n, 0, tail_tokens=total, head_tokens=0, terms=terms.at(best),
                    best_candidate=best_info, lookahead=info, context_after_tokens=context, lookahead_usd=values, **common)
    if not forced and not compact_value < ahead.keep_usd:
        when = ahead.next_compaction_calls
        later = (f"the best schedule compacts in about {when:.0f} call{'s' if when != 1 else ''}" if when is not None
                 else f"the best schedule does not compact in the about {ahead.expected_calls:.0f} calls the session is expected to go on")
        if math.isfinite(compact_value):
            why = (f"waiting is cheaper: compacting now would cost ${compact_value - ahead.keep_usd:.4f} more than the best"
                   f" schedule that waits ({later}); context {context:,} tokens, {share}")
        else:  # every cut the rule of one round left out (its note says why)
            why = (f"waiting: no cut that keeps more than the last API round pays now, and {round_note or 'none that keeps it'};"
                   f" context {context:,} tokens, {share}")
        return Plan("keep", RULE_WAIT, why, n, 0, tail_tokens=total, head_tokens=0, terms=terms.at(best),
                    best_candidate=best_info, lookahead=info, context_after_tokens=context,
                    lookahead_usd=values, **common)
    head = int(prefix[cuts[best]])
    tail = total - head
    after = v + s + tail
    if forced:
        rule = RULE_FORCE
        where = "is above" if context > threshold else f"passes, with the next call's growth of about {g:,.0f} tokens,"
        limit = f"{settings.force_ratio:g} x {window:,}" if yield_note is None else f"the {window:,}-token window"
        why = f"context {context:,} tokens {where} {limit}: compacting now at the cut with the lowest expected cost"
    else:
        rule = RULE_LOOKAHEAD
        when = ahead.next_compaction_calls
        wait = (f"it would compact in about {when:.0f} call{'s' if when != 1 else ''}, carrying the {head:,} tokens this"
                " compaction drops until then" if when is not None else f"it would carry the {head:,} tokens this compaction drops")
        why = (f"compacting now saves ${ahead.keep_usd - compact_value:.4f} over the best schedule that waits ({wait});"
               f" the session is expected to go on for about {ahead.expected_calls:.0f} calls")
        if round_note is not None:  # the cheapest cut kept only the last API round and was set aside: say which one is taken
            why += (f"; the cut keeping only the last API round was set aside (its saving is not above its loss: see the notes),"
                    f" this one keeps the last {int(n - cuts[best])} messages ({tail:,} tokens)")
        if ahead.resume_usd is not None:
            why += (f"; it also beats waiting to decide when the person returns (${ahead.resume_usd - compact_value:.4f} more,"
                    f" the cache {ahead.cold_chance:.0%} likely to have expired by then): the summary request reads the head"
                    " from the cache while it is warm")
    if ahead.cold_now:
        why += ("; the cache is cold (the silence since the last call exceeds its lifetime): the next request rewrites the"
                " whole prompt anyway, so compacting now adds no rewrite of the kept tail (② ≈ 0)")
    why += f"; context {context:,} tokens ({share}), about {after:,} after compacting ({after / window:.0%})"
    return Plan("compact", rule, why, int(n - cuts[best]), int(cuts[best]), tail_tokens=tail, head_tokens=head,
                terms=terms.at(best), best_candidate=best_info, lookahead=info,
                context_after_tokens=after, lookahead_usd=values, **common)


def _yielding_threshold(context: int, g: float, threshold: float, window: int, least_compacted: float,
                        least_cleared: float) -> tuple[float, str | None]:
    """The limit above which the look-ahead may not keep (DESIGN §2 forced rule), tokens, and a note
    when it moved. The forced threshold ``DP_FORCE_RATIO · M`` is a margin, the window M the
    provider's limit: when this call or the next must act (``context`` or ``context + g`` above the
    threshold) but no action brings the prompt below the threshold (the smallest prompt after
    compacting, ``least_compacted``, and after clearing, ``least_cleared``, are both above it: the
    last API round alone is that large), acting cannot restore the margin and would only repeat at
    every call; the limit is then M, so the plan keeps while the prompt fits the window unless
    acting pays. Otherwise the threshold, unchanged."""
    least = min(least_compacted, least_cleared)
    if not (context + g > threshold and least > threshold and context <= window):
        return threshold, None
    return float(window), (f"no compaction or clearing brings the context below the forced threshold ({threshold:,.0f} tokens):"
                           f" the least it can leave is about {least:,.0f} tokens, the last API round alone being that large, so"
                           f" acting could not restore the margin and would repeat at every call; the threshold yields to the window"
                           f" ({window:,} tokens): the plan acts where acting pays or the window forces it")


def verbatim_bound(tails: npt.NDArray[np.int64], min_tokens: int, *, forced: bool = False) -> tuple[npt.NDArray[np.bool_], dict[str, Any]]:
    """The cuts ``DP_MIN_VERBATIM_TOKENS`` leaves the look-ahead (DESIGN §7): those whose tail (the
    messages kept verbatim, ``tails`` tokens per cut) holds at least ``min_tokens``. When none does
    and the context must be compacted (``forced``), every cut (the bound yields to the window).

    >>> verbatim_bound(np.array([9000, 4000, 900]), 2000)[0].tolist()
    [True, True, False]
    """
    eligible = np.asarray(tails) >= min_tokens
    yielded = bool(forced and not eligible.any() and eligible.size)
    if yielded:
        eligible = np.ones_like(eligible)
    return eligible, {"min_tokens": int(min_tokens), "yielded": yielded}


def _binds(bound: dict[str, Any], ahead: LookAhead, tails: npt.NDArray[np.int64], cheapest: int | None) -> dict[str, Any]:
    """Whether ``DP_MIN_VERBATIM_TOKENS`` changed the present's best cut, for the plan's ``verbatim_bound``:
    the cut that would be best without it (its tail, tokens) and a note saying so when it binds.
    ``cheapest``: ``ahead.best``."""
    free = ahead.unbounded_usd
    facts: dict[str, Any] = {**bound, "binds": False, "free_best_tail_tokens": None, "note": None}
    if free.size == 0 or not np.count_nonzero(np.isfinite(free)):
        return facts
    index = int(free.argmin())  # free: shape (n_cuts,), as np.argmin takes it
    facts["free_best_tail_tokens"] = int(tails[index])
    bounded = float(ahead.compact_usd[cheapest]) if cheapest is not None else float("inf")
    if bound["yielded"]:
        facts["binds"] = True
        facts["note"] = (f"no cut keeps {bound['min_tokens']:,} tokens verbatim (DP_MIN_VERBATIM_TOKENS) and the context must be"
                         " compacted: every cut was allowed")
    elif free[index] < bounded and free[index] < ahead.keep_usd:
        facts["binds"] = True
        facts["note"] = (f"the best cut would keep {int(tails[index]):,} tokens verbatim (${bounded - free[index]:.4f} cheaper);"
                         f" DP_MIN_VERBATIM_TOKENS keeps at least {bound['min_tokens']:,}")
    return facts


def _resume(ahead: LookAhead, compact_value: float, allowed: npt.NDArray[np.int64], cuts: npt.NDArray[np.int64], n: int,
            depths: npt.NDArray[np.int64] | None = None) -> str | None:
    """The explanation of "decide when the person returns" (DESIGN §8) when it is the cheapest of
    the three choices and compacts (or clears) in some case, else None. ``compact_value``: the
    best of compacting and clearing now."""
    resume = ahead.resume_usd
    if resume is None or not (resume < ahead.keep_usd and resume <= compact_value):
        return None
    if (ahead.resume_cold_cut, ahead.resume_cold_clear) == (ahead.resume_warm_cut, ahead.resume_warm_clear) and not (
            ahead.resume_cold_cut is None and ahead.resume_cold_clear is None):
        return None  # the same action whatever the cache: acting now is as cheap (the caller acts)

    def what(index: int | None, depth: int | None) -> str:
        if depth is not None and depths is not None:
            return f"clear the old tool results before message {int(depths[depth])}"
        return "keep" if index is None else f"compact keeping {int(n - cuts[allowed[index]])} messages"
    act = "clear" if ahead.resume_cold_clear is not None and ahead.resume_cold_cut is None else "compact"
    return (f"{act} on resume if the cache has expired: the person answers after the cache's lifetime with chance"
            f" {ahead.cold_chance:.0%} (idle hazard); then {what(ahead.resume_cold_cut, ahead.resume_cold_clear)} (a cold"
            f" cache makes the rewrite free), else {what(ahead.resume_warm_cut, ahead.resume_warm_clear)}. Expected"
            f" ${resume:.4f}, against ${compact_value:.4f} acting now and ${ahead.keep_usd:.4f} keeping")


def _one_round_rule(ahead: LookAhead, one_round: npt.NDArray[np.bool_], loss: npt.NDArray[np.float64],
                    what: str = "compacting down to the last API round") -> tuple[LookAhead, str | None]:
    """DESIGN §9: a compaction that keeps only the last API round, when neither this call nor the next
    must compact, must save more than the expected cost of what it drops. Cuts keeping one round
    whose saving over the best schedule that waits (``keep_usd − compact_usd``, $) is not above
    their loss (``loss``, the recall term of the head, $) are not taken (inf in the returned
    look-ahead's ``compact_usd`` and ``unbounded_usd``); with a note when that removed the cheapest cut.
    Replayed over the 16 shared sessions (2026-12-06) it moved dp from $50.14 to $50.46 under the
    verbatim detector and from $69.50 to $68.14 under the strict one (the factor on the loss, 0.5 to 2,
    moves either by under 0.2 %)."""
    saving = ahead.keep_usd - ahead.compact_usd
    weak = one_round & np.isfinite(ahead.compact_usd) & ~(saving > loss)
    best = ahead.best
    unbounded = ahead.unbounded_usd
    if unbounded.size:  # the cuts the verbatim bound leaves out, under the same rule (to say when the bound binds)
        unbounded = np.where(one_round & ~(ahead.keep_usd - unbounded > loss), np.inf, unbounded)
    ahead = _replace_ahead(ahead, compact_usd=np.where(weak, np.inf, ahead.compact_usd), unbounded_usd=unbounded)
    if best is None or not weak[best] or not saving[best] > 0:
        return ahead, None
    return ahead, (f"{what} would save ${saving[best]:.4f}, not more than the ${loss[best]:.4f}"
                   " its dropped messages are expected to cost: a compaction that keeps no more than the last API round must save"
                   " more than it loses")


def clear_depths(saved: npt.NDArray[np.int64], n: int, min_keep: int, keep_results: int = CLEAR_KEEP_TOOL_RESULTS) -> npt.NDArray[np.int64]:
    """The depths the look-ahead may clear at (DESIGN §9), ascending: just after each message with
    clearable tool results (``saved > 0``), but for the last ``keep_results`` such messages
    (:data:`~dp_compact.measure.clearing.CLEAR_KEEP_TOOL_RESULTS`, Anthropic's default) and for any
    in the last ``min_keep`` messages (the API round the agent works from).

    >>> clear_depths(np.array([0, 500, 0, 900, 800, 700, 600, 0]), 8, 2).tolist()
    [2, 4]
    """
    idx = (np.asarray(saved) > 0).ravel().nonzero()[0]  # np.flatnonzero
    idx = idx[:-keep_results] if keep_results > 0 else idx
    return (idx[idx < n - min_keep] + 1).astype(np.int64)


def _native_plan(native: NativeCompaction, session: Session, context: int, forecast: Forecast, settings: Settings,
                 prices: Prices, common: dict[str, Any], timing: Timing | None) -> Plan:
    """The look-ahead decision (DESIGN §7, §8) when a provider-native compaction carries it out
    (``DP_NATIVE``, DESIGN §9; :mod:`dp_compact.core.native_costs`): keep, or let the provider
    compact now. Its one cut drops what the provider drops (everything, or all but the user
    messages), its request reads the whole context, later compactions are the provider's too, and
    none happens below the provider's least trigger. As every compaction that keeps less than one
    API round, it must save more than its expected loss (:func:`_one_round_rule`) unless the
    context must shrink."""
    n, total = len(session.messages), int(common["total_tokens"])
    s, v, window = summary_tokens(settings), int(common["settings"]["v"]), prices.max_context_tokens
    threshold = float(common["force_threshold_tokens"])
    x0 = max(context - v, 0)
    turn_end = at_turn_end(session)
    cold_now, cold_chance = cache_state(timing, prices, turn_end)
    ahead = look_ahead(context, np.array([native.head_tokens]), np.array([native.loss_usd]), forecast, prices, v_tokens=v,
                       s_tokens=s, limit_tokens=threshold, window_tokens=window, cold_chance=cold_chance, cold_now=cold_now,
                       request_tokens=np.array([float(x0)]), future_tail_shares=(native.tail_share,), whole_requests=True,
                       compact_from_tokens=native.min_prompt_tokens)
    g = forecast.growth_tokens
    priced = float(ahead.compact_usd[0])  # before the rule of one round
    round_note = None
    if context + g <= threshold and np.isfinite(ahead.keep_usd):  # not when this or the next call must compact
        ahead, round_note = _one_round_rule(ahead, np.array([True]), np.array([native.loss_usd]), "the provider's compaction")
    compact_value = float(ahead.compact_usd[0])
    can_keep = bool(np.isfinite(ahead.keep_usd))
    what = ("Anthropic's compact_20260112 summarizes the whole conversation, the last round included" if native.action == "anthropic-compact"
            else f"OpenAI's /responses/compact keeps the {native.kept_messages} user message{'s' if native.kept_messages != 1 else ''}"
            " and one encrypted compaction item")
    info: dict[str, Any] = {
        "keep_usd": ahead.keep_usd if can_keep else None, "compact_usd": compact_value if np.isfinite(compact_value) else None,
        "saves_usd": ahead.keep_usd - compact_value if can_keep and np.isfinite(compact_value) else None,
        "next_compaction_calls": ahead.next_compaction_calls, "expected_calls": ahead.expected_calls,
        "horizon_calls": float(ahead.horizon_calls), "growth_tokens": g, "summary_tokens": float(s),
        "native": {"action": native.action, "dropped_tokens": native.head_tokens, "kept_tokens": native.tail_tokens,
                   "kept_messages": native.kept_messages, "loss_usd": native.loss_usd, "request_tokens": context,
                   "min_prompt_tokens": native.min_prompt_tokens},
        "loss_usd": native.loss_usd, "loss_rule": bool(np.isfinite(priced) and not np.isfinite(compact_value)),
    }
    notes = tuple(common.get("notes", ())) + ((round_note,) if round_note else ())
    common = {**common, "notes": notes, "timing": timing_facts(session, timing, prices, turn_end, cold_now, cold_chance),
              "tiers": _tier_facts(prices, context, g, ahead, ahead.best) if prices.tiers else None}
    share = f"{context / window:.0%} of the {window:,}-token window"
    forced = context > threshold or not can_keep
    after = v + s + native.tail_tokens
    must = forced and v + x0 >= native.min_prompt_tokens and after < min(threshold, context)  # it shrinks the context below the threshold
    if (np.isfinite(compact_value) or must) and (forced or compact_value < ahead.keep_usd):
        if forced:
            rule, why = RULE_FORCE, f"context {context:,} tokens must shrink before the next call: the provider compacts now"
        else:
            rule, why = RULE_LOOKAHEAD, f"compacting now saves ${ahead.keep_usd - compact_value:.4f} over the best schedule that waits"
        why += (f"; {what}: its request reads the whole {context:,}-token context and the prompt is written again from the"
                f" start (expected loss ${native.loss_usd:.4f}); about {after:,} tokens after ({after / window:.0%}); {share}")
        return Plan("compact", rule, why, 0, n, tail_tokens=native.tail_tokens, head_tokens=native.head_tokens,
                    terms=dict(NO_TERMS), best_candidate=None, lookahead=info, context_after_tokens=after, **common)
    if not np.isfinite(compact_value) and v + x0 < native.min_prompt_tokens:
        why = (f"the provider does not compact a prompt below {native.min_prompt_tokens:,.0f} tokens (its least trigger);"
               f" context {context:,} tokens, {share}")
        rule = RULE_NO_CUT
    elif forced and after >= min(threshold, context):  # what it keeps is itself too large
        where = "no smaller than the context" if after >= context else f"above the forced threshold ({threshold:,.0f})"
        why = (f"the provider's compaction would leave about {after:,} tokens ({what}), {where}: it cannot shrink this"
               f" context; context {context:,} tokens, {share}")
        rule = RULE_NO_CUT
    elif round_note is not None:
        why = f"waiting: {round_note}; context {context:,} tokens, {share}"
        rule = RULE_WAIT
    else:
        when = ahead.next_compaction_calls
        later = (f"the best schedule compacts in about {when:.0f} call{'s' if when != 1 else ''}" if when is not None
                 else f"the best schedule does not compact in the about {ahead.expected_calls:.0f} calls the session is expected to go on")
        more = f" ${priced - ahead.keep_usd:.4f} more" if np.isfinite(priced) else " more"
        why = (f"waiting is cheaper: the provider's compaction now would cost{more} than the best schedule that waits"
               f" ({later}); about {after:,} tokens after it ({what}); context {context:,} tokens, {share}")
        rule = RULE_WAIT
    return Plan("keep", rule, why, n, 0, tail_tokens=total, head_tokens=0, terms=dict(NO_TERMS), best_candidate=None,
                lookahead=info, context_after_tokens=context, **common)


def _clear_plan(clearing: dict[str, Any], ahead: LookAhead, context: int, window: int, forced: bool, n: int, total: int,
                terms: dict[str, float], best_info: dict[str, Any], info: dict[str, Any], values: npt.NDArray[np.float64],
                common: dict[str, Any], best: int | None, best_clear: int) -> Plan:
    """The plan that clears old tool results (DESIGN §9), with its explanation; ``best`` and ``best_clear``:
    ``ahead.best`` and ``ahead.best_clear``."""
    after = context - clearing["saved_tokens"]
    tiers = common.get("tiers")
    if tiers and tiers.get("next"):  # the action before the cliff is this clearing
        common = {**common, "tiers": {**tiers, "next": {**tiers["next"], "compacts_before": True, "compaction_calls": 0.0,
                                                         "action": "clear"}}}
    if forced:
        why = (f"context {context:,} tokens must shrink before the next call; clearing the old tool results costs"
               f" less than compacting at any cut")
    else:
        why = f"clearing old tool results now saves ${clearing['saves_usd']:.4f} over the best schedule that waits"
        if best is not None and np.isfinite(ahead.compact_usd[best]):
            why += f" and ${float(ahead.compact_usd[best]) - float(ahead.clear_usd[best_clear]):.4f} over compacting at the best cut"
    why += (f": {clearing['cleared_messages']} tool message{'s' if clearing['cleared_messages'] != 1 else ''} before message"
            f" {clearing['depth']} lose {clearing['saved_tokens']:,} tokens to placeholders naming the archive (expected loss"
            f" ${clearing['loss_usd']:.4f}), no summary request, the cache rewritten from message"
            f" {clearing['first_changed_message']} on ({clearing['rewritten_tokens']:,} tokens); every message stays;"
            f" context {context:,} tokens ({context / window:.0%}), about {after:,} after clearing ({after / window:.0%})")
    return Plan("clear", RULE_CLEAR, why, n, 0, tail_tokens=total, head_tokens=0, terms=terms, best_candidate=best_info,
                lookahead=info, context_after_tokens=after, lookahead_usd=values, clearing=clearing, **common)


def _tier_facts(prices: Prices, context: int, g: float, ahead: LookAhead, best: int | None) -> dict[str, Any]:
    """The next price cliff (:func:`~dp_compact.core.tiers.next_cliff`) and whether the best schedule
    compacts before it (DESIGN §8), for the plan's ``tiers``; ``best``: ``ahead.best``."""
    cliff = next_cliff(prices, context, g)
    facts: dict[str, Any] = {"thresholds": list(prices.tier_starts), "tier_now": _tier_name(prices, context), "next": cliff}
    if cliff is not None:
        when = ahead.next_compaction_calls
        now = best is not None and ahead.compact_usd[best] < ahead.keep_usd
        before = now or (when is not None and when < cliff["calls_to_go"])
        cliff["compacts_before"] = bool(before)
        cliff["compaction_calls"] = 0.0 if now else when
    return facts


def _tier_name(prices: Prices, prompt: float) -> str:
    """``"base"`` or ``"above N"``: the tier a prompt of ``prompt`` tokens pays."""
    above = [t for t in prices.tier_starts if prompt > t]
    return f"above {above[-1]:,}" if above else "base"
