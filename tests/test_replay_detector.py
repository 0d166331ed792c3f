"""Replay under the strict loss detector (DESIGN §9): ``--detector verbatim|strict|both``."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.core.cuts import message_arrays
from dp_compact.fleet.jobs import replay_directory
from dp_compact.fleet.parquet import replay_rows
from dp_compact.pricing import Prices
from dp_compact.replay.meter import ReplayParams, make_recording, replay
from dp_compact.replay.policies import DEFAULT_POLICIES, parse_policy
from dp_compact.replay.shell import DirectoryReplay, replay_file
from dp_compact.settings import load_settings
from tests.conftest import REPO, SESSIONS, need
from tests.strategies import conversations

FIXED = ("never", "threshold:0.5", "threshold:0.6:0.3", "threshold:0.7:3000", "claude-code", "codex", "openhands", "langchain")
TERMS = ("cache_read_usd", "input_usd", "write_usd", "output_usd", "compaction_usd", "compactions", "overflows", "truncations")


@st.composite
def recordings_with_nested_uses(draw: st.DrawFn, disjoint: bool = False):
    """A recording twice: with some uses, and with those and more (as strict adds rule (c) to (a) and (b));
    ``disjoint``: the added uses are of messages the first recording's uses never name."""
    messages = tuple(draw(conversations()))
    tokens = np.array(draw(st.lists(st.integers(0, 5000), min_size=len(messages), max_size=len(messages))), dtype=np.int64)
    positions = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    outputs = np.array(draw(st.lists(st.integers(0, 2000), min_size=positions.size, max_size=positions.size)), dtype=np.int64)
    pairs = [(m, c) for c, p in enumerate(positions.tolist()) for m in range(p)]
    strict = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=12)) if pairs else []
    verbatim = [pair for pair in strict if draw(st.booleans())]
    if disjoint:
        named = {m for m, _ in verbatim}
        strict = verbatim + [(m, c) for m, c in strict if m not in named]

    def made(uses: list[tuple[int, int]]):
        arrays = (np.array([m for m, _ in uses], np.int64), np.array([c for _, c in uses], np.int64))
        return make_recording(messages, tokens, message_arrays(messages), positions, outputs, uses=arrays)

    return made(verbatim), made(strict)


def _params(window: int, write: float | None) -> ReplayParams:
    return ReplayParams(Prices("test", 3.0, 0.3, 15.0, write, window + 33_000, "test"), v_tokens=1000, s_tokens=100)


@hypothesis_settings(max_examples=60, deadline=None)
@given(pair=recordings_with_nested_uses(), window=st.integers(2_000, 60_000), write=st.sampled_from([None, 3.75]))
def test_more_uses_keep_every_schedule_add_refetches_and_the_oracle_stays_lowest(pair, window, write):
    """Not the loss itself: a message the strict detector needs earlier is fetched earlier, when
    the prompt was smaller, and that can cost a little less than the later fetch it replaces."""
    verbatim, strict = pair
    params, settings = _params(window, write), load_settings(v=1000, s=100)
    oracle_s = replay(strict, parse_policy("oracle", settings), params).total_usd
    for spec in FIXED:
        loose = replay(verbatim, parse_policy(spec, settings), params)
        tight = replay(strict, parse_policy(spec, settings), params)
        assert tight.refetches >= loose.refetches, spec
        assert [getattr(tight, t) for t in TERMS] == [getattr(loose, t) for t in TERMS], spec  # the schedule is the same
        assert oracle_s <= tight.total_usd + 1e-9, spec


@hypothesis_settings(max_examples=60, deadline=None)
@given(pair=recordings_with_nested_uses(disjoint=True), window=st.integers(2_000, 60_000),
       write=st.sampled_from([None, 3.75]))
def test_uses_of_other_messages_never_lower_a_policys_loss_nor_the_oracle(pair, window, write):
    verbatim, strict = pair
    params, settings = _params(window, write), load_settings(v=1000, s=100)
    oracle_v = replay(verbatim, parse_policy("oracle", settings), params).total_usd
    oracle_s = replay(strict, parse_policy("oracle", settings), params).total_usd
    assert oracle_s >= oracle_v - 1e-12
    for spec in FIXED:
        loose = replay(verbatim, parse_policy(spec, settings), params)
        tight = replay(strict, parse_policy(spec, settings), params)
        assert tight.loss_usd >= loose.loss_usd - 1e-12, spec


def _check_both(report) -> None:
    """Strict charges at least the verbatim loss for every policy; the oracle stays at most every policy under each."""
    verbatim, strict = report.by_detector
    assert (verbatim.detector, strict.detector) == ("verbatim", "strict")
    assert strict.n_uses >= verbatim.n_uses
    assert verbatim.results == report.results
    for loose, tight in zip(verbatim.results, strict.results, strict=True):
        assert tight.policy == loose.policy
        assert tight.total_usd >= loose.total_usd - 1e-9, (report.path, loose.policy)
        if loose.policy != "oracle":  # the oracle may choose another schedule; every other policy keeps its own
            assert tight.loss_usd >= loose.loss_usd - 1e-9, (report.path, loose.policy)
            assert [getattr(tight, t) for t in TERMS] == [getattr(loose, t) for t in TERMS], (report.path, loose.policy)
    for run in report.by_detector:
        totals = {r.policy: r.total_usd for r in run.results if r.policy != "recorded"}  # the tool's own prompts: no model
        oracle = totals.pop("oracle")
        assert all(oracle <= total + 1e-9 for total in totals.values()), (report.path, run.detector, oracle, totals)


@pytest.mark.parametrize("name", ["claude_code/cc_raze_hooks.jsonl", "codex/codex_raze.jsonl",
                                  "anthropic_messages/cline_api_history_cardgame.jsonl"])
def test_strict_charges_at_least_the_verbatim_loss_on_shared_sessions(name):
    policies = ("oracle", "never", "claude-code", "codex", "openhands", "langchain", "recorded")
    _check_both(replay_file(need(SESSIONS / name), load_settings(), policies, detector="both"))


@pytest.mark.slow
def test_strict_charges_at_least_the_verbatim_loss_on_every_shared_session():
    report = replay_directory(need(SESSIONS), load_settings(), DEFAULT_POLICIES, workers=2, detector="both")
    assert len(report.sessions) >= 10
    for session in report.sessions:
        _check_both(session)
    verbatim, strict = report.totals_by_detector()
    assert strict["uses"] > verbatim["uses"]
    assert all(t["total_usd"] >= v["total_usd"] - 1e-9 for v, t in zip(verbatim["policies"], strict["policies"], strict=True))


def test_detector_strict_replays_the_strict_uses_and_says_so():
    path = need(SESSIONS / "codex/codex_raze.jsonl")
    loose = replay_file(path, load_settings(), ("never",))
    tight = replay_file(path, load_settings(), ("never",), detector="strict")
    assert (loose.detector, tight.detector) == ("verbatim", "strict")
    assert tight.n_uses > loose.n_uses and tight.by_detector == () == loose.by_detector
    assert tight.to_dict()["detector"] == "strict" and tight.to_dict()["by_detector"] is None


def test_an_unknown_detector_is_a_settings_error_before_any_work():
    from dp_compact.errors import SettingsError

    with pytest.raises(SettingsError, match="--detector"):
        replay_file("/nonexistent.jsonl", load_settings(), ("never",), detector="lenient")
    done = CliRunner().invoke(app, ["replay", str(REPO / "dp_compact/examples/session.jsonl"), "--detector", "lenient"])
    assert done.exit_code == 2


EXAMPLE = REPO / "dp_compact/examples/session.jsonl"


def test_cli_detector_both_shows_the_ranking_under_each_side_by_side():
    done = CliRunner().invoke(app, ["replay", str(EXAMPLE), "--policy", "oracle", "--policy", "never", "--policy", "openhands",
                                    "--detector", "both"])
    assert done.exit_code == 0, done.output
    assert "lost information: refetch, verbatim detector (strict beside it below)" in done.stdout
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ranking under both detectors"))
    assert re.search(r"verbatim: .*, \d+ uses; strict: .*, [\d,]+ uses", lines[start])
    assert lines[start + 1].split() == ["policy", "verbatim", "$", "vs", "oracle", "rank", "refetches", "strict", "$", "vs",
                                        "oracle", "rank", "refetches", "rank", "moved"]
    assert [line.split()[0] for line in lines[start + 2:start + 5]] == ["oracle", "never", "openhands"]
    assert lines[start + 2].split()[2:4] == ["1.00x", "1"]


def test_cli_detector_both_json_has_each_detectors_ranking():
    done = CliRunner().invoke(app, ["replay", str(EXAMPLE), "--policy", "oracle", "--policy", "never", "--detector", "both", "--json"])
    data = json.loads(done.stdout)
    assert data["detector"] == "both"
    verbatim, strict = data["by_detector"]
    assert set(verbatim) == {"detector", "uses", "oracle_usd", "best_fixed_usd", "policies"}
    assert (verbatim["detector"], strict["detector"]) == ("verbatim", "strict")
    assert verbatim["uses"] == data["session"]["uses"] <= strict["uses"]
    assert set(strict["policies"][0]) == {"policy", "fixed", "total_usd", "loss_usd", "refetches", "vs_best_fixed", "vs_oracle", "rank"}
    assert [p["total_usd"] for p in verbatim["policies"]] == [p["total_usd"] for p in data["policies"]]
    assert strict["policies"][0]["vs_oracle"] == 1.0 and strict["policies"][0]["rank"] == 1


def test_folder_replay_under_both_detectors_totals_each_and_writes_a_row_per_detector(tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(EXAMPLE.read_bytes())
    report = replay_directory(folder, load_settings(), ("oracle", "never"), workers=1, detector="both")
    assert report.detector == "both"
    verbatim, strict = report.totals_by_detector()
    assert verbatim["detector"] == "verbatim" and [p["policy"] for p in strict["policies"]] == ["oracle", "never"]
    assert strict["policies"][1]["total_usd"] == pytest.approx(report.sessions[0].by_detector[1].results[1].total_usd)
    rows = replay_rows(report)
    assert [(r["detector"], r["policy"]) for r in rows] == [("verbatim", "oracle"), ("verbatim", "never"),
                                                           ("strict", "oracle"), ("strict", "never")]
    single = replay_rows(DirectoryReplay("x", ("never",), (replace(report.sessions[0], by_detector=(), detector="strict"),), ()))
    assert [r["detector"] for r in single] == ["strict", "strict"]
    done = CliRunner().invoke(app, ["replay", str(folder), "--policy", "oracle", "--policy", "never", "--detector", "both",
                                    "--workers", "1", "--json"])
    data = json.loads(done.stdout)
    assert data["detector"] == "both" and [t["detector"] for t in data["totals_by_detector"]] == ["verbatim", "strict"]
    text = CliRunner().invoke(app, ["replay", str(folder), "--policy", "oracle", "--detector", "both", "--workers", "1"]).stdout
    assert "ranking under both detectors" in text


def _documented() -> set[str]:
    return set(re.findall(r"`([a-z_]+)`", (REPO / "docs/replay.md").read_text("utf-8")))


def test_the_detector_json_keys_are_documented():
    done = CliRunner().invoke(app, ["replay", str(EXAMPLE), "--policy", "oracle", "--detector", "both", "--json"])
    data = json.loads(done.stdout)
    keys = {"detector", "by_detector", *data["by_detector"][0], *data["by_detector"][0]["policies"][0]}
    assert keys <= _documented(), keys - _documented()
