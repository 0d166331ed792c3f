"""What a replay records of each compaction and each refetch, for the receipts (:mod:`dp_compact.replay.receipts`).

The meter (:func:`dp_compact.replay.meter.replay`) keeps, besides its sums, one
:class:`CompactionEvent` per compaction or hard truncation (the live state and the cache just
before it, its request's $, the messages it dropped) and one :class:`RefetchEvent` per dropped
message fetched again (which compaction dropped it). They cost one set difference per
compaction, O(N). Pure values; nothing here reads files.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dp_compact.replay.context import Live

__all__ = ["CompactionEvent", "RefetchEvent", "live_messages", "snapshot"]


@dataclass(frozen=True, slots=True)
class CompactionEvent:
    """One compaction (or hard truncation, or clearing) of a replay, as it happened.

    Attributes
    ----------
    call : int
        The call it came before (0-based).
    cut : int
        History index where the new verbatim tail starts.
    summarize : bool
        False for a hard truncation (no request, no summary).
    forced : bool
        True when an overflow forced it (the policy's fallback, or the meter's forced summary).
    request_usd : float
        $ of its summarization request (0 for a truncation): what it added to ``compaction_usd``.
    summary_tokens : int
        The block it left (S, plus Codex's kept user messages), tokens.
    head_prompt_tokens : int
        The request's prompt ``V + H``, tokens (0 for a truncation).
    live_before : Live
        A copy of the live conversation just before it (its ``end`` is the call's position).
    cached_before : int
        Tokens the cache held just before it (after the TTL rule of its call), tokens.
    last_time : float
        Epoch seconds of the previous call (NaN when unknown or none).
    dropped : frozenset[int]
        History indices live before it and not after (the refetched ones included); for a
        clearing, the messages whose tool results it cleared.
    action : str
        ``"summarize"``, ``"truncate"`` or ``"clear"`` (DESIGN §9: tool results cleared before
        ``cut``, the depth; no request, ``summarize`` False, ``summary_tokens`` the tokens it took out).
    """

    call: int
    cut: int
    summarize: bool
    forced: bool
    request_usd: float
    summary_tokens: int
    head_prompt_tokens: int
    live_before: Live
    cached_before: int
    last_time: float
    dropped: frozenset[int]
    action: str = "summarize"


@dataclass(frozen=True, slots=True)
class RefetchEvent:
    """A dropped message fetched again before call ``call`` (DESIGN §6): ``message`` (history
    index), its ``tokens``, the $ of the fetch itself (``usd``: the extra call and the message
    written fresh; its carrying by later calls is not in it), and ``event``: the index of the
    :class:`CompactionEvent` that dropped it last (−1: none)."""

    call: int
    message: int
    tokens: int
    usd: float
    event: int


def snapshot(live: Live) -> Live:
    """A copy of ``live`` that later changes to it do not reach."""
    return replace(live, refetched=set(live.refetched))


def live_messages(live: Live) -> frozenset[int]:
    """History indices in the live context: pinned, kept in the block, refetched, the verbatim tail."""
    return frozenset(range(live.pinned)) | live.kept | frozenset(live.refetched) | frozenset(range(live.start, live.end))
