"""Split and align (DESIGN §5.2): carry out a cut on the feasible-cut rules of :mod:`dp_compact.cuts`.

Nothing here re-states a cut rule: :func:`dp_compact.cuts.feasible_cut_mask` decides which
cuts are feasible, and this module only picks one (``--keep K``, forced) and splits there.
Everything DESIGN §5.2 asks of alignment follows from those rules: the tail never starts with a
tool result; every tool result in the tail has its call in the tail, so parallel calls stay
with their results (Anthropic: the one user message holding them); a pending call at the end
needs nothing; signed thinking blocks in the tail are copied verbatim (see ``cuts``' docstring
for the provider rule that allows cutting between rounds of a thinking loop).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dp_compact.cuts import feasible_cut_mask, message_arrays
from dp_compact.errors import NoFeasibleCutError
from dp_compact.sessions.model import Message

__all__ = ["cut_for_keep", "feasible_cuts", "split"]


def feasible_cuts(messages: Sequence[Message], *, user_turns_only: bool = False) -> npt.NDArray[np.int64]:
    """Feasible cut indices in increasing order; shape (n_cuts,). Cut ``i`` keeps ``N - i`` messages."""
    mask = feasible_cut_mask(message_arrays(messages), user_turns_only=user_turns_only)
    return np.flatnonzero(mask).astype(np.int64)


def cut_for_keep(messages: Sequence[Message], k: int, *, user_turns_only: bool = False) -> int:
    """The nearest feasible cut that keeps at least ``k`` messages (the cut moves earlier).

    Parameters
    ----------
    messages : sequence of Message
        The live conversation, N messages.
    k : int
        Messages the user asks to keep (``--keep K``), ``k >= 1``.
    user_turns_only : bool
        Only user-turn cuts (``DP_MODEL=seed``).

    Returns
    -------
    int
        The largest feasible cut ``i`` with ``N - i >= k``.

    Raises
    ------
    NoFeasibleCutError
        If ``k < 1``, or no feasible cut keeps at least ``k`` messages and drops one (e.g.
        ``k >= N``, or the whole conversation is one user turn and its tool results).

    Examples
    --------
    >>> from dp_compact.sessions.model import Message, ToolCall, ToolResult
    >>> msgs = [Message("user", "hi"), Message("assistant", tool_calls=(ToolCall("a", "ls"),)),
    ...         Message("tool", tool_results=(ToolResult("a", "x"),)), Message("assistant", "done")]
    >>> cut_for_keep(msgs, 2)  # keeping 2 would open on the tool result: move to its call
    1
    """
    n = len(messages)
    if k < 1:
        raise NoFeasibleCutError(f"cannot keep {k} messages: keep at least 1")
    cuts = feasible_cuts(messages, user_turns_only=user_turns_only)
    allowed = cuts[cuts <= n - k]
    if allowed.size == 0:
        raise NoFeasibleCutError(
            f"no feasible cut keeps at least {k} of {n} messages and drops one "
            "(a tail may not open on a tool result nor lose the call of a kept result)"
        )
    return int(allowed[-1])


def split(messages: Sequence[Message], cut: int) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """Split at ``cut`` into ``(head, tail) = (messages[:cut], messages[cut:])``.

    Raises
    ------
    NoFeasibleCutError
        If ``cut`` is not a feasible cut of ``messages`` (DESIGN §1, :mod:`dp_compact.cuts`).
    """
    mask = feasible_cut_mask(message_arrays(messages))
    if not 0 <= cut < mask.shape[0] or not mask[cut]:
        raise NoFeasibleCutError(f"cut {cut} is not a feasible cut of {len(messages)} messages")
    return tuple(messages[:cut]), tuple(messages[cut:])
