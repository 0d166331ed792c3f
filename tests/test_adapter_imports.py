"""The adapters are optional: ``import dp_compact`` and ``dp-compact --help`` load none of their frameworks."""

from __future__ import annotations

import subprocess
import sys

FRAMEWORKS = ("langchain", "langchain_core", "langgraph", "pydantic_ai", "mcp")


def _loaded_after(code: str) -> list[str]:
    probe = f"import sys; {code}; print(sorted({{m.split('.')[0] for m in sys.modules}} & set({FRAMEWORKS!r})))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 - our own printed list


def test_import_dp_compact_loads_no_adapter_framework():
    assert _loaded_after("import dp_compact, dp_compact.adapters; dp_compact.plan_file") == []


def test_cli_help_loads_no_adapter_framework():
    code = "import sys; sys.argv = ['dp-compact', '--help']; from dp_compact.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass"
    probe = f"{code}\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & set({FRAMEWORKS!r})))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "hook" in done.stdout and "mcp" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_hook_command_loads_no_adapter_framework(tmp_path):
    code = (
        "import io, sys; sys.stdin = io.StringIO('{}'); sys.argv = ['dp-compact', 'hook']\n"
        "from dp_compact.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass"
    )
    probe = f"{code}\nprint(sorted({{m.split('.')[0] for m in sys.modules}} & set({FRAMEWORKS!r})))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_mcp_command_without_the_sdk_says_what_to_install(monkeypatch):
    import importlib.util

    from typer.testing import CliRunner

    from dp_compact.cli import app

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else real(name, *a))
    done = CliRunner().invoke(app, ["mcp"])
    assert done.exit_code == 2
    assert done.stderr.strip() == 'dp-compact: the MCP SDK is not installed: pip install ".[mcp]" in the dp-compact source folder'


import importlib  # noqa: E402

import pytest  # noqa: E402


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [("langchain", "langchain", "langchain"), ("langchain", "langgraph", "langchain"),
     ("pydantic_ai", "pydantic_ai", "pydantic-ai"), ("mcp_server", "mcp", "mcp")],
)
def test_adapter_without_its_extra_names_the_extra(monkeypatch, module, blocked, extra):
    """A missing framework (simulated: ``sys.modules[name] = None``) gives one ImportError naming the extra."""
    for name in [m for m in sys.modules if m == blocked or m.startswith(blocked + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, blocked, None)
    monkeypatch.delitem(sys.modules, f"dp_compact.adapters.{module}", raising=False)
    with pytest.raises(ImportError) as caught:
        importlib.import_module(f"dp_compact.adapters.{module}")
    assert type(caught.value) is not ModuleNotFoundError
    message = str(caught.value)
    assert f'pip install ".[{extra}]" in the dp-compact source folder' in message and "\n" not in message
    assert caught.value.__cause__ is None and (caught.value.__context__ is None or caught.value.__suppress_context__)
