"""The public API: __all__ is exact and importing dp_compact stays light."""

from __future__ import annotations

import subprocess
import sys

import dp_compact


def test_all_lists_exactly_the_public_names():
    for name in dp_compact.__all__:
        assert getattr(dp_compact, name).__doc__, name
    public = {name for name in vars(dp_compact) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(dp_compact, name)).__name__ == "module"}
    helpers = {"annotations", "importlib", "TYPE_CHECKING", "Any"}
    assert set(dp_compact.__all__) == public - modules - helpers


def test_unknown_attribute_is_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="no_such_name"):
        dp_compact.no_such_name  # noqa: B018


def test_import_loads_neither_matplotlib_typer_nor_sdks():
    code = (
        "import sys, dp_compact; dp_compact.plan_file; "
        "bad = [m for m in ('matplotlib', 'typer', 'anthropic', 'openai', 'genai_prices', 'tiktoken') if m in sys.modules]; print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
