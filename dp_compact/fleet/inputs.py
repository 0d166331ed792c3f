"""Session inputs as local paths or fsspec URLs.

A URL (``scheme://...``: ``s3://bucket/prefix``, ``memory://fleet``, ``file:///data``) is listed
with fsspec in the client and read on the worker: its bytes are written to a temporary file
of the same name (the readers take a path; they detect the format from the content), which is
removed when the job ends. Results carry the URL, never the temporary path. A local path is
read where it is, so with a remote Dask scheduler local paths must be visible to every worker
(a shared filesystem); URLs need only the fsspec backend (``s3fs`` for ``s3://``) on each worker.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from dp_compact.errors import SessionError
from dp_compact.io import NOT_SESSIONS, SESSION_SUFFIXES, session_files

__all__ = ["is_url", "list_inputs", "local_file", "input_size"]

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")


def is_url(item: str | Path) -> bool:
    """Whether ``item`` is an fsspec URL (``scheme://...``, a scheme of two letters or more).

    >>> is_url("s3://bucket/sessions"), is_url("memory://fleet/a.jsonl"), is_url("sessions/a.jsonl")
    (True, True, False)
    """
    return isinstance(item, str) and bool(_URL.match(item))


def _is_session_name(name: str) -> bool:
    """A file name :func:`dp_compact.io.session_files` would list."""
    path = PurePosixPath(name)
    return path.suffix in SESSION_SUFFIXES and path.name not in NOT_SESSIONS


def _url_files(url: str) -> list[str]:
    """Session files under an fsspec URL (or the URL itself when it names a file), sorted."""
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(url)
    if not fs.isdir(root):
        return [url]
    base = root.rstrip("/")
    found = sorted(p for p in fs.find(root) if _is_session_name(p))
    # name each file under the URL as given (memory://x stays memory://x/..., not memory:///x/...)
    return [f"{url.rstrip('/')}/{p[len(base):].lstrip('/')}" if p.startswith(base) else fs.unstrip_protocol(p) for p in found]


def list_inputs(paths: str | Path | Iterable[str | Path]) -> list[str]:
    """Every session file of ``paths``: local files and folders as :func:`dp_compact.io.session_files`
    lists them, URLs listed with fsspec (same suffixes and exclusions).

    Parameters
    ----------
    paths : str, Path or iterable of them
        Files, folders, or fsspec URLs of files or folders.

    Returns
    -------
    list[str]
        Local paths as text, URLs with their scheme; per item in the order given, sorted within.

    Raises
    ------
    ImportError
        A URL without fsspec installed (``pip install ".[dask]"``).
    SessionError
        A local path that does not exist.
    """
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    found: list[str] = []
    for item in items:
        if is_url(item):
            found.extend(_url_files(str(item)))
        elif not Path(item).exists():  # as the local engine says: a path that is not there is an error, not a skipped row
            raise SessionError(item, None, "cannot read the file: No such file or directory")
        else:
            found.extend(str(p) for p in session_files(item))
    return found


def input_size(item: str) -> int:
    """Bytes of one input (0 when unknown): orders the jobs largest first, which balances workers."""
    try:
        if is_url(item):
            from fsspec.core import url_to_fs

            fs, path = url_to_fs(item)
            return int(fs.size(path) or 0)
        return os.stat(item).st_size
    except (OSError, ValueError):
        return 0


@contextmanager
def local_file(item: str) -> Iterator[str]:
    """A local path holding ``item``'s bytes for the length of the ``with`` block.

    A local path is yielded as it is; a URL is fetched with fsspec into a temporary folder
    (same file name) that is removed afterwards.

    Raises
    ------
    OSError
        The URL cannot be read (``FileNotFoundError`` for a missing object).
    """
    if not is_url(item):
        yield item
        return
    import fsspec

    folder = tempfile.mkdtemp(prefix="dp-compact-")
    try:
        target = Path(folder) / (PurePosixPath(item.split("://", 1)[1]).name or "session")
        with fsspec.open(item, "rb") as source, open(target, "wb") as sink:
            shutil.copyfileobj(source, sink)
        yield str(target)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
