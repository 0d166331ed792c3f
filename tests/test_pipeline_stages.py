"""Pipeline stages one by one: split, shrink, anchors, summarize, reassemble (DESIGN §5)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_compact.errors import NoFeasibleCutError, SummaryTooShortError
from dp_compact.pipeline.anchors import carried_instructions, head_instructions, select_anchors
from dp_compact.pipeline.reassemble import reassemble, summary_message_text
from dp_compact.pipeline.shrink import PREVIEW_MAX_CHARS, PREVIEW_MIN_CHARS, preview, shrink_messages, shrink_session
from dp_compact.pipeline.split import cut_blocker, cut_for_keep, keep_moved_note, nearest_feasible_keeps, split
from dp_compact.pipeline.summarize import ExtractiveSummarizer, SummaryRequest, check_summary, with_instructions
from dp_compact.pipeline.texts import parse_sections, texts
from dp_compact.sessions.anthropic import message_from_anthropic
from dp_compact.conversation import Message, Session, ToolCall, ToolResult
from dp_compact.measure.tokens import count_text_tokens

USER = Message("user", "Fix src/app.py. Never push to main.", raw={"role": "user", "content": "Fix src/app.py. Never push to main."})


def _loop(n_rounds: int, result_text: str = "ok") -> list[Message]:
    """A user turn and ``n_rounds`` API rounds (Anthropic shape), each with raw dicts."""
    messages = [USER]
    for r in range(n_rounds):
        use = {"type": "tool_use", "id": f"t{r}", "name": "Bash", "input": {"command": f"pytest tests/test_{r}.py"}}
        messages.append(message_from_anthropic({"role": "assistant", "content": [use]}))
        result = {"type": "tool_result", "tool_use_id": f"t{r}", "content": result_text}
        messages.append(message_from_anthropic({"role": "user", "content": [result]}))
    return messages


# ---------------------------------------------------------------- split


def test_cut_for_keep_on_tool_result_moves_to_the_round_opening_assistant():
    messages = _loop(3)  # U A R A R A R
    assert cut_for_keep(messages, 1) == 5  # keeping 1 would open on R: keep 2 from its assistant
    assert cut_for_keep(messages, 2) == 5
    assert cut_for_keep(messages, 3) == 3
    assert cut_for_keep(messages, 6) == 1


def test_cut_for_keep_more_than_droppable_raises():
    with pytest.raises(NoFeasibleCutError):
        cut_for_keep(_loop(2), 5)
    with pytest.raises(NoFeasibleCutError):
        cut_for_keep(_loop(2), 0)


def _numbered(messages: list[Message]) -> list[Message]:
    """The messages with source lines 1..N, as a JSONL reader gives them."""
    from dataclasses import replace

    return [replace(m, line=i + 1) for i, m in enumerate(messages)]


def test_cut_blocker_tail_opening_on_a_tool_result_names_the_result_and_its_call():
    blocker = cut_blocker(_numbered(_loop(3)), 6, path="s.jsonl")  # U A R A R A R: message 6 is R(t2)
    assert (blocker.index, blocker.line, blocker.call_id) == (6, 7, "t2")
    assert blocker.reason == "the tail would open on message 6 (s.jsonl:7), the result of tool call t2 made by message 5 (s.jsonl:6)"


def test_cut_blocker_parallel_results_name_the_first_result_cut_from_its_call():
    use = [{"type": "tool_use", "id": f"p{i}", "name": "Read", "input": {}} for i in range(2)]
    messages = _numbered([USER, message_from_anthropic({"role": "assistant", "content": use}),
                          message_from_anthropic({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "p0", "content": "a"}]}),
                          message_from_anthropic({"role": "assistant", "content": "reading the second"}),
                          message_from_anthropic({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "p1", "content": "b"}]}),
                          message_from_anthropic({"role": "assistant", "content": "done"})])
    blocker = cut_blocker(messages, 3, path="s.jsonl")  # opens on an assistant, but p1's result follows
    assert (blocker.index, blocker.line, blocker.call_id) == (4, 5, "p1")
    assert "message 4 (s.jsonl:5) holds the result of tool call p1 made by message 1 (s.jsonl:2)" in blocker.reason


def test_cut_blocker_feasible_or_out_of_range_cut_is_none():
    messages = _loop(2)
    assert [cut_blocker(messages, cut) for cut in (0, 1, 3, 5)] == [None] * 4


def test_nearest_feasible_keeps_on_both_sides():
    messages = _loop(3)  # N = 7, feasible cuts 1, 3, 5: keeps 6, 4, 2
    assert nearest_feasible_keeps(messages, 3) == (2, 4)
    assert nearest_feasible_keeps(messages, 1) == (None, 2)
    assert nearest_feasible_keeps(messages, 7) == (6, None)


def test_keep_moved_note_says_which_keep_was_used_and_why():
    messages = _numbered(_loop(3))
    assert keep_moved_note(messages, 4, cut_for_keep(messages, 4), path="s.jsonl") is None  # met exactly
    note = keep_moved_note(messages, 3, cut_for_keep(messages, 3), path="s.jsonl")
    assert note == (
        "--keep 3 cannot be met exactly: the tail would open on message 4 (s.jsonl:5), the result of tool call t1"
        " made by message 3 (s.jsonl:4); kept 4 instead (nearest feasible keep values: 2 below, 4 above)"
    )


def test_cut_for_keep_error_names_the_blocking_message_and_the_nearest_feasible_keep():
    messages = _numbered(_loop(3))
    with pytest.raises(NoFeasibleCutError) as caught:
        cut_for_keep(messages, 6, user_turns_only=True, path="s.jsonl")  # only cut 0 is a user turn
    error = caught.value
    assert str(error) == (
        "s.jsonl: no feasible cut keeps at least 6 of 7 messages and drops one: message 1 (s.jsonl:2) is not a user"
        " turn with plain text content, and DP_MODEL=seed cuts only there; no cut at all is feasible"
    )
    assert (error.path, error.line, error.call_id, error.below, error.above) == ("s.jsonl", 2, None, None, None)
    with pytest.raises(NoFeasibleCutError) as caught:
        cut_for_keep(messages, 5, user_turns_only=True, path="s.jsonl")
    assert (caught.value.line, caught.value.call_id) == (3, "t0")
    assert "the tail would open on message 2 (s.jsonl:3), the result of tool call t0 made by message 1 (s.jsonl:2)" in str(caught.value)
    with pytest.raises(NoFeasibleCutError, match="drops at least one of the 7 messages; the nearest feasible keep is 6") as caught:
        cut_for_keep(messages, 9, path="s.jsonl")
    assert (caught.value.below, caught.value.above) == (6, None)


def test_split_rejects_an_infeasible_cut_and_splits_a_feasible_one():
    messages = _loop(2)
    with pytest.raises(NoFeasibleCutError):
        split(messages, 2)  # would open on a tool result
    head, tail = split(messages, 3)
    assert head == tuple(messages[:3]) and tail == tuple(messages[3:])


# ---------------------------------------------------------------- shrink


@settings(max_examples=80, deadline=None)
@given(st.text(min_size=801, max_size=6000))
def test_preview_of_any_long_text_is_400_to_600_characters_and_states_the_size(text):
    shown = preview(text)
    assert PREVIEW_MIN_CHARS <= len(shown) <= PREVIEW_MAX_CHARS
    assert f"{len(text):,} characters" in shown


def test_preview_of_json_keeps_key_fields_and_of_text_keeps_errors_head_and_tail():
    data = {"status": "failed", "id": "run-42", "rows": list(range(400)), "error": "disk full"}
    shown = preview(json.dumps(data))
    assert "JSON" in shown and "status: \"failed\"" in shown and "error: \"disk full\"" in shown and "rows: [400 items]" in shown
    log = "first line\n" + "noise\n" * 300 + "ERROR: connection refused\n" + "noise\n" * 300 + "last line"
    shown = preview(log)
    assert "first line" in shown and "last line" in shown and "ERROR: connection refused" in shown


def test_shrink_messages_copies_and_leaves_short_results_and_the_input_alone():
    messages = _loop(2, result_text="x" * 5000)
    shrunk = shrink_messages(messages)
    assert messages[2].tool_results[0].text == "x" * 5000  # input untouched
    assert len(shrunk[2].tool_results[0].text) <= PREVIEW_MAX_CHARS
    assert shrunk[2].raw["content"][0]["content"] == shrunk[2].tool_results[0].text
    assert shrunk[0] is messages[0] and shrunk[1] is messages[1]


def test_shrink_session_only_touches_results_before_the_last_user_turns():
    messages = _loop(2, "y" * 2000) + [Message("user", "next", raw={"role": "user", "content": "next"})] + _loop(1, "z" * 2000)[1:]
    session = Session(path="s", format="anthropic", messages=tuple(messages))
    result = shrink_session(session, keep_turns=1)
    assert result.shrunk_results == 2 and result.protected_from == 5
    assert result.messages[5:] == tuple(messages[5:]) and all(a is b for a, b in zip(result.messages[5:], messages[5:]))
    assert shrink_session(session, keep_turns=3).shrunk_results == 0  # fewer user turns: nothing is old


# ---------------------------------------------------------------- anchors


def test_select_anchors_prefers_user_turns_paths_and_errors_in_order():
    head = _loop(3) + [Message("assistant", "All good.")]
    errors = [message_from_anthropic({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Traceback: ValueError in src/app.py"}]})]
    head = head[:4] + errors + head[5:]
    anchors = select_anchors(head, limit=2)
    assert [a.index for a in anchors] == sorted(a.index for a in anchors)
    assert {a.index for a in anchors} == {0, 4}
    assert anchors[0].snippet.startswith("Fix src/app.py") and "ValueError" in anchors[1].snippet


def test_head_instructions_carry_a_previous_summary_forward():
    previous = summary_message_text(
        "User instructions (still in force):\n- Never deploy on Fridays.", (), None, n_messages=3, head_tokens=10
    )
    head = [Message("user", previous, raw={"role": "user", "content": previous}), Message("assistant", "ok"), USER]
    assert carried_instructions(previous) == ["Never deploy on Fridays."]
    assert head_instructions(head) == ["Never deploy on Fridays.", "Never push to main."]


def test_anchors_leave_out_a_message_of_injected_blocks_only():
    """A ``<system-reminder>`` the client added is not the conversation's: it gives no anchor,
    while the same paths typed by the user do."""
    reminder = Message("user", "<system-reminder>The task tools haven't been used recently. Edit src/app.py or "
                       "src/lib/util.py.</system-reminder>", kind="injected")
    head = [USER, Message("assistant", "ok"), reminder, Message("assistant", "done")]
    anchors = select_anchors(head, limit=4)
    assert 2 not in {a.index for a in anchors} and 0 in {a.index for a in anchors}
    assert not any("system-reminder" in a.snippet for a in anchors)


def test_instructions_of_another_tools_summary_leave_out_its_note_to_the_model():
    """Claude Code closes its summary with a note about the hand-over ("Resume directly — do not
    acknowledge the summary"): not the user's instruction; the user's own, inside it, are carried."""
    summary = ("This session is being continued from a previous conversation that ran out of context. The summary "
               "below covers the earlier portion of the conversation.\n\nSummary:\n1. Primary Request and Intent:\n"
               "   The user said: never commit generated files.\n\nIf you need specific details from before compaction "
               "(like exact code snippets), read the full transcript at: /home/u/t.jsonl\nContinue the conversation from "
               "where it left off without asking the user any further questions. Resume directly — do not acknowledge "
               "the summary, do not recap what was happening. Pick up the last task as if the break never happened.")
    assert carried_instructions(summary) == ["The user said: never commit generated files."]
    head = [Message("user", summary, raw={"role": "user", "content": summary}), Message("assistant", "ok"), USER]
    assert head_instructions(head) == ["The user said: never commit generated files.", "Never push to main."]


def test_an_instruction_that_leads_into_a_list_is_taken_with_its_items():
    text = "Please do this.\nDo not leave the system in a state where:\n- the migrations are not applied\n- tests fail\nThanks."
    head = [Message("user", text, raw={"role": "user", "content": text})]
    assert head_instructions(head) == ["Do not leave the system in a state where: - the migrations are not applied - tests fail"]
    lone = "Never leave it like this:\nok"
    assert head_instructions([Message("user", lone, raw={"role": "user", "content": lone})]) == []


def test_an_instruction_given_as_a_list_item_is_carried_once_without_its_bullet():
    """A rule the user wrote as a list item ("- never log the API key") is kept as its words: the
    summary's own bullet is not doubled ("- - never ..."), and a second compaction that reads it
    back from the first summary carries the same one sentence, not a second copy."""
    text = "Some rules for this repo.\n- never log the API key\n2. Always run the tests before a commit"
    head = [Message("user", text, raw={"role": "user", "content": text}), Message("assistant", "ok")]
    first = head_instructions(head)
    assert first == ["never log the API key", "Always run the tests before a commit"]
    summary = ExtractiveSummarizer()(_request(head, instructions=first))
    assert "- - " not in summary and "\n- never log the API key\n" in summary
    previous = summary_message_text(summary, (), None, n_messages=2, head_tokens=30)
    assert carried_instructions(previous) == first
    again = [Message("user", previous, raw={"role": "user", "content": previous}), Message("assistant", "ok"), *head]
    assert head_instructions(again) == first


def test_decisions_leave_out_the_continuation_of_a_wrapped_sentence():
    wrapped = ("I'll use the per-author median instead of the mean, since it is robust to outliers.\n"
               "weak signals are dropped instead; judgment is left to the reader.")
    head = [USER, Message("assistant", wrapped)]
    sections = parse_sections(ExtractiveSummarizer()(_request(head, instructions=head_instructions(head))))
    said = sections.get("decisions", []) + sections.get("open_items", [])  # "I'll" is both
    assert any(d.startswith("I'll use the per-author median") for d in said)
    assert not any("judgment is left" in d for d in said)


# ---------------------------------------------------------------- summarize


def _request(head, target=500, limit=1000, instructions=()):
    return SummaryRequest(head=tuple(head), shrunk_head=shrink_messages(head), previous_summary=None,
                          target_tokens=target, max_tokens=limit, instructions=tuple(instructions))


def test_extractive_summary_has_labelled_sections_from_the_head():
    head = _loop(2, "FAILED tests/test_1.py::test_x - AssertionError")
    body = ExtractiveSummarizer()(_request(head, instructions=head_instructions(head)))
    sections = parse_sections(body)
    assert sections["requests"] == ["Fix src/app.py. Never push to main."]
    assert sections["instructions"] == ["Never push to main."]
    assert "pytest tests/test_1.py" in sections["commands"]
    assert any("AssertionError" in e for e in sections["errors"])
    assert "tests/test_0.py" in "\n".join(sections["files"])


def test_extractive_summary_is_sized_to_about_s_and_never_above_the_limit():
    head = [USER] + [Message("user", f"Please edit src/module_{i}/file_{i}.py and run job {i} carefully now.") for i in range(400)]
    for target in (100, 500):
        body = ExtractiveSummarizer()(_request(head, target=target, limit=2 * target))
        tokens = int(count_text_tokens([body])[0])
        assert 0.7 * target <= tokens <= 2 * target


def test_check_summary_rejects_empty_and_too_short_summaries():
    head = _loop(3, "z" * 3000)
    with pytest.raises(SummaryTooShortError):
        check_summary("   ", head)
    with pytest.raises(SummaryTooShortError):
        check_summary("Sure.", head)
    assert check_summary("  " + "fine " * 40, head) == ("fine " * 40).strip()
    assert check_summary("hi", [Message("user", "hi")]) == "hi"  # a tiny head may have a tiny summary


def test_with_instructions_appends_lost_instructions_only():
    assert with_instructions("User goals:\n- x\n\nUser instructions (still in force):\n- Never push.", ["Never push."]).count("Never push.") == 1
    fixed = with_instructions("An LLM summary that paraphrased everything.", ["Never push to main."])
    assert parse_sections(fixed)["instructions"] == ["Never push to main."]


# ---------------------------------------------------------------- reassemble


def _tail(first_role: str) -> list[Message]:
    if first_role == "user":
        return [USER, message_from_anthropic({"role": "assistant", "content": [{"type": "text", "text": "done"}]})]
    return _loop(1)[1:]


@pytest.mark.parametrize("first_role, acknowledged", [("user", True), ("assistant", False)])
def test_reassemble_acknowledges_only_before_a_user_led_tail(first_role, acknowledged):
    tail = _tail(first_role)
    out = reassemble("[summary]\nx", tail, "anthropic")
    assert out[0] == {"role": "user", "content": "[summary]\nx"}
    assert (out[1] == {"role": "assistant", "content": texts().acknowledgement}) is acknowledged
    assert all(a is b.raw for a, b in zip(out[len(out) - len(tail) :], tail))  # the tail's own dicts


def test_reassemble_openai_puts_system_messages_first_unchanged():
    system = [{"role": "system", "content": "You are terse.", "name": "sys"}, {"role": "developer", "content": "Be safe."}]
    tail = [Message("user", "hi", raw={"role": "user", "content": "hi"}), Message("assistant", "hello", raw={"role": "assistant", "content": "hello"})]
    out = reassemble("[summary]\nx", tail, "openai", system_raw=system)
    assert out[:2] == system and out[2]["content"] == "[summary]\nx" and out[3]["role"] == "assistant" and out[4:] == [t.raw for t in tail]


def test_reassemble_converts_anthropic_tool_loops_to_openai_and_back():
    tail = _loop(2)[1:]
    openai = reassemble("[summary]\nx", tail, "openai")
    assert [m["role"] for m in openai] == ["user", "assistant", "tool", "assistant", "tool"]
    assert openai[1]["tool_calls"][0]["function"] == {"name": "Bash", "arguments": '{"command": "pytest tests/test_0.py"}'}
    oa_tail = [Message(m["role"] if m["role"] != "tool" else "tool", raw=m,
                       tool_calls=tuple(ToolCall(c["id"], c["function"]["name"]) for c in m.get("tool_calls") or ()),
                       tool_results=(ToolResult(m["tool_call_id"], m["content"]),) if m["role"] == "tool" else ())
               for m in openai[1:]]
    back = reassemble("[summary]\nx", oa_tail, "anthropic")
    assert [b for m in back[1:] for b in m["content"]] == [b for m in tail for b in m.raw["content"]]
