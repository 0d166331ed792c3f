"""The recall curve q(a) of DESIGN §2, measured from transcripts, and its exponential fit.

A message is *needed again at age a* when a later message, ``a`` age units after it, mentions a
file path, command or identifier that first appeared in it (re-reads a file, re-runs a command,
uses a name). Items are attributed to the message that introduced them, so q(a) is the chance
that a message of age ``a`` is needed again within the age bin ``[a, a + 1)``: the quantity the
recall term ④ prices for a dropped message (DESIGN §2: ``q_j = q0 · exp(-a_j / τ)``).

Ages use the planner's own units (:func:`dp_compact.planner.plan`, ``DP_RECALL_AGE``):
``turns`` (user messages between the two) or ``rounds`` (API rounds between them divided by L).
The fit is weighted least squares on the pooled curve; its spread is a bootstrap over sessions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dp_compact.cuts import MessageArrays
from dp_compact.sessions.common import is_summary_text
from dp_compact.sessions.model import Message
from dp_compact.tokens import message_token_text

__all__ = [
    "MAX_AGE_BINS",
    "MIN_BIN_MESSAGES",
    "RecallCounts",
    "RecallFit",
    "extract_items",
    "fit_exponential",
    "message_ages",
    "recall_counts",
]

#: Age bins measured: ``[0, 1)`` to ``[MAX_AGE_BINS - 1, MAX_AGE_BINS)`` age units.
MAX_AGE_BINS = 24
#: A pooled bin enters the fit only when this many messages were observed through it.
MIN_BIN_MESSAGES = 20

_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\w.@~-]+[/\\])+[\w@-][\w.@-]*|\b[\w-]+\.(?:py|pyi|ipynb|js|jsx|ts|tsx|mjs|json|jsonl|md|"
                   r"rst|txt|toml|ya?ml|ini|cfg|sh|rs|go|java|kt|cs|c|h|cc|cpp|hpp|rb|php|swift|sql|html|css|scss|vue|lock|env)\b")
_IDENTIFIER = re.compile(r"\b(?:[A-Za-z]+_[A-Za-z0-9_]*[A-Za-z0-9]|[a-z]+[A-Z][A-Za-z0-9]*|[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*)\b")
_COMMAND = re.compile(r'"(?:command|cmd)"\s*:\s*"((?:[^"\\]|\\.){3,400})"')
_MIN_IDENTIFIER_CHARS = 5


def extract_items(text: str) -> set[str]:
    """File paths, commands (``"command"``/``"cmd"`` tool arguments) and identifiers in ``text``.

    Identifiers are snake_case, camelCase or PascalCase names of at least 5 characters; plain
    words are not items. Paths keep their case; a trailing ``.`` or ``/`` is dropped.

    >>> sorted(extract_items('Read src/billing/vat.py and call round_half_up in TaxTable'))
    ['TaxTable', 'round_half_up', 'src/billing/vat.py']
    """
    items = {m.rstrip("./\\") for m in _PATH.findall(text)}
    items.update(m for m in _IDENTIFIER.findall(text) if len(m) >= _MIN_IDENTIFIER_CHARS)
    items.update("$ " + " ".join(m.split()) for m in _COMMAND.findall(text))
    items.discard("")
    return items


def message_ages(arrays: MessageArrays, unit: str, calls_per_turn: float) -> npt.NDArray[np.float64]:
    """Each message's position on the planner's age scale; shape (N,).

    ``turns``: user messages so far (``turn_index``); ``rounds``: API rounds so far divided by
    ``calls_per_turn`` (L). The age of message j seen from message m is ``ages[m] - ages[j]``,
    as :func:`dp_compact.planner.plan` measures ``a_j``.

    Raises
    ------
    ValueError
        If ``unit`` is neither ``turns`` nor ``rounds`` or L is not positive.
    """
    if unit == "turns":
        return arrays.turn_index.astype(np.float64)
    if unit != "rounds" or calls_per_turn <= 0:
        raise ValueError(f"unit must be 'turns' or 'rounds' and L > 0, not {unit!r}, {calls_per_turn!r}")
    return arrays.round_index / float(calls_per_turn)


@dataclass(frozen=True, slots=True)
class RecallCounts:
    """Per-age-bin counts of one session (or pooled); arrays of shape (MAX_AGE_BINS,).

    ``needed[b]``: messages needed again at an age in ``[b, b + 1)``; ``observed[b]``: messages
    the session lasted long enough to observe through that bin. q(b) = needed / observed.
    """

    needed: npt.NDArray[np.int64]
    observed: npt.NDArray[np.int64]

    def __add__(self, other: RecallCounts) -> RecallCounts:
        return RecallCounts(self.needed + other.needed, self.observed + other.observed)

    @property
    def curve(self) -> npt.NDArray[np.float64]:
        """q(b) per bin (NaN where nothing was observed)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.observed > 0, self.needed / np.maximum(self.observed, 1), np.nan)


def recall_counts(
    messages: Sequence[Message], ages: npt.NDArray[np.float64], *, discrete: bool, prefix_text: str = ""
) -> RecallCounts:
    """Count, per age bin, the messages needed again (see the module docstring).

    Parameters
    ----------
    messages : sequence of Message
        One segment's messages, in order.
    ages : ndarray[float64], shape (N,)
        :func:`message_ages` of those messages.
    discrete : bool
        True for integer ages (``turns``): bin ``b`` is observed once the session reaches age
        ``b``; else once it reaches ``b + 1``.
    prefix_text : str
        The fixed prefix (system prompt); its items are never attributed to a message.

    Returns
    -------
    RecallCounts

    Notes
    -----
    Summary messages (a compaction's hand-over) never count as a mention: they restate the
    head by construction. Every other message counts in ``observed``, also when it introduced
    no item (it is then never needed: its content is attributed to where it first appeared).
    """
    n = len(messages)
    first_seen: dict[str, int] = dict.fromkeys(extract_items(prefix_text), -1)
    pairs: list[tuple[int, int]] = []
    for m, message in enumerate(messages):
        items = extract_items(message_token_text(message))
        mentions = not is_summary_text(message.text)
        for item in items:
            j = first_seen.setdefault(item, m)
            if mentions and 0 <= j < m:
                pairs.append((j, m))
    needed = np.zeros(MAX_AGE_BINS, dtype=np.int64)
    span = float(ages[-1]) if n else 0.0
    reach = span - ages - (0.0 if discrete else 1.0)  # highest fully observed bin per message
    observed_upto = np.floor(reach + 1e-9).astype(np.int64)
    observed = np.array([(observed_upto >= b).sum() for b in range(MAX_AGE_BINS)], dtype=np.int64)
    if pairs:
        source, mention = np.array(pairs, dtype=np.int64).T
        bins = np.floor(ages[mention] - ages[source] + 1e-9).astype(np.int64)
        keep = (bins < MAX_AGE_BINS) & (bins <= observed_upto[source])
        unique = np.unique(source[keep] * MAX_AGE_BINS + bins[keep])
        needed = np.bincount(unique % MAX_AGE_BINS, minlength=MAX_AGE_BINS).astype(np.int64)
    return RecallCounts(needed, observed)


@dataclass(frozen=True, slots=True)
class RecallFit:
    """q(a) = q0 · exp(−a / τ) fitted to a pooled curve.

    Attributes
    ----------
    q0 : float
        Recall probability at age 0, in [0, 1].
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

    @property
    def q0_needed_again(self) -> float:
        """q0 of the cost model: the chance a message is needed again at all, from age 0 on.

        The fit measures a rate per unit of age, q0 · exp(−a/τ) for ages in [a, a + 1); the
        cost model's q_j (DESIGN §2) is the chance of being needed again at any later age, the
        sum of the rates over the ages still to come: q0 / (1 − exp(−1/τ)), capped at 1. The
        decay τ is the same for both. (The sum counts a message needed twice twice, so it is an
        upper bound of the chance.)
        """
        if not (np.isfinite(self.q0) and np.isfinite(self.tau)) or self.tau <= 0:
            return float("nan")
        return float(min(1.0, self.q0 / (1.0 - np.exp(-1.0 / self.tau))))


_TAU_GRID = np.geomspace(0.05, 500.0, 400)


def _q0_for(tau: float, ages: npt.NDArray[np.float64], q: npt.NDArray[np.float64], w: npt.NDArray[np.float64]) -> tuple[float, float]:
    """Best q0 for a given τ (closed form, clipped to [0, 1]) and the weighted SSE."""
    e = np.exp(-ages / tau)
    q0 = float(np.clip((w * q * e).sum() / max((w * e * e).sum(), 1e-300), 0.0, 1.0))
    return q0, float((w * (q - q0 * e) ** 2).sum())


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
    errors = [_q0_for(float(t), ages, q, w)[1] for t in _TAU_GRID]
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
