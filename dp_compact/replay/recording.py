"""The recording a replay runs over, and the replay's parameters (docs/replay.md, DESIGN §6).

A :class:`Recording` holds the recorded messages with their tokens and structure, the recorded
calls (position, prompt and output tokens, time) and the uses of earlier messages
(:mod:`dp_compact.measure.reuse`); :func:`counted_tokens_per_message` spreads the usage records over the
messages, so that a preset standing for a tool that triggers on the provider's usage sees the
prompt as the provider counted it. Pure: files are read in :mod:`dp_compact.replay.shell`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dp_compact.conversation import Message
from dp_compact.core.benefit import REFETCH_OUTPUT_TOKENS
from dp_compact.core.cuts import ROLE_USER, MessageArrays
from dp_compact.measure.clearing import (
    PLACEHOLDER_ARCHIVE_ID,
    ClearingFacts,
    clearing_facts,
    placeholder_text,
    tool_result_layout,
)
from dp_compact.measure.tokens import count_text_tokens
from dp_compact.pricing import Prices

__all__ = [
    "FIXED_RECORDING",
    "LOSS_MODES",
    "REFETCH_OUTPUT_TOKENS",
    "Recording",
    "ReplayParams",
    "RecordedCut",
    "counted_tokens_per_message",
    "make_recording",
    "scaled_clearing_facts",
]

Int64s = npt.NDArray[np.int64]

#: DESIGN §6: what every replay assumes, stated in its table and JSON.
FIXED_RECORDING = (
    "the recording is taken as fixed: later messages, tool outputs and output tokens are the same under every policy"
)
#: ``--loss`` choices (DESIGN §6): no charge, or a refetch per use of a dropped message.
LOSS_MODES = ("refetch", "none")


@dataclass(frozen=True, slots=True)
class RecordedCut:
    """A compaction the recorded tool made (``Session.compaction_records``), placed among the calls.

    Attributes
    ----------
    line : int
        1-based source line of the record (``RecordedCompaction.line``).
    call : int
        The first call after it (C when no call follows).
    position : int
        Messages of the recording written before it: the tool's new segment starts there.
    tool : str
        Who compacted (``RecordedCompaction.tool``).
    context_tokens : int or None
        The context when it fired, provider tokens (``RecordedCompaction.pre_tokens``); None when
        the file does not tell.
    summary_tokens : int or None
        The summary it wrote, provider tokens (its text counted, times the session's token
        ratio); None when the file does not hold it.
    """

    line: int
    call: int
    position: int
    tool: str
    context_tokens: int | None = None
    summary_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Recording:
    """The recorded conversation a replay runs over; build it with :func:`make_recording`.

    Attributes
    ----------
    messages : tuple[Message, ...]
        The whole recorded history, N messages in order.
    message_tokens : ndarray[int64], shape (N,)
        Tokens per message.
    prefix_tokens, user_prefix_tokens : ndarray[int64], shape (N + 1,)
        Tokens of messages ``[0, i)``, of all of them and of the user messages only.
    arrays : MessageArrays
        Roles and tool-call links (DESIGN §1 cut rules).
    call_positions : ndarray[int64], shape (C,)
        ``p_j``: call ``j``'s prompt holds messages ``[0, p_j)``; non-decreasing.
    output_tokens : ndarray[int64], shape (C,)
        Output tokens per call (recorded usage, else the produced message's tokens).
    call_times : ndarray[float64], shape (C,)
        Epoch seconds per call; NaN where unknown.
    use_messages, use_calls : ndarray[int64], shape (U,)
        Uses of earlier messages (DESIGN §6 detector): message ``use_messages[u]`` is needed by
        call ``use_calls[u]`` (``use_messages[u] < call_positions[use_calls[u]]``); sorted by call.
    path, format : str
        Where it comes from.
    counted_prefix : ndarray[int64], shape (N + 1,)
        Tokens of messages ``[0, i)`` as the recorded tool's provider counted them (module
        docstring, point 7; :func:`counted_tokens_per_message`); ``prefix_tokens`` without usage.
    counted_v : int or None
        The fixed prefix as the provider counted it (the first recorded prompt less its
        messages), tokens on the scale of ``message_tokens`` (provider tokens); None without
        usage records. The V a replay charges when the user gives none
        (:func:`dp_compact.replay.load.replay_v_tokens`).
    tool_compactions : tuple[tuple[str, int], ...]
        ``(tool, context tokens when it fired)`` of each compaction the file records that was not
        started by hand (``RecordedCompaction.trigger != "manual"`` with a known size).
    recorded_prompts, recorded_reads : ndarray[int64], shape (C,) or None
        Each call's prompt and its cache reads as its usage record states them (provider tokens;
        ``-1`` for a call without a record); None without usage records. The ``recorded``
        policy's prompts (:mod:`dp_compact.replay.recorded`) and the measured cache-hit share.
    cuts : tuple[RecordedCut, ...]
        The compactions the file records, in order (every one, by hand or not).
    cleared_prefix : ndarray[int64], shape (N + 1,)
        Tokens that clearing the long tool results of messages ``[0, d)`` takes out of the
        prompt, for every depth d (:attr:`ClearingFacts.saved_tokens`, on the scale of
        ``message_tokens``); zeros when nothing is clearable.
    clearable_messages : ndarray[bool], shape (N,)
        Messages holding a tool result that clearing replaces (DESIGN §9).
    """

    messages: tuple[Message, ...]
    message_tokens: Int64s
    prefix_tokens: Int64s
    user_prefix_tokens: Int64s
    arrays: MessageArrays
    call_positions: Int64s
    output_tokens: Int64s
    call_times: npt.NDArray[np.float64]
    use_messages: Int64s
    use_calls: Int64s
    path: str = ""
    format: str = ""
    counted_prefix: Int64s | None = None
    counted_v: int | None = None
    tool_compactions: tuple[tuple[str, int], ...] = ()
    recorded_prompts: Int64s | None = None
    recorded_reads: Int64s | None = None
    cuts: tuple[RecordedCut, ...] = ()
    cleared_prefix: Int64s = None  # type: ignore[assignment]  # make_recording always sets it
    clearable_messages: npt.NDArray[np.bool_] = None  # type: ignore[assignment]

    @property
    def n_calls(self) -> int:
        """Number of LLM calls C."""
        return int(self.call_positions.shape[0])


def make_recording(
    messages: tuple[Message, ...],
    message_tokens: Int64s,
    arrays: MessageArrays,
    call_positions: Int64s,
    output_tokens: Int64s,
    call_times: npt.NDArray[np.float64] | None = None,
    *,
    uses: tuple[Int64s, Int64s] | None = None,
    path: str = "",
    format: str = "",  # noqa: A002 - the Session field's name
    counted: tuple[Int64s, int | None] | None = None,
    tool_compactions: tuple[tuple[str, int], ...] = (),
    recorded: tuple[Int64s, Int64s] | None = None,
    cuts: tuple[RecordedCut, ...] = (),
    clearing: ClearingFacts | None = None,
) -> Recording:
    """A :class:`Recording` with its cumulative sums (arrays made read-only).

    ``uses`` is ``(messages, calls)``: message ``messages[u]`` is used by call ``calls[u]``
    (pairs whose message is not in that call's prompt are dropped); None = no uses.
    ``counted`` is ``(tokens per message as the provider counted them, shape (N,), counted V)``
    from :func:`counted_tokens_per_message`; None = our counts. ``recorded`` is ``(prompts, cache
    reads)`` per call from the usage records (``-1`` where none); ``cuts`` the recorded compactions;
    ``clearing`` the facts of clearing at every depth on the scale of ``message_tokens``
    (:func:`scaled_clearing_facts`); None = counted here with a token ratio of 1.

    Raises
    ------
    ValueError
        If the shapes disagree, a count is negative or positions are not non-decreasing in [0, N].
    """
    n = len(messages)
    tokens = np.asarray(message_tokens, dtype=np.int64)
    positions = np.asarray(call_positions, dtype=np.int64)
    outputs = np.asarray(output_tokens, dtype=np.int64)
    times = np.full(positions.shape, np.nan) if call_times is None else np.asarray(call_times, dtype=np.float64)
    if tokens.shape != (n,) or arrays.n != n or outputs.shape != positions.shape or times.shape != positions.shape:
        raise ValueError("messages, tokens and arrays need N entries; positions, outputs and times C entries")
    if (n and tokens.min() < 0) or (outputs.size and outputs.min() < 0):
        raise ValueError("token counts must be non-negative")
    if positions.size and (positions.min() < 0 or positions.max() > n or np.any(np.diff(positions) < 0)):
        raise ValueError("call positions must be non-decreasing and lie in [0, N]")
    prefix = np.concatenate(([0], np.cumsum(tokens)))
    user = np.concatenate(([0], np.cumsum(np.where(arrays.roles == ROLE_USER, tokens, 0))))
    used, users = (np.zeros(0, np.int64),) * 2 if uses is None else (np.asarray(u, dtype=np.int64) for u in uses)
    if used.shape != users.shape or (users.size and (users.min() < 0 or users.max() >= positions.size)):
        raise ValueError("uses need one call in [0, C) per message")
    keep = used < positions[users] if users.size else np.zeros(0, bool)
    order = np.lexsort((used[keep], users[keep]))
    used, users = used[keep][order], users[keep][order]
    per_message, counted_v = (tokens, None) if counted is None else (np.asarray(counted[0], np.int64), counted[1])
    if per_message.shape != (n,):
        raise ValueError("counted tokens need N entries")
    counted_prefix = prefix if counted is None else np.concatenate(([0], np.cumsum(per_message)))
    prompts = reads = None
    if recorded is not None:
        prompts, reads = (np.asarray(a, dtype=np.int64) for a in recorded)
        if prompts.shape != positions.shape or reads.shape != positions.shape:
            raise ValueError("recorded prompts and reads need C entries")
        prompts.setflags(write=False)
        reads.setflags(write=False)
    facts = scaled_clearing_facts(messages, tokens, 1.0) if clearing is None else clearing
    if facts.saved_tokens.shape != (n + 1,):
        raise ValueError("clearing facts need N + 1 depths")
    clearable = np.zeros(n, dtype=bool)
    clearable[facts.changed_message_indices] = True
    for array in (tokens, prefix, user, positions, outputs, times, used, users, counted_prefix, clearable):
        array.setflags(write=False)
    return Recording(tuple(messages), tokens, prefix, user, arrays, positions, outputs, times, used, users, path, format,
                     counted_prefix, counted_v, tuple(tool_compactions), prompts, reads, tuple(cuts), facts.saved_tokens,
                     clearable)


def scaled_clearing_facts(messages: tuple[Message, ...], message_tokens: Int64s, token_ratio: float) -> ClearingFacts:
    """:class:`ClearingFacts` of ``messages`` on the scale of ``message_tokens`` (provider tokens).

    The results' and placeholders' cl100k tokens (:func:`~dp_compact.measure.clearing.clearing_facts_for`'s
    counts) times ``token_ratio`` (the session's provider tokens per cl100k token), rounded; a
    message never loses more than its own tokens.
    """
    layout = tool_result_layout(messages)
    tokens = np.asarray(message_tokens, dtype=np.int64)
    if not layout.clearable.any():
        return clearing_facts(tokens, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                              np.zeros(0, bool))
    owner = layout.message_index[layout.clearable]
    texts = [r.text for m in messages for r in m.tool_results]
    texts = [t for t, keep in zip(texts, layout.clearable.tolist(), strict=True) if keep]
    ref = f"archive://session/{PLACEHOLDER_ARCHIVE_ID}"
    holders = [placeholder_text(len(t), ref, i) for t, i in zip(texts, owner.tolist(), strict=True)]
    removed = np.rint(count_text_tokens(texts) * token_ratio).astype(np.int64)
    added = np.rint(count_text_tokens(holders) * token_ratio).astype(np.int64)
    removed = np.minimum(removed, tokens[owner])  # a message's own count bounds what leaves it
    added = np.minimum(added, removed)
    return clearing_facts(tokens, owner, removed, added, np.ones(owner.size, bool))


def counted_tokens_per_message(
    message_tokens: Int64s, positions: Int64s, recorded_prompts: Int64s, compacted: npt.NDArray[np.bool_] | None = None
) -> tuple[Int64s, int | None]:
    """Each message's tokens as the recorded tool's provider counted them (module point 7).

    Parameters
    ----------
    message_tokens : ndarray[int64], shape (N,)
        Our tokens per message.
    positions : ndarray[int64], shape (K,)
        ``p`` of each call whose usage is recorded (its prompt held messages ``[0, p)``), in order.
    recorded_prompts : ndarray[int64], shape (K,)
        Those calls' prompts as the provider reported them, tokens.
    compacted : ndarray[bool], shape (K,), optional
        True where the tool recorded a compaction between call ``j − 1`` and call ``j``.

    Returns
    -------
    (ndarray[int64] of shape (N,), int or None)
        Counted tokens per message (ours where the usage does not tell), and the fixed prefix as
        counted (the first recorded prompt less our tokens of its messages; None without usage).

    Notes
    -----
    Between two recorded calls the prompt grew by ``ΔR`` (the provider's count) while the
    messages added between them hold ``ΔT`` of our tokens:

    - ``ΔR ≥ ΔT``: the difference arrived unseen (injected context, tool schemas loaded on demand)
      and is counted with the last of those messages;
    - ``0 ≤ ΔR < ΔT``: the tool sent less than the transcript holds (a truncated tool output, a
      tokenizer that counts fewer): each of them is scaled by ``ΔR / ΔT``;
    - ``ΔR < 0`` without a recorded compaction: the tool trimmed its prompt (Codex drops earlier
      turns' reasoning): the new messages count 0 but the last, which counts the shrink
      (negative: what was trimmed is not known, only how much);
    - across a recorded compaction the tool's prompt stops holding the whole history: a new
      segment begins and those messages keep our count.

    So within a segment the counted prompt equals every recorded one; in the first segment
    (before any recorded compaction) that is exactly the prompt the tool saw. Counts are
    non-negative but for a trim's last message.
    """
    counted = np.asarray(message_tokens, dtype=np.int64).copy()
    if positions.size == 0:
        return counted, None
    for j in range(1, positions.size):
        lo, hi = int(positions[j - 1]), int(positions[j])
        grown = int(recorded_prompts[j]) - int(recorded_prompts[j - 1])
        if compacted is not None and compacted[j]:
            continue
        if hi <= lo:
            continue
        ours = int(counted[lo:hi].sum())
        if grown >= ours:
            counted[hi - 1] += grown - ours
        elif grown >= 0:
            scaled = np.floor(counted[lo:hi] * (grown / ours)).astype(np.int64)
            scaled[int(np.argmax(counted[lo:hi]))] += grown - int(scaled.sum())
            counted[lo:hi] = scaled
        else:
            counted[lo:hi] = 0
            counted[hi - 1] = grown
    return counted, int(recorded_prompts[0] - message_tokens[: positions[0]].sum())


@dataclass(frozen=True, slots=True)
class ReplayParams:
    """Prices ($/MTok; ``max_context_tokens`` is the window M), V and S (tokens), cache TTL (s,
    None = never expires) and the lost-information charge (``"refetch"`` or ``"none"``, DESIGN §6).

    ``v_tokens`` is the fixed prefix every call sends (system prompt, tool definitions), charged
    to every policy and the oracle alike; ``v_source`` says where it comes from: ``"measured"``
    (the session's usage records, :attr:`Recording.counted_v`), ``"recorded"`` (stated by an
    earlier dp-compact compaction or shrink in the file), ``"setting"`` (``DP_V`` / ``--v``
    given), ``"default"`` (``DP_V``'s default), ``""`` (given by the caller);
    :func:`dp_compact.replay.load.replay_v_tokens` chooses. ``s_tokens`` is the summary the
    policy's tool writes (DESIGN §6 "Summary size per policy"). ``warm_tokens`` is the part of V
    already in the cache when the session starts, tokens: what its first recorded call read from
    a cache an earlier session had written (at most V; 0 without usage records), read from the
    cache by the first request of every policy alike.

    ``ttl_reason`` says why ``cache_ttl_s`` applies (DESIGN §8: given, the session's recorded write
    lifetime, the provider's default, or no times; :func:`dp_compact.replay.load.resolve_ttl`).
    ``cache_hit_share`` (in (0, 1]) is the share of the cached prefix the provider really served
    from its cache, measured from the session's usage records
    (:func:`dp_compact.replay.recorded.measured_hit_share`; 1 without them): every request of every
    policy reads ``cache_hit_share`` × its cached prefix and writes the rest (OpenAI's cache misses
    a third of the reusable prefix on some Codex sessions, whatever the policy).
    """

    prices: Prices
    v_tokens: int
    s_tokens: int
    cache_ttl_s: float | None = None
    loss: str = "refetch"
    v_source: str = ""
    warm_tokens: int = 0
    ttl_reason: str = ""
    cache_hit_share: float = 1.0

    def __post_init__(self) -> None:
        if self.loss not in LOSS_MODES:
            raise ValueError(f"loss must be one of {LOSS_MODES}, not {self.loss!r}")
        if not 0.0 < self.cache_hit_share <= 1.0:
            raise ValueError(f"cache_hit_share={self.cache_hit_share!r} must lie in (0, 1]")

    @property
    def window(self) -> int:
        """M, the context window in tokens."""
        return self.prices.max_context_tokens
