"""``dp-compact mcp``: an MCP server over stdio with the tools ``plan``, ``recall`` and ``restore``.

An agent uses it to ask whether compacting its own transcript pays now (``plan``), to search
what earlier compactions archived (``recall``) and to bring an archived head back verbatim
(``restore``), the same functions as ``dp-compact plan``, ``recall`` and ``restore``. Built on
the official ``mcp`` SDK (``MCPServer`` in mcp 2, ``FastMCP`` in mcp 1). Errors reach the client
as tool errors with the library's one-line message. Requires ``pip install ".[mcp]"``.

An MCP client is a model acting on text it read, so the tools take nothing on trust:

- ``plan`` reads only a regular file under the allowed roots: ``DP_MCP_ROOTS`` (folders
  separated by ``os.pathsep``), else the current folder and the folders where the supported agents
  keep their transcripts (:data:`TRANSCRIPT_FOLDERS`); never a FIFO, a device or a folder (a FIFO
  would block the server forever), and symbolic links are resolved before the check;
- ``plan``'s ``max_context_tokens`` is bounded by :data:`~dp_compact.measure.windows.MAX_PLAUSIBLE_WINDOW_TOKENS`;
- ``restore`` returns one page of messages (:data:`RESTORE_PAGE_CHARS` characters of JSON by
  default) with ``next_offset`` for the next; a single message larger than the page has its long
  strings shortened (listed in ``shortened``; ``dp-compact restore`` gives it whole);
- ``recall`` has the archive's bounds (distinct terms, query length, steps, ``limit``).
"""

from __future__ import annotations

import json
import os
import stat
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from dp_compact.errors import MissingExtraError
from dp_compact.errors import DpCompactError
from dp_compact.adapters.recall import shortened as shortened_message

if find_spec("mcp") is None:  # the SDK itself is imported when the server is built
    raise MissingExtraError("mcp_server", "mcp", "mcp")

__all__ = [
    "RESTORE_PAGE_CHARS", "SERVER_NAME", "TRANSCRIPT_FOLDERS", "allowed_roots", "build_server", "checked_session_path", "plan_tool",
    "recall_tool", "restore_tool",
]

SERVER_NAME = "dp-compact"
_INSTRUCTIONS = (
    "Plans compaction of an agent conversation in dollars and finds what earlier compactions archived: "
    "`plan` a session file; `recall` archived heads by words, paths or identifiers; `restore` an archive:// reference."
)


#: Folders (under the home folder) where the supported agents keep their transcripts: Claude Code,
#: Codex, Gemini CLI (``dp_compact.tune`` names the same places).
TRANSCRIPT_FOLDERS = (".claude/projects", ".codex/sessions", ".gemini/tmp")
#: Characters of message JSON one ``restore`` page holds by default, and the most a client may ask for.
RESTORE_PAGE_CHARS = 40_000
MAX_RESTORE_PAGE_CHARS = 400_000
#: Characters a string of a message larger than a page is shortened to.
_SHORTENED_CHARS = 2_000


def allowed_roots() -> list[Path]:
    """The folders ``plan`` may read under: ``DP_MCP_ROOTS`` when set, else the current folder and :data:`TRANSCRIPT_FOLDERS`."""
    configured = os.environ.get("DP_MCP_ROOTS")
    if configured:
        return [Path(p).expanduser().resolve() for p in configured.split(os.pathsep) if p.strip()]
    home = Path.home()
    return [Path.cwd().resolve(), *((home / f).resolve() for f in TRANSCRIPT_FOLDERS)]


def checked_session_path(session_path: str) -> Path:
    """``session_path`` resolved, when it is a regular file under :func:`allowed_roots`.

    Raises
    ------
    SessionError
        If it is outside the roots, missing, or not a regular file (a FIFO, a device, a folder).
    """
    from dp_compact.errors import SessionError

    try:
        path = Path(session_path).expanduser().resolve(strict=True)
        mode = path.stat().st_mode
    except (OSError, RuntimeError, ValueError) as exc:
        raise SessionError(session_path, None, f"cannot read the file: {getattr(exc, 'strerror', None) or exc}") from None
    roots = allowed_roots()
    if not any(path.is_relative_to(root) for root in roots):
        shown = ", ".join(map(str, roots))
        raise SessionError(session_path, None, f"outside the folders this server may read ({shown}); set DP_MCP_ROOTS to allow others")
    if not stat.S_ISREG(mode):
        raise SessionError(session_path, None, "not a regular file (a FIFO, a device or a folder is never read)")
    return path


def plan_tool(session_path: str, provider: str | None = None, max_context_tokens: int | None = None) -> dict[str, Any]:
    """Plan a session file: compact now or not, and how many messages to keep (DESIGN §2, §7).

    Returns ``Plan.to_dict()`` (decision, rule, k, cut, tokens, terms in $, estimates, notes).
    Raises :class:`~dp_compact.errors.DpCompactError` on bad input or settings, a path outside the
    allowed roots or not a regular file (:func:`checked_session_path`), or a ``max_context_tokens``
    outside 1..``MAX_PLAUSIBLE_WINDOW_TOKENS``.
    """
    import time

    from dp_compact.api import plan_file
    from dp_compact.errors import SettingsError
    from dp_compact.measure.windows import MAX_PLAUSIBLE_WINDOW_TOKENS
    from dp_compact.settings import load_settings

    if max_context_tokens is not None and (
        isinstance(max_context_tokens, bool) or not isinstance(max_context_tokens, int) or not 0 < max_context_tokens <= MAX_PLAUSIBLE_WINDOW_TOKENS
    ):
        raise SettingsError("max_context_tokens", max_context_tokens, f"must be a whole number of tokens from 1 to {MAX_PLAUSIBLE_WINDOW_TOKENS:,}")
    path = checked_session_path(session_path)
    return plan_file(path, load_settings(provider=provider, max_context_tokens=max_context_tokens), lenient=True,
                     now=time.time(), now_source="wall clock").to_dict()  # the agent asks now: the silence since its last call (DESIGN §8)


def recall_tool(query: str, session: str | None = None, limit: int = 10) -> list[dict[str, Any]]:
    """Archived heads matching ``query`` (all terms; ``word*`` a prefix), best first (``ArchiveHit.to_dict()``)."""
    from dp_compact.pipeline.archive import ArchiveStore
    from dp_compact.settings import load_settings

    return [hit.to_dict() for hit in ArchiveStore(load_settings().archive_dir).search(query, session=session, limit=limit)]




def restore_tool(ref: str, offset: int = 0, max_chars: int = RESTORE_PAGE_CHARS) -> dict[str, Any]:
    """One page of the messages archived under ``ref`` (``archive://<session>/<id>``), as they were sent.

    Returns ``{"ref", "total", "offset", "next_offset", "messages", "shortened"}``: the messages
    from ``offset`` whose JSON fits in ``max_chars`` characters (at least one), ``next_offset``
    the position to ask for next (None after the last), ``shortened`` the positions of messages
    larger than a page whose long strings were cut.
    """
    from dp_compact.errors import ArchiveError
    from dp_compact.pipeline.archive import ArchiveStore
    from dp_compact.settings import load_settings

    for name, value, low, high in (("offset", offset, 0, 2**31), ("max_chars", max_chars, 1_000, MAX_RESTORE_PAGE_CHARS)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ArchiveError(f"{name} must be a whole number from {low:,} to {high:,}, not {value!r}", ref=ref)
    messages = ArchiveStore(load_settings().archive_dir).restore(ref)
    page, shortened, used, at = [], [], 0, offset
    while at < len(messages):
        size = len(json.dumps(messages[at], ensure_ascii=False))
        if page and used + size > max_chars:
            break
        message = messages[at]
        if size > max_chars:
            message = shortened_message(message, min(_SHORTENED_CHARS, max_chars // 4), "dp-compact restore gives the whole message")
            shortened.append(at)
        page.append(message)
        used += size
        at += 1
    return {"ref": ref, "total": len(messages), "offset": offset, "next_offset": at if at < len(messages) else None,
            "messages": page, "shortened": shortened}


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
    def restore(ref: str, offset: int = 0, max_chars: int = RESTORE_PAGE_CHARS) -> dict[str, Any]:
        """Bring back the original messages archived under ref (archive://<session>/<id>), a page at a time:
        call again with offset = next_offset until it is null."""
        try:
            return restore_tool(ref, offset, max_chars)
        except DpCompactError as exc:
            raise ToolError(str(exc)) from None

    return server


def serve() -> None:
    """Run the server on stdio until the client closes it."""
    build_server().run("stdio")
