"""Every notebook runs top to bottom on the installed package and is stored without outputs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import REPO

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
    assert os.environ.get("JUPYTER_PLATFORM_DIRS") == "1"
