"""Timing helpers shared by the benchmark scripts (median of runs after a warm-up, in ms)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


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
