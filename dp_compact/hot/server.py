"""The plan server: a resident process that runs warm ``plan FILE [--json]`` and ``hook`` runs.

A warm run's work is 10-40 ms; its imports (numpy, ~60 dp_compact modules) cost ~300 ms a
process. This process imports them once (the archive's too, for the ``PreCompact`` hook), listens
on a Unix socket (:func:`dp_compact.hot.client.socket_path`: 0600 in a 0700 folder of the user's)
and, one request at a time, runs the hot path's warm run (:func:`dp_compact.hot.main.warm`) under
the client's arguments, working folder, environment and standard input, restoring its own after
each. A request is one JSON line; the server answers :data:`~dp_compact.hot.client.READY` when it
takes it up and runs it only once the client answers :data:`~dp_compact.hot.client.GO` (a client
that gave up meanwhile runs the command itself: nothing is run twice). It answers:

- ``ok`` with the run's stdout, stderr and exit status (written by the client as its own);
- ``cold`` when the kept state cannot answer (the client runs the command itself, which keeps
  the state for the next run);
- ``refused`` for any other command or with the hot path or server turned off in the request;
- ``error`` when the run raised or warned (the client runs it itself and reports what it reports),
  except for a ``PreCompact`` run that archived, whose warnings are its stderr's (as Python prints
  them), so that the archive is not written twice;
- ``version`` (another :func:`~dp_compact.hot.client.version_key`) or ``stale`` (a module file it
  loaded changed since, :func:`dp_compact.hot.state.code_key`): then it exits.

Once an answer is sent and its connection closed, the server does what the run left for later
(:func:`dp_compact.hot.precompact.after_reply`): it flushes and indexes the archive a ``PreCompact`` run
placed, and works out, a few messages at a time while no request waits, what the next
``PreCompact`` of a transcript whose status line it answered will derive from its messages.

It exits after :data:`IDLE_TIMEOUT_S` without a request, when its socket file is removed or
replaced, and leaves at once when another server holds the socket's lock file (two clients
starting one at once). A socket file nobody listens on (a server killed) is removed and replaced.

    python -m dp_compact.hot.server [--idle SECONDS] [--socket PATH]
"""

from __future__ import annotations

import io
import json
import os
import socket
import sys
import time
from typing import Any

__all__ = ["IDLE_TIMEOUT_S", "answer", "main", "serve"]

#: Seconds without a request after which the server exits: an agent's status line asks every
#: few seconds while it works, so a server outlives a pause but not a day of idle memory (~100 MB).
IDLE_TIMEOUT_S = 600.0
#: Seconds between checks that the socket file is still this server's.
CHECK_S = 5.0
#: Seconds a client may take to send its request; bytes a request may hold (the environment,
#: a hook's JSON).
REQUEST_TIMEOUT_S = 5.0
MAX_REQUEST_BYTES = 16 << 20
#: Seconds a client may take to answer :data:`~dp_compact.hot.client.READY` with
#: :data:`~dp_compact.hot.client.GO` (it answers at once, unless it gave up: then nothing is run).
GO_TIMEOUT_S = 1.0
#: Seconds a new server waits for an exiting one to let go of the lock (longer than :data:`CHECK_S`).
LOCK_WAIT_S = CHECK_S + 3.0


def _preload() -> None:
    """Import what a warm run imports (the hot path's stand-in settings module included) and build
    the token encoder (the same counts as the few-text counter a new process uses)."""
    from dp_compact.hot import main as _main

    _main.keep_live = True  # this process lives on: the reader states it brings up to date stay in memory
    from dp_compact.hot import state as _state  # noqa: F401
    from dp_compact.hot import transcript as _transcript  # noqa: F401
    from dp_compact.hot.settings import (
        install_lean_settings_module,
        remove_lean_settings_module,
    )

    install_lean_settings_module()
    try:
        import dp_compact.adapters.claude_code_hook
        import dp_compact.cli.render
        import dp_compact.io
        import dp_compact.measure.bpe
        import dp_compact.pipeline.archive
        import dp_compact.pipeline.compact
        import dp_compact.prepare  # noqa: F401
    except ImportError:
        remove_lean_settings_module()  # the first request imports what it can
        return
    from dp_compact.measure import tokens

    try:  # the encoder, built once before the first request, which then counts large texts at once
        tokens._encoding()
    except (ImportError, OSError, ValueError):
        return


def _lock(path: str) -> int | None:
    """A descriptor holding the exclusive lock of ``path``'s lock file (``PATH.lock``, which then
    holds this process's id), or None when another server holds it."""
    import fcntl

    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())  # which process serves (to stop it by its id)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                return None
            time.sleep(0.1)


def _listen(path: str) -> socket.socket | None:
    """A socket listening at ``path`` (0600 from its creation); a stale socket file there is
    replaced; None when a server already listens there."""
    if os.path.lexists(path):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(path)
                return None
            except OSError:
                os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(umask)
    os.chmod(path, 0o600)
    listener.listen(16)
    return listener


def _ours(path: str, inode: int) -> bool:
    """True when the socket file at ``path`` is still the one this server made."""
    try:
        return os.lstat(path).st_ino == inode
    except OSError:
        return False


def serve(path: str, idle_s: float = IDLE_TIMEOUT_S) -> int:
    """Serve requests at ``path`` until idle for ``idle_s`` seconds (module docstring); exit status."""
    import signal

    from dp_compact.hot.precompact import after_reply
    from dp_compact.hot.state import code_key

    lock = _lock(path)
    if lock is None:
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # stopped by its id: the socket file goes too
    try:
        _preload()
        code = code_key()
        listener = _listen(path)
        if listener is None:
            return 0
        inode = os.lstat(path).st_ino
        listener.settimeout(min(CHECK_S, idle_s))
        last = time.monotonic()
        try:
            while _ours(path, inode):
                try:
                    connection, _ = listener.accept()
                except TimeoutError:
                    if time.monotonic() - last >= idle_s:
                        return 0
                    continue
                with connection:
                    leave = _serve_one(connection, code)
                after_reply(lambda: _waiting(listener))  # the client has its answer (the connection is closed)
                last = time.monotonic()
                if leave:
                    return 0
            return 0
        finally:
            if _ours(path, inode):
                os.unlink(path)
            listener.close()
    finally:
        os.close(lock)


def _waiting(listener: socket.socket) -> bool:
    """True when a client waits to be accepted on ``listener`` (work after an answer then yields to it)."""
    import select

    try:
        return bool(select.select([listener], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _same_user(connection: socket.socket) -> bool:
    """True when the peer runs as this process's user (Linux ``SO_PEERCRED``; elsewhere the
    socket's 0600 mode and folder's 0700 are the check)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    import struct

    try:
        _, uid, _ = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    except OSError:
        return False
    return uid == os.getuid()


def _serve_one(connection: socket.socket, code: tuple[Any, ...]) -> bool:
    """Read one request from ``connection`` (a JSON line), take it up (``READY``, then the client's
    ``GO``), send its answer; True when the server must exit."""
    from dp_compact.hot.client import GO, READY

    if not _same_user(connection):
        return False
    connection.settimeout(REQUEST_TIMEOUT_S)
    chunks, size = [], 0
    try:
        while size <= MAX_REQUEST_BYTES and (chunk := connection.recv(1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
            if chunk.endswith(b"\n"):
                break
        connection.sendall(READY)
        connection.settimeout(GO_TIMEOUT_S)
        if connection.recv(1) != GO:
            return False  # the client gave up and runs the command itself
    except OSError:
        return False
    try:
        request = json.loads(b"".join(chunks)) if size <= MAX_REQUEST_BYTES else None
    except ValueError:
        request = None
    reply = answer(request, code) if isinstance(request, dict) else {"status": "refused"}
    try:
        connection.sendall(json.dumps(reply).encode())
    except OSError:
        pass
    return reply["status"] in ("version", "stale")


def answer(request: dict[str, Any], code: tuple[Any, ...]) -> dict[str, Any]:
    """The answer to one request (module docstring); ``code``: the server's
    :func:`~dp_compact.hot.state.code_key` when it started."""
    from dp_compact.hot.client import NO_SERVER, version_key
    from dp_compact.hot.main import hot_form
    from dp_compact.hot.state import same_code

    if request.get("version") != version_key():
        return {"status": "version"}
    if not same_code(code):
        return {"status": "stale"}
    args, cwd, env, stdin = request.get("args"), request.get("cwd"), request.get("env"), request.get("stdin")
    if (not isinstance(args, list) or not all(isinstance(a, str) for a in args) or hot_form(args) is None
            or not isinstance(cwd, str) or not isinstance(env, dict) or not isinstance(stdin, str | None)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
            or env.get("NO_DP_COMPACT_HOT") or env.get(NO_SERVER) or (args == ["hook"]) != (stdin is not None)):
        return {"status": "refused"}
    return _run(args, cwd, env, stdin)


def _run(args: list[str], cwd: str, env: dict[str, str], stdin: str | None) -> dict[str, Any]:
    """The warm run of ``args`` under the request's folder, environment and input; this process's restored after."""
    import warnings

    from dp_compact.hot.main import archives, warm

    saved_env, saved_cwd, saved_streams = dict(os.environ), os.getcwd(), (sys.stdin, sys.stdout, sys.stderr)
    out, err = io.StringIO(), io.StringIO()
    try:
        with warnings.catch_warnings(record=True) as caught:  # entering resets "once per place": as a new process
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            sys.stdin, sys.stdout, sys.stderr = io.StringIO(stdin or ""), out, err
            status = warm(args, stdin)
    except Exception:  # noqa: BLE001  the server's one boundary: the client runs the command and reports the error itself
        return {"status": "error"}
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
    if status is None:
        return {"status": "cold"}
    if caught and not archives(args, stdin):
        return {"status": "error"}  # a warning the run prints: the client's own run prints it
    shown = "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in caught)
    return {"status": "ok", "stdout": out.getvalue(), "stderr": shown + err.getvalue(), "code": status}


def main(argv: list[str] | None = None) -> None:
    """``python -m dp_compact.hot.server [--idle SECONDS] [--socket PATH]`` (module docstring)."""
    import argparse

    from dp_compact.hot.client import socket_path

    parser = argparse.ArgumentParser(prog="python -m dp_compact.hot.server", description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=IDLE_TIMEOUT_S, help="seconds without a request before exiting")
    parser.add_argument("--socket", default=None, help="socket path (default: the client's, dp_compact.hot.client.socket_path)")
    options = parser.parse_args(argv)
    path = options.socket or socket_path()
    if path is None:
        sys.exit(1)
    sys.exit(serve(path, options.idle))


if __name__ == "__main__":
    main()
