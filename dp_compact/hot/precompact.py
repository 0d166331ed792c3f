"""The plan server's work for Claude Code's ``PreCompact`` hook, done after its answers.

A ``PreCompact`` run archives the live conversation before Claude Code compacts it: the transcript
read whole (every message's source), the extractive summary, the archive's files and index rows.
A long-lived process (the plan server, :mod:`dp_compact.hot.server`) does most of that before the
hook comes: once it has answered a transcript's status line, and while no request waits, it works
out each new message's per-text results and token counts (:func:`_prepare_pre_compact`), and,
near a full window, reads the transcript the way the hook does (:func:`_read_whole`), with each
message's archive line (:func:`_encodings`). Once it has answered a ``PreCompact`` run, it flushes
and indexes that archive (:func:`after_reply`). The results are the plain path's, byte for byte
(``tests/test_pre_compact_fast.py``). Importing this module loads nothing beyond the standard
library and :mod:`dp_compact.hot.state`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dp_compact.hot.state import LIVE_STATES, file_signature
from dp_compact._fast import keep_newest

__all__ = ["COMMIT_TRIES", "PREPARE_STEP", "READ_FROM_SHARE", "READ_FROM_TOKENS", "TOKEN_COUNTS", "WHOLE_READS", "after_reply"]

#: What a long-lived process does once it has answered a run (:func:`after_reply`), before it
#: prepares the next ``PreCompact`` hooks (:data:`_PREPARING`): the commits of ``PreCompact``
#: archives (:class:`~dp_compact.pipeline.archive.DeferredArchiver`), as
#: ``(work, tried again when it fails, times tried)``.
_AFTER_REPLY: list[tuple[Any, bool, int]] = []
#: Commits that failed, tried again after the next runs, this many times at the most.
COMMIT_TRIES = 3


def after_reply(waiting: Any = None) -> None:
    """Do what the runs of this process left for after their answer: a plan server calls it once its
    answer is sent. First the commits (:data:`_AFTER_REPLY`, in order): one that fails
    (:class:`~dp_compact.errors.ArchiveError`, an OS error) is tried again after the next runs, up to
    :data:`COMMIT_TRIES` times (until then the archive stays staged, and a later process indexes it
    once this one has exited: :meth:`~dp_compact.pipeline.archive.ArchiveStore.recover`). Then the
    preparation of the ``PreCompact`` hook of the transcripts whose status line was answered
    (:data:`_PREPARING`), a few messages at a time until ``waiting()`` (no arguments) is True: a
    request waits; the rest is done after a later answer. Never raises."""
    pending, _AFTER_REPLY[:] = list(_AFTER_REPLY), []
    for work, retry, tries in pending:
        try:
            work()
        except Exception:  # noqa: BLE001  work after an answer never ends the process that answered
            if retry and tries + 1 < COMMIT_TRIES:
                _AFTER_REPLY.append((work, retry, tries + 1))
    try:
        _prepare_some(waiting)
    except Exception:  # noqa: BLE001  a preparation only saves time: dropped when it fails
        _PREPARING.clear()


#: Transcript -> (its live messages as its last status line read them, the first of them not yet
#: prepared, the working folder a call before that one named, whether to read it whole too): the
#: ``PreCompact`` preparation :func:`after_reply` works through (:func:`_prepare_pre_compact`), at
#: most :data:`LIVE_STATES`.
_PREPARING: dict[Path, tuple[Any, int, str | None, bool]] = {}
#: Transcript -> (messages prepared, the working folder after them, the first message's text): where
#: the next preparation of that transcript starts.
_PREPARED: dict[Path, tuple[int, str | None, str]] = {}
#: Messages prepared between two looks at whether a request waits (a few ms of work).
PREPARE_STEP = 8
#: Token counts :class:`_TokenCounts` keeps at the most (a 16-byte key and an int each, ~10 MB in all).
TOKEN_COUNTS = 1 << 16
#: Share of its window, and tokens, from either of which a transcript's context is large enough
#: for a compaction to come (Claude Code compacts by itself near the window's end, and a person
#: asks ``/compact`` of a long conversation): the preparation after its status line then also
#: reads it whole (:func:`_read_whole`, some 10-30 ms of this process's time each time it grew).
READ_FROM_SHARE, READ_FROM_TOKENS = 0.6, 100_000
#: Transcript -> ((size, mtime in ns) of the file as read, the pickled reading to continue from, the
#: session read, every message's source parsed, and what the archive makes of each source: its
#: JSON text as read -> (the source parsed, its archive line, its searchable strings),
#: :meth:`~dp_compact.pipeline.archive.ArchiveStore.stage`'s ``encoded``): :func:`_read_whole`'s,
#: at most :data:`WHOLE_READS`.
_READS: dict[Path, tuple[tuple[int, int], bytes, Any, dict[bytes, tuple[Any, bytes, list[str]]]]] = {}
#: Transcripts whose whole reading :data:`_READS` keeps (the one about to be compacted, and another).
WHOLE_READS = 2


def _nearly_full(plan: Any) -> bool:
    """True when ``plan``'s context fills :data:`READ_FROM_SHARE` of its window or holds
    :data:`READ_FROM_TOKENS` tokens."""
    try:
        context = float(plan.estimates.context_tokens)
        return context >= min(READ_FROM_SHARE * float(plan.prices.max_context_tokens), READ_FROM_TOKENS)
    except (AttributeError, TypeError, ValueError):
        return False


def _read_whole(path: Path, *, start: bool = True) -> Any:
    """The session of the Claude Code transcript ``path`` as the ``PreCompact`` hook reads it
    (:func:`dp_compact.sessions.read_session`, lenient, every message's source parsed), read from
    where this process's last reading of it stopped (:func:`dp_compact.hot.transcript.read_grown`
    with each message's whole source, read back), or the reading kept when the file is as it was
    then; None when it cannot be read that way, or, ``start`` False, when this process has no
    reading of it to continue (the hook then reads it itself, sparing the reading kept for later).
    Each message's source is parsed, and encoded as the archive writes it (:func:`_encoded`), once
    for as long as the transcript holds it."""
    import pickle
    from dataclasses import replace

    from dp_compact.conversation import RawJSON, raw_as_json
    from dp_compact.hot.transcript import NotIncremental, read_grown

    signature = file_signature(path)
    found = _READS.pop(path, None)
    if found is not None and signature is not None and found[0] == signature:
        _READS[path] = found
        return found[2]
    if found is None and not start:
        return None
    try:
        with open(path, "rb") as handle:
            data = handle.read()
        if found is not None and signature is not None and signature[0] < found[0][0]:
            found = None  # shorter than when read: not an append
        state = None if found is None else pickle.loads(found[1])
        with raw_as_json(whole=True):
            session, kept = read_grown(str(path), data, state)
        if session.format != "claude_code":
            return None
        before = found[3] if found is not None else {}
        encoded: dict[bytes, tuple[Any, bytes, list[str]]] = {}
        messages = []
        for message in session.messages:
            raw = message.raw
            if isinstance(raw, RawJSON):
                entry = before.get(raw) or encoded.get(raw) or _encoded(raw)
                encoded[raw] = entry
                message = replace(message, raw=entry[0])
            messages.append(message)
        session = replace(session, messages=tuple(messages))
    except (OSError, NotIncremental, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        return None
    if signature is not None and signature == file_signature(path) and len(data) == signature[0]:  # unchanged while read
        _READS[path] = (signature, kept, session, encoded)
        keep_newest(_READS, WHOLE_READS)
    return session


def _encoded(raw: bytes) -> tuple[Any, bytes, list[str]]:
    """A message's source read as JSON text ``raw``: (its value, its archive line
    :func:`~dp_compact.pipeline.archive.json_line`, its searchable strings
    :func:`~dp_compact.pipeline.archive_index.searchable_strings`)."""
    from dp_compact.conversation import raw_value
    from dp_compact.pipeline.archive import json_line
    from dp_compact.pipeline.archive_index import searchable_strings

    value = raw_value(raw)
    strings: list[str] = []
    searchable_strings(value, strings)
    return value, json_line(value), strings


def _encodings(path: Path, session: Any) -> dict[int, tuple[Any, bytes, list[str]]] | None:
    """``id(source) -> (source, archive line, searchable strings)`` of the sources of ``session``,
    :func:`_read_whole`'s reading of ``path`` (:meth:`~dp_compact.pipeline.archive.ArchiveStore.stage`'s ``encoded``)."""
    found = _READS.get(path)
    if found is None or found[2] is not session:
        return None
    return {id(entry[0]): entry for entry in found[3].values()}


class _TokenCounts:
    """Token counts kept in this process's memory, by the persistent cache's keys: a stand-in for
    :class:`~dp_compact.measure.tokens.TokenCache` (``get_many``, ``put_many``) that the ``PreCompact``
    hook of a long-lived process counts its messages with (the counts are the same: each is the
    count of the text its key digests), spared the cache file's reads and writes. Filled by the
    preparation after a status line (:func:`_prepare_some`) and by the hook itself; the oldest
    counts are forgotten past :data:`TOKEN_COUNTS`."""

    def __init__(self) -> None:
        self._counts: dict[bytes, int] = {}

    def get_many(self, keys: list[bytes]) -> dict[bytes, int]:
        """The counts kept of ``keys``."""
        counts = self._counts
        return {key: counts[key] for key in keys if key in counts}

    def put_many(self, items: dict[bytes, int]) -> None:
        """Keep ``items``' counts."""
        self._counts.update(items)
        keep_newest(self._counts, TOKEN_COUNTS)


#: The token counts of :class:`_TokenCounts` in this process.
_TOKEN_COUNTS = _TokenCounts()


def _prepare_pre_compact(path: Path, messages: Any, *, full: bool = False) -> None:
    """Queue the preparation of ``path``'s ``PreCompact`` hook on its live ``messages`` (as the status
    line just read them): what a compaction derives from each message on its own is worked out
    after the answer (:func:`dp_compact.pipeline.compact.warm_compaction`, remembered by the
    content of each text; their token counts, :class:`_TokenCounts`), from the first message not
    prepared yet (the last one prepared again, which more of the same response may have grown). A
    conversation that is no longer the one prepared (shorter, another first message: compacted)
    is prepared from its start. ``full`` (a context large enough for a compaction to come,
    :func:`_nearly_full`): the transcript is then read whole too (:func:`_read_whole`), as the hook
    will read it."""
    if not messages:
        return
    done, workdir, first = _PREPARED.get(path, (0, None, ""))
    if done > len(messages) or first != messages[0].text:
        done, workdir = 0, None
    _PREPARING.pop(path, None)
    _PREPARING[path] = (messages, max(done - 1, 0), workdir, full)
    keep_newest(_PREPARING, LIVE_STATES)


def _prepare_some(waiting: Any) -> None:
    """Work through :data:`_PREPARING` (:func:`_prepare_pre_compact`) until it is done or
    ``waiting()`` is True; errors end a transcript's preparation (it only saves time)."""
    if not _PREPARING:
        return
    try:
        from dp_compact.measure.tokens import message_token_parts
        from dp_compact.pipeline.compact import warm_compaction
    except ImportError:
        _PREPARING.clear()
        return
    while _PREPARING:
        path = next(iter(_PREPARING))
        messages, at, workdir, full = _PREPARING[path]
        try:
            while at < len(messages):
                if waiting is not None and waiting():
                    _PREPARING[path] = (messages, at, workdir, full)
                    return
                step = messages[at: at + PREPARE_STEP]
                workdir = warm_compaction(step, workdir)
                message_token_parts(step, cache=_TOKEN_COUNTS)
                at = min(at + PREPARE_STEP, len(messages))
        except (ValueError, TypeError, AttributeError, RecursionError):
            pass
        if full and not (waiting is not None and waiting()):
            _read_whole(path)
        del _PREPARING[path]
        _PREPARED.pop(path, None)
        _PREPARED[path] = (at, workdir, messages[0].text if messages else "")
        keep_newest(_PREPARED, LIVE_STATES)
