"""Benchmark of fleet replays: sessions per second with 1, 2 and 4 workers, local pool against Dask.

Usage: ``python bench/bench_fleet.py [--sessions 2000] [--small 200] [--max-blocks 12]
[--workers 1 2 4] [--engines local dask] [--policy dp --policy never ...]``

1. Writes a synthetic fleet with :func:`dp_compact.fleet.resample.resample` (seed 0) from the
   real sessions, and replays it once to warm the token cache (every measured run is warm).
2. For each engine and worker count: wall time of one replay of the whole fleet (a Dask run
   includes starting its LocalCluster), sessions per second, and the peak resident memory of
   each worker process (``ru_maxrss`` read in the worker after each of its sessions).
3. Per-session work against fleet size: mean seconds of the jobs of the first ``--small``
   sessions (local pool, 2 workers) run as a fleet of their own and within the whole fleet.

One long session, per message: ``bench/bench_long.py``.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

from timing import SHARED_SESSIONS, machine_line

from dp_compact.fleet.engine import map_sessions
from dp_compact.fleet.inputs import list_inputs
from dp_compact.fleet.jobs import replay_input
from dp_compact.fleet.resample import resample
from dp_compact.replay.shell import parse_policies
from dp_compact.settings import Settings


def measured_job(item: str, settings: Settings, policies: tuple, options: dict) -> tuple[bool, int, float, float]:
    """Replay one session; (replayed, worker pid, worker peak RSS in MB so far, seconds of this job)."""
    start = time.perf_counter()
    result = replay_input(item, settings, policies, options)
    took = time.perf_counter() - start
    return not isinstance(result, str), os.getpid(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, took


def run(items: list[str], engine: str, workers: int, args: tuple) -> tuple[float, dict[int, float], int, list[float]]:
    """Wall seconds, peak RSS per worker pid (MB), sessions replayed, seconds of each job."""
    start = time.perf_counter()
    done = map_sessions(measured_job, items, args, engine=engine, workers=workers)  # type: ignore[arg-type]
    wall = time.perf_counter() - start
    peaks: dict[int, float] = {}
    for _, pid, mb, _ in done:
        peaks[pid] = max(peaks.get(pid, 0.0), mb)
    return wall, peaks, sum(r[0] for r in done), [r[3] for r in done]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--max-blocks", type=int, default=12)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--engines", nargs="+", default=["local", "dask"])
    parser.add_argument("--policy", action="append")
    parser.add_argument("--source", type=Path, default=SHARED_SESSIONS)
    args = parser.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="dp-fleet-bench-") as tmp:
        folder = Path(tmp)
        os.environ["XDG_CACHE_HOME"] = str(folder / "cache")
        fleet(args, folder)


def fleet(args: argparse.Namespace, folder: Path) -> None:
    """Steps 1–3 of the module docstring."""
    start = time.perf_counter()
    resample(args.source, folder / "fleet", sessions=args.sessions, seed=0, max_blocks=args.max_blocks)
    items = list_inputs(folder / "fleet")
    size = sum(Path(i).stat().st_size for i in items)
    print(f"fleet: {len(items)} synthetic sessions (max {args.max_blocks} call blocks), {size / 1e6:.0f} MB, "
          f"written in {time.perf_counter() - start:.1f} s")
    settings = Settings()
    specs = args.policy or ["dp", "never", "claude-code"]
    job_args = (settings, parse_policies(specs, settings), {"cache_ttl_s": None, "lenient": False, "use_cache": True, "loss": "refetch"})
    wall, _, ok, _ = run(items, "local", 2, job_args)
    print(f"policies {', '.join(specs)}; token cache warmed in {wall:.1f} s ({ok} sessions replayed)")
    print(f"{'engine':<8}{'workers':>8}{'wall s':>10}{'sessions/s':>12}{'peak MB/worker':>16}{'max':>8}")
    table = {}
    for engine in args.engines:
        for workers in args.workers:
            wall, peaks, ok, jobs = run(items, engine, workers, job_args)
            table[engine, workers] = jobs
            mean = sum(peaks.values()) / len(peaks)
            print(f"{engine:<8}{workers:>8}{wall:>10.1f}{ok / wall:>12.2f}{mean:>16.0f}{max(peaks.values()):>8.0f}", flush=True)
    small = items[: args.small]
    in_small = run(small, "local", 2, job_args)[3]
    in_all = (table.get(("local", 2)) or run(items, "local", 2, job_args)[3])[: len(small)]
    print(f"per-session work (local, 2 workers), the same {len(small)} sessions: {sum(in_small) / len(small) * 1e3:.0f} ms "
          f"each in a fleet of {len(small)}, {sum(in_all) / len(small) * 1e3:.0f} ms each in a fleet of {len(items)}")


if __name__ == "__main__":
    main()
