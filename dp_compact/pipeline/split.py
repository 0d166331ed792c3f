"""Split and align (DESIGN §5.2): carry out a cut on the feasible-cut rules of :mod:`dp_compact.core.cuts`.

Nothing here re-states a cut rule: :func:`dp_compact.core.cuts.feasible_cut_mask` decides which
cuts are feasible, and this module only picks one (``--keep K``, forced) and splits there.
When a ``--keep K`` cannot be met exactly, :func:`cut_blocker` names the message that the mask
rejected the cut for (its ``path:line`` and tool call id), and :func:`nearest_feasible_keeps`
the feasible keep counts on either side of K.
Everything DESIGN §5.2 asks of alignment follows from those rules: the tail never starts with a
tool result; every tool result in the tail has its call in the tail, so parallel calls stay
with their results (Anthropic: the one user message holding them); a pending call at the end
needs nothing; signed thinking blocks in the tail are copied verbatim (see ``cuts``' docstring
for the provider rule that allows cutting between rounds of a thinking loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.core.cuts import ROLE_TOOL, feasible_cut_mask, message_arrays
from dp_compact.errors import NoFeasibleCutError
from dp_compact.conversation import Message
from dp_compact.sessions.common import text_and_images
from dp_compact.text.summary_text import is_boundary_text

__all__ = ["CutBlocker", "cut_blocker", "cut_for_keep", "feasible_cuts", "keep_moved_note", "nearest_feasible_keeps", "split",
           "split_system"]


@dataclass(frozen=True, slots=True)
class CutBlocker:
    """Why a cut is not feasible: the message that blocks it and the rule it would break.

    ``index`` is the blocking message (0-based in the live conversation), ``line`` its 1-based
    source line (0 when unknown, as in a JSON document), ``call_id`` the tool call the cut would
    separate from its result (None when the reason is another rule), ``reason`` one sentence
    naming ``path:line`` of the messages involved.
    """

    index: int
    line: int
    call_id: str | None
    reason: str


def feasible_cuts(messages: Sequence[Message], *, user_turns_only: bool = False) -> npt.NDArray[np.int64]:
    """Feasible cut indices in increasing order; shape (n_cuts,). Cut ``i`` keeps ``N - i`` messages."""
    mask = feasible_cut_mask(message_arrays(messages), user_turns_only=user_turns_only)
    return np.flatnonzero(mask).astype(np.int64)


def _where(messages: Sequence[Message], index: int, path: str) -> str:
    """``message I (path:line)``, or ``message I`` when the source line is unknown."""
    line = messages[index].line
    if not line:
        return f"message {index}"
    return f"message {index} ({path}:{line})" if path else f"message {index} (line {line})"


def cut_blocker(
    messages: Sequence[Message], cut: int, *, path: str = "", user_turns_only: bool = False
) -> CutBlocker | None:
    """The message that makes ``cut`` infeasible, and why (the rules of :mod:`dp_compact.core.cuts`).

    Parameters
    ----------
    messages : sequence of Message
        The live conversation, N messages.
    cut : int
        The cut asked for: head ``[0, cut)``, tail ``[cut, N)``; ``0 < cut < N``.
    path : str
        The session file, to name blocking messages as ``path:line``.
    user_turns_only : bool
        Only user-turn cuts (``DP_MODEL=seed``).

    Returns
    -------
    CutBlocker or None
        None when ``cut`` is feasible or outside ``(0, N)`` (a cut that drops or keeps nothing
        is blocked by no message). Else, checked in this order: the tail would open on a tool
        result (blocker: that message, and the call it answers); a tool result in the tail
        answers a call in the head (blocker: the first such result); the cut is not at a plain
        user turn with ``user_turns_only``.

    Examples
    --------
    >>> from dp_compact.conversation import ToolCall, ToolResult
    >>> msgs = [Message("user", "hi"), Message("assistant", tool_calls=(ToolCall("a", "ls"),), line=2),
    ...         Message("tool", tool_results=(ToolResult("a", "x"),), line=3), Message("assistant", "done")]
    >>> cut_blocker(msgs, 2, path="s.jsonl").reason
    'the tail would open on message 2 (s.jsonl:3), the result of tool call a made by message 1 (s.jsonl:2)'
    """
    n = len(messages)
    if not 0 < cut < n:
        return None
    arrays = message_arrays(messages)
    if feasible_cut_mask(arrays, user_turns_only=user_turns_only)[cut]:
        return None
    first = messages[cut]
    if arrays.roles[cut] == ROLE_TOOL:
        ids = [r.call_id for r in first.tool_results]
        origin = int(arrays.call_index[cut])
        if origin >= 0:
            made = {call.id for call in messages[origin].tool_calls}
            call_id = next((i for i in ids if i in made), ids[0] if ids else None)
            reason = (
                f"the tail would open on {_where(messages, cut, path)}, the result of tool call {call_id}"
                f" made by {_where(messages, origin, path)}"
            )
        else:
            call_id = ids[0] if ids else None
            answered = f" of tool call {call_id}" if call_id else ""
            reason = f"the tail would open on {_where(messages, cut, path)}, a tool result{answered}"
        return CutBlocker(cut, first.line, call_id, reason)
    in_head: dict[str, int] = {}
    for index in range(cut):
        for call in messages[index].tool_calls:
            in_head.setdefault(call.id, index)
    answering = np.flatnonzero((arrays.call_index >= 0) & (arrays.call_index < cut))
    for index in answering[answering >= cut].tolist():
        for result in messages[index].tool_results:
            if result.call_id in in_head:
                reason = (
                    f"{_where(messages, index, path)} holds the result of tool call {result.call_id} made by"
                    f" {_where(messages, in_head[result.call_id], path)}: the cut would separate them"
                )
                return CutBlocker(index, messages[index].line, result.call_id, reason)
    reason = f"{_where(messages, cut, path)} is not a user turn with plain text content, and DP_MODEL=seed cuts only there"
    return CutBlocker(cut, first.line, None, reason)


def nearest_feasible_keeps(
    messages: Sequence[Message], k: int, *, user_turns_only: bool = False
) -> tuple[int | None, int | None]:
    """The feasible keep counts nearest ``k``: ``(largest below k, smallest above k)``, None where there is none.

    >>> from dp_compact.conversation import ToolCall, ToolResult
    >>> msgs = [Message("user", "hi"), Message("assistant", tool_calls=(ToolCall("a", "ls"),)),
    ...         Message("tool", tool_results=(ToolResult("a", "x"),)), Message("assistant", "done")]
    >>> nearest_feasible_keeps(msgs, 2)  # keeps 1 (cut 3) and 3 (cut 1) are feasible
    (1, 3)
    """
    keeps = len(messages) - feasible_cuts(messages, user_turns_only=user_turns_only)
    below, above = keeps[keeps < k], keeps[keeps > k]
    return (int(below.max()) if below.size else None, int(above.min()) if above.size else None)


def keep_moved_note(
    messages: Sequence[Message], k: int, cut: int, *, path: str = "", user_turns_only: bool = False
) -> str | None:
    """One sentence for a ``--keep K`` that :func:`cut_for_keep` had to move: which keep was used
    and the message that blocks ``k`` (``path:line``, tool call id); None when ``k`` was met exactly.
    """
    n = len(messages)
    if n - cut == k:
        return None
    blocker = cut_blocker(messages, n - k, path=path, user_turns_only=user_turns_only)
    below, above = nearest_feasible_keeps(messages, k, user_turns_only=user_turns_only)
    why = f": {blocker.reason}" if blocker is not None else ""
    return (
        f"--keep {k} cannot be met exactly{why}; kept {n - cut} instead"
        f" (nearest feasible keep values: {below if below is not None else 'none'} below, {above} above)"
    )


def cut_for_keep(messages: Sequence[Message], k: int, *, user_turns_only: bool = False, path: str = "") -> int:
    """The nearest feasible cut that keeps at least ``k`` messages (the cut moves earlier).

    Parameters
    ----------
    messages : sequence of Message
        The live conversation, N messages.
    k : int
        Messages the user asks to keep (``--keep K``), ``k >= 1``.
    user_turns_only : bool
        Only user-turn cuts (``DP_MODEL=seed``).
    path : str
        The session file, named in the error with the blocking message's line.

    Returns
    -------
    int
        The largest feasible cut ``i`` with ``N - i >= k`` (:func:`keep_moved_note` says why
        when ``N - i > k``).

    Raises
    ------
    NoFeasibleCutError
        If ``k < 1``, or no feasible cut keeps at least ``k`` messages and drops one (e.g.
        ``k >= N``, or the whole conversation is one user turn and its tool results). The
        message names the blocking message (``path:line``, the tool call id) and the largest
        feasible keep below ``k``; the error's ``line``, ``call_id``, ``below`` and ``above``
        attributes hold them.

    Examples
    --------
    >>> from dp_compact.conversation import Message, ToolCall, ToolResult
    >>> msgs = [Message("user", "hi"), Message("assistant", tool_calls=(ToolCall("a", "ls"),)),
    ...         Message("tool", tool_results=(ToolResult("a", "x"),)), Message("assistant", "done")]
    >>> cut_for_keep(msgs, 2)  # keeping 2 would open on the tool result: move to its call
    1
    """
    n = len(messages)
    where = f"{path}: " if path else ""
    if k < 1:
        raise NoFeasibleCutError(f"{where}cannot keep {k} messages: keep at least 1", path=path or None)
    cuts = feasible_cuts(messages, user_turns_only=user_turns_only)
    allowed = cuts[cuts <= n - k]
    if allowed.size == 0:
        below, above = nearest_feasible_keeps(messages, k, user_turns_only=user_turns_only)
        blocker = cut_blocker(messages, n - k, path=path, user_turns_only=user_turns_only)
        why = blocker.reason if blocker is not None else f"a compaction drops at least one of the {n} messages"
        nearest = f"the nearest feasible keep is {below}" if below is not None else "no cut at all is feasible"
        raise NoFeasibleCutError(
            f"{where}no feasible cut keeps at least {k} of {n} messages and drops one: {why}; {nearest}",
            path=path or None, line=(blocker.line or None) if blocker is not None else None,
            call_id=blocker.call_id if blocker is not None else None, below=below, above=above,
        )
    return int(allowed[-1])


def split(messages: Sequence[Message], cut: int) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """Split at ``cut`` into ``(head, tail) = (messages[:cut], messages[cut:])``.

    Raises
    ------
    NoFeasibleCutError
        If ``cut`` is not a feasible cut of ``messages`` (DESIGN §1, :mod:`dp_compact.core.cuts`).
    """
    mask = feasible_cut_mask(message_arrays(messages))
    if not 0 <= cut < mask.shape[0] or not mask[cut]:
        raise NoFeasibleCutError(f"cut {cut} is not a feasible cut of {len(messages)} messages")
    return tuple(messages[:cut]), tuple(messages[cut:])


def split_system(system_messages: Sequence[Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``(prefix, markers)``: the session's raw system messages (``Session.system_messages``) that stay
    ahead of the summary, and the markers of earlier compactions among them, which go with the head.

    The prefix is every instruction (the system prompt, system or developer messages met later in
    the conversation), in order. A marker (``[compact_boundary] ...``,
    :func:`~dp_compact.text.summary_text.is_boundary_text`) states that the history before it was
    compacted; a reader ends the live conversation's previous part at each one
    (``Session.messages`` begins after the last), so every marker lies before the first live
    message, in the part a compaction summarizes. Written ahead of the new summary it would claim a
    compaction at a place the output no longer has: it is archived with the head instead (nothing
    is lost), and kept by whatever keeps every message (clearing, shrinking).

    >>> split_system([{"role": "system", "content": "You are an agent."},
    ...               {"role": "system", "content": "[compact_boundary] Conversation compacted"}])
    (({'role': 'system', 'content': 'You are an agent.'},), ({'role': 'system', 'content': '[compact_boundary] Conversation compacted'},))
    """
    prefix: list[Any] = []
    markers: list[Any] = []
    for message in system_messages:
        content = message.get("content") if isinstance(message, dict) else None
        (markers if is_boundary_text(text_and_images(content)[0]) else prefix).append(message)
    return tuple(prefix), tuple(markers)
