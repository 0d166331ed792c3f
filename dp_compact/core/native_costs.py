"""Provider-native compactions priced with their documented billing (DESIGN §9). Pure.

``DP_NATIVE`` says which action carries a plan out; the look-ahead (:func:`dp_compact.core.planner_lookahead.plan_ahead`)
then prices that action, not dp's own:

- ``anthropic-compact`` (``compact_20260112``, beta ``compact-2026-01-12``): inside the request, an
  extra sampling reads the *whole* conversation (from the cache where it is cached) and writes a
  ``compaction`` block, billed in ``usage.iterations``; everything before the block is dropped,
  the last API round included, and the response goes on from the block, so the prompt is
  written again from the start. Its trigger is at least
  :data:`ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS` input tokens: no compaction below it.
- ``openai-compact`` (``POST /responses/compact``): a request of its own reading the whole input
  (cached tokens at the cache price), returning every user message and one encrypted
  ``compaction`` item, which then replace the history; the next request writes its prompt from
  the start.
- ``anthropic-clear`` (``clear_tool_uses_20250919``): no request; the cleared tool results are not
  billed and the prompt is cached again from the first cleared result: the billing of dp's own
  clearing, which the look-ahead prices already, so it changes nothing here.

The summary's size is S either way (the provider's own summary is not known in advance).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = ["ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS", "NATIVE_ACTIONS", "NATIVE_COMPACTIONS", "NativeCompaction", "native_compaction"]

#: The values of ``DP_NATIVE``: dp's own actions (``none``) or which provider-native action carries a plan out.
NATIVE_ACTIONS = ("none", "anthropic-clear", "anthropic-compact", "openai-compact")
#: The ``DP_NATIVE`` values whose compaction is the provider's (priced by :func:`native_compaction`).
NATIVE_COMPACTIONS = ("anthropic-compact", "openai-compact")
#: Least ``trigger`` of Anthropic's ``compact_20260112``, input tokens (Anthropic's compaction
#: documentation, parameter table: ``trigger.value`` at least 50,000; default 150,000).
ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS = 50_000


@dataclass(frozen=True, slots=True)
class NativeCompaction:
    """What one provider-native compaction does to the conversation, for the look-ahead.

    Attributes
    ----------
    action : {"anthropic-compact", "openai-compact"}
    head_tokens : int
        Tokens of the messages it drops.
    tail_tokens : int
        Tokens of the messages it keeps verbatim (OpenAI: the user messages; Anthropic: none).
    kept_messages : int
        Messages it keeps verbatim.
    loss_usd : float
        Expected cost of what it drops, $ (the recall term of the dropped messages).
    tail_share : float
        Share of the conversation's tokens it keeps, in [0, 1]: what a later native compaction is
        expected to keep too.
    min_prompt_tokens : float
        No such compaction of a prompt below this many tokens (the least trigger; 0: none).
    """

    action: Literal["anthropic-compact", "openai-compact"]
    head_tokens: int
    tail_tokens: int
    kept_messages: int
    loss_usd: float
    tail_share: float
    min_prompt_tokens: float


def native_compaction(action: str, roles: list[str], tokens: npt.NDArray[np.int64], per_message_loss: npt.NDArray[np.float64]) -> NativeCompaction:
    """The provider's compaction of a conversation (module docstring).

    Parameters
    ----------
    action : {"anthropic-compact", "openai-compact"}
    roles : list of str, length N
        Each message's role (``"user"`` messages are what OpenAI keeps).
    tokens : ndarray[int64], shape (N,)
        Tokens of each message.
    per_message_loss : ndarray[float64], shape (N,)
        Expected cost of dropping each message, $.

    Raises
    ------
    ValueError
        Another action, or arrays whose lengths differ.

    >>> c = native_compaction("openai-compact", ["user", "assistant", "tool"], np.array([10, 20, 70]), np.array([0.1, 0.2, 0.3]))
    >>> (c.head_tokens, c.tail_tokens, c.kept_messages, round(c.loss_usd, 3), c.tail_share)
    (90, 10, 1, 0.5, 0.1)
    """
    if action not in NATIVE_COMPACTIONS:
        raise ValueError(f"not a native compaction: {action!r} (one of {', '.join(NATIVE_COMPACTIONS)})")
    counts = np.asarray(tokens, dtype=np.int64)
    losses = np.asarray(per_message_loss, dtype=np.float64)
    if not (len(roles) == counts.size == losses.size):
        raise ValueError("roles, tokens and per_message_loss must have one entry per message")
    kept = np.array([r == "user" for r in roles], dtype=bool) if action == "openai-compact" else np.zeros(counts.size, bool)
    total = int(counts.sum())
    tail = int(counts[kept].sum())
    return NativeCompaction(
        action=action,  # type: ignore[arg-type]
        head_tokens=total - tail, tail_tokens=tail, kept_messages=int(kept.sum()), loss_usd=float(losses[~kept].sum()),
        tail_share=tail / total if total else 0.0,
        min_prompt_tokens=float(ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS) if action == "anthropic-compact" else 0.0,
    )
