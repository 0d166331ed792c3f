"""From a session to a :class:`~dp_compact.replay.Recording` (DESIGN §6): the IO side of the replay's input.

- Messages: the whole recorded history (``Session.history``) when the file records compactions,
  without what those compactions inserted (their summary message, and Codex's replacement
  history written on the summary's line); otherwise the live conversation (a Gemini stream log
  of several runs replays its last run).
- Calls: one per assistant message, in order; its prompt is every message before it. The output
  tokens are the provider's, from the usage record of that message (matched by source line:
  the same line, else the latest assistant message at or before the record's line), else the
  message's own token count. Usage records matching no assistant message (Codex's own
  compaction requests) are not calls.
- Times (only with a cache TTL): the ``timestamp`` of the source line where the assistant
  message starts (Claude Code, Codex and Gemini stream logs have them); elsewhere unknown.
- V, the fixed prefix every call sends (:func:`replay_v_tokens`): ``DP_V`` / ``--v`` when the user
  gives it; else the session's own, measured from its usage records (the first recorded call's
  prompt less our tokens of the messages it carried, both in provider tokens); else, or when that
  measurement is not positive or takes more than half the window, ``DP_V``'s default.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

import numpy as np
import numpy.typing as npt

from dp_compact.api import choose_prices, session_tokens
from dp_compact.conversation import Message, Session, Usage, recorded_history
from dp_compact.core.cuts import message_arrays
from dp_compact.errors import DpCompactError
from dp_compact.pricing import Prices
from dp_compact.measure.estimation import call_message_counts, first_calls_after, fixed_prefix
from dp_compact.replay.meter import Recording, ReplayParams, counted_tokens_per_message, make_recording
from dp_compact.measure.reuse import find_uses
from dp_compact.sessions.source import read_source
from dp_compact.settings import Settings

__all__ = [
    "call_times",
    "load_recording",
    "recorded_calls",
    "replay_history",
    "replay_params",
    "replay_v_tokens",
    "warm_cache_tokens",
]


#: The messages a replay appends (:func:`dp_compact.conversation.recorded_history`).
replay_history = recorded_history


def recorded_calls(
    messages: Sequence[Message], message_tokens: npt.NDArray[np.int64], usage: Sequence[Usage]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], str, npt.NDArray[np.int64]]:
    """Positions (index of each assistant message) and output tokens of the calls, their source,
    and the recorded prompt of each call.

    Usage records are placed on assistant messages by :func:`~dp_compact.measure.estimation.call_message_counts`
    (when every record has a source line). Returns ``(positions, output_tokens, source, prompts)``,
    arrays of shape (C,); source ``"usage"`` when a record was placed, else ``"messages"``;
    ``prompts`` is the placed record's ``prompt_tokens``, ``-1`` for a call without one.
    """
    positions = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    outputs = message_tokens[positions].copy()
    prompts = np.full(positions.shape, -1, dtype=np.int64)
    if not usage or any(u.line <= 0 for u in usage):
        return positions, outputs, "messages", prompts
    placed = call_message_counts(messages, usage)
    found = np.flatnonzero(placed >= 0)
    if found.size == 0:
        return positions, outputs, "messages", prompts
    slots = np.searchsorted(positions, placed[found])
    outputs[slots] = [usage[int(k)].output_tokens for k in found]
    prompts[slots] = [usage[int(k)].prompt_tokens for k in found]
    return positions, outputs, "usage", prompts


def _seconds(value: object) -> float:
    """A record's ``timestamp`` (ISO 8601 text, or epoch seconds/milliseconds) in epoch seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) / 1000.0 if value > 1e11 else float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return math.nan
    return math.nan


def call_times(path: str, messages: Sequence[Message], positions: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Epoch seconds of each call from its source line's ``timestamp``; NaN where there is none."""
    try:
        source = read_source(path, lenient=True)
    except DpCompactError:
        return np.full(positions.shape, math.nan)
    stamps = {r.line: r.value.get("timestamp") for r in source.records or () if isinstance(r.value, dict)}
    return np.array([_seconds(stamps.get(messages[int(p)].line)) for p in positions], dtype=np.float64)


def load_recording(
    session: Session, settings: Settings, *, use_cache: bool = True, with_times: bool = False
) -> tuple[Recording, str]:
    """The :class:`Recording` of ``session`` (tokens counted once) and where its calls come from.

    Returns ``(recording, source)`` with source ``"usage"`` or ``"messages"`` (module docstring).
    """
    messages = replay_history(session)
    probe = replace(session, messages=messages)
    tokens = session_tokens(probe, settings, use_cache=use_cache)
    positions, outputs, source, prompts = recorded_calls(messages, tokens, session.usage)
    times = call_times(session.path, messages, positions) if with_times else None
    uses = find_uses(messages)
    use_calls = np.searchsorted(positions, uses.at, side="right") - 1
    found = use_calls >= 0
    placed = prompts > 0
    call_lines = np.array([messages[int(p)].line for p in positions[placed]], dtype=np.int64)
    compacted = first_calls_after(call_lines, [r.line for r in session.compaction_records])
    recording = make_recording(
        messages, tokens, message_arrays(messages), positions, outputs, times,
        uses=(uses.message[found], use_calls[found]), path=session.path, format=session.format,
        counted=counted_tokens_per_message(tokens, positions[placed], prompts[placed], compacted),
        tool_compactions=tuple((r.tool, int(r.pre_tokens)) for r in session.compaction_records
                               if r.trigger != "manual" and r.pre_tokens),
    )
    return recording, source


def replay_v_tokens(
    recording: Recording, settings: Settings, window_tokens: int, recorded: int | None = None
) -> tuple[int, str, str]:
    """V charged to every call of ``recording``'s replay, tokens; its source
    (:data:`~dp_compact.measure.estimation.V_SOURCES`) and a note.

    :func:`~dp_compact.measure.estimation.fixed_prefix`, the rule ``dp-compact plan`` follows too, of
    ``recording.counted_v``: the first recorded call's prompt less our tokens of the messages it
    carried (:func:`~dp_compact.replay.recording.counted_tokens_per_message`), in provider tokens,
    the unit of every prompt the replay charges; None without usage records. ``window_tokens``: M;
    ``recorded``: the V an earlier dp-compact compaction or shrink in the file states
    (``Session.recorded_prefix_tokens``), taken when the usage records measure none.
    """
    return fixed_prefix(settings, recording.counted_v, window_tokens, recorded=recorded)


def replay_params(
    session: Session, settings: Settings, cache_ttl_s: float | None, loss: str = "refetch", *, recording: Recording,
    prices: Prices | None = None,
) -> tuple[ReplayParams, tuple[str, ...]]:
    """The replay's parameters for ``session`` and their notes.

    Prices ($/MTok) and window M (tokens) as :func:`~dp_compact.api.choose_prices` picks them
    (``prices`` when the caller has them already, their notes then left out);
    V (tokens) by :func:`replay_v_tokens` from ``recording`` (:func:`load_recording`), its source
    in ``v_source``; S = ``DP_S`` (tokens; each policy's own is set per policy); the cache TTL (s)
    and the loss mode. The notes say where prices, window and V come from.
    """
    prices, notes = choose_prices(settings, session) if prices is None else (prices, ())
    v_tokens, v_source, v_note = replay_v_tokens(recording, settings, prices.max_context_tokens, session.recorded_prefix_tokens)
    warm, warm_note = warm_cache_tokens(session, v_tokens)
    params = ReplayParams(prices=prices, v_tokens=v_tokens, s_tokens=settings.s, cache_ttl_s=cache_ttl_s, loss=loss,
                          v_source=v_source, warm_tokens=warm)
    return params, (*notes, v_note, *warm_note)


def warm_cache_tokens(session: Session, v_tokens: int) -> tuple[int, tuple[str, ...]]:
    """Tokens of V in the cache before the session's first call, and a note when there are any.

    What the first usage record with a prompt says that call read from the cache
    (``Usage.cache_read_tokens``): an agent's system prompt and tool definitions cached by an
    earlier session within the provider's cache lifetime. At most ``v_tokens`` (V, tokens): the
    replay starts every policy with that much of V cached, whatever it does next; 0 without usage.
    """
    first = next((u for u in session.usage if u.prompt_tokens > 0), None)
    found = first.cache_read_tokens if first is not None else 0
    warm = min(found, v_tokens)
    if warm <= 0:
        return 0, ()
    held = f"{warm:,} tokens of its fixed prefix" if warm == found else f"{found:,} tokens, all {warm:,} of the V charged and more,"
    return warm, (f"the first call found {held} already cached (an earlier session wrote them; its usage record says so):"
                  f" every policy starts with {warm:,} tokens of V cached",)
