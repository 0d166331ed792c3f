"""Every notebook runs top to bottom on the installed package and is stored without outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, SESSIONS

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))


def test_notebooks_exist():
    assert {p.name for p in NOTEBOOKS} >= {"benefit_curves.ipynb", "calibration.ipynb"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path: Path):
    nbformat = pytest.importorskip("nbformat")
    book = nbformat.read(path, as_version=4)
    code = [cell for cell in book.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
@pytest.mark.slow
def test_notebook_executes_without_error(path: Path, monkeypatch: pytest.MonkeyPatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")  # jupyter_core's own paths, no migration warning
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    book = nbformat.read(path, as_version=4)
    # "python3" is the kernel ipykernel provides for the running interpreter (jupyter_client
    # starts it with sys.executable), so a fresh venv with the test extra needs no kernel install.
    client = nbclient.NotebookClient(book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError naming the cell on any error
    errors = [o for cell in book.cells if cell.cell_type == "code" for o in cell.outputs if o.output_type == "error"]
    assert not errors
    assert any(o.output_type == "display_data" and "image/png" in o.get("data", {}) for c in book.cells for o in c.get("outputs", []))
    printed = "".join(o.get("text", "") for c in book.cells for o in c.get("outputs", []) if o.output_type == "stream")
    for expected in _expected_lines(path.name):  # what the notebook prints is what the package computes here
        assert expected in printed, expected


def _expected_lines(name: str) -> list[str]:
    """Lines the notebook must print, computed in the test from the package and the committed calibration."""
    from importlib.resources import files

    from dp_compact import load_settings, plan, read_session
    from dp_compact.api import resolve_prices, session_tokens

    example = Path(str(files("dp_compact") / "examples" / "session.jsonl"))
    lines = [f"example session: {example}"]
    if name == "benefit_curves.ipynb":
        session, settings = read_session(example), load_settings()
        base = plan(session, session_tokens(session, settings, use_cache=False), settings, resolve_prices(settings, session.model))
        lines.append(f"decision {base.decision} (rule {base.rule}), k = {base.k}, min_keep = {base.min_keep}")
    elif name == "calibration.ipynb" and SESSIONS.is_dir():
        results = json.loads((REPO / "calibration" / "results.json").read_text(encoding="utf-8"))
        lines.append(f"chosen unit: {results['recall_age']}")  # the notebook calibrates ../shared/sessions
    return lines
