"""The ``dp-compact`` entry point's side of the plan server (:mod:`dp_compact.hot.server`).

A warm ``plan FILE [--json]`` or status-line ``hook`` run costs what its process imports (numpy
and about 60 dp_compact modules, ~300 ms), not what it computes. The plan server is a resident
process that keeps them imported; this module, loaded before anything heavy (standard library
``os``, ``sys``, ``socket``, ``json``, ``zlib`` only), hands it the run: the arguments, the
working folder, the whole environment (the settings key reads every ``DP_*`` variable and
``.env``; the cache folders come from ``XDG_*``) and the standard input read. The server runs the
hot path's warm run (:func:`dp_compact.hot.main.warm`) under them and returns its output and exit
status, which :func:`ask` writes and exits with.

The exchange (:func:`_exchange`): the client sends its request, one JSON line; the server,
when it takes the request up, answers :data:`READY`; the client answers :data:`GO` and the server
runs it and sends its answer, JSON, then closes. The client waits :data:`READY_TIMEOUT_S` for the
server to take the request up (a server that accepts and never answers, or busy with other runs,
costs a run that much), then :data:`ANSWER_TIMEOUT_S` for a plan or status line
(:data:`ARCHIVE_TIMEOUT_S` for the ``PreCompact`` hook, which would archive a second time if run
here after the server archived). A server that never had the :data:`GO` runs nothing.

Any other outcome (no server, a server of other code, the kept state not current, an error, a
slow answer) leaves the run to this process, as without a server: the answer is never delayed by
a start, never other than the in-process one. When no server listened and this process's run
left a transcript state the server can continue (:func:`dp_compact.hot.main.state_kept`: a
Claude Code transcript, a JSONL file of a format :data:`~dp_compact.hot.lines.INCREMENTAL_FORMATS`
names, or a session file that is one JSON document, :mod:`dp_compact.hot.document`), :func:`spawn`
starts one once the run is done; never for other files, which a server could not answer.
``NO_DP_COMPACT_SERVER=1`` (or ``NO_DP_COMPACT_HOT=1``, which turns the whole hot path off)
keeps every run in its own process.

Where: ``$XDG_RUNTIME_DIR/dp-compact/`` when that folder exists, else
``$TMPDIR/dp-compact-<uid>/`` (``/tmp``), made 0700 and used only when the user owns it and no
one else may enter it; the socket (0600) is named after :func:`version_key`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping

__all__ = ["ask", "run", "server_dir", "socket_path", "spawn", "version_key"]

#: Version of the request and answer layout (in :func:`version_key`).
PROTOCOL = 2
#: Seconds a client waits for the server to take its request up (:data:`READY`) before running the
#: command itself: a free server takes it in well under a millisecond (tens of ms on a loaded
#: machine); the run here costs ~0.3-0.5 s of imports, so waiting longer gains nothing.
READY_TIMEOUT_S = 0.5
#: Seconds a client then waits for the answer of a plan or status line (a warm run's work is
#: 10-40 ms; a server importing again after a fallback takes about a second).
ANSWER_TIMEOUT_S = 2.0
#: Seconds a client waits for the answer of the ``PreCompact`` hook once the server took it up:
#: the archive takes the server about a second on a large transcript, and running it here too
#: would write a second archive (a server that dies closes the socket: the run is then made here).
ARCHIVE_TIMEOUT_S = 30.0
#: The server's byte saying it took the request up; the client's byte asking it to run it.
READY, GO = b"+", b"!"
#: Longest socket path AF_UNIX takes (``sun_path`` is 108 bytes on Linux, 104 on macOS).
MAX_SOCKET_PATH = 100
#: The dp_compact package folder this module belongs to.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Environment variable that keeps every run in its own process (no server asked or started).
NO_SERVER = "NO_DP_COMPACT_SERVER"


def version_key() -> str:
    """What a server must share with a client to answer it: the protocol, the interpreter and
    the dp_compact package folder (one server per Python version, environment and checkout). (A server also checks, per request, that the module files it
    loaded are unchanged: :func:`dp_compact.hot.state.code_key`.)"""
    return f"{PROTOCOL}|{sys.version}|{sys.prefix}|{_PACKAGE}"


def server_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """The user's private folder of plan-server sockets (module docstring), made when missing;
    None when it cannot be made or is not private (owned by another user, open to others)."""
    env = os.environ if environ is None else environ
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isdir(runtime):
        folder = os.path.join(runtime, "dp-compact")
    else:
        folder = os.path.join(env.get("TMPDIR") or "/tmp", f"dp-compact-{os.getuid()}")
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(folder)
    except OSError:
        return None
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None
    return folder


def socket_path(key: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The plan server's socket for ``key`` (default :func:`version_key`); None without AF_UNIX,
    a private folder, or when the path is too long for a socket."""
    import socket
    import zlib

    if not hasattr(socket, "AF_UNIX") or not hasattr(os, "getuid"):
        return None
    folder = server_dir(environ)
    if folder is None:
        return None
    key = version_key() if key is None else key
    path = os.path.join(folder, f"plan-{zlib.crc32(key.encode()):08x}.sock")
    return path if len(path.encode()) <= MAX_SOCKET_PATH else None


#: :func:`_exchange`'s outcomes besides an answer: nobody listens; the server did not take the
#: request up in time; it took it up and did not answer in time (or closed without answering).
NO_LISTENER, NOT_READY, NO_ANSWER = "no listener", "not ready", "no answer"


def _exchange(path: str, request: dict[str, object], answer_timeout: float = ANSWER_TIMEOUT_S) -> dict[str, object] | str:
    """Send ``request`` to the server at ``path`` (module docstring); its answer (``{}`` when
    unreadable), or :data:`NO_LISTENER`, :data:`NOT_READY` or :data:`NO_ANSWER`."""
    import json
    import socket
    import time

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        deadline = time.monotonic() + READY_TIMEOUT_S
        client.settimeout(READY_TIMEOUT_S)
        try:
            client.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):  # no socket file, or nobody listens on it
            return NO_LISTENER
        except OSError:  # its backlog full, timed out: a server holds the socket
            return NOT_READY
        try:
            client.sendall(json.dumps(request).encode() + b"\n")
            client.settimeout(max(deadline - time.monotonic(), 0.001))
            if client.recv(1) != READY:
                return NOT_READY
            client.sendall(GO)
        except OSError:  # timed out, reset
            return NOT_READY
        chunks = []
        try:
            client.settimeout(answer_timeout)
            while chunk := client.recv(1 << 16):
                chunks.append(chunk)
        except OSError:
            return NO_ANSWER
    if not chunks:
        return NO_ANSWER
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _encodable(text: str, stream: object) -> bool:
    """True when ``stream`` takes ``text`` as the run's own write would (else the run is redone here)."""
    try:
        text.encode(getattr(stream, "encoding", None) or "utf-8", getattr(stream, "errors", None) or "strict")
    except (UnicodeError, LookupError):
        return False
    return True


def ask(args: list[str], stdin: str | None) -> bool:
    """Have the plan server run ``dp-compact ARGS`` (``stdin``: the standard input read, for
    ``hook``); when it answers, write its output and exit with its status. Returns True when
    no server listened (the caller may :func:`spawn` one after running the command), else False."""
    from dp_compact.hot.main import archives

    path = socket_path()
    if path is None:
        return False
    try:
        cwd = os.getcwd()
    except OSError:  # the working folder was removed: the run here says what it says
        return False
    request = {"version": version_key(), "args": args, "cwd": cwd, "env": dict(os.environ), "stdin": stdin}
    answer = _exchange(path, request, ARCHIVE_TIMEOUT_S if archives(args, stdin) else ANSWER_TIMEOUT_S)
    if isinstance(answer, str):
        return answer == NO_LISTENER  # a server that holds the socket but is slow: another could not take it
    out, err, code = answer.get("stdout"), answer.get("stderr"), answer.get("code")
    if answer.get("status") != "ok" or not isinstance(out, str) or not isinstance(err, str) or not isinstance(code, int):
        return answer.get("status") in ("stale", "version")  # that server is leaving: start another
    if not out or not _encodable(out, sys.stdout) or not _encodable(err, sys.stderr):
        return False
    sys.stderr.write(err)
    sys.stderr.flush()
    sys.stdout.write(out)
    sys.stdout.flush()
    sys.exit(code)


def run(command: Callable[[], None]) -> None:
    """The console script: ``command()`` (the in-process ``dp-compact``, :func:`dp_compact.hot.main.main`)
    unless the plan server answers this run (:func:`ask`); a server is started after a hot form's
    run that found none listening and left a state a server can continue (:func:`dp_compact.hot.main.state_kept`)."""
    from dp_compact.hot.main import hot_form, state_kept

    args = sys.argv[1:]
    if os.environ.get(NO_SERVER) or os.environ.get("NO_DP_COMPACT_HOT") or hot_form(args) is None or sys.stdin is None:
        command()
        return
    stdin = None
    if args == ["hook"]:
        import io

        stdin = sys.stdin.read()
        sys.stdin = io.StringIO(stdin)  # what the in-process run reads
    if not ask(args, stdin):
        command()
        return
    try:
        command()
    except SystemExit:
        if state_kept():
            spawn()
        raise


def spawn() -> None:
    """Start a plan server in the background (its own session, standard streams on /dev/null,
    the dp_compact this process runs); it exits by itself when another already serves."""
    import subprocess

    root = os.path.dirname(_PACKAGE)
    code = f"import sys; sys.path.insert(0, {root!r}); from dp_compact.hot.server import main; main()"
    try:
        subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, cwd="/", start_new_session=True, close_fds=True)
    except OSError:
        return
