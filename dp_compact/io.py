"""The IO rules every file writer and folder walk shares.

- :func:`write_atomic`: an output is written to a temporary file (``.tmp-<name>.<pid>.<random>.part``)
  in its own folder, flushed to disk, then renamed over the target (``os.replace``), and the
  folder entry flushed: a reader sees the old file or the new one, never half of one. The file
  is created with the permissions the caller allows (default ``0666``) less the umask, never
  more: an output made from a ``0600`` transcript stays ``0600``. Temporary files that a
  killed writer left (its process gone) are removed by the next write into the folder.
- :func:`session_files`: the session files of a list of files and folders (folders searched
  recursively by suffix, bookkeeping files of the shared folders left out).
"""

from __future__ import annotations

import contextlib
import gc
import glob
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "NOT_SESSIONS", "SESSION_SUFFIXES", "bulk_allocation", "clean_temporary_files", "private_mode_of", "session_files", "write_atomic",
]

#: Suffixes of session files (JSONL, one JSON document, SWE-agent ``.traj``), DESIGN §4.
SESSION_SUFFIXES = frozenset({".json", ".jsonl", ".traj"})
#: File names under a folder of sessions that are not sessions: a folder's manifest, a test
#: case's description and its expected seed-model numbers.
NOT_SESSIONS = frozenset({"manifest.json", "case.json", "golden_seed_model.json"})


@contextlib.contextmanager
def bulk_allocation() -> Iterator[None]:
    """Pause the cyclic garbage collector while a file is read into many small objects.

    Reading a transcript allocates several containers per line and frees none; each collection
    of the oldest generation walks every live one, which made reading about twice as slow as
    parsing. The parsed records hold no reference cycles, so nothing waits for collection in
    the meantime; the collector's previous state is restored on exit (re-entrant).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _fsync_dir(directory: Path) -> None:
    """Flush a folder entry (POSIX); a no-op where folders cannot be opened or synced."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


#: Prefix and suffix of :func:`write_atomic`'s temporary files.
TEMP_PREFIX, TEMP_SUFFIX = ".tmp-", ".part"
#: Age after which a temporary file is removed even when its writer's process id is in use again.
STALE_TEMP_SECONDS = 24 * 3600


def _pid_alive(pid: int) -> bool:
    """True when a process ``pid`` exists (or cannot be probed: then it is left alone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):
        return True
    return True


def clean_temporary_files(folder: Path | str, name: str | None = None) -> list[Path]:
    """Remove the temporary files of :func:`write_atomic` in ``folder`` whose writer is gone.

    A file ``.tmp-<name>.<pid>.<random>.part`` is removed when process ``pid`` no longer exists,
    or it is older than :data:`STALE_TEMP_SECONDS`; ``name`` limits it to one target's files.
    Returns the files removed; errors are ignored (another run may clean at the same time).
    """
    removed: list[Path] = []
    pattern = f"{TEMP_PREFIX}{glob.escape(name) if name else '*'}.*{TEMP_SUFFIX}*"  # and SQLite's -wal / -shm of one
    with contextlib.suppress(OSError):
        for path in Path(folder).glob(pattern):
            stem = path.name.removesuffix("-wal").removesuffix("-shm").removesuffix("-journal")
            if not stem.endswith(TEMP_SUFFIX):
                continue
            pid_text = stem[: -len(TEMP_SUFFIX)].split(".")[-2]
            try:
                stat = path.lstat()
                old = time.time() - stat.st_mtime > STALE_TEMP_SECONDS
                if (pid_text.isdigit() and not _pid_alive(int(pid_text))) or old:
                    path.unlink()
                    removed.append(path)
            except OSError:
                continue
    return removed


def write_atomic(
    path: Path | str, data: bytes | Callable[[BinaryIO], object], *, make_parents: bool = True, mode: int = 0o666,
) -> Path:
    """Write ``data`` to ``path`` atomically: temporary file in the same folder, fsync, rename.

    Parameters
    ----------
    path : Path or str
        The output file; replaced whole or left as it was.
    data : bytes or callable
        The bytes to write, or a function that writes them to the binary handle it is given
        (a figure's ``savefig``).
    make_parents : bool
        Make the folder when it is missing.
    mode : int
        The most the file may allow (``0o600`` for a private one; a transcript's own mode for
        what is made from it); the umask takes its bits away as for any new file.

    Returns
    -------
    Path
        ``path``.

    Raises
    ------
    OSError
        When the folder or the file cannot be written; the temporary file is removed and
        ``path`` is left as it was. Whatever ``data`` raises passes through the same way.

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> write_atomic(folder / "out.txt", b"new\\n").read_bytes(), sorted(p.name for p in folder.iterdir())
    (b'new\\n', ['out.txt'])
    """
    target = Path(path)
    if make_parents:
        target.parent.mkdir(parents=True, exist_ok=True)
    clean_temporary_files(target.parent, target.name)
    name = str(target.parent / f"{TEMP_PREFIX}{target.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0), mode & 0o777)
    try:
        with os.fdopen(fd, "wb") as handle:
            if isinstance(data, (bytes, bytearray, memoryview)):
                handle.write(data)
            else:
                data(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    _fsync_dir(target.parent)
    return target


def private_mode_of(source: Path | str) -> int:
    """The permission bits for what is written from ``source``: its read bits (no one may read the
    output who could not read the input) and its write bits, plus the owner's write bit (an output is
    the user's new file, writable even when the input is read-only); ``0o666`` when it cannot be read
    (the umask alone decides then).
    """
    try:
        return _output_mode(os.stat(source).st_mode)
    except (OSError, ValueError):
        return 0o666


def _output_mode(mode: int) -> int:
    """Read and write bits of ``mode`` plus the owner's write bit.

    >>> oct(_output_mode(0o100444)), oct(_output_mode(0o100600))
    ('0o644', '0o600')
    """
    return (mode & 0o666) | 0o200


def session_files(paths: Path | str | Iterable[Path | str]) -> list[Path]:
    """The session files of ``paths``: each file given, and every file under each folder given
    whose suffix is in ``SESSION_SUFFIXES`` and whose name is not in ``NOT_SESSIONS`` (sorted per folder).

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("b.jsonl", "a/c.json", "manifest.json", "notes.txt"):
    ...     _ = write_atomic(folder / name, b"{}")
    >>> [p.relative_to(folder).as_posix() for p in session_files(folder)]
    ['a/c.json', 'b.jsonl']
    """
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    found: list[Path] = []
    for item in map(Path, items):
        if item.is_dir():
            found.extend(sorted(p for p in item.rglob("*") if p.is_file() and p.suffix in SESSION_SUFFIXES and p.name not in NOT_SESSIONS))
        else:
            found.append(item)
    return found
