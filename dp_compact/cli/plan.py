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
    exit_code: Annotated[bool, typer.Option("--exit-code", help=f"Exit {EXIT_COMPACT} when the plan advises compacting or clearing (`compact` carries either out).")] = False,
    stats: Annotated[Optional[Path], typer.Option("--stats", help="Seed agent stats.json.")] = None,
    lenient: LenientOpt = False,
    no_cache: NoCacheOpt = False,
    now: Annotated[Optional[str], typer.Option(
        "--now", help="The time of the plan: ISO 8601 (2026-12-06T10:00:00Z), epoch seconds, or 'now' (the wall clock)."
        " It gives the silence since the last recorded call (a cold cache, the idle hazard). Default: the time of the"
        " file's last record.")] = None,
    idle_hazard: Annotated[Optional[str], typer.Option(
        "--idle-hazard", metavar="P5M,P1H", help="Chances that the person answers a final answer after 5 minutes and after"
        " 1 hour (dp-compact calibrate fits them). Default: the shipped calibration.")] = None,
    *,
    flags: dict[str, Any],
) -> None:
    """Decide whether to compact SESSION now and how many recent messages to keep."""
    from dp_compact.api import plan_file
    from dp_compact.cli.render import plan_json, render_plan

    instant, source = _now(now)
    result = plan_file(session, load_settings(flags), lenient=lenient, stats=stats, use_cache=not no_cache, now=instant,
                       now_source=source, idle_hazard=_hazard(idle_hazard))
    data = {**result.to_dict(), "window_source": result.prices.window_source}
    skipped = data["session"]["skipped_lines"]
    if skipped:
        from dp_compact.sessions.source import skipped_lines_note

        note = skipped_lines_note(skipped, data["session"]["skipped_line_numbers"])
        typer.echo(f"dp-compact: warning: {session}: {note}", err=True)
    typer.echo(json.dumps(plan_json(data), ensure_ascii=False) if as_json else render_plan(data))
    if exit_code and result.decision in ("compact", "clear"):
        raise typer.Exit(EXIT_COMPACT)


def _now(text: str | None) -> tuple[float | None, str]:
    """``--now`` as epoch seconds and how the plan names it; the wall clock for "now"."""
    if text is None:
        return None, ""
    if text.strip().lower() == "now":
        import time

        return time.time(), "wall clock"
    from dp_compact.core.timing import parse_instant

    try:
        return parse_instant(text), f"--now {text}"
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--now") from None


def _hazard(text: str | None) -> Any:
    """``--idle-hazard P5M,P1H`` as an :class:`~dp_compact.core.timing.IdleHazard`, None when not given."""
    if text is None:
        return None
    from dp_compact.core.timing import IdleHazard

    try:
        after_5m, after_1h = (float(part) for part in text.split(","))
        return IdleHazard(after_5m, after_1h, source="--idle-hazard")
    except ValueError as exc:
        raise typer.BadParameter(f"{text!r}: two chances P5M,P1H with 0 <= P1H <= P5M <= 1 ({exc})", param_hint="--idle-hazard") from None


@app.command()
def profiles(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the built-in pricing profiles ($/MTok and context window)."""

    from dp_compact.cli.render import render_profiles
    from dp_compact.pricing import list_profiles

    rows = list_profiles()
    typer.echo(json.dumps([p.to_dict() for p in rows]) if as_json else render_profiles(rows))
