"""One rule for injected user messages, whatever the reader (patterns.INJECTED_PREFIXES)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.conversation import count_user_turns
from dp_compact.sessions import read_session
from tests.conftest import SESSIONS, need

NOTIFICATION = "<task-notification>\n<task-id>b1</task-id>\n<status>completed</status>\n</task-notification>"
REMINDER = "<system-reminder>The user opened src/app.py in the IDE.</system-reminder>"


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("text", [NOTIFICATION, REMINDER, "<local-command-stdout>ok</local-command-stdout>", "<environment_context>cwd</environment_context>"])
def test_client_written_user_messages_are_injected_in_every_reader(tmp_path, api, text):
    messages = [{"role": "user", "content": "Fix the failing test."}, {"role": "assistant", "content": "Done."},
                {"role": "user", "content": [{"type": "text", "text": text}] if api == "anthropic" else text},
                {"role": "assistant", "content": "Noted."}]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in messages), "utf-8")
    session = read_session(path)
    assert [m.kind for m in session.messages if m.role == "user"] == ["prompt", "injected"]
    assert session.user_turns == 1


def test_typed_text_after_a_reminder_stays_a_prompt(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"role": "user", "content": REMINDER + "\nNow add a test."}) + "\n", "utf-8")
    assert read_session(path).messages[0].kind == "prompt"


def test_shrink_of_a_claude_code_file_keeps_its_user_turns(tmp_path):
    """The converted (Anthropic messages) file counts the task notifications as injected, as the
    Claude Code reader does: its turns are the live turns of the source, not every user message."""
    source = need(SESSIONS / "claude_code" / "cc_posthog_dashboard_compact.jsonl")
    out = tmp_path / "shrunk.jsonl"
    done = CliRunner().invoke(app, ["shrink", str(source), "-o", str(out)])
    assert done.exit_code == 0, done.output
    original, shrunk = read_session(source), read_session(out)
    live_turns = count_user_turns(original.messages)
    assert shrunk.format == "anthropic"
    assert live_turns - 1 <= count_user_turns(shrunk.messages) <= live_turns  # 81 when notifications counted as typed
    assert shrunk.user_turns == original.user_turns  # the whole conversation's t, as the shrunk file states it
