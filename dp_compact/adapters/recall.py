"""The recall tool an adapter offers its agent: search and restore over the archive (DESIGN §9).

Framework-free: :class:`Recall` holds an archive and a scope and answers the two questions an
agent asks after a compaction or a clearing of old tool results, as text a model reads:

- :meth:`Recall.search`: the archived heads and cleared results matching words, file paths or identifiers, best first,
  the same search as ``dp-compact recall`` (:meth:`~dp_compact.pipeline.archive.ArchiveStore.search`),
  at most :data:`MAX_RECALL_HITS` hits;
- :meth:`Recall.restore`: the messages archived under an ``archive://<session>/<id>`` key, as they
  were sent, one page of at most ``max_chars`` characters at a time (``offset`` for the next page),
  the same messages as ``dp-compact restore``.

The LangChain middleware wraps these as LangChain tools, the pydantic-ai processor as a
``FunctionToolset``. With scope ``"session"`` (the adapters' default) the agent sees only the
archives of its own conversation: a key of another session is refused, so a model cannot read
another conversation through a reference it was shown. Errors (a malformed or unknown key, a
query beyond the archive's bounds) come back as one line of text, which the model can act on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from dp_compact.errors import ArchiveError

__all__ = ["DEFAULT_RESTORE_CHARS", "MAX_RECALL_HITS", "MAX_RESTORE_CHARS", "RECALL_DESCRIPTION", "RESTORE_DESCRIPTION", "Recall", "Scope", "shortened"]

#: Most hits one search returns to the model (each is ~3 lines: key, summary excerpt, match).
MAX_RECALL_HITS = 20
#: Characters of message JSON one restore page holds by default (~5k tokens) and at most (~25k tokens).
DEFAULT_RESTORE_CHARS, MAX_RESTORE_CHARS = 20_000, 100_000
#: Characters a single message larger than a page is cut to, per string.
_SHORTENED_CHARS = 2_000
#: Which archives the tools see: this conversation's ("session") or every one in the archive ("all").
Scope = Literal["session", "all"]

RECALL_DESCRIPTION = (
    "Search what earlier context compactions removed from this conversation, and the tool results replaced by "
    "'[cleared by dp-compact: ...]' placeholders (the archive). "
    "query: words, file paths, identifiers or commands; every term must match; word* matches a prefix. "
    "Returns archive keys (archive://...) with a summary and the matching text; call dp_restore with a key "
    "to read the original messages."
)
RESTORE_DESCRIPTION = (
    "Read the original messages archived under an archive key (archive://<session>/<id>; a key ending in #msg-N, "
    "as a cleared result's placeholder names, gives that one message), as they were, "
    "one page at a time: call again with offset set to the next_offset it gives until it says there is no more."
)


class Recall:
    """Search and restore over an archive, bounded, for an agent's tool calls.

    Parameters
    ----------
    store : ArchiveStore
        The archive the adapter writes compacted heads and cleared tool results to.
    session : callable returning str
        The current conversation's session id (LangChain: the graph's thread id, read when the
        tool runs), used when ``scope`` is ``"session"``.
    scope : {"session", "all"}
        ``"session"``: only this conversation's archives are searched and restored;
        ``"all"``: every session of the archive (as ``dp-compact recall``).
    """

    def __init__(self, store: Any, session: Callable[[], str], scope: Scope = "session") -> None:
        if scope not in ("session", "all"):
            raise ValueError(f"recall scope must be 'session' or 'all', not {scope!r}")
        self.store, self._session, self.scope = store, session, scope

    def search(self, query: str, limit: int = 5) -> str:
        """The hits for ``query`` as text: key, time, size, summary excerpt and match per hit."""
        limit = max(1, min(int(limit), MAX_RECALL_HITS))
        session = self._session() if self.scope == "session" else None
        try:
            hits = self.store.search(query, session=session, limit=limit)
        except ArchiveError as exc:
            return f"error: {exc}"
        if not hits:
            return f"no archived messages match {query!r}"
        lines = []
        for hit in hits:
            lines.append(f"{hit.ref}  ({hit.message_count} messages, archived {hit.created})")
            lines.append(f"  summary: {' '.join(hit.summary.split()) or '(none)'}")
            if hit.snippet:
                lines.append(f"  match: {' '.join(hit.snippet.split())}")
        return "\n".join(lines)

    def restore(self, ref: str, offset: int = 0, max_chars: int = DEFAULT_RESTORE_CHARS) -> str:
        """One page of the messages archived under ``ref`` as text: a header line, then one JSON message a line."""
        from dp_compact.pipeline.archive import ARCHIVE_SCHEME, session_id_for

        ref = ref.strip()
        max_chars = max(1_000, min(int(max_chars), MAX_RESTORE_CHARS))
        if self.scope == "session":
            own = f"{ARCHIVE_SCHEME}{session_id_for(self._session())}/"
            if not ref.startswith(own):
                return f"error: {ref} is not an archive of this conversation (its keys start with {own})"
        try:
            messages = self.store.restore(ref)
        except ArchiveError as exc:
            return f"error: {exc}"
        offset = max(0, int(offset))
        page, used, at = [], 0, offset
        while at < len(messages):
            line = json.dumps(messages[at], ensure_ascii=False)
            if page and used + len(line) > max_chars:
                break
            if len(line) > max_chars:
                line = json.dumps(shortened(messages[at], min(_SHORTENED_CHARS, max_chars // 4)), ensure_ascii=False)
            page.append(line)
            used += len(line)
            at += 1
        more = f"next_offset={at}" if at < len(messages) else "no more messages"
        header = f"{ref}: messages {offset}..{at - 1} of {len(messages)}; {more}" if page else f"{ref}: offset {offset} is past the last message ({len(messages)})"
        return "\n".join([header, *page])


def shortened(value: Any, limit: int, hint: str = "") -> Any:
    """``value`` (a message as JSON) with every string longer than ``limit`` characters cut, saying
    how much was left out and, when given, where the whole is (``hint``)."""
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"…[{len(value) - limit:,} characters more{': ' + hint if hint else ''}]"
    if isinstance(value, list):
        return [shortened(v, limit, hint) for v in value]
    if isinstance(value, dict):
        return {k: shortened(v, limit, hint) for k, v in value.items()}
    return value
