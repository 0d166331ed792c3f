"""What one session file says (DESIGN §2, §3): V, L, avg, S, the token ratio and its recall counts.

From a file's :class:`~dp_compact.calibration.history.History`: the fixed prefix V (the first
call's prompt minus its messages), L (LLM calls per user turn), avg (prompt tokens per call),
the summary sizes S of the compactions it records, the ratio of provider-reported prompt tokens
to our cl100k estimate, and the recall counts in both age units of ``DP_RECALL_AGE``, counted
with the replay judge's own detector of later uses (:func:`dp_compact.measure.reuse.find_uses`,
DESIGN §6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.calibration.history import History
from dp_compact.calibration.idle import turn_end_gaps
from dp_compact.calibration.recall import RecallCounts, recall_counts
from dp_compact.conversation import Session, recorded_history
from dp_compact.core.cuts import message_ages, message_arrays
from dp_compact.measure.estimation import DEFAULT_CALLS_PER_TURN, call_message_counts, prompt_growths
from dp_compact.measure.reuse import KIND_FILE_EDIT, KIND_VERBATIM, find_uses
from dp_compact.measure.tokens import count_message_tokens, count_text_tokens, provider_family

__all__ = ["AGE_UNITS", "SessionMeasures", "judged_messages", "measure_session", "planner_calls_per_turn"]

#: The age units of ``DP_RECALL_AGE`` (:func:`dp_compact.core.cuts.message_ages`).
AGE_UNITS = ("turns", "rounds")


@dataclass(frozen=True, slots=True)
class SessionMeasures:
    """What one session file says.

    Attributes
    ----------
    path, format, family, model : str
    n_messages, user_turns, llm_calls : int
        All messages over its segments; user turns and LLM calls of the whole file.
    v_tokens : float or None
        First call's prompt minus ``token_ratio`` × the cl100k tokens of the messages before
        it, tokens (None without usage records).
    calls_per_turn, avg_tokens : float or None
        ``llm_calls / user_turns``; mean prompt per call, tokens (None without usage records).
    token_ratio : float or None
        Σ growth of the reported prompt / Σ growth of the cl100k estimate of the messages sent,
        between the first and the last placed call of each segment.
    summary_tokens : tuple[int, ...]
        cl100k tokens of each compaction's hand-over summary in the file.
    recall_l : float
        L that turned this session's API rounds into the ``rounds`` age unit.
    judged_messages, verbatim_uses, file_edit_uses : int
        Messages the replay judges (:func:`judged_messages`) and the uses
        :func:`~dp_compact.measure.reuse.find_uses` finds among them, by kind.
    recall : dict[str, RecallCounts]
        Recall counts per age unit, over the messages the replay judges (:func:`judged_messages`).
    recall_strict : dict[str, RecallCounts]
        The same under the strict detector (``find_uses(..., detector="strict")``, DESIGN §9: a
        later use of a dropped message's paths, identifiers or commands also counts).
    estimate_tokens, prompt_tokens : ndarray[int64]
        Per placed call: cl100k tokens of the messages it was sent, and its reported prompt.
    idle_gaps : tuple[float, ...]
        Seconds from each final answer a user turn follows to the next call
        (:func:`~dp_compact.calibration.idle.turn_end_gaps`; DESIGN §8 idle hazard).
    """

    path: str
    format: str
    family: str
    model: str
    n_messages: int
    user_turns: int
    llm_calls: int
    v_tokens: float | None
    calls_per_turn: float | None
    avg_tokens: float | None
    token_ratio: float | None
    summary_tokens: tuple[int, ...]
    recall_l: float
    judged_messages: int
    verbatim_uses: int
    file_edit_uses: int
    recall: dict[str, RecallCounts] = field(repr=False)
    estimate_tokens: npt.NDArray[np.int64] = field(repr=False)
    prompt_tokens: npt.NDArray[np.int64] = field(repr=False)
    idle_gaps: tuple[float, ...] = ()
    recall_strict: dict[str, RecallCounts] = field(default_factory=dict, repr=False)

    def row(self) -> dict[str, Any]:
        """The JSON-ready summary row (no arrays); ``model`` None when the session records none."""
        names = ("path", "format", "family", "model", "n_messages", "user_turns", "llm_calls", "v_tokens",
                 "calls_per_turn", "avg_tokens", "token_ratio", "summary_tokens", "recall_l", "judged_messages",
                 "verbatim_uses", "file_edit_uses")
        row = {name: getattr(self, name) for name in names}
        row["model"] = self.model or None
        row["summary_tokens"] = list(self.summary_tokens)
        row["calls_placed"] = int(self.prompt_tokens.size)
        row["idle_gaps"] = len(self.idle_gaps)
        return row


def _growth_ratio(history: History, tokens: list[npt.NDArray[np.int64]]) -> tuple[float | None, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Token ratio over the segments (the growths from call to call within each, as the planner
    sums them: :func:`~dp_compact.measure.estimation.prompt_growths`), and every placed call's
    (estimate, prompt) pair."""
    xs, ys, dx, dy = [], [], 0, 0
    for segment, counts in zip(history.segments, tokens, strict=True):
        n = call_message_counts(segment.messages, segment.usage)
        placed = n >= 0
        if not placed.any():
            continue
        cum = np.concatenate(([0], np.cumsum(counts)))
        x = cum[n[placed]]
        y = np.array([u.prompt_tokens for u in segment.usage], dtype=np.int64)[placed]
        xs.append(x)
        ys.append(y)
        grown, prompt_growth = prompt_growths(n[placed], y, counts)
        dx, dy = dx + grown, dy + prompt_growth
    x_all = np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64)
    y_all = np.concatenate(ys) if ys else np.zeros(0, dtype=np.int64)
    return (dy / dx if dx > 0 else None), x_all, y_all


#: The messages the replay judges (:func:`dp_compact.conversation.recorded_history`).
judged_messages = recorded_history


def planner_calls_per_turn(session: Session) -> float:
    """L as the planner measures it with ``DP_L = 0`` (:func:`dp_compact.measure.estimation.estimate`): calls / user turns, ≥ 1."""
    if session.llm_calls > 0 and session.user_turns > 0:
        return max(session.llm_calls / session.user_turns, 1.0)
    return DEFAULT_CALLS_PER_TURN


def measure_session(history: History, *, recall_l: float | None = None) -> SessionMeasures:
    """Measure one session's history (see :class:`SessionMeasures`).

    Parameters
    ----------
    history : History
        From :func:`~dp_compact.calibration.history.read_history` (or :func:`~dp_compact.calibration.history.history_of` of a read session).
    recall_l : float, optional
        L turning API rounds into the ``rounds`` age unit; default: the session's own L as the
        planner measures it (:func:`planner_calls_per_turn`).
    """
    live = history.live
    tokens = [count_message_tokens(s.messages) for s in history.segments]
    ratio, x, y = _growth_ratio(history, tokens)
    usage = [u for s in history.segments for u in s.usage]
    v = float(y[0] - (ratio or 1.0) * x[0]) if y.size else None
    judged = judged_messages(live)
    uses, arrays = find_uses(judged), message_arrays(judged)
    l_used = float(recall_l) if recall_l else planner_calls_per_turn(live)
    recall = {unit: recall_counts(uses, arrays, message_ages(arrays, unit, l_used)) for unit in AGE_UNITS}
    strict = find_uses(judged, detector="strict")
    recall_strict = {unit: recall_counts(strict, arrays, message_ages(arrays, unit, l_used)) for unit in AGE_UNITS}
    summaries = [c.summary_text for c in history.compactions if c.summary_text]
    return SessionMeasures(
        path=history.path, format=history.format, family=provider_family(live.model, history.format), model=live.model or "",
        n_messages=sum(len(s.messages) for s in history.segments), user_turns=live.user_turns, llm_calls=live.llm_calls,
        v_tokens=v, calls_per_turn=live.llm_calls / live.user_turns if usage and live.user_turns else None,
        avg_tokens=sum(u.prompt_tokens for u in usage) / len(usage) if usage else None, token_ratio=ratio,
        summary_tokens=tuple(int(n) for n in count_text_tokens(summaries)), recall_l=l_used, judged_messages=len(judged),
        verbatim_uses=int((uses.kind == KIND_VERBATIM).sum()), file_edit_uses=int((uses.kind == KIND_FILE_EDIT).sum()), recall=recall, estimate_tokens=x, prompt_tokens=y,
        idle_gaps=tuple(turn_end_gaps(live).tolist()), recall_strict=recall_strict,
    )
