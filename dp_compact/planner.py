"""The decision of DESIGN §2: compact now or not, and at which feasible cut.

:func:`plan` is pure: it takes a session, its per-message token counts, settings and prices,
and returns a :class:`Plan`. Reading files and resolving prices live in :mod:`dp_compact.api`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.benefit import BenefitInputs, BenefitTerms, net_benefit, recall_costs
from dp_compact.cuts import MessageArrays, feasible_cut_mask, message_ages, message_arrays
from dp_compact.estimation import Estimates, estimate
from dp_compact.lookahead import Forecast, look_ahead
from dp_compact.pricing import Prices
from dp_compact.conversation import Session
from dp_compact.settings import Settings

__all__ = ["EXTRACTIVE_SUMMARY_TOKENS", "RULE_BENEFIT", "RULE_FORCE", "RULE_LOOKAHEAD", "RULE_WAIT", "Plan",
           "forced_cut", "growth_per_call", "min_keep", "plan", "summary_tokens"]

#: What the extractive summarizer writes, tokens: median over the shared sessions of
#: ``dp-compact compact --force --dry-run --json`` (491-838, median 780; DESIGN §6 "Summary size
#: per policy"). The look-ahead planner expects this S unless ``DP_S`` is given.
EXTRACTIVE_SUMMARY_TOKENS = 780
#: Calls whose prompt growth gives the forecast's growth per call (DESIGN §7 "recent median").
GROWTH_WINDOW_CALLS = 20

RULE_BENEFIT = "benefit"  # DESIGN §2 decision 2: best NetBenefit > 0
RULE_LOOKAHEAD = "lookahead"  # DESIGN §7: compacting now costs less than the best schedule that waits
RULE_WAIT = "wait"  # DESIGN §7: the best schedule keeps now
RULE_FIXED_POINT = "just-compacted"  # nothing added since our own compaction: it already chose this cut
RULE_FORCE = "force"  # DESIGN §2 decision 3: context above DP_FORCE_RATIO · M
RULE_NO_BENEFIT = "no-benefit"  # decision 4: no positive benefit, context under the threshold
RULE_EMPTY = "empty"  # no messages
RULE_NO_CUT = "no-feasible-cut"  # nothing can be dropped under the cut rules
_TERM_NAMES = ("savings", "cache_miss", "compact_cost", "info_loss", "quality", "net")
_NO_TERMS = dict.fromkeys(_TERM_NAMES, 0.0)


def min_keep(n_messages: int, ratio: float, earlier_messages: int = 0) -> int:
    """``clamp(floor(N · ratio + 0.5), 3, N)`` (DESIGN §2 decision 1: half rounds up, as the seed).

    The share is taken of the N the conversation had before a summary of ours replaced
    ``earlier_messages`` of them by one message (``Session.earlier_messages``), so that planning
    the output of a compaction keeps what the first plan kept: a compaction is a fixed point.
    """
    whole = n_messages - 1 + earlier_messages if earlier_messages else n_messages
    return int(min(max(int(np.floor(whole * ratio + 0.5)), 3), n_messages))


@dataclass(frozen=True, slots=True)
class Plan:
    """A planning decision and everything it was computed from (DESIGN §2 "Decision").

    Attributes
    ----------
    decision : {"compact", "keep"}
    rule : str
        Which rule decided: ``benefit``, ``force``, ``no-benefit``, ``empty``, ``no-feasible-cut``.
    explanation : str
        One sentence for people.
    k, cut : int
        Messages kept and the cut index (head = messages[:cut]); ``k = N`` and ``cut = 0`` for
        a "keep" decision.
    n_messages, total_tokens, tail_tokens, head_tokens : int
        N, T, K, H (tokens) at the chosen cut.
    terms : dict[str, float]
        ①–⑤ and net at the chosen cut ($); for "keep", at the best candidate cut (if any).
    best_candidate : dict or None
        ``{"k", "cut", "net"}`` of the best candidate cut, whatever the decision.
    estimates : Estimates
        E, L, R, avg, c, t and the current context.
    min_keep, n_feasible_cuts : int
    force_threshold_tokens : float
        DP_FORCE_RATIO · M.
    prices : Prices
    settings : dict
        The settings used.
    path, format : str
        The session file and its format.
    skipped_lines : int
        Malformed lines skipped with ``lenient``.
    notes : tuple[str, ...]
        Facts a user should know (prices taken from the session's model, context above the
        window, a forced cut below min_keep, defaults used for avg or L).
    benefit : BenefitTerms or None
        All terms at every feasible cut (for curves); not serialized.
    planner : {"lookahead", "myopic", "seed"}
        Which decision rule was used (``DP_PLANNER``).
    lookahead : dict or None
        The look-ahead values (DESIGN §7), $ and calls: ``keep_usd``, ``compact_usd`` (at the
        chosen or best cut), ``saves_usd`` (compacting now against the best schedule that waits),
        ``next_compaction_calls``, ``expected_calls``, ``horizon_calls``, ``growth_tokens``,
        ``summary_tokens``; None for the other planners.
    context_after_tokens : int
        The prompt right after the decision (V + S + K when compacting, the context otherwise), tokens.
    lookahead_usd : ndarray or None
        Expected cost of compacting now at every feasible cut (for curves), $; not serialized.
    """

    decision: str
    rule: str
    explanation: str
    k: int
    cut: int
    n_messages: int
    total_tokens: int
    tail_tokens: int
    head_tokens: int
    terms: dict[str, float]
    best_candidate: dict[str, float] | None
    estimates: Estimates
    min_keep: int
    n_feasible_cuts: int
    force_threshold_tokens: float
    prices: Prices
    settings: dict[str, Any]
    path: str = ""
    format: str = ""
    skipped_lines: int = 0
    notes: tuple[str, ...] = ()
    benefit: BenefitTerms | None = field(default=None, compare=False, repr=False)
    planner: str = "myopic"
    lookahead: dict[str, float | None] | None = None
    context_after_tokens: int = 0
    lookahead_usd: npt.NDArray[np.float64] | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data under stable names (DESIGN symbols at the top level)."""
        e = self.estimates
        return {
            "decision": self.decision,
            "rule": self.rule,
            "explanation": self.explanation,
            "k": self.k,
            "cut": self.cut,
            "N": self.n_messages,
            "T": self.total_tokens,
            "K": self.tail_tokens,
            "H": self.head_tokens,
            "terms": dict(self.terms),
            "best_candidate": self.best_candidate,
            "E": e.expected_turns,
            "L": e.calls_per_turn,
            "R": e.remaining_calls,
            "avg": e.avg_tokens,
            "c": e.compactions,
            "t": e.user_turns,
            "context_tokens": e.context_tokens,
            "context_source": e.context_source,
            "avg_source": e.avg_source,
            "L_source": e.l_source,
            "force_threshold_tokens": round(self.force_threshold_tokens),
            "max_context_tokens": self.prices.max_context_tokens,
            "min_keep": self.min_keep,
            "n_feasible_cuts": self.n_feasible_cuts,
            "prices": asdict(self.prices),
            "settings": dict(self.settings),
            "session": {"path": self.path, "format": self.format, "skipped_lines": self.skipped_lines},
            "notes": list(self.notes),
            "planner": self.planner,
            "lookahead": None if self.lookahead is None else dict(self.lookahead),
            "context_after_tokens": self.context_after_tokens,
        }


def _ages(arrays: MessageArrays, unit: str, calls_per_turn: float) -> npt.NDArray[np.float64]:
    """a_j of DESIGN §2: the age scale of :func:`~dp_compact.cuts.message_ages`, seen from the last message."""
    if arrays.n == 0:
        return np.zeros(0, dtype=np.float64)
    scale = message_ages(arrays, unit, calls_per_turn)
    return scale[-1] - scale


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
) -> Plan:
    """Decide whether to compact ``session`` now and at which feasible cut (DESIGN §2, §7).

    Parameters
    ----------
    session : Session
        The live conversation, usage records and counters.
    message_tokens : ndarray[int64], shape (N,)
        Tokens of each live message.
    settings : Settings
        Model, V, S, β, r, QP, ratios and the recall parameters.
    prices : Prices
        $/MTok and the window M (overrides already applied).
    arrays : MessageArrays, optional
        The session's per-message structure from :func:`~dp_compact.cuts.message_arrays`, when
        the caller keeps it (as it keeps token counts); computed here otherwise.

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
    (:func:`~dp_compact.lookahead.look_ahead`) is lowest when it is below the cost of the best
    schedule that waits, or whenever the context exceeds DP_FORCE_RATIO · M; else keep. A
    conversation that is our own compaction's output with nothing added since
    (``Session.messages_since_compaction == 0``) is kept below the threshold: the plan that
    compacted it already chose (a compaction is a fixed point).

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
    if tokens.shape != (n,) or (n and tokens.min() < 0):
        raise ValueError(f"message_tokens must have shape ({n},) and be non-negative")
    prefix = np.concatenate(([0], np.cumsum(tokens)))
    total = int(prefix[-1])
    est = estimate(session, settings, total_tokens=total, message_tokens=tokens)
    threshold = settings.force_ratio * prices.max_context_tokens
    least = min_keep(n, settings.min_keep_ratio, session.earlier_messages) if n else 0
    if settings.planner == "lookahead" and settings.model == "recall":
        least = _round_keep(session)
    common: dict[str, Any] = dict(
        n_messages=n, total_tokens=total, estimates=est, min_keep=least, force_threshold_tokens=threshold,
        prices=prices, settings=settings.model_dump(), path=session.path, format=session.format,
        skipped_lines=session.skipped_lines,
        planner="seed" if settings.model == "seed" else settings.planner,  # DP_PLANNER=seed set the model above
    )
    if n == 0:
        return Plan("keep", RULE_EMPTY, "the session has no messages: nothing to compact", 0, 0, tail_tokens=0,
                    head_tokens=0, terms=dict(_NO_TERMS), best_candidate=None, n_feasible_cuts=0,
                    context_after_tokens=est.context_tokens, **common)

    if arrays is None:
        arrays = message_arrays(session.messages)
    elif arrays.n != n:
        raise ValueError(f"arrays describe {arrays.n} messages, the session has {n}")
    cuts = np.flatnonzero(feasible_cut_mask(arrays, user_turns_only=settings.model == "seed")).astype(np.int64)
    inputs = BenefitInputs(
        v_tokens=settings.v, s_tokens=settings.s, m_tokens=prices.max_context_tokens, total_tokens=total,
        remaining_calls=est.remaining_calls, avg_tokens=est.avg_tokens, compactions=est.compactions,
        beta=settings.beta, retention=settings.r, quality_penalty=settings.quality_penalty,
    )
    head_recall, ages = None, np.zeros(0)
    if settings.model == "recall":
        ages = _ages(arrays, settings.recall_age, est.calls_per_turn)
        per_message = recall_costs(tokens, ages, prices=prices, inputs=inputs, q0=settings.recall_q0, tau=settings.recall_tau)
        head_recall = np.concatenate(([0.0], np.cumsum(per_message)))[cuts]
    terms = net_benefit(cuts, total - prefix[cuts], prices=prices, inputs=inputs, head_recall_cost=head_recall)
    keep = n - cuts
    common.update(n_feasible_cuts=int(cuts.size), benefit=terms, notes=_notes(est, prices.max_context_tokens))
    if settings.planner == "lookahead" and settings.model == "recall":
        return _plan_ahead(session, tokens, prefix, ages, cuts, terms, inputs, est, settings, prices, common)

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
        at_best = terms.at(best) if best is not None else dict(_NO_TERMS)
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
        context_after_tokens=settings.v + settings.s + int(terms.tail_tokens[chosen]), **common,
    )


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
    recent = np.diff(np.asarray(prompts[-GROWTH_WINDOW_CALLS - 1:], dtype=np.float64))
    grown = recent[recent >= 0]
    if grown.size:
        return max(float(np.median(grown)), 1.0)
    return max(total_tokens / max(calls, 1), 1.0)


def _round_keep(session: Session) -> int:
    """The least the look-ahead keeps (DESIGN §7 "at least one API round"), messages: from the
    last assistant message that made tool calls (its results are what the agent is working
    from; a final answer after them belongs with them), else from the last assistant message."""
    messages = session.messages
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "assistant"), None)
    if last is None:
        return min(len(messages), 1)
    calling = next((i for i in range(last, -1, -1) if messages[i].role == "assistant" and messages[i].tool_calls), last)
    return len(messages) - calling


def _plan_ahead(
    session: Session, tokens: npt.NDArray[np.int64], prefix: npt.NDArray[np.int64], ages: npt.NDArray[np.float64],
    cuts: npt.NDArray[np.int64],
    terms: BenefitTerms, inputs: BenefitInputs, est: Estimates, settings: Settings, prices: Prices,
    common: dict[str, Any],
) -> Plan:
    """The look-ahead decision (DESIGN §7) over the feasible cuts keeping at least one API round."""
    n, total = len(session.messages), int(common["total_tokens"])
    s, v, window = summary_tokens(settings), settings.v, prices.max_context_tokens
    threshold = float(common["force_threshold_tokens"])
    context = est.context_tokens
    prompts = [u.prompt_tokens for u in session.usage]
    calls = max(len(prompts), session.llm_calls)
    g = growth_per_call(prompts, total, calls)
    alpha, scale = settings.survival_alpha, settings.survival_scale
    known = est.remaining_calls if settings.e_fixed > 0 else None  # the user said how long it goes on
    expected_left = known if known is not None else (scale + calls) / (alpha - 1.0) if alpha > 1 else float("inf")
    carry = max(1.0, min(expected_left, max(context - v, 0) / g))  # calls a refetched message is carried
    la_inputs = replace(inputs, remaining_calls=carry, s_tokens=s)
    per_message = recall_costs(tokens, ages, prices=prices, inputs=la_inputs, q0=settings.recall_q0, tau=settings.recall_tau)
    lost = np.concatenate(([0.0], np.cumsum(per_message)))
    allowed = np.flatnonzero(n - cuts >= common["min_keep"])
    if allowed.size == 0:
        why = f"no feasible cut keeps the last API round ({common['min_keep']} messages) and drops one"
        return Plan("keep", RULE_NO_CUT, why, n, 0, tail_tokens=total, head_tokens=0, terms=dict(_NO_TERMS),
                    best_candidate=None, context_after_tokens=context, **common)
    # tails as the look-ahead counts them (the context less V and the head) when cutting at N, N−1, ..., 0
    from_end = np.maximum(context - v - prefix[::-1], 0).astype(np.float64)
    worth = (lost[-1] - lost[::-1]).astype(np.float64)  # what those tails hold, $
    forecast = Forecast(growth_tokens=g, calls_so_far=calls, survival_alpha=alpha, survival_scale=scale,
                        loss_tail_tokens=from_end, loss_tail_usd=worth, remaining_calls=known)
    heads = prefix[cuts[allowed]]
    ahead = look_ahead(context, heads, lost[cuts[allowed]], forecast, prices, v_tokens=v, s_tokens=s, limit_tokens=threshold,
                       window_tokens=window)
    values = np.full(cuts.shape, np.inf)
    values[allowed] = ahead.compact_usd
    best = int(allowed[ahead.best]) if np.isfinite(ahead.compact_usd).any() else int(allowed[-1])
    compact_value = float(values[best])
    can_keep = bool(np.isfinite(ahead.keep_usd))  # not when the next call's growth passes the threshold
    info: dict[str, float | None] = {
        "keep_usd": ahead.keep_usd if can_keep else None, "compact_usd": compact_value if np.isfinite(compact_value) else None,
        "saves_usd": ahead.keep_usd - compact_value if can_keep and np.isfinite(compact_value) else None,
        "next_compaction_calls": ahead.next_compaction_calls,
        "expected_calls": ahead.expected_calls, "horizon_calls": float(ahead.horizon_calls), "growth_tokens": g,
        "summary_tokens": float(s),
    }
    best_info = {"k": int(n - cuts[best]), "cut": int(cuts[best]), "net": float(terms.net[best]),
                 "saves_usd": info["saves_usd"]}
    forced = context > threshold or not can_keep
    share = f"{context / window:.0%} of the {window:,}-token window"
    if not forced and session.messages_since_compaction == 0:
        why = ("nothing was added since dp-compact compacted this conversation: the plan that compacted it weighed every"
               f" cut that is left (a compaction is a fixed point); context {context:,} tokens, {share}")
        return Plan("keep", RULE_FIXED_POINT, why, n, 0, tail_tokens=total, head_tokens=0, terms=terms.at(best),
                    best_candidate=best_info, lookahead=info, context_after_tokens=context, lookahead_usd=values, **common)
    if not forced and not compact_value < ahead.keep_usd:
        when = ahead.next_compaction_calls
        later = (f"the best schedule compacts in about {when:.0f} call{'s' if when != 1 else ''}" if when is not None
                 else f"the best schedule does not compact in the about {ahead.expected_calls:.0f} calls the session is expected to go on")
        why = (f"waiting is cheaper: compacting now would cost ${compact_value - ahead.keep_usd:.4f} more than the best"
               f" schedule that waits ({later}); context {context:,} tokens, {share}")
        return Plan("keep", RULE_WAIT, why, n, 0, tail_tokens=total, head_tokens=0, terms=terms.at(best),
                    best_candidate=best_info, lookahead=info, context_after_tokens=context,
                    lookahead_usd=values, **common)
    head = int(prefix[cuts[best]])
    tail = total - head
    after = v + s + tail
    if forced:
        rule = RULE_FORCE
        where = "is above" if context > threshold else f"passes, with the next call's growth of about {g:,.0f} tokens,"
        why = (f"context {context:,} tokens {where} {settings.force_ratio:g} x {window:,}: compacting now at the cut"
               f" with the lowest expected cost")
    else:
        rule = RULE_LOOKAHEAD
        when = ahead.next_compaction_calls
        wait = (f"it would compact in about {when:.0f} call{'s' if when != 1 else ''}, carrying the {head:,} tokens this"
                " compaction drops until then" if when is not None else f"it would carry the {head:,} tokens this compaction drops")
        why = (f"compacting now saves ${ahead.keep_usd - compact_value:.4f} over the best schedule that waits ({wait});"
               f" the session is expected to go on for about {ahead.expected_calls:.0f} calls")
    why += f"; context {context:,} tokens ({share}), about {after:,} after compacting ({after / window:.0%})"
    return Plan("compact", rule, why, int(n - cuts[best]), int(cuts[best]), tail_tokens=tail, head_tokens=head,
                terms=terms.at(best), best_candidate=best_info, lookahead=info,
                context_after_tokens=after, lookahead_usd=values, **common)
