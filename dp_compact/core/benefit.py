"""NetBenefit(k) of DESIGN §2 for every candidate cut at once (numpy only, no loop over k).

    ① savings      = (R − 1) · P_cache · H / 1e6
    ② cache_miss   = (S + K) · (P_write − P_cache) / 1e6       (P_write = P_input when unpriced)
    ③ compact_cost = (P_cache · (V + H) + P_input · L_instr + P_out · S) / 1e6
    ④ info_loss    = β · (1 − r_t) · R · avg · P_input / 1e6  [+ recall term, model "recall"]
    ⑤ quality      = QP · P_input · ((V + T)² − (V + K)²) / (M · 1e6)
    net            = ① − ② − ③ − ④ + ⑤

with r_t = max(r^(c+1), 0.37) and, for the recall model, ④ adds
Σ_{j in head} q_j · refetch_j / 1e6, q_j = q0 · exp(−a_j / τ),
refetch_j = tok_j · (P_input + (R − 1) · P_cache) + avg · P_cache + S · P_out.
The look-ahead planner (DESIGN §7) prices the refetch as the replay charges it (DESIGN §6): the
extra call writes ``REFETCH_OUTPUT_TOKENS`` of output, not S, and the message's tokens are written
to the cache at P_write (:func:`recall_costs`' ``output_tokens`` and ``fresh_usd_per_mtok``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.pricing import Prices

__all__ = [
    "L_INSTR_TOKENS",
    "REFETCH_OUTPUT_TOKENS",
    "compaction_request_cost",
    "RETENTION_FLOOR",
    "BenefitInputs",
    "BenefitTerms",
    "TERM_LABELS",
    "net_benefit",
    "recall_costs",
]

#: DESIGN §2 ③: tokens of the summary instruction appended to the cache-aligned request (seed 004).
L_INSTR_TOKENS = 70
#: Output tokens of the extra call that fetches a dropped message again (DESIGN §6 "a short
#: tool-call output"): a Read/cat call with its path, about 50-70 tokens in the shared transcripts.
#: The replay's meter charges it (:mod:`dp_compact.replay.meter`), and the look-ahead planner
#: expects it (:func:`recall_costs`), so that both price a refetch alike.
REFETCH_OUTPUT_TOKENS = 60
#: DESIGN §2 ④: floor of the cumulative retention r_t (seed 004, from Factory AI's measurements).
RETENTION_FLOOR = 0.37

Array = npt.NDArray[np.float64]


def compaction_request_cost(cached_tokens: Any, uncached_tokens: Any, summary_tokens: float, prices: Prices) -> Any:
    """The summarization request of one compaction, in $ · 1e6 (tokens · $/MTok); DESIGN §2 ③, §6.

    The request is cache-aligned: the prompt (V plus the head) is read from the cache where it
    is still cached and written otherwise (``prices.p_write``), then ``L_INSTR_TOKENS``
    instruction tokens at P_input and ``summary_tokens`` output tokens at P_out. The planner's
    ③ is this with the whole prompt cached; the replay's meter passes what its cache holds.

    Parameters
    ----------
    cached_tokens, uncached_tokens : float or ndarray
        Prompt tokens read from the cache and written to it (same shape, or scalars).
    summary_tokens : float
        S, output tokens of the summary.
    prices : Prices
        $/MTok.

    >>> from dp_compact.pricing import get_prices
    >>> round(compaction_request_cost(70_000, 0, 500, get_prices("claude-sonnet-4")))
    28710
    """
    return (cached_tokens * prices.p_cache + uncached_tokens * prices.p_write
            + L_INSTR_TOKENS * prices.p_input + summary_tokens * prices.p_out)


@dataclass(frozen=True, slots=True)
class BenefitInputs:
    """The scalars of DESIGN §2.

    Attributes
    ----------
    v_tokens, s_tokens, m_tokens : int
        Fixed prefix V, summary S and context window M, tokens.
    total_tokens : int
        T, tokens of all messages.
    remaining_calls : float
        R = E · L, expected remaining LLM calls.
    avg_tokens : float
        avg, mean prompt tokens per call.
    compactions : int
        c, compactions already made.
    beta, retention, quality_penalty : float
        β, r and QP (dimensionless).
    """

    v_tokens: int
    s_tokens: int
    m_tokens: int
    total_tokens: int
    remaining_calls: float
    avg_tokens: float
    compactions: int
    beta: float
    retention: float
    quality_penalty: float

    @property
    def retained(self) -> float:
        """r_t = max(r^(c+1), RETENTION_FLOOR)."""
        return max(self.retention ** (self.compactions + 1), RETENTION_FLOOR)


@dataclass(frozen=True, slots=True)
class BenefitTerms:
    """Terms ①–⑤ of DESIGN §2 per candidate cut; every array has shape (n_cuts,).

    ``cut`` (int64, head = messages[:cut]), ``tail_tokens`` K and ``head_tokens`` H (int64,
    tokens); ``savings`` ①, ``cache_miss`` ②, ``compact_cost`` ③, ``info_loss`` ④ (with the
    recall term when used), ``quality`` ⑤ and ``net`` in $ (float64). Arrays are read-only.
    """

    cut: npt.NDArray[np.int64]
    tail_tokens: npt.NDArray[np.int64]
    head_tokens: npt.NDArray[np.int64]
    savings: Array
    cache_miss: Array
    compact_cost: Array
    info_loss: Array
    quality: Array
    net: Array

    def __post_init__(self) -> None:
        for name in _TERMS_FIELDS:
            getattr(self, name).setflags(write=False)

    def at(self, index: int) -> dict[str, float]:
        """The five terms and ``net`` at position ``index``, in $."""
        names = ("savings", "cache_miss", "compact_cost", "info_loss", "quality", "net")
        return {name: float(getattr(self, name)[index]) for name in names}


#: The fields of :class:`BenefitTerms`, in order (every one an array made read-only).
_TERMS_FIELDS = tuple(f.name for f in fields(BenefitTerms))


#: The five terms of DESIGN §2 in order, as plans and figures label them:
#: (:class:`BenefitTerms` attribute, label, sign of the term in NetBenefit).
TERM_LABELS = (
    ("savings", "① savings (cache reads saved)", "+"),
    ("cache_miss", "② cache miss after rewrite", "-"),
    ("compact_cost", "③ summary request", "-"),
    ("info_loss", "④ information loss", "-"),
    ("quality", "⑤ long-context quality", "+"),
)


def recall_costs(
    message_tokens: npt.NDArray[np.int64],
    ages: npt.NDArray[np.float64] | npt.NDArray[np.int64],
    *,
    prices: Prices,
    inputs: BenefitInputs,
    q0: float,
    tau: float,
    output_tokens: float | None = None,
    fresh_usd_per_mtok: float | None = None,
) -> Array:
    """Expected cost of dropping each message, q_j · refetch_j / 1e6 (DESIGN §2 recall term).

    Parameters
    ----------
    message_tokens : ndarray[int64], shape (N,)
        tok_j, tokens per message.
    ages : ndarray, shape (N,)
        a_j, user turns between message j and now (0 for the current turn).
    prices : Prices
        P_input, P_cache, P_out in $/MTok.
    inputs : BenefitInputs
        R, avg and S.
    q0, tau : float
        Recall probability now and its decay constant, in user turns.
    output_tokens : float, optional
        Output tokens of the extra call that fetches a message again; None: S (DESIGN §2). The
        look-ahead passes :data:`REFETCH_OUTPUT_TOKENS`, what the replay charges (DESIGN §6).
    fresh_usd_per_mtok : float, optional
        $/MTok of the refetched tokens as fresh input; None: P_input (DESIGN §2). The look-ahead
        passes ``prices.p_write``, the cache write the replay charges (DESIGN §6).

    Returns
    -------
    ndarray[float64], shape (N,)
        $ per message; the head's recall cost at cut i is the sum of the first i entries.
    """
    q = q0 * np.exp(-np.asarray(ages, dtype=np.float64) / tau)
    fresh = prices.p_input if fresh_usd_per_mtok is None else fresh_usd_per_mtok
    output = inputs.s_tokens if output_tokens is None else output_tokens
    per_token = fresh + (inputs.remaining_calls - 1.0) * prices.p_cache
    fixed = inputs.avg_tokens * prices.p_cache + output * prices.p_out
    return q * (message_tokens.astype(np.float64) * per_token + fixed) / 1e6


def net_benefit(
    cuts: npt.NDArray[np.int64],
    tail_tokens: npt.NDArray[np.int64],
    *,
    prices: Prices,
    inputs: BenefitInputs,
    head_recall_cost: Array | None = None,
) -> BenefitTerms:
    """NetBenefit of DESIGN §2 at every candidate cut at once.

    Parameters
    ----------
    cuts : ndarray[int64], shape (n_cuts,)
        Candidate cut indices.
    tail_tokens : ndarray[int64], shape (n_cuts,)
        K per cut, tokens; H = T − K.
    prices : Prices
        $/MTok; ``p_cache_write`` replaces P_input in ② when set (DESIGN §2 "Cache writes").
    inputs : BenefitInputs
    head_recall_cost : ndarray[float64], shape (n_cuts,), optional
        Recall term of the head per cut, $ (the recall model); None for the seed's model.

    Returns
    -------
    BenefitTerms

    Raises
    ------
    ValueError
        If the arrays differ in shape or a tail holds more tokens than T.

    Notes
    -----
    Golden value (DESIGN §2 / seed 004 worked example, K = 25,000, H = 65,000): net = 0.1397598 $.
    """
    tail = np.asarray(tail_tokens, dtype=np.int64)
    if tail.shape != np.shape(cuts) or (head_recall_cost is not None and np.shape(head_recall_cost) != tail.shape):
        raise ValueError("cuts, tail_tokens and head_recall_cost must have the same shape")
    if tail.size and (tail[tail.argmin()] < 0 or tail[tail.argmax()] > inputs.total_tokens):  # int64: least and largest entries
        raise ValueError("tail tokens must lie in [0, T]")
    head = inputs.total_tokens - tail
    k_tokens = tail.astype(np.float64)
    h_tokens = head.astype(np.float64)
    v, s = float(inputs.v_tokens), float(inputs.s_tokens)
    savings = (inputs.remaining_calls - 1.0) * prices.p_cache * h_tokens / 1e6
    cache_miss = (s + k_tokens) * (prices.p_write - prices.p_cache) / 1e6
    compact_cost = compaction_request_cost(v + h_tokens, 0.0, s, prices) / 1e6
    loss = inputs.beta * (1.0 - inputs.retained) * inputs.remaining_calls * inputs.avg_tokens * prices.p_input / 1e6
    info_loss = np.empty(tail.shape, dtype=np.float64)
    info_loss.fill(loss)
    if head_recall_cost is not None:
        info_loss = info_loss + head_recall_cost
    total = v + float(inputs.total_tokens)
    quality = inputs.quality_penalty * prices.p_input * (total**2 - (v + k_tokens) ** 2) / (inputs.m_tokens * 1e6)
    net = savings - cache_miss - compact_cost - info_loss + quality
    return BenefitTerms(
        np.asarray(cuts, dtype=np.int64).copy(), tail.copy(), head, savings, cache_miss, compact_cost, info_loss, quality, net
    )
