"""Large and odd inputs stay linear: long texts are tokenized in pieces, error lines found in one scan."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from dp_compact.measure import tokens
from dp_compact.measure.tokens import MAX_PIECE_CHARS, _pieces, count_text_tokens
from dp_compact.pipeline.extract import _ERROR_WORDS, error_lines
from dp_compact.text.patterns import ERROR


def _exact(text: str) -> int:
    return len(tokens._encoding().encode_ordinary(text))


def test_a_long_run_is_counted_in_pieces_within_a_token_per_piece() -> None:
    run = "a" * (3 * MAX_PIECE_CHARS + 17)
    pieces = _pieces(run)
    assert "".join(pieces) == run and max(map(len, pieces)) <= MAX_PIECE_CHARS
    assert abs(int(count_text_tokens([run])[0]) - _exact(run)) <= len(pieces)


@given(st.text(alphabet=st.sampled_from(list("ab \n\tx.")), min_size=0, max_size=3 * MAX_PIECE_CHARS))
@settings(max_examples=25, deadline=None)
def test_pieces_rebuild_the_text_and_cut_before_whitespace(text: str) -> None:
    pieces = _pieces(text)
    assert "".join(pieces) == text and all(len(p) <= MAX_PIECE_CHARS for p in pieces)
    counted = count_text_tokens([text, "short"])
    assert counted[1] == _exact("short") and abs(int(counted[0]) - _exact(text)) <= len(pieces)


def test_prose_split_at_whitespace_counts_as_one_piece() -> None:
    prose = "the quick brown fox jumps over the lazy dog. " * 2_000  # 90,000 characters
    assert int(count_text_tokens([prose])[0]) == _exact(prose)


@given(st.lists(st.sampled_from(["ok", "Build FAILED", "timed out", "TimeOut", "no problem", "Errors: 2", "crashed!", "\n", "\r\n",
                                 "segfault", "cannot open", "all good"]), max_size=30))
@settings(max_examples=80, deadline=None)
def test_error_lines_equal_the_line_by_line_rule(parts: list[str]) -> None:
    text = " ".join(parts)
    by_line = [line.strip() for line in text.splitlines() if ERROR.search(line)]
    for limit in (1, 3):
        assert error_lines(text, limit) == [line for line in dict.fromkeys(by_line) if line][:limit]


def test_every_error_pattern_word_has_its_stem_in_the_prefilter() -> None:
    alternatives = re.sub(r"\(\?:[^)]*\)\?|\(\?:[^)]*\)|\?|\\b|[()]", "", ERROR.pattern).split("|")
    for word in alternatives:
        stem = word.replace(" ", " ").lower()
        assert any(key in stem or stem.startswith(key) for key in _ERROR_WORDS), word
