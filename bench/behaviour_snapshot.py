"""What the installed ``dp-compact`` prints and writes on every shared session and case, as one
folder of files, so that two versions of the code can be compared byte for byte.

``python bench/behaviour_snapshot.py OUT_DIR`` runs, for every file in ``../shared/sessions``:
``plan --json``, ``compact --dry-run --json``, ``compact --force -o`` (the written conversation and
its ``--json``) and ``replay --json``; ``calibrate --json`` over the folder; and every case of
``../shared/cases`` with its own command (exit code, stdout, stderr and the files it wrote).
Temporary paths and archive keys are replaced by placeholders. Compare two snapshots with
``diff -r BEFORE AFTER``; an empty diff means the behaviour did not change.
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
COMMAND = shutil.which("dp-compact") or "dp-compact"


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
    with tempfile.TemporaryDirectory(prefix="dpsnap-") as tmp:
        run_dir = Path(tmp) / "run"
        if cwd is not None:
            shutil.copytree(cwd, run_dir)
        else:
            run_dir.mkdir()
        env = _environment(Path(tmp) / "home")
        env.update(extra_env or {})
        proc = subprocess.run(
            ["bash", "-c", shell] if shell else [COMMAND, *args], cwd=run_dir, env=env,
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
        list(pool.map(lambda job: _run(job[0], out=args.out, **job[1]), jobs))
    print(f"{len(jobs)} runs written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
