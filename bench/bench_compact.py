"""Benchmark of `dp-compact compact` (extractive summarizer) and of the archive.

Usage: ``python bench/bench_compact.py [--repeat 5] [--sessions ../shared/sessions]``

Prints, for the largest real session of each message format and for the largest of all:
messages, the cut, end-to-end compaction ms (read, tokenize with a warm cache, plan, split,
shrink, anchors, extractive summary, archive, reassemble, validate, atomic write), and the
archive alone: write ms and restore ms of the head.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from timing import median_ms, machine_line, parse_args

from dp_compact.pipeline.archive import ArchiveStore
from dp_compact.pipeline.compact import compact_file
from dp_compact.sessions import read_session
from dp_compact.settings import load_settings



def _largest_per_format(folder: Path) -> list[Path]:
    by_format: dict[str, Path] = {}
    for path in sorted(folder.rglob("*")):
        if path.suffix not in {".json", ".jsonl", ".traj"} or path.name == "manifest.json" or path.parent.name == "other":
            continue
        best = by_format.get(path.parent.name)
        if best is None or path.stat().st_size > best.stat().st_size:
            by_format[path.parent.name] = path
    return sorted(by_format.values(), key=lambda p: p.stat().st_size, reverse=True)


def _row(path: Path, repeat: int, tmp: Path) -> str:
    os.environ["DP_ARCHIVE_DIR"] = str(tmp / "archive")
    settings = load_settings()
    output = tmp / f"{path.stem}.out.jsonl"
    result = compact_file(path, settings, output=output, force=True)
    compact_ms = median_ms(lambda: compact_file(path, settings, output=output, force=True), repeat)
    session = read_session(path)
    head = [m.raw for m in session.messages[: result.cut]]
    store = ArchiveStore(tmp / "bench-archive")
    ref = store.write("bench", head, {"summary": "bench"})
    write_ms = median_ms(lambda: store.write("bench", head, {"summary": "bench"}), repeat)
    restore_ms = median_ms(lambda: store.restore(ref), repeat)
    size = f"{path.stat().st_size / 1e6:.1f} MB"
    return (f"{path.name[:36]:<36} {size:>8} {len(session.messages):>8} {result.cut:>6} {compact_ms:11.0f}"
            f" {len(head):>8} {write_ms:10.1f} {restore_ms:11.1f}")


def main() -> None:
    args = parse_args(__doc__, repeat=5)
    if not args.sessions.exists():
        raise SystemExit(f"{args.sessions} is absent: nothing to measure")
    print(machine_line())
    print(f"{'session':<36} {'size':>8} {'messages':>8} {'cut':>6} {'compact_ms':>11} {'archived':>8} {'write_ms':>10} {'restore_ms':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        for path in _largest_per_format(args.sessions):
            print(_row(path, args.repeat, Path(tmp)))


if __name__ == "__main__":
    main()
