"""``dp-compact tune``: the best compaction setting for the agent tool a user already runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from dp_compact.cli.app import CommandError, app, load_settings, note
from dp_compact.cli.options import NoCacheOpt, TuneJsonOpt, check_figure, settings_options

#: Where each tool keeps its transcripts when DIR is omitted (the tool's default folders).
DEFAULT_FOLDERS = {"claude-code": "~/.claude/projects", "codex": "~/.codex/sessions", "gemini-cli": "~/.gemini/tmp"}


def render_tune(data: dict[str, Any]) -> str:
    """The report of ``tune`` as text (``TuneReport.to_dict()``)."""
    lines = [f"{data['tool']}: {len(data['transcripts'])} transcript(s) replayed under each setting (costs in $)",
             f"{'setting':<36} {'$ total':>9} {'vs default':>10} {'lost-info':>9} {'compactions':>11}"]
    default = next(s["usd"] for s in data["settings"] if s["default"])
    for s in data["settings"]:
        mark = " default" if s["default"] else ""
        mark += " cheapest here" if s["best"] else ""
        lines.append(f"{s['setting']:<36} {s['usd']:9.2f} {s['usd'] - default:+10.2f} {s['refetches']:>9} {s['compactions']:>11}{mark}")
    lines.append(f"{'dp_compact planner (for scale)':<36} {data['dp_usd']:9.2f} {data['dp_usd'] - default:+10.2f}")
    lines.append(f"{'hindsight optimum (for scale)':<36} {data['oracle_usd']:9.2f} {data['oracle_usd'] - default:+10.2f}")
    if data["held_back_saving_usd"] is not None:
        saved = data["held_back_saving_usd"]
        amount = f"saving ${saved:.2f}" if saved >= 0 else f"saving -${-saved:.2f} (a loss)"
        lines.append(f"held back ({data['split']}): {amount}; settings chosen: " + ", ".join(data["held_back_choices"]))
    lines.append(f"verdict   {data['verdict']}")
    if data["config"]:
        lines.append(f"to set {data['recommended']}:")
        lines.extend(f"  {line}" for line in data["config"])
    lines.extend(f"skipped   {s['path']}: {s['reason']}" for s in data["skipped"])
    return "\n".join(lines)


@app.command()
@settings_options()
def tune(
    folder: Annotated[Optional[str], typer.Argument(help="Transcripts to replay: a folder, files or an fsspec URL (default: the tool's own transcript folder, for claude-code, codex and gemini-cli).")] = None,
    tool: Annotated[str, typer.Option("--tool", help="The agent tool whose setting to tune (required): claude-code, codex, gemini-cli, kilo, roo, langchain, openhands.")] = "",
    as_json: TuneJsonOpt = False,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Draw the cost against the setting, default and best marked (.png or .svg).")] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, help="Processes (default: CPU count).")] = None,
    no_cache: NoCacheOpt = False,
    *,
    flags: dict[str, Any],
) -> None:
    """Replay your transcripts under your agent tool's compaction rule at each setting; print the best one and how to set it."""
    from dp_compact.cli.fleet import fleet_progress
    from dp_compact.tune import TOOLS
    from dp_compact.tune import tune as run

    if not tool:
        raise CommandError(f"give the agent tool whose setting to tune: --tool {' | '.join(sorted(TOOLS))}")
    if tool not in TOOLS:
        raise CommandError(f"--tool {tool!r}: use one of {', '.join(sorted(TOOLS))}")
    if folder is None:
        if tool not in DEFAULT_FOLDERS:
            raise CommandError(f"{tool} keeps no transcripts in a known folder: give the folder of your saved conversations")
        folder = str(Path(DEFAULT_FOLDERS[tool]).expanduser())
        if not Path(folder).exists():
            raise CommandError(f"{folder} does not exist: give the folder where {tool} keeps your transcripts")
        note(f"transcripts of {tool}: {folder}")
    if plot is not None:
        check_figure(plot)
    settings = load_settings(flags)
    with fleet_progress("tuning") as tick:
        report = run(folder, tool, settings, workers=workers, progress=tick, use_cache=not no_cache)
    if plot is not None:
        from dp_compact.figures import save_figure, tune_figure

        save_figure(tune_figure(report), plot)
        note(f"wrote {plot}")
    data = report.to_dict()
    typer.echo(json.dumps(data, ensure_ascii=False) if as_json else render_tune(data))
