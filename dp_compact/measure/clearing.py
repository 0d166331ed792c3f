"""What clearing old tool results costs and saves, at every depth at once (DESIGN §9).

*Clearing at depth d* replaces the content of every clearable tool result in messages
``[0, d)`` by a short placeholder naming where the original is archived
(:func:`placeholder_text`); user messages, assistant text, tool calls and thinking stay, and
no message is removed. ``d`` runs from 0 (nothing cleared) to N (every clearable result
cleared), so every array of :class:`ClearingFacts` has shape ``(N + 1,)``, indexed by d.

The facts are the ones a price needs (DESIGN §6, §8): tokens removed and added, the first
message that changes (the prompt cache stays valid before it and is rewritten from it), the
tokens before that message (read from cache) and from it on (written), and which messages
change. Tokens are in the scale of the ``message_tokens`` given (cl100k tokens of
:func:`~dp_compact.measure.tokens.count_message_tokens`; multiply by the session's token
ratio for provider tokens). A message's tokens after clearing are taken as its tokens less
its cleared results' tokens plus their placeholders' tokens (message text is the join of its
parts, so this is exact to a token or two per message).

Pure: numpy over arrays. :func:`tool_result_layout` reads :class:`~dp_compact.conversation.Message`
fields only; :func:`clearing_facts_for` also counts the results' and placeholders' tokens.
"""

from __future__ import annotations

from array import array as int_array
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import partial

import numpy as np
import numpy.typing as npt

from dp_compact.conversation import Message
from dp_compact.measure.memo import AppendMemo

__all__ = [
    "CLEARED_PREFIX",
    "CLEAR_KEEP_TOOL_RESULTS",
    "CLEAR_MIN_CHARS",
    "PLACEHOLDER_ARCHIVE_ID",
    "PLACEHOLDER_TOKENS",
    "ClearingFacts",
    "ToolResultLayout",
    "clearing_facts",
    "clearing_facts_for",
    "clearable_saved_tokens",
    "depth_keeping_results",
    "is_cleared_text",
    "placeholder_text",
    "tool_result_layout",
]

#: A tool result shorter than this many characters is never cleared. Its placeholder is about 150
#: characters (35-45 tokens), so below 800 a clearing saves little while the result (an exit
#: status, "file written", one error line) is the outcome the agent most needs to see what it
#: did; 800 is the project's existing line between a short and a long result (seeds/000 §4.3
#: ``SHRINK_THRESHOLD``). In the live part of the eight shared Claude Code and Codex transcripts that
#: have tool results, results of 800 characters or more are 16-95 % of the results and hold 52-99.9 %
#: (median 91 %) of their characters (docs/pipeline.md, "Clearing").
CLEAR_MIN_CHARS = 800
#: Tool results kept uncleared by default, the most recent ones: Anthropic context management's
#: default for ``clear_tool_uses_20250919`` (``keep``: 3 tool uses; Anthropic docs, "Context editing").
CLEAR_KEEP_TOOL_RESULTS = 3
#: Opens every placeholder; a result that opens so is cleared already and never cleared again.
CLEARED_PREFIX = "[cleared by dp-compact:"
#: An archive id of the shape the archive writes (``YYYYMMDDTHHMMSSffffffZ-<8 hex>``), for sizing
#: placeholders before the archive is written: digits go three to a cl100k token whatever they are,
#: and ``00ff00ff`` takes the tokens 8 random hex digits take most often (32 in a placeholder, as
#: in 37 % of 3,000 random ids, 30-36 in all; ``00000000`` takes 31).
PLACEHOLDER_ARCHIVE_ID = "00000000T000000000000Z-00ff00ff"
#: cl100k tokens of one placeholder as the planner prices it without writing it: 41 (archive
#: ``session``, 900 characters, message 3), 47 (a session named like ``cc_task43_develop``, 123,456
#: characters, message 612) and 62 (a UUID session name) tokens measured with :func:`placeholder_text`.
PLACEHOLDER_TOKENS = 50


def placeholder_text(chars: int, ref: str, message_index: int) -> str:
    """The text that replaces a cleared tool result.

    Parameters
    ----------
    chars : int
        Characters of the original result.
    ref : str
        The archive reference ``archive://<session>/<id>`` holding the original message.
    message_index : int
        The message's 0-based index in the live conversation; ``#msg-<index>`` names it in the archive.

    >>> placeholder_text(12345, "archive://s/20261206T000000000000Z-0a1b2c3d", 17)
    '[cleared by dp-compact: 12,345 characters; restore with: dp-compact restore archive://s/20261206T000000000000Z-0a1b2c3d#msg-17]'
    """
    return f"{CLEARED_PREFIX} {chars:,} characters; restore with: dp-compact restore {ref}#msg-{message_index}]"


def is_cleared_text(text: str) -> bool:
    """True when ``text`` is a placeholder of :func:`placeholder_text` (a result cleared already)."""
    return text.startswith(CLEARED_PREFIX)


def _frozen(*arrays: np.ndarray) -> None:
    """Make arrays read-only (a frozen dataclass does not freeze their contents)."""
    for array in arrays:
        array.setflags(write=False)


@dataclass(frozen=True, slots=True)
class ToolResultLayout:
    """Where the tool results of a conversation are, one entry per result in message order.

    ``message_index`` (int64, shape (n_results,), non-decreasing): the message holding each
    result. ``chars`` (int64): characters of its text. ``clearable`` (bool): at least
    :data:`CLEAR_MIN_CHARS` characters and not a placeholder already. ``n_messages``: N.
    """

    message_index: npt.NDArray[np.int64]
    chars: npt.NDArray[np.int64]
    clearable: npt.NDArray[np.bool_]
    n_messages: int

    def __post_init__(self) -> None:
        _frozen(self.message_index, self.chars, self.clearable)


def tool_result_layout(messages: Sequence[Message], *, min_chars: int = CLEAR_MIN_CHARS) -> ToolResultLayout:
    """The :class:`ToolResultLayout` of ``messages`` (results of at least ``min_chars`` characters clearable).

    >>> from dp_compact.conversation import ToolResult
    >>> layout = tool_result_layout([Message("user", "go"), Message("tool", tool_results=(ToolResult("a", "x" * 900),))])
    >>> layout.message_index.tolist(), layout.clearable.tolist()
    ([1], [True])
    """
    owners = [(i, r.text) for i, m in enumerate(messages) for r in m.tool_results]
    index = np.fromiter((i for i, _ in owners), dtype=np.int64, count=len(owners))
    chars = np.fromiter((len(t) for _, t in owners), dtype=np.int64, count=len(owners))
    clearable = (chars >= min_chars) & ~np.fromiter((is_cleared_text(t) for _, t in owners), dtype=bool, count=len(owners))
    return ToolResultLayout(index, chars, clearable, len(messages))


@dataclass(frozen=True, slots=True)
class ClearingFacts:
    """The facts of "clear every clearable tool result before message d", for every d in 0..N.

    Every array has shape (N + 1,) and is indexed by the depth d; tokens in the scale of the
    ``message_tokens`` given.

    Attributes
    ----------
    depth : int64
        d itself, ``arange(N + 1)``: results in messages ``[0, d)`` are cleared.
    cleared_results : int64
        Tool results cleared.
    changed_messages : int64
        Messages whose content changes (those holding a cleared result).
    removed_tokens : int64
        Tokens of the cleared results' contents.
    placeholder_tokens : int64
        Tokens the placeholders add.
    saved_tokens : int64
        ``removed_tokens - placeholder_tokens``: how much smaller the context gets.
    first_changed_message : int64
        Index of the first changed message (the message of the first cleared result); N when
        nothing is cleared. The prompt cache is rewritten only from here.
    unchanged_prefix_tokens : int64
        Tokens of messages ``[0, first_changed_message)``: still a cache hit after clearing.
    rewritten_tokens : int64
        Tokens from the first changed message to the end, after clearing: written to the cache
        by the next request (0 when nothing is cleared).
    tokens_after : int64
        Tokens of all messages after clearing, ``T - saved_tokens``.
    changed_message_indices : int64, shape (n_changed,)
        Sorted indices of every message that clearing at depth N changes; at depth d the changed
        messages are ``changed_message_indices[:changed_messages[d]]``.
    """

    depth: npt.NDArray[np.int64]
    cleared_results: npt.NDArray[np.int64]
    changed_messages: npt.NDArray[np.int64]
    removed_tokens: npt.NDArray[np.int64]
    placeholder_tokens: npt.NDArray[np.int64]
    saved_tokens: npt.NDArray[np.int64]
    first_changed_message: npt.NDArray[np.int64]
    unchanged_prefix_tokens: npt.NDArray[np.int64]
    rewritten_tokens: npt.NDArray[np.int64]
    tokens_after: npt.NDArray[np.int64]
    changed_message_indices: npt.NDArray[np.int64]

    def __post_init__(self) -> None:
        _frozen(*(getattr(self, f.name) for f in fields(self)))

    def at(self, depth: int) -> dict[str, int]:
        """The scalar facts at one depth, JSON-ready (``changed_message_indices`` left out)."""
        return {f.name: int(getattr(self, f.name)[depth]) for f in fields(self) if f.name != "changed_message_indices"}


def _per_depth(owner: npt.NDArray[np.int64], values: npt.NDArray[np.int64], n_messages: int) -> npt.NDArray[np.int64]:
    """Sum of ``values`` over results whose message is before d, for every d: shape (N + 1,)."""
    per_message = np.bincount(owner, weights=values, minlength=n_messages).astype(np.int64) if owner.size else np.zeros(n_messages, np.int64)
    return np.concatenate(([0], np.cumsum(per_message)))


def clearing_facts(
    message_tokens: npt.ArrayLike,
    result_message: npt.ArrayLike,
    result_tokens: npt.ArrayLike,
    placeholder_tokens: npt.ArrayLike,
    clearable: npt.ArrayLike,
) -> ClearingFacts:
    """:class:`ClearingFacts` for every depth d = 0..N at once (numpy, no loop over d).

    Parameters
    ----------
    message_tokens : array of int, shape (N,)
        Tokens per message.
    result_message : array of int, shape (n_results,)
        The message index of each tool result, in ``[0, N)``.
    result_tokens : array of int, shape (n_results,)
        Tokens of each result's content.
    placeholder_tokens : array of int, shape (n_results,) or scalar
        Tokens of each result's placeholder.
    clearable : array of bool, shape (n_results,)
        Whether each result is cleared when it lies before the depth (:class:`ToolResultLayout`).

    Returns
    -------
    ClearingFacts
        Arrays of shape (N + 1,), in the tokens of ``message_tokens``.

    Raises
    ------
    ValueError
        If the result arrays differ in shape, an index is outside ``[0, N)`` or a count is negative.

    Examples
    --------
    >>> f = clearing_facts([10, 500, 20, 300], [1, 3], [480, 290], 40, [True, True])
    >>> f.saved_tokens.tolist(), f.first_changed_message.tolist(), f.rewritten_tokens.tolist()
    ([0, 0, 440, 440, 690], [4, 4, 1, 1, 1], [0, 0, 380, 380, 130])
    """
    tokens = np.asarray(message_tokens, dtype=np.int64).reshape(-1)
    owner = np.asarray(result_message, dtype=np.int64).reshape(-1)
    removed = np.asarray(result_tokens, dtype=np.int64).reshape(-1)
    added = np.broadcast_to(np.asarray(placeholder_tokens, dtype=np.int64), owner.shape)
    mask = np.broadcast_to(np.asarray(clearable, dtype=bool), owner.shape)
    n = tokens.size
    if removed.shape != owner.shape:
        raise ValueError(f"result_tokens has shape {removed.shape}, result_message {owner.shape}")
    if owner.size and (owner.min() < 0 or owner.max() >= n):
        raise ValueError(f"a result's message index is outside [0, {n})")
    if (tokens < 0).any() or (removed < 0).any() or (added < 0).any():
        raise ValueError("token counts must not be negative")
    owner, removed, added = owner[mask], removed[mask], added[mask]
    cleared = _per_depth(owner, np.ones(owner.size, np.int64), n)
    changed_indices = np.unique(owner)
    changed = np.searchsorted(changed_indices, np.arange(n + 1), side="left").astype(np.int64)
    removed_d, added_d = _per_depth(owner, removed, n), _per_depth(owner, added, n)
    saved = removed_d - added_d
    first = int(changed_indices[0]) if changed_indices.size else n
    depth = np.arange(n + 1, dtype=np.int64)
    first_changed = np.where(depth > first, first, n).astype(np.int64)
    cumulative = np.concatenate(([0], np.cumsum(tokens)))
    prefix = cumulative[first_changed]
    after = cumulative[-1] - saved
    return ClearingFacts(depth, cleared, changed, removed_d, added_d, saved, first_changed, prefix, after - prefix, after, changed_indices)


def depth_keeping_results(layout: ToolResultLayout, keep_results: int = CLEAR_KEEP_TOOL_RESULTS) -> int:
    """The depth that leaves the last ``keep_results`` clearable tool results uncleared.

    The message of the ``keep_results``-th clearable result from the end (0 when there are no
    more than ``keep_results``), so that those results and everything after them stay.

    >>> from dp_compact.conversation import ToolResult
    >>> ms = [Message("tool", tool_results=(ToolResult(str(i), "x" * 900),)) for i in range(5)]
    >>> depth_keeping_results(tool_result_layout(ms), 3)
    2
    """
    owners = layout.message_index[layout.clearable]
    if keep_results <= 0:
        return layout.n_messages
    return int(owners[-keep_results]) if owners.size > keep_results else 0


def clearing_facts_for(
    messages: Sequence[Message],
    message_tokens: npt.ArrayLike,
    *,
    ref: str = f"archive://session/{PLACEHOLDER_ARCHIVE_ID}",
    min_chars: int = CLEAR_MIN_CHARS,
) -> ClearingFacts:
    """:func:`clearing_facts` of ``messages``: their layout, their results' and placeholders' cl100k tokens.

    Parameters
    ----------
    messages : sequence of Message
    message_tokens : array of int, shape (N,)
        Tokens per message (the planner's count, :func:`~dp_compact.measure.tokens.count_message_tokens`).
    ref : str
        The archive reference the placeholders name (its length sizes them); default one of the
        archive's shape.
    min_chars : int
        Smallest result cleared (:data:`CLEAR_MIN_CHARS`).
    """
    from dp_compact.measure.tokens import count_text_tokens

    layout = tool_result_layout(messages, min_chars=min_chars)
    texts = [r.text for m in messages for r in m.tool_results]
    holders = layout.message_index.tolist()
    placeholders = [placeholder_text(c, ref, i) for c, i in zip(layout.chars.tolist(), holders, strict=True)]
    result_tokens = count_text_tokens(texts) if texts else np.zeros(0, np.int64)
    added = count_text_tokens(placeholders) if placeholders else np.zeros(0, np.int64)
    return clearing_facts(message_tokens, layout.message_index, result_tokens, added, layout.clearable)


def clearable_saved_tokens(
    messages: Sequence[Message], message_tokens: npt.ArrayLike, *, min_chars: int = CLEAR_MIN_CHARS
) -> npt.NDArray[np.int64]:
    """Tokens clearing each message's clearable tool results would take out, without tokenizing again.

    A message's share of its own tokens is its clearable results' share of its characters (text,
    thinking, tool calls and results), less :data:`PLACEHOLDER_TOKENS` per cleared result, at
    least 0; the look-ahead planner prices clearing with it (DESIGN §9). Exact counts:
    :func:`clearing_facts_for` (it tokenizes every result again).

    Parameters
    ----------
    messages : sequence of Message, length N
    message_tokens : array of int, shape (N,)
        Tokens per message (any scale: the result is in the same one).
    min_chars : int
        Smallest result cleared (:data:`CLEAR_MIN_CHARS`).

    Returns
    -------
    ndarray[int64], shape (N,)
        0 for a message without a clearable result.

    Raises
    ------
    ValueError
        If ``message_tokens`` does not have one entry per message.

    >>> from dp_compact.conversation import ToolResult
    >>> clearable_saved_tokens([Message("user", "go"), Message("tool", tool_results=(ToolResult("a", "x" * 900),))], [1, 300]).tolist()
    [0, 250]
    """
    tokens = np.asarray(message_tokens, dtype=np.int64).reshape(-1)
    if tokens.size != len(messages):
        raise ValueError(f"message_tokens has {tokens.size} entries for {len(messages)} messages")
    memo = _CLEARABLE.get(min_chars)
    if memo is None:
        memo = _CLEARABLE.setdefault(min_chars, AppendMemo(lambda: (int_array("q"), int_array("q"), int_array("q")),
                                                           partial(_clearable_extend, min_chars=min_chars), _clearable_copy,
                                                           _clearable_finish))
    counts, cleared, chars = memo(messages)
    saved = np.zeros(tokens.size, np.int64)
    held = counts.nonzero()[0]  # counts: int64, shape (N,)
    if held.size == 0:
        return saved
    held_tokens, held_chars, whole = tokens[held], cleared[held], np.maximum(chars[held], 1)
    products = held_tokens.astype(np.float64) * held_chars  # compared only: its entry argmax finds, as max (NaN too)
    if np.count_nonzero(held_tokens < 0) or products[products.argmax()] >= 2.0 ** 52 or whole[whole.argmax()] >= 2 ** 52:
        removed = np.array([round(a * c / w) for a, c, w in zip(held_tokens.tolist(), held_chars.tolist(), whole.tolist(), strict=True)],
                           dtype=np.int64)
    else:  # both exact in float64: one correctly rounded division, rounded half to even, as Python's int / int and round()
        removed = np.rint((held_tokens * held_chars).astype(np.float64) / whole.astype(np.float64)).astype(np.int64)
    saved[held] = np.maximum(removed - PLACEHOLDER_TOKENS * counts[held], 0)
    return saved


#: Per message, as :func:`clearable_saved_tokens` reads it: clearable results, their characters, the message's characters.
_ClearableState = tuple[int_array, int_array, int_array]


def _clearable_extend(state: _ClearableState, messages: Sequence[Message], *, min_chars: int) -> _ClearableState:
    """The per-message facts of :func:`clearable_saved_tokens` for ``messages``, appended to ``state``."""
    counts, cleared_chars, message_chars = state
    for message in messages:
        cleared = [len(r.text) for r in message.tool_results if len(r.text) >= min_chars and not is_cleared_text(r.text)] \
            if message.tool_results else []
        chars = 0
        if cleared:
            chars = (len(message.text) + len(message.thinking) + sum(len(r.text) for r in message.tool_results)
                     + sum(len(c.name) + len(c.arguments) for c in message.tool_calls))
        counts.append(len(cleared))
        cleared_chars.append(sum(cleared))
        message_chars.append(chars)
    return state


def _clearable_copy(state: _ClearableState) -> _ClearableState:
    """An independent copy of a :func:`_clearable_extend` state."""
    return int_array("q", state[0]), int_array("q", state[1]), int_array("q", state[2])


def _clearable_finish(state: _ClearableState) -> tuple[npt.NDArray[np.int64], ...]:
    """The columns of a :func:`_clearable_extend` state as read-only int64 arrays."""
    out = tuple(np.frombuffer(bytes(a), dtype=np.int64) if len(a) else np.zeros(0, np.int64) for a in state)
    for column in out:
        column.setflags(write=False)
    return out


#: :func:`clearable_saved_tokens`' per-message facts by ``min_chars``, resumed for appended messages.
_CLEARABLE: dict[int, AppendMemo[_ClearableState, tuple[npt.NDArray[np.int64], ...]]] = {}
