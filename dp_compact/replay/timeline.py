"""A session's timeline, call by call: the context it had and what the planner would have advised.

At every LLM call of the file, :func:`timeline` plans the messages that call was sent, with the
usage records known by then (so the current context is that call's reported prompt), as if
``dp-compact plan`` had been asked right before the call. Token counts and message structure
are computed once per segment; each call plans a prefix of those arrays (the planner is
vectorized), so a timeline costs one planning per call, O(N) each. Every segment starts from
:func:`dp_compact.prepare.prepare` (tokens, V, the usage records placed on its messages), with the
prices chosen once from every call of the file.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from dp_compact.conversation import CompactionMarker, Session, Usage
from dp_compact.core.cuts import message_arrays
from dp_compact.calibration.history import History
from dp_compact.core.planner import plan
from dp_compact.prepare import PreparedSession, choose_prices, prepare
from dp_compact.pricing import Prices
from dp_compact.settings import Settings

__all__ = ["Timeline", "timeline"]


@dataclass(frozen=True, slots=True)
class Timeline:
    """One planning per LLM call of a session file; arrays of shape (n_calls,).

    Attributes
    ----------
    path, format : str
    call : ndarray[int64]
        1-based number of the call in the file.
    segment : ndarray[int64]
        Segment of the call (0 before the first compaction in the file).
    context_tokens : ndarray[int64]
        The call's prompt, tokens: reported by usage, else V + T of the messages sent.
    context_source : str
        ``usage`` or ``estimate``.
    n_messages : ndarray[int64]
        Messages sent in the call (its segment's prefix).
    compact : ndarray[bool]
        True where the planner advises compacting before the call.
    rule : tuple[str, ...]
        The rule that decided, per call.
    k, tail_tokens, head_tokens : ndarray[int64]
        Messages and tokens kept and dropped by the advised compaction (``k = n``, 0 dropped
        when it advises to keep).
    compactions : tuple[CompactionMarker, ...]
        The compactions recorded in the file.
    first_call_after : ndarray[int64]
        Per recorded compaction, the index (into the arrays) of the first call after it.
    prices : Prices
    force_threshold_tokens : float
        DP_FORCE_RATIO · M, tokens.
    s_tokens : int
        S, tokens (the context after an advised compaction is about context − H + S).
    window_source : str
        Where the window ``prices.max_context_tokens`` came from
        (:func:`~dp_compact.measure.windows.context_window`).
    followed_context_tokens : ndarray[int64] or None
        The context each call would have had had the advice been taken at every call (the
        replay of the planner, :mod:`dp_compact.replay`, counted as the provider counts);
        None when the replay's calls do not match the file's one to one.
    followed_note : str
        Why ``followed_context_tokens`` is None, in one sentence a command prints (``""`` when it is not).
    v_notes : tuple[str, ...]
        Where the fixed prefix V each segment was planned with came from
        (:func:`~dp_compact.measure.estimation.fixed_prefix`), one sentence per segment, repeats left out.
    """

    path: str
    format: str
    call: npt.NDArray[np.int64]
    segment: npt.NDArray[np.int64]
    context_tokens: npt.NDArray[np.int64]
    context_source: str
    n_messages: npt.NDArray[np.int64]
    compact: npt.NDArray[np.bool_]
    rule: tuple[str, ...]
    k: npt.NDArray[np.int64]
    tail_tokens: npt.NDArray[np.int64]
    head_tokens: npt.NDArray[np.int64]
    compactions: tuple[CompactionMarker, ...]
    first_call_after: npt.NDArray[np.int64]
    prices: Prices
    force_threshold_tokens: float
    s_tokens: int
    window_source: str = ""
    followed_context_tokens: npt.NDArray[np.int64] | None = None
    followed_note: str = ""
    v_notes: tuple[str, ...] = ()


def _points(prepared: PreparedSession, cum: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], list[Usage]]:
    """Messages sent and context per call of a prepared segment, and the usage records of those calls."""
    segment, placement = prepared.session, prepared.placement
    if segment.usage:
        placed = placement.placed
        usage = [placement.usage[i] for i in placed]
        return placement.sent[placed], np.array([u.prompt_tokens for u in usage], dtype=np.int64), usage
    assistant = np.array([i for i, m in enumerate(segment.messages) if m.role == "assistant"], dtype=np.int64)
    return assistant, prepared.v_tokens + cum[assistant], []


def timeline(history: History, settings: Settings, *, use_cache: bool = True) -> Timeline:
    """Plan the session at each of its LLM calls (see the module docstring).

    Parameters
    ----------
    history : History
        From :func:`~dp_compact.calibration.history.history_of` (every segment is planned).
    settings : Settings
    use_cache : bool
        Use the persistent token cache.

    Returns
    -------
    Timeline

    Raises
    ------
    UnknownProfileError
        If the provider is unknown.

    Notes
    -----
    User turns at a call are the file's count at the end of the call's segment less the user
    turns (:attr:`~dp_compact.conversation.Message.is_user_turn`) of the segment's messages the
    call was not sent yet.
    """
    whole = replace(history.live, usage=tuple(u for segment in history.segments for u in segment.usage))
    prices, _ = choose_prices(settings, whole)  # the window from every call of the file, not the live segment's
    rows: dict[str, list] = {name: [] for name in ("segment", "context", "n", "compact", "rule", "k", "tail", "head")}
    usage_before: list[Usage] = []
    first_after: list[int] = []
    v_notes: list[str] = []
    several = len(history.segments) > 1
    for index, segment in enumerate(history.segments):
        if index:
            first_after.append(len(rows["n"]))
        # V as a live plan takes it: the segment's first call measures it, and every point plans with that call's usage
        prepared = prepare(segment, settings, use_cache=use_cache, prices=prices,
                           v_call="its first call" if several else "the first recorded call")
        tokens = prepared.message_tokens
        arrays = message_arrays(segment.messages)
        v_note = f"segment {index + 1}: {prepared.v_note}" if several else prepared.v_note
        if v_note not in v_notes:
            v_notes.append(v_note)
        cum = np.concatenate(([0], np.cumsum(tokens)))
        sent, contexts, usage = _points(prepared, cum)
        turns_in_segment = int(arrays.turn_index[-1]) if arrays.n else 0
        for position, (n, context) in enumerate(zip(sent.tolist(), contexts.tolist(), strict=True)):
            not_sent = turns_in_segment - (int(arrays.turn_index[n - 1]) if n else 0)
            prefix = replace(
                segment, messages=segment.messages[:n], usage=tuple(usage_before + usage[: position + 1]),
                user_turns=max(segment.user_turns - not_sent, 0), llm_calls=len(usage_before) + position + 1, compactions=index,
            )
            result = plan(prefix, tokens[:n], settings, prices, arrays=arrays.slice(0, n), v_tokens=prepared.v_tokens)
            for name, value in (("segment", index), ("context", context), ("n", n), ("compact", result.decision == "compact"),
                                ("rule", result.rule), ("k", result.k), ("tail", result.tail_tokens), ("head", result.head_tokens)):
                rows[name].append(value)
        usage_before.extend(usage)

    def ints(name: str) -> npt.NDArray[np.int64]:
        return np.array(rows[name], dtype=np.int64)

    followed, followed_note = _followed(whole, settings, prices, len(rows["n"]), use_cache)
    return Timeline(
        path=history.path, format=history.format, call=np.arange(1, len(rows["n"]) + 1, dtype=np.int64), segment=ints("segment"),
        context_tokens=ints("context"), context_source="usage" if usage_before else "estimate", n_messages=ints("n"),
        compact=np.array(rows["compact"], dtype=bool), rule=tuple(rows["rule"]), k=ints("k"), tail_tokens=ints("tail"),
        head_tokens=ints("head"), compactions=history.compactions, first_call_after=np.array(first_after, dtype=np.int64),
        prices=prices, force_threshold_tokens=settings.force_ratio * prices.max_context_tokens, s_tokens=settings.s,
        window_source=prices.window_source, followed_context_tokens=followed, followed_note=followed_note,
        v_notes=tuple(v_notes),
    )


def _followed(whole: Session, settings: Settings, prices: Prices, n_calls: int, use_cache: bool) -> tuple[npt.NDArray[np.int64] | None, str]:
    """The contexts had the advice been taken: the replay of the planner over the whole history
    (``whole``: the live segment, which keeps the file's history, with every segment's usage);
    None and why when the replay's calls (one per assistant message of the whole history) are
    not the timeline's (one per usage record placed on a message, else per assistant message)."""
    from dp_compact.core.planner import summary_tokens
    from dp_compact.replay.load import prepared_recording, replay_params
    from dp_compact.replay.meter import replay
    from dp_compact.replay.policies import PlannerPolicy

    prepared = prepare(whole, settings, use_cache=use_cache, prices=prices, history=True)  # the replay's view, these prices
    recording, _ = prepared_recording(prepared)
    if recording.n_calls != n_calls:
        ours = ("one per usage record placed on a message" if whole.usage else
                "one per assistant message of the segments read, the file recording no usage")
        return None, (f"the context had every advice been taken is not drawn: the replay has {recording.n_calls:,} calls (one per"
                      f" assistant message of the whole history) where the timeline plans {n_calls:,} ({ours}), so they cannot be paired"
                      " (dp-compact replay prices its own)")
    params, _ = replay_params(prepared)  # V and warm cache as replay takes them
    return replay(recording, PlannerPolicy(settings), replace(params, s_tokens=summary_tokens(settings))).counted_contexts, ""
