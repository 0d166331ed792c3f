"""One-line messages of the command line: empty folders, bad values, usage errors, help names."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from dp_compact.cli import app
from tests.conftest import SESSIONS, need

runner = CliRunner()


def _one_line_error(done) -> str:
    assert done.exit_code == 2, done.output
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("dp-compact: "), done.stderr
    return lines[0]


def test_replay_of_a_folder_without_sessions_names_each_file_and_why(tmp_path):
    empty, others = tmp_path / "empty", tmp_path / "others"
    empty.mkdir()
    others.mkdir()
    (others / "data.json").write_text('{"foo": 1}', "utf-8")
    (others / "notes.jsonl").write_text('{"bar": 2}\n', "utf-8")
    first = _one_line_error(runner.invoke(app, ["replay", str(empty), "--workers", "1"]))
    second = _one_line_error(runner.invoke(app, ["replay", str(others), "--workers", "1"]))
    assert first == f"dp-compact: {empty}: no session file (.json, .jsonl, .traj) under this folder"
    assert second == (f"dp-compact: {others}: no readable session among 2 file(s): {others / 'data.json'}: not a session format"
                      f" dp-compact reads; {others / 'notes.jsonl'}: not a session format dp-compact reads")


@pytest.mark.parametrize("command", ["replay", "calibrate"])
def test_an_empty_folder_is_the_same_error_for_replay_and_calibrate(tmp_path, command):
    done = _one_line_error(runner.invoke(app, [command, str(tmp_path), "--workers", "1"]))
    assert done == f"dp-compact: {tmp_path}: no session file (.json, .jsonl, .traj) under this folder"


@pytest.mark.parametrize("command", ["replay", "calibrate"])
def test_one_file_alone_on_the_fleet_engine_is_its_own_error(tmp_path, command):
    pytest.importorskip("dask.distributed")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "hi"}\n{bad\n', "utf-8")
    local = _one_line_error(runner.invoke(app, [command, str(bad)]))
    fleet = _one_line_error(runner.invoke(app, [command, str(bad), "--out", str(tmp_path / "r.parquet"), "--workers", "1"]))
    assert local == fleet and local.startswith(f"dp-compact: {bad}:2: line 2 is not valid JSON")
    assert not (tmp_path / "r.parquet").exists()


def test_recall_limit_must_be_at_least_one():
    line = _one_line_error(runner.invoke(app, ["recall", "x", "--limit", "0"]))
    assert "--limit" in line and "recall" in line


def test_restore_of_a_well_formed_absent_reference_says_no_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path))
    line = _one_line_error(runner.invoke(app, ["restore", "archive://x/bogus"]))
    assert "no archive under archive://x/bogus" in line and "not an archive reference" not in line
    line = _one_line_error(runner.invoke(app, ["restore", "archive://x/../bogus"]))
    assert "not an archive reference" in line


def test_usage_error_inside_a_subcommand_points_at_its_help(tmp_path):
    line = _one_line_error(runner.invoke(app, ["compact", str(tmp_path / "x.jsonl"), "-o"]))
    assert line.endswith("(try 'dp-compact compact --help')"), line
    assert _one_line_error(runner.invoke(app, ["--bogus"])).endswith("(try 'dp-compact --help')")


def test_invalid_setting_from_the_env_file_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DP_V", raising=False)
    (tmp_path / ".env").write_text("DP_V=abc\n", "utf-8")
    example = need(SESSIONS / "claude_code" / "cc_raze_hooks.jsonl")
    line = _one_line_error(runner.invoke(app, ["plan", str(example)]))
    assert line.startswith("dp-compact: DP_V='abc' (from the .env file): "), line
    monkeypatch.setenv("DP_V", "xyz")  # the environment outranks .env: no mention of the file
    line = _one_line_error(runner.invoke(app, ["plan", str(example)]))
    assert line.startswith("dp-compact: DP_V='xyz': "), line


COMMANDS = ("plan", "profiles", "compact", "shrink", "validate", "restore", "recall", "replay", "curve",
            "timeline", "calibrate", "hook", "mcp")


@pytest.mark.parametrize("command", ("", *COMMANDS))
def test_help_cites_no_document_section_and_names_plainly(command):
    done = runner.invoke(app, [*command.split(), "--help"], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert "§" not in done.stdout and "DESIGN" not in done.stdout
    assert "<bool>" not in done.stdout  # an on/off flag takes no value
    assert not re.search(r"\{[a-z_]+\}", done.stdout), done.stdout  # arguments as SESSION, not {session}


def test_help_shows_the_argument_in_capitals():
    done = runner.invoke(app, ["plan", "--help"], env={"COLUMNS": "200"})
    assert "Usage: dp-compact plan [OPTIONS] SESSION" in done.stdout


def test_token_ratio_help_gives_the_order_of_the_defaults():
    text = " ".join(runner.invoke(app, ["plan", "--help"], env={"COLUMNS": "400"}).stdout.split())
    assert re.search(r"measured from the session's usage records.*recorded in a dp-compact summary.*family", text)


def test_settings_help_gives_each_default_from_the_settings():
    from dp_compact.settings import Settings

    text = " ".join(runner.invoke(app, ["plan", "--help"], env={"COLUMNS": "400"}).stdout.split())
    for name in ("v", "force_ratio", "min_keep_ratio", "baseline_e", "recall_tau"):
        assert f"Default: {Settings.model_fields[name].default}. [DP_{name.upper()}]" in text, name
    assert "Default: None" not in text  # those say what they do instead (measured, the profile, ...)


def test_plan_of_a_file_with_no_model_notes_the_unscaled_counts(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]), "utf-8")
    data = json.loads(runner.invoke(app, ["plan", str(path), "--json"]).stdout)
    assert any("no token ratio could be measured" in n and "no provider family is known" in n for n in data["notes"]), data["notes"]


@pytest.mark.parametrize("command", ["replay", "calibrate"])
def test_a_folder_holding_one_file_that_cannot_be_read_is_that_files_error(tmp_path, command):
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "bad.jsonl").write_text('{"role": "user", "content": "hi"}\n{bad\n', "utf-8")
    line = _one_line_error(runner.invoke(app, [command, str(folder), "--workers", "1"]))
    assert line.startswith(f"dp-compact: {folder / 'bad.jsonl'}:2: line 2 is not valid JSON")


@pytest.mark.parametrize("command", [["plan"], ["timeline", "-o", "t.png"], ["compact", "--dry-run"]])
def test_a_folder_given_for_one_session_file_says_which_commands_read_folders(tmp_path, command):
    line = _one_line_error(runner.invoke(app, [command[0], str(tmp_path), *command[1:]]))
    assert line == f"dp-compact: {tmp_path}: a folder, not a session file: give one file here (replay and calibrate read folders)"


def test_an_empty_session_path_says_what_an_empty_substitution_means(tmp_path, monkeypatch):
    """``dp-compact plan "$(ls -t ... | head -1)"`` when no transcript exists passes an empty path."""
    monkeypatch.chdir(tmp_path)
    line = _one_line_error(runner.invoke(app, ["plan", ""]))
    assert line.startswith("dp-compact: .: a folder, not a session file") and "did the command that finds the transcript find none?" in line


def test_options_that_cannot_go_together_name_the_command_and_its_help():
    session = need(SESSIONS / "claude_code" / "cc_raze_hooks.jsonl")
    line = _one_line_error(runner.invoke(app, ["compact", str(session)]))
    assert line == "dp-compact: compact: -o/--output is required (or give --dry-run) (try 'dp-compact compact --help')"


def test_a_session_without_a_model_is_priced_and_counted_as_the_provider_given():
    """Without a recorded model: the default provider's prices, said so, and cl100k counts unscaled;
    with ``--provider``, that provider's prices and its family's token factor."""
    from dp_compact.measure.tokens import TOKEN_RATIOS

    session = need(SESSIONS / "openai_chat" / "taubench_gpt4o_airline_task46.jsonl")
    default = json.loads(runner.invoke(app, ["plan", str(session), "--json"]).stdout)
    assert any("the default provider: the session records no model" in n for n in default["notes"])
    assert any("cl100k counts, unscaled" in n for n in default["notes"])
    for provider, family in (("gpt-4o", "openai"), ("claude-sonnet-4", "anthropic")):
        given = json.loads(runner.invoke(app, ["plan", str(session), "--json", "--provider", provider]).stdout)
        assert given["prices"]["name"] == provider and not any("default provider" in n for n in given["notes"])
        assert f"message tokens scaled by {TOKEN_RATIOS[family]:.3g} provider tokens per cl100k token (family {family})" in given["notes"]


def test_with_json_an_error_is_also_one_json_object_on_stdout(tmp_path):
    """An agent reading only stdout learns what went wrong; the stderr line and status stay."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "hi"}\n{oops\n', "utf-8")
    done = runner.invoke(app, ["plan", str(bad), "--json"])
    (line,) = done.stderr.splitlines()
    assert done.exit_code == 2 and json.loads(done.stdout) == {"error": {"type": "MalformedLineError", "message": line.removeprefix("dp-compact: "),
                                                 "path": str(bad), "line": 2}}
    typo = runner.invoke(app, ["plan", str(bad), "--json", "--provder", "x"])
    error = json.loads(typo.stdout)["error"]
    assert typo.exit_code == 2 and error["type"] == "UsageError" and "--provider" in error["message"] and error["line"] is None
    plain = runner.invoke(app, ["plan", str(bad)])
    assert plain.exit_code == 2 and plain.stdout == ""


def test_a_file_that_does_not_open_as_json_is_said_to_be_no_transcript(tmp_path):
    notes, torn = tmp_path / "notes.md", tmp_path / "torn.jsonl"
    notes.write_text("# notes\n\nsome text\n", "utf-8")
    torn.write_text('  {"role": "user"\n{"role": "user", "content": "x"}\n', "utf-8")
    said = _one_line_error(runner.invoke(app, ["plan", str(notes)]))
    assert said.startswith(f"dp-compact: {notes}:1: line 1 is not valid JSON") and said.endswith("not a session transcript (JSON or JSONL)")
    assert "not a session transcript" not in _one_line_error(runner.invoke(app, ["plan", str(torn)]))  # a torn first record is not


def test_a_window_the_price_database_does_not_list_is_said_to_be_assumed():
    session = need(SESSIONS / "other" / "gemini_cli_stream_figma.jsonl")
    data = json.loads(runner.invoke(app, ["plan", str(session), "--json"]).stdout)
    if not any("context window not listed" in n for n in data["notes"]):
        pytest.skip("this price database lists the window of the session's model")
    assert data["window_source"].startswith(f"assumed for {data['prices']['name']}, whose window the price database does not list")


@pytest.mark.parametrize("command", COMMANDS)
def test_help_prints_every_paragraph_and_option_text_as_written(command):
    """Each paragraph of a command's help on one line at a wide terminal (not broken where the
    source wraps), and each option's text whole: no bracketed word taken as a style tag."""
    import click
    import typer.main

    from dp_compact.cli.app import unwrapped

    group = typer.main.get_command(app)
    found = group.get_command(click.Context(group), command)
    out = runner.invoke(app, [command, "--help"], env={"COLUMNS": "1000"}).stdout
    lines = [line.strip(" │") for line in out.splitlines()]
    for paragraph in unwrapped(found.help).split("\n\n"):
        assert any(paragraph in line for line in lines), (paragraph, out)
    flat = " ".join(out.replace("│", " ").split())
    for param in found.get_params(click.Context(found)):
        text = " ".join((getattr(param, "help", None) or "").replace("\\[", "[").split())
        assert text in flat, (param.name, text)


def test_the_engine_option_names_the_extra_to_install():
    flat = " ".join(runner.invoke(app, ["replay", "--help"], env={"COLUMNS": "400"}).stdout.replace("│", " ").split())
    assert 'pip install ".[dask]" in the dp-compact source folder' in flat


@pytest.mark.parametrize(("command", "document"), [("plan", "docs/plan.md"), ("compact", "docs/pipeline.md"), ("recall", "docs/pipeline.md"),
                                                   ("replay", "docs/replay.md"), ("calibrate", "docs/calibration.md"), ("tune", "docs/tune.md")])
def test_each_commands_json_help_names_the_document_that_lists_its_keys(command, document):
    """``--json``'s help points at the one document that lists that command's JSON keys, and that document does."""
    from pathlib import Path

    shown = " ".join(runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"}).stdout.split())
    assert f"(its keys: {document})" in shown
    assert "--json" in (Path(__file__).resolve().parents[1] / document).read_text("utf-8")
