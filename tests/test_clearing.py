"""dp_compact.measure.clearing: the facts of clearing old tool results, vectorized over every depth."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dp_compact.conversation import Message, ToolResult
from dp_compact.measure import clearing
from dp_compact.measure.clearing import (
    CLEAR_MIN_CHARS,
    clearing_facts,
    clearing_facts_for,
    depth_keeping_results,
    placeholder_text,
    tool_result_layout,
)
from dp_compact.measure.tokens import count_message_tokens
from dp_compact.sessions import read_session
from tests.conftest import SESSIONS, need


def _reference_at(tokens, owners, removed, added, clearable, d):
    """Plain per-depth reference: clear every clearable result before message d, one message at a time."""
    n = len(tokens)
    after = list(tokens)
    cleared, changed = 0, set()
    removed_sum = added_sum = 0
    for owner, rem, add, ok in zip(owners, removed, added, clearable, strict=True):
        if ok and owner < d:
            cleared += 1
            changed.add(owner)
            removed_sum += rem
            added_sum += add
            after[owner] += add - rem
    first = min(changed) if changed else n
    prefix = sum(tokens[:first])
    return {
        "depth": d, "cleared_results": cleared, "changed_messages": len(changed), "removed_tokens": removed_sum,
        "placeholder_tokens": added_sum, "saved_tokens": removed_sum - added_sum, "first_changed_message": first,
        "unchanged_prefix_tokens": prefix, "rewritten_tokens": sum(after[first:]), "tokens_after": sum(after),
    }, sorted(changed)


@st.composite
def _layouts(draw):
    n = draw(st.integers(0, 30))
    results = draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=40)) if n else []
    owners = sorted(results)
    removed = [draw(st.integers(0, 5_000)) for _ in owners]
    tokens = [draw(st.integers(0, 200)) for _ in range(n)]
    for owner, rem in zip(owners, removed, strict=True):
        tokens[owner] += rem  # a message holds at least its results' tokens
    added = [draw(st.integers(0, 60)) for _ in owners]
    clearable = [draw(st.booleans()) for _ in owners]
    return tokens, owners, removed, added, clearable


@given(_layouts())
def test_clearing_facts_equal_a_per_depth_reference(layout):
    tokens, owners, removed, added, clearable = layout
    facts = clearing_facts(tokens, owners, removed, added, clearable)
    assert facts.depth.shape == (len(tokens) + 1,)
    for d in range(len(tokens) + 1):
        expected, changed = _reference_at(tokens, owners, removed, added, clearable, d)
        assert facts.at(d) == expected
        assert facts.changed_message_indices[: facts.changed_messages[d]].tolist() == changed


def test_clearing_facts_arrays_are_read_only():
    facts = clearing_facts([10, 900], [1], [880], [40], [True])
    with pytest.raises(ValueError):
        facts.saved_tokens[0] = 1


def test_clearing_facts_reject_an_index_outside_the_messages():
    with pytest.raises(ValueError, match="outside"):
        clearing_facts([10, 20], [2], [5], [1], [True])


def test_clearing_nothing_rewrites_nothing():
    facts = clearing_facts([10, 900, 30], [1], [880], [40], [False])
    assert facts.saved_tokens.tolist() == [0, 0, 0, 0]
    assert facts.first_changed_message.tolist() == [3, 3, 3, 3]
    assert facts.rewritten_tokens.tolist() == [0, 0, 0, 0]
    assert facts.unchanged_prefix_tokens.tolist() == [940] * 4


def test_tool_result_layout_leaves_short_and_cleared_results():
    short = ToolResult("a", "x" * (CLEAR_MIN_CHARS - 1))
    long = ToolResult("b", "y" * CLEAR_MIN_CHARS)
    done = ToolResult("c", placeholder_text(5_000, "archive://s/x", 2) + " " * CLEAR_MIN_CHARS)
    layout = tool_result_layout([Message("user", "go"), Message("tool", tool_results=(short, long, done))])
    assert layout.message_index.tolist() == [1, 1, 1]
    assert layout.clearable.tolist() == [False, True, False]


def test_depth_keeping_results_keeps_the_last_three_long_results():
    messages = [Message("tool", tool_results=(ToolResult(str(i), "z" * 900),)) for i in range(6)]
    layout = tool_result_layout(messages)
    assert depth_keeping_results(layout, 3) == 3
    assert depth_keeping_results(layout, 6) == 0
    assert depth_keeping_results(layout, 0) == 6


def test_module_all_lists_the_public_names():
    defined = {name for name, value in vars(clearing).items() if getattr(value, "__module__", None) == clearing.__name__}
    constants = {name for name in vars(clearing) if name.isupper()}
    assert set(clearing.__all__) == {n for n in defined | constants if not n.startswith("_")}


@pytest.mark.parametrize("name", ["claude_code/cc_fundwise.jsonl", "codex/codex_raze.jsonl"])
def test_clearing_facts_for_a_real_session_equal_the_reference(name):
    session = read_session(need(SESSIONS / name))
    tokens = count_message_tokens(session.messages)
    facts = clearing_facts_for(session.messages, tokens)
    layout = tool_result_layout(session.messages)
    assert layout.clearable.any()  # the session has something to clear, or the test proves nothing
    from dp_compact.measure.tokens import count_text_tokens

    texts = [r.text for m in session.messages for r in m.tool_results]
    ref = "archive://session/" + clearing.PLACEHOLDER_ARCHIVE_ID
    added = count_text_tokens([placeholder_text(c, ref, i) for c, i in zip(layout.chars, layout.message_index, strict=True)])
    for d in sorted({0, 1, len(tokens) // 2, len(tokens)} | set(layout.message_index.tolist()[:5])):
        expected, _ = _reference_at(tokens.tolist(), layout.message_index.tolist(), count_text_tokens(texts).tolist(),
                                    added.tolist(), layout.clearable.tolist(), d)
        assert facts.at(d) == expected
    assert facts.saved_tokens[-1] > 0
    assert np.all(np.diff(facts.saved_tokens) >= 0)  # clearing deeper never saves less
