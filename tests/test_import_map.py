"""The import map: the core (cost model, cuts, estimation, planner and what they stand on) never
reaches the readers, the calibration wing, the figures or the command line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dp_compact"

#: The core modules (``dp_compact.<name>``).
CORE = (
    "benefit", "conversation", "cuts", "decision", "documents", "estimation", "file_operations", "io", "lookahead",
    "patterns", "planner", "planner_lookahead", "pricing", "reuse", "settings", "summary_text", "tokens", "windows",
)
#: Modules (and packages) the core must not import, at any depth of its own imports.
FORBIDDEN = ("sessions", "calibration", "figures", "timeline", "cli", "replay", "pipeline")


def _module_file(name: str) -> Path | None:
    """The source file of ``dp_compact.<name>`` (a module or a package's ``__init__``), None if absent."""
    base = PACKAGE.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(name: str) -> set[str]:
    """``dp_compact`` modules imported anywhere in ``dp_compact.<name>`` (function bodies and
    ``TYPE_CHECKING`` blocks included), as dotted names below ``dp_compact``."""
    path = _module_file(name)
    assert path is not None, name
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for dotted in names:
            if dotted.startswith("dp_compact."):
                inner = dotted.removeprefix("dp_compact.")
                if _module_file(inner) is not None:
                    found.add(inner)
    return found


def _forbidden(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FORBIDDEN)


def _reach(start: str) -> dict[str, str]:
    """Every ``dp_compact`` module ``start`` reaches through imports, mapped to the module importing it."""
    seen: dict[str, str] = {}
    stack = [start]
    while stack:
        current = stack.pop()
        for target in sorted(_imports(current)):
            if target not in seen and target != start:
                seen[target] = current
                if not _forbidden(target):
                    stack.append(target)
    return seen


@pytest.mark.parametrize("module", CORE)
def test_core_module_never_imports_readers_calibration_figures_or_cli(module: str) -> None:
    arrows = [f"dp_compact.{via} -> dp_compact.{target}" for target, via in _reach(module).items() if _forbidden(target)]
    assert not arrows, f"dp_compact.{module} reaches forbidden modules: {arrows}"


def test_the_walk_sees_a_forbidden_arrow() -> None:
    # The check itself can fail: the timeline imports the calibration wing's history reader.
    assert "calibration.history" in _imports("timeline")
    assert any(_forbidden(target) for target in _reach("timeline"))


def test_the_wing_is_a_package_and_reaches_the_core() -> None:
    # The calibration wing's modules live under their package and stand on the core, so the
    # arrow the core test forbids is the one back.
    for name in ("calibration.history", "calibration.recall", "calibration.measures", "calibration.fit", "calibration.results"):
        assert _module_file(name) is not None, name
    assert {"cuts", "estimation", "reuse"} <= _imports("calibration.measures")
    assert _forbidden("calibration.measures") and not _forbidden("reuse")


def test_core_modules_exist() -> None:
    assert all(_module_file(name) is not None for name in CORE)
