"""The structural validator (DESIGN §5.7), rule by rule, and ``dp-compact validate``."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.pipeline.validate import validate_messages
from tests.pipeline_helpers import write_jsonl

U = {"role": "user", "content": "hi"}
A = {"role": "assistant", "content": "hello"}


def _use(*ids: str, thinking: bool = False) -> dict:
    blocks = [{"type": "thinking", "thinking": "t", "signature": "s"}] if thinking else []
    return {"role": "assistant", "content": blocks + [{"type": "tool_use", "id": i, "name": "ls", "input": {}} for i in ids]}


def _res(*ids: str) -> dict:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": "x"} for i in ids]}


def _rules(messages: list, api: str = "anthropic") -> list[str]:
    return [v.rule for v in validate_messages(messages, api)]


ANTHROPIC_CASES = [
    ("valid loop with pending last call", [U, _use("a", "b", thinking=True), _res("a", "b"), _use("c")], []),
    ("first message from the assistant", [A, U], ["first-role"]),
    ("two user messages (the API combines them)", [U, U, A], []),
    ("result without its call", [U, A, _res("a")], ["orphan-tool-result"]),
    ("call answered a message late", [U, _use("a"), U, A, _res("a")], ["unanswered-tool-use", "orphan-tool-result"]),
    ("pending call not last", [U, _use("a"), U, A], ["unanswered-tool-use"]),
    ("one of two parallel calls unanswered", [U, _use("a", "b"), _res("a"), A], ["unanswered-tool-use"]),
    ("id issued twice", [U, _use("a"), _res("a"), _use("a"), _res("a")], ["duplicate-id", "duplicate-result"]),
    ("empty text block", [U, {"role": "assistant", "content": [{"type": "text", "text": " "}]}], ["empty-text"]),
    ("empty content", [U, {"role": "assistant", "content": []}], ["empty-content"]),
    ("thinking after text", [U, {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "thinking", "thinking": "t", "signature": "s"}]}], ["thinking-position"]),
    ("thinking in a user message", [{"role": "user", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}]}], ["block-in-user"]),
    ("text before tool results", [U, _use("a"), {"role": "user", "content": [{"type": "text", "text": "x"}, *_res("a")["content"]]}], ["result-position"]),
    ("system role", [{"role": "system", "content": "x"}, U], ["role"]),
]


@pytest.mark.parametrize("messages, expected", [c[1:] for c in ANTHROPIC_CASES], ids=[c[0] for c in ANTHROPIC_CASES])
def test_validate_anthropic_rules(messages, expected):
    assert _rules(messages) == expected


def _calls(*ids: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]}


def _tool(i: str) -> dict:
    return {"role": "tool", "tool_call_id": i, "content": "x"}


SYSTEM = {"role": "system", "content": "s"}
OPENAI_CASES = [
    ("valid parallel calls, pending at the end", [SYSTEM, U, _calls("a", "b"), _tool("a"), _tool("b"), A, U, _calls("c"), _tool("c"), _calls("d", "e"), _tool("d")], []),
    ("consecutive user messages are fine", [U, U, A], []),
    ("system after the conversation", [U, SYSTEM, A], ["system-first"]),
    ("tool message without its call", [U, A, _tool("a")], ["orphan-tool-result"]),
    ("tool message after a user message", [U, _calls("a"), U, _tool("a")], ["unanswered-tool-call", "orphan-tool-result"]),
    ("call never answered", [U, _calls("a"), A], ["unanswered-tool-call"]),
    ("id issued twice", [U, _calls("a"), _tool("a"), _calls("a"), _tool("a")], ["duplicate-id", "duplicate-result"]),
    ("assistant with nothing", [U, {"role": "assistant", "content": None}], ["empty-assistant"]),
    ("unknown role", [U, {"role": "model", "content": "x"}], ["role"]),
]


@pytest.mark.parametrize("messages, expected", [c[1:] for c in OPENAI_CASES], ids=[c[0] for c in OPENAI_CASES])
def test_validate_openai_rules(messages, expected):
    assert _rules(messages, "openai") == expected


def test_validate_no_messages_is_a_violation_and_unknown_api_an_error():
    assert _rules([], "openai") == ["empty"]
    with pytest.raises(ValueError):
        validate_messages([U], "gemini")  # type: ignore[arg-type]


def test_cli_validate_exit_codes_ok_violations_unreadable(tmp_path: Path):
    runner = CliRunner()
    good = write_jsonl(tmp_path / "good.jsonl", [U, _use("a"), _res("a"), A])
    bad = write_jsonl(tmp_path / "bad.jsonl", [U, A, _res("a")])
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"role": "user", "content": "hi"}\n{"role": \n', "utf-8")
    result = runner.invoke(app, ["validate", str(good), "--api", "anthropic"])
    assert result.exit_code == 0 and result.output.startswith("OK")
    result = runner.invoke(app, ["validate", str(bad), "--api", "anthropic"])
    assert result.exit_code == 1 and "orphan-tool-result" in result.output
    result = runner.invoke(app, ["validate", str(broken), "--api", "openai"])
    assert result.exit_code == 2 and "broken.jsonl:2" in result.output
    result = runner.invoke(app, ["validate", str(good), "--api", "gemini"])
    assert result.exit_code == 2


def test_validate_server_tool_result_of_any_name_is_a_block_of_its_assistant_message():
    # An advisor's result (a server tool the block list does not name) sits beside its
    # server_tool_use in the assistant message the API returned: valid, as web_search_tool_result is.
    call = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "advisor", "input": {}}
    result = {"type": "advisor_tool_result", "tool_use_id": "srvtoolu_1", "content": {"type": "advisor_result", "text": "full jitter"}}
    messages = [
        {"role": "user", "content": "ask the advisor"},
        {"role": "assistant", "content": [call, result, {"type": "text", "text": "Full jitter it is."}]},
    ]
    assert validate_messages(messages, "anthropic") == ()
    # In a user message, or without its call, a server tool's result breaks its pairing rule.
    as_user = [{"role": "user", "content": [result]}]
    assert [v.rule for v in validate_messages(as_user, "anthropic")] == ["server-result"]
    alone = [{"role": "user", "content": "x"}, {"role": "assistant", "content": [result]}]
    assert [v.rule for v in validate_messages(alone, "anthropic")] == ["server-result"]
    # A block type no list names is kept as recorded (the API adds types faster than any list).
    odd = [{"role": "user", "content": "x"}, {"role": "assistant", "content": [{"type": "advisor_result", "text": "y"}]}]
    assert validate_messages(odd, "anthropic") == ()
