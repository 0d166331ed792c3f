"""The idle hazard (DESIGN §8): how long people take to answer a final answer, from transcripts with times.

At the end of an assistant turn the agent waits for the person; if they answer after the cache's
lifetime, the next request finds it cold. :func:`turn_end_gaps` measures, in one session, the
seconds between each final assistant answer (an assistant message without tool calls) that a
user turn follows and the next LLM call (the first call answering that user turn: its time is
the user message's plus the model's latency, seconds); :func:`fit_idle` pools them into the
chances that the gap exceeds 5 minutes and 1 hour, with bootstrap spreads over sessions. The
planner's shipped default is :data:`dp_compact.core.timing.IDLE_HAZARD`. Pure: sessions in, numbers out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.calibration.fit import Estimate, bootstrap_draws
from dp_compact.conversation import Session, call_seconds
from dp_compact.core.timing import IdleHazard
from dp_compact.pricing import CACHE_TTL_1H_S, CACHE_TTL_5M_S

__all__ = ["IDLE_FORMATS", "IDLE_RULE", "IdleFit", "fit_idle", "turn_end_gaps"]

#: Formats whose gaps are measured: one conversation per file, one time per LLM call (Claude Code,
#: Codex). A Gemini CLI stream log may hold several runs under several session ids, and the gap
#: between two runs is not a person answering a final answer.
IDLE_FORMATS = ("claude_code", "codex")

#: How ``results.json`` says the gaps were measured.
IDLE_RULE = ("seconds from a final assistant answer (no tool call) followed by a user turn to the next LLM call"
             " (Session.call_times: one per assistant message of the history); sessions whose times do not pair"
             " with their assistant messages give none")


def turn_end_gaps(session: Session) -> npt.NDArray[np.float64]:
    """Seconds between each final assistant answer that a user turn follows and the next LLM call.

    Parameters
    ----------
    session : Session
        A whole file's session (``history`` and ``call_times``, one time per assistant message of
        the history), of a format in :data:`IDLE_FORMATS`.

    Returns
    -------
    ndarray[float64], shape (n_gaps,)
        In file order; empty for another format, or when the session records no times or its
        times do not pair one to one with its assistant messages. Unknown times are left out.

    >>> from dp_compact.conversation import Message
    >>> ms = (Message("user", "a"), Message("assistant", "b"), Message("user", "c"), Message("assistant", "d"))
    >>> turn_end_gaps(Session(path="", format="codex", messages=ms, history=ms, call_times=(0, 400))).tolist()
    [400.0]
    """
    if session.format not in IDLE_FORMATS:
        return np.zeros(0, dtype=np.float64)
    history = session.history or session.messages
    times = call_seconds(session)
    assistant = [i for i, m in enumerate(history) if m.role == "assistant"]
    if times.size == 0 or times.size != len(assistant):
        return np.zeros(0, dtype=np.float64)
    call_of = {position: j for j, position in enumerate(assistant)}
    gaps: list[float] = []
    last: int | None = None
    pending: int | None = None  # the final answer a user turn followed, until the next call
    for i, message in enumerate(history):
        if message.role == "assistant":
            if pending is not None:
                gaps.append(float(times[call_of[i]] - times[call_of[pending]]))
                pending = None
            last = i
        elif pending is None and message.kind == "prompt" and last is not None and not history[last].tool_calls:
            pending = last
    gap_array = np.asarray(gaps, dtype=np.float64)
    return gap_array[np.isfinite(gap_array)]


@dataclass(frozen=True, slots=True)
class IdleFit:
    """The fitted idle hazard.

    Attributes
    ----------
    after_5m, after_1h : Estimate
        Pooled share of gaps longer than 300 s / 3,600 s, with bootstrap spreads over sessions.
    gaps : tuple[tuple[str, tuple[float, ...]], ...]
        ``(path, gaps in seconds)`` of every session with at least one gap: the data.
    """

    after_5m: Estimate
    after_1h: Estimate
    gaps: tuple[tuple[str, tuple[float, ...]], ...] = field(default=())

    @property
    def n_gaps(self) -> int:
        """Gaps behind the fit."""
        return sum(len(g) for _, g in self.gaps)

    def hazard(self, source: str = "") -> IdleHazard:
        """The planner's :class:`~dp_compact.core.timing.IdleHazard` of this fit."""
        return IdleHazard(self.after_5m.value, min(self.after_1h.value, self.after_5m.value), self.n_gaps, source)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the two chances, the rule, and the gaps per session (seconds, rounded to 0.1 s)."""
        return {
            "after_5m": self.after_5m.to_dict(), "after_1h": self.after_1h.to_dict(), "gaps": self.n_gaps,
            "sessions": len(self.gaps), "rule": IDLE_RULE,
            "gaps_s": {path: [round(g, 1) for g in gaps] for path, gaps in self.gaps},
        }


def _shares(groups: Sequence[npt.NDArray[np.float64]]) -> tuple[float, float]:
    """Pooled shares of gaps longer than 5 minutes and 1 hour (NaN without gaps)."""
    pooled = np.concatenate(groups) if groups else np.zeros(0)
    if pooled.size == 0:
        return float("nan"), float("nan")
    return float(np.mean(pooled > CACHE_TTL_5M_S)), float(np.mean(pooled > CACHE_TTL_1H_S))


def fit_idle(gaps: Sequence[tuple[str, Sequence[float]]], resamples: int, rng: np.random.Generator) -> IdleFit | None:
    """Pool the sessions' turn-end gaps into the idle hazard (pooled shares above 5 min and 1 h),
    with bootstrap spreads over sessions (resampling sessions, not gaps: a person's rhythm).

    Parameters
    ----------
    gaps : sequence of (str, sequence of float)
        ``(path, gaps in seconds)`` per session (:func:`turn_end_gaps`); sessions without gaps are left out.
    resamples : int
    rng : numpy.random.Generator

    Returns
    -------
    IdleFit or None
        None without any gap.

    >>> fit = fit_idle([("a", [60, 400]), ("b", [4000, 30])], 50, np.random.default_rng(0))
    >>> fit.after_5m.value, fit.after_1h.value
    (0.5, 0.25)
    """
    kept = [(path, tuple(float(g) for g in values)) for path, values in gaps if len(values)]
    if not kept:
        return None
    groups = [np.asarray(values, dtype=np.float64) for _, values in kept]
    p5, p1 = _shares(groups)
    draws = [_shares([groups[i] for i in rng.integers(0, len(groups), len(groups))]) for _ in range(resamples)]
    return IdleFit(bootstrap_draws(p5, [d[0] for d in draws], len(groups)), bootstrap_draws(p1, [d[1] for d in draws], len(groups)),
                   tuple(kept))
