"""The hypothesis strategies of tests/strategies.py reach the shapes the property tests rely on."""

from __future__ import annotations

from hypothesis import Phase, find, settings

from dp_compact.conversation import Message
from tests.strategies import conversations

SEARCH = settings(max_examples=2_000, database=None, deadline=None, phases=[Phase.generate])  # the first example found


def _open_calls(messages: list[Message]) -> list[set[str]]:
    """Before each message, the ids of the calls made so far that no result has answered yet."""
    open_ids: set[str] = set()
    before = []
    for message in messages:
        before.append(set(open_ids))
        open_ids -= {r.call_id for r in message.tool_results}
        open_ids |= {c.id for c in message.tool_calls}
    return before


def _answered_later(messages: list[Message], index: int, ids: set[str]) -> bool:
    return any(r.call_id in ids for m in messages[index:] for r in m.tool_results)


def test_conversations_put_an_assistant_message_between_a_call_and_its_result():
    def interleaved(messages: list[Message]) -> bool:
        return any(m.role == "assistant" and not m.tool_calls and _answered_later(messages, i, before)
                   for i, (m, before) in enumerate(zip(messages, _open_calls(messages), strict=True)))

    assert interleaved(find(conversations(), interleaved, settings=SEARCH))


def test_conversations_put_a_user_turn_between_a_call_and_its_result():
    def interleaved(messages: list[Message]) -> bool:
        return any(m.is_user_turn and _answered_later(messages, i, before)
                   for i, (m, before) in enumerate(zip(messages, _open_calls(messages), strict=True)))

    assert interleaved(find(conversations(), interleaved, settings=SEARCH))


def test_conversations_put_a_user_turn_after_a_call_that_is_never_answered():
    def interrupted(messages: list[Message]) -> bool:
        return any(m.is_user_turn and before and not _answered_later(messages, i, before)
                   for i, (m, before) in enumerate(zip(messages, _open_calls(messages), strict=True)))

    example = find(conversations(), interrupted, settings=SEARCH)
    assert interrupted(example) and any(m.role == "assistant" and m.tool_calls for m in example)


def test_conversations_answer_some_parallel_calls_and_leave_the_others_open():
    def partly(messages: list[Message]) -> bool:
        answered = {r.call_id for m in messages for r in m.tool_results}
        return any(len({c.id for c in m.tool_calls} & answered) == len(m.tool_calls) - 1 >= 1 for m in messages)

    assert partly(find(conversations(), partly, settings=SEARCH))
