"""Whole-process time of ``dp-compact plan FILE --json`` and ``dp-compact hook`` after one appended record.

A copy of a real transcript (``--session``, default the largest Claude Code one,
``claude_code/cc_task43_develop.jsonl``) without its last records is planned once in a temporary
folder with temporary cache, data and state folders (``XDG_*``): that run reads it whole and
keeps its state. Each timed run then appends the next record of the transcript (one JSONL line,
text the token cache has not seen) and runs the command as a user's agent does, a new process
through the ``dp-compact`` console script: ``plan COPY --json``; ``hook`` with Claude Code's
status line JSON on stdin; ``hook`` with its PreCompact JSON (archives the conversation); and,
for comparison, ``plan`` with the hot path turned off (``NO_DP_COMPACT_HOT=1``) and the
interpreter alone, with numpy (the floor: a plan needs numpy). These runs ask no plan server
(``NO_DP_COMPACT_SERVER=1``). Then ``plan``, the status-line ``hook`` and the PreCompact ``hook``
on copies of their own, through the plan server (:mod:`dp_compact.hot.server`) that their first
run started, socket under the temporary folder (``XDG_RUNTIME_DIR``), and that server's floor:
an interpreter that imports socket and json and makes one round trip. No ``DP_*`` variable is passed.

Columns: what was run, runs, min and median wall time, min and median CPU time (user + system of
the process), ms. On a loaded machine the CPU time is the better guess of a quiet machine's wall time.

    python bench/bench_hot.py [--repeat 7] [--session claude_code/cc_task43_develop.jsonl]

The floor: a warm run is almost all imports. The last row imports what a warm run imports
and does nothing else; the runs differ from it by the work (reading the appended bytes,
counting their tokens, planning, about 10-40 ms of CPU). That import set is the interpreter
(~20 ms quiet), numpy (~45-60 ms, the planner is numpy) and about 60 dp_compact modules with the
standard library they pull in (dataclasses and inspect, logging, hashlib, orjson's uuid, ...).
Measured 2026-12-06 under load average 7-8 on the 2-core machine: that set takes 300-360 ms of
CPU where ``import numpy`` takes 127-151 ms (60 ms wall when the machine was quiet), which puts
it near 180 ms on a quiet machine: a whole-process 0.15 s is below what a process that imports
the planner can reach here. What would lower it: fewer modules on the planner's path (every
session reader is imported for one; ``np.unique`` in the look-ahead imports ``numpy.ma``), or a
resident process that keeps them loaded: the plan server, whose runs cost the interpreter,
the client's imports (about 10 ms: the ``dp_compact`` package, :mod:`dp_compact.hot.main` for
the hot forms, socket, json), the round trip and the server's work. A served PreCompact run is
almost all the server's work: the archive of the whole live conversation (the extractive
summary, anchors, metadata, the archive's files). Each timed served PreCompact follows the
status line of the grown transcript (untimed), as in Claude Code, after which the server
prepares the next PreCompact while no request waits (:func:`dp_compact.hot.precompact.after_reply`):
what the summary, anchors and metadata derive from each message is worked out and remembered
(the shell-command parsing of every tool call, the path, identifier and error-line searches),
its token counts are kept in memory, and, the context being near its window's end, the
transcript is read whole as the hook reads it. The PreCompact run then computes the summary
from what is remembered and places the archive's files; it answers before it flushes them and
indexes the archive, which the server does once the client has its answer. What is left: the
summary's and anchors' passes over the messages (each message's facts looked up, the items
weighed and counted), the token counts looked up, the archive's metadata, checksum and index
text, the files placed: about 40 ms of the server's CPU for the default transcript's 663 live
messages (measured 2026-12-06 under load average 5), and the client's own ~30 ms (the last row).
The in-process PreCompact (no server) reads, parses and searches everything again each run.
The two rows after the served PreCompact time the server's own work for it in one process, as
the server does it (no socket, no client): the status line answered and prepared after, then the
PreCompact run to its answer (wall, and this process's CPU time: what it takes on a quiet machine),
then the flush and index update done after the answer, and the preparation after the status
line before it (the first run's prepares the whole transcript; later ones what was appended,
and read the grown transcript again).

Last, ``plan --json`` on a single JSON document (``--document``, default
``openai_chat/oai_task393c91_converted.json``) that its agent rewrites whole after each call: the
document is cut after a call and grown by one call before each timed run, in process and through
the plan server (:func:`document_rows`).

``rows()`` returns the transcript's rows as dicts, ``document_rows()`` the document's, and
``live_rows()`` both (``bench_live.py`` folds them into its table).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import SHARED_SESSIONS, machine_line  # noqa: E402

from dp_compact.hot.client import GO, NO_SERVER, READY, socket_path, version_key  # noqa: E402

#: The transcript timed by default: the largest Claude Code one in ../shared/sessions (4.1 MB).
DEFAULT_SESSION = "claude_code/cc_task43_develop.jsonl"


#: The single JSON document timed by default (an agent rewrites it whole after each call).
DEFAULT_DOCUMENT = "openai_chat/oai_task393c91_converted.json"


#: What a warm ``plan`` / ``hook`` run imports (dp_compact.hot.main), with no file read or planned.
_HOT_IMPORTS = (
    "from dp_compact.hot import main, state, settings; import platformdirs, xxhash, pickle, json\n"
    "settings.install_lean_settings_module()\n"
    "import dp_compact.hot.transcript, dp_compact.prepare, dp_compact.io, dp_compact.cli.render, dp_compact.adapters.claude_code_hook\n"
    "import dp_compact.measure.bpe, sqlite3, numpy.ma; print(1)"
)


#: ``python -c``: the plan server's own work for a PreCompact run, in one process as the server does
#: it (:mod:`dp_compact.hot.main` with ``keep_live``; no socket): argv ``COPY SOURCE KEPT RUNS``. For
#: each run it appends the next record of SOURCE, answers the status line and does what the server
#: does after its answer (:func:`~dp_compact.hot.precompact.after_reply`: the preparation, timed), then
#: times the PreCompact run to its answer (wall and CPU of this process) and the commit after it.
#: Prints JSON: per run, ms, (answer wall, answer CPU, commit wall, preparation wall).
_SERVER_WORK = """
import io, json, sys, time
from pathlib import Path
from dp_compact.hot import server
server._preload()
from dp_compact.hot import main, precompact
copy, source, kept, runs = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
lines = source.read_bytes().splitlines(keepends=True)
main.keep_live = True
status = json.dumps({"hook_event_name": "Status", "session_id": "bench", "transcript_path": str(copy),
                     "model": {"id": "claude-sonnet-4-5", "display_name": "Sonnet 4.5"}})
pre = {"hook_event_name": "PreCompact", "session_id": "bench", "transcript_path": str(copy), "trigger": "auto"}
out = []
for run in range(runs):
    with open(copy, "ab") as handle:
        handle.write(lines[kept + run])
    saved, sys.stdout = sys.stdout, io.StringIO()
    try:
        assert main._hook_warm(status) == 0, "no kept state"
        prepared = time.perf_counter()
        precompact.after_reply()
        prepared = time.perf_counter() - prepared
        wall, cpu = time.perf_counter(), time.process_time()
        assert main._pre_compact_warm(pre, copy) == 0, "PreCompact not answered"
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        commit = time.perf_counter()
        precompact.after_reply()
        commit = time.perf_counter() - commit
    finally:
        sys.stdout = saved
    out.append((wall * 1000, cpu * 1000, commit * 1000, prepared * 1000))
print(json.dumps(out))
"""


def _command() -> list[str]:
    """The ``dp-compact`` console script beside this interpreter, else ``python -m dp_compact.cli``."""
    script = Path(sys.executable).with_name("dp-compact")
    return [str(script)] if script.exists() else [sys.executable, "-m", "dp_compact.cli"]


def _environment(folder: Path, hot: bool = True, server: bool = False) -> dict[str, str]:
    """The environment of a timed run: no ``DP_*``, caches and archives under ``folder``; the plan
    server's socket under ``folder/run`` when ``server``, else no server asked or started."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("DP_") and k not in ("NO_DP_COMPACT_HOT", NO_SERVER)}
    env.update(XDG_CACHE_HOME=str(folder / "cache"), XDG_DATA_HOME=str(folder / "data"), XDG_STATE_HOME=str(folder / "state"),
               XDG_RUNTIME_DIR=str(folder / "run"))
    if not hot:
        env["NO_DP_COMPACT_HOT"] = "1"
    if not server:
        env[NO_SERVER] = "1"
    return env


def _server_started(env: dict[str, str]) -> str:
    """The plan server's socket for ``env``, once the server a first run started listens there (up to 60 s)."""
    import socket

    path = socket_path(environ=env)
    assert path is not None, "no private socket folder"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(path)
                return path
            except OSError:
                time.sleep(0.1)
    raise RuntimeError("the plan server did not start")


def _stop_server(path: str) -> None:
    """Stop the plan server at ``path`` by the id its lock file holds."""
    import signal

    try:
        pid = int(Path(f"{path}.lock").read_text().strip())
        if b"dp_compact.hot.server" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return


def _connect_only(path: str) -> str:
    """``python -c``: what a served run cannot avoid: the interpreter, socket and json, one
    exchange with the server (:func:`dp_compact.hot.client._exchange`; a request it refuses at once)."""
    request = {"version": version_key(), "args": ["--help"], "cwd": "/", "env": {}, "stdin": None}
    return ("import json, socket\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
            f"s.connect({path!r})\ns.sendall(json.dumps({request!r}).encode() + b'\\n')\n"
            f"assert s.recv(1) == {READY!r}\ns.sendall({GO!r})\nprint(s.recv(100).decode())")


def _timed(args: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one process, ms (it must succeed). On a loaded
    machine the CPU time stays near what the wall time is on a quiet one."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(args, input=stdin, capture_output=True, text=True, env=env, cwd=cwd, check=False)
    elapsed = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 10) or not done.stdout.strip():
        raise RuntimeError(f"{args}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return elapsed, cpu


def _row(what: str, times: list[tuple[float, float]]) -> dict[str, object]:
    """One table row: what was timed, runs, min and median wall time, min and median CPU time, ms."""
    wall, cpu = [t[0] for t in times], [t[1] for t in times]
    return {"what": what, "runs": len(times), "min_ms": round(min(wall), 1), "median_ms": round(statistics.median(wall), 1),
            "cpu_min_ms": round(min(cpu), 1), "cpu_median_ms": round(statistics.median(cpu), 1)}


def rows(repeat: int = 7, session: Path | None = None, pre_compact: bool = True,
         pre_compact_runs: int | None = None) -> list[dict[str, object]]:
    """The table's rows (module docstring); ``pre_compact`` False leaves out the PreCompact runs,
    ``pre_compact_runs`` of them are timed (at most ``repeat``; default ``max(2, repeat // 3)``)."""
    pre_runs = min(repeat, max(2, repeat // 3) if pre_compact_runs is None else pre_compact_runs) if pre_compact else 0
    source = session or SHARED_SESSIONS / DEFAULT_SESSION
    lines = source.read_bytes().splitlines(keepends=True)
    kept = len(lines) - 4 * repeat - 2
    with tempfile.TemporaryDirectory(prefix="bench_hot_") as name:
        folder = Path(name)
        env, env_full, cwd = _environment(folder), _environment(folder, hot=False), folder
        env_served = _environment(folder, server=True)
        (folder / "run").mkdir(mode=0o700)
        dp = _command()
        copies = {kind: folder / f"{kind}.jsonl" for kind in ("plan", "hook", "full", "pre", "splan", "shook", "spre")}
        for copy in copies.values():
            copy.write_bytes(b"".join(lines[:kept]))
        status = {"hook_event_name": "Status", "session_id": "bench", "transcript_path": str(copies["hook"]),
                  "model": {"id": "claude-sonnet-4-5", "display_name": "Sonnet 4.5"}}
        pre = {"hook_event_name": "PreCompact", "session_id": "bench", "transcript_path": str(copies["pre"]), "trigger": "auto"}
        served_status = json.dumps({**status, "transcript_path": str(copies["shook"])})
        served_pre = json.dumps({**pre, "transcript_path": str(copies["spre"])})
        kinds = ("cold", "plan", "hook", "full", "pre", "python", "numpy", "imports", "splan", "shook", "spre", "connect")
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
        times["cold"].append(_timed([*dp, "plan", str(copies["plan"]), "--json"], env, cwd))  # reads it whole, keeps its state
        _timed([*dp, "hook"], env, cwd, json.dumps(status))
        _timed([*dp, "hook"], env, cwd, json.dumps({**status, "transcript_path": str(copies["pre"])}))  # PreCompact takes its settings
        _timed([*dp, "plan", str(copies["splan"]), "--json"], env_served, cwd)  # keeps its state, starts the server
        _timed([*dp, "hook"], env_served, cwd, served_status)
        _timed([*dp, "hook"], env_served, cwd, json.dumps({**status, "transcript_path": str(copies["spre"])}))
        server = _server_started(env_served)
        for run in range(repeat):
            record = lines[kept + run]
            for copy in copies.values():
                with open(copy, "ab") as handle:
                    handle.write(record)
            times["plan"].append(_timed([*dp, "plan", str(copies["plan"]), "--json"], env, cwd))
            times["hook"].append(_timed([*dp, "hook"], env, cwd, json.dumps(status)))
            times["full"].append(_timed([*dp, "plan", str(copies["full"]), "--json"], env_full, cwd))
            if run < pre_runs:
                times["pre"].append(_timed([*dp, "hook"], env, cwd, json.dumps(pre)))
            times["python"].append(_timed([sys.executable, "-c", "print(1)"], env, cwd))
            times["numpy"].append(_timed([sys.executable, "-c", "import numpy; print(1)"], env, cwd))
            times["imports"].append(_timed([sys.executable, "-c", _HOT_IMPORTS], env, cwd))
            times["splan"].append(_timed([*dp, "plan", str(copies["splan"]), "--json"], env_served, cwd))
            times["shook"].append(_timed([*dp, "hook"], env_served, cwd, served_status))
            if run < pre_runs:  # as in Claude Code, the status line of the grown transcript ran before its PreCompact
                _timed([*dp, "hook"], env_served, cwd, json.dumps({**status, "transcript_path": str(copies["spre"])}))
                times["spre"].append(_timed([*dp, "hook"], env_served, cwd, served_pre))
            times["connect"].append(_timed([sys.executable, "-c", _connect_only(server)], env_served, cwd))
        _stop_server(server)
        work: list[tuple[float, float, float, float]] = []
        if pre_runs:  # the server's own work, in one process: its wall time to the answer, its CPU time, the commit after
            copy = folder / "work.jsonl"
            copy.write_bytes(b"".join(lines[:kept]))
            _timed([*dp, "hook"], env, cwd, json.dumps({**status, "transcript_path": str(copy)}))  # the state kept
            done = subprocess.run([sys.executable, "-c", _SERVER_WORK, str(copy), str(source), str(kept), str(pre_runs)],
                                  capture_output=True, text=True, env=env, cwd=cwd, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"server work: exit {done.returncode}: {done.stderr.strip()[-500:]}")
            work = [tuple(t) for t in json.loads(done.stdout.strip().splitlines()[-1])]
        shutil.rmtree(folder / "data", ignore_errors=True)
    out = [
        _row(f"dp-compact plan --json, one record appended ({source.name}, {source.stat().st_size / 1e6:.1f} MB)", times["plan"]),
        _row("dp-compact hook, status line, one record appended", times["hook"]),
        _row("dp-compact plan --json, hot path off (NO_DP_COMPACT_HOT=1)", times["full"]),
        _row("dp-compact plan --json, first run (no state: whole command, then the state kept)", times["cold"]),
    ]
    if times["pre"]:
        out.append(_row("dp-compact hook, PreCompact (reads the transcript whole, archives the live conversation)", times["pre"]))
    out += [_row("python -c 'print(1)' (interpreter start)", times["python"]),
            _row("python -c 'import numpy' (a plan needs numpy)", times["numpy"]),
            _row("python -c: the hot path's imports alone, no work (its floor)", times["imports"]),
            _row("dp-compact plan --json via the plan server, one record appended", times["splan"]),
            _row("dp-compact hook, status line, via the plan server, one record appended", times["shook"]),
            *([_row("dp-compact hook, PreCompact, via the plan server", times["spre"])] if times["spre"] else []),
            *([_row("  its server's work to the answer (wall / CPU, in one process as the server does it)", [(w, c) for w, c, _, _ in work]),
               _row("  and after the answer: the archive flushed and indexed (wall)", [(m, m) for _, _, m, _ in work]),
               _row("  and after each status line before it: the preparation (wall; the first run's whole)", [(r, r) for *_, r in work])]
              if work else []),
            _row("python -c: connect, one request refused (the served runs' floor)", times["connect"])]
    return out


def _document_parts(source: Path) -> tuple[Any, str | None, list[Any]]:
    """``(document, key of its list of messages or steps (None: the document is the list), that list)``."""
    document = json.loads(source.read_bytes())
    if isinstance(document, list):
        return document, None, document
    for key in ("history", "messages", "steps"):  # SWE-agent .traj, {"messages": [...]}, ATIF
        if isinstance(document.get(key), list):
            return document, key, document[key]
    raise ValueError(f"{source}: no list of messages or steps")


def document_rows(repeat: int = 7, source: Path | None = None) -> list[dict[str, object]]:
    """``dp-compact plan --json`` on one JSON document that its agent rewrites whole after each call:
    the document cut after a call and grown by one call before each timed run (written with
    ``json.dumps(indent=2)``), in process (no server) and through the plan server; rows as :func:`rows`."""
    source = source or SHARED_SESSIONS / DEFAULT_DOCUMENT
    document, key, items = _document_parts(source)
    calls = [at + 1 for at, item in enumerate(items)
             if isinstance(item, dict) and (item.get("role") == "assistant" or item.get("source") == "agent")]
    lengths = calls[-repeat - 1:]

    def write(copy: Path, m: int) -> None:
        value = items[:m] if key is None else {**document, key: items[:m]}
        copy.write_text(json.dumps(value, indent=2, ensure_ascii=False))

    times: dict[str, list[tuple[float, float]]] = {"plan": [], "splan": []}
    with tempfile.TemporaryDirectory(prefix="bench_hot_doc_") as name:
        folder = Path(name)
        (folder / "run").mkdir(mode=0o700)
        env, env_served, dp = _environment(folder), _environment(folder, server=True), _command()
        copies = {"plan": folder / f"plan{source.suffix}", "splan": folder / f"splan{source.suffix}"}
        for kind, copy in copies.items():
            write(copy, lengths[0])
            _timed([*dp, "plan", str(copy), "--json"], env_served if kind == "splan" else env, folder)  # keeps its state
        server = _server_started(env_served)
        for m in lengths[1:]:
            for kind, copy in copies.items():
                write(copy, m)
                times[kind].append(_timed([*dp, "plan", str(copy), "--json"], env_served if kind == "splan" else env, folder))
        _stop_server(server)
    size = f"{source.name}, {source.stat().st_size / 1e6:.1f} MB"
    return [_row(f"dp-compact plan --json, one JSON document rewritten with one more call ({size})", times["plan"]),
            _row("dp-compact plan --json via the plan server, the document rewritten with one more call", times["splan"])]


def live_rows() -> list[dict[str, object]]:
    """The rows ``bench_live.py`` folds into its table: :func:`rows` and :func:`document_rows`, defaults."""
    return rows() + document_rows()


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--session", type=Path, default=SHARED_SESSIONS / DEFAULT_SESSION)
    parser.add_argument("--document", type=Path, default=SHARED_SESSIONS / DEFAULT_DOCUMENT,
                        help="the single JSON document timed after rewrites (default %(default)s)")
    parser.add_argument("--no-pre-compact", action="store_true", help="leave out the PreCompact runs")
    parser.add_argument("--pre-compact-runs", type=int, default=None,
                        help="PreCompact runs timed, in process and served (default max(2, repeat // 3), at most --repeat)")
    args = parser.parse_args()
    session = args.session if args.session.is_absolute() or args.session.exists() else SHARED_SESSIONS / args.session
    table = rows(args.repeat, session, pre_compact=not args.no_pre_compact, pre_compact_runs=args.pre_compact_runs)
    document = args.document if args.document.is_absolute() or args.document.exists() else SHARED_SESSIONS / args.document
    table += document_rows(args.repeat, document)
    print(machine_line())
    print(f"# load average {os.getloadavg()[0]:.2f} (1 min) at the end")
    print(f"{'what':<84} {'runs':>4} {'min_ms':>8} {'median_ms':>9} {'cpu_min_ms':>10} {'cpu_median_ms':>13}")
    for row in table:
        print(f"{row['what']:<84} {row['runs']:>4} {row['min_ms']:>8} {row['median_ms']:>9} {row['cpu_min_ms']:>10} {row['cpu_median_ms']:>13}")


if __name__ == "__main__":
    main()
