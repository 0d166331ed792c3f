"""dp against the presets and the oracle under every pricing profile, on the shared sessions.

Usage: ``python bench/bench_profiles.py [--sessions ../shared/sessions] [--workers 2]``

For each built-in profile (``dp-compact profiles``), and for the prices each session records
(no profile given), replays the folder under the default policies with the default settings
(``--loss refetch``, the replay's own TTL) and prints per profile: the total $ of dp, the oracle,
every preset, dp / oracle and dp / best preset, and whether dp is at most every preset's total
(the goals: dp ≤ 1.05 × oracle, dp ≤ every preset).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from timing import SHARED_SESSIONS, machine_line

from dp_compact.fleet.jobs import replay_directory
from dp_compact.pricing import list_profiles
from dp_compact.replay.policies import DEFAULT_POLICIES
from dp_compact.settings import load_settings


def row(label: str, folder: Path, workers: int, provider: str | None) -> str:
    """One profile's line: each policy's total $ and the two ratios."""
    settings = load_settings(**({"provider": provider} if provider else {}))
    report = replay_directory(folder, settings, DEFAULT_POLICIES, workers=workers)
    totals = {r["policy"]: r["total_usd"] for r in report.totals()}
    presets = {p: t for p, t in totals.items() if p not in ("dp", "seed", "oracle")}
    best = min(presets, key=presets.__getitem__)
    worse = [p for p, t in presets.items() if totals["dp"] > t + 1e-9]
    cells = " ".join(f"{totals[p]:9.2f}" for p in DEFAULT_POLICIES)
    return (f"{label:<22} {cells} {totals['dp'] / totals['oracle']:8.3f} {totals['dp'] / presets[best]:8.3f}"
            f"  {'yes' if not worse else 'no: ' + ', '.join(worse)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=Path, default=SHARED_SESSIONS)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if not args.sessions.exists():
        sys.exit(f"{args.sessions} is absent: the benchmark replays the shared real sessions")
    print(machine_line())
    print(f"{'profile':<22} " + " ".join(f"{p:>9}" for p in DEFAULT_POLICIES) + f" {'dp/orac':>8} {'dp/best':>8}  dp <= every preset")
    start = time.perf_counter()
    print(row("(recorded model)", args.sessions, args.workers, None))
    for prices in list_profiles():
        print(row(prices.name, args.sessions, args.workers, prices.name))
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
