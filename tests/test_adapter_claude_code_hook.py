"""``dp-compact hook`` on recorded Claude Code payloads pointing at real transcripts."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dp_compact.api import plan_file
from dp_compact.cli import app
from dp_compact.pipeline.archive import ArchiveStore
from dp_compact.sessions import read_session
from dp_compact.settings import load_settings
from tests.conftest import SESSIONS, need

TRANSCRIPTS = ("cc_raze_hooks.jsonl", "cc_privacy_x402.jsonl", "cc_fundwise.jsonl")
STATUS_LINE = re.compile(r"^ctx \d+k/\d+k · (keep all|compact now saves \$\d+\.\d\d · keep \d+)$")


def status_payload(transcript: Path) -> dict:
    """Claude Code's status line input (its documented fields), as recorded, for ``transcript``."""
    return {
        "hook_event_name": "Status", "session_id": transcript.stem, "transcript_path": str(transcript),
        "cwd": "/home/user/work/raze", "model": {"id": "claude-sonnet-4-5", "display_name": "Sonnet 4.5"},
        "workspace": {"current_dir": "/home/user/work/raze", "project_dir": "/home/user/work/raze"},
        "version": "2.1.81", "output_style": {"name": "default"},
        "cost": {"total_cost_usd": 0.42, "total_duration_ms": 120000, "total_lines_added": 10, "total_lines_removed": 2},
    }


def pre_compact_payload(transcript: Path, trigger: str = "auto") -> dict:
    """Claude Code's PreCompact hook input, as recorded, for ``transcript``."""
    return {
        "session_id": transcript.stem, "transcript_path": str(transcript), "cwd": "/home/user/work/raze",
        "permission_mode": "default", "hook_event_name": "PreCompact", "trigger": trigger, "custom_instructions": "",
    }


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_hook_status_line_is_one_line_and_matches_the_plan(name):
    transcript = need(SESSIONS / "claude_code" / name)
    done = CliRunner().invoke(app, ["hook"], input=json.dumps(status_payload(transcript)))
    assert done.exit_code == 0, done.output
    line = done.stdout.strip()
    assert "\n" not in line and STATUS_LINE.match(line), line
    # the hook plans at the wall clock (DESIGN §8), without clearing old tool results (docs/settings.md DP_CLEAR_TOOL_RESULTS)
    plan = plan_file(transcript, load_settings(clear_tool_results=False), lenient=True, now=time.time())
    assert line.startswith(f"ctx {plan.estimates.context_tokens / 1000:.0f}k/{plan.prices.max_context_tokens / 1000:.0f}k")
    assert line.endswith("keep all" if plan.decision == "keep" else f"keep {plan.k}")


def test_hook_pre_compact_archives_the_live_conversation_for_recall(monkeypatch, tmp_path):
    transcript = need(SESSIONS / "claude_code" / "cc_raze_hooks.jsonl")
    before = transcript.read_bytes()
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    runner = CliRunner()
    done = runner.invoke(app, ["hook"], input=json.dumps(pre_compact_payload(transcript)))
    assert done.exit_code == 0, done.output
    ref = re.search(r"archive://\S+", done.stdout).group(0)
    live = read_session(transcript, lenient=True).messages
    assert done.stdout.startswith(f"dp-compact: archived {len(live)} messages as archive://cc_raze_hooks/")
    assert ArchiveStore(tmp_path / "archive").restore(ref) == [m.raw for m in live]  # every message the compaction drops
    first_words = next(m.text for m in live if m.role == "user").split()[:2]
    hits = json.loads(runner.invoke(app, ["recall", " ".join(first_words), "--json"]).stdout)
    assert ref in [h["ref"] for h in hits]
    assert transcript.read_bytes() == before  # the transcript is only read


def test_hook_rejects_input_without_a_transcript_in_one_line():
    done = CliRunner().invoke(app, ["hook"], input="{}")
    assert done.exit_code == 1 and done.stdout.startswith("dp-compact: no transcript_path")  # the status line is never blank
    assert done.stderr.strip() == "dp-compact: <stdin>: no transcript_path: not the JSON of a Claude Code hook or status line"
    done = CliRunner().invoke(app, ["hook"], input="not json")
    assert done.exit_code == 1 and done.stderr.startswith("dp-compact: <stdin>: not JSON")


def test_hook_status_line_shows_a_million_token_window_as_1m(monkeypatch):
    transcript = need(SESSIONS / "claude_code" / "cc_raze_hooks.jsonl")
    monkeypatch.setenv("DP_MAX_CONTEXT_TOKENS", "1000000")
    done = CliRunner().invoke(app, ["hook"], input=json.dumps(status_payload(transcript)))
    assert done.exit_code == 0, done.output
    assert re.match(r"^ctx \d+k/1M · ", done.stdout.strip()), done.stdout


def test_hook_refuses_a_file_that_is_not_a_transcript_in_one_line(tmp_path):
    notes = tmp_path / "README.md"
    notes.write_text("# Notes\n\nnot a transcript\n")
    done = CliRunner().invoke(app, ["hook"], input=json.dumps({"transcript_path": str(notes)}))
    assert done.exit_code == 1 and done.stdout.startswith("dp-compact: no message could be read")
    assert "no message could be read" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def _opening(transcript: Path) -> list[bytes]:
    """The lines Claude Code writes before the transcript's first message (progress, snapshots, queue operations)."""
    lines = transcript.read_bytes().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if json.loads(line).get("type") in ("user", "assistant"))
    return lines[:first]


@pytest.mark.parametrize("name", TRANSCRIPTS)
def test_hook_status_line_of_a_session_just_started_says_no_messages_yet(name, tmp_path):
    transcript = need(SESSIONS / "claude_code" / name)
    opening = _opening(transcript)
    copy = tmp_path / name
    for lines in ([], *(opening[:n] for n in range(1, len(opening) + 1))):
        copy.write_bytes(b"".join(lines))
        payload = {**status_payload(copy), "context_window": {"context_window_size": 200_000}}
        done = CliRunner().invoke(app, ["hook"], input=json.dumps(payload))
        assert done.exit_code == 0 and done.stdout.strip() == "ctx 0k/200k · no messages yet", (len(lines), done.output)
        session = read_session(copy)
        assert session.messages == () and session.format in ("claude_code" if lines else "empty",)
    done = CliRunner().invoke(app, ["hook"], input=json.dumps({"transcript_path": str(copy)}))
    assert done.exit_code == 0 and done.stdout.strip() == "ctx 0k · no messages yet"


def test_hook_status_line_names_compacting_on_return_when_the_plan_waits_for_it(monkeypatch):
    from dataclasses import replace as _replace

    from dp_compact.adapters import claude_code_hook
    from dp_compact.core.decision import RULE_RESUME

    path = need(SESSIONS / "claude_code" / "cc_fundwise.jsonl")
    real = plan_file(path, load_settings())
    monkeypatch.setattr("dp_compact.api.plan_session", lambda *a, **k: _replace(real, decision="keep", rule=RULE_RESUME))
    line = claude_code_hook.status_line({"transcript_path": str(path)}, load_settings())
    assert line.endswith("keep; /compact on return if away > 1 h")  # the session writes 1-hour cache entries


@pytest.mark.parametrize("name", ["cc_raze_hooks.jsonl", "cc_privacy_x402.jsonl"])
def test_hook_pre_compact_with_the_hot_paths_kept_settings_archives_the_same(name, monkeypatch, tmp_path):
    from dp_compact.adapters.claude_code_hook import archive_before_compaction
    from dp_compact.hot.settings import KeptSettings

    transcript = need(SESSIONS / "claude_code" / name)
    monkeypatch.setenv("DP_S", "900")  # a summary budget other than the default: the settings reach the archive
    settings = load_settings()
    stores = [ArchiveStore(tmp_path / f"archive-{i}") for i in range(2)]
    outcomes = [archive_before_compaction(pre_compact_payload(transcript), s, store)
                for s, store in zip((settings, KeptSettings.of(settings)), stores, strict=True)]
    refs = [o.archive_ref for o in outcomes]
    assert refs[0] != refs[1] and [o.text.replace(o.archive_ref, "") for o in outcomes] == [outcomes[0].text.replace(refs[0], "")] * 2
    metadata = [{k: v for k, v in store.metadata(ref).items() if k not in ("ref", "id", "created")} for store, ref in zip(stores, refs, strict=True)]
    assert metadata[0] == metadata[1] and stores[0].restore(refs[0]) == stores[1].restore(refs[1])


def test_hook_pre_compact_run_twice_on_the_same_conversation_archives_it_once(tmp_path):
    from dp_compact.adapters.claude_code_hook import archive_before_compaction

    transcript = need(SESSIONS / "claude_code" / "cc_raze_hooks.jsonl")
    copy = tmp_path / transcript.name
    lines = transcript.read_bytes().splitlines(keepends=True)
    copy.write_bytes(b"".join(lines[:-2]))
    store, settings = ArchiveStore(tmp_path / "archive"), load_settings()
    first, again = (archive_before_compaction(pre_compact_payload(copy), settings, store) for _ in range(2))
    assert again.archive_ref == first.archive_ref and again.text == f"{first.text} (already archived)"
    assert len(store.index.ids()) == 1
    copy.write_bytes(b"".join(lines))  # the conversation went on: a new archive
    grown = archive_before_compaction(pre_compact_payload(copy), settings, store)
    assert grown.archive_ref != first.archive_ref and "already" not in grown.text and len(store.index.ids()) == 2
