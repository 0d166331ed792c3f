"""Whole-request price tiers in the planner (DESIGN §8): every call at the tier of its own prompt.

:func:`rates_at` gives the $/MTok rates of requests of many prompt sizes at once (the look-ahead's
grid of context sizes), the vectorized form of :meth:`dp_compact.pricing.Prices.at` (cliff rule
``prompt > start``, genai-prices'); :func:`next_cliff` says when the session's prompt, growing as
forecast, passes the next threshold. Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.pricing import Prices

__all__ = ["Rates", "next_cliff", "rates_at"]

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Rates:
    """$/MTok of requests by prompt size: floats for prices without tiers, else arrays shaped
    like the prompts given to :func:`rates_at`. Duck-types :class:`~dp_compact.pricing.Prices` for
    :func:`~dp_compact.core.benefit.compaction_request_cost` (``p_input``, ``p_cache``,
    ``p_write``, ``p_out``); ``p_write`` is at the session's write mix (``Prices.p_write``)."""

    p_input: Any
    p_cache: Any
    p_out: Any
    p_write: Any
    p_write_5m: Any
    p_write_1h: Any


def _levels(prices: Prices) -> list[Prices]:
    """The base prices, then each tier's (``Prices.at`` just above its threshold)."""
    return [prices, *(prices.at(start + 1) for start in prices.tier_starts)]


_RATE_NAMES = ("p_input", "p_cache", "p_out", "p_write", "p_write_5m", "p_write_1h")


@lru_cache(maxsize=32)
def _level_table(prices: Prices) -> tuple[Floats, Floats]:
    """The tier thresholds (float64, shape (T,)) and the rates of :class:`Rates` at each level of
    :func:`_levels` (float64, shape (6, T + 1), one row per rate in the order of the fields), read-only:
    made once per prices."""
    levels = _levels(prices)
    starts = np.asarray(prices.tier_starts, dtype=np.float64)
    table = np.asarray([[getattr(p, name) for p in levels] for name in _RATE_NAMES], dtype=np.float64)
    for array in (starts, table):
        array.setflags(write=False)
    return starts, table


def rates_at(prices: Prices, prompt_tokens: Any) -> Rates:
    """The rates every token of a request pays, by the size of its prompt (DESIGN §8).

    Parameters
    ----------
    prices : Prices
        $/MTok with their whole-request ``tiers``.
    prompt_tokens : float or ndarray
        Prompt sizes, V included, tokens.

    Returns
    -------
    Rates
        Without tiers, the prices' own floats (whatever the prompt); with tiers, arrays of the
        shape of ``prompt_tokens``: a prompt above ``tier_starts[i]`` (and not above the next)
        pays tier ``i``, the others the base prices: ``Prices.at`` of each prompt.

    >>> from dp_compact.pricing import PROFILES
    >>> rates_at(PROFILES["gemini-2.5-pro"], np.array([200_000, 200_001])).p_input.tolist()
    [1.25, 2.5]
    """
    if not prices.tiers:
        return Rates(prices.p_input, prices.p_cache, prices.p_out, prices.p_write, prices.p_write_5m, prices.p_write_1h)
    starts, table = _level_table(prices)
    index = np.searchsorted(starts, np.asarray(prompt_tokens, dtype=np.float64), side="left")
    return Rates(*table.take(index, axis=1))  # one gather for the six rates: a row each


def next_cliff(prices: Prices, context_tokens: float, growth_tokens: float) -> dict[str, Any] | None:
    """The next whole-request threshold above the current prompt, or None (no tier above it below the window M:
    a prompt past M is never sent).

    Parameters
    ----------
    prices : Prices
    context_tokens : float
        The prompt about to be sent, V included, tokens.
    growth_tokens : float
        g, tokens the prompt grows per call (> 0).

    Returns
    -------
    dict or None
        ``above_tokens`` (the threshold: a prompt above it pays the tier), ``tokens_to_go``,
        ``calls_to_go`` (``ceil((above + 1 − context) / g)``: the first call whose prompt passes
        it at the session's growth), and the rates above it and below it (``p_input``,
        ``p_cache``, ``p_write``, ``p_out`` each, $/MTok).

    >>> from dp_compact.pricing import PROFILES
    >>> next_cliff(PROFILES["gemini-2.5-pro"], 190_000, 1_000)["calls_to_go"]
    11
    """
    above = [s for s in prices.tier_starts if context_tokens <= s < prices.max_context_tokens]  # a prompt must fit the window
    if not above:
        return None
    start = above[0]
    below, over = prices.at(start), prices.at(start + 1)
    to_go = start + 1 - float(context_tokens)
    return {
        "above_tokens": int(start), "tokens_to_go": int(max(start - float(context_tokens), 0)),
        "calls_to_go": int(max(math.ceil(to_go / max(growth_tokens, 1.0)), 0)),
        "below": {"p_input": below.p_input, "p_cache": below.p_cache, "p_write": below.p_write, "p_out": below.p_out},
        "above": {"p_input": over.p_input, "p_cache": over.p_cache, "p_write": over.p_write, "p_out": over.p_out},
    }
