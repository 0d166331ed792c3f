"""Passes over sequences that grow by appends, resumed where the last one stopped (:class:`AppendMemo`).

An adapter plans before every model call (DESIGN §7), and each plan reads the whole conversation:
its messages, usage records and call times. What a left-to-right pass derives from the items it has
seen does not change when items are appended, so :class:`AppendMemo` keeps the state of such a pass
for the last few sequences it was given: a sequence that starts with the very objects of a kept one
(the same messages, records or times, followed by new ones) resumes the pass after them; any other
sequence starts it again. Either way the state is the one a pass over the whole sequence gives, as
the items are immutable (frozen :class:`~dp_compact.conversation.Message` and
:class:`~dp_compact.conversation.Usage`, floats, strings).

Finding the kept sequence a new one starts with compares their items one by one (O(N) at C
speed). A tuple made by :func:`extended` (a kept tuple with items appended, as a live
conversation's session is made from the last one) names the tuple it extends, and a memo resumes
the pass kept for that tuple without comparing.

Memoization only: the functions using it are as pure as before (same inputs, same values).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from dp_compact._fast import keep_newest

__all__ = ["AppendMemo", "EXTENSIONS_KEPT", "MEMO_SEQUENCES", "extended", "starts_with"]

#: Sequences an :class:`AppendMemo` keeps (conversations planned in turn, and the shorter list a
#: framework may send between two appends).
MEMO_SEQUENCES = 8
#: Tuples made by :func:`extended` that are remembered (the latest), each with the tuple it extends.
EXTENSIONS_KEPT = 64

#: The tuples made by :func:`extended`, by ``id``: ``(tuple, the tuple it extends)`` (both held, so an id names one tuple).
_EXTENSIONS: dict[int, tuple[tuple[Any, ...], tuple[Any, ...]]] = {}



def extended(items: tuple[Any, ...], added: Sequence[Any]) -> tuple[Any, ...]:
    """``items + tuple(added)``, remembered as an extension of ``items``: an :class:`AppendMemo` given it
    resumes the pass it keeps for ``items`` without comparing their items (the last
    :data:`EXTENSIONS_KEPT` such tuples are remembered; an older one is compared as any sequence is).

    >>> base = (1, 2)
    >>> extended(base, [3])
    (1, 2, 3)
    """
    out = items + tuple(added)
    if out is not items:
        _EXTENSIONS[id(out)] = (out, items)
        if len(_EXTENSIONS) > EXTENSIONS_KEPT:
            keep_newest(_EXTENSIONS, EXTENSIONS_KEPT)
    return out


def starts_with(items: Sequence[Any], base: Sequence[Any]) -> bool:
    """True when ``items`` starts with the very objects of ``base`` (``is``, one by one): at once for
    ``base`` itself and for a tuple :func:`extended` made from it, else by comparing them (O(len(base))).

    >>> a = (object(),)
    >>> starts_with(extended(a, [1]), a), starts_with(a, extended(a, [1]))
    (True, False)
    """
    if items is base:
        return True
    made_from = _EXTENSIONS.get(id(items))
    if made_from is not None and made_from[0] is items and made_from[1] is base:
        return True
    return len(base) <= len(items) and all(map(operator.is_, base, items))


S = TypeVar("S")
R = TypeVar("R")


class AppendMemo(Generic[S, R]):
    """The state of a left-to-right pass over a sequence, resumed for sequences that extend a kept one.

    Parameters
    ----------
    start : callable
        ``start()``: the state before any item.
    extend : callable
        ``extend(state, items)``: the state after ``items`` too; may change ``state`` in place and
        return it.
    copy : callable
        ``copy(state)``: an independent copy (a kept state is never changed).
    finish : callable
        ``finish(state)``: the value :meth:`__call__` returns for a state (made once per state kept).
    size : int
        Sequences kept, most recent first (:data:`MEMO_SEQUENCES`).

    Notes
    -----
    The value returned is shared with the memo: callers read it, never change it. Items are
    compared by identity (``is``), so equal but distinct objects start the pass again; a tuple
    made by :func:`extended` from a kept one is not compared (its first items are that tuple's).
    """

    def __init__(self, start: Callable[[], S], extend: Callable[[S, Sequence[Any]], S], copy: Callable[[S], S],
                 finish: Callable[[S], R], size: int = MEMO_SEQUENCES) -> None:
        self._start, self._extend, self._copy, self._finish, self._size = start, extend, copy, finish, size
        self._kept: list[tuple[tuple[Any, ...], S, list[Any]]] = []

    def __call__(self, items: Sequence[Any]) -> R:
        """``finish`` of the state after every item of ``items`` (a pass resumed after the longest kept
        prefix of the same objects)."""
        kept = self._kept
        if kept and kept[0][0] is items and kept[0][2]:  # the sequence asked for last (a plan reads it several times)
            return kept[0][2][0]
        entry = self._entry(items)
        done = entry[2]
        if not done:
            done.append(self._finish(entry[1]))
        return done[0]

    def _entry(self, items: Sequence[Any]) -> tuple[tuple[Any, ...], S, list[Any]]:
        """The kept entry of ``items``, made (and kept) when there is none."""
        kept = self._kept  # read once: another thread may replace the list
        for entry in kept:
            if entry[0] is items:  # the very sequence (one session read by several measurements)
                return entry
        items = tuple(items)
        made_from = _EXTENSIONS.get(id(items))
        if made_from is not None and made_from[0] is items:  # made by extended(): resume the pass kept for the tuple it extends
            base = made_from[1]
            for entry in kept:
                if entry[0] is base:
                    made = (items, self._extend(self._copy(entry[1]), items[len(base):]), [])
                    self._kept = [made, *kept][: self._size]
                    return made
        n = len(items)
        best: tuple[tuple[Any, ...], S, list[Any]] | None = None
        for entry in kept:
            seen = entry[0]
            m = len(seen)
            if m > n or (best is not None and m <= len(best[0])):
                continue
            if m and seen[0] is not items[0]:
                continue
            if all(map(operator.is_, seen, items)):
                if m == n:  # the same objects in another sequence: kept under this one too
                    made = (items, entry[1], entry[2])
                    self._kept = [made, *kept][: self._size]
                    return made
                best = entry
        if best is None:
            state = self._extend(self._start(), items)
        else:
            state = self._extend(self._copy(best[1]), items[len(best[0]):])
        made = (items, state, [])
        self._kept = [made, *kept][: self._size]
        return made

    def clear(self) -> None:
        """Forget every kept sequence."""
        self._kept = []
