"""Estimates with bootstrap spreads over sessions, and the survival fit of session lengths (DESIGN §7).

Every calibrated value is an :class:`Estimate`: a point value and its spread over resamples of
the sessions with replacement. The look-ahead planner's survival curve is a Lomax fit of the
sessions' lengths in LLM calls (:func:`fit_survival`). Pure: numbers in, numbers out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Estimate", "bootstrap_draws", "bootstrap_estimate", "fit_survival", "survival_estimates"]


@dataclass(frozen=True, slots=True)
class Estimate:
    """A calibrated value with its bootstrap spread over sessions (``p05``/``p95``, ``std``) and ``n`` sessions."""

    value: float
    std: float
    p05: float
    p95: float
    n: int

    def to_dict(self) -> dict[str, float | int]:
        """Plain data."""
        return {"value": self.value, "std": self.std, "p05": self.p05, "p95": self.p95, "n": self.n}


def bootstrap_estimate(values: Sequence[Any], statistic: Any, resamples: int, rng: np.random.Generator) -> Estimate | None:
    """``statistic(values)`` and its spread over ``resamples`` resamples of ``values`` with replacement.

    Returns None when ``values`` is empty; NaN spreads when no resample gives a finite statistic.
    """
    if not values:
        return None
    point = float(statistic(list(values)))
    draws = np.array([statistic([values[i] for i in rng.integers(0, len(values), len(values))]) for _ in range(resamples)], dtype=float)
    draws = draws[np.isfinite(draws)]
    if draws.size == 0 or len(values) < 2:  # one session: resampling it shows no spread, only rounding
        return Estimate(point, float("nan"), float("nan"), float("nan"), len(values))
    p05, p95 = np.percentile(draws, [5, 95])
    return Estimate(point, float(draws.std()), float(p05), float(p95), len(values))


def bootstrap_draws(point: float, draws: list[float], n: int) -> Estimate:
    """An :class:`Estimate` from a point value and bootstrap draws (NaN draws dropped) over ``n`` sessions."""
    values = np.array([d for d in draws if np.isfinite(d)], dtype=float)
    if values.size == 0 or n < 2:  # one session: resampling it shows no spread, only rounding
        return Estimate(point, float("nan"), float("nan"), float("nan"), n)
    p05, p95 = np.percentile(values, [5, 95])
    return Estimate(point, float(values.std()), float(p05), float(p95), n)


#: Scales (calls) tried by the survival fit's profile likelihood, log-spaced.
_SURVIVAL_SCALES = np.geomspace(0.5, 1e5, 600)
#: The largest scale the survival fit tries: a fit there is the limit of the Lomax curve for
#: lengths no more spread out than an exponential's, ``exp(−n / mean)`` with mean ``scale / (alpha − 1)``.
SURVIVAL_SCALE_LIMIT = float(_SURVIVAL_SCALES[-1])


def fit_survival(lengths: Sequence[float]) -> tuple[float, float]:
    """Lomax fit of session lengths (DESIGN §7 survival curve): ``(alpha, scale)``, scale in calls.

    ``P(length > n) = (1 + n / scale) ** −alpha``; maximum likelihood, the shape in closed form for
    each scale (``alpha = m / Σ log(1 + x_i / scale)``) and the scale by a log-spaced search.

    Raises
    ------
    ValueError
        With fewer than two positive lengths.

    >>> alpha, scale = fit_survival([47, 71, 184, 34, 3, 325, 4, 77, 349, 18, 10, 353, 13, 30, 21, 28])
    >>> round(alpha, 2), round(scale)
    (1.55, 72)
    """
    x = np.asarray([v for v in lengths if v > 0], dtype=np.float64)
    if x.size < 2:
        raise ValueError("the survival fit needs at least two session lengths")
    logs = np.log1p(x[None, :] / _SURVIVAL_SCALES[:, None]).sum(axis=1)
    alphas = x.size / logs
    likelihood = x.size * np.log(alphas / _SURVIVAL_SCALES) - (alphas + 1.0) * logs
    best = int(np.argmax(likelihood))
    return float(alphas[best]), float(_SURVIVAL_SCALES[best])


def survival_estimates(lengths: Sequence[float], resamples: int, rng: np.random.Generator) -> tuple[Estimate, Estimate] | None:
    """:func:`fit_survival` of ``lengths`` (calls) and its bootstrap spreads over sessions: (alpha, scale).

    None with fewer than two positive lengths. A resample needs two different lengths to be
    fitted; when every such resample is the sessions themselves (two sessions), the spreads are
    NaN (none is shown), not zero.
    """
    if sum(1 for v in lengths if v > 0) < 2:
        return None
    alpha, scale = fit_survival(lengths)
    values = np.asarray(lengths, dtype=np.float64)
    draws = []
    ordered, differs = np.sort(values), False
    for _ in range(resamples):
        sample = rng.choice(values, size=values.size)
        if np.count_nonzero(sample > 0) >= 2 and np.unique(sample).size > 1:
            draws.append(fit_survival(sample))
            differs = differs or not np.array_equal(np.sort(sample), ordered)
    if not differs:  # two sessions: the only resample a fit takes is the sessions themselves, which shows no spread
        draws = []
    columns = np.array(draws, dtype=np.float64).reshape(-1, 2)
    return (bootstrap_draws(alpha, columns[:, 0].tolist(), values.size),
            bootstrap_draws(scale, columns[:, 1].tolist(), values.size))
