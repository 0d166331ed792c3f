"""Feasible cuts (DESIGN §1): the single source of the cut rules, shared by planner and pipeline.

A cut ``i`` splits the messages into the head ``[0, i)`` (summarized) and the tail ``[i, N)``
(kept verbatim, ``k = N - i`` messages). A cut is feasible when

1. the tail starts at a user message (:attr:`Message.is_user_message`: a user turn, injected
   context or a summary, each a valid opening of a request) or at an assistant message (which
   opens an API round), never at a tool-result message; with ``user_turns_only``
   (``DP_MODEL=seed``) only at a user message whose content is a plain string (the seed's rule);
2. every tool result in the tail has its tool call in the tail, so the results of parallel calls
   stay with their assistant message;
3. a tool call no message answers needs nothing: a pending call at the end (the tail always
   holds the last message), an interrupted one, or a server tool answered inside its own
   assistant message; the user turn after it is a cut like any other.

Signed thinking blocks: the tail is copied verbatim, so kept blocks stay byte-identical and in
order. Anthropic's extended-thinking guide ("Preserving thinking blocks") requires the thinking
blocks of the *last* assistant message of a tool loop to be passed back unmodified; earlier
assistant messages of the loop may be omitted. A cut between rounds of such a loop therefore
keeps every block the API checks, and long autonomous turns stay cuttable between rounds.

Tool results whose call is absent from the session (already orphaned in the source) do not
constrain the cut.
"""

from __future__ import annotations

from array import array as int_array
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dp_compact.conversation import Message, raw_value
from dp_compact.measure.memo import AppendMemo

__all__ = [
    "ROLE_ASSISTANT", "ROLE_TOOL", "ROLE_USER", "MessageArrays", "feasible_cut_mask", "message_ages", "message_arrays",
]

ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL = 0, 1, 2
_ROLE_CODES = {"user": ROLE_USER, "assistant": ROLE_ASSISTANT, "tool": ROLE_TOOL}


@dataclass(frozen=True, slots=True)
class MessageArrays:
    """Per-message arrays the cut rules and the cost model need; each shape (N,).

    ``roles``: ROLE_* codes (``ROLE_USER`` for every user message, turn or not). ``call_index``:
    for a tool-result message, the index of the earliest message holding one of the tool calls
    it answers (``-1`` otherwise or when the call is absent). ``turn_index``: number of user
    turns (:attr:`Message.is_user_turn`: typed prompts, not injected context or summaries) up to
    and including each message; ``round_index``: the same for assistant messages (API rounds).
    ``plain_user``: user turns whose content is a plain string, the seed's "real user input"
    (DESIGN §2, reference planner: a user line with no ``"content":[``); injected context and
    summaries are not user turns even with a string content (DESIGN §1: ``DP_MODEL=seed`` cuts
    only at user turns).
    """

    roles: npt.NDArray[np.int8]
    call_index: npt.NDArray[np.int64]
    turn_index: npt.NDArray[np.int64]
    round_index: npt.NDArray[np.int64]
    plain_user: npt.NDArray[np.bool_]

    def __post_init__(self) -> None:
        for array in (self.roles, self.call_index, self.turn_index, self.round_index, self.plain_user):
            array.setflags(write=False)

    @property
    def n(self) -> int:
        """Number of messages N."""
        return int(self.roles.shape[0])

    def slice(self, start: int, end: int) -> MessageArrays:
        """The arrays of messages ``[start, end)`` as if they were the whole conversation; O(end − start).

        ``call_index`` points into the slice (a call made before ``start`` no longer binds its
        result: ``-1``); ``turn_index`` and ``round_index`` count from ``start``. A prefix
        (``start == 0``) is a view of every array.

        >>> from dp_compact.conversation import ToolCall, ToolResult
        >>> a = message_arrays([Message("user", "u"), Message("assistant", tool_calls=(ToolCall("c", "f"),)),
        ...                     Message("tool", tool_results=(ToolResult("c", "r"),)), Message("user", "v")])
        >>> part = a.slice(2, 4)
        >>> part.call_index.tolist(), part.turn_index.tolist()
        ([-1, -1], [0, 1])
        """
        if not 0 <= start <= end <= self.n:
            raise ValueError(f"slice [{start}, {end}) is outside the {self.n} messages")
        calls = self.call_index[start:end]
        if start == 0:
            return MessageArrays(self.roles[:end], calls, self.turn_index[:end], self.round_index[:end], self.plain_user[:end])
        turns_before, rounds_before = self.turn_index[start - 1], self.round_index[start - 1]
        return MessageArrays(
            self.roles[start:end], np.where(calls >= start, calls - start, -1).astype(np.int64),
            self.turn_index[start:end] - turns_before, self.round_index[start:end] - rounds_before, self.plain_user[start:end],
        )


def message_arrays(messages: Sequence[Message]) -> MessageArrays:
    """Build :class:`MessageArrays` from messages in one pass (tool calls linked by id); O(N), and O(appended)
    for messages that extend a list seen recently (:class:`~dp_compact.measure.memo.AppendMemo`)."""
    return _ARRAYS(messages)


def _arrays_finish(state: _ArraysState) -> MessageArrays:
    """The :class:`MessageArrays` of a :func:`_arrays_extend` state."""
    roles, plain_user, turns, call_index, _ = state
    role_array = np.frombuffer(bytes(roles), dtype=np.int8).copy()
    turn_index = np.frombuffer(bytes(turns), dtype=np.bool_).cumsum(dtype=np.int64)
    round_index = (role_array == ROLE_ASSISTANT).cumsum(dtype=np.int64)
    user_plain = np.frombuffer(bytes(plain_user), dtype=np.bool_).copy()
    return MessageArrays(role_array, np.array(call_index, dtype=np.int64), turn_index, round_index, user_plain)


#: The pass of :func:`message_arrays`: role codes, plain user turns, user turns (bytes), call index, where each call id is made.
_ArraysState = tuple[bytearray, bytearray, bytearray, int_array, dict[str, int]]


def _arrays_extend(state: _ArraysState, messages: Sequence[Message]) -> _ArraysState:
    """The pass of :func:`message_arrays` over ``messages``, appended to ``state``."""
    roles, plain_user, turns, call_index, where_called = state
    for index, message in enumerate(messages, start=len(roles)):
        role = message.role
        code, turn, plain, first = ROLE_USER, 0, 0, -1
        if role == "user":  # Message.is_user_message; a user turn is its kind "prompt" (Message.is_user_turn)
            if message.kind == "prompt":
                turn, plain = 1, int(_has_string_content(message.raw))
        elif role == "assistant":
            code = ROLE_ASSISTANT
            for call in message.tool_calls:
                where_called.setdefault(call.id, index)
        else:
            code = ROLE_TOOL
        results = message.tool_results
        if results:  # the earliest call a result answers (a plain loop: one per tool message)
            for result in results:
                called = where_called.get(result.call_id, -1)
                if called >= 0 and (first < 0 or called < first):
                    first = called
        roles.append(code)
        turns.append(turn)
        plain_user.append(plain)
        call_index.append(first)
    return state


_ARRAYS: AppendMemo[_ArraysState, MessageArrays] = AppendMemo(
    lambda: (bytearray(), bytearray(), bytearray(), int_array("q"), {}), _arrays_extend,
    lambda s: (bytearray(s[0]), bytearray(s[1]), bytearray(s[2]), int_array("q", s[3]), dict(s[4])), _arrays_finish,
)


def _has_string_content(raw: object) -> bool:
    """True when the source message's ``content`` is a plain string (or unknown)."""
    raw = raw_value(raw)
    return not isinstance(raw, dict) or not isinstance(raw.get("content"), list)


def feasible_cut_mask(arrays: MessageArrays, *, user_turns_only: bool = False) -> npt.NDArray[np.bool_]:
    """Which cuts are feasible; shape (N + 1,), entry ``i`` for the cut keeping ``N - i`` messages.

    Cut 0 (keep everything) and cut N (keep nothing) are never feasible: a compaction drops
    at least one message and keeps at least one.

    Parameters
    ----------
    arrays : MessageArrays
    user_turns_only : bool
        Only cuts at user turns whose content is a plain string (the seed's rule, ``DP_MODEL=seed``).
    """
    n = arrays.n
    mask = np.zeros(n + 1, dtype=bool)
    if n < 2:
        return mask
    starts = arrays.plain_user if user_turns_only else arrays.roles != ROLE_TOOL
    mask[:n] = starts
    # A result at j answering a call at c forbids every cut in (c, j]: difference array + cumsum.
    results = (arrays.call_index >= 0).nonzero()[0]
    if results.size:  # +1 after each call answered, -1 after each result (both in [1, n]): n + 2 counts
        blocked = np.bincount(arrays.call_index[results] + 1, minlength=n + 2) - np.bincount(results + 1, minlength=n + 2)
        mask &= blocked[: n + 1].cumsum() == 0
    mask[0] = False
    mask[n] = False
    return mask


def message_ages(arrays: MessageArrays, unit: str, calls_per_turn: float) -> npt.NDArray[np.float64]:
    """Each message's position on the planner's age scale; shape (N,), age units.

    ``turns``: user turns so far (``turn_index``); ``rounds``: API rounds so far divided by
    ``calls_per_turn`` (L). The age of message j seen from message m is ``ages[m] - ages[j]``,
    as :func:`dp_compact.core.planner.plan` measures ``a_j`` (DESIGN §2) and the recall calibration
    bins it.

    Raises
    ------
    ValueError
        If ``unit`` is neither ``turns`` nor ``rounds`` or L is not positive.

    >>> arrays = message_arrays([Message("user", "u"), Message("assistant", "a"), Message("user", "v")])
    >>> message_ages(arrays, "turns", 1.0).tolist(), message_ages(arrays, "rounds", 2.0).tolist()
    ([1.0, 1.0, 2.0], [0.0, 0.5, 0.5])
    """
    if unit == "turns":
        return arrays.turn_index.astype(np.float64)
    if unit != "rounds" or calls_per_turn <= 0:
        raise ValueError(f"unit must be 'turns' or 'rounds' and L > 0, not {unit!r}, {calls_per_turn!r}")
    return arrays.round_index / float(calls_per_turn)
