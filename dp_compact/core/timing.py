"""Time in the planner (DESIGN §8): the cache's state after a silence, the idle hazard, the write lifetime.

Pure: the planner is given numbers (seconds since the last call, a cache TTL, an idle hazard);
the clock and the transcript's times are read at the edges (:func:`dp_compact.prepare.plan_prepared`,
``dp-compact plan --now``, the adapters, the replay's dp policy).

- :class:`Timing`: what the plan knows of time: the silence since the last LLM call, the cache TTL
  (the session's write lifetime unless given), and the idle hazard.
- :class:`IdleHazard`: at the end of an assistant turn (the agent waits for the person), the
  chance that the next user message comes more than 5 minutes and more than 1 hour after the
  final answer; fitted by ``dp-compact calibrate`` (:mod:`dp_compact.calibration.idle`) and
  shipped as :data:`IDLE_HAZARD`.
- :func:`cache_state`: cold now (the silence exceeds the TTL), or the chance of being cold at the
  next call.
- :func:`lifetime_costs`: what the session's calls would have paid for their cache with 5-minute
  and with 1-hour writes, from its own gaps (which lifetime pays for its rhythm).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.conversation import Session, epoch_seconds
from dp_compact.measure.columns import usage_columns
from dp_compact.measure.memo import AppendMemo
from dp_compact.core.tiers import rates_at
from dp_compact.pricing import CACHE_TTL_1H_S, CACHE_TTL_5M_S, Prices

__all__ = ["IDLE_HAZARD", "RECENT_GAPS", "IdleHazard", "Timing", "at_turn_end", "cache_state", "lifetime_costs", "parse_instant",
           "session_call_seconds", "session_lifetime_costs", "timing_facts"]


#: An epoch time above this is in milliseconds (as :func:`dp_compact.conversation.call_seconds` reads them).
_EPOCH_MS_FROM = 1e11


def parse_instant(value: Any) -> float:
    """An instant as epoch seconds: ISO 8601 text (``2026-12-06T10:00:00Z``; without a zone, UTC), or
    epoch seconds or milliseconds (a number, or its text).

    Raises
    ------
    ValueError
        If ``value`` is none of these.

    >>> parse_instant("2026-12-06T10:00:00Z"), parse_instant("1700000000000")
    (1796551200.0, 1700000000.0)
    """
    from datetime import UTC, datetime

    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            try:
                moment = datetime.fromisoformat(text)
            except ValueError:
                raise ValueError(f"{value!r} is neither ISO 8601 nor epoch seconds") from None
            return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
        value = number
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value) / 1000.0 if value > _EPOCH_MS_FROM else float(value)
    raise ValueError(f"{value!r} is neither ISO 8601 nor epoch seconds")


@dataclass(frozen=True, slots=True)
class IdleHazard:
    """How long the person takes to answer a final answer (DESIGN §8 "idle hazard").

    Attributes
    ----------
    after_5m, after_1h : float
        P(the next user message comes more than 300 s / 3,600 s after the final assistant
        answer), in [0, 1], ``after_1h <= after_5m``.
    gaps : int
        Gaps behind the fit (0 for a value given by hand).
    source : str
        Where the numbers come from.

    Raises
    ------
    ValueError
        If a chance lies outside [0, 1] or ``after_1h > after_5m``.
    """

    after_5m: float
    after_1h: float
    gaps: int = 0
    source: str = ""

    def __post_init__(self) -> None:
        if not (0.0 <= self.after_1h <= self.after_5m <= 1.0):
            raise ValueError(f"idle hazard: need 0 <= after_1h ({self.after_1h}) <= after_5m ({self.after_5m}) <= 1")

    def survival(self, seconds: float) -> float:
        """P(gap > seconds): linear between (0, 1), (300 s, after_5m) and (3,600 s, after_1h);
        beyond 1 hour ``after_1h · 3600 / seconds`` (a Pareto tail; no TTL is longer)."""
        if seconds > CACHE_TTL_1H_S:
            return self.after_1h * CACHE_TTL_1H_S / seconds
        return float(np.interp(max(seconds, 0.0), [0.0, CACHE_TTL_5M_S, CACHE_TTL_1H_S], [1.0, self.after_5m, self.after_1h]))

    def cold_chance(self, ttl_s: float, elapsed_s: float = 0.0) -> float:
        """P(gap > ttl | gap > elapsed): the chance that the cache has expired when the person
        answers, ``elapsed_s`` seconds of silence already past; 1 when the silence exceeds the TTL."""
        if elapsed_s > ttl_s:
            return 1.0
        if not math.isfinite(ttl_s):
            return 0.0
        alive = self.survival(elapsed_s)
        return min(self.survival(ttl_s) / alive, 1.0) if alive > 0 else 1.0

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"after_5m": self.after_5m, "after_1h": self.after_1h, "gaps": self.gaps, "source": self.source}


#: The shipped idle hazard: ``dp-compact calibrate ../shared/sessions`` (calibration/results.json,
#: ``idle``): 27 gaps between a final assistant answer and the next user message in the 6 Claude Code
#: and Codex transcripts with such gaps; 13 longer than 5 minutes, 1 longer than 1 hour
#: (calibration/README.md). Used when no fit is given.
IDLE_HAZARD = IdleHazard(after_5m=13 / 27, after_1h=1 / 27, gaps=27,
                         source="calibration/results.json (idle): 27 turn-end gaps, 6 Claude Code and Codex sessions")


#: Gaps between recorded calls whose share above the TTL is the forecast's chance of a cold later
#: call (the same window as the growth per call, ``GROWTH_WINDOW_CALLS``).
RECENT_GAPS = 20


@dataclass(frozen=True, slots=True)
class Timing:
    """What the plan knows of time (DESIGN §8).

    Attributes
    ----------
    idle_s : float or None
        Seconds since the last LLM call (``now`` less the last call's time); None: unknown (a
        transcript without times): the plan is then timeless, as DESIGN §2 and §7 price it.
    cache_ttl_s : float or None
        Seconds a cache entry lives after its last use; None: the prices' own
        (``Prices.cache_ttl_s``, the session's write mix); ``inf``: never expires.
    hazard : IdleHazard or None
        None: the shipped :data:`IDLE_HAZARD`.
    source : str
        Where "now" comes from: ``"transcript"`` (its last record), ``"--now"``, ``"wall clock"``
        (adapters, the hook), ``"replay"`` (the next recorded call).
    imminent : bool
        The next call is made now (the replay asks just before it): the silence is complete and
        no idle hazard applies, even after an assistant message.
    recent_gaps_s : tuple[float, ...]
        Seconds between the session's last recorded calls (at most :data:`RECENT_GAPS` of them):
        the share longer than the TTL is the chance that a later call finds the cache cold
        (:meth:`cold_share`).
    """

    idle_s: float | None = None
    cache_ttl_s: float | None = None
    hazard: IdleHazard | None = None
    source: str = ""
    imminent: bool = False
    recent_gaps_s: tuple[float, ...] = ()

    def cold_share(self, prices: Prices) -> float:
        """Share of :attr:`recent_gaps_s` longer than the TTL (unknown gaps left out), 0 without any."""
        gaps = [float(gap) for gap in self.recent_gaps_s if math.isfinite(gap)]  # a few gaps: no arrays
        if not gaps:
            return 0.0
        ttl = self.ttl(prices)
        return sum(1 for gap in gaps if gap > ttl) / len(gaps)

    def ttl(self, prices: Prices) -> float:
        """The TTL in force, seconds: as given, else the prices' (``Prices.cache_ttl_s``, the
        session's write mix), but 5 minutes for a provider that sells no 1-hour entries (a
        session's recorded 1-hour writes priced at another provider's prices)."""
        if self.cache_ttl_s is not None:
            return float(self.cache_ttl_s)
        return prices.cache_ttl_s if prices.p_cache_write_1h is not None else CACHE_TTL_5M_S


def at_turn_end(session: Session) -> bool:
    """True when the conversation ends with a final assistant answer (no tool call): the agent waits
    for the person, and the next call comes after the idle gap (DESIGN §8)."""
    return bool(session.messages) and session.messages[-1].role == "assistant" and not session.messages[-1].tool_calls


def cache_state(timing: Timing | None, prices: Prices, turn_end: bool) -> tuple[bool, float]:
    """``(cold_now, cold_chance)`` of the next call's cache (DESIGN §8).

    ``cold_now``: the silence already exceeds the TTL (chance 1). Else, at the end of an assistant
    turn, the chance that the person answers after the TTL (:meth:`IdleHazard.cold_chance`, given
    the silence so far), unless the call is ``imminent``; else 0 (the next call comes now).
    Without a known silence: ``(False, 0)``.
    """
    if timing is None or timing.idle_s is None or not math.isfinite(timing.idle_s):
        return False, 0.0
    ttl = timing.ttl(prices)
    if timing.idle_s > ttl:
        return True, 1.0
    if not turn_end or timing.imminent:
        return False, 0.0
    return False, (timing.hazard or IDLE_HAZARD).cold_chance(ttl, max(timing.idle_s, 0.0))


def lifetime_costs(gaps_s: npt.NDArray[np.float64], prompt_tokens: npt.NDArray[np.float64], prices: Prices) -> dict[str, Any] | None:
    """The cache bill of the session's calls with 5-minute and with 1-hour writes (DESIGN §8).

    Call ``j`` (after the first) reads from the cache the part of its prompt the previous call sent
    (``min(prompt_{j−1}, prompt_j)``) and writes the rest, unless the gap before it exceeds the
    lifetime: then it writes its whole prompt. Each at the tier of its own prompt
    (:func:`~dp_compact.core.tiers.rates_at`).

    Parameters
    ----------
    gaps_s : ndarray[float64], shape (C − 1,)
        Seconds between consecutive calls (NaN: unknown, counted as warm).
    prompt_tokens : ndarray[float64], shape (C,)
        Prompt of each call, tokens.
    prices : Prices
        ``p_write_5m``, ``p_write_1h`` and ``p_cache``, $/MTok.

    Returns
    -------
    dict or None
        ``usd_5m``, ``usd_1h`` ($ of reads and writes of calls 1..C−1), ``cold_5m``, ``cold_1h``
        (calls that found the cache expired), ``better`` (``"5m"`` or ``"1h"``; ties: 5m),
        ``saves_usd`` (what the better saves over the other) and ``current`` (the lifetime the
        session used, ``Prices.write_lifetime``). None with fewer than two calls, or a provider
        that sells one lifetime only (no ``p_cache_write_1h``).
    """
    prompts = np.asarray(prompt_tokens, dtype=np.float64)
    gaps = np.asarray(gaps_s, dtype=np.float64)
    if prompts.size < 2 or prices.p_cache_write_1h is None or gaps.shape != (prompts.size - 1,):
        return None
    now, before = prompts[1:], prompts[:-1]
    rates = rates_at(prices, now)
    warm_read = np.minimum(before, now)
    out: dict[str, Any] = {}
    for name, ttl, p_write in (("5m", CACHE_TTL_5M_S, rates.p_write_5m), ("1h", CACHE_TTL_1H_S, rates.p_write_1h)):
        cold = gaps > ttl  # NaN compares False: unknown times count as warm
        read = np.where(cold, 0.0, warm_read)
        out[f"usd_{name}"] = float((read * rates.p_cache + (now - read) * p_write).sum() / 1e6)
        out[f"cold_{name}"] = int(np.count_nonzero(cold))
    better = "1h" if out["usd_1h"] < out["usd_5m"] else "5m"
    out.update(better=better, saves_usd=abs(out["usd_5m"] - out["usd_1h"]), current=prices.write_lifetime)
    return out


def _seconds_extend(state: array, times: tuple[Any, ...]) -> array:
    """:func:`~dp_compact.conversation.call_seconds` of the call times ``times``, appended to ``state``: its
    reading of each time, without making a session for them (a live conversation appends one or two a call)."""
    state.extend(list(map(epoch_seconds, times)))
    return state


def _seconds_finish(state: array) -> npt.NDArray[np.float64]:
    """The seconds of a :func:`_seconds_extend` state, read-only."""
    seconds = np.frombuffer(bytes(state), dtype=np.float64) if len(state) else np.zeros(0, np.float64)
    seconds.setflags(write=False)
    return seconds


#: Each recorded call time read once: the times of a live conversation grow by appends.
_SECONDS: AppendMemo[array, npt.NDArray[np.float64]] = AppendMemo(lambda: array("d"), _seconds_extend, lambda state: array("d", state),
                                                                  _seconds_finish)


def session_call_seconds(session: Session) -> npt.NDArray[np.float64]:
    """:func:`~dp_compact.conversation.call_seconds` of ``session`` (epoch seconds per LLM call, NaN where
    unknown; shape (len(call_times),)), read-only; each time read once for times that extend those
    of a session seen recently (:class:`~dp_compact.measure.memo.AppendMemo`)."""
    return _SECONDS(session.call_times)


def session_lifetime_costs(session: Session, prices: Prices) -> dict[str, Any] | None:
    """:func:`lifetime_costs` of ``session``'s own calls: the gaps between its recorded call times
    (``Session.call_times``) and the prompts of its usage records, paired from the last call back
    (a file may record a call without usage, or a time without a call); None without both."""
    times = session_call_seconds(session)
    columns = usage_columns(session.usage)
    prompts = np.asarray([u.prompt_tokens for u in session.usage], dtype=np.float64) if columns is None else \
        columns.prompt_tokens.astype(np.float64)
    n = min(times.size, prompts.size)
    if n < 2 or not np.count_nonzero(np.isfinite(times[-n:])):
        return None
    last = times[-n:]  # shape (n,)
    return lifetime_costs(last[1:] - last[:-1], prompts[-n:], prices)


def timing_facts(session: Session, timing: Timing | None, prices: Prices, turn_end: bool, cold_now: bool,
                 cold_chance: float) -> dict[str, Any] | None:
    """The plan's ``timing`` (DESIGN §8): ``idle_s`` (seconds since the last call), ``source`` (of
    "now"), ``cache_ttl_s`` and ``ttl_source``, ``turn_end``, ``cold_now``, ``cold_chance``, the
    ``hazard`` used, ``lifetime`` (:func:`session_lifetime_costs`) and ``lifetime_note`` (why there is
    none); None when the silence is unknown, the session records no times and no "now" was given."""
    lifetime = session_lifetime_costs(session, prices)
    known = timing is not None and timing.idle_s is not None and math.isfinite(timing.idle_s)
    given = timing is not None and bool(timing.source) and not timing.source.startswith(("transcript", "replay"))
    if not known and lifetime is None and not given and not np.count_nonzero(np.isfinite(session_call_seconds(session))):
        return None
    ttl = (timing or Timing()).ttl(prices)
    ttl_given = timing is not None and timing.cache_ttl_s is not None
    return {
        "idle_s": timing.idle_s if known and timing is not None else None, "source": timing.source if timing else "",
        "cache_ttl_s": ttl if math.isfinite(ttl) else None,
        "ttl_source": "given" if ttl_given else (
            f"the session's write lifetime ({prices.write_lifetime}, {prices.write_1h_share:.0%} 1-hour writes)"
            if prices.p_cache_write_1h is not None else "5 minutes: the provider sells no 1-hour entries"),
        "turn_end": turn_end, "cold_now": cold_now, "cold_chance": cold_chance,
        "hazard": (timing.hazard if timing and timing.hazard else IDLE_HAZARD).to_dict(), "lifetime": lifetime,
        "lifetime_note": "" if lifetime is not None else (
            "the provider sells one cache lifetime (its prices have no 1-hour writes): nothing to choose"
            if prices.p_cache_write_1h is None else "the session's calls and usage records give no gaps to price"),
    }
