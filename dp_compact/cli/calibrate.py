"""``dp-compact calibrate``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from dp_compact.cli.app import CommandError, app
from dp_compact.cli.fleet import EngineOpt, ParquetOpt, SchedulerOpt
from dp_compact.cli.options import CalibrationJsonOpt, check_figure
from dp_compact.errors import DpCompactError


@app.command()
def calibrate(
    paths: Annotated[list[str], typer.Argument(help="Session files or directories (searched recursively), or fsspec URLs (s3://, memory://, file://).")],
    env: Annotated[bool, typer.Option("--env", help="Print export DP_...=... lines only.")] = False,
    as_json: CalibrationJsonOpt = False,
    figure: Annotated[Optional[Path], typer.Option("--figure", help="Also draw the calibration figure (.png or .svg).")] = None,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=1, help="Resamples over sessions for the spreads.")] = 400,
    engine: EngineOpt = "local",
    scheduler: SchedulerOpt = None,
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, help="Processes with --engine, --out or URLs (default: CPU count).")] = None,
    out: ParquetOpt = None,
    detector: Annotated[str, typer.Option("--detector", help="Whose recall curve --env exports: verbatim (repeated text, edits after reads) or strict (also paths, identifiers and commands named again); both are fitted and reported.")] = "verbatim",
) -> None:
    """Measure V, L, avg, S, token ratios and the recall curve q(a) from transcripts; fit q0 and tau."""
    from dp_compact.calibration import calibrate as run
    from dp_compact.calibration import env_lines
    from dp_compact.cli.render import render_calibration
    from dp_compact.settings import load_settings

    if detector not in ("verbatim", "strict"):
        raise CommandError(f"--detector {detector!r}: choose verbatim or strict")
    if figure is not None:
        check_figure(figure)
    settings = load_settings(tokenizer="tiktoken")  # DP_TOKEN_RATIO scales the recorded summaries (cl100k counts)
    # fleet hook (dp_compact.cli.fleet): URLs, --engine dask or --out run per session on workers
    from dp_compact.cli.fleet import check_fleet, fleet_progress, write_table

    fleet = check_fleet(paths, engine, scheduler, out) or out is not None
    try:
        if fleet:
            from dp_compact.fleet.jobs import calibrate_fleet

            with fleet_progress("measuring") as tick:
                result, failures = calibrate_fleet(paths, bootstrap=bootstrap, engine=engine, workers=workers,  # type: ignore[arg-type]
                                                   scheduler=scheduler, progress=tick, settings=settings)
            if out is not None:
                from dp_compact.fleet.parquet import calibration_table

                write_table(calibration_table(result, failures), out)
        else:
            result = run(paths, bootstrap=bootstrap, settings=settings)
        # end of the fleet hook
    except ValueError as exc:  # no readable session among the files
        if isinstance(exc, DpCompactError):
            raise
        raise CommandError(f"{', '.join(map(str, paths))}: {exc}") from None
    if figure is not None:
        from dp_compact.figures import calibration_figure, save_figure

        save_figure(calibration_figure(result), figure)
    if env:
        typer.echo("\n".join(env_lines(result, detector)))
    else:
        typer.echo(json.dumps(result.to_dict(), ensure_ascii=False) if as_json else render_calibration(result))
