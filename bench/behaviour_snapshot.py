"""What the installed ``dp-compact`` prints and writes on every shared session and case, as one
folder of files, so that two versions of the code can be compared byte for byte.

``python bench/behaviour_snapshot.py OUT_DIR`` runs, for every file in ``../shared/sessions``:
``plan --json``, ``compact --dry-run --json``, ``compact --force -o`` (the written conversation and
its ``--json``) and ``replay --json``; ``calibrate --json`` over the folder; and every case of
``../shared/cases`` with its own command (exit code, stdout, stderr and the files it wrote).
Temporary paths and archive keys are replaced by placeholders, and archive ids are made
deterministic (a ``dp-compact`` launcher that numbers them instead of drawing random digits, so
that summaries which name their archive key have the same size in every run). Compare two
snapshots with ``diff -r BEFORE AFTER``; an empty diff means the behaviour did not change.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SESSIONS = SHARED / "sessions"
CASES = SHARED / "cases"
#: A ``dp-compact`` that numbers archive ids (same length as the real ones) instead of drawing them.
LAUNCHER = f"""#!{sys.executable}
import itertools, sys
import dp_compact.pipeline.archive as archive
_count = itertools.count()
archive._new_id = lambda now: f"20260101T000000{{next(_count):06d}}Z-00000000"
from dp_compact.cli import main
sys.argv[0] = "dp-compact"
main()
"""


def _environment(home: Path) -> dict[str, str]:
    """The run's environment: no ``DP_*``, a private home and cache (archives and token caches)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DP_")}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"), XDG_CACHE_HOME=str(home / "cache"))
    return env


def _normalize(text: str, run_dir: Path) -> str:
    """Text with the run's temporary folder and archive keys replaced by placeholders."""
    text = text.replace(str(run_dir), "<RUN>")
    text = re.sub(r"/tmp/[^\s\"']*", "<TMP>", text)
    text = re.sub(r"archive://[^\s\"'\\)\]]+", "archive://<KEY>", text)
    return text


def _run(name: str, out: Path, *, args: list[str] = (), cwd: Path | None = None, shell: str | None = None,
         extra_env: dict[str, str] | None = None, files: tuple[str, ...] = ()) -> None:
    """Run one command in a fresh folder and write its exit code, output and files under ``out/name``."""
    # A fixed folder per run (not a random one): summaries may name paths, and their token counts
    # must not depend on random letters.
    # Digits of one length are the same number of tokens whatever they are, so the process id
    # (padded) keeps concurrent snapshots apart without changing any count.
    tmp = Path(tempfile.gettempdir()) / f"dp-snapshot-{os.getpid():08d}" / re.sub(r"[^A-Za-z0-9]+", "-", name)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        run_dir = Path(tmp) / "run"
        if cwd is not None:
            shutil.copytree(cwd, run_dir)
        else:
            run_dir.mkdir()
        env = _environment(Path(tmp) / "home")
        launcher = Path(tmp) / "bin" / "dp-compact"
        launcher.parent.mkdir()
        launcher.write_text(LAUNCHER)
        launcher.chmod(0o755)
        env["PATH"] = f"{launcher.parent}{os.pathsep}{env.get('PATH', '')}"
        env.update(extra_env or {})
        proc = subprocess.run(
            ["bash", "-c", shell] if shell else [str(launcher), *args], cwd=run_dir, env=env,
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
        )
        target = out / name
        target.mkdir(parents=True, exist_ok=True)
        (target / "exit").write_text(f"{proc.returncode}\n")
        (target / "stdout").write_text(_normalize(proc.stdout, run_dir))
        (target / "stderr").write_text(_normalize(proc.stderr, run_dir))
        for file in files:
            path = run_dir / file
            if path.is_file():
                (target / file.replace("/", "_")).write_text(_normalize(path.read_text(errors="replace"), run_dir))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _guarded(job: tuple[str, dict], out: Path) -> str | None:
    """Run one job; the reason it could not run (written beside its outputs too), else None."""
    try:
        _run(job[0], out=out, **job[1])
    except (OSError, subprocess.SubprocessError) as exc:
        (out / job[0]).mkdir(parents=True, exist_ok=True)
        (out / job[0] / "error").write_text(f"{type(exc).__name__}: {exc}\n")
        return f"{job[0]}: {type(exc).__name__}: {exc}"
    return None


def _jobs() -> list[tuple[str, dict]]:
    jobs: list[tuple[str, dict]] = []
    for path in sorted(p for p in SESSIONS.rglob("*") if p.is_file() and p.suffix in {".jsonl", ".json", ".traj"}
                       and p.name != "manifest.json"):
        stem = path.name
        jobs += [
            (f"session/{stem}/plan", {"args": ["plan", str(path), "--json"]}),
            (f"session/{stem}/plan_text", {"args": ["plan", str(path)]}),
            (f"session/{stem}/dry", {"args": ["compact", str(path), "--dry-run", "--json"]}),
            (f"session/{stem}/compact", {"args": ["compact", str(path), "--force", "-o", "out.jsonl", "--json"],
                                         "files": ("out.jsonl",)}),
            (f"session/{stem}/replay", {"args": ["replay", str(path), "--json"]}),
        ]
    jobs.append(("folder/calibrate", {"args": ["calibrate", str(SESSIONS), "--json", "--bootstrap", "20"]}))
    for case in sorted(p for p in CASES.iterdir() if (p / "case.json").is_file()):
        spec = json.loads((case / "case.json").read_text())
        outputs = tuple(re.findall(r"(?:-o|--output)\s+(\S+)", spec["command"]))
        jobs.append((f"case/{case.name}", {"shell": spec["command"], "cwd": case,
                                           "extra_env": spec.get("env", {}), "files": outputs}))
    return jobs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write the snapshot into (emptied first)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    if not SESSIONS.is_dir():
        print(f"no {SESSIONS}: nothing to snapshot", file=sys.stderr)
        return 2
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    jobs = _jobs()
    with ThreadPoolExecutor(args.workers) as pool:
        failures = [f for f in pool.map(lambda job: _guarded(job, args.out), jobs) if f]
    shutil.rmtree(Path(tempfile.gettempdir()) / f"dp-snapshot-{os.getpid():08d}", ignore_errors=True)
    for failure in failures:
        print(failure, file=sys.stderr)
    print(f"{len(jobs)} runs written to {args.out}, {len(failures)} could not run")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
