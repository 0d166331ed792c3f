"""``dp-compact plan`` and ``dp-compact profiles``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from dp_compact.cli.app import EXIT_COMPACT, app, load_settings
from dp_compact.cli.options import JsonOpt, LenientOpt, NoCacheOpt, settings_options


@app.command()
@settings_options()
def plan(
    session: Annotated[Path, typer.Argument(help="Session file (any supported format; JSONL or one JSON document).")],
    as_json: JsonOpt = False,
    exit_code: Annotated[bool, typer.Option("--exit-code", help=f"Exit {EXIT_COMPACT} when compaction is advised.")] = False,
    stats: Annotated[Optional[Path], typer.Option("--stats", help="Seed agent stats.json.")] = None,
    lenient: LenientOpt = False,
    no_cache: NoCacheOpt = False,
    *,
    flags: dict[str, Any],
) -> None:
    """Decide whether to compact SESSION now and how many recent messages to keep."""
    from dp_compact.api import plan_file
    from dp_compact.cli.render import plan_json, render_plan

    result = plan_file(session, load_settings(flags), lenient=lenient, stats=stats, use_cache=not no_cache)
    data = {**result.to_dict(), "window_source": result.prices.window_source}
    skipped = data["session"]["skipped_lines"]
    if skipped:
        from dp_compact.sessions.source import skipped_lines_note

        note = skipped_lines_note(skipped, data["session"]["skipped_line_numbers"])
        typer.echo(f"dp-compact: warning: {session}: {note}", err=True)
    typer.echo(json.dumps(plan_json(data), ensure_ascii=False) if as_json else render_plan(data))
    if exit_code and result.decision == "compact":
        raise typer.Exit(EXIT_COMPACT)


@app.command()
def profiles(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the built-in pricing profiles ($/MTok and context window)."""
    from dataclasses import asdict

    from dp_compact.cli.render import render_profiles
    from dp_compact.pricing import list_profiles

    rows = list_profiles()
    typer.echo(json.dumps([p.to_dict() for p in rows]) if as_json else render_profiles(rows))
