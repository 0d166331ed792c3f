"""Adapters that put the planner and the pipeline inside agent frameworks (optional extras).

- :mod:`.langchain`: ``DpCompactMiddleware`` for LangChain 1.x ``create_agent`` (extra ``langchain``);
- :mod:`.pydantic_ai`: ``DpCompactProcessor``, a pydantic-ai history processor (extra ``pydantic-ai``);
- :mod:`.claude_code_hook`: ``dp-compact hook``, Claude Code's status line and ``PreCompact`` hook;
- :mod:`.mcp_server`: ``dp-compact mcp``, tools ``plan``, ``recall`` and ``restore`` over stdio (extra ``mcp``);
- :mod:`.live`: the shared step, a framework's messages read as a session.

Importing this package loads none of the frameworks; each module imports its own.
"""

from __future__ import annotations

from dp_compact.errors import install_hint

__all__ = ["MissingExtraError"]


class MissingExtraError(ImportError):
    """An adapter imported without its framework: one line naming the extra to install.

    Parameters
    ----------
    module : str
        The adapter module (``"langchain"``, ``"pydantic_ai"``, ``"mcp_server"``).
    extra : str
        The extra of ``pyproject.toml`` that installs its framework.
    missing : str or None
        The top-level package that could not be imported, when known.

    Examples
    --------
    >>> str(MissingExtraError("langchain", "langchain", "langgraph"))
    'dp_compact.adapters.langchain needs the langchain extra (langgraph is not installed): pip install ".[langchain]" in the dp-compact source folder'
    """

    def __init__(self, module: str, extra: str, missing: str | None = None) -> None:
        why = f" ({missing.split('.')[0]} is not installed)" if missing else ""
        super().__init__(f"dp_compact.adapters.{module} needs the {extra} extra{why}: {install_hint(extra)}",
                         name=missing)
