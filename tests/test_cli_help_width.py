"""Every command's help on a narrow terminal: option names and ``[DP_*]`` variables whole, never cut with "…"."""

from __future__ import annotations

import re
from typing import Literal, get_args, get_origin

import click
import pytest
import typer
import typer.main
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.cli.options import SETTING_FLAGS, _value_type

runner = CliRunner()
GROUP = typer.main.get_command(app)
COMMANDS = ("", *GROUP.list_commands(click.Context(GROUP)))
#: An option name or a ``[DP_*]`` variable that Rich cut short.
CUT = re.compile(r"(?:--?[\w-]+|\[DP_[A-Z0-9_]*)…")


def _command(name: str) -> click.Command:
    return GROUP.get_command(click.Context(GROUP), name) if name else GROUP


@pytest.mark.parametrize("columns", [80, 100, 120])
@pytest.mark.parametrize("command", COMMANDS)
def test_help_keeps_every_option_name_and_variable_whole(command, columns):
    done = runner.invoke(app, [*command.split(), "--help"], env={"COLUMNS": str(columns)})
    assert done.exit_code == 0, done.output
    assert not CUT.findall(done.stdout), (CUT.findall(done.stdout), done.stdout)
    found = _command(command)
    words = set(re.findall(r"[\w\[\]-]+", done.stdout.replace(",", " ")))
    for param in found.get_params(click.Context(found)):
        if param.param_type_name != "option" or getattr(param, "hidden", False):
            continue
        for name in (*param.opts, *param.secondary_opts):
            assert name in words, (name, done.stdout)
        for variable in re.findall(r"\[DP_[A-Z0-9_]+\]", getattr(param, "help", None) or ""):
            assert variable in words, (variable, done.stdout)


def test_each_choice_setting_names_its_choices_in_its_help():
    plan = _command("plan")
    helps = {p.name: p.help for p in plan.get_params(click.Context(plan))}
    for name in SETTING_FLAGS:
        if get_origin(_value_type(name)) is Literal:
            for choice in get_args(_value_type(name)):
                assert choice in helps[name], (name, choice)


def test_an_on_off_setting_is_turned_off_by_its_no_flag_and_not_given_both_ways():
    from dp_compact.cli.options import settings_options

    probe = typer.Typer()

    @probe.command()
    @settings_options()
    def show(*, flags: dict) -> None:
        typer.echo(repr(flags["clear_tool_results"]))

    assert runner.invoke(probe, []).stdout.strip() == "None"  # not given: DP_* and the default decide
    assert runner.invoke(probe, ["--clear-tool-results"]).stdout.strip() == "True"
    assert runner.invoke(probe, ["--no-clear-tool-results"]).stdout.strip() == "False"
    done = runner.invoke(app, ["plan", "session.jsonl", "--clear-tool-results", "--no-clear-tool-results"])
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr.strip() == ("dp-compact: plan: --clear-tool-results and --no-clear-tool-results together: give one"
                                   " (try 'dp-compact plan --help')")
