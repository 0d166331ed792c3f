"""The ``dp-compact`` command line: parse, call the library, render (Typer).

One module per command group: :mod:`~dp_compact.cli.plan` (``plan``, ``profiles``),
:mod:`~dp_compact.cli.pipeline` (``compact``, ``shrink``, ``validate``, ``restore``, ``recall``),
:mod:`~dp_compact.cli.replay` (``replay``, ``curve``, ``timeline``) and
:mod:`~dp_compact.cli.calibrate` and :mod:`~dp_compact.cli.tune` (which renders its own report); the options in :mod:`~dp_compact.cli.options`, every printed
text in :mod:`~dp_compact.cli.render`, the application and its one error boundary in
:mod:`~dp_compact.cli.app`.

Importing this package loads no Typer: ``app`` (and ``EXIT_*``) are built on first use
(:mod:`~dp_compact.cli.registry`), and :func:`main`, the console script, runs ``plan FILE`` and
``hook`` from a transcript's kept state when it can (:mod:`dp_compact.hot.main`).
"""

from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["EXIT_COMPACT", "EXIT_ERROR", "EXIT_INVALID", "app", "main"]

#: Names of :mod:`dp_compact.cli.app` this package gives, loaded with the application on first use.
_FROM_APP = ("EXIT_COMPACT", "EXIT_ERROR", "EXIT_INVALID")


def main() -> None:
    """Console-script entry point (``dp-compact``): ``plan FILE`` and ``hook`` take the hot path
    (:mod:`dp_compact.hot.main`: no Typer, pydantic or price data loaded when a transcript's kept
    state answers), every other command the Typer application (:mod:`dp_compact.cli.registry`)."""
    from dp_compact.hot.client import run
    from dp_compact.hot.main import main as command

    run(command)  # the plan server answers a warm plan or hook when one runs (dp_compact.hot.client)


class _Package(types.ModuleType):
    """This package: ``app`` is the Typer application (as the name ``dp_compact.cli.app`` has always
    meant), loaded on first use; the import system's binding of the submodule to it is ignored."""

    @property
    def app(self) -> Any:
        from dp_compact.cli.registry import application

        return application().app

    @app.setter
    def app(self, value: Any) -> None:
        pass  # the submodule dp_compact.cli.app, bound by the import system: the application stands for it


def __getattr__(name: str) -> Any:
    if name in _FROM_APP:
        from dp_compact.cli.registry import application

        return getattr(application(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_Package.__name__ = "module"  # still reads as a module (``type(dp_compact.cli).__name__``)
sys.modules[__name__].__class__ = _Package
