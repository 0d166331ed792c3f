"""Tuples made by :func:`~dp_compact.measure.memo.extended` resume a memo's pass without comparing their items,
and every answer is the one a pass over the whole tuple gives (the usage and message columns and the message
arrays over a shared Claude Code transcript, grown by appends as an adapter grows it)."""

from __future__ import annotations

from array import array

import numpy as np

from dp_compact.core import cuts
from dp_compact.core.cuts import message_arrays
from dp_compact.measure import columns
from dp_compact.measure.memo import EXTENSIONS_KEPT, extended, starts_with
from dp_compact.sessions import read_session
from tests.conftest import SESSIONS, need
from tests.test_memo import _count_memo


def test_an_extended_tuple_resumes_the_pass_of_the_tuple_it_extends():
    memo, read = _count_memo()
    items = [object() for _ in range(10)]
    base = tuple(items[:6])
    assert memo(base) == base and read == [6]
    longer = extended(base, items[6:9])
    assert longer == tuple(items[:9]) and memo(longer) == longer and read == [6, 3]
    assert extended(longer, []) is longer  # nothing appended: the same tuple
    assert memo(extended(longer, items[9:])) == tuple(items) and read == [6, 3, 1]


def test_an_extended_tuple_whose_base_is_not_kept_is_compared():
    memo, read = _count_memo()
    items = [object() for _ in range(8)]
    base = tuple(items[:4])
    memo(tuple(items[:2]))
    longer = extended(base, items[4:])  # base was never given to this memo: resumed after the 2 kept, by comparing
    assert memo(longer) == tuple(items) and read == [2, 6]


def test_only_the_latest_extensions_are_remembered():
    memo, read = _count_memo()
    base = (object(),)
    memo(base)
    first = extended(base, [object()])
    for _ in range(EXTENSIONS_KEPT + 1):
        extended((object(),), [object()])
    assert memo(first) == first and read == [1, 1]  # forgotten as an extension, still found by comparing


def test_columns_of_extended_tuples_equal_columns_of_whole_tuples():
    session = read_session(need(SESSIONS / "claude_code" / "cc_privacy_x402.jsonl"), lenient=True)
    messages, usage = session.messages, session.usage
    grown_messages: tuple = ()
    grown_usage: tuple = ()
    for stop in range(1, len(messages) + 1, 7):
        grown_messages = extended(grown_messages, messages[len(grown_messages):stop])
        grown_usage = extended(grown_usage, usage[len(grown_usage):stop // 3])
        fresh_messages, fresh_usage = tuple(messages[:stop]), tuple(usage[:stop // 3])
        got = columns.message_columns(grown_messages)  # resumed from the last tuple's pass
        want = columns._message_finish(columns._message_extend((bytearray(), array("q"), [True]), fresh_messages))
        assert np.array_equal(got.assistant, want.assistant) and np.array_equal(got.line, want.line)
        got_u = columns.usage_columns(grown_usage)
        want_u = columns._usage_finish(columns._usage_extend(([array("q") for _ in columns._USAGE_INTS], bytearray(), array("q"), {}, [True]),
                                                             fresh_usage))
        for name in ("line", "prompt_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "convention"):
            assert np.array_equal(getattr(got_u, name), getattr(want_u, name)), name
        assert got_u.conventions == want_u.conventions
        arrays = message_arrays(grown_messages)
        whole = cuts._arrays_finish(cuts._arrays_extend((bytearray(), bytearray(), bytearray(), array("q"), {}), fresh_messages))
        for name in ("roles", "call_index", "turn_index", "round_index", "plain_user"):
            assert np.array_equal(getattr(arrays, name), getattr(whole, name)), name


def test_starts_with_is_the_identity_prefix():
    items = tuple(object() for _ in range(5))
    assert starts_with(items, items) and starts_with(items, items[:3]) and starts_with(items, ())
    assert starts_with(extended(items, [object()]), items)
    assert not starts_with(items[:3], items)
    assert not starts_with(items, (items[0], object()))
    assert not starts_with(tuple(list(items)), [[1]])
    copies = [[1], [2]]
    assert not starts_with([[1], [2], [3]], copies)  # equal, not the same objects
