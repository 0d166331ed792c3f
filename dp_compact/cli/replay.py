"""Commands that follow a recorded session call by call: ``replay`` (DESIGN §6), ``curve``, ``timeline``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from dp_compact.cli.app import CommandError, app, load_settings, note
from dp_compact.cli.fleet import EngineOpt, ParquetOpt, SchedulerOpt
from dp_compact.cli.options import LenientOpt, NoCacheOpt, OutputAliasOpt, ReplayJsonOpt, check_figure, figure_output, settings_options

FigureOpt = Annotated[Optional[Path], typer.Option("-o", "--output", help="Figure to write: .png or .svg (written atomically).")]


def _replay_folder(folder: Path, settings: object, specs: list[str], workers: int | None, **options: object) -> object:
    """Replay every session under FOLDER, with a progress bar on stderr (rich) when it is a terminal."""
    from dp_compact.cli.fleet import fleet_progress
    from dp_compact.errors import no_session_file
    from dp_compact.fleet.jobs import replay_directory
    from dp_compact.io import session_files

    if not session_files(folder):  # before the progress bar
        raise no_session_file(folder)
    with fleet_progress("replaying") as tick:
        return replay_directory(folder, settings, specs, workers=workers, progress=tick, **options)  # type: ignore[arg-type]


@app.command()
@settings_options()
def replay(
    path: Annotated[str, typer.Argument(help="Session file, or a folder: every session file under it (or an fsspec URL: s3://, memory://, file://).")],
    policy: Annotated[Optional[list[str]], typer.Option("--policy", help="oracle, dp, seed, never, threshold:F[:keep], clear:F[:K] (clear old tool results at F of the window, keeping the last K messages), claude-code, codex, openhands, langchain, anthropic-clear, recorded (what the tool really did) (repeat; default: all but threshold, clear and recorded).")] = None,
    loss: Annotated[Literal["refetch", "none"], typer.Option("--loss", help="Charge lost information: refetch (a dropped message a later call uses is fetched again) or none.")] = "refetch",
    detector: Annotated[Literal["verbatim", "strict", "both"], typer.Option("--detector", help="Which later uses of a dropped message count: verbatim (200 characters repeated, or a read file edited), strict (also a path, identifier or command named again), or both (the ranking of the policies under each, side by side).")] = "verbatim",
    receipts: Annotated[bool, typer.Option("--receipts", help="List every compaction of each policy (one SESSION): its cost (summary request, cache rewrite), what it saved on the calls that followed, when it paid back, what it dropped that was used again.")] = False,
    cache_ttl: Annotated[Optional[float], typer.Option("--cache-ttl", min=0.0, help="Cache lifetime after its last use, seconds (where calls have timestamps). Default: the lifetime of the session's recorded cache writes (1 hour when most are 1-hour entries, else 5 minutes) where the calls have times; none without times. The report says which applied and why.")] = None,
    as_json: ReplayJsonOpt = False,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Draw context size per call per policy to this image (one SESSION).")] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, help="Processes for a folder (default: CPU count).")] = None,
    lenient: LenientOpt = False,
    no_cache: NoCacheOpt = False,
    engine: EngineOpt = "local",
    scheduler: SchedulerOpt = None,
    out: ParquetOpt = None,
    *,
    flags: dict[str, Any],
) -> None:
    """Price a recorded SESSION call by call under compaction policies (a folder: every session in it).

    Every session with usage records also gets a bill check: the `recorded` policy's total against
    the bill computed from its usage records at the same prices, with the difference's causes.
    """
    from dp_compact.cli.render import render_directory, render_session
    from dp_compact.replay.policies import DEFAULT_POLICIES
    from dp_compact.replay.shell import replay_file

    specs = list(policy or DEFAULT_POLICIES)
    options = {"cache_ttl_s": cache_ttl, "lenient": lenient, "use_cache": not no_cache, "loss": loss, "detector": detector}
    if receipts and Path(path).is_dir():
        raise CommandError("--receipts lists the compactions of one SESSION file, not a folder")
    if plot is not None:
        if Path(path).is_dir():
            raise CommandError("--plot draws one SESSION file, not a folder")
        check_figure(plot)
    settings = load_settings(flags)
    # fleet hook (dp_compact.cli.fleet): an fsspec URL or --engine dask; --out writes Parquet
    from dp_compact.cli.fleet import check_fleet, fleet_progress, write_table

    fleet = check_fleet([path], engine, scheduler, out)
    if fleet and plot is not None:
        raise CommandError("--plot draws one SESSION file, not a fleet run")
    if fleet and receipts:
        raise CommandError("--receipts lists the compactions of one SESSION file, not a fleet run")
    if fleet:
        from dp_compact.fleet.jobs import replay_fleet

        with fleet_progress("replaying") as tick:
            result = replay_fleet(path, settings, specs, engine=engine, workers=workers, scheduler=scheduler, progress=tick, **options)  # type: ignore[arg-type]
        if len(result.sessions) == 1 and not result.skipped and (Path(path).is_file() or result.sessions[0].path == path):
            result = result.sessions[0]  # one session file: its own report, as on the local engine
    else:
        result = (_replay_folder(Path(path), settings, specs, workers, **options) if Path(path).is_dir()
                  else replay_file(path, settings, specs, with_receipts=receipts, **options))
    if out is not None:
        from dp_compact.fleet.parquet import replay_table
        from dp_compact.replay.shell import DirectoryReplay, SessionReplay

        table = result if not isinstance(result, SessionReplay) else DirectoryReplay(path, tuple(specs), (result,), (), loss, detector)
        write_table(replay_table(table), out)
    # end of the fleet hook
    if plot is not None:
        from dp_compact.figures import contexts_figure, save_figure

        save_figure(contexts_figure(result), plot)
    data = result.to_dict()  # type: ignore[attr-defined]
    if as_json:
        typer.echo(json.dumps(data, ensure_ascii=False))
    else:
        typer.echo(render_directory(data) if "sessions" in data else render_session(data))


@app.command()
@settings_options(repeatable={
    "provider": "Pricing profile to overlay (repeatable; default: the one the settings and the session give). [DP_PROVIDER]",
    "model": "Cost model to overlay besides DP_MODEL: seed or recall (repeatable). [DP_MODEL]",
})
def curve(
    session: Annotated[Path, typer.Argument(help="Session file (any supported format).")],
    output: FigureOpt = None,
    out: OutputAliasOpt = None,
    lenient: LenientOpt = False,
    no_cache: NoCacheOpt = False,
    *,
    flags: dict[str, Any],
) -> None:
    """Draw NetBenefit(k) and its five terms for SESSION, per provider and cost model."""
    from dp_compact.api import curve_file
    from dp_compact.cli.render import curve_lines
    from dp_compact.figures import benefit_figure, save_figure

    target = figure_output(output, out)
    check_figure(target)
    providers, models = flags.pop("provider") or [], flags.pop("model") or []
    for name in dict.fromkeys(models):
        if name not in ("recall", "seed"):
            raise CommandError(f"--model {name!r}: use recall or seed")
    settings = load_settings(flags, providers=providers or None)
    plans, notes = curve_file(session, settings, providers=providers, models=models, lenient=lenient, use_cache=not no_cache)
    for text in notes:
        note(text)
    save_figure(benefit_figure(plans), target)
    for line in curve_lines(plans):
        typer.echo(line)
    typer.echo(f"wrote {target}")


@app.command()
@settings_options()
def timeline(
    session: Annotated[Path, typer.Argument(help="Session file (any supported format).")],
    output: FigureOpt = None,
    out: OutputAliasOpt = None,
    lenient: LenientOpt = False,
    no_cache: NoCacheOpt = False,
    *,
    flags: dict[str, Any],
) -> None:
    """Replay SESSION call by call: its context, the window, and where the planner would compact."""
    from dp_compact.api import timeline_file
    from dp_compact.figures import save_figure, timeline_figure
    from dp_compact.measure.windows import window_note

    target = figure_output(output, out)
    check_figure(target)
    line, notes = timeline_file(session, load_settings(flags), lenient=lenient, use_cache=not no_cache)
    for text in notes:
        note(text)
    save_figure(timeline_figure(line), target)
    advised = int(line.compact.sum())
    if line.window_source:
        typer.echo(window_note(line.prices.max_context_tokens, line.window_source))
    for text in line.v_notes:
        typer.echo(text)
    advice = f"compaction advised at {advised} of them" if advised else "compaction never advised"
    typer.echo(f"{len(line.call)} calls, {advice}; wrote {target}")
