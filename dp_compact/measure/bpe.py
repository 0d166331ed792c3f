"""cl100k_base token counts of a few short texts without building tiktoken's encoder.

tiktoken builds its Rust encoder from the 100,256 ranks at every process start: about 55 ms,
after about 15 ms to read the ranks (from the copy :mod:`dp_compact.measure.tokens` keeps) and
20 ms of imports, where a status line after one appended call has one or two new messages to
count. This module counts them as tiktoken's ``encode_ordinary`` does, in Python: the text is
split by cl100k's pattern, and each piece is merged byte pair by byte pair, the lowest rank
first and the leftmost of equal ranks (tiktoken ``_educational.bpe_encode``, the algorithm of
its Rust ``byte_pair_merge``).

The pattern is only used where its meaning cannot differ from the Rust ``fancy-regex`` one:
ASCII text with the standard library's ``re`` (``\\p{L}`` is ``[A-Za-z]``, ``\\p{N}`` ``[0-9]``,
``\\s`` Unicode ``White_Space`` among ASCII), and text whose other characters lie in blocks
whose letters and numbers have not changed in recent Unicode versions with the ``regex``
module, ``\\s`` spelled as Unicode ``White_Space`` (:data:`_STABLE`). Any other text, or more than
:data:`MAX_CHARS` characters, returns None: the caller uses tiktoken. ``tests/test_incremental.py``
compares the counts with tiktoken's on every message of ``../shared/sessions``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["MAX_CHARS", "count_ordinary"]

#: Most characters counted here at once; above, tiktoken's encoder is worth building: this
#: module counts about 1 to 3 million characters a second (real transcripts' messages, loaded and
#: quiet 2-core machine, 2026-12-06), tiktoken's set-up costs about 85 ms.
MAX_CHARS = 40_000

#: Unicode ``White_Space`` (PropList.txt), as Rust's ``regex`` means ``\s``.
_WHITE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
#: cl100k_base's pattern (:data:`dp_compact.measure.tokens._PAT_STR`) for ASCII text, with ``re``.
_ASCII_PATTERN = re.compile(
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{1,3}+| ?[^\t\n\x0b\x0c\r A-Za-z0-9]++[\r\n]*+"""
    r"""|[\t\n\x0b\x0c\r ]++$|[\t\n\x0b\x0c\r ]*[\r\n]|[\t\n\x0b\x0c\r ]+(?![^\t\n\x0b\x0c\r ])|[\t\n\x0b\x0c\r ]"""
)
#: The same for :data:`_STABLE` text, with ``regex``; ``\s`` spelled as Unicode White_Space.
_UNICODE_PATTERN = (
    rf"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{{L}}\p{{N}}]?+\p{{L}}++|\p{{N}}{{1,3}}+| ?[^{_WHITE}\p{{L}}\p{{N}}]++[\r\n]*+"""
    rf"""|[{_WHITE}]++$|[{_WHITE}]*[\r\n]|[{_WHITE}]+(?![^{_WHITE}])|[{_WHITE}]"""
)
#: Characters besides ASCII counted here: Latin to Armenian, general punctuation to
#: miscellaneous symbols and arrows, emoji and pictographs (letters and numbers assigned in
#: Unicode 6 or earlier, or none), variation selectors; less the two that case-fold to ASCII
#: letters of the pattern's contractions (U+017F long s, U+212A Kelvin sign).
_STABLE = re.compile("[\x00-\u017e\u0180-\u052f\u2000-\u2129\u212b-\u2bff\ufe00-\ufe0f\U0001f300-\U0001faff]*")


def _merged_count(piece: bytes, ranks: dict[bytes, int]) -> int:
    """Tokens of one piece: its bytes merged pair by pair, lowest rank first, leftmost on ties."""
    parts = [piece[i : i + 1] for i in range(len(piece))]
    get = ranks.get
    while len(parts) > 1:
        best, at = None, -1
        for i in range(len(parts) - 1):
            rank = get(parts[i] + parts[i + 1])
            if rank is not None and (best is None or rank < best):
                best, at = rank, i
        if best is None:
            break
        parts[at : at + 2] = [parts[at] + parts[at + 1]]
    return len(parts)


def _pattern(text: str) -> Any:
    """The split pattern that reads ``text`` as tiktoken does, or None (module docstring)."""
    if text.isascii():
        return _ASCII_PATTERN
    if _STABLE.fullmatch(text) is None:
        return None
    import regex

    return regex.compile(_UNICODE_PATTERN)


def count_ordinary(texts: Sequence[str], ranks: dict[bytes, int] | None) -> list[int] | None:
    """``len(encoding.encode_ordinary(text))`` of cl100k_base for each of ``texts``, tokens; None
    when ``ranks`` (cl100k's, bytes -> rank) is None or a text is not one this module reads
    (module docstring), or they hold more than :data:`MAX_CHARS` characters."""
    if ranks is None or sum(map(len, texts)) > MAX_CHARS:
        return None
    patterns = [_pattern(text) for text in texts]
    if any(p is None for p in patterns):
        return None
    counts = []
    for text, pattern in zip(texts, patterns, strict=True):
        n = 0
        for piece in pattern.findall(text):
            encoded = piece.encode("utf-8")
            n += 1 if encoded in ranks else _merged_count(encoded, ranks)
        counts.append(n)
    return counts
