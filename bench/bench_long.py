"""Benchmark of one long session: ``dp-compact plan`` per message, time and resident memory.

Usage: ``python bench/bench_long.py [--messages 100000 1000000] [--formats anthropic openai claude_code]
[--recombined 100000]``

For each size and format, one synthetic session of that many messages is written: a user prompt
every 40 messages, between them assistant messages (a short text and one tool call) answered by
one tool result each, texts of 6 to 60 words (small messages, about 300 bytes of JSON each, 740
bytes as Claude Code records with their metadata). With ``--recombined N``, one Claude Code session
of about N messages is made of the real sessions' call blocks instead (large tool outputs), as
:mod:`dp_compact.fleet.resample` recombines them.

Each file is planned by ``dp-compact plan --json`` in a fresh process, first with an empty token
cache (cold), then again (warm: the fastest of ``--warm-runs`` runs, 3 by default). Reported: wall
seconds of the command after imports (the package and its price data, a fixed 0.1–0.2 s per
process), µs per message, peak resident memory beyond the interpreter
with the package imported (``VmHWM``), per message, and per message beyond the file's own size
(the target: ≤ 10 µs and ≤ 1 KB beyond the text per message, warm). A file larger than 4 MiB is
read a piece at a time, so its text is not resident whole: the last column can be below zero.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import orjson
from timing import SHARED_SESSIONS, machine_line

PLAN_CHILD = """
import json, sys, time
import dp_compact.api, dp_compact.sessions, dp_compact.core.planner
from dp_compact.cli import app
from dp_compact.pricing import get_prices
get_prices("claude-sonnet-4-5-20250929")  # the model the Claude Code sessions name: genai-prices' data loads once per process
def hwm():  # peak resident KB of this process image
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM"))
base = hwm()
start = time.perf_counter()
try:
    app(["plan", sys.argv[1], "--json"])
except SystemExit:
    pass
wall = time.perf_counter() - start
print(json.dumps({"wall_s": wall, "rss_kb": hwm() - base, "base_kb": base}), file=sys.stderr)
"""

_WORDS = "the of and to in is that for it as with was on be by this are file test run error fix value line def return import class".split()


def small_session(n: int, fmt: str, target: Path) -> None:
    """Write an ``n``-message session of small messages in format ``fmt`` (module docstring)."""
    rng = random.Random(0)

    def text(k: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(k))

    parent: list[str | None] = [None]

    def claude_record(kind: str, message: dict, index: int) -> dict:
        record_id = str(uuid.UUID(int=index + 2))
        record = {"parentUuid": parent[0], "isSidechain": False, "userType": "external", "cwd": "/w",
                  "sessionId": str(uuid.UUID(int=1)), "version": "2.0.0", "type": kind, "message": message,
                  "uuid": record_id, "timestamp": "2026-01-01T00:00:00.000Z"}
        parent[0] = record_id
        return record

    with target.open("wb") as out:
        i = 0
        while i < n:
            if i % 40 == 0:
                prompt = text(30)
                line = {"anthropic": {"role": "user", "content": prompt}, "openai": {"role": "user", "content": prompt},
                        "claude_code": claude_record("user", {"role": "user", "content": prompt}, i)}[fmt]
                out.write(orjson.dumps(line) + b"\n")
                i += 1
                continue
            call_id, said, command, output = f"call_{i}", text(20), text(6), text(60)
            if fmt == "openai":
                pair = [{"role": "assistant", "content": said, "tool_calls": [{"id": call_id, "type": "function",
                         "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]},
                        {"role": "tool", "tool_call_id": call_id, "content": output}]
            else:
                assistant = {"role": "assistant", "content": [{"type": "text", "text": said},
                             {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}]}
                result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": output}]}
                if fmt == "claude_code":
                    assistant |= {"id": f"msg_{i}", "model": "claude-sonnet-4-5-20250929", "stop_reason": "tool_use",
                                  "usage": {"input_tokens": 10, "cache_creation_input_tokens": 100,
                                            "cache_read_input_tokens": 1000 + 50 * i, "output_tokens": 40}}
                    pair = [claude_record("assistant", assistant, i), claude_record("user", result, i + 1)]
                else:
                    pair = [assistant, result]
            for line in pair:
                out.write(orjson.dumps(line) + b"\n")
            i += 2


def recombined_session(n: int, target: Path) -> None:
    """Write one Claude Code session of about ``n`` messages from the real sessions' call blocks."""
    from dp_compact.fleet.resample import _append, cut_source
    from dp_compact.io import session_files

    cut = [s for s in (cut_source(p) for p in session_files(SHARED_SESSIONS)) if s is not None and s.format == "claude_code"]
    base = max(cut, key=lambda s: len(s.blocks))
    lines = [*base.head, *(line for block in base.blocks for line in block)]
    state = {"uuid": None, "session_id": base.session_id}
    blocks = [b for s in cut for b in s.blocks]
    index = 0
    while len(lines) < 2 * n:  # about two source lines per message in these Claude Code blocks
        _append(lines, blocks[index % len(blocks)], index, state)
        index += 1
    target.write_bytes(b"\n".join(lines) + b"\n")


def _plan_child(path: Path, env: dict[str, str]) -> dict[str, float]:
    """Wall seconds and peak resident KB of ``dp-compact plan --json path`` in a fresh process."""
    out = subprocess.run([sys.executable, "-c", PLAN_CHILD, str(path)], capture_output=True, text=True, env=env, cwd=tempfile.gettempdir())
    last = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
    if not last.startswith("{"):
        raise SystemExit(f"plan failed on {path}: {out.stderr[-800:]}")
    return json.loads(last)


def measure(path: Path, label: str, cache: Path, warm_runs: int = 3) -> None:
    """Plan ``path`` cold then warm in fresh processes and print one row each (warm: the fastest
    of ``warm_runs`` runs; other jobs on the machine only ever slow a run down)."""
    from dp_compact.sessions import read_session

    count = len(read_session(path).messages)
    size = path.stat().st_size
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    for run in ("cold", "warm"):
        runs = [_plan_child(path, env) for _ in range(1 if run == "cold" else warm_runs)]
        data = min(runs, key=lambda r: r["wall_s"])
        kb = data["rss_kb"]
        print(f"{label:<24}{count:>10,}{size / 1e6:>9.1f}{run:>6}{data['wall_s']:>9.2f}{data['wall_s'] / count * 1e6:>9.1f}"
              f"{kb / 1024:>9.0f}{kb / count:>9.2f}{(kb - size / 1024) / count:>12.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--formats", nargs="+", default=["anthropic", "openai", "claude_code"])
    parser.add_argument("--recombined", type=int, default=0)
    parser.add_argument("--warm-runs", type=int, default=3, help="warm runs per file; the fastest is shown")
    args = parser.parse_args()
    print(machine_line())
    print(f"{'session':<24}{'messages':>10}{'MB':>9}{'run':>6}{'wall s':>9}{'µs/msg':>9}{'peak MB':>9}{'KB/msg':>9}{'KB/msg>text':>12}")
    with tempfile.TemporaryDirectory(prefix="dp-long-bench-") as tmp:
        folder = Path(tmp)
        for n in args.messages:
            for fmt in args.formats:
                path = folder / f"{fmt}_{n}.jsonl"
                small_session(n, fmt, path)
                measure(path, f"{fmt} small", folder / f"cache-{fmt}-{n}", args.warm_runs)
                path.unlink()
        if args.recombined:
            path = folder / "recombined.jsonl"
            recombined_session(args.recombined, path)
            measure(path, "claude_code recombined", folder / "cache-recombined", args.warm_runs)


if __name__ == "__main__":
    main()
