"""Repairs that make real transcripts writable for the APIs, and failures that leave nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.pipeline.convert import MISSING_RESULT_TEXT, ORPHAN_RESULT_PREFIX, to_api
from dp_compact.pipeline.validate import validate_messages
from dp_compact.sessions.anthropic import message_from_anthropic
from tests.conftest import SESSIONS
from tests.pipeline_helpers import read_jsonl, sdk_errors

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[1] / "dp_compact" / "examples" / "session.jsonl"


def _messages(rows):
    return [message_from_anthropic(r) for r in rows]


def test_to_api_drops_keys_the_api_refuses():
    rows = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok", "usage": {"input_tokens": 5}, "metrics": {}}]
    written = to_api(_messages(rows), "anthropic")
    assert written == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    assert not validate_messages(written, "anthropic")


def test_to_api_turns_orphan_result_into_text_and_answers_lost_calls():
    rows = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "lost", "content": "old output"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "b", "name": "Read", "input": {}}]},
    ]
    anthropic = to_api(_messages(rows), "anthropic")
    assert not validate_messages(anthropic, "anthropic"), validate_messages(anthropic, "anthropic")
    answer = anthropic[2]["content"]
    assert answer[0] == {"type": "tool_result", "tool_use_id": "a", "content": MISSING_RESULT_TEXT, "is_error": True}
    assert answer[1]["type"] == "text" and answer[1]["text"].startswith(ORPHAN_RESULT_PREFIX.format(id="lost"))
    assert "old output" in answer[1]["text"]
    assert anthropic[-1] == rows[-1]  # a pending call at the end stays pending
    openai = to_api(_messages(rows), "openai")
    assert not validate_messages(openai, "openai"), validate_messages(openai, "openai")
    assert not sdk_errors(openai, "openai") and not sdk_errors(anthropic, "anthropic")


def test_to_api_drops_blank_text_blocks_and_messages_left_empty():
    call = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
    rows = [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": [{"type": "text", "text": ""}, call]},  # empty: refused anywhere
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]},
        {"role": "assistant", "content": [{"type": "text", "text": " "}]},  # nothing but white space
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
    ]
    written = to_api(_messages(rows), "anthropic")
    assert not validate_messages(written, "anthropic"), validate_messages(written, "anthropic")
    assert written[1]["content"] == [call]  # the blank block goes, the call stays as it was
    assert [m["role"] for m in written] == ["user", "assistant", "user", "assistant"]  # the empty reply went; users merged
    assert written[2]["content"][0]["tool_use_id"] == "t1" and written[2]["content"][-1] == {"type": "text", "text": "thanks"}
    assert written[-1] == rows[-1]
    assert not sdk_errors(written, "anthropic")


@pytest.mark.parametrize(("content", "refused"), [
    ([{"type": "text", "text": "\n\n"}, {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}], None),
    ([{"type": "text", "text": " "}, {"type": "text", "text": "ok"}], None),
    ([{"type": "text", "text": " "}], "text content blocks must contain non-whitespace text"),
    ([{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": " "}], "text content blocks must contain non-whitespace text"),
    ([{"type": "text", "text": ""}, {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}], "text content blocks must be non-empty"),
    ([{"type": "text", "text": ""}, {"type": "text", "text": "x"}], "text content blocks must be non-empty"),
])
def test_white_space_text_is_refused_only_where_the_messages_api_refuses_it(content, refused):
    """The Messages API's rule, as requests sent to it showed: an empty text block is refused anywhere, a white-space
    one only in a message with no other content; repairs drop exactly what validation refuses, nothing else."""
    call = [{"role": "user", "content": "go"}, {"role": "assistant", "content": content}]
    if any(b.get("type") == "tool_use" for b in content):
        call.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]})
    rules = [v.detail for v in validate_messages(call, "anthropic") if v.rule == "empty-text"]
    assert rules == ([refused] if refused else [])
    written = to_api(_messages(call), "anthropic")
    assert not validate_messages(written, "anthropic"), validate_messages(written, "anthropic")
    if refused is None:
        assert written[1]["content"] == content  # kept as recorded


def test_validate_flags_unknown_keys_blocks_and_parts():
    rules = [v.rule for v in validate_messages([{"role": "user", "content": [{"type": "weird"}], "usage": {}}], "anthropic")]
    assert rules == ["unknown-key"]  # a block type no list names is kept as recorded
    anthropic_blocks = [{"role": "user", "content": "go"},
                        {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "x", "input": {}}]}]
    assert "unknown-part" in [v.rule for v in validate_messages(anthropic_blocks, "openai")]


def test_compact_output_carries_no_usage_so_a_new_plan_estimates_the_context(tmp_path, monkeypatch):
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    out = tmp_path / "out.jsonl"
    assert runner.invoke(app, ["compact", str(EXAMPLE), "-o", str(out)]).exit_code == 0
    assert all("usage" not in m for m in read_jsonl(out))
    data = json.loads(runner.invoke(app, ["plan", str(out), "--json"]).stdout)
    assert data["context_source"] == "estimate" and data["c"] == 1


def test_compact_to_unwritable_output_archives_nothing(tmp_path, monkeypatch):
    archive = tmp_path / "archive"
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(archive))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for target in (EXAMPLE, blocker / "out.jsonl", tmp_path):
        result = runner.invoke(app, ["compact", str(EXAMPLE), "-o", str(target)])
        assert result.exit_code == 2 and result.stderr.startswith("dp-compact: ")
    assert not archive.exists() or not list(archive.rglob("*.jsonl"))


def test_curve_to_unwritable_path_is_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = runner.invoke(app, ["curve", str(EXAMPLE), "--out", str(blocker / "x.png")])
    assert result.exit_code == 2 and "cannot write the figure" in result.stderr and "Traceback" not in result.output


def test_compact_uses_the_window_the_session_records(tmp_path, monkeypatch):
    path = SESSIONS / "codex" / "codex_raze.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    data = json.loads(runner.invoke(app, ["compact", str(path), "--dry-run", "--json"]).stdout)
    plan = json.loads(runner.invoke(app, ["plan", str(path), "--json"]).stdout)
    assert plan["max_context_tokens"] == 258_400
    assert any("258,400" in note for note in data["notes"])


def test_real_transcript_with_lost_records_shrinks_and_compacts_deep(tmp_path, monkeypatch):
    path = SESSIONS / "claude_code" / "cc_task43_develop.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    for args in (["shrink", str(path), "-o", str(tmp_path / "s.jsonl")], ["compact", str(path), "-o", str(tmp_path / "c.jsonl"), "--keep", "600"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
    for name in ("s.jsonl", "c.jsonl"):
        assert not validate_messages(read_jsonl(tmp_path / name), "anthropic")


def test_compacting_twice_keeps_user_turns_calls_and_compaction_count(tmp_path, monkeypatch):
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    original = json.loads(runner.invoke(app, ["plan", str(EXAMPLE), "--json", "--l", "0"]).stdout)
    first, second = tmp_path / "1.jsonl", tmp_path / "2.jsonl"
    assert runner.invoke(app, ["compact", str(EXAMPLE), "-o", str(first)]).exit_code == 0
    assert runner.invoke(app, ["compact", str(first), "-o", str(second), "--force"]).exit_code == 0
    for path, compactions in ((first, 1), (second, 2)):
        data = json.loads(runner.invoke(app, ["plan", str(path), "--json"]).stdout)
        assert (data["t"], data["c"]) == (original["t"], compactions)
        assert data["L"] == pytest.approx(original["L"])
