"""Which earlier messages a conversation uses later: the judge's rule of DESIGN §6 "Lost information".

A message ``m`` is *used later* by an assistant message ``at > m`` when

(a) ``at`` repeats at least :data:`MIN_REUSE_CHARS` characters of ``m``'s text verbatim
    (a window of text found in more than :data:`BOILERPLATE_SHARE` of all messages is boilerplate
    and ignored); the use goes to the *latest* message before ``at`` holding that text, the
    copy whose loss matters; or
(b) ``at`` edits or writes a file whose latest content in the context was a read result in
    ``m`` (``Read``, ``read_file``, ``view``, ``cat``/``sed -n``/``nl`` in a shell, ...), with no
    fresh read and no other edit or write of that path in between.

(c) *strict detector only* (``detector="strict"``, DESIGN §9 "Loss priced honestly"): ``at``
    names a file path, a code identifier or runs a shell command (:func:`message_terms`) whose
    latest earlier mention was in ``m`` (terms held by more than :data:`BOILERPLATE_SHARE` of
    the messages are ignored, as in (a)).

Only assistant messages use: the model reproduces what it needed in its text and its tool-call
arguments (the JSON string values, so an ``Edit``'s ``old_string`` compares with the file as a
read result showed it). Every message is a source: its text, its tool results and, for assistant
messages, its tool-call arguments.

The verbatim rule hashes every window of ``min_chars`` characters (code points, not bytes) with a
polynomial hash in uint64 wrap-around arithmetic, built by doubling window lengths (1, 2, 4, ...)
so that no Python loop runs per character, and finds "the latest message before ``at`` holding
this window" with one sort and one ``np.searchsorted``. Windows never span two texts (a text is
a message's text, one tool result, or one tool call's arguments). A 64-bit hash collision could
report a use that is not one; for natural text its chance is negligible (about n² / 2⁶⁵ for n
windows). Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.conversation import Message
from dp_compact.measure.file_operations import argument_text, file_operations, first_string, operations, parsed_arguments
from dp_compact.text.patterns import HAS_EXTENSION, IDENTIFIER, PATH, SHELL_COMMAND_KEYS, WORKDIR_KEYS

__all__ = [
    "BOILERPLATE_SHARE",
    "DETECTORS",
    "KIND_FILE_EDIT",
    "KIND_TERM",
    "KIND_VERBATIM",
    "MIN_REUSE_CHARS",
    "MIN_TERM_CHARS",
    "Uses",
    "file_operations",
    "find_uses",
    "message_terms",
]

#: DESIGN §6 (a): a later message repeats at least this many characters verbatim.
MIN_REUSE_CHARS = 200
#: DESIGN §6 (a): text found in more than this share of all messages is boilerplate.
BOILERPLATE_SHARE = 0.2
#: ``Uses.kind`` codes: rule (a) verbatim repetition, rule (b) edit or write after a read, rule (c)
#: a path, identifier or command named again (strict detector only).
KIND_VERBATIM, KIND_FILE_EDIT, KIND_TERM = 0, 1, 2
#: The detectors (``--detector``): DESIGN §6's rules (a) and (b), or those and rule (c) (DESIGN §9).
DETECTORS = ("verbatim", "strict")
#: Rule (c): shortest identifier that counts, characters (shorter names such as ``i_j`` or
#: ``os.path`` recur by chance); paths and commands count at any length.
MIN_TERM_CHARS = 6

_SEPARATOR = 0x110000  # one past the last Unicode code point: never a character, ends every text
_BASE = np.uint64(0x9E3779B97F4A7C15)  # odd 64-bit multiplier of the polynomial hash (2^64 / golden ratio)
_MASK = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class Uses:
    """Every use of an earlier message by a later assistant message; arrays of shape (U,).

    Attributes
    ----------
    message : ndarray[int64], shape (U,)
        Index of the earlier message whose content is used.
    at : ndarray[int64], shape (U,)
        Index of the assistant message that uses it (``at > message``).
    kind : ndarray[int8], shape (U,)
        :data:`KIND_VERBATIM` (rule a) or :data:`KIND_FILE_EDIT` (rule b).

    Notes
    -----
    Sorted by ``(at, message)``; each pair appears once (verbatim wins over edit). The arrays
    are read-only.
    """

    message: npt.NDArray[np.int64]
    at: npt.NDArray[np.int64]
    kind: npt.NDArray[np.int8]

    def __post_init__(self) -> None:
        for array in (self.message, self.at, self.kind):
            array.setflags(write=False)

    def __len__(self) -> int:
        return int(self.message.shape[0])

    def last_use(self, n_messages: int) -> npt.NDArray[np.int64]:
        """Per message, the index of the last message that uses it (−1 if none); shape (n_messages,)."""
        last = np.full(n_messages, -1, dtype=np.int64)
        np.maximum.at(last, self.message, self.at)
        return last


def find_uses(
    messages: Sequence[Message], *, min_chars: int = MIN_REUSE_CHARS, boilerplate_share: float = BOILERPLATE_SHARE,
    detector: str = "verbatim",
) -> Uses:
    """Find every (earlier message, later assistant message) use of DESIGN §6 "Lost information".

    Parameters
    ----------
    messages : sequence of Message
        The conversation in order, N messages.
    min_chars : int
        Shortest verbatim repetition that counts, in characters (code points); DESIGN §6: 200.
    boilerplate_share : float
        A window of ``min_chars`` characters held by more than this share of the N messages is
        ignored; DESIGN §6: 0.2.
    detector : {"verbatim", "strict"}
        ``"strict"`` adds rule (c), names used again (DESIGN §9); a pair found by several rules
        keeps the first of (a), (b), (c).

    Returns
    -------
    Uses
        Arrays of shape (U,), sorted by ``(at, message)``.

    Raises
    ------
    ValueError
        If ``min_chars < 1`` or ``boilerplate_share`` is not in (0, 1].

    Notes
    -----
    Rule (a) works per window of ``min_chars`` characters: each window of the using message
    goes to the latest earlier message holding it, so a long repeated run can use two messages
    (the part a later copy also holds goes to that copy). Rule (b): :func:`file_operations`.
    Time: one hash pass and one sort over all characters of the conversation (O(C log C));
    about 0.2 s for a 4 MB Claude Code transcript (663 messages, 930 k characters).
    """
    if min_chars < 1 or not 0.0 < boilerplate_share <= 1.0:
        raise ValueError(f"min_chars must be >= 1 and boilerplate_share in (0, 1], not {min_chars!r}, {boilerplate_share!r}")
    if detector not in DETECTORS:
        raise ValueError(f"detector must be one of {DETECTORS}, not {detector!r}")
    n = len(messages)
    parsed = [[parsed_arguments(call) for call in m.tool_calls] for m in messages]
    arguments = [
        [argument_text(call, args) for call, args in zip(m.tool_calls, per_call, strict=True)]
        for m, per_call in zip(messages, parsed, strict=True)
    ]
    verbatim = _verbatim_pairs(messages, arguments, min_chars=min_chars, boilerplate_share=boilerplate_share)
    edits = _file_edit_pairs(messages, parsed, arguments)
    stride = n + 1
    keys_v = verbatim[1] * stride + verbatim[0]
    keys_e = edits[1] * stride + edits[0]
    keys_e = keys_e[~np.isin(keys_e, keys_v)]
    keys_t = np.zeros(0, dtype=np.int64)
    if detector == "strict":
        terms = _term_pairs(messages, parsed, arguments, boilerplate_share=boilerplate_share)
        keys_t = terms[1] * stride + terms[0]
        keys_t = keys_t[~np.isin(keys_t, keys_v) & ~np.isin(keys_t, keys_e)]
    keys = np.concatenate((keys_v, keys_e, keys_t))
    kinds = np.concatenate((np.full(keys_v.size, KIND_VERBATIM, np.int8), np.full(keys_e.size, KIND_FILE_EDIT, np.int8),
                            np.full(keys_t.size, KIND_TERM, np.int8)))
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    return Uses(message=keys % stride, at=keys // stride, kind=kinds[order])


# -- (a) verbatim repetition ------------------------------------------------------------------


def _texts(messages: Sequence[Message], arguments: list[list[str]]) -> tuple[list[str], list[int], list[bool]]:
    """Every non-empty text, the message holding it, and whether it is a using text (assistant text, arguments)."""
    texts: list[str] = []
    owners: list[int] = []
    using: list[bool] = []
    for index, (message, args) in enumerate(zip(messages, arguments, strict=True)):
        assistant = message.role == "assistant"
        for text, uses in [(message.text, assistant), *((r.text, False) for r in message.tool_results), *((a, True) for a in args)]:
            if text:
                texts.append(text)
                owners.append(index)
                using.append(uses and assistant)
    return texts, owners, using


def _codes(texts: list[str]) -> npt.NDArray[np.uint32]:
    """Code points of the texts, each followed by :data:`_SEPARATOR`; shape (C,)."""
    if not texts:
        return np.zeros(0, dtype=np.uint32)
    joined = "\x00".join(texts) + "\x00"
    codes = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32).copy()
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    codes[np.cumsum(lengths + 1) - 1] = _SEPARATOR
    return codes


def window_hashes(codes: npt.NDArray[np.uint32], width: int) -> npt.NDArray[np.uint64]:
    """Polynomial hash of every window ``codes[i : i + width]``; shape (max(C − width + 1, 0),).

    Hashes of lengths 1, 2, 4, ... are built by doubling (h_2L[i] = h_L[i]·B^L + h_L[i + L]) and
    the powers of two in ``width`` are combined from the left, all in uint64 wrap-around
    arithmetic: O(C log width) vector operations, no loop per character.

    >>> codes = np.frombuffer("abcabc".encode("utf-32-le"), dtype=np.uint32)
    >>> h = window_hashes(codes, 3)
    >>> bool(h[0] == h[3]), bool(h[0] == h[1])
    (True, False)
    """
    count = codes.size - width + 1
    if count <= 0:
        return np.zeros(0, dtype=np.uint64)
    level = (codes.astype(np.uint64) + np.uint64(1)) * np.uint64(0xBF58476D1CE4E5B9)  # spread code points over 64 bits
    result = np.zeros(count, dtype=np.uint64)
    length, offsets = 1, []
    while length <= width:
        if width & length:
            offsets.append((length, level))
        if length * 2 <= width:
            shifted = level[length:] if length < level.size else level[:0]
            level = level[: shifted.size] * np.uint64(pow(int(_BASE), length, 1 << 64)) + shifted
        length *= 2
    consumed = 0
    for length, hashes in reversed(offsets):  # highest power first: the window's left part
        result = result * np.uint64(pow(int(_BASE), length, 1 << 64)) + hashes[consumed : consumed + count]
        consumed += length
    return result


def _sorted_unique(values: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Sorted distinct values (``np.sort`` and a neighbour test: faster than ``np.unique``'s hashing here)."""
    values = np.sort(values)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if values.size else values


def _verbatim_pairs(
    messages: Sequence[Message], arguments: list[list[str]], *, min_chars: int, boilerplate_share: float
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(message, at) pairs of rule (a), unique; two arrays of shape (P,)."""
    empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    texts, owners, using = _texts(messages, arguments)
    codes = _codes(texts)
    hashes = window_hashes(codes, min_chars)
    if hashes.size == 0 or not any(using):
        return empty
    lengths = np.fromiter((len(t) + 1 for t in texts), dtype=np.int64, count=len(texts))
    owner = np.repeat(np.asarray(owners, dtype=np.int64), lengths)[: hashes.size]
    is_using = np.repeat(np.asarray(using, dtype=bool), lengths)[: hashes.size]
    separators = np.concatenate(([0], np.cumsum(codes == _SEPARATOR)))
    valid = (separators[min_chars : min_chars + hashes.size] - separators[: hashes.size]) == 0
    hashes, owner, is_using = hashes[valid], owner[valid], is_using[valid]
    if hashes.size == 0 or not is_using.any():
        return empty
    order = np.argsort(hashes)
    sorted_hashes = hashes[order]
    starts = np.concatenate(([True], sorted_hashes[1:] != sorted_hashes[:-1]))
    rank = np.empty(hashes.size, dtype=np.int64)
    rank[order] = np.cumsum(starts) - 1
    stride = len(messages) + 1
    held = _sorted_unique(rank * stride + owner)  # (window, message holding it)
    holders = np.bincount(held // stride, minlength=int(rank.max()) + 1)
    boilerplate = holders > boilerplate_share * len(messages)
    query_rank, query_at = rank[is_using], owner[is_using]
    query = _sorted_unique(query_rank * stride + query_at)
    query_rank, query_at = query // stride, query % stride
    found = np.searchsorted(held, query, side="left") - 1  # the latest holder before ``at``
    ok = found >= 0
    found = np.where(ok, found, 0)
    ok &= (held[found] // stride == query_rank) & ~boilerplate[query_rank]
    pairs = _sorted_unique(query_at[ok] * stride + held[found[ok]] % stride)
    return pairs % stride, pairs // stride


# -- (b) edits and writes after a read --------------------------------------------------------

def _file_edit_pairs(
    messages: Sequence[Message], parsed: list[list[Any]], arguments: list[list[str]]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(message, at) pairs of rule (b), unique; two arrays of shape (P,).

    A read counts from the message holding its (successful) result on; an edit or write of the
    path by assistant message ``at`` uses that message and ends it (a later edit needs a fresh
    read). Relative paths are joined to the call's ``workdir``, else the latest one seen.
    """
    last_read: dict[str, int] = {}
    pending: dict[str, list[str]] = {}
    pairs: set[tuple[int, int]] = set()
    workdir: str | None = None
    for index, message in enumerate(messages):
        for result in message.tool_results:
            paths = pending.pop(result.call_id, None)
            if paths and not result.is_error:
                last_read.update(dict.fromkeys(paths, index))
        if message.role != "assistant":
            continue
        for call, args, text in zip(message.tool_calls, parsed[index], arguments[index], strict=True):
            reads, writes = operations(call.name, args, text, workdir)
            if isinstance(args, dict):
                workdir = first_string(args, WORKDIR_KEYS) or workdir
            for path in writes:
                source = last_read.pop(path, None)
                if source is not None and source < index:
                    pairs.add((source, index))
            if reads:
                pending[call.id] = reads
    if not pairs:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    source, at = np.array(sorted(pairs), dtype=np.int64).T
    return source, at


# -- (c) names used again (strict detector) ---------------------------------------------------


def message_terms(text: str) -> set[str]:
    """The file paths and code identifiers a text names (rule (c)): :data:`~dp_compact.text.patterns.PATH`
    matches, and :data:`~dp_compact.text.patterns.IDENTIFIER` matches of at least :data:`MIN_TERM_CHARS`
    characters that are not file names.

    >>> sorted(message_terms("edit src/app/main.py: rename load_config to read_config (x_y stays)"))
    ['load_config', 'read_config', 'src/app/main.py']
    """
    found = {m.group(1).rstrip(".") for m in PATH.finditer(text)}
    found.update(m.group(0) for m in IDENTIFIER.finditer(text) if len(m.group(0)) >= MIN_TERM_CHARS and not HAS_EXTENSION.search(m.group(0)))
    return found


def _command(args: Any) -> str | None:
    """A shell call's command line, whitespace collapsed, as a term (``"$ <command>"``); None for other calls."""
    if not isinstance(args, dict):
        return None
    command = first_string(args, SHELL_COMMAND_KEYS)
    if command is None and isinstance(args.get("command"), list):
        command = " ".join(str(word) for word in args["command"])
    return "$ " + " ".join(command.split()) if command and command.strip() else None


def _term_pairs(
    messages: Sequence[Message], parsed: list[list[Any]], arguments: list[list[str]], *, boilerplate_share: float
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(message, at) pairs of rule (c), unique; two arrays of shape (P,).

    Every message holds the terms of its text, tool results and tool-call arguments (and the
    command lines of its shell calls); an assistant message uses the terms of its text and
    arguments, each going to the latest earlier message holding it.
    """
    held: list[set[str]] = []
    used: list[set[str]] = []
    for message, per_call, texts in zip(messages, parsed, arguments, strict=True):
        own = message_terms(message.text) if message.text else set()
        for text in texts:
            own |= message_terms(text)
        own.update(c for c in map(_command, per_call) if c)
        used.append(own if message.role == "assistant" else set())
        source = set(own)
        for result in message.tool_results:
            if result.text:
                source |= message_terms(result.text)
        held.append(source)
    counts: dict[str, int] = {}
    for terms in held:
        for term in terms:
            counts[term] = counts.get(term, 0) + 1
    limit = boilerplate_share * len(messages)
    latest: dict[str, int] = {}
    pairs: set[tuple[int, int]] = set()
    for index, (terms, uses) in enumerate(zip(held, used, strict=True)):
        for term in uses:
            source = latest.get(term)
            if source is not None and counts[term] <= limit:
                pairs.add((source, index))
        for term in terms:
            latest[term] = index
    if not pairs:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    source, at = np.array(sorted(pairs), dtype=np.int64).T
    return source, at
