"""Usage records and messages as columns: one array per field, each record read once.

The planner's measurements (V, the token ratio, the current context, avg, the hit share, the
growth per call; DESIGN §2, §7, §8) read a few fields of every usage record and message. Reading
them as arrays costs one pass over the records, and a live conversation, which grows by appends,
keeps that pass between calls (:class:`~dp_compact.measure.memo.AppendMemo`): a plan then reads
only the records appended since the last one.

Pure: the columns are the fields as the records hold them.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import numpy as np
import numpy.typing as npt

from dp_compact.conversation import Message, Usage
from dp_compact.measure.memo import AppendMemo

__all__ = ["MessageColumns", "UsageColumns", "message_columns", "usage_columns"]

#: Largest field kept in a column (2**40 tokens or lines): the sums of up to 2**22 records stay in int64.
_LARGEST = 1 << 40
#: The integer fields of :class:`~dp_compact.conversation.Usage` kept as columns, in this order.
_USAGE_INTS = ("line", "prompt_tokens", "cache_read_tokens", "cache_write_tokens", "cache_write_1h_tokens", "output_tokens")


@dataclass(frozen=True, slots=True, eq=False)
class UsageColumns:
    """The fields of U usage records (:class:`~dp_compact.conversation.Usage`), in order; arrays read-only.

    Attributes
    ----------
    line, prompt_tokens, cache_read_tokens, cache_write_tokens, cache_write_1h_tokens, output_tokens : ndarray[int64], shape (U,)
        Source line (0 unknown) and tokens, as each record holds them.
    split_estimated : ndarray[bool], shape (U,)
        ``Usage.cache_split_estimated``.
    convention : ndarray[int64], shape (U,)
        Index of each record's ``Usage.convention`` in ``conventions``.
    conventions : tuple[str, ...]
        The conventions met, in order of first use.
    """

    line: npt.NDArray[np.int64]
    prompt_tokens: npt.NDArray[np.int64]
    cache_read_tokens: npt.NDArray[np.int64]
    cache_write_tokens: npt.NDArray[np.int64]
    cache_write_1h_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]
    split_estimated: npt.NDArray[np.bool_]
    convention: npt.NDArray[np.int64]
    conventions: tuple[str, ...]


@dataclass(frozen=True, slots=True, eq=False)
class MessageColumns:
    """Two fields of N messages, in order; arrays read-only.

    Attributes
    ----------
    assistant : ndarray[bool], shape (N,)
        ``Message.role == "assistant"``.
    line : ndarray[int64], shape (N,)
        ``Message.line``, the 1-based source line (0 unknown).
    """

    assistant: npt.NDArray[np.bool_]
    line: npt.NDArray[np.int64]


#: The pass of :func:`usage_columns`: one int column per field of ``_USAGE_INTS``, the estimated splits,
#: the convention codes, the conventions met (by name), and whether every field read was an int.
_UsageState = tuple[list[array], bytearray, array, dict[str, int], list[bool]]


def _usage_extend(state: _UsageState, usage: Sequence[Usage]) -> _UsageState:
    """The columns of ``usage``, appended to ``state``."""
    ints, estimated, codes, names, plain = state
    if not plain[0]:
        return state
    try:
        for name, column in zip(_USAGE_INTS, ints, strict=True):
            column.extend(map(attrgetter(name), usage))  # TypeError for a float or None, OverflowError beyond int64
    except (TypeError, OverflowError):
        plain[0] = False  # the callers read the records themselves
        return state
    estimated.extend(map(bool, map(attrgetter("cache_split_estimated"), usage)))
    codes.extend(names.setdefault(convention, len(names)) for convention in map(attrgetter("convention"), usage))
    return state


def _usage_copy(state: _UsageState) -> _UsageState:
    """An independent copy of a :func:`_usage_extend` state."""
    ints, estimated, codes, names, plain = state
    return [array("q", c) for c in ints], bytearray(estimated), array("q", codes), dict(names), list(plain)


def _usage_finish(state: _UsageState) -> UsageColumns | None:
    """The :class:`UsageColumns` of a :func:`_usage_extend` state; None when some field was not an int or is too large."""
    ints, estimated, codes, names, plain = state
    if not plain[0]:
        return None
    # every int column holds one value per record: one read-only (fields, U) block, whose rows are the columns
    block = _frozen(b"".join(map(bytes, ints)), np.int64).reshape(len(ints), len(estimated))
    magnitudes = np.abs(block).ravel()  # int64: its largest entry by argmax, as max gives it
    if block.size and int(magnitudes[magnitudes.argmax()]) >= _LARGEST:  # sums could leave int64
        return None
    return UsageColumns(*block, split_estimated=_frozen(estimated, np.bool_), convention=_frozen(codes, np.int64),
                        conventions=tuple(names))


_USAGE: AppendMemo[_UsageState, UsageColumns | None] = AppendMemo(
    lambda: ([array("q") for _ in _USAGE_INTS], bytearray(), array("q"), {}, [True]), _usage_extend, _usage_copy, _usage_finish)


def _frozen(values: array | bytearray, dtype: type) -> npt.NDArray[np.generic]:
    """``values`` as a read-only array of ``dtype`` (a copy)."""
    out = np.frombuffer(bytes(values), dtype=dtype) if len(values) else np.zeros(0, dtype)
    out.setflags(write=False)
    return out


def usage_columns(usage: Sequence[Usage]) -> UsageColumns | None:
    """The columns of ``usage`` (:class:`UsageColumns`); None when a field of some record is not an int
    below 2**40 (the callers then read the records one by one). O(U), and O(appended) for records that extend
    a sequence seen recently."""
    return _USAGE(usage)


#: The pass of :func:`message_columns`: assistant flags, lines, and whether every line was an int.
_MessageState = tuple[bytearray, array, list[bool]]


def _message_extend(state: _MessageState, messages: Sequence[Message]) -> _MessageState:
    """The columns of ``messages``, appended to ``state``."""
    assistant, lines, plain = state
    if not plain[0]:
        return state
    try:
        lines.extend(map(attrgetter("line"), messages))
    except (TypeError, OverflowError):
        plain[0] = False
        return state
    assistant.extend(role == "assistant" for role in map(attrgetter("role"), messages))
    return state


def _message_finish(state: _MessageState) -> MessageColumns | None:
    """The :class:`MessageColumns` of a :func:`_message_extend` state; None when some line was not an int or is too large."""
    assistant, lines, plain = state
    if not plain[0]:
        return None
    line = _frozen(lines, np.int64)
    magnitudes = np.abs(line)  # int64: its largest entry by argmax, as max gives it
    return MessageColumns(_frozen(assistant, np.bool_), line) if not line.size or int(magnitudes[magnitudes.argmax()]) < _LARGEST else None


_MESSAGES: AppendMemo[_MessageState, MessageColumns | None] = AppendMemo(
    lambda: (bytearray(), array("q"), [True]), _message_extend, lambda s: (bytearray(s[0]), array("q", s[1]), list(s[2])),
    _message_finish)


def message_columns(messages: Sequence[Message]) -> MessageColumns | None:
    """The columns of ``messages`` (:class:`MessageColumns`); None when some ``Message.line`` is not an int
    below 2**40. O(N), and O(appended) for messages that extend a sequence seen recently."""
    return _MESSAGES(messages)
