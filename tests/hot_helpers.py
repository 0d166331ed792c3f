"""What the hot-path tests share: ``dp-compact`` run in this process or as a client process, and a
plan server started in a private runtime folder (fixtures ``env`` and ``server``; import them into a
test module to use them)."""

from __future__ import annotations

import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dp_compact.hot import client
from dp_compact.hot import main as hot

#: What a client run writes beside its output: whether it imported numpy (a run the server answered does not).
CLIENT = ("import os, sys\nfrom dp_compact.cli import main\nsys.argv = ['dp-compact', *sys.argv[1:]]\n"
          "try:\n    main()\nfinally:\n    open(os.environ['PLAN_SERVER_PROBE'], 'w').write(str('numpy' in sys.modules))")


def run_in_process(args: list[str], capsys, monkeypatch, *, hot_path: bool = True, stdin: str | None = None) -> tuple[int, str, str]:
    """``dp-compact ARGS`` in this process (the hot path on, or off as ``NO_DP_COMPACT_HOT=1``): exit status, stdout, stderr."""
    if hot_path:
        monkeypatch.delenv("NO_DP_COMPACT_HOT", raising=False)
    else:
        monkeypatch.setenv("NO_DP_COMPACT_HOT", "1")
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        hot.main(args)
    out, err = capsys.readouterr()
    monkeypatch.delenv("NO_DP_COMPACT_HOT", raising=False)
    code = done.value.code
    return (0 if code is None else code), out, err


def run_client(args: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None, *,
               hot_path: bool = True) -> tuple[tuple[int, str, str], bool]:
    """``dp-compact ARGS`` as a new process: (exit status, stdout, stderr), and whether the server answered it."""
    probe = Path(env["PLAN_SERVER_PROBE"])
    probe.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-c", CLIENT, *args], input=stdin or "", capture_output=True, text=True,
                          env=env if hot_path else {**env, "NO_DP_COMPACT_HOT": "1"}, cwd=cwd, check=False)
    return (done.returncode, done.stdout, done.stderr), probe.read_text() == "False"


def wait_until(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    """True once ``condition()`` is, polled every 50 ms; False after ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def listening(path: str) -> bool:
    """True when a server accepts a connection on the Unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def stop_servers(folder: Path) -> None:
    """Kill every server whose lock file in ``folder`` names a live plan server."""
    for lock in folder.glob("*.lock"):
        try:
            pid = int(lock.read_text().strip() or 0)
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if pid and b"dp_compact.hot.server" in cmdline:
            os.kill(pid, signal.SIGKILL)


def socket_of(env: dict[str, str]) -> str:
    """The plan server's socket for the environment ``env``."""
    path = client.socket_path(environ=env)
    assert path is not None
    return path


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of a run: conftest's (no DP_*, caches under tmp), a private runtime folder
    short enough for a socket path; every server started in it killed on teardown."""
    runtime = Path(tempfile.mkdtemp(prefix="dps"))
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_DP_COMPACT_HOT", client.NO_SERVER)}
    environ.update(XDG_RUNTIME_DIR=str(runtime), PLAN_SERVER_PROBE=str(tmp_path / "probe"))
    yield environ
    stop_servers(runtime / "dp-compact")
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture
def server(env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A plan server started for ``env``, listening."""
    process = subprocess.Popen([sys.executable, "-m", "dp_compact.hot.server", "--idle", "120"], env=env)
    assert wait_until(lambda: listening(socket_of(env))), f"no server listening (exit {process.poll()})"
    yield process
    process.kill()
    process.wait()
