"""From a prepared session to a :class:`~dp_compact.replay.Recording` (DESIGN §6): the replay's input.

The session is prepared over its recorded history (:func:`dp_compact.prepare.prepare` with
``history=True``): every number below comes from that one preparation.

- Messages: the whole recorded history (``Session.history``) when the file records compactions,
  without what those compactions inserted (their summary message, and Codex's replacement
  history written on the summary's line); otherwise the live conversation (a Gemini stream log
  of several runs replays its last run).
- Calls: one per assistant message, in order; its prompt is every message before it. The output
  tokens are the provider's, from the usage record placed on that message (the preparation's
  :class:`~dp_compact.measure.estimation.CallPlacement`: the latest assistant message at or before
  the record's line), else the message's own token count. Usage records placed on no assistant
  message (Codex's own compaction requests) are not calls.
- Times: when each call was made, as the session's reader found it in the file
  (``Session.call_times``: Claude Code, Codex and Gemini stream logs record them); elsewhere
  unknown. They set each call's dated prices and, with the cache TTL (:func:`resolve_ttl`: on by
  default where the recording has times), when the cache goes cold (DESIGN §8).
- What the tool recorded (the ``recorded`` policy, :mod:`dp_compact.replay.recorded`): each
  call's prompt and cache reads from its usage record, and the compactions the file records
  (:class:`~dp_compact.replay.recording.RecordedCut`: the first call after each, the context when
  it fired, the summary it wrote counted on the provider's scale).
- Clearing (DESIGN §9): what clearing the long tool results before every depth takes out of the
  prompt, the results' and placeholders' tokens scaled by the session's token ratio like the
  messages' (:func:`~dp_compact.replay.recording.scaled_clearing_facts`).
- V, the fixed prefix every call sends: the prepared one (``PreparedSession.v_tokens``): ``DP_V`` /
  ``--v`` when the user gives it; else the session's own, measured from its usage records (the
  first recorded call's prompt less our tokens of the messages it carried, both in provider
  tokens); else, or when that measurement is not positive or takes more than half the window,
  ``DP_V``'s default.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dp_compact.conversation import Message, Session, call_seconds, recorded_history
from dp_compact.core.cuts import message_arrays
from dp_compact.measure.estimation import CallPlacement, first_calls_after, fixed_prefix
from dp_compact.measure.reuse import DETECTORS, find_uses
from dp_compact.prepare import PreparedSession, prepare
from dp_compact.measure.tokens import count_text_tokens
from dp_compact.pricing import Prices
from dp_compact.replay.meter import Recording, ReplayParams, counted_tokens_per_message, make_recording
from dp_compact.replay.recording import RecordedCut, scaled_clearing_facts
from dp_compact.settings import Settings

__all__ = [
    "DETECTOR_MODES",
    "call_times",
    "load_recording",
    "prepared_recording",
    "recorded_calls",
    "replay_history",
    "replay_params",
    "replay_v_tokens",
    "resolve_ttl",
    "warm_cache_tokens",
]


#: ``--detector`` choices: one of the lost-information detectors
#: (:data:`~dp_compact.measure.reuse.DETECTORS`: DESIGN §6 rules (a) and (b), or those and §9's
#: rule (c)), or ``"both"``: every policy replayed under each, the first one's table shown in full.
DETECTOR_MODES = (*DETECTORS, "both")

#: The messages a replay appends (:func:`dp_compact.conversation.recorded_history`).
replay_history = recorded_history


def recorded_calls(
    messages: Sequence[Message], message_tokens: npt.NDArray[np.int64], placement: CallPlacement
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], str, npt.NDArray[np.int64]]:
    """Positions (index of each assistant message) and output tokens of the calls, their source,
    and the recorded prompt of each call.

    Parameters
    ----------
    messages : sequence of Message
        The replayed messages.
    message_tokens : ndarray[int64], shape (N,)
        Tokens per message (a call's output when no usage record is placed on it).
    placement : CallPlacement
        The usage records placed on ``messages`` (:func:`~dp_compact.measure.estimation.place_calls`).

    Returns
    -------
    (positions, output_tokens, source, prompts)
        Arrays of shape (C,), one per assistant message; ``source`` is ``"usage"`` when a record
        was placed, else ``"messages"``; ``prompts`` is the placed record's ``prompt_tokens``,
        ``-1`` for a call without one.
    """
    positions = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    outputs = message_tokens[positions].copy()
    prompts = np.full(positions.shape, -1, dtype=np.int64)
    found = placement.placed
    if found.size == 0:
        return positions, outputs, "messages", prompts
    slots = np.searchsorted(positions, placement.sent[found])
    outputs[slots] = [placement.usage[int(k)].output_tokens for k in found]
    prompts[slots] = [placement.usage[int(k)].prompt_tokens for k in found]
    return positions, outputs, "usage", prompts


def call_times(session: Session, messages: Sequence[Message], positions: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Epoch seconds of each call at ``positions`` (indices into ``messages``, assistant messages of
    ``session.history``), from the times its reader found (:func:`~dp_compact.conversation.call_seconds`);
    NaN where there is none."""
    times = np.full(positions.shape, np.nan)
    responses = [m for m in session.history if m.role == "assistant"]
    if len(responses) != len(session.call_times):  # a session not made by a reader: no times known
        return times
    by_message = dict(zip(map(id, responses), call_seconds(session).tolist(), strict=True))
    for j, position in enumerate(positions.tolist()):
        times[j] = by_message.get(id(messages[position]), np.nan)
    return times


def prepared_recording(
    prepared: PreparedSession, *, with_times: bool = True, detector: str = "verbatim"
) -> tuple[Recording, str]:
    """The :class:`Recording` of a session prepared over its recorded history
    (``prepare(session, settings, history=True)``) and where its calls come from.

    ``detector`` names the lost-information detector whose uses the recording holds
    (:func:`~dp_compact.measure.reuse.find_uses`: ``"verbatim"``, DESIGN §6, or ``"strict"``, §9).
    Returns ``(recording, source)`` with source ``"usage"`` or ``"messages"`` (module docstring).

    Raises
    ------
    ValueError
        If ``prepared`` was not prepared over the recorded history, or ``detector`` is unknown.
    """
    if not prepared.history:
        raise ValueError("a recording is made of a session prepared with history=True")
    session, tokens = prepared.session, prepared.message_tokens
    messages = session.messages
    positions, outputs, source, prompts = recorded_calls(messages, tokens, prepared.placement)
    times = call_times(session, messages, positions) if with_times else None
    uses = find_uses(messages, detector=detector)
    use_calls = np.searchsorted(positions, uses.at, side="right") - 1
    found = use_calls >= 0
    placed = prompts > 0
    call_lines = np.array([messages[int(p)].line for p in positions[placed]], dtype=np.int64)
    compacted = first_calls_after(call_lines, [r.line for r in session.compaction_records])
    reads = np.full(positions.shape, -1, dtype=np.int64)
    found_usage = prepared.placement.placed
    if found_usage.size:
        slots = np.searchsorted(positions, prepared.placement.sent[found_usage])
        reads[slots] = [prepared.placement.usage[int(k)].cache_read_tokens for k in found_usage]
    recording = make_recording(
        messages, tokens, message_arrays(messages), positions, outputs, times,
        uses=(uses.message[found], use_calls[found]), path=session.path, format=session.format,
        counted=counted_tokens_per_message(tokens, positions[placed], prompts[placed], compacted),
        tool_compactions=tuple((r.tool, int(r.pre_tokens)) for r in session.compaction_records
                               if r.trigger != "manual" and r.pre_tokens),
        recorded=(prompts, reads), cuts=recorded_cuts(prepared, messages, positions),
        clearing=scaled_clearing_facts(messages, tokens, prepared.token_ratio),
    )
    return recording, source


def recorded_cuts(prepared: PreparedSession, messages: Sequence[Message], positions: npt.NDArray[np.int64]) -> tuple[RecordedCut, ...]:
    """The compactions ``prepared.session`` records, placed among the replayed ``messages`` and the
    calls at ``positions``: the first call whose response comes after the record's line, the
    messages written before it, the context when it fired (provider tokens) and the summary's
    tokens (its text counted, times the session's token ratio: the provider's scale)."""
    records = prepared.session.compaction_records
    if not records:
        return ()
    lines = np.array([m.line for m in messages], dtype=np.int64)
    call_lines = lines[positions] if positions.size else np.zeros(0, np.int64)
    texts = [r.summary_text for r in records]
    counted = count_text_tokens(texts) if any(texts) else np.zeros(len(texts), np.int64)
    cuts = []
    for record, tokens in zip(records, counted.tolist(), strict=True):
        summary = round(tokens * prepared.token_ratio) if record.summary_text else None
        cuts.append(RecordedCut(line=record.line, call=int(np.searchsorted(call_lines, record.line, side="left")),
                                position=int(np.searchsorted(lines, record.line, side="left")), tool=record.tool,
                                context_tokens=record.pre_tokens or None, summary_tokens=summary))
    return tuple(cuts)


def resolve_ttl(prices: Prices, cache_ttl_s: float | None, timed_calls: int) -> tuple[float | None, str]:
    """The cache TTL a replay applies, seconds (None: the cache never expires), and why (DESIGN §8).

    ``cache_ttl_s`` (``--cache-ttl``) when given; else, when the recording has call times
    (``timed_calls`` > 0), the lifetime of the session's recorded cache writes
    (:attr:`Prices.cache_ttl_s`: 1 hour when most are 1-hour entries, else the provider's
    5-minute default); else none.

    >>> from dp_compact.pricing import get_prices
    >>> resolve_ttl(get_prices("claude-sonnet-4").with_write_share(1.0), None, 3)
    (3600.0, "3600 s: 100 % of the session's cache writes are 1-hour entries (its usage records)")
    >>> resolve_ttl(get_prices("claude-sonnet-4"), None, 0)
    (None, 'none: the recording has no times')
    """
    if cache_ttl_s is not None:
        return cache_ttl_s, f"{cache_ttl_s:g} s: given (--cache-ttl)"
    if timed_calls <= 0:
        return None, "none: the recording has no times"
    ttl, share = prices.cache_ttl_s, prices.write_1h_share
    if share >= 0.5:
        why = f"{share:.0%} of the session's cache writes are 1-hour entries (its usage records)".replace("%", " %")
    elif share > 0:
        why = f"most of the session's cache writes are 5-minute entries ({share:.0%} 1-hour)".replace("%", " %")
    else:
        why = "the provider's default (the session records no 1-hour cache writes)"
    return ttl, f"{ttl:g} s: {why}"


def load_recording(
    session: Session, settings: Settings, *, use_cache: bool = True, with_times: bool = False, detector: str = "verbatim"
) -> tuple[Recording, str]:
    """The :class:`Recording` of ``session`` (:func:`prepared_recording` of ``prepare(session, settings, history=True)``)
    with the uses ``detector`` finds.

    Raises
    ------
    UnknownProfileError, SettingsError
        As :func:`~dp_compact.prepare.choose_prices`.
    """
    return prepared_recording(prepare(session, settings, use_cache=use_cache, history=True), with_times=with_times,
                              detector=detector)


def replay_v_tokens(
    recording: Recording, settings: Settings, window_tokens: int, recorded: int | None = None
) -> tuple[int, str, str]:
    """V a replay of ``recording`` alone would charge, tokens; its source
    (:data:`~dp_compact.measure.estimation.V_SOURCES`) and a note: :func:`~dp_compact.measure.estimation.fixed_prefix`
    of ``recording.counted_v`` (the first recorded call's prompt less our tokens of the messages it
    carried), which is the prepared V (``PreparedSession.v_tokens``) of the session it was made of.
    ``window_tokens``: M; ``recorded``: the V an earlier dp-compact compaction or shrink in the file
    states (``Session.recorded_prefix_tokens``), taken when the usage records measure none.
    """
    return fixed_prefix(settings, recording.counted_v, window_tokens, recorded=recorded)


def replay_params(
    prepared: PreparedSession, cache_ttl_s: float | None = None, loss: str = "refetch"
) -> tuple[ReplayParams, tuple[str, ...]]:
    """The replay's parameters for a prepared session and their notes.

    Prices ($/MTok), window M and V (tokens) as :func:`~dp_compact.prepare.prepare` chose them
    (V's source in ``v_source``); S = ``DP_S`` (tokens; each policy's own is set per policy); the
    cache TTL (s) and the loss mode; the part of V already cached (:func:`warm_cache_tokens`).
    The notes are the prepared ones (reading, prices and window, token scale, V), then the warm cache's.
    """
    warm, warm_note = warm_cache_tokens(prepared.session, prepared.v_tokens)
    params = ReplayParams(prices=prepared.prices, v_tokens=prepared.v_tokens, s_tokens=prepared.settings.s, cache_ttl_s=cache_ttl_s,
                          loss=loss, v_source=prepared.v_source, warm_tokens=warm)
    return params, (*prepared.notes, *warm_note)


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
