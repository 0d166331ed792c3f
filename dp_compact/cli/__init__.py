"""The ``dp-compact`` command line: parse, call the library, render (Typer).

One module per command group: :mod:`~dp_compact.cli.plan` (``plan``, ``profiles``),
:mod:`~dp_compact.cli.pipeline` (``compact``, ``shrink``, ``validate``, ``restore``, ``recall``),
:mod:`~dp_compact.cli.replay` (``replay``, ``curve``, ``timeline``) and
:mod:`~dp_compact.cli.calibrate` and :mod:`~dp_compact.cli.tune` (which renders its own report); the options in :mod:`~dp_compact.cli.options`, every printed
text in :mod:`~dp_compact.cli.render`, the application and its one error boundary in
:mod:`~dp_compact.cli.app`.
"""

from __future__ import annotations

from dp_compact.cli.app import EXIT_COMPACT, EXIT_ERROR, EXIT_INVALID, app, main

# Each module registers its commands; the order of these imports is the order of `dp-compact --help`.
from dp_compact.cli import plan  # noqa: E402, F401, I001
from dp_compact.cli import pipeline  # noqa: E402, F401
from dp_compact.cli import replay  # noqa: E402, F401
from dp_compact.cli import calibrate  # noqa: E402, F401
from dp_compact.cli import tune  # noqa: E402, F401
from dp_compact.adapters.commands import register as _register_adapter_commands  # noqa: E402

_register_adapter_commands(app)  # hook, mcp: their frameworks load only when they run

__all__ = ["EXIT_COMPACT", "EXIT_ERROR", "EXIT_INVALID", "app", "main"]
