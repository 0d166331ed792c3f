"""Claude Code ``attachment`` records: context the CLI sends with the next request, counted as
``injected`` user messages (sessions/FORMATS.md (a); dp_compact.sessions.claude_code_attachments)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dp_compact.measure.estimation import measured_token_ratio
from dp_compact.sessions import read_session
from dp_compact.sessions.claude_code_attachments import attachment_text
from dp_compact.measure.tokens import MESSAGE_OVERHEAD_TOKENS, count_message_tokens, count_text_tokens
from tests.conftest import SESSIONS


def _cc(kind: str, uuid: str, parent: str | None, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s", **extra}


def _assistant(uuid: str, parent: str, mid: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    usage = {"input_tokens": 3, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 10, "output_tokens": 5}
    return _cc("assistant", uuid, parent, message={"id": mid, "role": "assistant", "model": "claude-x", "content": blocks, "usage": usage})


def _write(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    path = tmp_path / "cc.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


NOTIFICATION = "<task-notification>\n<task-id>b1</task-id>\n<status>completed</status>\n</task-notification>"
FILE = {"type": "file", "filename": "/w/app.py",
        "content": {"type": "text", "file": {"filePath": "/w/app.py", "content": "import os\nprint(1)", "startLine": 1}}}


def _session_with_attachments(tmp_path: Path) -> Path:
    use = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
    return _write(tmp_path, [
        _cc("user", "u1", None, message={"role": "user", "content": "run it"}),
        _assistant("a1", "u1", "msg_1", [use]),
        _cc("attachment", "x1", "a1", attachment={"type": "queued_command", "prompt": NOTIFICATION, "commandMode": "task-notification"}),
        _cc("user", "r1", "x1", message={"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
            sourceToolAssistantUUID="a1"),
        _cc("attachment", "x2", "r1", attachment=FILE),
        _cc("attachment", "x3", "x2", attachment={"type": "already_read_file", "filename": "/w/app.py"}),
        _cc("attachment", "x4", "x2", attachment={"type": "never_seen_before", "note": "ünïcode"}),
        _assistant("a2", "x4", "msg_2", [{"type": "text", "text": "done"}]),
    ])


def test_attachments_are_injected_messages_after_the_results_they_follow(tmp_path: Path) -> None:
    session = read_session(_session_with_attachments(tmp_path))
    assert [m.kind for m in session.messages] == ["prompt", "assistant", "tool_result", "injected", "injected", "injected", "assistant"]
    queued, file, unknown = session.messages[3:6]
    assert [m.line for m in (queued, file, unknown)] == [3, 5, 7]
    assert queued.text == f"<system-reminder>\n{NOTIFICATION}\n</system-reminder>"
    assert "Result of calling the Read tool:\n1\timport os\n2\tprint(1)" in file.text
    assert unknown.text == '<system-reminder>\n{"type":"never_seen_before","note":"ünïcode"}\n</system-reminder>'
    assert session.user_turns == 1  # injected context is not a user turn
    assert [t.call_id for t in session.messages[2].tool_results] == ["t1"]


def test_attachment_tokens_are_those_of_the_text_claude_code_sends(tmp_path: Path) -> None:
    session = read_session(_session_with_attachments(tmp_path))
    queued = session.messages[3]
    expected = int(count_text_tokens([f"<system-reminder>\n{NOTIFICATION}\n</system-reminder>"])[0]) + MESSAGE_OVERHEAD_TOKENS
    assert int(count_message_tokens([queued])[0]) == expected


@pytest.mark.parametrize(("attachment", "expected"), [
    ({"type": "skill_listing", "content": "- simplify: review code"}, "available for use with the Skill tool:\n\n- simplify: review code"),
    ({"type": "deferred_tools_delta", "addedNames": ["A", "B"]}, "now available via ToolSearch:\nA\nB"),
    ({"type": "mcp_instructions_delta", "addedNames": ["pay"], "addedBlocks": ["## pay\nuse it"]}, "## pay\nuse it"),
    ({"type": "selected_lines_in_ide", "lineStart": 1, "lineEnd": 2, "filename": "/r.md", "content": "x\ny"},
     "selected the lines 1 to 2 from /r.md:\nx\ny"),
    ({"type": "compact_file_reference", "filename": "/w/big.py"}, "Note: /w/big.py was read before the last conversation"),
    ({"type": "task_reminder", "content": [{"id": "6", "subject": "Compute pillar"}], "itemCount": 1}, '"subject":"Compute pillar"'),
    ({"type": "todo_reminder", "content": [], "itemCount": 0}, "The TodoWrite tool hasn't been used recently"),
])
def test_each_attachment_type_renders_its_content(attachment: dict[str, Any], expected: str) -> None:
    text, images = attachment_text(attachment)
    assert expected in text and text.startswith("<system-reminder>") and images == 0


def test_image_file_attachment_is_one_image_not_its_bytes() -> None:
    text, images = attachment_text({"type": "file", "filename": "/s.png", "content": {"type": "image", "file": {"base64": "iVBOR" * 99}}})
    assert images == 1 and "iVBOR" not in text


def _shared(name: str) -> Path:
    path = SESSIONS / "claude_code" / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path


@pytest.mark.parametrize("name", ["cc_fundwise.jsonl", "cc_posthog_dashboard_compact.jsonl", "cc_privacy_x402.jsonl"])
def test_real_attachments_are_all_read(name: str) -> None:
    path = _shared(name)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    lines = {i for i, r in enumerate(records, 1) if r.get("type") == "attachment" and not r.get("isSidechain")}
    session = read_session(path)
    injected = {m.line for m in session.history if m.kind == "injected"}
    assert lines and lines <= injected


def test_posthog_files_reread_after_the_compaction_are_in_the_live_conversation() -> None:
    session = read_session(_shared("cc_posthog_dashboard_compact.jsonl"))
    by_line = {m.line: m for m in session.messages}
    assert all(by_line[line].kind == "injected" for line in (833, 834, 835, 836, 837))
    assert "1\tstreamlit>=1.36\n2\tpandas>=2.0" in by_line[836].text  # requirements.txt as the Read tool shows it
    assert session.user_turns == 15


def test_counting_attachments_brings_the_posthog_token_scale_toward_one() -> None:
    """The provider's prompt grew 2.54 tokens per counted token of the live conversation without
    its attachments; with them, under 2 (what remains: thinking kept in context but not written
    to the file, tool schemas loaded on demand, the tokenizer)."""
    path = _shared("cc_posthog_dashboard_compact.jsonl")
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    attachment_lines = {i for i, r in enumerate(records, 1) if r.get("type") == "attachment"}
    session = read_session(path)
    bare = replace(session, messages=tuple(m for m in session.messages if m.line not in attachment_lines))
    without = measured_token_ratio(bare, count_message_tokens(bare.messages))
    ratio = measured_token_ratio(session, count_message_tokens(session.messages))
    assert without is not None and without > 2.4
    assert ratio is not None and 1.0 < ratio < 2.0
