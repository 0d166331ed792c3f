"""The archive's SQLite index (DESIGN §5.6): table ``archives`` and the FTS5 table ``archive_fts``.

One row per archive (reference, session, id, creation time, summary, message count, SHA-256 of
its JSONL) and its searchable text (summary, keywords, head text), inserted in one transaction
once both files are in place (:class:`~dp_compact.pipeline.archive.ArchiveStore`). Each
operation opens and closes its own connection (WAL journal, busy timeout), so one index may be
shared between threads. IO shell: it touches the index file.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dp_compact.errors import ArchiveError

__all__ = ["SQLITE_BUSY_TIMEOUT_S", "ArchiveIndex", "fts_query", "index_text", "keyword_text", "searchable_strings"]

#: Seconds a connection waits for another writer's lock before failing.
SQLITE_BUSY_TIMEOUT_S = 30.0
#: Attempts to switch a new index to WAL while another connection holds it (10 ms, 20 ms, ... apart).
_WAL_ATTEMPTS = 50
#: bm25 column weights: ref (unindexed), summary, keywords, head text.
_BM25_WEIGHTS = (0.0, 5.0, 3.0, 1.0)
#: String fields of messages that are not searchable text (ids, signatures, base64 payloads).
_SKIP_KEYS = frozenset({"id", "type", "role", "signature", "data", "encrypted_content", "tool_use_id", "tool_call_id", "call_id"})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS archives (
    ref TEXT PRIMARY KEY, session TEXT NOT NULL, id TEXT NOT NULL, created TEXT NOT NULL,
    summary TEXT NOT NULL, message_count INTEGER NOT NULL, sha256 TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS archives_session ON archives (session, id);
CREATE VIRTUAL TABLE IF NOT EXISTS archive_fts USING fts5(ref UNINDEXED, summary, keywords, body);
"""


def searchable_strings(obj: Any, out: list[str]) -> None:
    """Collect the searchable string leaves of a message (skipping ids, signatures, payloads)."""
    if isinstance(obj, str):
        if not obj.startswith("data:"):
            out.append(obj)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if key not in _SKIP_KEYS:
                searchable_strings(value, out)
    elif isinstance(obj, list | tuple):
        for value in obj:
            searchable_strings(value, out)


def keyword_text(metadata: dict[str, Any]) -> str:
    """Keywords, file paths, identifiers and anchor texts of the metadata, for the index."""
    parts: list[str] = []
    for key in ("keywords", "file_paths", "paths", "identifiers", "anchors", "source_path"):
        searchable_strings(metadata.get(key), parts)
    return "\n".join(parts)


def index_text(text: str) -> str:
    """``text`` safe for SQLite: lone surrogates become ``?`` (the JSONL keeps them exactly)."""
    return text.encode("utf-8", "replace").decode("utf-8")


def fts_query(query: str) -> str:
    """A safe FTS5 query: each whitespace-separated term quoted as a phrase (AND), ``term*`` kept as prefix.

    Terms without any letter or digit are dropped (they hold no token and would match nothing).
    """
    phrases = []
    for term in query.split():
        prefix = term.endswith("*") and term.rstrip("*") != ""
        core = term.rstrip("*") if prefix else term
        if any(ch.isalnum() for ch in core):
            phrases.append('"' + core.replace('"', '""') + '"' + ("*" if prefix else ""))
    return " ".join(phrases)


def _ensure_schema(db: sqlite3.Connection) -> None:
    """Switch the index to WAL once (retrying: the switch ignores the busy timeout) and create the tables."""
    for attempt in range(_WAL_ATTEMPTS):
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == _WAL_ATTEMPTS - 1:
                raise
            time.sleep(0.01 * (attempt + 1))
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in filter(str.strip, _SCHEMA.split(";")):
            db.execute(statement)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


class ArchiveIndex:
    """The index file ``<root>/index.sqlite`` of an archive root.

    Parameters
    ----------
    root : Path
        The archive directory; created by the first write, never by reads.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "index.sqlite"

    @contextlib.contextmanager
    def connect(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """An autocommit connection to the index (schema ensured when writing), closed on exit.

        Raises
        ------
        ArchiveError
            If the index cannot be opened or a statement fails.
        """
        try:
            if write:
                self.root.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=SQLITE_BUSY_TIMEOUT_S, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise ArchiveError(f"{self.path}: cannot open the archive index: {exc}") from exc
        try:
            if write:
                _ensure_schema(db)
            yield db
        except sqlite3.Error as exc:
            hint = " (this Python's SQLite lacks FTS5)" if "fts5" in str(exc) else ""
            raise ArchiveError(f"{self.path}: archive index error: {exc}{hint}") from exc
        finally:
            db.close()

    def insert(self, row: tuple[Any, ...], fts: tuple[Any, ...]) -> None:
        """Insert one archive's row and its searchable text in one transaction (rolled back on failure)."""
        with self.connect(write=True) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("INSERT INTO archives VALUES (?, ?, ?, ?, ?, ?, ?)", row)
                db.execute("INSERT INTO archive_fts (ref, summary, keywords, body) VALUES (?, ?, ?, ?)", fts)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def lookup(self, ref: str) -> tuple[str, str, int, str] | None:
        """(session, id, message count, SHA-256) of ``ref``, or None when the index or the row is absent."""
        if not self.path.exists():
            return None
        with self.connect(write=False) as db:
            return db.execute("SELECT session, id, message_count, sha256 FROM archives WHERE ref = ?", (ref,)).fetchone()

    def search(self, match: str, session: str | None, limit: int) -> list[tuple[Any, ...]]:
        """Rows (ref, session, created, summary, snippet, message count, bm25) matching the FTS5 ``match``
        (:func:`fts_query`), best first; [] when no index exists."""
        if not self.path.exists():
            return []
        sql = (
            "SELECT a.ref, a.session, a.created, a.summary, snippet(archive_fts, -1, '[', ']', '…', 12),"
            f" a.message_count, bm25(archive_fts, {', '.join(map(str, _BM25_WEIGHTS))})"
            " FROM archive_fts JOIN archives a ON a.ref = archive_fts.ref WHERE archive_fts MATCH ?"
        )
        params: list[Any] = [match]
        if session is not None:
            sql += " AND a.session = ?"
            params.append(session)
        sql += " ORDER BY 7, a.id DESC LIMIT ?"
        params.append(limit)
        with self.connect(write=False) as db:
            return db.execute(sql, params).fetchall()
