"""Every regression case of ../shared/cases, run exactly as ../shared/cases/SCHEMA.md says (id = folder name).

The harness and every check are our own implementation of SCHEMA.md (tests/case_harness.py,
tests/case_checks.py); ../shared/tools/run_cases.py is an independent referee run by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.case_checks import evaluate, load_case
from tests.case_harness import execute
from tests.conftest import CASES, need


#: Cases whose fault is not fixed yet, each with what is wrong; they still run and report.
KNOWN_FAILURES: dict[str, str] = {}


def _case_folders() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if (p / "case.json").is_file()) if CASES.exists() else []


def _marked(folder: Path) -> object:
    reason = KNOWN_FAILURES.get(folder.name)
    return pytest.param(folder, marks=pytest.mark.xfail(reason=reason, strict=True)) if reason else folder


@pytest.mark.parametrize("folder", [_marked(f) for f in _case_folders()] or [CASES / "absent"], ids=lambda p: p.name)
@pytest.mark.slow
def test_case_passes_every_check(folder: Path, tmp_path: Path) -> None:
    need(folder / "case.json")
    case = load_case(folder)
    assert case["id"] == folder.name
    run = execute(case, folder, tmp_path)
    failed = evaluate(run)
    assert not failed, f"{folder.name}: {failed}\nexit {run.returncode}\nstdout: {run.stdout[-1500:]}\nstderr: {run.stderr[-1500:]}"


def test_case_harness_detects_a_broken_output(tmp_path: Path) -> None:
    """The harness is not vacuous: an output opening on an orphan tool result fails."""
    folder = need(CASES / "01-keep-n-lands-on-tool-result")
    case = {**load_case(folder), "command": "tail -n 4 input.jsonl > out.jsonl", "output": "out.jsonl"}
    failed = evaluate(execute(case, folder, tmp_path))
    names = {f.split(":")[0] for f in failed}
    assert {"no_orphan_tool_results", "tail_starts_with", "kept_messages_between", "summary_contains"} <= names
    assert "output_parses" not in names and "input_unchanged" not in names
