"""``dp-compact mcp``: an MCP server over stdio with the tools ``plan``, ``recall`` and ``restore``.

An agent uses it to ask whether compacting its own transcript pays now (``plan``), to search
what earlier compactions archived (``recall``) and to bring an archived head back verbatim
(``restore``), the same functions as ``dp-compact plan``, ``recall`` and ``restore``. Built on
the official ``mcp`` SDK (``MCPServer`` in mcp 2, ``FastMCP`` in mcp 1). Errors reach the client
as tool errors with the library's one-line message. Requires ``pip install ".[mcp]"``.
"""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

from dp_compact.errors import MissingExtraError
from dp_compact.errors import DpCompactError

if find_spec("mcp") is None:  # the SDK itself is imported when the server is built
    raise MissingExtraError("mcp_server", "mcp", "mcp")

__all__ = ["SERVER_NAME", "build_server", "plan_tool", "recall_tool", "restore_tool"]

SERVER_NAME = "dp-compact"
_INSTRUCTIONS = (
    "Plans compaction of an agent conversation in dollars and finds what earlier compactions archived: "
    "`plan` a session file; `recall` archived heads by words, paths or identifiers; `restore` an archive:// reference."
)


def plan_tool(session_path: str, provider: str | None = None, max_context_tokens: int | None = None) -> dict[str, Any]:
    """Plan a session file: compact now or not, and how many messages to keep (DESIGN §2, §7).

    Returns ``Plan.to_dict()`` (decision, rule, k, cut, tokens, terms in $, estimates, notes).
    Raises :class:`~dp_compact.errors.DpCompactError` on bad input or settings.
    """
    from dp_compact.api import plan_file
    from dp_compact.settings import load_settings

    return plan_file(session_path, load_settings(provider=provider, max_context_tokens=max_context_tokens), lenient=True).to_dict()


def recall_tool(query: str, session: str | None = None, limit: int = 10) -> list[dict[str, Any]]:
    """Archived heads matching ``query`` (all terms; ``word*`` a prefix), best first (``ArchiveHit.to_dict()``)."""
    from dp_compact.pipeline.archive import ArchiveStore
    from dp_compact.settings import load_settings

    return [hit.to_dict() for hit in ArchiveStore(load_settings().archive_dir).search(query, session=session, limit=limit)]


def restore_tool(ref: str) -> list[dict[str, Any]]:
    """The messages archived under ``ref`` (``archive://<session>/<id>``), exactly as they were sent."""
    from dp_compact.pipeline.archive import ArchiveStore
    from dp_compact.settings import load_settings

    return ArchiveStore(load_settings().archive_dir).restore(ref)


def _sdk() -> tuple[Any, type[Exception]]:
    """The server class and its anticipated-error class: ``MCPServer`` (mcp 2) or ``FastMCP`` (mcp 1)."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        from mcp.server.fastmcp import FastMCP as MCPServer  # type: ignore[no-redef]
        from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]
    return MCPServer, ToolError


def build_server() -> Any:
    """The MCP server with the three tools registered (not started).

    A :class:`~dp_compact.errors.DpCompactError` inside a tool becomes the SDK's ``ToolError`` with
    its one-line message, which the client receives as a tool error (``is_error``).
    """
    server_class, ToolError = _sdk()  # noqa: N806
    server = server_class(SERVER_NAME, instructions=_INSTRUCTIONS)

    @server.tool(name="plan")
    def plan(session_path: str, provider: str | None = None, max_context_tokens: int | None = None) -> dict[str, Any]:
        """Decide whether compacting the session file at session_path pays now, and how many recent messages to keep."""
        try:
            return plan_tool(session_path, provider, max_context_tokens)
        except DpCompactError as exc:
            raise ToolError(str(exc)) from None

    @server.tool(name="recall")
    def recall(query: str, session: str | None = None, limit: int = 10) -> list[dict[str, Any]]:
        """Search archived conversation heads by words, file paths or identifiers (all must match; word* for a prefix)."""
        try:
            return recall_tool(query, session, limit)
        except DpCompactError as exc:
            raise ToolError(str(exc)) from None

    @server.tool(name="restore")
    def restore(ref: str) -> list[dict[str, Any]]:
        """Bring back the original messages archived under ref (archive://<session>/<id>), as they were sent."""
        try:
            return restore_tool(ref)
        except DpCompactError as exc:
            raise ToolError(str(exc)) from None

    return server


def serve() -> None:
    """Run the server on stdio until the client closes it."""
    build_server().run("stdio")
