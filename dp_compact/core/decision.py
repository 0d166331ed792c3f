"""A planning decision (DESIGN §2 "Decision", §7): the :class:`Plan` and the names of the rules that decide.

The value :func:`dp_compact.core.planner.plan` returns, built by the myopic rules
(:mod:`dp_compact.core.planner`) and by the look-ahead (:mod:`dp_compact.core.planner_lookahead`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.core.benefit import BenefitTerms
from dp_compact.measure.estimation import Estimates
from dp_compact.pricing import Prices

__all__ = [
    "NO_TERMS",
    "RULE_BENEFIT",
    "RULE_CLEAR",
    "RULE_EMPTY",
    "RULE_FIXED_POINT",
    "RULE_FORCE",
    "RULE_LOOKAHEAD",
    "RULE_NO_BENEFIT",
    "RULE_NO_CUT",
    "RULE_RESUME",
    "RULE_WAIT",
    "Plan",
]

RULE_BENEFIT = "benefit"  # DESIGN §2 decision 2: best NetBenefit > 0
RULE_LOOKAHEAD = "lookahead"  # DESIGN §7: compacting now costs less than the best schedule that waits
RULE_WAIT = "wait"  # DESIGN §7: the best schedule keeps now
RULE_CLEAR = "clear"  # DESIGN §9: clearing old tool results now costs less than keeping and than compacting
RULE_RESUME = "compact-on-resume"  # DESIGN §8: keep now, compact when the person returns if the cache has expired
RULE_FIXED_POINT = "just-compacted"  # nothing added since our own compaction: it already chose this cut
RULE_FORCE = "force"  # DESIGN §2 decision 3: context above DP_FORCE_RATIO · M
RULE_NO_BENEFIT = "no-benefit"  # decision 4: no positive benefit, context under the threshold
RULE_EMPTY = "empty"  # no messages
RULE_NO_CUT = "no-feasible-cut"  # nothing can be dropped under the cut rules
#: ①–⑤ and net, all zero: the terms of a plan without a candidate cut ($).
NO_TERMS = dict.fromkeys(("savings", "cache_miss", "compact_cost", "info_loss", "quality", "net"), 0.0)


@dataclass(frozen=True, slots=True)
class Plan:
    """A planning decision and everything it was computed from (DESIGN §2 "Decision").

    Attributes
    ----------
    decision : {"compact", "clear", "keep"}
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
        The settings used (``Settings.model_dump()``), with ``v`` the fixed prefix V the plan used,
        tokens (the session's own when measured: :func:`dp_compact.prepare.prepare`), and
        ``provider`` the pricing profile or model priced (``prices.name``) unless one was given.
    path, format : str
        The session file and its format.
    skipped_lines : int
        Malformed lines skipped with ``lenient``.
    skipped_line_numbers : tuple[int, ...]
        Their 1-based line numbers, where the file has lines (JSONL).
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
    v_source : {"measured", "recorded", "setting", "default", ""}
        Where ``settings["v"]``, the fixed prefix V in tokens, comes from
        (:func:`~dp_compact.measure.estimation.fixed_prefix`): the session's usage records, the statement
        of an earlier dp-compact compaction or shrink in the file, ``DP_V`` / ``--v`` given, or
        ``DP_V``'s default; ``""`` when the caller gave the settings as they are
        (:func:`~dp_compact.core.planner.plan` called directly).
    lookahead_usd : ndarray or None
        Expected cost of compacting now at every feasible cut (for curves), $; not serialized.
    timing : dict or None
        What the plan knew of time (DESIGN §8; :func:`~dp_compact.core.timing.timing_facts`):
        seconds since the last call, the cache TTL, whether the cache is cold, the chance it will
        be at the next call, the idle hazard, and which write lifetime pays for the session's
        rhythm (``lifetime``); None for a timeless plan.
    tiers : dict or None
        Whole-request price tiers (DESIGN §8): ``thresholds``, ``tier_now``, and ``next``
        (:func:`~dp_compact.core.tiers.next_cliff`, with ``compacts_before``: whether the best
        schedule compacts before the cliff); None without tiers.
    verbatim_bound : dict or None
        ``DP_MIN_VERBATIM_TOKENS`` in the look-ahead (DESIGN §7): ``min_tokens``, ``binds``
        (it changed the best cut, or kept a compaction the best cut would make),
        ``free_best_tail_tokens`` (the tail of the best cut without it), ``yielded`` (no cut met it
        and the context had to be compacted) and ``note``; None for the other planners.
    clearing : dict or None
        With ``decision == "clear"`` (DESIGN §9): ``depth`` (the tool results of messages
        ``[0, depth)`` that are long enough are replaced by placeholders; no message is removed,
        ``k = N``), ``cleared_messages``, ``saved_tokens``, ``rewritten_tokens`` (written to the cache
        by the next call), ``loss_usd`` and ``clear_usd`` (expected cost from now on, $); else None.
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
    skipped_line_numbers: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    benefit: BenefitTerms | None = field(default=None, compare=False, repr=False)
    planner: str = "myopic"
    lookahead: dict[str, float | None] | None = None
    context_after_tokens: int = 0
    lookahead_usd: npt.NDArray[np.float64] | None = field(default=None, compare=False, repr=False)
    v_source: str = ""
    timing: dict[str, Any] | None = None
    tiers: dict[str, Any] | None = None
    verbatim_bound: dict[str, Any] | None = None
    clearing: dict[str, Any] | None = None

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
            "prices": self.prices.to_dict(),
            "settings": dict(self.settings),
            "session": {"path": self.path, "format": self.format, "skipped_lines": self.skipped_lines,
                        "skipped_line_numbers": list(self.skipped_line_numbers)},
            "notes": list(self.notes),
            "planner": self.planner,
            "lookahead": None if self.lookahead is None else dict(self.lookahead),
            "context_after_tokens": self.context_after_tokens,
            "v_tokens": self.settings.get("v"),
            "v_source": self.v_source,
            "timing": self.timing,
            "tiers": self.tiers,
            "verbatim_bound": self.verbatim_bound,
            "clearing": self.clearing,
        }
