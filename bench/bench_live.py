"""Live speed in one table: per-call time, whole-process times, memory.

Usage: ``python bench/bench_live.py [--awk-lines 2000 20000 100000] [--repeat 5] [--awk-repeat 3]
[--memory-mb 50] [--skip-awk] [--skip-memory] [--formats ...]``

One table with the machine line, three sections:

- ``per-call``: time of one planning call inside a running agent against the conversation's
  length, from ``bench/bench_adapters.py`` (its ``live_rows()``); "not measured" when that
  script or its function is absent.
- ``whole process``: ``dp-compact plan`` as a fresh process, from ``bench/bench_hot.py`` (its
  ``live_rows()``), then against the seed's original awk planner (``bench/bench_seed_awk.py``:
  the golden's P1 settings, generated conversations in the seed's format; fastest runs; the
  decisions must be identical). Target: at 20,000 lines at least 100 x the awk.
- ``memory``: one transcript of about ``--memory-mb`` MB in each supported format, planned by
  ``dp-compact plan --json`` with the default settings in a fresh process with an empty token
  cache: wall seconds and peak resident memory of the whole process (``ru_maxrss`` of the
  child, interpreter and imports included), and one file of a single 50 MB line. Target: under
  30 s and under 1 GB each. Anthropic, OpenAI chat and Claude Code sessions are
  ``bench_long.py``'s small-message sessions; Codex, Gemini CLI (stream-json) and ATIF are the
  shared real session of that format (``../shared/sessions``) repeated, call ids made unique.

A hook's ``live_rows()`` returns rows of ``(item, measured, target, ok)`` (tuples, or dicts with
those keys; ``name``/``value`` are taken for ``item``/``measured``); any row it cannot give is
printed as "not measured".
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import orjson
from timing import SHARED_SESSIONS, machine_line

BENCH = Path(__file__).resolve().parent
DP_COMPACT = Path(sys.executable).parent / "dp-compact"
HOOK_FUNCTIONS = ("live_rows", "rows", "row")
MEMORY_FORMATS = ("anthropic", "openai_chat", "claude_code", "codex", "gemini_cli", "atif")
#: The real session each repeated format is grown from (``../shared/sessions``).
GROWN_FROM = {"codex": "codex/codex_raze.jsonl", "gemini_cli": "other/gemini_cli_stream_figma.jsonl",
              "atif": "other/atif_terminus_hvac.json"}
ID_KEYS = frozenset({"call_id", "tool_id", "tool_call_id", "tool_use_id"})

Row = tuple[str, str, str, str]


# --- hooks -------------------------------------------------------------------------------------

def _normalize(row: object) -> Row:
    if isinstance(row, dict):
        item_key = next((k for k in ("item", "name", "what", "label") if k in row), None)
        item = row.get(item_key, "") if item_key else ""
        if "measured" in row or "value" in row:
            measured = row.get("measured", row.get("value", ""))
        elif "min_ms" in row:
            measured = f"min {row['min_ms']} ms, median {row.get('median_ms', '?')} ms ({row.get('runs', '?')} runs)"
        else:
            measured = "; ".join(f"{k} {v}" for k, v in row.items() if k not in (item_key, "target", "ok"))
        return str(item), str(measured), str(row.get("target", "")), _ok(row.get("ok", ""))
    if isinstance(row, (tuple, list)):
        cells = [str(cell) for cell in row[:4]] + [""] * (4 - min(len(row), 4))
        return cells[0], cells[1], cells[2], _ok(row[3]) if len(row) > 3 else ""
    return str(row), "", "", ""


def _ok(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return str(value)


def hook_rows(module: str, what: str) -> list[Row]:
    """The rows of ``bench/<module>.py``'s ``live_rows()``, or one "not measured" row."""
    if not (BENCH / f"{module}.py").exists():
        return [(what, "not measured", f"bench/{module}.py is absent", "")]
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - another worker's script: report, do not stop the table
        return [(what, "not measured", f"bench/{module}.py does not import: {exc!r}"[:120], "")]
    fn = next((getattr(mod, name) for name in HOOK_FUNCTIONS if callable(getattr(mod, name, None))), None)
    if fn is None:
        return [(what, "not measured", f"bench/{module}.py has no {' / '.join(HOOK_FUNCTIONS)}()", "")]
    try:
        rows = fn()
    except Exception as exc:  # noqa: BLE001
        return [(what, "not measured", f"bench/{module}.py failed: {exc!r}"[:120], "")]
    if isinstance(rows, (str, dict)) or not isinstance(rows, Iterable):
        rows = [rows]
    return [_normalize(row) for row in rows] or [(what, "not measured", f"bench/{module}.py gave no rows", "")]


# --- the seed's awk against dp-compact plan ----------------------------------------------------

def awk_rows(lines: list[int], repeat: int, awk_repeat: int) -> list[Row]:
    import shutil

    if shutil.which("awk", path="/usr/bin") is None:
        return [("dp-compact plan vs the seed's awk", "not measured", "/usr/bin/awk is absent", "")]
    from bench_seed_awk import compare

    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="dp-live-awk-") as tmp:
        for n in lines:
            row = compare(n, Path(tmp), repeat, awk_repeat if n <= 20_000 else 1)
            awk, warm, cold = min(row["awk"]), min(row["dp_warm"]), min(row["dp_cold"])
            ratio = awk / warm
            same = "identical" if row["identical"] else f"DIFFERENT {row['keeps']}"
            measured = (f"awk {awk:.3f} s; dp warm {warm:.3f} s (median {statistics.median(row['dp_warm']):.3f}),"
                        f" cold {cold:.3f} s; {ratio:.1f} x; keep {row['keeps']['awk']} {same}")
            target = "≥ 100 x, identical" if n == 20_000 else "identical"
            ok = row["identical"] and (ratio >= 100 if n == 20_000 else True)
            out.append((f"plan vs seed awk, {n:,} lines", measured, target, "yes" if ok else "NO"))
            lean = min(row["lean"])
            floor = (f"numpy-free seed planner (bench_seed_awk.LEAN_CHILD, not dp-compact) {lean:.3f} s, {awk / lean:.0f} x"
                     f" the awk; python start {min(row['python']):.3f} s, + numpy {min(row['numpy']):.3f} s")
            out.append((f"  floor at {n:,} lines", floor, "", ""))
            print(f"  [awk] {out[-2:]}", file=sys.stderr, flush=True)
    return out


# --- memory: 50 MB of each format --------------------------------------------------------------

def _suffix_ids(value: object, suffix: str) -> object:
    if isinstance(value, dict):
        return {k: (v + suffix if k in ID_KEYS and isinstance(v, str) else _suffix_ids(v, suffix)) for k, v in value.items()}
    if isinstance(value, list):
        return [_suffix_ids(v, suffix) for v in value]
    return value


def grown_session(fmt: str, target_bytes: int, out: Path) -> None:
    """A real session of ``fmt`` repeated to ``target_bytes``: its body copied with unique call ids."""
    source = SHARED_SESSIONS / GROWN_FROM[fmt]
    if fmt == "atif":
        doc = json.loads(source.read_text(encoding="utf-8"))
        steps, size, rep = [], 0, 0
        one = len(orjson.dumps(doc["steps"]))
        while size < target_bytes:
            for step in doc["steps"]:
                steps.append({**step, "step_id": len(steps) + 1})
            size += one
            rep += 1
        out.write_bytes(orjson.dumps({**doc, "steps": steps}, option=orjson.OPT_INDENT_2))  # one line would read as JSONL
        return
    records = [orjson.loads(line) for line in source.read_bytes().splitlines() if line.strip()]
    if fmt == "codex":
        head, body, tail = records[:1], records[1:], []
    else:  # gemini_cli stream-json: the events up to the first init, then messages and tools, then the result
        first_init = next(i for i, r in enumerate(records) if r.get("type") == "init")
        head = records[: first_init + 1]
        body = [r for r in records[first_init + 1:] if r.get("type") not in ("init", "result")]
        tail = [r for r in records if r.get("type") == "result"]
    with out.open("wb") as handle:
        for record in head:
            handle.write(orjson.dumps(record) + b"\n")
        rep = 0
        while handle.tell() < target_bytes:
            for record in body:
                handle.write(orjson.dumps(_suffix_ids(record, f"~{rep}")) + b"\n")
            rep += 1
        for record in tail:
            handle.write(orjson.dumps(record) + b"\n")


def small_session_of_size(fmt: str, target_bytes: int, out: Path) -> None:
    """``bench_long.py``'s small-message session of ``fmt``, as many messages as make ``target_bytes``."""
    from bench_long import small_session

    name = {"openai_chat": "openai"}.get(fmt, fmt)
    small_session(2_000, name, out)
    per_message = out.stat().st_size / 2_000
    small_session(math.ceil(target_bytes / per_message), name, out)


def single_line(target_bytes: int, out: Path) -> None:
    """One Anthropic user message of one character repeated: a single line of ``target_bytes``."""
    prefix, suffix = b'{"role":"user","content":"', b'"}\n'
    with out.open("wb") as handle:
        handle.write(prefix)
        left = target_bytes - len(prefix) - len(suffix)
        chunk = b"a" * (1 << 20)
        while left > 0:
            handle.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
        handle.write(suffix)


def run_measured(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, int, str]:
    """Wall seconds, peak resident KB (``ru_maxrss`` of this child alone), exit code, stdout of one process."""
    with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
        start = time.perf_counter()
        child = subprocess.Popen(args, stdout=stdout, stderr=stderr, env=env, cwd=cwd)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        text = stdout.read().decode("utf-8", "replace")
        if child.returncode not in (0, 10):
            text = stderr.read().decode("utf-8", "replace")[-300:]
        return wall, usage.ru_maxrss, child.returncode, text


def memory_rows(formats: list[str], megabytes: float) -> list[Row]:
    target = int(megabytes * 1_000_000)
    out: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="dp-live-mem-") as tmp:
        folder = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DP_")}
        jobs = [(fmt, fmt) for fmt in formats] + [("single line", "single line")]
        for label, fmt in jobs:
            path = folder / ("one_line.jsonl" if fmt == "single line" else f"{fmt}.{'json' if fmt == 'atif' else 'jsonl'}")
            try:
                if fmt == "single line":
                    single_line(target, path)
                elif fmt in GROWN_FROM:
                    if not (SHARED_SESSIONS / GROWN_FROM[fmt]).exists():
                        out.append((f"{label} {megabytes:g} MB", "not measured", f"{GROWN_FROM[fmt]} is absent", ""))
                        continue
                    grown_session(fmt, target, path)
                else:
                    small_session_of_size(fmt, target, path)
            except Exception as exc:  # noqa: BLE001
                out.append((f"{label} {megabytes:g} MB", "not measured", f"could not write it: {exc!r}"[:120], ""))
                continue
            size = path.stat().st_size
            cache = folder / f"cache-{fmt.replace(' ', '_')}"
            wall, kb, code, text = run_measured([str(DP_COMPACT), "plan", str(path), "--json"],
                                                {**env, "XDG_CACHE_HOME": str(cache)}, folder)
            if code in (0, 10):
                plan = json.loads(text)
                detail = f"{plan.get('session', {}).get('format', fmt)}, {plan.get('messages', '?'):,} messages, {plan['decision']}"
            else:
                detail = f"exit {code}: {text.strip().splitlines()[-1] if text.strip() else ''}"[:100]
            ok = code in (0, 10) and wall < 30 and kb < 1024 * 1024
            out.append((f"{label}, {size / 1e6:.1f} MB", f"{wall:.1f} s, {kb / 1024:.0f} MB peak ({detail})",
                        "< 30 s, < 1 GB", "yes" if ok else "NO"))
            print(f"  [memory] {out[-1]}", file=sys.stderr, flush=True)
            path.unlink()
            with contextlib.suppress(OSError):
                import shutil

                shutil.rmtree(cache)
    return out


# --- the table ---------------------------------------------------------------------------------

def print_table(sections: list[tuple[str, list[Row]]]) -> None:
    rows = [(section, *row) for section, section_rows in sections for row in section_rows]
    header = ("section", "item", "measured", "target", "ok")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(5)]
    widths[2] = min(widths[2], 120)
    print(machine_line() + f" · load average {os.getloadavg()[0]:.1f} at the end (1 min)")
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--awk-lines", type=int, nargs="+", default=[2_000, 20_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5, help="runs of dp-compact (the fastest is shown)")
    parser.add_argument("--awk-repeat", type=int, default=3, help="runs of the seed's awk up to 20,000 lines (1 above)")
    parser.add_argument("--memory-mb", type=float, default=50)
    parser.add_argument("--formats", nargs="+", default=list(MEMORY_FORMATS), choices=MEMORY_FORMATS)
    parser.add_argument("--skip-awk", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    args = parser.parse_args()
    started = time.perf_counter()
    sys.path.insert(0, str(BENCH))
    per_call = hook_rows("bench_adapters", "per-call time against conversation length")
    whole = hook_rows("bench_hot", "dp-compact plan, fresh process")
    whole += [("plan vs seed awk", "not measured", "--skip-awk", "")] if args.skip_awk else awk_rows(args.awk_lines, args.repeat, args.awk_repeat)
    memory = [("memory", "not measured", "--skip-memory", "")] if args.skip_memory else memory_rows(args.formats, args.memory_mb)
    print_table([("per-call", per_call), ("whole process", whole), ("memory", memory)])
    print(f"# ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
