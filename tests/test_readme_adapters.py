"""The README's adapter examples are valid Python whose imports resolve with the extras installed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Use inside your agent"):]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_there_is_one_example_per_framework():
    assert len(_blocks()) == 2


@pytest.mark.parametrize("block", _blocks(), ids=["langchain", "pydantic-ai"])
def test_example_compiles_and_its_imports_resolve(block: str):
    compile(block, "README.md", "exec")
    imports = "\n".join(line for line in block.splitlines() if line.startswith(("from ", "import ")))
    exec(compile(imports, "README.md", "exec"), {})
    # every name the example calls is defined in it or imported (no undefined tools)
    defined = set(re.findall(r"^(?:def|class) (\w+)|^(\w+) =", block, re.M))
    names = {a or b for a, b in defined} | set(re.findall(r"import (?:\w+, )*(\w+)$", imports, re.M))
    for used in re.findall(r"tools=\[([^\]]*)\]", block):
        for name in (n.strip() for n in used.split(",") if n.strip()):
            assert name in names, name
