"""The public API: __all__ is exact and importing dp_compact stays light."""

from __future__ import annotations

import subprocess
import sys

import dp_compact


def test_all_lists_exactly_the_public_names():
    public = {name for name in vars(dp_compact) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(dp_compact, name)).__name__ == "module"}
    assert set(dp_compact.__all__) == public - modules
    for name in dp_compact.__all__:
        assert getattr(dp_compact, name).__doc__, name


def test_import_loads_neither_matplotlib_typer_nor_sdks():
    code = "import sys, dp_compact; bad = [m for m in ('matplotlib', 'typer', 'anthropic', 'openai', 'genai_prices', 'tiktoken') if m in sys.modules]; print(bad)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
