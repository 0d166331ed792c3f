"""The command line's shell: one-line usage errors, the same options on every command that plans,
one name for the output, descriptive JSON keys beside the one-letter ones, notes on a live file."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.cli.options import SETTING_FLAGS
from dp_compact.settings import Settings, load_settings
from tests.conftest import REPO

EXAMPLE = REPO / "dp_compact" / "examples" / "session.jsonl"
runner = CliRunner()
PLANNING = ("plan", "compact", "replay", "curve", "timeline")


def _command(name: str):
    return typer.main.get_command(app).commands[name]  # type: ignore[attr-defined]


def _options(name: str) -> dict[str, object]:
    """Every option spelling of a command -> its parameter."""
    return {spelling: p for p in _command(name).params for spelling in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("args, command, words", [
    (["plan", str(EXAMPLE), "--no-such-flag"], "plan", "No such option: --no-such-flag"),
    (["plan"], "plan", "Missing argument 'SESSION'"),  # named as in the help
    (["validate", str(EXAMPLE), "--api", "soap"], "validate", "'soap' is not one of 'anthropic', 'openai'"),
    (["plan", str(EXAMPLE), "--planner", "greedy"], "plan", "'greedy' is not one of 'lookahead', 'myopic', 'seed'"),
    (["compact", str(EXAMPLE), "--summarizer", "magic"], "compact", "'magic' is not one of 'extractive', 'llm'"),
    (["replay", str(EXAMPLE), "--loss", "some"], "replay", "'some' is not one of 'refetch', 'none'"),
    (["plan", str(EXAMPLE), "--e-fixed", "many"], "plan", "Invalid value for '--e-fixed'"),
    (["curve", str(EXAMPLE)], "curve", "'-o' / '--output'"),
])
def test_usage_errors_are_one_line_naming_the_command(args, command, words):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"dp-compact: {command}: ") and words in lines[0]
    assert lines[0].endswith(f"(try 'dp-compact {command} --help')")
    assert "╭" not in result.stderr and "Usage:" not in result.stderr


def test_unknown_command_is_one_line():
    result = runner.invoke(app, ["plans", str(EXAMPLE)])
    assert result.exit_code == 2
    assert result.stderr == "dp-compact: No such command 'plans'. Did you mean 'plan'? (try 'dp-compact --help')\n"


def test_installed_command_usage_error_is_one_line():
    exe = Path(sys.executable).parent / "dp-compact"
    if not exe.exists():
        pytest.skip("dp-compact console script is not installed in this environment")
    done = subprocess.run([str(exe), "plan", str(EXAMPLE), "--bogus"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("dp-compact: plan: No such option: --bogus")


def test_library_error_is_one_line_with_file_and_line(tmp_path):
    bad = tmp_path / "s.jsonl"
    bad.write_text('{"role": "user", "content": "hi"}\n{broken\n{"role": "assistant", "content": "ok"}\n')
    for command in (["plan"], ["replay"], ["compact", "--dry-run"], ["curve", "-o", str(tmp_path / "c.png")]):
        result = runner.invoke(app, [command[0], str(bad), *command[1:], "--no-cache"])
        assert result.exit_code == 2
        assert result.stderr.startswith(f"dp-compact: {bad}:2: ") and result.stderr.count("\n") == 1


def test_every_setting_is_a_flag_of_every_planning_command_with_the_same_spellings():
    assert set(SETTING_FLAGS) == set(Settings.model_fields) - {"archive_dir", "breaker_path"}
    expected = {f"--{name.replace('_', '-')}" for name in SETTING_FLAGS} | {"--prefix-tokens", "--summary-tokens", "--calls-per-turn"}
    for command in PLANNING:
        assert expected <= set(_options(command)), command
    reference = {s: p.name for s, p in _options("plan").items() if s in expected}
    for command in PLANNING[1:]:
        assert {s: p.name for s, p in _options(command).items() if s in expected} == reference


@pytest.mark.parametrize("command", ["plan", "compact", "replay", "timeline"])
def test_settings_flags_reach_the_settings_on_every_planning_command(command, monkeypatch):
    from dp_compact.cli.app import CommandError

    seen = {}

    def spy(flags=None, **kw):
        seen.update(flags or {})
        raise CommandError("stop here")

    for module in ("plan", "pipeline", "replay"):
        monkeypatch.setattr(f"dp_compact.cli.{module}.load_settings", spy)
    extra = {"compact": ["--dry-run"], "timeline": ["-o", "t.png"]}.get(command, [])
    result = runner.invoke(app, [command, str(EXAMPLE), *extra, "--beta", "0.5", "--planner", "myopic", "--p-input", "4",
                                 "--prefix-tokens", "1234", "--recall-age", "turns"])
    assert result.exit_code == 2 and "stop here" in result.stderr
    assert (seen["beta"], seen["planner"], seen["p_input"], seen["v"], seen["recall_age"]) == (0.5, "myopic", 4.0, 1234, "turns")


def test_new_settings_flags_change_the_plan():
    data = json.loads(runner.invoke(app, ["plan", str(EXAMPLE), "--json", "--no-cache", "--p-input", "4", "--p-cache", "0.4",
                                          "--p-out", "20", "--beta", "0.06", "--quality-penalty", "0.1"]).stdout)
    assert (data["prices"]["p_input"], data["prices"]["p_cache"], data["prices"]["p_out"]) == (4.0, 0.4, 20.0)
    assert (data["settings"]["beta"], data["settings"]["quality_penalty"]) == (0.06, 0.1)


def test_output_option_is_one_name_with_the_old_spelling_hidden(tmp_path):
    for command in ("compact", "shrink", "restore", "curve", "timeline"):
        options = _options(command)
        assert {"-o", "--output"} <= set(options), command
        assert options["-o"] is options["--output"]
    for command in ("curve", "timeline"):
        assert _options(command)["--out"].hidden
        assert "--out " not in runner.invoke(app, [command, "--help"], terminal_width=200).stdout
        old = runner.invoke(app, [command, str(EXAMPLE), "--out", str(tmp_path / f"{command}.svg"), "--no-cache"])
        assert old.exit_code == 0, old.output
        assert (tmp_path / f"{command}.svg").exists()


def test_plan_json_has_descriptive_keys_beside_the_one_letter_ones():
    data = json.loads(runner.invoke(app, ["plan", str(EXAMPLE), "--json", "--no-cache"]).stdout)
    assert data["decision"] == "compact"  # the example is built to need it
    for old, new in {"k": "kept_messages", "N": "messages", "T": "total_tokens", "K": "kept_tokens",
                     "H": "dropped_tokens", "t": "user_turns"}.items():
        assert data[new] == data[old], old
    # DESIGN §1: k = N - cut messages kept; T = K + H tokens.
    assert data["kept_messages"] == data["messages"] - data["cut"]
    assert data["kept_tokens"] + data["dropped_tokens"] == data["total_tokens"]
    keys = [key.lower() for key in data if key not in {"k", "K", "t", "T"}]
    assert len(keys) == len(set(keys))  # no other pair differs only by case
    # the example has 8 typed user prompts (its plan text says t = 8)
    assert data["user_turns"] == 8


def test_compact_json_plan_has_the_descriptive_keys_too():
    data = json.loads(runner.invoke(app, ["compact", str(EXAMPLE), "--dry-run", "--json", "--no-cache"]).stdout)
    assert data["plan"]["kept_messages"] == data["plan"]["k"] == data["k"]
    assert data["plan"]["kept_tokens"] == data["plan"]["K"]


def test_profiles_spell_prices_as_plans_print_them():
    table = runner.invoke(app, ["profiles"]).stdout
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[1:-2]}
    assert rows["claude-sonnet-4"][:5] == ["3.00", "0.30", "3.75", "6.00", "15.00"]  # DESIGN §3: 3.00 / 0.30 / 15.00; §8: 1-hour writes 2 x
    assert rows["gpt-4o"][:5] == ["2.50", "1.25", "-", "-", "10.00"]  # DESIGN §3: 2.50 / 1.25 / 10.00
    assert rows["gemini-2.5-pro"][1] == "0.125"  # no digit lost
    plan = runner.invoke(app, ["plan", str(EXAMPLE), "--no-cache", "--provider", "claude-sonnet-4"]).stdout
    assert "input 3.00 / cache 0.30 / output 15.00 $/MTok, write 3.75" in plan


@pytest.fixture()
def live(tmp_path: Path) -> Path:
    path = tmp_path / "live.jsonl"
    path.write_bytes(b'{"role": "user", "content": "list the files"}\n{"role": "assistant", "content": "a.py b.py"}\n'
                     b'{"role": "user", "content": "now re')
    return path


def test_replay_curve_and_timeline_name_a_half_written_last_line(live: Path, tmp_path: Path):
    expected = f"{live}:3: half-written last line left out"
    plan = runner.invoke(app, ["plan", str(live), "--no-cache"])
    assert plan.exit_code == 0 and expected in plan.stdout
    replay = runner.invoke(app, ["replay", str(live), "--no-cache"])
    assert replay.exit_code == 0 and f"note      {expected}" in replay.stdout
    replayed = json.loads(runner.invoke(app, ["replay", str(live), "--no-cache", "--json"]).stdout)
    assert any(n.startswith(expected) for n in replayed["notes"])
    for command in ("curve", "timeline"):
        result = runner.invoke(app, [command, str(live), "-o", str(tmp_path / f"{command}.png"), "--no-cache"])
        assert result.exit_code == 0, result.output
        assert f"dp-compact: note: {expected}" in result.stderr


def test_settings_hold_the_archive_directory_and_breaker_path(monkeypatch, tmp_path: Path):
    assert load_settings().archive_dir is None and load_settings().breaker_path is None
    monkeypatch.setenv("DP_ARCHIVE_DIR", "~/somewhere")
    monkeypatch.setenv("DP_BREAKER_PATH", str(tmp_path / "b.json"))
    settings = load_settings()
    assert settings.archive_dir == Path("~/somewhere").expanduser() and settings.breaker_path == tmp_path / "b.json"
    assert "archive_dir" not in settings.model_dump()  # not a cost setting: plans do not list it
    monkeypatch.setenv("DP_ARCHIVE_DIR", "")
    assert load_settings().archive_dir is None


def test_archive_dir_from_dotenv_is_used(monkeypatch, tmp_path: Path):
    (tmp_path / ".env").write_text(f"DP_ARCHIVE_DIR={tmp_path / 'from-dotenv'}\n")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["compact", str(EXAMPLE), "-o", str(tmp_path / "out.jsonl"), "--no-cache"])
    assert result.exit_code == 0, result.output
    assert list((tmp_path / "from-dotenv").rglob("*.jsonl"))


def test_help_and_import_load_no_matplotlib():
    code = ("import sys\nfrom dp_compact.cli import main\nsys.argv = ['dp-compact', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nprint('matplotlib' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().endswith("False")


def test_figures_only_draw_what_they_are_given():
    forbidden = {"dp_compact.sessions", "dp_compact.settings", "dp_compact.measure.tokens", "dp_compact.api",
                 "dp_compact.replay.timeline", "dp_compact.calibration"}
    for path in (REPO / "dp_compact" / "figures").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not any(node.module.startswith(f) for f in forbidden) or _under_type_checking(tree, node), (path, node.module)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "open", path
            if isinstance(node, ast.Attribute):
                assert node.attr not in {"read_text", "read_bytes", "load_settings"}, path


def _under_type_checking(tree: ast.Module, target: ast.ImportFrom) -> bool:
    """True when ``target`` sits in an ``if TYPE_CHECKING:`` block."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            if any(child is target for child in ast.walk(node)):
                return True
    return False
