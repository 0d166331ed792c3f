"""A session file's whole history: one segment per stretch between compaction markers.

:func:`dp_compact.sessions.read_session` keeps the live conversation (after the last compaction
marker, DESIGN §4), and beside it the whole history, every usage record and the markers its reader
found. Calibration and the timeline also need what came before: the first call of the file (for
V), every call with the messages it was sent (token ratio, the recall curve), and the compactions
themselves (summary sizes S). :func:`history_of` cuts one read session into its segments
(:func:`dp_compact.sessions.segments.segments`), so the readers' own rules still decide what a
message is, and the file is read once.

Claude Code (``system``/``compact_boundary``) and Codex (``compacted``) write markers beside their
usage records and are split; other formats give one segment, the live conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dp_compact.conversation import CompactionMarker, Session
from dp_compact.sessions import read_session
from dp_compact.sessions.segments import segments

__all__ = ["CompactionMarker", "History", "history_of", "read_history"]


@dataclass(frozen=True, slots=True)
class History:
    """Every segment of a session file, oldest first.

    Attributes
    ----------
    path, format : str
    segments : tuple[Session, ...]
        Segment ``i`` holds the messages after marker ``i - 1`` up to marker ``i`` and only the
        usage records of the calls made in it; ``user_turns``, ``llm_calls`` and ``compactions``
        count the file up to the segment's end (what the planner would have seen then). The
        last segment's messages are the live conversation; it also keeps the whole file's
        ``compaction_records``, ``history`` and ``call_times``.
    compactions : tuple[CompactionMarker, ...]
        ``len(segments) - 1`` markers (``Session.markers``; none for formats read as one segment).
    """

    path: str
    format: str
    segments: tuple[Session, ...]
    compactions: tuple[CompactionMarker, ...]

    @property
    def live(self) -> Session:
        """The live conversation (the last segment)."""
        return self.segments[-1]


def history_of(session: Session) -> History:
    """The :class:`History` of a session as :func:`~dp_compact.sessions.read_session` gave it (no reading).

    Parameters
    ----------
    session : Session
        A whole file's session, its reader's ``history``, ``usage`` and ``markers`` filled.

    Returns
    -------
    History
        One segment per stretch between markers (Claude Code and Codex), else one segment.
    """
    return History(session.path, session.format, segments(session), session.markers)


def read_history(path: Path | str, *, lenient: bool = False) -> History:
    """Read ``path`` once into its segments between compaction markers (:func:`history_of`).

    Parameters
    ----------
    path : Path or str
        A session file of any supported format; never modified.
    lenient : bool
        Skip malformed lines, as :func:`~dp_compact.sessions.read_session` does.

    Returns
    -------
    History
        One segment per stretch between markers (Claude Code and Codex), else one segment.

    Raises
    ------
    SessionError
        As :func:`~dp_compact.sessions.read_session` (unreadable, malformed, unknown format).
    """
    return history_of(read_session(path, lenient=lenient, raw_json=True))
