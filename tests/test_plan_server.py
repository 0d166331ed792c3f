"""The plan server (dp_compact.hot.server, .client): its answers are the in-process command's."""

from __future__ import annotations

import json
import re
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dp_compact.hot import client
from tests.conftest import SESSIONS, need
from tests.hot_helpers import listening, run_client, socket_of, wait_until

SMALL = "cc_raze_hooks.jsonl"


def _full(args: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None) -> tuple[int, str, str]:
    """The application's run of ``dp-compact ARGS`` as a new process (the hot path off): exit status, stdout, stderr."""
    return run_client(args, env, cwd, stdin, hot_path=False)[0]


def _lines(name: str) -> list[bytes]:
    return need(SESSIONS / "claude_code" / name).read_bytes().splitlines(keepends=True)


def _append(copy: Path, line: bytes) -> None:
    with open(copy, "ab") as handle:
        handle.write(line)


@pytest.mark.parametrize("name", [SMALL, pytest.param("cc_privacy_x402.jsonl", marks=pytest.mark.slow)])
def test_server_plan_and_hook_print_what_the_whole_command_prints(name, server, env, tmp_path):
    lines = _lines(name)
    plan_copy, hook_copy = tmp_path / "plan.jsonl", tmp_path / "hook.jsonl"
    start = max(len(lines) - 3, 3)
    for copy in (plan_copy, hook_copy):
        copy.write_bytes(b"".join(lines[:start]))
    status = json.dumps({"hook_event_name": "Status", "session_id": "t", "transcript_path": str(hook_copy),
                         "model": {"id": "claude-sonnet-4-5", "display_name": "Sonnet 4.5"}})
    assert run_client(["plan", str(plan_copy), "--json"], env, tmp_path)[0][0] in (0, 10)  # no state yet: run here, state kept
    assert run_client(["hook"], env, tmp_path, status)[0][0] == 0
    for line in lines[start:]:
        for copy in (plan_copy, hook_copy):
            _append(copy, line)
        for args in (["plan", str(plan_copy), "--json"], ["plan", str(plan_copy)]):
            served, answered = run_client(args, env, tmp_path)
            assert answered and served == _full(args, env, tmp_path)
        served, answered = run_client(["hook"], env, tmp_path, status)
        assert answered and served[1].strip() and served == _full(["hook"], env, tmp_path, status)
    assert server.poll() is None


def test_server_honours_the_clients_dp_variables(server, env, tmp_path):
    lines = _lines(SMALL)
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(b"".join(lines[:-2]))
    args = ["plan", str(copy), "--json"]
    run_client(args, env, tmp_path)
    _append(copy, lines[-2])
    plain, answered = run_client(args, env, tmp_path)
    assert answered
    priced = {**env, "DP_P_INPUT": "7.5"}
    assert run_client(args, priced, tmp_path)[0] == _full(args, priced, tmp_path)  # new settings: run here, state kept
    _append(copy, lines[-1])
    served, answered = run_client(args, priced, tmp_path)
    assert answered and served == _full(args, priced, tmp_path) and served[1] != plain[1]


def test_server_of_another_version_is_not_asked_and_exits(server, env, tmp_path):
    reply = client._exchange(socket_of(env), {"version": "0|other", "args": ["hook"], "cwd": "/", "env": {}, "stdin": "{}"})
    assert reply == {"status": "version"}
    assert server.wait(timeout=30) == 0
    assert not os.path.exists(socket_of(env))


def test_server_refuses_other_commands(server, env, tmp_path):
    request = {"version": client.version_key(), "cwd": str(tmp_path), "env": env, "stdin": None}
    for args in (["compact", "x.jsonl"], ["plan", "x.jsonl", "--provider", "gpt-4o"], ["--help"]):
        assert client._exchange(socket_of(env), {**request, "args": args}) == {"status": "refused"}
    off = {**request, "args": ["plan", "x.jsonl"], "env": {**env, client.NO_SERVER: "1"}}
    assert client._exchange(socket_of(env), off) == {"status": "refused"}
    assert server.poll() is None


def test_stale_socket_falls_back_and_is_replaced(env, tmp_path):
    lines = _lines(SMALL)
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(b"".join(lines))
    path = socket_of(env)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(path)  # a socket file nobody listens on: a killed server's
    dead.close()
    args = ["plan", str(copy), "--json"]
    assert run_client(args, env, tmp_path)[0] == _full(args, env, tmp_path)
    assert wait_until(lambda: listening(path))  # the run started a server, which replaced the stale file
    _append(copy, lines[-1])
    served, answered = run_client(args, env, tmp_path)
    assert answered and served == _full(args, env, tmp_path)


def test_server_exits_when_idle_or_its_socket_is_removed(env):
    path = socket_of(env)
    idle = subprocess.Popen([sys.executable, "-m", "dp_compact.hot.server", "--idle", "0.5"], env=env)
    try:
        assert idle.wait(timeout=60) == 0
        assert not os.path.exists(path)
    finally:
        idle.kill()
    removed = subprocess.Popen([sys.executable, "-m", "dp_compact.hot.server"], env=env)
    try:
        assert wait_until(lambda: listening(path))
        os.unlink(path)
        assert removed.wait(timeout=60) == 0
    finally:
        removed.kill()


def test_socket_and_folder_are_private(server, env):
    path = socket_of(env)
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert os.stat(path).st_uid == os.getuid()


def test_folder_open_to_others_or_owned_by_another_is_not_used(tmp_path):
    runtime = tmp_path / "run"
    (runtime / "dp-compact").mkdir(parents=True)
    os.chmod(runtime / "dp-compact", 0o755)
    assert client.server_dir({"XDG_RUNTIME_DIR": str(runtime)}) is None
    if os.geteuid() == 0:
        os.chmod(runtime / "dp-compact", 0o700)
        os.chown(runtime / "dp-compact", 65534, 65534)
        assert client.server_dir({"XDG_RUNTIME_DIR": str(runtime)}) is None


def test_no_server_variable_keeps_the_run_here(env, tmp_path):
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(b"".join(_lines(SMALL)))
    args = ["plan", str(copy), "--json"]
    off = {**env, client.NO_SERVER: "1"}
    assert run_client(args, off, tmp_path)[0] == _full(args, env, tmp_path)
    time.sleep(0.5)
    assert not os.path.exists(socket_of(env))  # none started


@pytest.mark.slow
def test_two_servers_started_at_once_leave_one_listening(env):
    path = socket_of(env)
    both = [subprocess.Popen([sys.executable, "-m", "dp_compact.hot.server", "--idle", "120"], env=env) for _ in range(2)]
    try:
        assert wait_until(lambda: listening(path))
        assert wait_until(lambda: any(p.poll() is not None for p in both), 60)  # the one without the lock leaves
        running = [p for p in both if p.poll() is None]
        assert len(running) == 1 and [p.returncode for p in both if p.poll() is not None] == [0]
        assert Path(f"{path}.lock").read_text().strip() == str(running[0].pid)
        assert listening(path)
    finally:
        for process in both:
            process.kill()
            process.wait()


def test_server_stopped_by_its_id_removes_its_socket(server, env):
    path = socket_of(env)
    assert Path(f"{path}.lock").read_text().strip() == str(server.pid)
    server.terminate()
    assert server.wait(timeout=30) == 0
    assert not os.path.exists(path)


#: An archive reference's id (time and random part), which differs from run to run.
_ARCHIVE_ID = re.compile(r"(archive://[^/\s]+/)\d{8}T\d{12}Z-[0-9a-f]{8}")


def _archive_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*.jsonl"))


def live_hooks(tmp_path: Path, env: dict[str, str], start: bytes, trigger: str) -> tuple[Path, dict[str, str], str, str]:
    """A live transcript ``tmp_path/live.jsonl`` holding ``start``, ``env`` with an archive under ``tmp_path``,
    and the status line's and the PreCompact hook's JSON for it."""
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(start)
    env = {**env, "DP_ARCHIVE_DIR": str(tmp_path / "archive")}
    status = json.dumps({"hook_event_name": "Status", "session_id": "t", "transcript_path": str(copy)})
    pre = json.dumps({"hook_event_name": "PreCompact", "session_id": "t", "transcript_path": str(copy), "trigger": trigger})
    return copy, env, status, pre


def test_server_pre_compact_archives_what_the_whole_command_archives(server, env, tmp_path):
    from dp_compact.pipeline.archive import ArchiveStore

    lines = _lines(SMALL)
    copy, env, status, pre = live_hooks(tmp_path, env, b"".join(lines[:-1]), "manual")
    assert run_client(["hook"], env, tmp_path, status)[0][0] == 0  # the status line keeps the transcript's state
    _append(copy, lines[-1])
    served, answered = run_client(["hook"], env, tmp_path, pre)
    full = _full(["hook"], {**env, "DP_ARCHIVE_DIR": str(tmp_path / "archive-full")}, tmp_path, pre)  # its own archive
    assert answered and served[0] == 0 and served[2] == full[2] == ""
    assert _ARCHIVE_ID.sub(r"\1ID", served[1]) == _ARCHIVE_ID.sub(r"\1ID", full[1])
    stores = [ArchiveStore(tmp_path / "archive"), ArchiveStore(tmp_path / "archive-full")]
    refs = [_ARCHIVE_ID.search(out).group(0) for out in (served[1], full[1])]
    metadata = [{k: v for k, v in store.metadata(ref).items() if k not in ("ref", "id", "created")} for store, ref in zip(stores, refs, strict=True)]
    assert stores[0].restore(refs[0]) == stores[1].restore(refs[1]) and metadata[0] == metadata[1]
    assert len(_archive_files(tmp_path / "archive")) == 1  # one archive a run: the served run was not made again here
    again = _full(["hook"], env, tmp_path, pre)  # the whole command on the conversation the server archived: archived once
    assert again[1].strip().endswith(f"{refs[0]} (already archived)") and len(_archive_files(tmp_path / "archive")) == 1


def test_server_runs_nothing_a_client_gave_up_on(server, env, tmp_path):
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(b"".join(_lines(SMALL)))
    env = {**env, "DP_ARCHIVE_DIR": str(tmp_path / "archive")}
    assert run_client(["hook"], env, tmp_path, json.dumps({"transcript_path": str(copy)}))[0][0] == 0
    pre = json.dumps({"hook_event_name": "PreCompact", "transcript_path": str(copy)})
    request = {"version": client.version_key(), "args": ["hook"], "cwd": str(tmp_path), "env": env, "stdin": pre}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gone:
        gone.connect(socket_of(env))
        gone.sendall(json.dumps(request).encode() + b"\n")
        assert gone.recv(1) == client.READY  # taken up; the client leaves without its GO
    assert client._exchange(socket_of(env), {**request, "args": ["--help"]}) == {"status": "refused"}  # the server went on
    assert not (tmp_path / "archive").exists()  # and archived nothing
    assert client._exchange(socket_of(env), request)["status"] == "ok" and len(_archive_files(tmp_path / "archive")) == 1


class _HungServer:
    """A socket at ``path`` that accepts connections (``answer_ready``: and says READY) and never answers."""

    def __init__(self, path: str, *, answer_ready: bool) -> None:
        import threading

        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(16)
        self.answer_ready, self.held, self.stop = answer_ready, [], threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        self.listener.settimeout(0.1)
        while not self.stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                continue
            self.held.append(connection)
            if self.answer_ready:
                connection.recv(1 << 20)
                connection.sendall(client.READY)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for connection in self.held:
            connection.close()
        self.listener.close()


@pytest.mark.parametrize("answer_ready", [False, True])
def test_hung_server_costs_a_client_a_short_wait_and_the_run_is_made_here(answer_ready, env, tmp_path):
    lines = _lines(SMALL)
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(b"".join(lines[:-1]))
    args = ["plan", str(copy), "--json"]
    off = {**env, client.NO_SERVER: "1"}
    assert run_client(args, off, tmp_path)[0][0] in (0, 10)  # a state kept: a server could answer
    _append(copy, lines[-1])
    path = socket_of(env)
    hung = _HungServer(path, answer_ready=answer_ready)
    try:
        request = {"version": client.version_key(), "args": args, "cwd": str(tmp_path), "env": env, "stdin": None}
        start = time.monotonic()
        outcome = client._exchange(path, request, answer_timeout=0.2)
        waited = time.monotonic() - start
        assert outcome == (client.NO_ANSWER if answer_ready else client.NOT_READY)
        assert waited < (client.READY_TIMEOUT_S if not answer_ready else 0.2) + 0.5
        assert client.READY_TIMEOUT_S <= 0.5 and client.ANSWER_TIMEOUT_S <= 2.0
        if not answer_ready:  # the whole run: a short wait, then the command here, as without a server
            start = time.monotonic()
            served, answered = run_client(args, env, tmp_path)
            elapsed = time.monotonic() - start
            assert not answered and served == _full(args, env, tmp_path)
            assert elapsed < client.READY_TIMEOUT_S + 4.0
            time.sleep(0.5)
            assert not os.path.exists(f"{path}.lock")  # no server started: the hung one holds the socket
    finally:
        hung.close()


def test_no_server_is_started_for_a_file_the_hot_path_cannot_continue(env, tmp_path):
    # no session (a Cline UI log; a JSON document cut off): the application's error, no state kept
    ui_log, document = need(SESSIONS / "other" / "cline_ui_messages_cardgame.json"), need(SESSIONS / "other" / "atif_terminus_hvac.json")
    for source, data in ((ui_log, ui_log.read_bytes()), (document, document.read_bytes()[:-20])):
        copy = tmp_path / source.name
        copy.write_bytes(data)
        assert run_client(["plan", str(copy), "--json"], env, tmp_path)[0] == _full(["plan", str(copy), "--json"], env, tmp_path)
    time.sleep(1.0)
    assert not os.path.exists(socket_of(env)) and not os.path.exists(f"{socket_of(env)}.lock")
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(b"".join(_lines(SMALL)))
    run_client(["plan", str(copy), "--json"], env, tmp_path)
    assert wait_until(lambda: listening(socket_of(env)))  # a Claude Code transcript's state was kept: a server is started


def test_exchange_tells_no_listener_from_a_server_that_does_not_answer(tmp_path):
    request = {"version": client.version_key(), "args": ["--help"], "cwd": "/", "env": {}, "stdin": None}
    missing = str(tmp_path / "missing.sock")
    assert client._exchange(missing, request) == client.NO_LISTENER
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(tmp_path / "dead.sock"))  # nobody listens: a killed server's socket file
    try:
        assert client._exchange(str(tmp_path / "dead.sock"), request) == client.NO_LISTENER
    finally:
        dead.close()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as slow:  # listens, never accepts
        slow.bind(str(tmp_path / "slow.sock"))
        slow.listen(1)
        start = time.monotonic()
        assert client._exchange(str(tmp_path / "slow.sock"), request) == client.NOT_READY
        assert time.monotonic() - start < client.READY_TIMEOUT_S + 0.5
