"""Benchmark of reading and planning one session in CPU instructions per message (valgrind's callgrind).

Usage: ``python bench/bench_instructions.py [--messages 5000 10000] [--formats anthropic openai claude_code] [--stages parse read plan]``

Wall time on a shared two-core machine varies by up to 40 % from run to run, which hides any
change smaller than that; the number of instructions a run executes varies by well under 1 %.
For each format, one synthetic session of small messages is written (as ``bench_long.py``
writes them) and one stage of ``dp-compact plan`` is run in a fresh process under
``valgrind --tool=callgrind``, after the package is imported and a three-line file of the same
format is read (so that no import is counted). The instructions of a process that stops there
are subtracted, and the rest is divided by the messages read (``instr/msg``, of the largest session).
With two sizes or more, ``marginal`` is the difference between the largest and the smallest
session's counts divided by the difference of their messages: what one more message costs, without
what a run does once whatever its length (settings, the sample of first records the formats are
told apart by), which a long session spreads over all its messages. Stages, each including the one
before: ``parse`` (every line parsed into a record), ``read`` (the reader's rules and the
messages: ``read_session``), ``plan`` (tokens from a warm cache, the structure arrays and the
plan: ``plan_session``). Needs ``valgrind`` on the PATH; each stage takes 10–30 s under it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_long import small_session
from timing import machine_line

CHILD = """
import os, sys
from dp_compact import api
from dp_compact.io import bulk_allocation
from dp_compact.pricing import get_prices
from dp_compact.sessions import read_session
from dp_compact.sessions.source import read_source
from dp_compact.settings import Settings
get_prices("claude-sonnet-4-5-20250929")
read_session(sys.argv[2], raw_json=True)  # the format's reader and what it imports, outside the count
stage, path = sys.argv[1], sys.argv[3]
with bulk_allocation():
    if stage == "parse":
        for record in read_source(path).records:
            pass
    elif stage in ("read", "plan"):
        session = read_session(path, raw_json=True)
        if stage == "plan":
            api.plan_session(session, Settings())
"""

STAGES = ("parse", "read", "plan")


def instructions(stage: str, head: Path, path: Path, env: dict[str, str]) -> int:
    """Instructions callgrind counts for the child process running ``stage`` on ``path``."""
    with tempfile.NamedTemporaryFile(suffix=".callgrind") as out:
        run = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}", sys.executable, "-c", CHILD, stage, str(head), str(path)],
            capture_output=True, text=True, env=env, check=False,
        )
    found = re.search(r"Collected : (\d+)", run.stderr)
    if run.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed on {path} ({stage}): {run.stderr[-800:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, nargs="+", default=[5000, 10000], help="session sizes (messages)")
    parser.add_argument("--formats", nargs="+", default=["anthropic", "openai", "claude_code"])
    parser.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES), help="stages to count (each one run alone)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH (Debian: apt install valgrind)")
    from dp_compact.sessions import read_session

    print(machine_line())
    sizes = sorted(set(args.messages))
    marginal = len(sizes) > 1
    header = "".join(f"{stage + ' instr/msg':>20}" + (f"{'marginal':>10}" if marginal else "") for stage in args.stages)
    print(f"{'session':<20}{'messages':>10}" + header)
    with tempfile.TemporaryDirectory(prefix="dp-instr-bench-") as tmp:
        folder = Path(tmp)
        env = {**os.environ, "XDG_CACHE_HOME": str(folder / "cache"), "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"}
        for fmt in args.formats:
            counted: dict[int, tuple[int, list[int]]] = {}  # size -> (messages, instructions per stage beyond the base)
            for size in dict.fromkeys((sizes[0], sizes[-1])):
                path, head = folder / f"{fmt}-{size}.jsonl", folder / f"{fmt}-head.jsonl"
                small_session(size, fmt, path)
                head.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:3]))
                subprocess.run([sys.executable, "-m", "dp_compact.cli", "plan", str(path), "--json"], env=env, capture_output=True, check=True)  # warm the token cache
                base = instructions("none", head, path, env)
                counted[size] = (len(read_session(path).messages), [instructions(stage, head, path, env) - base for stage in args.stages])
            (small_count, small), (count, large) = counted[sizes[0]], counted[sizes[-1]]
            cells = []
            for at_small, at_large in zip(small, large, strict=True):
                cells.append(f"{at_large / count:>20,.0f}" + (f"{(at_large - at_small) / (count - small_count):>10,.0f}" if marginal else ""))
            print(f"{fmt + ' small':<20}{count:>10,}" + "".join(cells), flush=True)


if __name__ == "__main__":
    main()
