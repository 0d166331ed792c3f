"""``dp-compact tune``: a tool's settings replayed over transcripts, the saving measured on held-back ones."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings as hsettings, strategies as st
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.settings import load_settings
from dp_compact.tune import MIN_TRANSCRIPTS, TOOLS, ClaudeCodeAt, held_back_saving, tune
from tests.conftest import SESSIONS, need


def test_held_back_saving_uses_the_setting_chosen_on_the_other_transcripts() -> None:
    usd = np.array([[10.0, 10.0, 10.0],  # default
                    [9.0, 12.0, 9.0],    # best on transcripts 0 and 2, bad on 1
                    [11.0, 8.0, 11.0]])
    saving, choices = held_back_saving(usd, 0)
    # held back 0: others (1, 2) cost rows 22, 21, 19 -> row 2 -> 10 - 11 = -1; held back 1: rows 20, 18, 22 -> row 1 -> 10 - 12;
    # held back 2: as 0 -> row 2 -> -1
    assert choices == (2, 1, 2) and saving == pytest.approx(-1 - 2 - 1)


@given(st.lists(st.lists(st.floats(0, 100), min_size=2, max_size=2), min_size=1, max_size=8))
@hsettings(max_examples=50, deadline=None)
def test_held_back_saving_needs_three_transcripts_and_never_exceeds_the_hindsight_best(columns: list[list[float]]) -> None:
    usd = np.array(columns).T  # 2 settings x T transcripts
    saving, choices = held_back_saving(usd, 0)
    if usd.shape[1] < MIN_TRANSCRIPTS:
        assert saving is None and choices == ()
    else:
        assert saving is not None and saving <= float(np.maximum(usd[0] - usd[1], 0).sum()) + 1e-9


def test_every_tool_has_its_default_in_its_grid_and_config_lines() -> None:
    for name, rule in TOOLS.items():
        assert rule.default in rule.grid, name
        assert len(set(map(rule.label, rule.grid))) == len(rule.grid), name
        other = next(v for v in rule.grid if v != rule.default)
        assert rule.config(other, 200_000), name


def test_claude_code_override_only_brings_compaction_earlier() -> None:
    class Params:
        window = 200_000

    class Recording:
        tool_compactions = ()  # the recording shows no compaction of its own

    class Ctx:
        params = Params()
        rec = Recording()

    ctx = Ctx()
    default = ClaudeCodeAt(name="x", percent=None).threshold(ctx)  # type: ignore[arg-type]
    assert ClaudeCodeAt(name="x", percent=99).threshold(ctx) == default  # type: ignore[arg-type]
    assert ClaudeCodeAt(name="x", percent=50).threshold(ctx) < default  # type: ignore[arg-type]


@pytest.mark.parametrize(("folder", "tool"), [("claude_code", "claude-code"), ("codex", "codex")])
def test_tune_saves_on_held_back_transcripts_or_says_the_default_is_best(folder: str, tool: str) -> None:
    report = tune(need(SESSIONS / folder), tool, load_settings(), workers=1)
    data = report.to_dict()
    assert len(data["transcripts"]) >= MIN_TRANSCRIPTS and data["held_back_saving_usd"] is not None
    default = next(s for s in data["settings"] if s["default"])
    assert default["setting"] == TOOLS[tool].label(TOOLS[tool].default)
    assert data["oracle_usd"] <= min(s["usd"] for s in data["settings"]) + 1e-6  # the optimum bounds every setting
    from dp_compact.replay.shell import replay_file

    preset = sum(replay_file(p, load_settings(), [tool]).results[0].total_usd for p in data["transcripts"])
    assert default["usd"] == pytest.approx(preset, rel=1e-9)  # the default row is the replay's own preset of the tool
    if data["held_back_saving_usd"] > 0:
        assert data["recommended"] == data["best"] != data["default"] and data["config"]
    else:
        assert "default is already best" in data["verdict"] and data["recommended"] == data["default"] and not data["config"]


def test_tune_command_prints_json_plot_and_thin_evidence(tmp_path: Path) -> None:
    folder = tmp_path / "two"
    folder.mkdir()
    for name in ("codex_raze.jsonl", "codex_fundwise_tui.jsonl"):
        (folder / name).write_bytes(need(SESSIONS / "codex" / name).read_bytes())
    plot = tmp_path / "tune.png"
    done = CliRunner().invoke(app, ["tune", str(folder), "--tool", "codex", "--json", "--plot", str(plot)])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["held_back_saving_usd"] is None and "evidence is thin" in data["verdict"]
    assert plot.stat().st_size > 0
    text = CliRunner().invoke(app, ["tune", str(folder), "--tool", "codex"])
    assert text.exit_code == 0 and "evidence is thin" in text.stdout and "hindsight optimum" in text.stdout


def test_tune_refuses_an_unknown_or_missing_tool_and_a_tool_without_a_folder() -> None:
    done = CliRunner().invoke(app, ["tune", "x", "--tool", "foo"])
    assert done.exit_code != 0 and "use one of" in done.output
    done = CliRunner().invoke(app, ["tune", "x"])  # never a tool chosen for the user: its lines would be pasted into another tool
    assert done.exit_code != 0 and "--tool" in done.output
    done = CliRunner().invoke(app, ["tune", "--tool", "langchain"])
    assert done.exit_code != 0 and "give the folder" in done.output
