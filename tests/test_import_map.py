"""The layer contract of the package: which module may import which.

Layers, lowest first (a module may import its own layer and the layers below, never above):

=============  ==========================================================================
base           ``io``, ``errors``, ``_fast`` (speed tricks), ``text/`` (patterns, summary wording)
config         ``settings``, ``pricing``
conversation   ``conversation`` (the value types every reader produces)
measure        ``measure/``: tokens, images, documents, windows, estimation, file operations, reuse
core           ``core/``: the cost model and the planners
readers        ``sessions/``: the only home of format knowledge
preparation    ``prepare``: one prepared session, from which every command starts
pipeline       ``pipeline/``: the compaction (DESIGN §5)
calibration    ``calibration/``
replay         ``replay/`` (DESIGN §6), the timeline included
fleet          ``fleet/``: many sessions on a local pool or Dask (a folder replay is a fleet run)
tune           ``tune``: a tool's settings replayed over a user's transcripts (a fleet run)
entry          ``api``: the file entry points (``plan_file``, ``curve_file``, ``timeline_file``)
front          ``adapters/``, ``figures/``
cli            ``cli/``
package        ``dp_compact`` itself (its ``__init__`` re-exports)
=============  ==========================================================================

Also: no import circle, imports inside functions and ``TYPE_CHECKING`` blocks included; no module
imports from the package's ``__init__`` (``from dp_compact import X`` of a name that is not a
module), nor from its own subpackage's ``__init__`` (a package's ``__main__`` excepted).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dp_compact"

#: Layers, lowest first: (name, module prefixes below ``dp_compact``).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("io", "errors", "_fast", "text")),
    ("config", ("settings", "pricing")),
    ("conversation", ("conversation",)),
    ("measure", ("measure",)),
    ("core", ("core",)),
    ("readers", ("sessions",)),
    ("preparation", ("prepare",)),
    ("pipeline", ("pipeline",)),
    ("calibration", ("calibration",)),
    ("replay", ("replay",)),
    ("fleet", ("fleet",)),
    ("tune", ("tune",)),
    ("entry", ("api",)),
    ("front", ("adapters", "figures")),
    ("cli", ("cli", "hot")),  # hot: the entry point's hot path (plan FILE, hook from a kept state)
    ("package", ("",)),
)


def _modules() -> list[str]:
    """Every module of the package as a dotted name below ``dp_compact`` ("" for the package itself)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


MODULES = _modules()


def _is_package(name: str) -> bool:
    return (PACKAGE.joinpath(*name.split(".")) / "__init__.py").is_file() if name else True


def _file(name: str) -> Path:
    base = PACKAGE.joinpath(*name.split(".")) if name else PACKAGE
    return base / "__init__.py" if _is_package(name) else base.with_suffix(".py")


def _resolve(dotted: str) -> str:
    """The module a dotted name below ``dp_compact`` lives in (the longest module prefix)."""
    parts = dotted.split(".") if dotted else []
    while parts and ".".join(parts) not in MODULES:
        parts.pop()
    return ".".join(parts)


@cache
def imports(name: str) -> frozenset[str]:
    """Modules ``dp_compact.<name>`` imports anywhere (function bodies and ``TYPE_CHECKING`` included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(_file(name).read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for dotted in targets:
            if dotted == "dp_compact" or dotted.startswith("dp_compact."):
                found.add(_resolve(dotted.removeprefix("dp_compact").lstrip(".")))
    found.discard(name)
    return frozenset(found)


def layer(name: str) -> int:
    """Index in :data:`LAYERS` of the module (longest matching prefix)."""
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".") or prefix == "") and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    assert best is not None, name
    return best


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each a list of names."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(imports(node)):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in MODULES:
        if module not in index:
            visit(module)
    return found


def test_every_module_is_in_a_layer() -> None:
    unplaced = [m for m in MODULES if m and LAYERS[layer(m)][0] == "package"]
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"


@pytest.mark.parametrize("module", [m for m in MODULES if m])
def test_module_imports_only_its_layer_and_below(module: str) -> None:
    upward = [f"{module} ({LAYERS[layer(module)][0]}) -> {t} ({LAYERS[layer(t)][0]})"
              for t in sorted(imports(module)) if layer(t) > layer(module)]
    assert not upward, f"imports from a higher layer: {upward}"


def test_package_has_no_import_circle() -> None:
    assert _cycles() == []


@pytest.mark.parametrize("module", [m for m in MODULES if m])
def test_module_never_imports_a_package_init_of_its_own(module: str) -> None:
    if module.endswith(".__main__"):  # ``python -m pkg`` runs the package's own entry point
        return
    own = [t for t in imports(module) if _is_package(t) and (t == "" or module.startswith(t + "."))]
    assert not own, f"{module} imports from the __init__ of {own or ['dp_compact']}"


def test_the_walk_sees_function_level_imports_and_circles(tmp_path: Path) -> None:
    # The checks themselves can fail: an import inside a function is an arrow, and the cli (top
    # layer) imports the package's lower layers, never the other way round.
    assert "api" in imports("cli.plan")
    assert layer("cli.plan") > layer("api") > layer("replay.timeline") > layer("prepare") > layer("core.planner")
    assert layer("core.planner") > layer("measure.tokens") > layer("conversation") > layer("settings") > layer("io")
