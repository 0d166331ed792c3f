"""A session's whole history as segments between its compaction markers, from the one read.

:func:`~dp_compact.sessions.read_session` keeps the live conversation (after the last compaction
marker, DESIGN §4) and, beside it, every message the file records (``Session.history``), every
usage record, and the markers its reader found (``Session.markers``: where each one falls in the
history and in the usage records). :func:`segments` cuts those into one session per stretch
between markers, each as its reader would have read the file up to that marker: the file is not
read again, and no module but the readers looks at its records.
"""

from __future__ import annotations

from dataclasses import replace

from dp_compact.conversation import Session
from dp_compact.sessions.common import build_session

__all__ = ["segments"]


def segments(session: Session) -> tuple[Session, ...]:
    """``session``'s history split at its compaction markers, oldest first.

    Parameters
    ----------
    session : Session
        As a reader gave it (``history``, ``usage``, ``markers`` and ``compaction_records`` filled).

    Returns
    -------
    tuple of Session
        ``len(session.markers) + 1`` segments. Segment ``i`` holds the messages after marker
        ``i - 1`` up to marker ``i`` (its ``history`` every message up to marker ``i``) and only
        the usage records of the calls made after marker ``i - 1``; ``user_turns``, ``llm_calls``
        and ``compactions`` count the file up to the marker (what the planner would have seen
        then), by the readers' own rules (:func:`~dp_compact.sessions.common.build_session`).
        The last segment is ``session`` itself with only the usage records after the last
        marker; it keeps the whole file's ``compaction_records``. A session without markers is
        one segment, ``session`` as it is.

    Notes
    -----
    Where a reader's reading of the whole file differs from its reading of the file cut at a
    marker, the segment is the whole file's: a record whose parent comes after the marker
    (Claude Code ``parentUuid``) stays where the whole read puts it, and a call id used again in
    a later segment keeps the whole read's renaming. The model, window and system prompt of a
    segment are the file's (the last it records).
    """
    if not session.markers:
        return (session,)
    parts: list[Session] = []
    start, previous_line = 0, 0
    for count, marker in enumerate(session.markers):
        part = build_session(
            path=session.path, format=session.format, messages=session.history[: marker.messages_before],
            usage=session.usage[: marker.usage_before], live_start=start, compactions=count, model=session.model,
            context_window=session.context_window, window_source=session.window_source, system_text=session.system_text,
            skipped_lines=sum(1 for n in session.skipped_line_numbers if n < marker.line),
            compaction_records=tuple(r for r in session.compaction_records if r.line < marker.line),
        )
        parts.append(_calls_after(part, previous_line))
        start, previous_line = marker.messages_before, marker.line
    parts.append(_calls_after(session, previous_line))
    return tuple(parts)


def _calls_after(session: Session, line: int) -> Session:
    """``session`` with only the usage records of calls after source line ``line``."""
    return replace(session, usage=tuple(u for u in session.usage if u.line > line))
