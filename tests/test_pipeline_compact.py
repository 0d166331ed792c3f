"""``compact_file`` and the ``compact`` / ``shrink`` commands: decisions, failures, atomic writes, breaker."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.errors import CircuitOpenError, CompactionError, SummaryTooShortError
from dp_compact.pipeline.breaker import CircuitBreaker
from dp_compact.pipeline.compact import compact_file
from dp_compact.pipeline.texts import parse_sections
from dp_compact.pipeline.validate import validate_messages
from dp_compact.settings import load_settings
from tests.conftest import SESSIONS, need
from tests.pipeline_helpers import FakeArchiver, read_jsonl, write_jsonl

INSTRUCTION = "Never run migrations against production."


def _turn(n: int, *, instruction: bool = False, lines: int = 300) -> list[dict]:
    """One user turn with a tool round (Anthropic shape) and a final answer."""
    text = f"Task {n}: look at src/part_{n}.py." + (f" {INSTRUCTION}" if instruction else "")
    use = {"type": "tool_use", "id": f"toolu_{n}", "name": "Read", "input": {"file_path": f"src/part_{n}.py"}}
    return [
        {"role": "user", "content": text},
        {"role": "assistant", "content": [{"type": "text", "text": "Reading it."}, use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "line\n" * lines}]},
        {"role": "assistant", "content": f"Part {n} looks fine; I will move on to the next part."},
    ]


def _session(tmp_path: Path, turns: int = 4, lines: int = 300) -> Path:
    folder = tmp_path / "work"
    folder.mkdir(exist_ok=True)
    return write_jsonl(folder / "session.jsonl", [m for n in range(turns) for m in _turn(n, instruction=n == 0, lines=lines)])


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_compact_keep_decision_and_empty_file_write_nothing(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    result = compact_file(_session(tmp_path, turns=2, lines=2), load_settings(), output=out)
    assert result.decision == "keep" and result.rule == "wait" and not out.exists() and not result.written
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    result = compact_file(empty, load_settings(), output=out, force=True)
    assert result.decision == "keep" and result.rule == "empty" and not out.exists()


def test_compact_dry_run_archives_and_writes_nothing(tmp_path: Path):
    archive, out = FakeArchiver(), tmp_path / "out.jsonl"
    result = compact_file(_session(tmp_path), load_settings(), output=out, keep=4, dry_run=True, archiver=archive)
    assert result.decision == "compact" and result.k == 4 and result.cut == 12
    assert not out.exists() and archive.heads == {} and result.archive_ref is None
    assert INSTRUCTION in result.summary and [a.index for a in result.anchors]


def test_compact_dry_run_states_the_archive_section_a_real_run_writes(tmp_path: Path):
    """The dry run's summary holds the archive section (a placeholder reference of the real one's
    shape), so the summary size it reports is the real run's; the archive store is not touched."""
    from dp_compact.pipeline.archive import ArchiveStore

    source, store = _session(tmp_path), ArchiveStore(tmp_path / "archive")
    dry = compact_file(source, load_settings(), output=tmp_path / "dry.jsonl", keep=4, dry_run=True, archiver=store)
    assert not (tmp_path / "archive").exists() and "00000000T000000000000Z-00ff00ff" in dry.summary
    real = compact_file(source, load_settings(), output=tmp_path / "real.jsonl", keep=4, archiver=store)
    assert real.archive_ref in real.summary and abs(real.summary_tokens - dry.summary_tokens) <= 8  # the random part of an id, twice
    bare = compact_file(source, load_settings(), output=tmp_path / "bare.jsonl", keep=4, dry_run=True)
    assert bare.summary.endswith("The compacted messages were not archived.") and "no archive store: the head was not archived" in bare.notes


def test_restore_of_an_anchor_number_gives_that_message_of_the_compacted_head(tmp_path: Path):
    """The anchors a compaction lists are numbered as ``restore REF#msg-N`` takes them: message N of
    the input, for every anchor, and a number beyond the head is refused."""
    from dp_compact.errors import ArchiveError
    from dp_compact.pipeline.archive import ArchiveStore

    source, store = _session(tmp_path), ArchiveStore(tmp_path / "archive")
    result = compact_file(source, load_settings(), output=tmp_path / "out.jsonl", keep=4, archiver=store)
    originals = read_jsonl(source)
    assert result.anchors
    for anchor in result.anchors:
        assert store.restore(f"{result.archive_ref}#msg-{anchor.index}") == [originals[anchor.index]]
    with pytest.raises(ArchiveError, match="holds no message"):
        store.restore(f"{result.archive_ref}#msg-{result.cut}")


def test_compact_force_compacts_where_the_planner_keeps(tmp_path: Path):
    out = tmp_path / "out.jsonl"
    result = compact_file(_session(tmp_path, turns=2, lines=2), load_settings(), output=out, force=True, archiver=FakeArchiver())
    assert result.decision == "compact" and result.rule == "force-flag" and result.k == 3  # max(3, ⌊8·0.25 + ½⌋)
    assert validate_messages(read_jsonl(out), "anthropic") == ()


def test_compact_write_failure_leaves_no_output_no_temp_file_and_the_input_unchanged(tmp_path: Path, monkeypatch):
    source = _session(tmp_path)
    before, listing = _digest(source), sorted(os.listdir(source.parent))

    def failing_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(CompactionError, match="No space left"):
        compact_file(source, load_settings(), output=source.parent / "out.jsonl", keep=4)
    assert sorted(os.listdir(source.parent)) == listing
    assert _digest(source) == before


def test_compact_refuses_to_overwrite_the_input(tmp_path: Path):
    source = _session(tmp_path)
    before = _digest(source)
    with pytest.raises(CompactionError, match="refusing to overwrite the input"):
        compact_file(source, load_settings(), output=source, keep=4)
    assert _digest(source) == before


def test_summary_failures_open_the_circuit_breaker(tmp_path: Path):
    source, out = _session(tmp_path), tmp_path / "out.jsonl"
    clock = [1000.0]
    breaker = CircuitBreaker(tmp_path / "state" / "breaker.json", clock=lambda: clock[0])

    def empty(request) -> str:
        return ""

    for _ in range(3):
        with pytest.raises(SummaryTooShortError):
            compact_file(source, load_settings(), output=out, keep=4, summarizer=empty, breaker=breaker)
    assert breaker.failures(source) == 3

    def model(request) -> str:  # a model summarizer that would answer now
        return "The user asked to review src/part_0.py to src/part_3.py; every part looked fine. " * 4

    with pytest.raises(CircuitOpenError, match="3 consecutive summary failures"):
        compact_file(source, load_settings(), output=out, keep=4, summarizer=model, breaker=breaker)
    assert not out.exists()
    # the offline summarizer and a dry run are never blocked, and leave the breaker as it was
    assert compact_file(source, load_settings(), output=out, keep=4, summarizer=model, breaker=breaker, dry_run=True).decision == "compact"
    compact_file(source, load_settings(), output=out, keep=4, breaker=breaker)
    assert out.exists() and breaker.failures(source) == 3
    out.unlink()
    clock[0] += 601  # after the cool-down one attempt goes through; success closes the breaker
    compact_file(source, load_settings(), output=out, keep=4, summarizer=model, breaker=breaker)
    assert out.exists() and breaker.failures(source) == 0


def test_instructions_survive_many_successive_compactions(tmp_path: Path):
    current = _session(tmp_path, turns=2)
    archive = FakeArchiver()
    for step in range(6):
        out = tmp_path / f"step{step}.jsonl"
        result = compact_file(current, load_settings(), output=out, keep=3, archiver=archive)
        assert result.decision == "compact"
        messages = read_jsonl(out)
        assert INSTRUCTION in parse_sections(messages[0]["content"])["instructions"]
        assert validate_messages(messages, "anthropic") == ()
        current = write_jsonl(tmp_path / f"grown{step}.jsonl", messages + [m for n in range(2) for m in _turn(10 * step + n + 10)])
    assert len(archive.heads) == 6


def test_cli_compact_writes_reports_and_validates(tmp_path: Path):
    source, out = _session(tmp_path), tmp_path / "out.jsonl"
    runner = CliRunner()
    result = runner.invoke(app, ["compact", str(source), "--keep", "4", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["decision"] == "compact" and data["k"] == 4 and data["written"] and data["archive_ref"].startswith("archive://")
    assert validate_messages(read_jsonl(out), "anthropic") == ()
    result = runner.invoke(app, ["validate", str(out), "--api", "anthropic"])
    assert result.exit_code == 0
    openai_out = tmp_path / "openai.jsonl"
    result = runner.invoke(app, ["compact", str(source), "--keep", "4", "--to", "openai", "-o", str(openai_out)])
    assert result.exit_code == 0 and validate_messages(read_jsonl(openai_out), "openai") == ()


def test_cli_compact_nothing_to_do_dry_run_and_errors(tmp_path: Path):
    source, out = _session(tmp_path), tmp_path / "out.jsonl"
    runner = CliRunner()
    result = runner.invoke(app, ["compact", str(_session(tmp_path, turns=2, lines=2)), "-o", str(out), "--when-due"])
    assert result.exit_code == 0 and "nothing to do" in result.stdout and not out.exists()
    result = runner.invoke(app, ["compact", str(source), "--keep", "4", "--dry-run"])
    assert result.exit_code == 0 and "would compact" in result.stdout and "anchor" in result.stdout and not out.exists()
    result = runner.invoke(app, ["compact", str(source), "--keep", "99", "-o", str(out)])
    assert result.exit_code == 2 and "no feasible cut" in result.output and not out.exists()
    result = runner.invoke(app, ["compact", str(source)])
    assert result.exit_code == 2 and "-o/--output is required" in result.output


def test_cli_compact_reports_an_open_circuit_breaker(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    source, out = _session(tmp_path), tmp_path / "out.jsonl"
    breaker = CircuitBreaker()
    for _ in range(3):
        breaker.record_failure(source, "summary request failed (HTTP 500)")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # the breaker stops the request before any connection
    runner = CliRunner()
    llm = ["--summarizer", "llm", "--llm-api", "openai", "--llm-model", "gpt-4.1", "--llm-base-url", "http://127.0.0.1:9/v1"]
    result = runner.invoke(app, ["compact", str(source), "--keep", "4", "-o", str(out), *llm])
    assert result.exit_code == 2 and "paused after 3 consecutive summary failures" in result.output and not out.exists()
    result = runner.invoke(app, ["compact", str(source), "--keep", "4", "-o", str(out)])  # offline: never paused
    assert result.exit_code == 0 and out.exists() and breaker.failures(source) == 3
    out.unlink()
    result = runner.invoke(app, ["compact", str(source), "--keep", "4", "-o", str(out), *llm, "--reset-breaker", "--dry-run"])
    assert breaker.failures(source) == 0 and not out.exists()


def test_cli_shrink_replaces_old_long_results_and_keeps_recent_turns(tmp_path: Path):
    source, out = _session(tmp_path), tmp_path / "shrunk.jsonl"
    result = CliRunner().invoke(app, ["shrink", str(source), "-o", str(out), "--keep-turns", "2"])
    assert result.exit_code == 0 and "shrunk 2 tool result(s)" in result.stdout
    before, after = read_jsonl(source), read_jsonl(out)
    assert after[8:] == before[8:]  # the last two user turns, untouched
    assert after[2]["content"][0]["content"].startswith("[tool result shrunk by dp-compact: 1,500 characters")
    assert validate_messages(after, "anthropic") == ()
    result = CliRunner().invoke(app, ["shrink", str(source), "-o", str(tmp_path / "none.jsonl"), "--keep-turns", "9"])
    assert result.exit_code == 0 and "nothing to shrink" in result.stdout and not (tmp_path / "none.jsonl").exists()


def test_compact_user_turns_after_server_tool_rounds_reach_the_summary(tmp_path: Path):
    """Shared case 17's shape: web_search runs inside the assistant message; the next user messages are turns."""
    search = [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "python eol"}},
              {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}]
    rows = [
        {"role": "user", "content": "Is Python 3.9 still supported?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me check."}, *search, {"type": "text", "text": "It is not."}]},
        {"role": "user", "content": "Then move to 3.12 and keep the image tag names exactly as they are."},
        *_turn(0)[1:], *_turn(1), *_turn(2),  # 14 messages; user turns at 0, 2, 6 and 10
    ]
    session = write_jsonl(tmp_path / "s.jsonl", rows)
    result = compact_file(session, load_settings(), output=tmp_path / "out.jsonl", keep=4, archiver=FakeArchiver())
    assert result.decision == "compact" and (result.cut, result.k) == (10, 4)
    assert "keep the image tag names" in result.summary
    assert "(10 messages, 3 user turns," in result.summary  # the head's user turns, as the summary states them


def _opens_on_a_call(tmp_path: Path) -> Path:
    """A log that opens inside a tool round (what an agent writes after an earlier hand-off)."""
    lines = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_first", "name": "Bash", "input": {"command": "pytest"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_first", "content": "2 failed"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_fix", "name": "Edit", "input": {"path": "src/vat.py"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_fix", "content": "edited"}]},
        {"role": "assistant", "content": "Fixed the rounding."},
        {"role": "user", "content": "Thanks, now the invoices."},
    ]
    return write_jsonl(tmp_path / "round.jsonl", lines)


def test_cli_compact_keep_moved_says_which_keep_was_used_and_why(tmp_path: Path):
    path = _opens_on_a_call(tmp_path)
    result = CliRunner().invoke(app, ["compact", str(path), "--keep", "3", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["k"], data["cut"], data["rule"]) == (4, 2, "keep-flag")
    assert data["explanation"] == (
        f"--keep 3 cannot be met exactly: the tail would open on message 3 ({path}:4), the result of tool call toolu_fix"
        f" made by message 2 ({path}:3); kept 4 instead (nearest feasible keep values: 2 below, 4 above)"
    )


def test_cli_compact_keep_without_feasible_cut_names_the_blocking_call(tmp_path: Path):
    path, out = _opens_on_a_call(tmp_path), tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["compact", str(path), "--keep", "5", "-o", str(out)])
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr == (
        f"dp-compact: {path}: no feasible cut keeps at least 5 of 6 messages and drops one: the tail would open on"
        f" message 1 ({path}:2), the result of tool call toolu_first made by message 0 ({path}:1); the nearest feasible keep is 4\n"
    )


def test_cli_compact_now_where_the_look_ahead_would_wait_for_a_scheduled_compaction(tmp_path: Path, monkeypatch):
    """`compact` compacts now at the planner's best present cut where its best schedule compacts later
    (rule `requested`); `--when-due` follows the plan; the output is a fixed point of the planner."""
    source = need(SESSIONS / "claude_code" / "cc_raze_hooks.jsonl")
    runner = CliRunner()
    planned = json.loads(runner.invoke(app, ["plan", str(source), "--json"]).stdout)
    assert planned["rule"] == "wait" and planned["lookahead"]["next_compaction_calls"] is not None
    due = tmp_path / "due.jsonl"
    result = runner.invoke(app, ["compact", str(source), "-o", str(due), "--when-due", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["decision"] == "keep" and not due.exists()
    out = tmp_path / "out.jsonl"
    result = runner.invoke(app, ["compact", str(source), "-o", str(out), "--json"])
    data = json.loads(result.stdout)
    assert result.exit_code == 0 and data["decision"] == "compact" and data["rule"] == "requested"
    assert data["k"] == planned["best_candidate"]["k"] and data["cut"] == planned["best_candidate"]["cut"]
    assert validate_messages(read_jsonl(out), "anthropic") == ()
    forced = json.loads(runner.invoke(app, ["compact", str(source), "--force", "--dry-run", "--json"]).stdout)
    assert forced["rule"] == "force-flag"  # --force takes the forced-rule cut, whatever else would apply
    again = json.loads(runner.invoke(app, ["plan", str(out), "--json"]).stdout)
    assert again["decision"] == "keep" and again["rule"] == "just-compacted"
    result = runner.invoke(app, ["compact", str(out), "-o", str(tmp_path / "twice.jsonl"), "--json"])
    assert json.loads(result.stdout)["decision"] == "keep" and not (tmp_path / "twice.jsonl").exists()


def test_cli_compact_writes_nothing_where_no_compaction_pays_before_the_session_ends(tmp_path: Path, monkeypatch):
    """With one call left (DP_E_FIXED=1) the best schedule never compacts: `compact` keeps the input."""
    monkeypatch.setenv("DP_E_FIXED", "1")
    source, out = _session(tmp_path, turns=6), tmp_path / "out.jsonl"
    planned = json.loads(CliRunner().invoke(app, ["plan", str(source), "--json"]).stdout)
    assert planned["rule"] == "wait" and planned["lookahead"]["next_compaction_calls"] is None
    result = CliRunner().invoke(app, ["compact", str(source), "-o", str(out), "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["decision"] == "keep" and not out.exists()
