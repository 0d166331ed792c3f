"""The Typer application with every command registered, built on first use (:func:`application`).

The package's ``main`` (the console script) and :mod:`dp_compact.cli.render` load no Typer: a
run that :mod:`dp_compact.hot.main` answers from a transcript's kept state never builds the
application.
"""

from __future__ import annotations

from types import ModuleType

__all__ = ["COMMAND_MODULES", "application"]

#: Modules that register commands, in the order of `dp-compact --help`.
COMMAND_MODULES = ("plan", "pipeline", "replay", "calibrate", "tune")
_built: list[ModuleType] = []


def application() -> ModuleType:
    """:mod:`dp_compact.cli.app` with every command registered (the adapters' ``hook`` and ``mcp`` last)."""
    if not _built:
        import importlib

        module = importlib.import_module("dp_compact.cli.app")
        for name in COMMAND_MODULES:  # each registers its commands
            importlib.import_module(f"dp_compact.cli.{name}")
        from dp_compact.adapters.commands import register

        register(module.app)  # hook, mcp: their frameworks load only when they run
        _built.append(module)
    return _built[0]
