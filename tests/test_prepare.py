"""One preparation for every command (dp_compact.prepare): prices, window, tokens, V, placement, notes.

The commands that plan (``plan``, ``compact``), replay (``replay``) and draw (``curve``, ``timeline``)
start from :func:`dp_compact.prepare.prepare`; the first tests run them on every shared session
and check that they report the same window, prices, V and notes. The unit tests check what the
prepared value holds and that the user's settings are never changed.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dp_compact import sessions
from dp_compact.api import curve_file, plan_file, plan_session, timeline_file
from dp_compact.calibration.history import history_of, read_history
from dp_compact.cli import app
from dp_compact.conversation import (
    Message,
    Session,
    Usage,
    call_seconds,
    recorded_history,
)
from dp_compact.measure import estimation
from dp_compact.pipeline.compact import compact_file, compact_session
from dp_compact.prepare import PreparedSession, plan_prepared, prepare, reprice
from dp_compact.replay.shell import replay_file
from dp_compact.sessions import read_session
from dp_compact.settings import load_settings
from tests.conftest import REPO, SESSIONS, need, session_files

runner = CliRunner()
EXAMPLE_FILE = REPO / "dp_compact" / "examples" / "session.jsonl"
FILES = session_files() or [SESSIONS / "absent"]  # absent: each test skips, naming ../shared
#: Files whose recorded history is longer than their live conversation (they record compactions):
#: the replay appends that history and measures V from its first recorded call, the plan from
#: the first call since the last compaction.
COMPACTED = {"cc_posthog_dashboard_compact.jsonl", "codex_pharma_2compactions.jsonl"}


def _json(args: list[str]) -> tuple[int, dict | None]:
    result = runner.invoke(app, args)
    return result.exit_code, (json.loads(result.stdout) if result.exit_code in (0, 1) and result.stdout.strip() else None)


@pytest.fixture(scope="module")
def reports() -> dict[str, tuple[dict, dict, dict]]:
    """``plan --json``, ``compact --dry-run --json`` and ``replay --json`` of every shared session file."""
    found: dict[str, tuple[dict, dict, dict]] = {}
    for path in (p for p in FILES if p.exists()):
        plan_exit, plan = _json(["plan", str(path), "--json"])
        dry_exit, dry = _json(["compact", str(path), "--dry-run", "--json"])
        replay_exit, replay = _json(["replay", str(path), "--json", "--policy", "never"])
        assert plan_exit == dry_exit == replay_exit, path  # a file one command refuses, all refuse
        if plan is not None:
            found[path.name] = (plan, dry, replay)
    return found


def _report(reports: dict, path: Path) -> tuple[dict, dict, dict]:
    need(path)
    if path.name not in reports:
        pytest.skip(f"{path.name} is not a conversation (every command refuses it)")
    return reports[path.name]


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_plan_compact_and_replay_report_the_same_prices_and_window(reports, path: Path):
    plan, dry, replay = _report(reports, path)
    assert plan["prices"] == dry["plan"]["prices"] == replay["prices"]
    assert plan["max_context_tokens"] == dry["plan"]["max_context_tokens"] == replay["max_context_tokens"]


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_compact_dry_run_plans_exactly_as_plan(reports, path: Path):
    """The plan inside ``compact --json`` is ``plan --json``'s: same V, same notes (token scale included)."""
    plan, dry, _ = _report(reports, path)
    assert dry["plan"] == {key: value for key, value in plan.items() if key != "window_source"}
    assert (dry["plan"]["v_tokens"], dry["plan"]["v_source"]) == (plan["v_tokens"], plan["v_source"])


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_every_command_opens_its_notes_with_the_prepared_notes(reports, path: Path):
    plan, dry, replay = _report(reports, path)
    session = read_session(path)
    live = prepare(session, load_settings()).notes
    whole = prepare(session, load_settings(), history=True).notes
    assert tuple(plan["notes"][: len(live)]) == live
    assert tuple(dry["notes"][: len(live)]) == live  # what compact prints, whether it compacts or keeps
    assert tuple(replay["notes"][: len(whole)]) == whole
    if path.name not in COMPACTED:  # the same conversation prepared: the same note set
        assert whole == live
    assert any(n.startswith(("message tokens scaled", "message tokens are cl100k")) for n in live)
    assert sum(n.startswith("context window ") for n in live) == 1 and sum(n.startswith("V ") for n in live) == 1


@pytest.mark.parametrize("path", [
    pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=(
        "the replay appends the whole recorded history and measures V from its first recorded call, the plan the live"
        " conversation from the first call since the last compaction: a behaviour choice left as it was")))
    if p.name in COMPACTED else p for p in FILES
], ids=[p.name for p in FILES])
@pytest.mark.slow
def test_plan_compact_and_replay_report_the_same_v(reports, path: Path):
    plan, dry, replay = _report(reports, path)
    assert (plan["v_tokens"], plan["v_source"]) == (dry["plan"]["v_tokens"], dry["plan"]["v_source"])
    assert (plan["v_tokens"], plan["v_source"]) == (replay["v_tokens"], replay["v_source"])
    assert [n for n in plan["notes"] if n.startswith("V ")] == [n for n in replay["notes"] if n.startswith("V ")]


@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_curve_plans_the_session_as_plan_does(reports, path: Path):
    """``curve``'s plan under the settings' own profile and model is ``plan``'s (same V, same cut)."""
    _report(reports, path)
    (first, *_), _ = curve_file(path, load_settings())
    assert first.to_dict() == plan_file(path, load_settings()).to_dict()


# --------------------------------------------------------------------------- the prepared value


def _with_usage() -> Path:
    return need(SESSIONS / "claude_code" / "cc_raze_hooks.jsonl")


def test_prepare_never_changes_the_settings_v_lives_on_the_prepared_value():
    settings = load_settings()
    before = settings.model_dump()
    prepared = prepare(read_session(_with_usage()), settings, use_cache=False)
    assert prepared.settings is settings and settings.model_dump() == before and "v" not in settings.model_fields_set
    assert prepared.v_source == "measured" and prepared.v_tokens == prepared.measured_v != settings.v
    result = plan_prepared(prepared)
    assert result.settings["v"] == prepared.v_tokens and result.v_source == "measured"
    assert settings.v == before["v"]


@pytest.mark.parametrize(("flags", "source"), [({}, "measured"), ({"v": 4321}, "setting"), ({"max_context_tokens": 50_000}, "default")])
def test_prepare_v_source_follows_the_v_rule(flags, source):
    """DP_V given wins; the measured prefix is taken when it is at most half the window (36,703 of 50,000 is not)."""
    prepared = prepare(read_session(_with_usage()), load_settings(**flags), use_cache=False)
    assert prepared.v_source == source
    assert prepared.v_tokens == {"measured": prepared.measured_v, "setting": 4321, "default": load_settings().v}[source]
    assert prepared.v_note.startswith(f"V {prepared.v_tokens:,} tokens")


def test_prepare_without_usage_takes_the_default_v_and_a_compacted_file_its_recorded_v(tmp_path: Path):
    path = need(SESSIONS / "openai_chat" / "taubench_gpt4o_airline_task46.jsonl")
    assert prepare(read_session(path), load_settings(), use_cache=False).v_source == "default"
    out = tmp_path / "out.jsonl"
    compact_file(_with_usage(), load_settings(), output=out, force=True, use_cache=False)
    measured = prepare(read_session(_with_usage()), load_settings(), use_cache=False).v_tokens
    recorded = prepare(read_session(out), load_settings(), use_cache=False)
    assert (recorded.v_source, recorded.v_tokens) == ("recorded", measured)


def test_prepared_session_is_immutable():
    prepared = prepare(read_session(_with_usage()), load_settings(), use_cache=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        prepared.v_tokens = 1  # type: ignore[misc]
    with pytest.raises(ValueError):
        prepared.message_tokens[0] = 1
    with pytest.raises(ValueError):
        prepared.placement.sent[0] = 1
    assert prepared.message_tokens.dtype == np.int64 and prepared.message_tokens.shape == (len(prepared.session.messages),)


def test_prepare_places_the_usage_records_once_per_plan(monkeypatch):
    calls = []
    real = estimation._placed_counts

    def counting(messages, usage_lines):
        calls.append(len(usage_lines))
        return real(messages, usage_lines)

    monkeypatch.setattr(estimation, "_placed_counts", counting)
    result = plan_session(read_session(_with_usage()), load_settings(), use_cache=False)
    assert len(calls) == 1 and result.estimates.context_source == "usage"


def test_usage_records_without_a_source_line_are_not_placed():
    """A JSON document's records (a Gemini saved chat) have no line: placed by line they would all land on the last
    response, so none is placed (``Usage.line``); V is then DP_V's default for plan and replay alike."""
    messages = tuple(Message(role, f"{role} {i}") for i in range(3) for role in ("user", "assistant"))
    session = Session(path="", format="gemini_cli", messages=messages, usage=tuple(Usage(12_000 + 900 * i) for i in range(3)),
                      user_turns=3, llm_calls=3, history=messages)
    live, whole = prepare(session, load_settings(), use_cache=False), prepare(session, load_settings(), use_cache=False, history=True)
    assert live.placement.sent.tolist() == [-1, -1, -1] and live.measured_v is None
    assert (live.v_tokens, live.v_source) == (whole.v_tokens, whole.v_source) == (load_settings().v, "default")


def test_prepare_over_the_history_is_the_replays_view():
    session = read_session(need(SESSIONS / "codex" / "codex_pharma_2compactions.jsonl"))
    live, whole = prepare(session, load_settings(), use_cache=False), prepare(session, load_settings(), use_cache=False, history=True)
    assert live.session is session and whole.session.messages == recorded_history(session) and whole.history
    assert "first call since the last compaction" in live.v_note and "first recorded call" in whole.v_note
    assert live.prices == whole.prices and live.price_notes == whole.price_notes


def test_reprice_changes_prices_window_and_v_not_tokens():
    prepared = prepare(read_session(_with_usage()), load_settings(), use_cache=False)
    other = reprice(prepared, load_settings(provider="gpt-4o"))
    assert other.prices.name == "gpt-4o" and other.message_tokens is prepared.message_tokens
    assert other.placement is prepared.placement and other.v_tokens == prepared.v_tokens  # 36,703 fits 128,000 / 2


def test_prepare_takes_given_prices_without_their_notes():
    session = read_session(_with_usage())
    chosen = prepare(session, load_settings(), use_cache=False)
    given = prepare(session, load_settings(), use_cache=False, prices=chosen.prices)
    assert given.price_notes == () and given.prices is chosen.prices and given.v_tokens == chosen.v_tokens


# --------------------------------------------------------------------------- one read per file


def _counting_reads(monkeypatch) -> list[str]:
    reads: list[str] = []
    real = sessions.read_source

    def counting(path, **options):
        reads.append(str(path))
        return real(path, **options)

    monkeypatch.setattr(sessions, "read_source", counting)
    return reads


def test_history_timeline_and_timed_replay_read_the_file_once(monkeypatch, tmp_path: Path):
    path = need(SESSIONS / "claude_code" / "cc_posthog_dashboard_compact.jsonl")
    reads = _counting_reads(monkeypatch)
    history = read_history(path)
    assert len(reads) == 1 and len(history.segments) == 2 and history.compactions[0].summary_text
    reads.clear()
    replay_file(path, load_settings(), ["never"], cache_ttl_s=300.0, use_cache=False)
    assert len(reads) == 1
    reads.clear()
    timeline_file(path, load_settings(), use_cache=False)
    assert len(reads) == 1


def test_a_session_carries_its_call_times_and_compaction_markers():
    session = read_session(need(SESSIONS / "codex" / "codex_pharma_2compactions.jsonl"))
    responses = [m for m in session.history if m.role == "assistant"]
    times = call_seconds(session)
    assert times.shape == (len(responses),) and np.isfinite(times).all() and np.all(np.diff(times) >= 0)
    assert [m.line for m in session.markers] == [r.line for r in session.compaction_records]
    assert history_of(session).compactions == session.markers
    untimed = read_session(need(SESSIONS / "openai_chat" / "miniswe_github_issue.traj.json"))
    assert untimed.call_times == () and call_seconds(untimed).size == 0


def test_a_prepared_session_made_by_hand_plans_as_plan_session():
    messages = (Message("user", "fix the bug", line=1), Message("assistant", "done", line=2))
    session = Session(path="", format="anthropic", messages=messages, usage=(Usage(30_000, line=2),), user_turns=1, llm_calls=1)
    prepared = prepare(session, load_settings(), use_cache=False)
    assert isinstance(prepared, PreparedSession)
    assert plan_prepared(prepared).to_dict() == plan_session(session, load_settings(), use_cache=False).to_dict()
    assert compact_session(session, load_settings(), dry_run=True, use_cache=False).plan.notes == plan_prepared(prepared).notes


def test_plan_file_of_the_example_opens_its_notes_with_the_prepared_notes():
    prepared = prepare(read_session(EXAMPLE_FILE), load_settings(), use_cache=False)
    assert plan_file(EXAMPLE_FILE, load_settings(), use_cache=False).notes[: len(prepared.notes)] == prepared.notes
