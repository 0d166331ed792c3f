"""The adapter examples (README "Inside your agent", docs/adapters.md) are valid Python whose
imports resolve with the extras installed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: Where adapter examples live: document, and the heading of its section (None: the whole file).
PLACES = [("README.md", "## Inside your agent"), ("docs/adapters.md", None)]
FRAMEWORKS = {"langchain": "dp_compact.adapters.langchain", "pydantic-ai": "dp_compact.adapters.pydantic_ai"}


def _blocks(document: str, heading: str | None) -> list[str]:
    text = (REPO / document).read_text(encoding="utf-8")
    if heading is not None:
        text = text[text.index(heading):]
        end = text.find("\n## ", 1)
        text = text if end < 0 else text[:end]
    return re.findall(r"```python\n(.*?)```", text, re.S)


BLOCKS = [(document, block) for document, heading in PLACES for block in _blocks(document, heading)]


@pytest.mark.parametrize("document, heading", PLACES, ids=[document for document, _ in PLACES])
def test_there_is_one_example_per_framework(document: str, heading: str | None):
    blocks = _blocks(document, heading)
    assert len(blocks) == len(FRAMEWORKS)
    for framework, module in FRAMEWORKS.items():
        assert sum(f"from {module} import" in block for block in blocks) == 1, framework


def _framework(block: str) -> str:
    return next((name for name, module in FRAMEWORKS.items() if module in block), "other")


@pytest.mark.parametrize(
    "document, block", BLOCKS, ids=[f"{document}: {_framework(block)}" for document, block in BLOCKS]
)
def test_example_compiles_and_its_imports_resolve(document: str, block: str):
    compile(block, document, "exec")
    imports = "\n".join(line for line in block.splitlines() if line.startswith(("from ", "import ")))
    exec(compile(imports, document, "exec"), {})
    # every name the example calls is defined in it or imported (no undefined tools)
    defined = set(re.findall(r"^(?:def|class) (\w+)|^(\w+) =", block, re.M))
    names = {a or b for a, b in defined} | set(re.findall(r"import (?:\w+, )*(\w+)$", imports, re.M))
    for used in re.findall(r"tools=\[([^\]]*)\]", block):
        for name in (n.strip() for n in used.split(",") if n.strip()):
            assert name in names, name
