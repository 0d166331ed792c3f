"""Whole process: ``dp-compact plan`` with the seed's settings against the seed's original awk planner.

Usage: ``python bench/bench_seed_awk.py [--lines 2000 20000 100000] [--repeat 5] [--awk-repeat 3]``

For each size, one conversation in the seed agent's own format (its CONV_FILE: one JSON message
a line, shaped as ../shared/reference/conversations/d05_large_2000.jsonl is: a user prompt, then
0 to 3 rounds of an assistant message with thinking, text and 1 to 3 tool calls answered by one
user line of their results, then an assistant answer; about 470 bytes a line) is written with a
fixed random seed, and planned under the golden's ``P1_default`` settings and stats
(../shared/reference/golden_seed_model.json) by:

- ``awk``: bench/seed_planner.awk, the seed's planner as seeds/004 describes it (K summed again
  for every k, quadratic), run by /usr/bin/awk with LC_ALL=C;
- ``awk running``: the same with ``-v running=1`` (K as a running sum: linear; not the seed's);
- ``dp-compact plan --json`` with DP_MODEL=seed, DP_TOKENIZER=bytes4 and the seed's variables
  as ``DP_*``, in a fresh process: ``warm`` after one run that fills the token cache and keeps
  the file's state (the plan server that run starts answers the warm runs, unless
  ``NO_DP_COMPACT_SERVER=1``), ``cold`` with an empty cache folder each run.

Reported: wall seconds of the whole process (``subprocess.run``, interpreter start and imports
included), the fastest of the runs and their median (other jobs on a shared machine only ever
slow a run down), the lines kept by each (they must be identical, or the script exits 1), and
awk's time over dp-compact's warm one (fastest against fastest). ``lean`` is :data:`LEAN_CHILD`,
a numpy-free planner of the seed model written for these files (not dp-compact): what a fresh
Python process that decides as dp-compact does costs at the least; the interpreter's start
alone and with numpy imported are printed under each row.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import SHARED_SESSIONS, machine_line

BENCH = Path(__file__).resolve().parent
AWK_SCRIPT = BENCH / "seed_planner.awk"
GOLDEN = SHARED_SESSIONS.parent / "reference" / "golden_seed_model.json"
DP_COMPACT = Path(sys.executable).parent / "dp-compact"

#: The golden's P1_default profile: the seed's defaults but DP_MIN_KEEP_RATIO, and its stats.
P1_ENV = {"DP_P_INPUT": "3.0", "DP_P_CACHE": "0.30", "DP_P_OUT": "15.0", "DP_V": "5000", "DP_S": "500", "DP_L": "5",
          "DP_BASELINE_E": "8", "DP_E_FIXED": "0", "DP_R": "0.8", "DP_BETA": "0.03", "DP_QUALITY_PENALTY": "0.2",
          "DP_MIN_KEEP_RATIO": "0.12", "MAX_CONTEXT_TOKENS": "200000"}
P1_STATS = {"current_turn_count": 3, "agent_request_count": 15, "compact_request_count": 0,
            "total_input_tokens": 60000, "current_context_tokens": 100000}

#: A numpy-free planner of the seed model for these files, not dp-compact: the floor of what a
#: process that decides as ``dp-compact plan`` does here can cost (no JSON parse: the seed's own
#: byte rules for a real user line, tool ids by a regular expression; feasible cuts, E, L, R,
#: avg, ①-⑤ and the first best k as dp_compact.core.planner; no forced fallback). Prints k, 0 = keep.
LEAN_CHILD = r"""
import json, os, re, sys
data = open(sys.argv[1], "rb").read()
stats = json.loads(open(sys.argv[2], "rb").read())
env = os.environ.get
lines = [line for line in data.split(b"\n") if line.strip()]
n = len(lines)
tokens = [(len(line) + 3) // 4 + 1 for line in lines]
plain = [b'"role":"user"' in line and b'"content":[' not in line for line in lines]
call_at, blocked = {}, [0] * (n + 2)
use_id, result_id = re.compile(rb'"type":"tool_use","id":"([^"]*)"'), re.compile(rb'"tool_use_id":"([^"]*)"')
for i, line in enumerate(lines):
    if b'"tool_use_id"' in line:
        for found in result_id.findall(line):
            j = call_at.get(found)
            if j is not None:
                blocked[j + 1] += 1
                blocked[i + 1] -= 1
    if b'"tool_use"' in line:
        for found in use_id.findall(line):
            call_at[found] = i
p_in, p_cache, p_out = float(env("DP_P_INPUT", 3)), float(env("DP_P_CACHE", 0.3)), float(env("DP_P_OUT", 15))
v, s, m = int(env("DP_V", 5000)), int(env("DP_S", 500)), int(env("DP_MAX_CONTEXT_TOKENS", 200000))
l, baseline, e_fixed = float(env("DP_L", 0)), int(env("DP_BASELINE_E", 8)), float(env("DP_E_FIXED", 0))
r, beta, qp, ratio = float(env("DP_R", 0.8)), float(env("DP_BETA", 0.03)), float(env("DP_QUALITY_PENALTY", 0.2)), float(env("DP_MIN_KEEP_RATIO", 0.25))
t, calls = stats["current_turn_count"], stats["agent_request_count"]
big_l = max(l if l > 0 else calls / t if calls > 0 and t > 0 else 23.0, 1.0)
e = e_fixed if e_fixed > 0 else max(baseline - t, baseline // 2 if baseline > 1 else 2) if baseline > 0 else 2.0
big_r = e * big_l
avg = stats["total_input_tokens"] / calls if stats["total_input_tokens"] and calls else 4000.0
info = beta * (1 - max(r ** (stats["compact_request_count"] + 1), 0.37)) * big_r * avg * p_in / 1e6
total = sum(tokens)
least = min(max(int(n * ratio + 0.5), 3), n)
fixed = p_in * 70 + p_out * s
best, best_k, kept, open_results = None, 0, 0, 0
prefix_blocked = [0] * (n + 1)
running = 0
for i in range(n + 1):
    running += blocked[i]
    prefix_blocked[i] = running
for cut in range(n - 1, 0, -1):
    kept += tokens[cut]
    if n - cut < least or not plain[cut] or prefix_blocked[cut]:
        continue
    head = total - kept
    net = ((big_r - 1) * p_cache * head - (s + kept) * (p_in - p_cache) - (p_cache * (v + head) + fixed)
           + qp * p_in * ((v + total) ** 2 - (v + kept) ** 2) / m) / 1e6 - info
    if best is None or net > best:
        best, best_k = net, n - cut
print(best_k if best is not None and best > 0 else 0)
"""


_WORDS = (
    "agent", "array", "build", "cache", "compact", "config", "context", "error", "file", "for", "function",
    "import", "in", "input", "is", "json", "line", "module", "number", "of", "on", "output", "parse", "path",
    "request", "result", "return", "string", "struct", "summary", "test", "that", "the", "this", "to",
    "token", "tool", "value", "with",
)


def seed_conversation(lines: int, target: Path, seed: int = 0) -> None:
    """Write ``lines`` lines of the seed's CONV_FILE format, shaped as d05_large_2000.jsonl (module docstring)."""
    rng = random.Random(seed)

    def text(low: int, high: int) -> str:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(low, high))]
        for _ in range(len(words) // 25):
            words[rng.randrange(len(words))] += "\n"
        return " ".join(words)

    call = 0
    out: list[str] = []

    def put(role: str, content: object) -> None:
        out.append(json.dumps({"role": role, "content": content}, ensure_ascii=False, separators=(",", ":")))

    while len(out) < lines:
        put("user", text(20, 70))
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            ids = []
            blocks = [{"type": "thinking", "thinking": text(15, 40)}, {"type": "text", "text": text(8, 30)}]
            for _ in range(rng.choice((1, 1, 2, 3))):
                call += 1
                ids.append(f"toolu_{call:06d}")
                blocks.append({"type": "tool_use", "id": ids[-1], "name": rng.choice(("Read", "Bash", "Grep")),
                               "input": {"path": f"src/mod{rng.randrange(100)}.py"}})
            put("assistant", blocks)
            put("user", [{"type": "tool_result", "tool_use_id": i, "content": text(20, 60)} for i in ids])
        put("assistant", [{"type": "thinking", "thinking": text(15, 40)}, {"type": "text", "text": text(10, 40)}])
    target.write_text("\n".join(out[:lines]) + "\n", encoding="utf-8")


def awk_command(path: Path, stats: dict = P1_STATS, *, running: bool = False) -> list[str]:
    """The seed planner's command line on ``path``, the stats as its ``-v`` variables."""
    awk = shutil.which("awk", path="/usr/bin") or "awk"
    variables = {"t": stats["current_turn_count"], "calls": stats["agent_request_count"],
                 "c": stats["compact_request_count"], "total_input": stats["total_input_tokens"],
                 "ct": stats["current_context_tokens"], "running": int(running)}
    return [awk, "-f", str(AWK_SCRIPT), *(arg for k, v in variables.items() for arg in ("-v", f"{k}={v}")), str(path)]


def awk_env(settings: dict = P1_ENV) -> dict[str, str]:
    """The awk's environment: the seed's variables, byte semantics (``LC_ALL=C``)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", **settings}


def dp_env(settings: dict = P1_ENV, cache: Path | None = None) -> dict[str, str]:
    """dp-compact's environment: the seed's model and token estimate, its variables as ``DP_*``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DP_")}
    env |= {"DP_MODEL": "seed", "DP_TOKENIZER": "bytes4"}
    env |= {("DP_MAX_CONTEXT_TOKENS" if k == "MAX_CONTEXT_TOKENS" else k): v for k, v in settings.items()}
    if cache is not None:
        env["XDG_CACHE_HOME"] = str(cache)
    return env


def dp_command(path: Path, stats_file: Path) -> list[str]:
    """``dp-compact plan PATH --stats STATS --json``."""
    return [str(DP_COMPACT), "plan", str(path), "--stats", str(stats_file), "--json"]


def timed(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    """Wall seconds of one whole process and its stdout."""
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 10):
        raise SystemExit(f"{args[0]} failed ({done.returncode}): {done.stderr[-800:]}")
    return wall, done.stdout


def dp_keep(stdout: str) -> int:
    """Messages kept by a ``plan --json`` output, 0 when it keeps everything."""
    plan = json.loads(stdout)
    return plan["k"] if plan["decision"] == "compact" else 0


def compare(lines: int, folder: Path, repeat: int, awk_repeat: int) -> dict:
    """Time the awk and dp-compact on one generated conversation; a dict of the row's figures."""
    path = folder / f"seed_{lines}.jsonl"
    seed_conversation(lines, path)
    stats_file = folder / "stats.json"
    stats_file.write_text(json.dumps(P1_STATS))
    awk_runs, awk_out = [], ""
    for _ in range(awk_repeat):
        wall, awk_out = timed(awk_command(path), awk_env(), folder)
        awk_runs.append(wall)
    running_runs, running_out = [], ""
    for _ in range(repeat):
        wall, running_out = timed(awk_command(path, running=True), awk_env(), folder)
        running_runs.append(wall)
    cold_runs, cold_out = [], ""
    for run in range(repeat):
        wall, cold_out = timed(dp_command(path, stats_file), dp_env(cache=folder / f"cold-{lines}-{run}"), folder)
        cold_runs.append(wall)
    warm_cache = folder / f"warm-{lines}"
    timed(dp_command(path, stats_file), dp_env(cache=warm_cache), folder)
    warm_runs, warm_out = [], ""
    for _ in range(repeat):
        wall, warm_out = timed(dp_command(path, stats_file), dp_env(cache=warm_cache), folder)
        warm_runs.append(wall)
    lean_runs, lean_out = [], ""
    for _ in range(repeat):
        wall, lean_out = timed([sys.executable, "-c", LEAN_CHILD, str(path), str(stats_file)], dp_env(), folder)
        lean_runs.append(wall)
    floors = {name: [timed([sys.executable, "-c", code], dp_env(), folder)[0] for _ in range(repeat)]
              for name, code in (("python", "pass"), ("numpy", "import numpy"))}
    keeps = {"awk": int(awk_out), "awk running": int(running_out), "dp cold": dp_keep(cold_out), "dp warm": dp_keep(warm_out),
             "lean": int(lean_out)}
    size = path.stat().st_size
    path.unlink()
    return {"lines": lines, "bytes": size, "awk": awk_runs, "awk_running": running_runs, "dp_cold": cold_runs,
            "dp_warm": warm_runs, "lean": lean_runs, "python": floors["python"], "numpy": floors["numpy"],
            "keeps": keeps, "identical": len(set(keeps.values())) == 1}


def _s(runs: list[float]) -> str:
    return f"{min(runs):8.3f} {statistics.median(runs):8.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=[2_000, 20_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5, help="runs of dp-compact and of the linear awk")
    parser.add_argument("--awk-repeat", type=int, default=3, help="runs of the seed's (quadratic) awk")
    args = parser.parse_args()
    print(machine_line() + f" · awk {os.path.realpath(shutil.which('awk', path='/usr/bin') or 'awk')}")
    print("# seconds of the whole process: fastest and median of the runs; keep = lines kept by each")
    print(f"{'lines':>8} {'awk min':>8} {'median':>8} {'awk-run':>8} {'median':>8} {'dp cold':>8} {'median':>8}"
          f" {'dp warm':>8} {'median':>8} {'lean':>8} {'median':>8} {'awk/dp':>7} {'awk/lean':>8} {'run/dp':>7}  keep (identical)")
    failed = False
    with tempfile.TemporaryDirectory(prefix="dp-seed-awk-") as tmp:
        for lines in args.lines:
            row = compare(lines, Path(tmp), args.repeat, args.awk_repeat)
            ratio = min(row["awk"]) / min(row["dp_warm"])
            ratio_running = min(row["awk_running"]) / min(row["dp_warm"])
            lean = min(row["awk"]) / min(row["lean"])
            print(f"{lines:>8,} {_s(row['awk'])} {_s(row['awk_running'])} {_s(row['dp_cold'])} {_s(row['dp_warm'])} {_s(row['lean'])}"
                  f" {ratio:6.1f}x {lean:7.1f}x {ratio_running:6.2f}x  {row['keeps']['awk']} ({'yes' if row['identical'] else row['keeps']})",
                  flush=True)
            print(f"#   interpreter start {min(row['python']):.3f} s, with numpy imported {min(row['numpy']):.3f} s (fastest)", flush=True)
            failed |= not row["identical"]
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
