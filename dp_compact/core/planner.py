"""The decision of DESIGN §2: compact now or not, and at which feasible cut.

:func:`plan` is pure: it takes a session, its per-message token counts, settings and prices,
and returns a :class:`~dp_compact.core.decision.Plan`. The myopic and seed rules are here; the
look-ahead path (DESIGN §7) is :mod:`dp_compact.core.planner_lookahead`. Reading files and resolving
prices live in :mod:`dp_compact.api`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.core.benefit import BenefitInputs, BenefitTerms, net_benefit, recall_costs
from dp_compact.conversation import Session
from dp_compact.core.cuts import ROLE_TOOL, MessageArrays, feasible_cut_mask, message_ages, message_arrays
from dp_compact.core.hits import HitShare, served_prices
from dp_compact.core.decision import (
    NO_TERMS,
    RULE_BENEFIT,
    RULE_EMPTY,
    RULE_FIXED_POINT,
    RULE_FORCE,
    RULE_LOOKAHEAD,
    RULE_NO_BENEFIT,
    RULE_NO_CUT,
    RULE_RESUME,
    RULE_WAIT,
    Plan,
)
from dp_compact.measure.estimation import CallPlacement, Estimates, estimate
from dp_compact.measure.clearing import clearable_saved_tokens
from dp_compact._fast import keep_newest
from dp_compact.core.planner_lookahead import EXTRACTIVE_SUMMARY_TOKENS, growth_per_call, plan_ahead, round_keep, summary_tokens
from dp_compact.core.timing import Timing
from dp_compact.pricing import Prices
from dp_compact.settings import Settings

__all__ = [
    "EXTRACTIVE_SUMMARY_TOKENS",
    "RULE_BENEFIT",
    "RULE_EMPTY",
    "RULE_FIXED_POINT",
    "RULE_FORCE",
    "RULE_LOOKAHEAD",
    "RULE_NO_BENEFIT",
    "RULE_NO_CUT",
    "RULE_RESUME",
    "RULE_WAIT",
    "Plan",
    "forced_cut",
    "growth_per_call",
    "min_keep",
    "plan",
    "summary_tokens",
]


#: ``Settings.model_dump()`` of the settings planned with lately, by ``id``: ``(settings, dump)`` (the settings held,
#: so that an id names one object). Settings are frozen, so a dump never goes stale; a plan copies it.
_DUMPS: dict[int, tuple[Settings, dict[str, Any]]] = {}
#: Settings whose dumps are kept (an adapter plans with one; the seed planner makes one per plan).
DUMPS_KEPT = 8


def _settings_dump(settings: Settings) -> dict[str, Any]:
    """``settings.model_dump()``, made once per settings object (shared: the caller copies it, never changes it)."""
    kept = _DUMPS.get(id(settings))
    if kept is not None and kept[0] is settings:
        return kept[1]
    dump = settings.model_dump()
    _DUMPS[id(settings)] = (settings, dump)
    keep_newest(_DUMPS, DUMPS_KEPT)
    return dump


def min_keep(n_messages: int, ratio: float, earlier_messages: int = 0) -> int:
    """``clamp(floor(N · ratio + 0.5), 3, N)`` (DESIGN §2 decision 1: half rounds up, as the seed).

    The share is taken of the N the conversation had before a summary of ours replaced
    ``earlier_messages`` of them by one message (``Session.earlier_messages``), so that planning
    the output of a compaction keeps what the first plan kept: a compaction is a fixed point.
    """
    whole = n_messages - 1 + earlier_messages if earlier_messages else n_messages
    return int(min(max(int(np.floor(whole * ratio + 0.5)), 3), n_messages))


def _ages(arrays: MessageArrays, unit: str, calls_per_turn: float) -> npt.NDArray[np.float64]:
    """a_j of DESIGN §2: the age scale of :func:`~dp_compact.core.cuts.message_ages`, seen from the last message."""
    if arrays.n == 0:
        return np.zeros(0, dtype=np.float64)
    scale = message_ages(arrays, unit, calls_per_turn)
    return scale[-1] - scale


def _orphan_note(arrays: MessageArrays) -> tuple[str, ...]:
    """A note naming the tool-result messages that answer no tool call of the session (their call was
    cut off before the transcript began, or lost): they bind no cut, and ``compact`` pairs any it keeps
    with a note so that the API accepts it; empty when there is none."""
    found = ((arrays.roles == ROLE_TOOL) & (arrays.call_index < 0)).nonzero()[0].tolist()
    if not found:
        return ()
    named = ", ".join(str(i) for i in found[:3]) + (f" and {len(found) - 3:,} more" if len(found) > 3 else "")
    return (f"{len(found):,} tool result(s) answer no tool call in the transcript (message {named}): they bind no cut, "
            "and `compact` pairs any it keeps with a note so that the API accepts it",)


def _notes(est: Estimates, window: int) -> tuple[str, ...]:
    """Facts about the inputs that a reader of the plan should know."""
    notes = []
    if est.context_tokens > window:
        notes.append(f"the current context ({est.context_tokens:,} tokens) is larger than the window ({window:,})")
    if est.avg_source == "default":
        notes.append("avg is the default 4,000 tokens: the session has no usage records")
    if est.l_source == "default":
        notes.append(f"L is the default {est.calls_per_turn:g}: calls per user turn cannot be measured from this session")
    if est.context_note:  # how the current context was obtained (estimation.current_context)
        notes.append(est.context_note)
    return tuple(notes)


def _pick_best(terms: BenefitTerms, keep: npt.NDArray[np.int64], least: int) -> int | None:
    """Index of the candidate (k ≥ least) with the highest net; ties go to the smaller k."""
    candidates = np.flatnonzero(keep >= least)
    if candidates.size == 0:
        return None
    order = candidates[np.argsort(keep[candidates], kind="stable")]  # ascending k
    return int(order[int(np.argmax(terms.net[order]))])


def _pick_forced(terms: BenefitTerms, keep: npt.NDArray[np.int64], target: int, context: int, s: int, limit: float) -> int:
    """Forced cut: nearest to ``target`` kept (ties: keep more); the deepest if that stays over ``limit``."""
    distance = np.abs(keep - target) * 2 - (keep >= target)  # ties go to the larger k
    index = int(np.argmin(distance))
    if context - int(terms.head_tokens[index]) + s > limit:
        index = int(np.argmin(keep))
    return index


def forced_cut(result: Plan) -> int | None:
    """The cut the forced rule (DESIGN §2 decision 3) takes for ``result``, whatever the context.

    For ``--force`` when the plan keeps everything: the feasible cut nearest to
    ``max(3, floor(N · ratio + 0.5))`` kept messages, or the deepest one when the context after
    it (current − H + S) would stay above DP_FORCE_RATIO · M. None without a feasible cut.
    """
    terms = result.benefit
    if terms is None or terms.cut.size == 0:
        return None
    keep = result.n_messages - terms.cut
    target = max(3, result.min_keep)
    index = _pick_forced(terms, keep, target, result.estimates.context_tokens, result.settings["s"], result.force_threshold_tokens)
    return int(terms.cut[index])


def plan(
    session: Session,
    message_tokens: npt.NDArray[np.int64],
    settings: Settings,
    prices: Prices,
    *,
    arrays: MessageArrays | None = None,
    v_tokens: int | None = None,
    placement: CallPlacement | None = None,
    timing: Timing | None = None,
    cache_hit: HitShare | None = None,
    clear_saved: npt.NDArray[np.int64] | None = None,
    lead_notes: tuple[str, ...] = (),
    v_source: str = "",
) -> Plan:
    """Decide whether to compact ``session`` now and at which feasible cut (DESIGN §2, §7).

    Parameters
    ----------
    session : Session
        The live conversation, usage records and counters.
    message_tokens : ndarray[int64], shape (N,)
        Tokens of each live message.
    settings : Settings
        Model, S, β, r, QP, ratios and the recall parameters, as the user gave them.
    prices : Prices
        $/MTok and the window M (overrides already applied).
    arrays : MessageArrays, optional
        The session's per-message structure from :func:`~dp_compact.core.cuts.message_arrays`, when
        the caller keeps it (as it keeps token counts); computed here otherwise.
    v_tokens : int, optional
        The fixed prefix V, tokens: the session's own as :func:`dp_compact.prepare.prepare` chose it
        (``PreparedSession.v_tokens``); default ``settings.v`` (``DP_V``). The plan's ``settings``
        record it as ``v``.
    placement : CallPlacement, optional
        The session's usage records placed on its messages
        (:func:`~dp_compact.measure.estimation.place_calls`), when the caller has it; placed here otherwise.
    timing : Timing, optional
        Seconds since the last call, the cache TTL and the idle hazard (DESIGN §8), for the
        look-ahead planner; None: timeless (DESIGN §2, §7 as they are). Reading a clock is the
        caller's (:func:`dp_compact.prepare.plan_prepared`).
    cache_hit : HitShare, optional
        The share of a cached prefix the provider serves from its cache (DESIGN §8; the replay's
        ``ReplayParams.cache_hit_share``, or :func:`~dp_compact.core.hits.hit_share_from_usage` of
        the session); below 1, every cached token is priced at
        :func:`~dp_compact.core.hits.served_prices` (the misses written), as the replay's meter
        charges it, and the plan's notes say which share applied and where it came from. None or
        1: every cached token read (DESIGN §2 as it is). Not applied to the seed's model.
    clear_saved : ndarray[int64], shape (N,), optional
        Tokens clearing each message's long tool results would take out (DESIGN §9), when the
        caller knows them (the replay, from its exact counts); default
        :func:`~dp_compact.measure.clearing.clearable_saved_tokens` of the messages. Used by the
        look-ahead planner with ``DP_CLEAR_TOOL_RESULTS`` on (the default): the plan may then
        decide ``"clear"``.
    lead_notes : tuple[str, ...], optional
        Notes the plan's ``notes`` open with (the caller's, e.g. :attr:`~dp_compact.prepare.PreparedSession.notes`).
    v_source : str, optional
        Where V comes from, as the plan's ``v_source`` records it (:data:`~dp_compact.measure.estimation.V_SOURCES`; "" unknown).

    Returns
    -------
    Plan

    Raises
    ------
    ValueError
        If ``message_tokens`` does not have one entry per message or holds negative counts.

    Notes
    -----
    ``DP_PLANNER=lookahead`` (the default, with ``DP_MODEL=recall``): candidates are the feasible
    cuts keeping at least one API round; compact at the one whose expected cost from now on
    (:func:`~dp_compact.core.lookahead.look_ahead`) is lowest when it is below the cost of the best
    schedule that waits, or whenever the context exceeds DP_FORCE_RATIO · M; else keep. A
    conversation that is our own compaction's output with nothing added since
    (``Session.messages_since_compaction == 0``) is kept below the threshold: the plan that
    compacted it already chose (a compaction is a fixed point). With ``timing`` and with price
    tiers the look-ahead prices time and tiers (DESIGN §8,
    :mod:`dp_compact.core.lookahead`): a third choice, ``compact-on-resume`` (keep now; compact when
    the person returns if the cache has expired), a cold cache, and the tier of every request.

    ``DP_PLANNER=seed`` is a second name for ``DP_MODEL=seed``: the seed's model always decides by
    the myopic rules, and the plan's ``planner`` reads ``seed``.

    ``myopic`` and ``seed``: rules, in order (DESIGN §2 "Decision"): candidates are feasible cuts keeping at least
    ``min_keep`` messages and dropping at least one; compact at the best if its NetBenefit > 0
    (ties: smaller k); else, if the current context exceeds DP_FORCE_RATIO · M, compact at the
    feasible cut nearest to ``max(3, floor(N · ratio + 0.5))`` kept, or at the deepest one when
    the context after that cut (current − H + S) would still exceed the threshold; else keep.
    """
    tokens = np.asarray(message_tokens, dtype=np.int64)
    n = len(session.messages)
    if settings.planner == "seed":
        settings = settings.model_copy(update={"model": "seed"})
    if settings.model == "seed":  # the seed's ② has no cache-write price (DESIGN §2, seed 004)
        prices = replace(prices, p_cache_write=None)
    if tokens.shape != (n,) or (n and tokens[tokens.argmin()] < 0):  # int64: its least entry, as min gives it
        raise ValueError(f"message_tokens must have shape ({n},) and be non-negative")
    hit_notes: tuple[str, ...] = ()
    if cache_hit is not None and settings.model != "seed":
        hit_notes = (cache_hit.note(),) if cache_hit.share < 1.0 or cache_hit.source else ()
        priced = served_prices(prices, cache_hit.share)  # what the meter charges for a cached token
    else:
        priced = prices
    prefix = np.concatenate(([0], tokens.cumsum()))  # tokens: shape (n,), checked above
    total = int(prefix[-1])
    v = settings.v if v_tokens is None else int(v_tokens)
    est = estimate(session, settings, total_tokens=total, message_tokens=tokens, v_tokens=v, placement=placement)
    threshold = settings.force_ratio * prices.max_context_tokens
    least = min_keep(n, settings.min_keep_ratio, session.earlier_messages) if n else 0
    if settings.planner == "lookahead" and settings.model == "recall":
        least = round_keep(session)
    common: dict[str, Any] = dict(
        n_messages=n, total_tokens=total, estimates=est, min_keep=least, force_threshold_tokens=threshold,
        prices=prices, path=session.path, format=session.format,
        settings={**_settings_dump(settings), "v": v, "provider": settings.provider if settings.explicit_provider() else prices.name},
        skipped_lines=session.skipped_lines, skipped_line_numbers=session.skipped_line_numbers,
        planner="seed" if settings.model == "seed" else settings.planner,  # DP_PLANNER=seed set the model above
        notes=tuple(lead_notes), v_source=v_source,
    )
    if n == 0:
        return Plan("keep", RULE_EMPTY, "the session has no messages: nothing to compact", 0, 0, tail_tokens=0,
                    head_tokens=0, terms=dict(NO_TERMS), best_candidate=None, n_feasible_cuts=0,
                    context_after_tokens=est.context_tokens, **common)

    if arrays is None:
        arrays = message_arrays(session.messages)
    elif arrays.n != n:
        raise ValueError(f"arrays describe {arrays.n} messages, the session has {n}")
    cuts = feasible_cut_mask(arrays, user_turns_only=settings.model == "seed").nonzero()[0].astype(np.int64)  # the mask is 1-D
    inputs = BenefitInputs(
        v_tokens=v, s_tokens=settings.s, m_tokens=prices.max_context_tokens, total_tokens=total,
        remaining_calls=est.remaining_calls, avg_tokens=est.avg_tokens, compactions=est.compactions,
        beta=settings.beta, retention=settings.r, quality_penalty=settings.quality_penalty,
    )
    head_recall, ages = None, np.zeros(0)
    if settings.model == "recall":
        ages = _ages(arrays, settings.recall_age, est.calls_per_turn)
        per_message = recall_costs(tokens, ages, prices=priced, inputs=inputs, q0=settings.recall_q0, tau=settings.recall_tau)
        head_recall = np.concatenate(([0.0], per_message.cumsum()))[cuts]
    terms = net_benefit(cuts, total - prefix[cuts], prices=priced, inputs=inputs, head_recall_cost=head_recall)
    keep = n - cuts
    common.update(n_feasible_cuts=int(cuts.size), benefit=terms,
                  notes=common["notes"] + _notes(est, prices.max_context_tokens) + hit_notes + _orphan_note(arrays))
    if settings.planner == "lookahead" and settings.model == "recall":
        if not settings.clear_tool_results:
            clear_saved = None
        elif clear_saved is None:
            clear_saved = clearable_saved_tokens(session.messages, tokens)
        elif np.shape(clear_saved) != (n,):
            raise ValueError(f"clear_saved must have shape ({n},)")
        return plan_ahead(session, tokens, prefix, ages, cuts, terms, inputs, est, settings, priced, common, timing,
                          clear_saved=None if clear_saved is None else np.asarray(clear_saved, dtype=np.int64))

    best = _pick_best(terms, keep, least)
    best_info = None if best is None else {"k": int(keep[best]), "cut": int(cuts[best]), "net": float(terms.net[best])}
    if best is not None and terms.net[best] > 0:
        chosen, rule = best, RULE_BENEFIT
        why = f"NetBenefit is positive (${terms.net[best]:.4f}) at the best feasible cut"
    elif est.context_tokens > threshold and cuts.size:
        target = max(3, least)
        chosen, rule = _pick_forced(terms, keep, target, est.context_tokens, settings.s, threshold), RULE_FORCE  # = forced_cut()
        why = (f"context {est.context_tokens:,} tokens is above {settings.force_ratio:g} x {prices.max_context_tokens:,}"
               f" and NetBenefit is not positive: forced compaction near {target} kept messages")
        if keep[chosen] < least:
            why += f"; at the deepest feasible cut (k={int(keep[chosen])}), since keeping {target} would stay above the threshold"
    else:
        at_best = terms.at(best) if best is not None else dict(NO_TERMS)
        if best is None:
            rule, why = RULE_NO_CUT, f"no feasible cut keeps at least {least} of {n} messages and drops one"
        else:
            rule = RULE_NO_BENEFIT
            why = (f"NetBenefit is not positive (best ${terms.net[best]:.4f} at k={int(keep[best])}) and the context"
                   f" ({est.context_tokens:,} tokens) is under the forced threshold ({threshold:,.0f})")
        return Plan("keep", rule, why, n, 0, tail_tokens=total, head_tokens=0, terms=at_best, best_candidate=best_info,
                    context_after_tokens=est.context_tokens, **common)
    return Plan(
        "compact", rule, why, int(keep[chosen]), int(cuts[chosen]), tail_tokens=int(terms.tail_tokens[chosen]),
        head_tokens=int(terms.head_tokens[chosen]), terms=terms.at(chosen), best_candidate=best_info,
        context_after_tokens=v + settings.s + int(terms.tail_tokens[chosen]), **common,
    )
