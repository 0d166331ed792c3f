"""The IO rules every file writer and folder walk shares.

- :func:`write_atomic`: an output is written to a temporary file (``.tmp-*.part``) in its own folder, flushed to
  disk, made an ordinary ``0644`` file, then renamed over the target (``os.replace``), and the
  folder entry flushed: a reader sees the old file or the new one, never half of one.
- :func:`session_files`: the session files of a list of files and folders (folders searched
  recursively by suffix, bookkeeping files of the shared folders left out).
"""

from __future__ import annotations

import contextlib
import gc
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["NOT_SESSIONS", "SESSION_SUFFIXES", "bulk_allocation", "session_files", "write_atomic"]

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


def write_atomic(path: Path | str, data: bytes | Callable[[BinaryIO], object], *, make_parents: bool = True) -> Path:
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
    fd, name = tempfile.mkstemp(prefix=f".tmp-{target.name}.", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            if isinstance(data, (bytes, bytearray, memoryview)):
                handle.write(data)
            else:
                data(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(name, 0o644)  # an ordinary file; mkstemp makes it private
        os.replace(name, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    _fsync_dir(target.parent)
    return target


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
