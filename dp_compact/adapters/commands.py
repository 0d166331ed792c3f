"""The adapters' commands, ``dp-compact hook`` and ``dp-compact mcp`` (Typer), added by :func:`register`.

Each command imports what it needs when it runs, so ``dp-compact --help`` loads no SDK.
"""

from __future__ import annotations

import json
import sys

import typer

from dp_compact.errors import DpCompactError, SessionError, install_hint

__all__ = ["EXIT_HOOK_ERROR", "hook", "mcp", "register"]

#: Exit status of ``hook`` on bad input: Claude Code shows the message and goes on (a non-blocking
#: error; status 2 would block some hook events).
EXIT_HOOK_ERROR = 1


def hook() -> None:
    """Claude Code status line / PreCompact hook: read its JSON on stdin, print one line.

    As a status line: "ctx 142k/200k · compact now saves $0.42 · keep 33" (or "· keep all").
    As a PreCompact hook: archive the conversation Claude Code is about to compact, for `dp-compact recall`.
    """
    from dp_compact.adapters.claude_code_hook import run_hook
    from dp_compact.pipeline.archive import ArchiveStore
    from dp_compact.settings import load_settings

    payload = None
    try:
        try:
            payload = json.loads(sys.stdin.read() or "null")
        except ValueError as exc:
            raise SessionError("<stdin>", None, f"not JSON: {exc}") from None
        settings = load_settings()
        outcome = run_hook(payload, settings, ArchiveStore(settings.archive_dir))
    except DpCompactError as exc:
        typer.echo(f"dp-compact: {exc}", err=True)
        if not (isinstance(payload, dict) and payload.get("hook_event_name") == "PreCompact"):  # a status line shows stdout only
            typer.echo(f"dp-compact: {(getattr(exc, 'rule', None) or str(exc)).split('. ')[0]}")  # short, never a blank status line
        raise typer.Exit(EXIT_HOOK_ERROR) from None
    typer.echo(outcome.text)


def mcp() -> None:
    """Run the MCP server on stdio (tools: plan, recall, restore). Needs the `mcp` extra."""
    from importlib.util import find_spec

    if find_spec("mcp") is None:
        typer.echo(f"dp-compact: the MCP SDK is not installed: {install_hint('mcp')}", err=True)
        raise typer.Exit(2)
    from dp_compact.adapters.mcp_server import serve

    serve()


def register(app: typer.Typer) -> None:
    """Add ``hook`` and ``mcp`` to the ``dp-compact`` command line."""
    app.command(name="hook")(hook)
    app.command(name="mcp")(mcp)
