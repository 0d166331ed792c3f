"""The README's shown outputs on the bundled example are what the commands print today."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dp_compact.cli import app

REPO = Path(__file__).resolve().parents[1]


def shown_runs() -> list[tuple[list[str], list[str]]]:
    """``(arguments, shown lines)`` of each README code block that opens with ``$ dp-compact``."""
    text = (REPO / "README.md").read_text("utf-8")
    runs = []
    for block in re.findall(r"```\n(\$ dp-compact .*?)\n```", text, flags=re.S):
        command, *shown = block.splitlines()
        runs.append((shlex.split(command)[2:], shown))
    return runs


RUNS = shown_runs()


def test_the_readme_shows_runs_of_plan_and_replay():
    assert {arguments[0] for arguments, _ in RUNS} >= {"plan", "replay"}


@pytest.mark.parametrize("arguments, shown", RUNS, ids=[" ".join(a) for a, _ in RUNS])
def test_a_shown_run_prints_what_the_readme_shows(arguments, shown, monkeypatch):
    monkeypatch.chdir(REPO)  # the README's paths are the checkout's
    done = CliRunner().invoke(app, arguments, env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == shown
