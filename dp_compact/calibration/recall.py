"""The recall curve q(a) of DESIGN §2, measured from transcripts, and its exponential fit.

q(a) is the chance that a message of age ``a`` is *used later*: that a message after the point
where it has age ``a`` uses it, by the judge's own rule (:func:`dp_compact.measure.reuse.find_uses`,
DESIGN §6 "Lost information": ≥ 200 characters repeated verbatim, or an edit or write of a file
whose latest read it holds). The points are the LLM calls: before assistant message ``p`` the
planner sees messages ``[0, p)`` and gives message ``j`` the age ``a = age[p − 1] − age[j]``
(:func:`dp_compact.core.planner.plan`); the judge charges a refetch when a message at or after ``p``
uses ``j``. So q(a) is directly the q_j of the recall term ④ (``q_j = q0 · exp(−a_j / τ)``):
the planner expects on average what the replay charges.

Ages use the planner's own units (``DP_RECALL_AGE``, :func:`dp_compact.core.cuts.message_ages`): ``turns`` (user turns between the two)
or ``rounds`` (API rounds between them divided by L). Uses after the end of the recording are
not seen, by the judge either. The fit is weighted least squares on the pooled curve; its spread
is a bootstrap over sessions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dp_compact.core.cuts import ROLE_ASSISTANT, MessageArrays
from dp_compact.measure.reuse import Uses

__all__ = [
    "MAX_AGE_BINS",
    "MIN_BIN_MESSAGES",
    "RecallCounts",
    "RecallFit",
    "fit_exponential",
    "recall_counts",
]

#: Age bins measured: ``[0, 1)`` to ``[MAX_AGE_BINS - 1, MAX_AGE_BINS)`` age units.
MAX_AGE_BINS = 24
#: A pooled bin enters the fit only when this many messages were observed through it.
MIN_BIN_MESSAGES = 20
_AGE_EPSILON = 1e-9  # ages in rounds are multiples of 1/L: compare bin edges with this slack


@dataclass(frozen=True, slots=True)
class RecallCounts:
    """Per-age-bin counts of one session (or pooled); arrays of shape (MAX_AGE_BINS,).

    ``observed[b]``: messages seen at an age in ``[b, b + 1)`` by at least one LLM call.
    ``needed[b]``: the sum over those messages of the share of such calls after which the
    message is used (a message counts 1 when every call of the bin is followed by a use).
    q(b) = needed / observed.
    """

    needed: npt.NDArray[np.float64]
    observed: npt.NDArray[np.int64]

    def __add__(self, other: RecallCounts) -> RecallCounts:
        return RecallCounts(self.needed + other.needed, self.observed + other.observed)

    @property
    def curve(self) -> npt.NDArray[np.float64]:
        """q(b) per bin (NaN where nothing was observed)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.observed > 0, self.needed / np.maximum(self.observed, 1), np.nan)


def recall_counts(uses: Uses, arrays: MessageArrays, ages: npt.NDArray[np.float64]) -> RecallCounts:
    """Count, per age bin, the messages used after a call that sees them at that age.

    Parameters
    ----------
    uses : Uses
        :func:`dp_compact.measure.reuse.find_uses` of the messages.
    arrays : MessageArrays
        :func:`dp_compact.core.cuts.message_arrays` of the same messages (roles: the LLM calls).
    ages : ndarray[float64], shape (N,)
        :func:`dp_compact.core.cuts.message_ages` of those messages, non-decreasing.

    Returns
    -------
    RecallCounts

    Notes
    -----
    For message ``j``, the calls ``p > j`` whose age ``ages[p − 1] − ages[j]`` falls in bin ``b``
    form one run of calls; ``j`` is used after call ``p`` when its last use is at ``p`` or later.
    ``needed[b]`` adds, per message, the share of its calls in the bin that are followed by a
    use, so each message weighs 1 in every bin it is observed in, however many calls the bin
    holds. Vectorized over messages × bins; no loop over calls.

    Message 0 below is seen at age 0 by call 1 and at age 1 by call 3, and used by message 3:
    it is needed in both bins; message 1 (age 1 at call 3) and message 2 (age 0) are not.

    >>> from dp_compact.core.cuts import message_ages, message_arrays
    >>> from dp_compact.conversation import Message
    >>> from dp_compact.measure.reuse import KIND_VERBATIM
    >>> messages = [Message("user", "u"), Message("assistant", "a"), Message("user", "v"), Message("assistant", "b")]
    >>> used = Uses(np.array([0]), np.array([3]), np.array([KIND_VERBATIM], dtype=np.int8))
    >>> arrays = message_arrays(messages)
    >>> c = recall_counts(used, arrays, message_ages(arrays, "turns", 1.0))
    >>> c.observed[:2].tolist(), c.needed[:2].tolist()
    ([2, 2], [1.0, 1.0])
    """
    n = arrays.n
    calls = np.flatnonzero(arrays.roles == ROLE_ASSISTANT)
    calls = calls[calls >= 1]
    if n == 0 or calls.size == 0:
        return RecallCounts(np.zeros(MAX_AGE_BINS), np.zeros(MAX_AGE_BINS, dtype=np.int64))
    seen_at = ages[calls - 1]  # the age scale of the last message each call sees
    edges = ages[:, None] + np.arange(MAX_AGE_BINS + 1)[None, :] - _AGE_EPSILON  # (N, B + 1)
    bounds = np.searchsorted(seen_at, edges, side="left")
    first = np.searchsorted(calls, np.arange(n), side="right")[:, None]  # first call after message j
    lo = np.maximum(bounds[:, :-1], first)
    count = np.maximum(bounds[:, 1:], lo) - lo  # (N, B): calls that see j at an age in bin b
    used_upto = np.searchsorted(calls, uses.last_use(n), side="right")[:, None]  # calls p <= last use
    used = np.clip(used_upto - lo, 0, count)
    observed = count > 0
    share = np.divide(used, count, out=np.zeros(count.shape), where=observed)
    return RecallCounts(share.sum(axis=0), observed.sum(axis=0).astype(np.int64))


@dataclass(frozen=True, slots=True)
class RecallFit:
    """q(a) = q0 · exp(−a / τ) fitted to a pooled curve.

    Attributes
    ----------
    q0 : float
        Chance that a message of age 0 is used later, in [0, 1] (``DP_RECALL_Q0``).
    tau : float
        Decay constant, age units (user turns, or API rounds / L).
    r_squared : float
        Weighted R² of the fit on the bins it used.
    bins : int
        Bins used (observed by at least ``MIN_BIN_MESSAGES`` messages).
    """

    q0: float
    tau: float
    r_squared: float
    bins: int


_TAU_GRID = np.geomspace(0.05, 500.0, 400)


def _q0_for(tau: float, ages: npt.NDArray[np.float64], q: npt.NDArray[np.float64], w: npt.NDArray[np.float64]) -> tuple[float, float]:
    """Best q0 for a given τ (closed form, clipped to [0, 1]) and the weighted SSE."""
    e = np.exp(-ages / tau)
    q0 = float(np.clip((w * q * e).sum() / max((w * e * e).sum(), 1e-300), 0.0, 1.0))
    return q0, float((w * (q - q0 * e) ** 2).sum())


def _grid_errors(taus: npt.NDArray[np.float64], ages: npt.NDArray[np.float64], q: npt.NDArray[np.float64],
                 w: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The weighted SSE of :func:`_q0_for` for every τ of ``taus`` at once, shape (len(taus),):
    one row per τ, summed as :func:`_q0_for` sums one (a test checks they are equal)."""
    e = np.exp(-ages[None, :] / taus[:, None])
    q0s = np.clip((w * q * e).sum(axis=1) / np.maximum((w * e * e).sum(axis=1), 1e-300), 0.0, 1.0)
    return (w * (q - q0s[:, None] * e) ** 2).sum(axis=1)


def fit_exponential(counts: RecallCounts, *, min_messages: int = MIN_BIN_MESSAGES) -> RecallFit:
    """Fit q0 and τ by weighted least squares on ``counts.curve`` (weights: observed messages).

    Parameters
    ----------
    counts : RecallCounts
        Pooled counts.
    min_messages : int
        Bins observed through fewer messages are left out.

    Returns
    -------
    RecallFit
        NaN values when fewer than two bins are usable.

    Notes
    -----
    For each τ on a log grid (0.05 to 500 age units) q0 has a closed form; the best grid τ is
    refined by golden-section search on log τ. No SciPy.
    """
    usable = counts.observed >= min_messages
    if usable.sum() < 2:
        return RecallFit(float("nan"), float("nan"), float("nan"), int(usable.sum()))
    ages = np.flatnonzero(usable).astype(np.float64)
    q = counts.needed[usable] / counts.observed[usable]
    w = counts.observed[usable].astype(np.float64)
    errors = _grid_errors(_TAU_GRID, ages, q, w)
    best = int(np.argmin(errors))
    lo, hi = np.log(_TAU_GRID[max(best - 1, 0)]), np.log(_TAU_GRID[min(best + 1, len(_TAU_GRID) - 1)])
    ratio = (np.sqrt(5.0) - 1.0) / 2.0
    for _ in range(60):
        a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if _q0_for(float(np.exp(a)), ages, q, w)[1] < _q0_for(float(np.exp(b)), ages, q, w)[1]:
            hi = b
        else:
            lo = a
    tau = float(np.exp((lo + hi) / 2.0))
    q0, sse = _q0_for(tau, ages, q, w)
    mean = (w * q).sum() / w.sum()
    total = float((w * (q - mean) ** 2).sum())
    return RecallFit(q0, tau, 1.0 - sse / total if total > 0 else float("nan"), int(usable.sum()))
