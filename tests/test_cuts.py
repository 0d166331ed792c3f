"""Feasible cuts (DESIGN §1): vectorized mask against the per-cut reference, and the rules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

from dp_compact.core import _reference
from dp_compact.core.cuts import feasible_cut_mask, message_arrays
from dp_compact.conversation import Message, ToolCall, ToolResult
from tests.strategies import conversations


@settings(max_examples=150, deadline=None)
@given(conversations())
def test_feasible_cut_mask_equals_per_cut_reference(messages):
    arrays = message_arrays(messages)
    for seed_rule in (False, True):
        mask = feasible_cut_mask(arrays, user_turns_only=seed_rule)
        expected = [_reference.is_feasible_cut(messages, i, user_turns_only=seed_rule) for i in range(len(messages) + 1)]
        assert mask.tolist() == expected


@settings(max_examples=150, deadline=None)
@given(conversations())
def test_feasible_cuts_tail_never_starts_on_tool_result_and_keeps_calls(messages):
    mask = feasible_cut_mask(message_arrays(messages))
    for cut in np.flatnonzero(mask):
        tail = messages[cut:]
        assert tail[0].role != "tool"
        called = {c.id for m in tail for c in m.tool_calls}
        assert all(r.call_id in called for m in tail for r in m.tool_results)


def _loop(n_rounds: int, parallel: int = 1) -> list[Message]:
    messages = [Message("user", "fix the bug", raw={"role": "user", "content": "fix the bug"})]
    for r in range(n_rounds):
        calls = tuple(ToolCall(f"c{r}_{p}", "bash") for p in range(parallel))
        messages.append(Message("assistant", tool_calls=calls, thinking="t", signed_thinking=True))
        messages.extend(Message("tool", tool_results=(ToolResult(c.id, "ok"),)) for c in calls)
    return messages


def test_feasible_cuts_long_autonomous_turn_is_cuttable_between_rounds():
    messages = _loop(200)
    cuts = np.flatnonzero(feasible_cut_mask(message_arrays(messages)))
    assert len(cuts) == 200  # every assistant message opens a feasible tail
    assert all(messages[c].role == "assistant" for c in cuts)


def test_feasible_cuts_parallel_results_stay_with_their_call():
    messages = _loop(3, parallel=6)  # OpenAI shape: one tool message per result
    mask = feasible_cut_mask(message_arrays(messages))
    assert np.flatnonzero(mask).tolist() == [1, 8, 15]
    for cut in range(2, 8):
        assert not mask[cut]


def test_feasible_cuts_seed_rule_only_at_plain_user_turns():
    messages = _loop(3) + [Message("user", "next", raw={"role": "user", "content": [{"type": "text", "text": "x"}]})]
    messages += [Message("assistant", "ok"), Message("user", "again", raw={"role": "user", "content": "again"})]
    seed = np.flatnonzero(feasible_cut_mask(message_arrays(messages), user_turns_only=True))
    assert seed.tolist() == [len(messages) - 1]


def test_feasible_cuts_pending_call_at_end_allows_cut_before_it():
    messages = _loop(2) + [Message("assistant", tool_calls=(ToolCall("pending", "bash"),))]
    mask = feasible_cut_mask(message_arrays(messages))
    assert mask[len(messages) - 1]


def test_feasible_cuts_none_for_single_message():
    assert not feasible_cut_mask(message_arrays([Message("user", "hi")])).any()


def _anthropic(rows: list[dict]) -> list[Message]:
    from dp_compact.sessions.anthropic import message_from_anthropic

    return [message_from_anthropic(row) for row in rows]


def test_feasible_cuts_user_turn_after_server_tool_round_or_interrupted_call_is_a_cut():
    """A server tool answered inside its assistant message, or an interrupted call, leaves nothing open."""
    search = [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}},
              {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}]
    messages = _anthropic([
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": [{"type": "text", "text": "searching"}, *search]},
        {"role": "user", "content": "then change the Dockerfile"},  # 2: a user turn
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}]},
        {"role": "user", "content": "stop, read ci.yml instead"},  # 4: interrupts toolu_1, a user turn
        {"role": "assistant", "content": "ok"},
    ])
    assert [m.is_user_turn for m in messages] == [True, False, True, False, True, False]
    mask = feasible_cut_mask(message_arrays(messages))
    assert np.flatnonzero(mask).tolist() == [1, 2, 3, 4, 5]
    assert np.flatnonzero(feasible_cut_mask(message_arrays(messages), user_turns_only=True)).tolist() == [2, 4]


def test_seed_rule_skips_injected_context_with_a_string_content():
    messages = [
        Message("user", "fix it", raw={"role": "user", "content": "fix it"}),
        Message("assistant", "on it", raw={"role": "assistant", "content": "on it"}),
        Message("user", "<task-notification>done</task-notification>", kind="injected",
                raw={"role": "user", "content": "<task-notification>done</task-notification>"}),
        Message("assistant", "noted", raw={"role": "assistant", "content": "noted"}),
        Message("user", "now the tests", raw={"role": "user", "content": "now the tests"}),
        Message("assistant", "done", raw={"role": "assistant", "content": "done"}),
    ]
    seed = np.flatnonzero(feasible_cut_mask(message_arrays(messages), user_turns_only=True)).tolist()
    assert seed == [4] == [i for i in range(7) if _reference.is_feasible_cut(messages, i, user_turns_only=True)]


_CALL = Message("assistant", "", tool_calls=(ToolCall("x", "bash"),))
_RESULT = Message("tool", tool_results=(ToolResult("x", "ok"),))


@pytest.mark.parametrize("between", [
    Message("assistant", "still running, one moment"),
    Message("user", "also check ci.yml", raw={"role": "user", "content": "also check ci.yml"}),
], ids=["assistant_text", "user_turn"])
def test_feasible_cuts_message_between_a_call_and_its_result_is_no_cut(between):
    """DESIGN §1: every tool result in the tail has its call in the tail. A message that arrives
    between a call (1) and its result (3) opens no feasible tail; the call's own message does."""
    messages = [Message("user", "fix it", raw={"role": "user", "content": "fix it"}), _CALL, between, _RESULT,
                Message("assistant", "done"), Message("user", "next", raw={"role": "user", "content": "next"}),
                Message("assistant", "ok")]
    # cut 1: tail [call, between, result, ...] ✓; cut 2: result 3 without call 1 ✗; cut 3: a tool result ✗;
    # cuts 4, 5, 6: nothing open ✓; cuts 0 and 7 never
    assert np.flatnonzero(feasible_cut_mask(message_arrays(messages))).tolist() == [1, 4, 5, 6]
    assert [_reference.is_feasible_cut(messages, i) for i in range(8)] == [i in (1, 4, 5, 6) for i in range(8)]
