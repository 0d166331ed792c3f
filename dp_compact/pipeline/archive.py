"""The archive of compacted heads (DESIGN §5.6): verbatim JSONL, metadata, SQLite FTS5 index.

Layout under the archive root (``DP_ARCHIVE_DIR``, else ``<user data dir>/dp-compact/archive``)::

    index.sqlite                 table ``archives`` + FTS5 table ``archive_fts`` (summary, keywords, head text)
    <session>/<id>.jsonl         the head's messages, one JSON object a line, exactly as given
    <session>/<id>.json          metadata: summary, anchors, paths, identifiers, keywords, counts, time

A head is referenced as ``archive://<session>/<id>``. ``<session>`` is the caller's session id
sanitized for file systems (:func:`session_id_for`); ``<id>`` sorts by creation time
(``YYYYMMDDTHHMMSSffffffZ-<8 hex>``).

Writes are atomic and private: the archive holds heads verbatim (pasted secrets, tool outputs),
so its folders are made ``0700`` and its files ``0600`` (less the umask), and a session folder
that is a symbolic link is refused (it could point anywhere). Each file is written to a
temporary file in the session folder, fsynced and renamed into place; an archive exists once
its index row does: :meth:`ArchiveStore.restore` and :meth:`ArchiveStore.search` only see
indexed archives. :meth:`ArchiveStore.write` (an archive no output refers to) and
:class:`DeferredArchiver` place the files unsynced and flush them, with their folder, in one go
just before the index row is inserted: the row still only ever names files on disk, and what a
crash leaves unindexed is removed by :meth:`ArchiveStore.recover` either way.

A compaction archives in two steps (:meth:`ArchiveStore.stage`, then :meth:`Staged.commit`
once its output is written): first a marker ``<id>.pending`` (the output's path, the writer's
process id, the index rows), then the two files; the output; then the index row, in one
transaction; then the marker is removed. An archive staged by :class:`DeferredArchiver`
(the plan server's ``PreCompact`` hook, which answers first and commits after) names its own
metadata file, which holds its reference, as its output: a writer that dies before its commit
leaves an archive the next write indexes. When the output cannot be written the staged files
are removed (:meth:`Staged.discard`), so the archive never records a compaction that did not
happen. A kill at any point leaves a marker at worst: the next write (:meth:`ArchiveStore.recover`)
indexes a staged archive whose output holds its reference and removes one whose output does
not, and removes temporary files and archive files that neither a row nor a marker claims.
Each operation opens and closes its own SQLite connection (WAL journal, busy timeout:
:mod:`dp_compact.pipeline.archive_index`), so one store may be shared between threads.

This is the pipeline's IO shell: it touches files, the environment and the clock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import secrets
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dp_compact.errors import ArchiveError
from dp_compact.io import TEMP_PREFIX, TEMP_SUFFIX, _fsync_dir, _pid_alive, clean_temporary_files, write_atomic
from dp_compact.pipeline.archive_index import (
    ArchiveIndex,
    fts_query,
    index_text,
    keyword_text,
    query_terms,
    searchable_strings,
)

__all__ = ["ARCHIVE_SCHEME", "MAX_SEARCH_LIMIT", "PRIVATE_DIR_MODE", "PRIVATE_FILE_MODE", "ArchiveHit", "ArchiveStore", "DeferredArchiver", "Staged", "StagingArchiver", "TRANSCRIPT_SUFFIXES", "archive_session_name", "default_archive_root", "json_line", "preview_ref", "session_id_for", "split_fragment", "write_jsonl_atomic"]

#: Scheme of archive references, ``archive://<session>/<id>`` (DESIGN §5.6).
ARCHIVE_SCHEME = "archive://"
#: Longest sanitized session id, characters (file-name friendly on every platform).
SESSION_ID_MAX_CHARS = 80
#: Characters of the summary shown per search hit.
SUMMARY_EXCERPT_CHARS = 240
#: Most hits one search returns (a bound SQLite's LIMIT takes as a 64-bit integer, and more than anyone reads).
MAX_SEARCH_LIMIT = 10_000
#: Head text indexed per archive, characters (bounds the index; the JSONL keeps everything).
INDEX_BODY_MAX_CHARS = 2_000_000
#: Permissions of archive folders and files (the umask may take more away): the owner's only.
PRIVATE_DIR_MODE, PRIVATE_FILE_MODE = 0o700, 0o600
#: Suffix of the marker of an archive staged for a compaction whose output is not written yet.
PENDING_SUFFIX = ".pending"
_SESSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")

@dataclass(frozen=True, slots=True)
class ArchiveHit:
    """One archive matching a :meth:`ArchiveStore.search` query; ``score`` is higher for better hits."""

    ref: str  # archive://<session>/<id>, for ArchiveStore.restore
    session: str  # sanitized session id
    created: str  # creation time, ISO 8601 UTC
    summary: str  # the first SUMMARY_EXCERPT_CHARS characters of the stored summary
    snippet: str  # matching text around the hit, matched words in [...]
    message_count: int  # messages in the archived head
    score: float  # relevance: negated FTS5 bm25 (column weights: pipeline.archive_index)

    def to_dict(self) -> dict[str, Any]:
        """The hit as a JSON-ready dict."""
        return dataclasses.asdict(self)


def default_archive_root() -> Path:
    """``DP_ARCHIVE_DIR`` when set and non-empty, else ``<user data dir>/dp-compact/archive`` (platformdirs)."""
    env = os.environ.get("DP_ARCHIVE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("dp-compact")) / "archive"


#: File suffixes of transcripts: a session path ending so names a file, whose archives are filed under
#: its name without the suffix (:func:`archive_session_name`).
TRANSCRIPT_SUFFIXES = frozenset({".jsonl", ".json", ".ndjson", ".traj"})


def archive_session_name(path: str) -> str:
    """The session name a conversation's archives are filed under (before :func:`session_id_for`):
    a transcript file's name without its suffix (``runs/4f1c.jsonl`` → ``4f1c``: any path with a
    directory, or a name ending in one of :data:`TRANSCRIPT_SUFFIXES`), else the name whole: an
    adapter's thread or session id, dots and all (``bench-gemini-2.5-pro``).

    >>> archive_session_name("runs/4f1c.jsonl"), archive_session_name("4f1c.jsonl"), archive_session_name("agent-2.5-pro")
    ('4f1c', '4f1c', 'agent-2.5-pro')
    """
    text = path.replace("\\", "/")
    name = Path(text)
    return name.stem if "/" in text or name.suffix.lower() in TRANSCRIPT_SUFFIXES else text


def session_id_for(name: str | os.PathLike[str]) -> str:
    """A file-system-safe session id from a session id or a session file path.

    A value containing a path separator (or a ``PathLike``) is reduced to its file name without
    suffix (``~/.claude/projects/x/4f1c.jsonl`` → ``4f1c``). Runs of characters outside
    ``[A-Za-z0-9._-]`` become ``_``, leading dots/dashes/underscores are dropped and the result
    is cut to ``SESSION_ID_MAX_CHARS``; an empty result becomes ``session``.

    >>> session_id_for("/tmp/runs/My Session (2).jsonl")
    'My_Session_2'
    >>> session_id_for("../..")
    'session'
    """
    text = os.fspath(name)
    if isinstance(name, os.PathLike) or "/" in text or "\\" in text:
        text = Path(text.replace("\\", "/")).stem
    cleaned = _UNSAFE.sub("_", text).lstrip("._-").rstrip("_")[:SESSION_ID_MAX_CHARS]
    return cleaned if _SESSION_RE.fullmatch(cleaned) and cleaned.strip(".") else "session"


def _parse_ref(ref: str) -> tuple[str, str]:
    """(session, id) of an archive reference; ArchiveError when malformed (a well-formed id we never
    wrote, such as ``archive://x/bogus``, is absent from the index instead)."""
    body = ref[len(ARCHIVE_SCHEME) :] if isinstance(ref, str) and ref.startswith(ARCHIVE_SCHEME) else None
    session, _, archive_id = (body or "").partition("/")
    if body is None or not _SESSION_RE.fullmatch(session) or not _SESSION_RE.fullmatch(archive_id):  # ids we write: _new_id
        raise ArchiveError(f"not an archive reference: {ref!r} (expected {ARCHIVE_SCHEME}<session>/<id>, optionally #msg-N)", ref=str(ref))
    return session, archive_id


_FRAGMENT = re.compile(r"#msg-(\d{1,9})\Z")


def _numbers(indices: Any) -> str:
    """The message numbers an archive holds, as runs (``0-148``, ``3, 7-9``); "not numbered" for no list.

    >>> _numbers([0, 1, 2, 5, 7, 8])
    '0-2, 5, 7-8'
    """
    if not isinstance(indices, list) or not all(isinstance(i, int) for i in indices):
        return "not numbered"
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs) or "none"


def split_fragment(ref: str) -> tuple[str, int | None]:
    """(reference, message index) of ``archive://<session>/<id>#msg-N``; (ref, None) without a fragment.

    >>> split_fragment("archive://s/20261206T000000000000Z-0a1b2c3d#msg-17")
    ('archive://s/20261206T000000000000Z-0a1b2c3d', 17)
    """
    found = _FRAGMENT.search(ref) if isinstance(ref, str) else None
    return (ref[: found.start()], int(found.group(1))) if found else (ref, None)


def preview_ref(session_id: str) -> str:
    """The reference a dry run states in its summary and placeholders: :meth:`ArchiveStore.write`'s
    for ``session_id``, with an id of the same shape that no archive has
    (:data:`~dp_compact.measure.clearing.PLACEHOLDER_ARCHIVE_ID`: zeros, and hex digits that take the
    tokens random ones take most often), so that what a dry run measures is what a real run writes,
    to within a token or two per reference.

    >>> preview_ref("cc_fundwise")
    'archive://cc_fundwise/00000000T000000000000Z-00ff00ff'
    """
    from dp_compact.measure.clearing import PLACEHOLDER_ARCHIVE_ID

    return f"{ARCHIVE_SCHEME}{session_id_for(session_id)}/{PLACEHOLDER_ARCHIVE_ID}"


def _new_id(now: datetime) -> str:
    """A time-sortable unique archive id: UTC timestamp to the microsecond + 8 random hex digits."""
    return f"{now:%Y%m%dT%H%M%S%f}Z-{secrets.token_hex(4)}"


def _jsonable(value: Any) -> Any:
    """JSON fallback for metadata values: dataclasses, paths, sets, tuples; TypeError otherwise."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


#: :func:`json.dumps` with ``ensure_ascii=False, separators=(",", ":")``, made once.
_COMPACT_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def json_line(obj: Any) -> bytes:
    """One compact JSON line; ASCII escapes when the text holds lone surrogates."""
    text = _COMPACT_JSON.encode(obj)
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode("ascii") + b"\n"


def write_jsonl_atomic(path: Path | str, messages: Sequence[Any], *, mode: int = 0o666) -> None:
    """Write ``messages`` as JSONL to ``path`` atomically (temp file in the same directory, fsync, rename);
    ``mode``: the most the file may allow (:func:`~dp_compact.io.write_atomic`).

    Raises
    ------
    ArchiveError
        If a message is not JSON-serializable or the file cannot be written; ``path`` is then
        left as it was.
    """
    target = Path(path)
    try:
        write_atomic(target, b"".join(json_line(m) for m in messages), mode=mode)
    except (OSError, TypeError, ValueError) as exc:
        raise ArchiveError(f"{target}: cannot write: {exc}") from exc


def _head_lines(head_raw: Sequence[Any], encoded: Mapping[int, tuple[Any, bytes, Sequence[str]]] | None,
                body: list[str] | None) -> list[bytes]:
    """Each message of a head as its archive line (:func:`json_line`, or the line ``encoded`` holds for
    that very message); its searchable strings appended to ``body`` unless None. TypeError or
    ValueError when a message is not JSON-ready."""
    lines: list[bytes] = []
    for message in head_raw:
        known = encoded.get(id(message)) if encoded else None
        if known is not None and known[0] is message:
            lines.append(known[1])
            if body is not None:
                body.extend(known[2])
        else:
            lines.append(json_line(message))
            if body is not None:
                searchable_strings(message, body)
    return lines


class ArchiveStore:
    """Archived heads under one root directory: write, restore, search.

    Parameters
    ----------
    root : Path, optional
        The archive directory; default :func:`default_archive_root` (``DP_ARCHIVE_DIR``, else the
        user data directory). Created on the first write, never by reads.
    """

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_archive_root()
        self.index = ArchiveIndex(self.root)
        self.index_path = self.index.path

    def _prepare(self, session_id: str, head_raw: Sequence[dict[str, Any]], metadata: dict[str, Any],
                 encoded: Mapping[int, tuple[Any, bytes, Sequence[str]]] | None = None) -> tuple[str, bytes, bytes, tuple, tuple]:
        """(ref, JSONL bytes, metadata bytes, index row, FTS row) of a head to archive; ArchiveError when not JSON-ready.
        ``encoded``: as :meth:`stage`."""
        session = session_id_for(session_id)
        now = datetime.now(UTC)
        archive_id = _new_id(now)
        ref = f"{ARCHIVE_SCHEME}{session}/{archive_id}"
        summary = index_text(str(metadata.get("summary") or ""))
        meta = {
            **metadata, "ref": ref, "session": session, "id": archive_id,
            "created": now.isoformat(timespec="microseconds"), "message_count": len(head_raw),
        }
        body: list[str] = []
        try:
            jsonl = b"".join(_head_lines(head_raw, encoded, body))
            meta_bytes = json.dumps(meta, ensure_ascii=False, indent=1, default=_jsonable).encode("utf-8", "surrogatepass")
        except (TypeError, ValueError) as exc:
            raise ArchiveError(f"cannot archive session {session}: {exc}", ref=ref) from exc
        row = (ref, session, archive_id, meta["created"], summary, len(head_raw), hashlib.sha256(jsonl).hexdigest())
        fts = (ref, summary, index_text(keyword_text(meta)), index_text("\n".join(body)[:INDEX_BODY_MAX_CHARS]))
        return ref, jsonl, meta_bytes, row, fts

    def archived_as(self, session_id: str, head_raw: Sequence[dict[str, Any]],
                    encoded: Mapping[int, tuple[Any, bytes, Sequence[str]]] | None = None) -> str | None:
        """The reference of an indexed archive of ``session_id`` that holds exactly ``head_raw`` (the same
        JSONL bytes :meth:`write` would store; its file present), else None. ``encoded``: as :meth:`stage`.
        A hook run twice on the same conversation (Claude Code's ``PreCompact``) reuses it instead of
        archiving the same messages again."""
        session = session_id_for(session_id)
        candidates = self.index.with_count(session, len(head_raw))
        if not candidates:  # the common case: the messages are not encoded for nothing
            return None
        try:
            digest = hashlib.sha256(b"".join(_head_lines(head_raw, encoded, None))).hexdigest()
        except (TypeError, ValueError):
            return None
        return next((ref for ref, sha in candidates
                     if sha == digest and (self.root / session / f"{ref.rsplit('/', 1)[-1]}.jsonl").is_file()), None)

    def write(self, session_id: str, head_raw: Sequence[dict[str, Any]], metadata: dict[str, Any]) -> str:
        """Archive a head verbatim and index it; return its reference.

        Parameters
        ----------
        session_id : str
            Session id or session file path, sanitized by :func:`session_id_for`.
        head_raw : sequence of dict
            The head's messages as sent to the API (``Message.raw``), stored exactly.
        metadata : dict
            Facts about the head, stored in ``<id>.json`` (dataclasses, paths and sets converted):
            ``summary``, ``keywords``, ``file_paths``, ``identifiers``, ``anchors`` (all indexed),
            ``token_counts``, ``source_path``, ...; ``ref``, ``session``, ``id``, ``created`` (ISO
            8601 UTC) and ``message_count`` are set here.

        Returns
        -------
        str
            ``archive://<session>/<id>``.

        Raises
        ------
        ArchiveError
            If a message or the metadata is not JSON-serializable, a file or the index cannot be
            written, or the session folder is a symbolic link; nothing is then visible to
            :meth:`restore` or :meth:`search`.
        """
        staged = self.stage(session_id, head_raw, metadata, output=None, synced=False)
        staged.commit()
        return staged.ref

    def stage(self, session_id: str, head_raw: Sequence[dict[str, Any]], metadata: dict[str, Any], *, output: str | None,
              synced: bool = True, recoverable: bool = False,
              encoded: Mapping[int, tuple[Any, bytes, Sequence[str]]] | None = None) -> Staged:
        """Place a head's files, not yet indexed, for a compaction whose output is written next.

        Parameters and errors as :meth:`write`; ``output``: the file the compaction writes (the
        marker names it, for :meth:`recover`). ``synced`` False: the marker and files are renamed
        into place unsynced, and :meth:`Staged.commit` flushes the files and their folder before
        it inserts the index row (for an archive no output refers to before that commit).
        ``recoverable``: the marker names the archive's own metadata file as the output (it holds
        the reference; ``output`` is then ignored), so an archive whose writer dies before its
        commit is indexed by the next :meth:`recover` (:class:`DeferredArchiver`). ``encoded``:
        ``id(message) -> (message, json_line(message), its searchable strings)`` made already (a
        long-lived process's, for messages it read and nothing changes), used for the very
        messages it holds. Returns the :class:`Staged` archive: call its ``commit()`` once the
        output is written, ``discard()`` when it could not be.
        """
        self.recover()
        ref, jsonl, meta_bytes, row, fts = self._prepare(session_id, head_raw, metadata, encoded)
        session, archive_id = row[1], row[2]
        directory = self._session_dir(session, create=True, ref=ref)
        marker = directory / f"{archive_id}{PENDING_SUFFIX}"
        if recoverable:
            output = str(directory / f"{archive_id}.json")
        pending = {"ref": ref, "pid": os.getpid(), "output": output, "row": list(row), "fts": list(fts)}
        place = _place_atomic if synced else _place_unsynced
        placed: list[Path] = []
        try:
            placed.append(place(marker, json.dumps(pending, ensure_ascii=True).encode("ascii")))
            for data, final in ((jsonl, directory / f"{archive_id}.jsonl"), (meta_bytes, directory / f"{archive_id}.json")):
                placed.append(place(final, data))
        except BaseException as exc:
            _remove(reversed(placed))
            if isinstance(exc, OSError):
                raise ArchiveError(f"{directory}: cannot write archive {archive_id}: {exc}", ref=ref) from exc
            raise
        return Staged(self, ref, tuple(row), tuple(fts), tuple(placed[1:]), marker, synced=synced)

    def _session_dir(self, session: str, *, create: bool, ref: str | None = None) -> Path:
        """``root/session``, made private when ``create``; ArchiveError when it is a symbolic link or not a folder."""
        directory = self.root / session
        if directory.is_symlink():
            raise ArchiveError(f"{directory}: the archive session folder is a symbolic link; refused (it may point anywhere)", ref=ref)
        if create:
            try:
                self.root.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
                directory.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)
            except OSError as exc:
                raise ArchiveError(f"{directory}: cannot make the archive folder: {exc.strerror or exc}", ref=ref) from exc
            if directory.is_symlink() or not directory.is_dir():
                raise ArchiveError(f"{directory}: the archive session folder is not a plain folder; refused", ref=ref)
        return directory

    def recover(self) -> list[str]:
        """Finish or undo what a killed compaction left (module docstring); remove leftovers.

        A staged archive whose writer is gone is indexed when its output holds its reference,
        else removed; temporary files of dead writers and archive files that neither an index
        row nor a marker claims are removed. Returns the references indexed. Errors are ignored
        (a later run tries again); never raises.
        """
        indexed: list[str] = []
        if not self.root.is_dir():
            return indexed
        with contextlib.suppress(OSError, ArchiveError, sqlite3.Error):
            clean_temporary_files(self.root)
            known = self.index.ids()
            for directory in self.root.iterdir():
                if directory.is_symlink() or not directory.is_dir():
                    continue
                clean_temporary_files(directory)
                indexed += self._recover_folder(directory, known)
        return indexed

    def _recover_folder(self, directory: Path, known: set[tuple[str, str]]) -> list[str]:
        """:meth:`recover` in one session folder."""
        indexed, pending = [], set()
        for marker in sorted(directory.glob(f"*{PENDING_SUFFIX}")):
            archive_id = marker.name[: -len(PENDING_SUFFIX)]
            pending.add(archive_id)
            try:
                state = json.loads(marker.read_bytes())
                if _pid_alive(int(state["pid"])):
                    continue  # still being written
                files = [directory / f"{archive_id}.jsonl", directory / f"{archive_id}.json"]
                if all(f.is_file() for f in files) and state.get("output") is not None and _holds(state["output"], state["ref"]):
                    self.index.insert(tuple(state["row"]), tuple(state["fts"]), replace=True)
                    indexed.append(state["ref"])
                    known.add((directory.name, archive_id))
                elif (directory.name, archive_id) not in known:
                    _remove(files)
                marker.unlink()
            except (OSError, ValueError, KeyError, TypeError, ArchiveError):
                continue
        for path in directory.iterdir():
            stem, suffix = path.name.rsplit(".", 1) if "." in path.name else (path.name, "")
            candidate = suffix in ("jsonl", "json") and _SESSION_RE.fullmatch(stem) and stem not in pending and (directory.name, stem) not in known
            # A writer makes its marker before its files and removes it only after its row is committed
            # (or its files removed): looked at in that order, an unclaimed file is an orphan.
            if candidate and not (directory / f"{stem}{PENDING_SUFFIX}").exists() and self.index.lookup(f"{ARCHIVE_SCHEME}{directory.name}/{stem}") is None:
                _remove([path])  # an archive file no row and no marker claims
        return indexed

    def _row(self, ref: str) -> tuple[str, str, int, str]:
        """The index row of ``ref``; ArchiveError when malformed or unknown."""
        _parse_ref(ref)
        row = self.index.lookup(ref)
        if row is None:
            raise ArchiveError(f"no archive under {ref} (archive folder {self.root})", ref=ref)
        return row

    def restore(self, ref: str) -> list[dict[str, Any]]:
        """The archived head's messages, exactly as written.

        Parameters
        ----------
        ref : str
            ``archive://<session>/<id>`` as returned by :meth:`write`; ``...#msg-N`` names the one
            archived message that was message N of the conversation (the metadata's
            ``message_indices``: the placeholders of a clearing, :mod:`.clear`, and the anchors of
            a compaction, whose head is messages 0..cut-1).

        Returns
        -------
        list of dict
            The messages, equal (as parsed JSON) to the ``head_raw`` given to :meth:`write`
            (with ``#msg-N``: that one message).

        Raises
        ------
        ArchiveError
            If ``ref`` is malformed, not in the index, or its JSONL file is missing or altered
            (SHA-256 recorded at write time); ``#msg-N`` for a message the archive does not hold.
        """
        ref, message = split_fragment(ref)
        messages = self._restore_all(ref)
        if message is None:
            return messages
        metadata = self.metadata(ref)
        indices = metadata.get("message_indices")
        if indices is None and "anchors" in metadata:  # a compaction's head: messages 0..cut-1, in order
            indices = list(range(len(messages)))
        if not isinstance(indices, list) or message not in indices or len(indices) != len(messages):
            raise ArchiveError(f"{ref} holds no message {message} (its messages: {_numbers(indices)})", ref=ref)
        return [messages[indices.index(message)]]

    def _restore_all(self, ref: str) -> list[dict[str, Any]]:
        """:meth:`restore` of a reference without a fragment."""
        session, archive_id, count, digest = self._row(ref)
        path = self._session_dir(session, create=False, ref=ref) / f"{archive_id}.jsonl"
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ArchiveError(f"{ref}: cannot read {path}: {exc}", ref=ref) from exc
        if hashlib.sha256(data).hexdigest() != digest:
            raise ArchiveError(f"{ref}: {path} was modified after archiving (checksum mismatch)", ref=ref)
        messages = [json.loads(line) for line in data.split(b"\n") if line]  # not str.splitlines: U+2028 stays inside
        if len(messages) != count:
            raise ArchiveError(f"{ref}: {path} holds {len(messages)} messages, the index says {count}", ref=ref)
        return messages

    def metadata(self, ref: str) -> dict[str, Any]:
        """The metadata stored with ``ref`` (summary, anchors, counts, ...); ArchiveError as :meth:`restore`."""
        session, archive_id, _, _ = self._row(split_fragment(ref)[0])
        path = self._session_dir(session, create=False, ref=ref) / f"{archive_id}.json"
        try:
            return json.loads(path.read_text(encoding="utf-8", errors="surrogatepass"))
        except (OSError, ValueError) as exc:
            raise ArchiveError(f"{ref}: cannot read {path}: {exc}", ref=ref) from exc

    def search(self, query: str, session: str | None = None, limit: int = 20) -> list[ArchiveHit]:
        """Archives whose summary, keywords, paths, identifiers or head text match ``query``.

        Parameters
        ----------
        query : str
            Words, file paths or identifiers; every whitespace-separated term must match, as a
            phrase of its tokens (``src/app.py`` matches that path); ``term*`` matches a prefix.
            FTS5 syntax characters are text, never operators.
        session : str, optional
            Only archives of this session (sanitized as :meth:`write` does).
        limit : int
            Most hits returned, 1 to :data:`MAX_SEARCH_LIMIT` (0: none).

        Returns
        -------
        list of ArchiveHit
            Best first; empty when nothing matches, the query has no word, or no archive exists.

        Raises
        ------
        ArchiveError
            If the index cannot be read; the query has too many terms or characters, or matches
            too much (:mod:`~dp_compact.pipeline.archive_index` bounds); ``limit`` is out of range.
        """
        if not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit <= MAX_SEARCH_LIMIT:
            raise ArchiveError(f"limit must be a whole number from 1 to {MAX_SEARCH_LIMIT:,}, not {limit!r}")
        match = fts_query(query)
        if not match or limit <= 0:
            return []
        rows = self.index.search(match, None if session is None else session_id_for(session), limit, query_terms(query))
        return [
            ArchiveHit(ref, sess, created, summary[:SUMMARY_EXCERPT_CHARS], snippet, count, -float(rank))
            for ref, sess, created, summary, snippet, count, rank in rows
        ]


def _remove(paths: Any) -> None:
    """Unlink each path, ignoring errors."""
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()


def _place_atomic(path: Path, data: bytes) -> Path:
    """``data`` written to ``path`` (private) by :func:`~dp_compact.io.write_atomic`: fsynced, renamed, folder fsynced."""
    return write_atomic(path, data, make_parents=False, mode=PRIVATE_FILE_MODE)


def _place_unsynced(path: Path, data: bytes) -> Path:
    """``data`` written to ``path`` (private) atomically but not flushed: a temporary file named as
    :func:`~dp_compact.io.write_atomic` names them (so :func:`~dp_compact.io.clean_temporary_files`
    removes a dead writer's), renamed into place. OSError when it cannot be written (no temporary file left)."""
    name = path.parent / f"{TEMP_PREFIX}{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0), PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(name)
        raise
    return path


def _fsync_file(path: Path) -> None:
    """Flush ``path``'s data to disk; OSError when it cannot be."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _holds(output: str, ref: str) -> bool:
    """True when the file ``output`` exists and its bytes hold ``ref`` (its compaction was written)."""
    try:
        with open(output, "rb") as file:
            return ref.encode("ascii") in file.read()
    except (OSError, UnicodeEncodeError):
        return False


@dataclass(slots=True)
class Staged:
    """An archive placed by :meth:`ArchiveStore.stage`: its files are written, its index row is not."""

    store: ArchiveStore
    ref: str
    row: tuple[Any, ...]
    fts: tuple[Any, ...]
    files: tuple[Path, ...]
    marker: Path
    done: bool = False
    #: False when the files were placed unsynced: :meth:`commit` flushes them (and their folder) first.
    synced: bool = True

    def commit(self) -> None:
        """Insert the index row (one transaction), then remove the marker; ArchiveError when the
        files cannot be flushed or the index cannot be written (the marker stays: the next write
        indexes the archive when its output holds the reference, else removes it).

        Files placed unsynced are flushed, and then their folder, before the row is inserted: an
        index row only ever names files on disk. The marker's removal is then not flushed: a
        marker that comes back after a power loss names an indexed archive, which
        :meth:`ArchiveStore.recover` keeps, and is removed.
        """
        if self.done:
            return
        placed_unsynced = not self.synced
        try:
            if not self.synced:
                try:
                    for path in self.files:
                        _fsync_file(path)
                except OSError as exc:
                    raise ArchiveError(f"{self.marker.parent}: cannot flush archive {self.ref}: {exc}", ref=self.ref) from exc
                _fsync_dir(self.marker.parent)
                self.synced = True
            self.store.index.insert(self.row, self.fts)
        except BaseException:
            if self.marker.exists() and not _pending_output(self.marker):
                self.discard()  # nothing was written that refers to it
            raise
        self.done = True
        with contextlib.suppress(OSError):
            self.marker.unlink()
            if not placed_unsynced:
                _fsync_folder(self.marker.parent)

    def discard(self) -> None:
        """Remove the staged files and the marker (the compaction's output was not written)."""
        if self.done:
            return
        _remove(self.files)
        _remove([self.marker])
        self.done = True


def _pending_output(marker: Path) -> str | None:
    """The output a marker names, or None."""
    try:
        return json.loads(marker.read_bytes()).get("output")
    except (OSError, ValueError, AttributeError):
        return None


def _fsync_folder(folder: Path) -> None:
    """Flush a folder entry; errors ignored."""
    from dp_compact.io import _fsync_dir

    _fsync_dir(folder)


class StagingArchiver:
    """An :class:`ArchiveStore` whose writes wait for the output (:meth:`ArchiveStore.stage`):
    ``commit()`` once the output is written, ``discard()`` when it was not (``compact``, ``clear``)."""

    def __init__(self, store: ArchiveStore, output: str) -> None:
        self.store, self.output, self.staged = store, output, []

    def archived_as(self, session_id: str, head_raw: Sequence[dict[str, Any]]) -> str | None:
        """:meth:`ArchiveStore.archived_as` of the store."""
        return self.store.archived_as(session_id, head_raw)

    def write(self, session_id: str, head_raw: list[dict[str, Any]], metadata: dict[str, Any]) -> str:
        staged = self.store.stage(session_id, head_raw, metadata, output=self.output)
        self.staged.append(staged)
        return staged.ref

    def commit(self) -> None:
        for staged in self.staged:
            staged.commit()

    def discard(self) -> None:
        for staged in self.staged:
            staged.discard()


class DeferredArchiver:
    """An :class:`ArchiveStore` whose writes are indexed later: :meth:`write` places the files
    unsynced and returns the reference at once (:meth:`ArchiveStore.stage` with ``synced=False,
    recoverable=True``); :meth:`commit` flushes them and inserts their index rows.

    For a long-lived process that hands the reference out before it commits (the plan server's
    ``PreCompact`` hook answers, then commits): until the commit, the archive is neither indexed
    nor flushed, so a power loss in between may lose it (the transcript it was taken from still
    holds every message), and :meth:`ArchiveStore.restore` does not know it yet; a process that
    dies in between leaves an archive the next write indexes. Its content is
    :meth:`ArchiveStore.write`'s.
    """

    def __init__(self, store: ArchiveStore, encoded: Mapping[int, tuple[Any, bytes, Sequence[str]]] | None = None) -> None:
        self.store, self.staged, self.encoded = store, [], encoded

    def archived_as(self, session_id: str, head_raw: Sequence[dict[str, Any]]) -> str | None:
        """:meth:`ArchiveStore.archived_as` of the store, with the lines made already (``encoded``)."""
        return self.store.archived_as(session_id, head_raw, self.encoded)

    def write(self, session_id: str, head_raw: list[dict[str, Any]], metadata: dict[str, Any]) -> str:
        """Place the archive (parameters and errors as :meth:`ArchiveStore.write`; ``encoded`` given
        at construction as :meth:`ArchiveStore.stage` takes it); its reference."""
        staged = self.store.stage(session_id, head_raw, metadata, output=None, synced=False, recoverable=True, encoded=self.encoded)
        self.staged.append(staged)
        return staged.ref

    def commit(self) -> None:
        """Flush and index every archive placed (:meth:`Staged.commit`); ArchiveError for the first
        that fails, which stays staged (a later ``commit()`` tries it again)."""
        for staged in self.staged:
            staged.commit()
        self.staged = [s for s in self.staged if not s.done]
