"""The fleet options of ``replay`` and ``calibrate`` (``--engine``, ``--scheduler``, ``--out``) and their runs.

A folder replay on the local engine runs as before (:func:`~dp_compact.fleet.jobs.replay_directory`);
an fsspec URL or ``--engine dask`` runs through :mod:`dp_compact.fleet`. ``calibrate`` without
these options runs :func:`~dp_compact.calibration.calibrate` in this process; with a URL,
``--engine dask`` or ``--out`` it runs :func:`~dp_compact.fleet.jobs.calibrate_fleet`, which skips a
failing session with its reason instead of stopping. Dask, fsspec and pyarrow load only here,
and only for the run that needs them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from dp_compact.cli.app import CommandError, note
from dp_compact.errors import install_hint

__all__ = ["EngineOpt", "ParquetOpt", "SchedulerOpt", "check_fleet", "fleet_progress", "import_extra", "is_url", "write_table"]

# "\\[": Typer's help reads Rich markup, where a bare "[dask]" is a style tag and is not printed
EngineOpt = Annotated[Literal["local", "dask"], typer.Option("--engine", help="Run sessions on a local process pool or on Dask (pip install \".\\[dask]\" in the dp-compact source folder).")]
SchedulerOpt = Annotated[Optional[str], typer.Option("--scheduler", help="Address of a running Dask scheduler (default with --engine dask: a LocalCluster of --workers processes).")]
ParquetOpt = Annotated[Optional[Path], typer.Option("--out", help="Also write the rows as Parquet (replay: one per session and policy; calibrate: one per session; written atomically; needs the dask extra).")]


def is_url(item: str) -> bool:
    """An fsspec URL (``s3://``, ``memory://``, ``file://`` ...): :func:`dp_compact.fleet.inputs.is_url`."""
    from dp_compact.fleet.inputs import is_url as url

    return url(item)


def import_extra(*modules: str) -> None:
    """Fail with one line naming the extra when a module of the ``dask`` extra is missing.

    Raises
    ------
    CommandError
        A module of ``modules`` cannot be imported.
    """
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            raise CommandError(f"{name} is not installed: {install_hint('dask')}") from None


def check_fleet(items: Sequence[str], engine: str, scheduler: str | None, out: Path | None) -> bool:
    """Check the fleet options before any work; True when the run goes through :mod:`dp_compact.fleet`.

    Raises
    ------
    CommandError
        ``--scheduler`` without ``--engine dask``, ``--out`` not ending in ``.parquet``, or a missing extra.
    """
    if scheduler is not None and engine != "dask":
        raise CommandError("--scheduler needs --engine dask")
    if out is not None and out.suffix != ".parquet":
        raise CommandError(f"--out {out}: write a .parquet file")
    urls = any(is_url(i) for i in items)
    needed = (["distributed"] if engine == "dask" else []) + (["fsspec"] if urls else []) + (["pyarrow"] if out else [])
    import_extra(*needed)
    return engine == "dask" or urls


@contextmanager
def fleet_progress(label: str) -> Iterator[Callable[[int, int, str], None]]:
    """A progress bar over sessions on stderr (rich, redrawn by each tick: no thread, workers may fork),
    when stderr is a terminal; else a tick that draws nothing (a bar would leave a blank line there)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda done, total, item: None
        return
    columns = (TextColumn("{task.description:<36}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True, auto_refresh=False) as bar:
        task = bar.add_task(label, total=None)

        def tick(done: int, total: int, item: str) -> None:
            bar.update(task, completed=done, total=total, description=item.rstrip("/").rsplit("/", 1)[-1][:36], refresh=True)

        yield tick


def write_table(table: Any, out: Path) -> None:
    """Write a results table to ``out`` (:func:`dp_compact.fleet.parquet.write_parquet`) and say so on stderr."""
    from dp_compact.fleet.parquet import write_parquet

    write_parquet(table, out)
    note(f"wrote {out} ({table.num_rows} rows)")
