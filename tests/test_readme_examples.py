"""The shown outputs of the README and of docs/*.md are what the commands print today."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dp_compact.cli import app
from tests.conftest import SHARED, need

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def shown_runs() -> list[tuple[str, list[str], list[str]]]:
    """``(document, arguments, shown lines)`` of each code block that opens with ``$ dp-compact``,
    in the README and in every docs/*.md file."""
    runs = []
    for document in DOCUMENTS:
        text = document.read_text("utf-8")
        for block in re.findall(r"```\n(\$ dp-compact .*?)\n```", text, flags=re.S):
            command, *shown = block.splitlines()
            runs.append((document.relative_to(REPO).as_posix(), shlex.split(command)[2:], shown))
    return runs


RUNS = shown_runs()


def test_the_readme_shows_a_run_of_plan():
    assert "plan" in {arguments[0] for document, arguments, _ in RUNS if document == "README.md"}


def test_the_documents_show_runs_of_plan_and_replay():
    assert {arguments[0] for _, arguments, _ in RUNS} >= {"plan", "replay"}


@pytest.mark.parametrize(
    "document, arguments, shown", RUNS, ids=[f"{document}: {' '.join(a)}" for document, a, _ in RUNS]
)
def test_a_shown_run_prints_what_its_document_shows(document, arguments, shown, monkeypatch):
    monkeypatch.chdir(REPO)  # the documents' paths are the checkout's
    for argument in arguments:  # a run on the shared test data needs it beside the checkout
        if argument.startswith(("../shared", str(SHARED))):
            need(REPO / argument)
    done = CliRunner().invoke(app, arguments, env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == shown, document
