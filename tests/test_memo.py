"""Passes resumed for appended items (:class:`~dp_compact.measure.memo.AppendMemo`) equal passes over the whole sequence.

Every measurement that keeps a pass between calls (the message arrays of the cut rules, the
clearable tokens, the usage and message columns, the call times) is checked against the same
measurement made with nothing kept, over sequences that grow by appends, shrink, are rebuilt
from equal but distinct objects, and interleave (two conversations planned in turn).
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from dp_compact.conversation import Message, Session, ToolCall, ToolResult, Usage, call_seconds
from dp_compact.core import cuts, timing
from dp_compact.core.cuts import message_arrays
from dp_compact.measure import clearing, columns
from dp_compact.measure.clearing import CLEARED_PREFIX, clearable_saved_tokens
from dp_compact.measure.memo import AppendMemo


def _count_memo() -> tuple[AppendMemo, list[int]]:
    """A memo whose pass counts the items it reads (to see what was read again)."""
    read: list[int] = []

    def extend(state: list, items):
        read.append(len(items))
        state.extend(items)
        return state

    return AppendMemo(list, extend, list, tuple), read


def test_memo_reads_only_the_appended_items_and_keeps_every_answer_right():
    memo, read = _count_memo()
    items = [object() for _ in range(10)]
    assert memo(items[:6]) == tuple(items[:6]) and read == [6]
    assert memo(items[:9]) == tuple(items[:9]) and read == [6, 3]  # an append: the three new items
    assert memo(items[:9]) == tuple(items[:9]) and read == [6, 3]  # the same items: nothing read
    assert memo(items[:4]) == tuple(items[:4]) and read == [6, 3, 4]  # shorter than every kept one: read again
    assert memo(items) == tuple(items) and read == [6, 3, 4, 1]  # resumed after the longest kept prefix (9)
    other = [*items[:5], object()]
    assert memo(other) == tuple(other) and read[-1] == 2  # resumed after the 4 kept, not after a longer one it leaves


def test_memo_compares_items_by_identity():
    memo, read = _count_memo()
    a = [[1], [2]]
    memo(a)
    copies = [[1], [2], [3]]  # equal lists, other objects: read again
    assert memo(copies) == tuple(copies) and read == [2, 3]


def test_memo_keeps_a_bounded_number_of_sequences():
    memo, read = _count_memo()
    firsts = [[object()] for _ in range(20)]
    for items in firsts:
        memo(items)
    memo(firsts[0])
    assert read[-1] == 1  # forgotten: read again


def _messages(rng: random.Random, n: int) -> list[Message]:
    """A conversation of user turns, assistant calls (some parallel, some reused ids) and tool results."""
    out: list[Message] = []
    pending: list[str] = []
    for index in range(n):
        roll = rng.random()
        if pending and roll < 0.5:
            ids = [pending.pop(0) for _ in range(min(len(pending), rng.randint(1, 2)))]
            text = "x" * rng.choice([10, 900, 3_000]) if rng.random() < 0.8 else CLEARED_PREFIX + " earlier"
            out.append(Message("tool", tool_results=tuple(ToolResult(i, text) for i in ids), line=index + 1))
        elif roll < 0.75:
            ids = [f"c{rng.randint(0, n // 2)}" for _ in range(rng.randint(0, 3))]
            pending.extend(ids)
            out.append(Message("assistant", "a" * rng.randint(0, 50), tool_calls=tuple(ToolCall(i, "read", "{}") for i in ids),
                               line=index + 1))
        else:
            out.append(Message("user", "u" * rng.randint(1, 40), raw={"content": "plain" if rng.random() < 0.7 else [{}]},
                               line=index + 1))
    return out


def _fresh() -> None:
    """Forget every kept pass (so that a call computes from nothing)."""
    for memo in (cuts._ARRAYS, columns._USAGE, columns._MESSAGES, timing._SECONDS, *clearing._CLEARABLE.values()):
        memo.clear()


def _arrays_equal(a: cuts.MessageArrays, b: cuts.MessageArrays) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) and getattr(a, f).dtype == getattr(b, f).dtype
               for f in ("roles", "call_index", "turn_index", "round_index", "plain_user"))


@pytest.mark.parametrize("seed", range(6))
def test_measurements_kept_between_calls_equal_fresh_ones(seed):
    rng = random.Random(seed)
    conversations = [_messages(rng, 160), _messages(rng, 120)]
    usages = [[Usage(rng.randint(1, 90_000), rng.randint(0, 500), rng.randint(0, 500), 10, line=2 * i + 1,
                     convention=rng.choice(["", "openai", "anthropic"]), cache_write_1h_tokens=rng.randint(0, 5),
                     cache_split_estimated=rng.random() < 0.05) for i in range(80)] for _ in conversations]
    times = [[rng.choice([None, 1.7e9 + 30 * i, "2026-12-06T10:00:00+00:00", 1.7e12 + i]) for i in range(80)] for _ in conversations]
    _fresh()
    seen = [0, 0]
    for _ in range(40):
        which = rng.randint(0, 1)
        grown = seen[which] + rng.choice([1, 2, 5]) if rng.random() < 0.85 else rng.randint(0, seen[which])  # appends, or a shorter list
        seen[which] = n = min(grown, len(conversations[which]))
        messages = tuple(conversations[which][:n]) if rng.random() < 0.9 else tuple(replace(m) for m in conversations[which][:n])
        usage = tuple(usages[which][: n // 2])
        call_times = tuple(times[which][: n // 2])
        tokens = np.asarray([rng.randint(0, 40_000) for _ in range(n)], dtype=np.int64)
        kept = (message_arrays(messages), clearable_saved_tokens(messages, tokens), columns.usage_columns(usage),
                columns.message_columns(messages), timing.session_call_seconds(Session("", "", (), call_times=call_times)))
        saved_state = (cuts._ARRAYS._kept, columns._USAGE._kept, columns._MESSAGES._kept, timing._SECONDS._kept,
                       {k: m._kept for k, m in clearing._CLEARABLE.items()})
        _fresh()
        fresh = (message_arrays(messages), clearable_saved_tokens(messages, tokens), columns.usage_columns(usage),
                 columns.message_columns(messages), call_seconds(Session("", "", (), call_times=call_times)))
        cuts._ARRAYS._kept, columns._USAGE._kept, columns._MESSAGES._kept, timing._SECONDS._kept = saved_state[:4]
        for k, m in clearing._CLEARABLE.items():
            m._kept = saved_state[4].get(k, [])
        assert _arrays_equal(kept[0], fresh[0])
        assert np.array_equal(kept[1], fresh[1])
        for field in ("line", "prompt_tokens", "cache_read_tokens", "cache_write_tokens", "cache_write_1h_tokens", "output_tokens",
                      "split_estimated"):
            assert np.array_equal(getattr(kept[2], field), getattr(fresh[2], field))
            assert np.array_equal(getattr(kept[2], field), np.array([getattr(u, {"split_estimated": "cache_split_estimated"}.get(field, field))
                                                                     for u in usage], dtype=getattr(kept[2], field).dtype))
        assert [kept[2].conventions[c] for c in kept[2].convention.tolist()] == [u.convention for u in usage]
        assert np.array_equal(kept[3].assistant, [m.role == "assistant" for m in messages])
        assert np.array_equal(kept[3].line, [m.line for m in messages])
        assert kept[4].tobytes() == fresh[4].tobytes()


def test_clearable_tokens_match_the_message_by_message_rule():
    """:func:`clearable_saved_tokens`: a message's clearable results' share of its characters, of its tokens, less the
    placeholders; 0 without such a result (the rule written out, huge counts included)."""
    rng = random.Random(7)
    messages = _messages(rng, 300)
    for scale in (100, 100_000, 10**13):
        tokens = np.asarray([rng.randint(0, scale) for _ in messages], dtype=np.int64)
        want = []
        for message, count in zip(messages, tokens.tolist(), strict=True):
            cleared = [len(r.text) for r in message.tool_results
                       if len(r.text) >= clearing.CLEAR_MIN_CHARS and not clearing.is_cleared_text(r.text)]
            chars = (len(message.text) + len(message.thinking) + sum(len(r.text) for r in message.tool_results)
                     + sum(len(c.name) + len(c.arguments) for c in message.tool_calls))
            want.append(max(round(count * sum(cleared) / max(chars, 1)) - clearing.PLACEHOLDER_TOKENS * len(cleared), 0) if cleared else 0)
        assert clearable_saved_tokens(messages, tokens).tolist() == want


def test_columns_give_way_to_the_records_when_a_field_is_not_a_plain_int():
    usage = (Usage(100, line=1), Usage(250.5, line=2))  # type: ignore[arg-type]
    assert columns.usage_columns(usage) is None
    assert columns.usage_columns(usage[:1]) is not None


def test_referenced_documents_resumed_on_appends_equals_a_fresh_count():
    from dp_compact.measure.documents import find_documents
    from dp_compact.measure.tokens import referenced_documents
    from dp_compact.sessions.anthropic import anthropic_message

    def message(i: int, linked: bool):
        block = ({"type": "document", "source": {"type": "url", "url": f"https://example.com/{i}.pdf"}} if linked
                 else {"type": "text", "text": f"note {i}"})
        return anthropic_message({"role": "user", "content": [block]}, i + 1, 10, 1)

    messages = [message(i, i % 3 == 0) for i in range(30)]

    def fresh(ms):
        return sum(1 for m in ms for d in find_documents(m.raw) if d.reference)

    assert fresh(messages) == 10
    for n in (0, 1, 5, 12, 30, 7, 30):  # growing, then a shorter list, then the whole again
        assert referenced_documents(messages[:n]) == fresh(messages[:n])
    copies = [message(i, True) for i in range(4)]  # equal-looking but other objects: counted afresh
    assert referenced_documents(messages[:2] + copies) == fresh(messages[:2] + copies) == 5
