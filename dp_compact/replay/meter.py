"""Replay: what a recorded session would have cost, call by call, under a compaction policy.

The replay model (README "Replay"):

1. The recorded messages are appended in order. Before recorded LLM call ``j`` the conversation
   holds messages ``[0, p_j)`` (``p_j``: the call's position; the assistant message it produced
   comes next), and the policy may compact first.
2. The prompt of a call is ``V + pinned + carry + tail``: the fixed prefix V, the first messages a
   policy keeps verbatim (OpenHands' ``keep_first``), the block a compaction left (summary S,
   plus Codex's kept user messages) and the verbatim messages ``[start, p_j)``.
3. Prompt caching: the longest prefix unchanged since the previous request is a cache read
   (``P_cache``), the rest uncached input (``P_input``) or, where the profile prices writes, a
   cache write (``P_write``). With a TTL, a gap longer than the TTL between two requests empties
   the cache. The call's recorded output tokens are charged at ``P_out``.
4. A compaction costs its summarization request, DESIGN §2 ③ made cache-aware: prompt ``V + H``
   (H = everything before the new tail) read from cache where still cached, the rest at the
   uncached price, ``L_instr`` instruction tokens at ``P_input``, S output tokens at ``P_out``.
   Its block replaces the head; the cache keeps only ``V + pinned``.
5. A prompt above the window M is an overflow: counted (the rejected request costs nothing),
   then the policy's forced fallback applies, and a hard truncation (drop the oldest messages at
   a feasible cut; no summary, no request) when it has none or it is not enough.
6. Lost information (DESIGN §6, ``loss="refetch"``, the default): the recording is fixed, so a
   message that a later call *uses* (:mod:`dp_compact.reuse`) but that the policy dropped must be
   fetched again. Before that call: one extra call (the prompt about to be sent, read from
   cache, and ``REFETCH_OUTPUT_TOKENS`` of output), the message's tokens written fresh
   (``P_write``), and those tokens carried, read from cache, by every later call and by the next
   compaction's request, which drops them again. A message is dropped when it is neither pinned,
   nor kept in the compaction block (Codex's user messages), nor in the verbatim tail; once
   fetched it counts as live until the next compaction. Refetched tokens are charged, not added
   to the prompt's size (they never cause an overflow). All of it is the ``loss`` column.

The recording is taken as fixed (:data:`FIXED_RECORDING`): later messages, tool outputs and
output tokens are the same under every policy.

7. What the recorded tool counted: a transcript does not show everything its tool sent (Claude
   Code's attachments, task notifications and reminders, tool schemas loaded on demand), and the
   provider's tokenizer is not ours. Costs are measured on the transcript's messages, the same for
   every policy; but a preset that stands for a tool triggering on the provider's usage (Claude
   Code, Codex) must fire where that tool did, so it sees the prompt *as the provider counted it*
   (:attr:`CallContext.counted_tokens`): each message as the usage records counted it
   (:func:`counted_tokens_per_message`: what arrived unseen is counted with the messages it
   arrived with, and is gone when they are dropped).

Everything here is pure: :func:`replay` maps a :class:`Recording`, a policy and
:class:`ReplayParams` to a :class:`PolicyResult`. Files are read in
:mod:`dp_compact.replay.shell`; the policies live in :mod:`dp_compact.replay.policies`, the
hindsight optimum in :mod:`dp_compact.replay.oracle`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from dp_compact.benefit import compaction_request_cost
from dp_compact.cuts import ROLE_USER, MessageArrays, feasible_cut_mask
from dp_compact.pricing import Prices
from dp_compact.conversation import Message

__all__ = [
    "FIXED_RECORDING",
    "LOSS_MODES",
    "REFETCH_OUTPUT_TOKENS",
    "CallContext",
    "Compaction",
    "Live",
    "Policy",
    "PolicyResult",
    "Recording",
    "ReplayParams",
    "make_recording",
    "prefix_floor_usd",
    "replay",
    "tail_cut_mask",
    "truncation",
    "counted_tokens_per_message",
]

Int64s = npt.NDArray[np.int64]

#: DESIGN §6: what every replay assumes, stated in its table and JSON.
FIXED_RECORDING = (
    "the recording is taken as fixed: later messages, tool outputs and output tokens are the same under every policy"
)
#: ``--loss`` choices (DESIGN §6): no charge, or a refetch per use of a dropped message.
LOSS_MODES = ("refetch", "none")
#: Output tokens of the extra call that fetches a dropped message again (DESIGN §6 "a short
#: tool-call output"): a Read/cat call with its path, about 50-70 tokens in the shared transcripts.
REFETCH_OUTPUT_TOKENS = 60


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
        messages), tokens; None = V.
    tool_compactions : tuple[tuple[str, int], ...]
        ``(tool, context tokens when it fired)`` of each compaction the file records that was not
        started by hand (``RecordedCompaction.trigger != "manual"`` with a known size).
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
) -> Recording:
    """A :class:`Recording` with its cumulative sums (arrays made read-only).

    ``uses`` is ``(messages, calls)``: message ``messages[u]`` is used by call ``calls[u]``
    (pairs whose message is not in that call's prompt are dropped); None = no uses.
    ``counted`` is ``(tokens per message as the provider counted them, shape (N,), counted V)``
    from :func:`counted_tokens_per_message`; None = our counts.

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
    for array in (tokens, prefix, user, positions, outputs, times, used, users, counted_prefix):
        array.setflags(write=False)
    return Recording(tuple(messages), tokens, prefix, user, arrays, positions, outputs, times, used, users, path, format,
                     counted_prefix, counted_v, tuple(tool_compactions))


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

    ``s_tokens`` is the summary the policy's tool writes (DESIGN §6 "Summary size per policy").
    """

    prices: Prices
    v_tokens: int
    s_tokens: int
    cache_ttl_s: float | None = None
    loss: str = "refetch"

    def __post_init__(self) -> None:
        if self.loss not in LOSS_MODES:
            raise ValueError(f"loss must be one of {LOSS_MODES}, not {self.loss!r}")

    @property
    def window(self) -> int:
        """M, the context window in tokens."""
        return self.prices.max_context_tokens



@dataclass(slots=True)
class Live:
    """The live conversation: ``history[:pinned] + [carry block] + history[start:end]``; ``compactions`` so far.

    ``kept``: head messages the block holds verbatim (Codex's user messages); ``refetched``:
    dropped messages fetched again since the last compaction, and their ``refetched_tokens``;
    ``head_messages``: messages the last compaction replaced (a block among them counts as one).
    """

    pinned: int = 0
    carry_tokens: int = 0
    start: int = 0
    end: int = 0
    compactions: int = 0
    kept: frozenset[int] = frozenset()
    refetched: set[int] = field(default_factory=set)
    refetched_tokens: int = 0
    head_messages: int = 0

    def dropped(self, message: int) -> bool:
        """True when history message ``message`` is in no part of the live context."""
        return self.pinned <= message < self.start and message not in self.kept and message not in self.refetched

    def tokens(self, rec: Recording) -> int:
        """Tokens of the live messages (without V)."""
        p = rec.prefix_tokens
        return int(p[self.pinned] + self.carry_tokens + p[self.end] - p[self.start])

    def counted(self, rec: Recording) -> int:
        """Tokens of the live messages as the recorded tool's provider counted them (module point 7)."""
        c = rec.prefix_tokens if rec.counted_prefix is None else rec.counted_prefix
        return int(c[self.pinned] + self.carry_tokens + c[self.end] - c[self.start])


@dataclass(frozen=True, slots=True)
class Compaction:
    """A policy's action before a call: the live head becomes one block.

    ``cut``: history index where the new tail starts (tail ``[cut, end)``); ``carry_tokens``:
    the block replacing the head (S, or S plus kept user messages); ``pinned``: first messages
    kept before the block; ``summarize``: False for a hard truncation (no request, no block);
    ``kept``: head messages the block holds verbatim (not lost).
    """

    cut: int
    carry_tokens: int
    pinned: int = 0
    summarize: bool = True
    kept: frozenset[int] = frozenset()


@dataclass(slots=True)
class CallContext:
    """What a policy sees before call ``call``; policies read it and never modify it.

    ``prompt_tokens``: the prompt about to be sent (V included); ``prompts``: the prompts of the
    calls made so far, tokens, as replayed.
    """

    rec: Recording
    live: Live
    params: ReplayParams
    call: int = 0
    prompt_tokens: int = 0
    prompts: list[int] = field(default_factory=list)

    @property
    def counted_tokens(self) -> int:
        """The prompt about to be sent as the recorded tool's provider would count it, tokens
        (module point 7): the fixed prefix as counted, the live messages and what arrived unseen
        with them. Equals :attr:`prompt_tokens` when the recording has no usage records."""
        counted_v = self.params.v_tokens if self.rec.counted_v is None else self.rec.counted_v
        return max(counted_v + self.live.counted(self.rec), 0)


class Policy(Protocol):
    """A compaction policy; ``fixed`` marks a fixed rule (compared as "best fixed policy"); ``tool``
    names the tool whose summary size it is charged (DESIGN §6; "" = ``DP_S``)."""

    name: str
    fixed: bool
    tool: str

    def before_call(self, ctx: CallContext) -> Compaction | None:
        """The compaction to make before the call, or None."""
        ...

    def on_overflow(self, ctx: CallContext) -> Compaction | None:
        """The forced fallback when the prompt exceeds the window, or None (hard truncation)."""
        ...


def tail_cut_mask(rec: Recording, start: int, end: int) -> npt.NDArray[np.bool_]:
    """Feasible cuts (DESIGN §1) of the verbatim tail ``[start, end)``; shape (end − start + 1,).

    Entry ``i − start`` tells whether the tail may start at message ``i``; a tool call made before
    ``start`` no longer binds its result. Entries 0 and ``end − start`` are False.
    """
    return feasible_cut_mask(rec.arrays.slice(start, end))


def truncation(ctx: CallContext) -> Compaction | None:
    """Hard truncation: the shallowest feasible cut whose prompt fits M, else the deepest; None if none.

    The tail's start itself is a candidate when a pinned part or block is there to drop.
    """
    live, rec, params = ctx.live, ctx.rec, ctx.params
    mask = tail_cut_mask(rec, live.start, live.end)
    mask[0] = live.pinned > 0 or live.carry_tokens > 0
    cuts = live.start + np.flatnonzero(mask)
    if cuts.size == 0:
        return None
    prompts = params.v_tokens + rec.prefix_tokens[live.end] - rec.prefix_tokens[cuts]
    fits = np.flatnonzero(prompts <= params.window)
    return Compaction(cut=int(cuts[fits[0]] if fits.size else cuts[-1]), carry_tokens=0, summarize=False)


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """The cost of one recording under one policy.

    Attributes
    ----------
    policy : str
        Its name (``dp``, ``threshold:0.8``, ``claude-code``, ``oracle``, ...).
    fixed : bool
        True for a fixed rule (all but ``dp``, ``seed`` and ``oracle``).
    calls : int
        LLM calls replayed, C.
    cache_read_usd, input_usd, write_usd, output_usd : float
        $ of the calls' cache reads, uncached input (``P_input``), cache writes (``P_write``,
        profiles that price them) and output.
    compaction_usd : float
        $ of the summarization requests (all their tokens).
    loss_usd : float
        $ of lost information (module docstring, point 6): the refetch calls, the refetched
        tokens and their carrying; 0 with ``loss="none"``.
    compactions, overflows, truncations, refetches : int
        Compactions (hard truncations apart), prompts above the window, hard truncations,
        dropped messages fetched again.
    summary_tokens : int
        S charged per compaction, tokens.
    peak_context_tokens : int
        Largest prompt sent (V included), tokens.
    mean_context_tokens : float
        Mean prompt sent, tokens.
    floor_usd : float
        This policy's prompts all read from cache plus the output, $: its cost is never lower.
    contexts : ndarray[int64], shape (C,)
        Prompt tokens of each call as sent; not serialized.
    counted_contexts : ndarray[int64], shape (C,)
        The same prompts as the recorded tool's provider would have counted them (module point
        7; equal to ``contexts`` without usage records); not serialized.
    schedule : tuple[tuple[int, int], ...]
        ``(call, cut)`` of each compaction, in order; not serialized.
    """

    policy: str
    fixed: bool
    calls: int
    cache_read_usd: float
    input_usd: float
    write_usd: float
    output_usd: float
    compaction_usd: float
    loss_usd: float
    compactions: int
    overflows: int
    truncations: int
    refetches: int
    summary_tokens: int
    peak_context_tokens: int
    mean_context_tokens: float
    floor_usd: float
    contexts: Int64s = field(compare=False, repr=False)
    counted_contexts: Int64s = field(default_factory=lambda: np.zeros(0, np.int64), compare=False, repr=False)
    schedule: tuple[tuple[int, int], ...] = field(default=(), compare=False, repr=False)

    @property
    def total_usd(self) -> float:
        """Total $: the calls (reads, input, writes, output), the compaction requests and the loss."""
        return (self.cache_read_usd + self.input_usd + self.write_usd + self.output_usd + self.compaction_usd
                + self.loss_usd)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields with ``total_usd``, without ``contexts`` and ``schedule``."""
        names = ("policy", "fixed", "calls", "cache_read_usd", "input_usd", "write_usd", "output_usd", "compaction_usd",
                 "loss_usd", "compactions", "overflows", "truncations", "refetches", "summary_tokens",
                 "peak_context_tokens", "mean_context_tokens", "floor_usd")
        return {"total_usd": self.total_usd, **{name: getattr(self, name) for name in names}}


class _Meter:
    """Running sums of one replay in $ · 1e6 (tokens · $/MTok), counts, and the cache state."""

    def __init__(self, params: ReplayParams) -> None:
        self.params = params
        self.read = self.input = self.write = self.output = self.compaction = self.loss = self.floor = 0.0
        self.compactions = self.overflows = self.truncations = self.refetches = 0
        self.cached = 0  # tokens of the live prompt's prefix still in the cache
        self.last_time = float("nan")
        self.schedule: list[tuple[int, int]] = []

    def expire(self, now: float) -> None:
        """Empty the cache when more than the TTL passed since the last request (unknown times never do)."""
        ttl = self.params.cache_ttl_s
        if ttl is not None and now - self.last_time > ttl:  # NaN compares False
            self.cached = 0

    def _prompt(self, prompt: int) -> tuple[float, float, float]:
        """(read, input, write) $·1e6 of a request's prompt: its cached prefix, the rest uncached."""
        prices = self.params.prices
        read = min(self.cached, prompt)
        fresh = prompt - read
        if prices.p_cache_write is None:
            return read * prices.p_cache, fresh * prices.p_input, 0.0
        return read * prices.p_cache, 0.0, fresh * prices.p_cache_write

    def request(self, prompt: int, output: int, carried: int) -> None:
        """Charge one call (``carried`` refetched tokens read from cache as loss); its prompt is cached afterwards."""
        prices = self.params.prices
        read, fresh_input, fresh_write = self._prompt(prompt)
        self.read, self.input, self.write = self.read + read, self.input + fresh_input, self.write + fresh_write
        self.output += output * prices.p_out
        self.loss += carried * prices.p_cache
        self.floor += prompt * min(prices.p_cache, prices.p_input, prices.p_write) + output * prices.p_out
        self.cached = prompt

    def summarize(self, head_prompt: int, kept_prefix: int, carried: int) -> None:
        """Charge a summarization request over ``V + H`` tokens (DESIGN §2 ③, cache-aware) plus carried refetches."""
        read = min(self.cached, head_prompt)
        self.compaction += compaction_request_cost(read, head_prompt - read, self.params.s_tokens, self.params.prices)
        self.loss += carried * self.params.prices.p_cache
        self.compactions += 1
        self.cached = kept_prefix

    def refetch(self, prompt: int, message_tokens: int) -> None:
        """Charge fetching one dropped message again before a call whose prompt is ``prompt`` tokens."""
        prices = self.params.prices
        self.loss += prompt * prices.p_cache + REFETCH_OUTPUT_TOKENS * prices.p_out + message_tokens * prices.p_write
        self.refetches += 1


def _apply(ctx: CallContext, meter: _Meter, compaction: Compaction) -> None:
    """Carry out a compaction or hard truncation on the live state, charging its request."""
    live, rec, v = ctx.live, ctx.rec, ctx.params.v_tokens
    if not live.start <= compaction.cut <= live.end or compaction.pinned > compaction.cut:
        raise ValueError(f"compaction cut {compaction.cut} outside the live tail [{live.start}, {live.end}]")
    head_prompt = v + live.tokens(rec) - int(rec.prefix_tokens[live.end] - rec.prefix_tokens[compaction.cut])
    kept_prefix = v + int(rec.prefix_tokens[compaction.pinned])
    if compaction.summarize:
        live.head_messages = compaction.cut - live.start + (live.carry_tokens > 0)
        meter.summarize(head_prompt, kept_prefix, live.refetched_tokens)
        meter.schedule.append((ctx.call, compaction.cut))
        live.compactions += 1
    else:
        meter.truncations += 1
        meter.cached = min(meter.cached, kept_prefix)
    live.pinned, live.carry_tokens, live.start = compaction.pinned, compaction.carry_tokens, compaction.cut
    live.kept, live.refetched, live.refetched_tokens = compaction.kept, set(), 0
    ctx.prompt_tokens = v + live.tokens(rec)


def _fit(ctx: CallContext, policy: Policy, meter: _Meter) -> None:
    """An overflow: count it, apply the policy's fallback, then a hard truncation if still too long."""
    meter.overflows += 1
    fallback = policy.on_overflow(ctx)
    if fallback is not None:
        _apply(ctx, meter, fallback)
    if ctx.prompt_tokens > ctx.params.window and (cut := truncation(ctx)) is not None:
        _apply(ctx, meter, cut)


def _refetch(ctx: CallContext, meter: _Meter, messages: Int64s) -> None:
    """Fetch again the dropped messages among ``messages`` (used by the coming call), in order."""
    live, tokens = ctx.live, ctx.rec.message_tokens
    for message in messages.tolist():
        if live.dropped(message):
            meter.refetch(ctx.prompt_tokens, int(tokens[message]))
            live.refetched.add(message)
            live.refetched_tokens += int(tokens[message])


def replay(rec: Recording, policy: Policy, params: ReplayParams) -> PolicyResult:
    """Price ``rec`` call by call under ``policy`` (the model of this module's docstring).

    Parameters
    ----------
    rec : Recording
        Messages, their tokens, the recorded calls (positions, output tokens, times) and uses.
    policy : Policy
        Decides before each call whether to compact, and what to do on an overflow.
    params : ReplayParams
        Prices ($/MTok), window M, V and S (tokens), cache TTL (s), loss mode.

    Returns
    -------
    PolicyResult
        $ per term, counts, peak and mean context, the compaction schedule.

    Raises
    ------
    ValueError
        If the policy returns a cut outside the live tail.
    """
    live = Live()
    ctx = CallContext(rec, live, params)
    meter = _Meter(params)
    contexts = np.zeros(rec.n_calls, dtype=np.int64)
    counted = np.zeros(rec.n_calls, dtype=np.int64)
    charge_loss = params.loss == "refetch"
    bounds = np.searchsorted(rec.use_calls, np.arange(rec.n_calls + 1))
    for j in range(rec.n_calls):
        live.end = int(rec.call_positions[j])
        ctx.call, ctx.prompt_tokens = j, params.v_tokens + live.tokens(rec)
        now = float(rec.call_times[j])
        meter.expire(now)
        if (decision := policy.before_call(ctx)) is not None:
            _apply(ctx, meter, decision)
        if ctx.prompt_tokens > params.window:
            _fit(ctx, policy, meter)
        if charge_loss and bounds[j + 1] > bounds[j]:
            _refetch(ctx, meter, rec.use_messages[bounds[j]:bounds[j + 1]])
        meter.request(ctx.prompt_tokens, int(rec.output_tokens[j]), live.refetched_tokens)
        meter.last_time = now
        contexts[j] = ctx.prompt_tokens
        counted[j] = ctx.counted_tokens
        ctx.prompts.append(ctx.prompt_tokens)
    contexts.setflags(write=False)
    counted.setflags(write=False)
    return PolicyResult(
        policy=policy.name, fixed=policy.fixed, calls=rec.n_calls, cache_read_usd=meter.read / 1e6,
        input_usd=meter.input / 1e6, write_usd=meter.write / 1e6, output_usd=meter.output / 1e6,
        compaction_usd=meter.compaction / 1e6, loss_usd=meter.loss / 1e6, compactions=meter.compactions,
        overflows=meter.overflows, truncations=meter.truncations, refetches=meter.refetches,
        summary_tokens=params.s_tokens, peak_context_tokens=int(contexts.max()) if contexts.size else 0,
        mean_context_tokens=float(contexts.mean()) if contexts.size else 0.0, floor_usd=meter.floor / 1e6,
        contexts=contexts, counted_contexts=counted, schedule=tuple(meter.schedule),
    )


def prefix_floor_usd(rec: Recording, params: ReplayParams) -> float:
    """A floor for every policy, $: each call reads at least V from cache and pays its recorded output."""
    prices = params.prices
    per_token = min(prices.p_cache, prices.p_input, prices.p_write)
    return float(rec.n_calls * params.v_tokens * per_token + int(rec.output_tokens.sum()) * prices.p_out) / 1e6
