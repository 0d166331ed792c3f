"""Map one per-session job over many sessions: a local process pool or a Dask cluster.

Both engines take the same job (a picklable function of one input and fixed arguments that
returns a result or a reason string; it must not raise for a bad session), run the largest
inputs first (balances the workers), report progress in the calling process after each
session, and return the results in input order, so the pooled reports do not depend on the
engine or on the order jobs finish in.

- ``local``: :class:`concurrent.futures.ProcessPoolExecutor` (fork on Linux, spawn elsewhere),
  ``workers`` processes (default: CPU count, at most one per input); one worker runs in this
  process. No extra dependency.
- ``dask``: a ``dask.distributed`` :class:`~distributed.LocalCluster` of ``workers`` processes
  (one thread each) bound to 127.0.0.1, its HTTP server on a free port of 127.0.0.1 (or threads
  of this process talking in-process, ``processes=False``), or the running scheduler at
  ``scheduler`` (``tcp://host:8786``). Progress follows ``distributed.as_completed`` on the
  futures in this process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from typing import Any, Literal

from dp_compact.fleet.inputs import input_size

__all__ = ["ENGINES", "Engine", "Progress", "map_sessions", "worker_count"]

Engine = Literal["local", "dask"]
ENGINES: tuple[str, ...] = ("local", "dask")
#: ``progress(done, total, item)`` after each session, in the calling process.
Progress = Callable[[int, int, str], None]


def worker_count(workers: int | None, n_items: int) -> int:
    """Workers to start: ``workers`` (default CPU count), at least 1, at most one per input.

    >>> worker_count(4, 2), worker_count(None, 0) >= 1
    (2, True)
    """
    return max(1, min(workers or os.cpu_count() or 1, max(n_items, 1)))


def _largest_first(items: Sequence[str]) -> list[int]:
    """Indices of ``items``, largest input first (ties in input order)."""
    sizes = [input_size(item) for item in items]
    return sorted(range(len(items)), key=lambda i: -sizes[i])


def _local(job: Callable[..., Any], items: Sequence[str], args: tuple[Any, ...], count: int,
           progress: Progress | None) -> list[Any]:
    """The local engine (module docstring)."""
    results: list[Any] = [None] * len(items)
    if count == 1:
        for done, (index, item) in enumerate(enumerate(items), start=1):
            results[index] = job(item, *args)
            if progress is not None:
                progress(done, len(items), item)
        return results
    # fork on Linux: workers inherit the loaded modules (~1 s less each than spawning); safe, since
    # the library starts no thread and the command's progress bar draws without a refresh thread
    context = get_context("fork" if sys.platform.startswith("linux") else "spawn")
    with ProcessPoolExecutor(max_workers=count, mp_context=context) as pool:
        futures = {pool.submit(job, items[i], *args): i for i in _largest_first(items)}
        for done, future in enumerate(as_completed(futures), start=1):
            results[futures[future]] = future.result()
            if progress is not None:
                progress(done, len(items), items[futures[future]])
    return results


def _dask(job: Callable[..., Any], items: Sequence[str], args: tuple[Any, ...], count: int,
          progress: Progress | None, scheduler: str | None, processes: bool) -> list[Any]:
    """The Dask engine (module docstring)."""
    import logging

    from distributed import Client, LocalCluster
    from distributed import as_completed as dask_completed

    cluster = None
    if scheduler is None:
        where = {"host": "127.0.0.1"} if processes else {}  # threads talk in-process (no socket at all)
        cluster = LocalCluster(n_workers=count, threads_per_worker=1, processes=processes, dashboard_address="127.0.0.1:0",
                               silence_logs=logging.ERROR, **where)
    try:
        with Client(cluster if cluster is not None else scheduler) as client:
            shared = client.scatter(list(args), broadcast=True) if args else []
            futures = {client.submit(job, items[i], *shared, pure=False): i for i in _largest_first(items)}
            results: list[Any] = [None] * len(items)
            for done, future in enumerate(dask_completed(list(futures)), start=1):
                results[futures[future]] = future.result()
                if progress is not None:
                    progress(done, len(items), items[futures[future]])
            return results
    finally:
        if cluster is not None:
            cluster.close()


def map_sessions(
    job: Callable[..., Any], items: Sequence[str], args: tuple[Any, ...] = (), *, engine: Engine = "local",
    workers: int | None = None, scheduler: str | None = None, progress: Progress | None = None,
    processes: bool = True,
) -> list[Any]:
    """``[job(item, *args) for item in items]`` on the chosen engine.

    Parameters
    ----------
    job : callable
        Picklable (a module-level function); returns a result or a reason, never raises for a
        bad session (an exception it raises stops the run).
    items : sequence of str
        Local paths or fsspec URLs (:func:`dp_compact.fleet.inputs.list_inputs`).
    args : tuple
        Fixed arguments (settings, policies, options): pickled once per worker with Dask.
    engine : {"local", "dask"}
    workers : int, optional
        Processes (default: CPU count, at most one per input). Ignored with ``scheduler``.
    scheduler : str, optional
        Address of a running Dask scheduler (``engine="dask"`` only); default: a LocalCluster.
    progress : callable, optional
        ``progress(done, total, item)`` after each session, in this process.
    processes : bool
        Dask LocalCluster workers as processes (True) or threads of this process (False).

    Returns
    -------
    list
        One result per item, in input order.

    Raises
    ------
    ValueError
        An unknown engine, or a scheduler address with the local engine.
    ImportError
        ``engine="dask"`` without the ``dask`` extra.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: use local or dask")
    if scheduler is not None and engine != "dask":
        raise ValueError("a scheduler address needs the dask engine (--engine dask)")
    count = worker_count(workers, len(items))
    if engine == "local":
        return _local(job, items, args, count, progress)
    return _dask(job, items, args, count, progress, scheduler, processes)
