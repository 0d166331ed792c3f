"""The archive's SQLite index (DESIGN §5.6): table ``archives`` and the FTS5 table ``archive_fts``.

One row per archive (reference, session, id, creation time, summary, message count, SHA-256 of
its JSONL) and its searchable text (summary, keywords, head text), inserted in one transaction
once both files are in place (:class:`~dp_compact.pipeline.archive.ArchiveStore`). Each
operation opens and closes its own connection (WAL journal, busy timeout), so one index may be
shared between threads. IO shell: it touches the index file.

The index is made whole or not at all: a new index is built in a private temporary file
(``0600``, schema and WAL switch done) and linked into place only then, so a kill or a full disk
never leaves a 0-byte or table-less ``index.sqlite``. An index left so by an older version reads
as holding no archive, and the next write adds its tables in one transaction.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dp_compact.errors import ArchiveError
from dp_compact.io import TEMP_PREFIX, TEMP_SUFFIX, _fsync_dir

__all__ = [
    "MAX_QUERY_CHARS", "MAX_QUERY_STEPS", "MAX_QUERY_TERMS", "SQLITE_BUSY_TIMEOUT_S", "ArchiveIndex", "fts_query", "index_text",
    "keyword_text", "query_terms", "searchable_strings", "snippet_of",
]

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


#: Most distinct terms a query may hold: every term must match (AND), so more add only cost.
MAX_QUERY_TERMS = 16
#: Longest query, characters (a term is a word, a path or an identifier).
MAX_QUERY_CHARS = 1_000
#: SQLite virtual-machine steps one search may take before it is stopped (~0.2-0.5 s of CPU on
#: an index of a few thousand archives; a one-term search over a 2 MB head takes ~10^5).
MAX_QUERY_STEPS = 20_000_000
_PROGRESS_EVERY = 10_000


def query_terms(query: str) -> list[str]:
    """The distinct search terms of ``query`` (case-insensitive; ``term*`` a prefix), in order.

    Terms without any letter or digit are dropped (they hold no token and would match nothing).

    Raises
    ------
    ArchiveError
        If the query is longer than :data:`MAX_QUERY_CHARS` or holds more than
        :data:`MAX_QUERY_TERMS` distinct terms.

    >>> query_terms("KeyError keyerror KEYERROR main.py fix*  ---")
    ['KeyError', 'main.py', 'fix*']
    """
    if len(query) > MAX_QUERY_CHARS:
        raise ArchiveError(f"the query has {len(query):,} characters; at most {MAX_QUERY_CHARS:,} (a few words, paths or identifiers)")
    terms: dict[str, str] = {}
    for term in query.split():
        prefix = term.endswith("*") and term.rstrip("*") != ""
        core = term.rstrip("*") if prefix else term
        if any(ch.isalnum() for ch in core):
            terms.setdefault(core.casefold() + ("*" if prefix else ""), core + ("*" if prefix else ""))
    if len(terms) > MAX_QUERY_TERMS:
        raise ArchiveError(f"the query has {len(terms)} distinct terms; at most {MAX_QUERY_TERMS} (every term must match)")
    return list(terms.values())


def fts_query(query: str) -> str:
    """A safe FTS5 query: each distinct whitespace-separated term quoted as a phrase (AND), ``term*`` kept as prefix
    (:func:`query_terms`: duplicates removed, at most :data:`MAX_QUERY_TERMS`)."""
    phrases = []
    for term in query_terms(query):
        prefix = term.endswith("*")
        core = term[:-1] if prefix else term
        phrases.append('"' + core.replace('"', '""') + '"' + ("*" if prefix else ""))
    return " ".join(phrases)


def snippet_of(texts: Sequence[str], terms: Sequence[str], around: int = 60) -> str:
    """Text around the first match of a term in ``texts`` (tried in order), matched words in ``[...]``.

    Linear in the text (FTS5's own ``snippet()`` took seconds on a head with thousands of hits).

    >>> snippet_of(["nothing here", "the KeyError in main.py was fixed"], ["keyerror"])
    'the [KeyError] in main.py was fixed'
    """
    words = [re.escape(t.rstrip("*")) + (r"\w*" if t.endswith("*") else r"(?!\w)") for t in terms if t.rstrip("*")]
    if not words:
        return ""
    pattern = re.compile(r"(?<!\w)(?:" + "|".join(words) + ")", re.IGNORECASE)
    for text in texts:
        found = pattern.search(text)
        if found is None:
            continue
        start, end = max(0, found.start() - around), min(len(text), found.end() + around)
        window = text[start:end]
        shown = pattern.sub(lambda m: f"[{m.group(0)}]", window)
        return ("…" if start else "") + " ".join(shown.split()) + ("…" if end < len(text) else "")
    return ""


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

    def _create(self) -> None:
        """Make the index file whole, atomically: build it in a private temporary file, then link it into place."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        temp = self.root / f"{TEMP_PREFIX}{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
        try:
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            db = sqlite3.connect(temp, timeout=SQLITE_BUSY_TIMEOUT_S, isolation_level=None)
            try:
                _ensure_schema(db)
            finally:
                db.close()  # the last connection: WAL checkpointed, -wal and -shm removed
            with open(temp, "rb") as handle:
                os.fsync(handle.fileno())
            try:
                os.link(temp, self.path)  # never over an index another writer made meanwhile
            except FileExistsError:
                pass
            except OSError:  # no hard links here: a rename (the same outcome but for that race)
                if not self.path.exists():
                    os.replace(temp, self.path)
            _fsync_dir(self.root)
        finally:
            for leftover in (temp, temp.with_name(temp.name + "-wal"), temp.with_name(temp.name + "-shm")):
                with contextlib.suppress(OSError):
                    leftover.unlink()

    @contextlib.contextmanager
    def connect(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """An autocommit connection to the index (schema ensured when writing), closed on exit.

        Raises
        ------
        ArchiveError
            If the index cannot be opened or a statement fails.
        """
        try:
            if write and not self.path.exists():
                self._create()
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

    def insert(self, row: tuple[Any, ...], fts: tuple[Any, ...], *, replace: bool = False) -> None:
        """Insert one archive's row and its searchable text in one transaction (rolled back on failure);
        ``replace``: a row already there (a recovery that ran twice) is left as it is."""
        with self.connect(write=True) as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                if replace and db.execute("SELECT 1 FROM archives WHERE ref = ?", (row[0],)).fetchone():
                    db.execute("ROLLBACK")
                    return
                db.execute("INSERT INTO archives VALUES (?, ?, ?, ?, ?, ?, ?)", row)
                db.execute("INSERT INTO archive_fts (ref, summary, keywords, body) VALUES (?, ?, ?, ?)", fts)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _readable(self) -> bool:
        """True when the index exists and has its tables (a 0-byte or table-less file holds no archive)."""
        if not self.path.is_file() or self.path.stat().st_size == 0:
            return False
        with self.connect(write=False) as db:
            names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        return {"archives", "archive_fts"} <= names

    def ids(self) -> set[tuple[str, str]]:
        """(session, id) of every indexed archive; empty without an index."""
        if not self._readable():
            return set()
        with self.connect(write=False) as db:
            return {(a, b) for a, b in db.execute("SELECT session, id FROM archives")}

    def lookup(self, ref: str) -> tuple[str, str, int, str] | None:
        """(session, id, message count, SHA-256) of ``ref``, or None when the index or the row is absent."""
        if not self._readable():
            return None
        with self.connect(write=False) as db:
            return db.execute("SELECT session, id, message_count, sha256 FROM archives WHERE ref = ?", (ref,)).fetchone()

    def with_count(self, session: str, message_count: int) -> list[tuple[str, str]]:
        """``(ref, sha256)`` of every indexed archive of ``session`` holding ``message_count`` messages,
        newest first (SHA-256 of its JSONL file); empty when there is none or no index."""
        if not self._readable():
            return []
        with self.connect(write=False) as db:
            return db.execute("SELECT ref, sha256 FROM archives WHERE session = ? AND message_count = ? ORDER BY id DESC",
                              (session, message_count)).fetchall()

    def search(self, match: str, session: str | None, limit: int, terms: Sequence[str] = ()) -> list[tuple[Any, ...]]:
        """Rows (ref, session, created, summary, snippet, message count, bm25) matching the FTS5 ``match``
        (:func:`fts_query`), best first; [] when no index exists. The snippet is :func:`snippet_of`
        ``terms`` in the summary, keywords, then head text.

        Raises
        ------
        ArchiveError
            If the search takes more than :data:`MAX_QUERY_STEPS` SQLite steps (a query matching
            too much: more specific terms help).
        """
        if not self._readable():
            return []
        sql = (
            "SELECT a.ref, a.session, a.created, a.summary, a.message_count,"
            f" bm25(archive_fts, {', '.join(map(str, _BM25_WEIGHTS))}) AS rank, archive_fts.rowid"
            " FROM archive_fts JOIN archives a ON a.ref = archive_fts.ref WHERE archive_fts MATCH ?"
        )
        params: list[Any] = [match]
        if session is not None:
            sql += " AND a.session = ?"
            params.append(session)
        sql += " ORDER BY rank, a.id DESC LIMIT ?"
        params.append(limit)
        steps = [0]

        def budget() -> int:
            steps[0] += _PROGRESS_EVERY
            return 1 if steps[0] > MAX_QUERY_STEPS else 0

        with self.connect(write=False) as db:
            db.set_progress_handler(budget, _PROGRESS_EVERY)
            try:
                rows = db.execute(sql, params).fetchall()
                out = []
                for ref, sess, created, summary, count, rank, rowid in rows:
                    keywords, body = db.execute("SELECT keywords, body FROM archive_fts WHERE rowid = ?", (rowid,)).fetchone()
                    out.append((ref, sess, created, summary, snippet_of((summary, keywords, body), terms), count, rank))
            except sqlite3.OperationalError as exc:
                if "interrupted" in str(exc):
                    raise ArchiveError(
                        f"the search was stopped after {MAX_QUERY_STEPS:,} steps: the query matches too much; use fewer or more specific terms"
                    ) from exc
                raise
        return out
