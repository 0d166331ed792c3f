"""Timing helpers shared by the benchmark scripts (median of runs after a warm-up, in ms)."""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path


def runs_ms(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Median wall time of ``repeat`` runs after one warm-up, ms, and the last result."""
    result = fn()
    runs = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        result = fn()
        runs.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(runs), result


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of ``repeat`` runs after one warm-up, ms."""
    return runs_ms(fn, repeat)[0]


#: The shared real transcripts beside the checkout.
SHARED_SESSIONS = Path(__file__).resolve().parents[2] / "shared" / "sessions"


def parse_args(doc: str, repeat: int) -> argparse.Namespace:
    """``--repeat N`` and ``--sessions DIR``, the options every benchmark takes."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=repeat)
    parser.add_argument("--sessions", type=Path, default=SHARED_SESSIONS)
    return parser.parse_args()


def machine_line() -> str:
    """The header line of a benchmark table: date, machine, cores, Python and numpy versions."""
    import numpy as np

    return (f"# {time.strftime('%Y-%m-%d')} · {platform.machine()} · {os.cpu_count()} cores"
            f" · Python {platform.python_version()} · numpy {np.__version__}")
