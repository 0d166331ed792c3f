"""E, L, R, avg, c and the current context of a session (DESIGN §2 "Estimating E, L, R, avg").

Pure functions of a :class:`~dp_compact.sessions.model.Session` and :class:`~dp_compact.settings.Settings`.
With the seed agent's ``stats.json`` attached, its counters take the place of what the session
itself records (DESIGN §4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dp_compact.sessions.model import Session
from dp_compact.settings import Settings

__all__ = [
    "DEFAULT_AVG_TOKENS",
    "DEFAULT_CALLS_PER_TURN",
    "DEFAULT_E",
    "MIN_RATIO_GROWTH_TOKENS",
    "Estimates",
    "estimate",
    "measured_token_ratio",
]

#: DESIGN §2: avg when the session has no usage records (tokens per call).
DEFAULT_AVG_TOKENS = 4000.0
#: L when it cannot be measured (calls per user turn): the pooled LLM calls / user turns of the
#: real transcripts with usage records (calibration/README.md; DESIGN §2 had 5 before calibration).
DEFAULT_CALLS_PER_TURN = 23.0
#: Least growth of the counted tokens between the first and last placed call for a session's own
#: token ratio to be trusted (tokens); below it the calibrated family ratio is used.
MIN_RATIO_GROWTH_TOKENS = 2000
#: Bounds of a measured token ratio (provider tokens per counted token); outside them the
#: measurement says more about what the transcript leaves out than about the tokenizer.
RATIO_BOUNDS = (0.5, 4.0)

#: DESIGN §2: E when neither DP_E_FIXED nor DP_BASELINE_E is set (user turns).
DEFAULT_E = 2.0


@dataclass(frozen=True, slots=True)
class Estimates:
    """The session-dependent scalars of the cost model.

    Attributes
    ----------
    user_turns : int
        t, user turns so far.
    expected_turns : float
        E, expected remaining user turns.
    calls_per_turn : float
        L, LLM calls per user turn (≥ 1).
    remaining_calls : float
        R = E · L.
    avg_tokens : float
        avg, mean prompt tokens per call.
    compactions : int
        c, compactions already made.
    context_tokens : int
        The current context, tokens: the last call's prompt size, else V + T.
    context_source : str
        ``"usage"``, ``"stats"`` or ``"estimate"`` (V + T).
    l_source, avg_source : str
        Where L and avg come from (``"setting"``, ``"measured"``, ``"stats"``, ``"default"``).
    """

    user_turns: int
    expected_turns: float
    calls_per_turn: float
    remaining_calls: float
    avg_tokens: float
    compactions: int
    context_tokens: int
    context_source: str
    l_source: str
    avg_source: str


def _expected_turns(settings: Settings, user_turns: int) -> float:
    """E of DESIGN §2: DP_E_FIXED, else max(baseline − t, floor), else 2."""
    if settings.e_fixed > 0:
        return float(settings.e_fixed)
    if settings.baseline_e > 0:
        floor = settings.baseline_e // 2 if settings.baseline_e > 1 else 2
        return float(max(settings.baseline_e - user_turns, floor))
    return DEFAULT_E


def estimate(session: Session, settings: Settings, *, total_tokens: int) -> Estimates:
    """Estimate E, L, R, avg, c and the current context (DESIGN §2).

    Parameters
    ----------
    session : Session
    settings : Settings
    total_tokens : int
        T, tokens of the live messages (for the V + T fallback of the current context).

    Returns
    -------
    Estimates
    """
    stats = session.stats
    user_turns = stats.current_turn_count if stats and stats.current_turn_count is not None else session.user_turns
    calls = stats.agent_request_count if stats and stats.agent_request_count is not None else session.llm_calls
    if settings.l > 0:
        calls_per_turn, l_source = float(settings.l), "setting"
    elif calls > 0 and user_turns > 0:
        calls_per_turn, l_source = calls / user_turns, "stats" if stats else "measured"
    else:
        calls_per_turn, l_source = DEFAULT_CALLS_PER_TURN, "default"
    calls_per_turn = max(calls_per_turn, 1.0)
    expected_turns = _expected_turns(settings, user_turns)

    if stats and stats.total_input_tokens and stats.agent_request_count:
        avg, avg_source = stats.total_input_tokens / stats.agent_request_count, "stats"
    elif session.usage:
        avg = sum(u.prompt_tokens for u in session.usage) / len(session.usage)
        avg_source = "measured"
    else:
        avg, avg_source = DEFAULT_AVG_TOKENS, "default"

    if stats and stats.current_context_tokens is not None:
        context, context_source = stats.current_context_tokens, "stats"
    elif session.usage:
        context, context_source = session.usage[-1].prompt_tokens, "usage"
    else:
        context, context_source = settings.v + total_tokens, "estimate"
    compactions = stats.compact_request_count if stats and stats.compact_request_count is not None else session.compactions
    return Estimates(
        user_turns=int(user_turns),
        expected_turns=expected_turns,
        calls_per_turn=calls_per_turn,
        remaining_calls=expected_turns * calls_per_turn,
        avg_tokens=float(avg),
        compactions=int(compactions),
        context_tokens=int(context),
        context_source=context_source,
        l_source=l_source,
        avg_source=avg_source,
    )


def measured_token_ratio(session: Session, message_tokens: npt.NDArray[np.int64]) -> float | None:
    """Provider tokens per counted token, from the session's own usage records.

    The prompts of the live conversation's first and last placed calls differ by the messages
    added between them (the prefix V cancels out): ratio = Δ reported prompt / Δ counted tokens.

    Parameters
    ----------
    session : Session
        Live messages with their source lines, and usage records.
    message_tokens : ndarray[int64], shape (N,)
        Counted tokens per live message.

    Returns
    -------
    float or None
        None without two placed calls at least ``MIN_RATIO_GROWTH_TOKENS`` apart, or when the
        ratio falls outside ``RATIO_BOUNDS``.
    """
    from dp_compact.history import call_message_counts

    if not session.messages or len(session.usage) < 2:
        return None
    first_line = session.messages[0].line
    usage = [u for u in session.usage if u.line >= first_line]
    counts = call_message_counts(session.messages, usage)
    placed = np.flatnonzero(counts >= 0)
    if placed.size < 2:
        return None
    prefix = np.concatenate(([0], np.cumsum(message_tokens)))
    grown = int(prefix[counts[placed[-1]]] - prefix[counts[placed[0]]])
    prompt_growth = usage[int(placed[-1])].prompt_tokens - usage[int(placed[0])].prompt_tokens
    if grown < MIN_RATIO_GROWTH_TOKENS or prompt_growth <= 0:
        return None
    ratio = prompt_growth / grown
    return ratio if RATIO_BOUNDS[0] <= ratio <= RATIO_BOUNDS[1] else None
