"""The share of a cached prefix the provider really serves from its cache (DESIGN §8), for the planner.

Providers do not always serve what they could: OpenAI's automatic cache misses often (Codex
sessions read about three quarters of the prefix they could), so a request reads ``h`` × its
cached prefix at ``P_cache`` and writes (or sends uncached) the rest. The replay's meter charges
exactly that (``ReplayParams.cache_hit_share``); :func:`served_prices` gives the planner the same
bill: a cached token costs ``h · P_cache + (1 − h) · P_write`` (per tier and per dated price),
which is linear, so every term of the cost model that reads from the cache prices the misses.

:func:`hit_share_from_usage` measures ``h`` from a session's usage records the way the replay
does (recorded cache reads over the tokens the cache held), where the plan has no replay: the
cache held the previous call's prompt, up to this call's prompt, unless the silence between them
exceeded the TTL or the prompt shrank (a compaction). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from dp_compact.conversation import Usage
from dp_compact.measure.columns import usage_columns
from dp_compact.pricing import Prices

__all__ = ["FULL_HITS", "MIN_HIT_SHARE", "HitShare", "hit_share_from_usage", "served_prices"]

#: The replay's floor on a measured share (:func:`dp_compact.replay.recorded.measured_hit_share`).
MIN_HIT_SHARE = 0.01


@dataclass(frozen=True, slots=True)
class HitShare:
    """The cache-hit share the planner prices, and where it came from.

    Attributes
    ----------
    share : float
        In (0, 1]: the share of a cached prefix read from the cache; the rest is written.
    source : str
        Where it came from (a sentence for the plan's notes); "" when it is 1 for lack of evidence.
    """

    share: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        if not 0.0 < self.share <= 1.0:
            raise ValueError(f"cache-hit share {self.share!r} must lie in (0, 1]")

    def note(self) -> str:
        """The plan's note: which share applied and why."""
        if self.share >= 1.0:
            return f"cache-hit share 1: every cached token priced as read ({self.source or 'no usage records measure it'})"
        return (f"cache-hit share {self.share:.3f}: every request is expected to read {self.share:.1%} of its cached prefix"
                f" from the cache and write the rest, as the replay charges ({self.source})")


#: Every cached token read: the timeless, usage-free plan.
FULL_HITS = HitShare()


def served_prices(prices: Prices, share: float) -> Prices:
    """``prices`` with P_cache replaced by what a cached token really costs at hit share ``share``:
    ``share · P_cache + (1 − share) · P_write`` (the write mix's price; ``P_input`` where writes
    are not priced), in the base prices, every tier and every later dated price. ``share`` 1: the
    prices themselves.

    >>> from dp_compact.pricing import PROFILES
    >>> served_prices(PROFILES["gpt-5"], 0.5).p_cache
    0.6875
    """
    if share >= 1.0:
        return prices
    h = float(share)

    def cached(p_cache: float, p_write: float) -> float:
        return h * p_cache + (1.0 - h) * p_write

    tiers = tuple(replace(t, p_cache=cached(t.p_cache, prices.at(t.start_tokens + 1).p_write)) for t in prices.tiers)
    later = tuple((day, served_prices(p, share)) for day, p in prices.later)
    return replace(prices, p_cache=cached(prices.p_cache, prices.p_write), tiers=tiers, later=later)


def hit_share_from_usage(usage: Sequence[Usage], call_seconds: npt.NDArray[np.float64] | None = None,
                         ttl_s: float | None = None) -> HitShare:
    """The cache-hit share the usage records show (module docstring), with its source.

    Parameters
    ----------
    usage : sequence of Usage
        The session's usage records, in call order.
    call_seconds : ndarray[float64], optional
        Epoch seconds of each record's call (NaN: unknown); used only when it has one per record.
    ttl_s : float, optional
        The cache's life after its last use, seconds; None: it never expires.

    Returns
    -------
    HitShare
        ``recorded cache reads / tokens the cache held`` over the calls after the first, within
        [:data:`MIN_HIT_SHARE`, 1]; 1 without a record of cache reads (a source without a cache
        split, or one whose split the reader estimated) or when the cache held nothing.
    """
    columns = usage_columns(usage)
    if columns is None:
        prompts = np.asarray([u.prompt_tokens for u in usage], dtype=np.float64)
        reads = np.asarray([u.cache_read_tokens for u in usage], dtype=np.float64)
        estimated = any(u.cache_split_estimated for u in usage)
    else:
        prompts, reads = columns.prompt_tokens.astype(np.float64), columns.cache_read_tokens.astype(np.float64)
        estimated = np.count_nonzero(columns.split_estimated) > 0
    if prompts.size < 2 or reads.sum() <= 0 or estimated:
        return FULL_HITS
    held = np.minimum(prompts[:-1], prompts[1:])
    counted = prompts[1:] >= prompts[:-1]  # a shrinking prompt is a compaction: the cache held only its prefix
    if call_seconds is not None and ttl_s is not None and np.size(call_seconds) == prompts.size:
        seconds = np.asarray(call_seconds, dtype=np.float64)
        gaps = seconds[1:] - seconds[:-1] if seconds.ndim == 1 else np.diff(seconds)
        counted &= ~(gaps > ttl_s)  # NaN compares False: an unknown gap counts as warm
    held_total = held[counted].sum()
    if held_total <= 0:
        return FULL_HITS
    found, could = float(reads[1:][counted].sum()), float(held_total)
    share = min(max(found / could, MIN_HIT_SHARE), 1.0)
    if found >= could:  # the provider read all it held (and, where a call's own prefix was cached too, more)
        return HitShare(share, f"measured from the session's usage records: over {np.count_nonzero(counted)} calls they read"
                               f" {int(found):,} tokens from the cache, at least the {int(could):,} it held")
    return HitShare(share, f"measured from the session's usage records: {int(found):,} tokens read from the cache of"
                           f" {int(could):,} the cache held over {np.count_nonzero(counted)} calls")
