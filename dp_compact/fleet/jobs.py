"""The per-session jobs of a fleet run and the pooling that turns them into one report.

- Replay: each worker runs :func:`dp_compact.replay.shell.replay_or_skip` (the job
  :func:`~dp_compact.fleet.jobs.replay_directory` maps) on one session and returns its
  :class:`~dp_compact.replay.shell.SessionReplay` or the reason it was skipped; the client
  builds the same :class:`~dp_compact.replay.shell.DirectoryReplay` (sessions in path order).
- Calibration: each worker reads one history and measures it
  (:func:`dp_compact.calibration.measure_session`, with the recorded summary sizes of its live
  segment); the client pools the measures in input order with
  :func:`dp_compact.calibration.pool_sessions`, the step :func:`dp_compact.calibration.calibrate`
  ends with, so the numbers (bootstrap draws included) are those of one machine.

A session that fails is skipped with its reason and does not stop the run, as
:func:`~dp_compact.calibration.calibrate` and :func:`~dp_compact.fleet.jobs.replay_directory`
skip it (``path: reason``, :func:`~dp_compact.errors.skip_reason`; an error that is not
dp-compact's own, such as a fetch that fails, by its type and message). Results name the input
as given (a URL stays a URL).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dp_compact.calibration import DEFAULT_BOOTSTRAP, Calibration, SessionMeasures, measure_session, pool_sessions
from dp_compact.errors import DpCompactError, no_readable_session, no_session_file, skip_reason
from dp_compact.fleet.engine import Engine, Progress, map_sessions
from dp_compact.fleet.inputs import list_inputs, local_file
from dp_compact.io import session_files
from dp_compact.replay.shell import DirectoryReplay, SessionReplay, check_detector, parse_policies, replay_or_skip
from dp_compact.settings import Settings

__all__ = ["MeasuredSession", "calibrate_fleet", "measure_input", "replay_directory", "replay_fleet", "replay_input"]


def _reason(exc: BaseException, local: str, item: str) -> str:
    """A failure's one-line reason, the temporary path replaced by the input's name."""
    if isinstance(exc, DpCompactError):
        text = skip_reason(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    return text.replace(local, item)


def replay_input(item: str, settings: Settings, policies: tuple[Any, ...], options: dict[str, Any]) -> SessionReplay | str:
    """A worker's replay job: one session (path or URL) replayed, or the reason it was skipped.

    ``policies`` are parsed (:func:`~dp_compact.replay.shell.parse_policies`); ``options`` are
    :func:`~dp_compact.replay.shell.replay_file`'s keywords. Each job replays its own copy of
    the policies: a policy keeps state during a replay (the planner's usage so far, the oracle's
    schedule), and a Dask worker may run several jobs at once in threads.
    """
    local = item
    try:
        with local_file(item) as local:
            result = replay_or_skip(Path(local), settings, copy.deepcopy(policies), options)
    except Exception as exc:  # a fetch that fails, or a defect: reported on the row, the fleet goes on
        return _reason(exc, local, item)
    if isinstance(result, str):
        return result.replace(local, item)
    return result if local == item else replace(result, path=item)


def replay_fleet(
    paths: str | Path | Iterable[str | Path], settings: Settings, policies: Sequence[str], *,
    cache_ttl_s: float | None = None, lenient: bool = False, use_cache: bool = True, loss: str = "refetch",
    detector: str = "verbatim", engine: Engine = "local", workers: int | None = None, scheduler: str | None = None,
    progress: Progress | None = None, processes: bool = True,
) -> DirectoryReplay:
    """Replay every session of ``paths`` (local or fsspec URLs) on ``engine``.

    Parameters
    ----------
    paths : str, Path or iterable of them
        As :func:`dp_compact.fleet.inputs.list_inputs`.
    settings, policies, cache_ttl_s, lenient, use_cache, loss, detector
        As :func:`dp_compact.fleet.jobs.replay_directory`.
    engine, workers, scheduler, progress, processes
        As :func:`dp_compact.fleet.engine.map_sessions`.

    Returns
    -------
    DirectoryReplay
        As :func:`~dp_compact.fleet.jobs.replay_directory` gives for the same files.

    Raises
    ------
    SettingsError
        An unknown policy spec (before any work starts).
    SessionError
        No session file under ``paths``; none read as a session (the first reasons; the input's
        own error when it is the only one).
    """
    specs = tuple(policies)
    parsed = parse_policies(specs, settings)
    check_detector(detector)
    items = list_inputs(paths)
    folder = str(paths) if isinstance(paths, (str, Path)) else ", ".join(map(str, paths))
    if not items:
        raise no_session_file(folder)
    options = {"cache_ttl_s": cache_ttl_s, "lenient": lenient, "use_cache": use_cache, "loss": loss, "detector": detector}
    done = map_sessions(replay_input, items, (settings, parsed, options), engine=engine, workers=workers,
                        scheduler=scheduler, progress=progress, processes=processes)
    sessions = tuple(r for r in done if isinstance(r, SessionReplay))
    skipped = tuple((item, r) for item, r in zip(items, done, strict=True) if isinstance(r, str))
    if not sessions:  # as replay_directory
        raise no_readable_session(folder, skipped, len(items))
    return DirectoryReplay(folder=folder, policies=specs, sessions=sessions, skipped=skipped, loss=loss, detector=detector)


@dataclass(frozen=True)
class MeasuredSession:
    """A worker's calibration result for one session.

    Attributes
    ----------
    measures : SessionMeasures
    summaries : tuple[tuple[str, int], ...]
        ``(tool, provider tokens)`` of each compaction summary the live segment records
        (:func:`dp_compact.calibration.evidence.recorded_summary_tokens`).
    """

    measures: SessionMeasures
    summaries: tuple[tuple[str, int], ...]


def measure_input(item: str, recall_l: float | None, settings: Settings | None = None) -> MeasuredSession | str:
    """A worker's calibration job: one session read once and measured, or ``"path: reason"``
    (``settings`` scale the recorded summaries, as :func:`dp_compact.calibration.calibrate` takes them)."""
    from dp_compact.calibration.evidence import recorded_summary_tokens
    from dp_compact.calibration.history import history_of
    from dp_compact.sessions import read_session
    from dp_compact.settings import default_settings

    local = item
    try:
        with local_file(item) as local:
            history = history_of(read_session(local, raw_json=True))
            summaries = tuple(recorded_summary_tokens(history.live, settings if settings is not None else default_settings()))
            measures = measure_session(history, recall_l=recall_l)
    except Exception as exc:  # a malformed file, a fetch that fails, a defect: skipped, the fleet goes on
        return f"{item}: {_reason(exc, local, item)}"
    return MeasuredSession(measures if local == item else replace(measures, path=item), summaries)


def calibrate_fleet(
    paths: str | Path | Iterable[str | Path], *, bootstrap: int = DEFAULT_BOOTSTRAP, seed: int = 0,
    recall_l: float | None = None, engine: Engine = "local", workers: int | None = None,
    scheduler: str | None = None, progress: Progress | None = None, processes: bool = True, settings: Settings | None = None,
) -> tuple[Calibration, tuple[tuple[str, str], ...]]:
    """Calibrate from every session of ``paths`` (local or fsspec URLs) on ``engine``.

    Parameters
    ----------
    paths : str, Path or iterable of them
        As :func:`dp_compact.fleet.inputs.list_inputs`.
    bootstrap, seed, recall_l, settings
        As :func:`dp_compact.calibration.calibrate`.
    engine, workers, scheduler, progress, processes
        As :func:`dp_compact.fleet.engine.map_sessions`.

    Returns
    -------
    (Calibration, tuple of (str, str))
        The calibration (equal to :func:`~dp_compact.calibration.calibrate` on the same files when
        none fails) and each skipped input with its reason.

    Raises
    ------
    SessionError
        If no input is a readable session, as :func:`~dp_compact.calibration.calibrate` raises it.
    """
    given = [paths] if isinstance(paths, (str, Path)) else list(paths)
    where = ", ".join(map(str, given))
    items = list_inputs(given)
    l_used = float(recall_l) if recall_l else None
    done = map_sessions(measure_input, items, (l_used, settings), engine=engine, workers=workers, scheduler=scheduler,
                        progress=progress, processes=processes)
    measured = [r for r in done if isinstance(r, MeasuredSession)]
    failures = tuple((item, r[len(item) + 2:]) for item, r in zip(items, done, strict=True) if isinstance(r, str))
    if not measured:  # as calibrate
        raise no_readable_session(where, failures, len(items))
    summaries: dict[str, list[int]] = {}
    for m in measured:
        for tool, tokens in m.summaries:
            summaries.setdefault(tool, []).append(tokens)
    skipped = [r for r in done if isinstance(r, str)]
    calibration = pool_sessions([m.measures for m in measured], skipped, summaries, bootstrap=bootstrap, seed=seed,
                                recall_l=recall_l)
    return calibration, failures


def replay_directory(
    folder: Path | str, settings: Settings, policies: Sequence[str], *, cache_ttl_s: float | None = None,
    lenient: bool = False, use_cache: bool = True, workers: int | None = None, progress: Progress | None = None,
    loss: str = "refetch", detector: str = "verbatim",
) -> DirectoryReplay:
    """Replay every session file under ``folder`` in parallel processes: a fleet run on the local engine.

    Parameters
    ----------
    folder : Path or str
        Searched recursively (:func:`session_files`).
    settings : Settings
    policies : sequence of str
        Policy specs, parsed once before any work starts.
    cache_ttl_s : float, optional
        Cache TTL in seconds (calls with timestamps only).
    lenient, use_cache : bool
        As :func:`replay_file`.
    workers : int, optional
        Processes (default: CPU count, at most one per file); 1 runs in this process.
    progress : callable, optional
        ``progress(done, total, path)`` after each file, in this process.
    loss : {"refetch", "none"}
        The lost-information charge (DESIGN §6).
    detector : {"verbatim", "strict", "both"}
        The lost-information detector (:data:`dp_compact.replay.load.DETECTOR_MODES`); ``"both"``
        replays every policy under each (``DirectoryReplay.totals_by_detector``).

    Returns
    -------
    DirectoryReplay
        Sessions in path order; files that are not sessions (any DpCompactError) in ``skipped``.

    Raises
    ------
    SettingsError
        An unknown policy spec or detector.
    SessionError
        When the folder holds no session file, or no file under it is read as a session (the
        message gives the first reasons).
    """
    specs = tuple(policies)
    parsed = parse_policies(specs, settings)
    check_detector(detector)
    files = session_files(folder)
    if not files:
        raise no_session_file(folder)
    options = {"cache_ttl_s": cache_ttl_s, "lenient": lenient, "use_cache": use_cache, "loss": loss, "detector": detector}
    results = map_sessions(replay_or_skip, [str(p) for p in files], (settings, parsed, options), workers=workers, progress=progress)
    done = dict(zip(files, results, strict=True))
    sessions = tuple(r for p in files if isinstance(r := done[p], SessionReplay))
    skipped = tuple((str(p), r) for p in files if isinstance(r := done[p], str))
    if not sessions:  # files, none read as a session: the first reasons (the file's own error when it is the only one)
        raise no_readable_session(str(folder), skipped, len(files))
    return DirectoryReplay(folder=str(folder), policies=specs, sessions=sessions, skipped=skipped, loss=loss,
                           detector=detector)
