"""Markers of earlier compactions among the system messages (``[compact_boundary]``, DESIGN §5.7).

Such a marker lies before the live conversation, in the history the new summary replaces: a
compaction archives it with the head instead of writing it ahead of the summary, while the
system messages that are instructions stay first, and clearing (which keeps every message)
keeps it.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.pipeline.archive import ArchiveStore
from dp_compact.pipeline.clear import clear_session
from dp_compact.pipeline.compact import compact_file
from dp_compact.pipeline.validate import validate_messages
from dp_compact.sessions import read_session
from dp_compact.settings import load_settings
from tests.conftest import SESSIONS, need
from tests.pipeline_helpers import FakeArchiver, read_jsonl, write_jsonl

BOUNDARY = "[compact_boundary]"
PROMPT = {"role": "system", "content": "You are a careful coding agent. Never push to main."}
MARKER = {"role": "system", "content": "[compact_boundary] Conversation compacted"}
HANDOVER = ("This session is being continued from a previous conversation that ran out of context. The summary below"
            " covers the earlier portion of the conversation.\n\nSummary: the user asked to fix src/app.py.")


def _markers_before_summary(messages: list[dict]) -> list[dict]:
    """The system messages written before the summary message that opens with ``[summary]``."""
    lead = []
    for message in messages:
        if message.get("role") == "user" and str(message.get("content", "")).startswith("[summary]"):
            return [m for m in lead if m.get("role") == "system" and str(m.get("content", "")).startswith(BOUNDARY)]
        lead.append(message)
    raise AssertionError("no summary message in the output")


def _round(n: int, lines: int = 200) -> list[dict]:
    """A user turn with one tool call, its long result and an answer (OpenAI chat)."""
    call = {"id": f"call_{n}", "type": "function", "function": {"name": "Read", "arguments": json.dumps({"file_path": f"src/part_{n}.py"})}}
    return [
        {"role": "user", "content": f"Task {n}: look at src/part_{n}.py."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{n}", "content": f"line {n}\n" * lines},
        {"role": "assistant", "content": f"Part {n} looks fine."},
    ]


def _built(tmp_path: Path) -> tuple[Path, list[dict]]:
    """System prompt, an earlier history, a boundary marker and Claude Code's summary mid-file, then live turns."""
    messages = [PROMPT, *_round(0), MARKER, {"role": "user", "content": HANDOVER},
                {"role": "assistant", "content": "Understood, continuing."}, *_round(1), *_round(2), *_round(3)]
    return write_jsonl(tmp_path / "session.jsonl", messages), messages


def test_a_boundary_marker_goes_into_the_archived_head_and_the_system_prompt_stays_first(tmp_path: Path):
    source, messages = _built(tmp_path)
    store, out = ArchiveStore(tmp_path / "archive"), tmp_path / "out.jsonl"
    result = compact_file(source, load_settings(), output=out, keep=4, to="openai", archiver=store)
    assert result.decision == "compact"
    written = read_jsonl(out)
    assert written[0] == PROMPT  # the instruction is kept, first
    assert written[1]["role"] == "user" and written[1]["content"].startswith("[summary]")
    assert _markers_before_summary(written) == []
    assert not any(str(m.get("content", "")).startswith(BOUNDARY) for m in written)
    assert written[-4:] == messages[-4:] and validate_messages(written, "openai") == ()
    assert any("1 marker(s) of earlier compactions" in note for note in result.notes)
    # The archive holds the marker, where it stood (before message 0), and the head; #msg-N still names message N.
    live_start = messages.index(MARKER) + 1
    assert store.restore(result.archive_ref) == [MARKER, *messages[live_start : len(messages) - 4]]
    assert store.restore(f"{result.archive_ref}#msg-0") == [messages[live_start]]
    for anchor in result.anchors:
        assert store.restore(f"{result.archive_ref}#msg-{anchor.index}") == [messages[live_start + anchor.index]]


def test_clearing_keeps_the_boundary_marker_before_the_summary_it_precedes(tmp_path: Path):
    """Clearing keeps every message, the earlier summary too: its marker stays where it was written."""
    source, _ = _built(tmp_path)
    cleared = clear_session(read_session(source), keep=2, to="openai", archiver=FakeArchiver())
    assert list(cleared.messages[:2]) == [PROMPT, MARKER]


def test_real_converted_session_writes_no_marker_before_the_summary_and_restores(tmp_path: Path):
    """oai_task393c91_converted.json holds two ``[compact_boundary]`` markers mid-file (each before
    Claude Code's summary): none is written ahead of the new summary; the archive holds them, and
    archive plus output give back every message of the input from the first marker on, but the
    history before the last marker that the input had already compacted (never live)."""
    path = need(SESSIONS / "openai_chat" / "oai_task393c91_converted.json")
    original = json.loads(path.read_text("utf-8"))["messages"]
    at = [i for i, m in enumerate(original) if m["role"] == "system" and m["content"].startswith(BOUNDARY)]
    markers = [original[i] for i in at]
    assert len(markers) == 2
    out, runner = tmp_path / "out.jsonl", CliRunner()
    done = runner.invoke(app, ["compact", str(path), "--force", "-o", str(out), "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["decision"] == "compact" and data["written"]
    written = read_jsonl(out)
    assert _markers_before_summary(written) == []
    assert written[0]["role"] == "user" and written[0]["content"].startswith("[summary]")
    assert validate_messages(written, "openai") == ()
    restored = runner.invoke(app, ["restore", data["archive_ref"]])
    assert restored.exit_code == 0, restored.output
    archived = [json.loads(line) for line in restored.stdout.splitlines() if line.strip()]
    assert archived[:2] == markers
    live = original[at[-1] + 1 :]  # the live conversation: from the last marker's summary on
    tail = written[len(written) - data["k"] :]

    def key(message: dict) -> str:
        return json.dumps(message, sort_keys=True)

    assert sorted(map(key, archived + tail)) == sorted(map(key, markers + live))
