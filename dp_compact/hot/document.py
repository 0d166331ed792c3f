"""A session file that is one JSON document, read whole on the hot path (:class:`DocumentState`).

Agents that keep their conversation as one JSON value (Cline's ``api_conversation_history.json``
array, SWE-agent's ``.traj``, mini-swe-agent's ``.traj.json``, ``{"messages": [...]}`` files,
Harbor ATIF trajectories) write the file whole after each call: an "append" is a rewrite, so no
reader state could be continued from. Such a file is small, and its parse is a few milliseconds;
what a process pays for a plan is its imports and settings (Typer, pydantic, the price data), and
what a plan pays is the per-text work (token counts), which the token cache and the per-text memos
keep by text. So the kept state of a document says only that the file is one, and how the command
reads it (``lenient``): the hot path (:func:`dp_compact.hot.lines.read_grown_any`) reads the whole
file with the application's reader (:func:`dp_compact.sessions.read_session`, ``raw_json=True``),
and plans it with the kept settings and prices, in the plan server when one runs. The session is
the application's by construction, whatever changed in the file.

Raises :class:`~dp_compact.hot.transcript.NotIncremental` (the application runs, and reports what
it reports): the file is JSONL by its first line now (the application's run keeps the state of its
format's incremental reader, if any); the reader raises (a broken document, a file that is not a
conversation, a file that cannot be read).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from dp_compact.conversation import Session
from dp_compact.hot.transcript import NotIncremental

__all__ = ["DocumentState", "document_state", "read_document"]


class DocumentState:
    """The kept state of a session file that is one JSON document: read it whole, ``lenient`` as
    the command reads it (``plan`` strict, the status line lenient). Immutable; a read leaves it as it is."""

    __slots__ = ("lenient",)

    def __init__(self, lenient: bool) -> None:
        self.lenient = lenient

    def __reduce__(self) -> tuple[Any, ...]:
        return DocumentState, (self.lenient,)

    def __eq__(self, other: object) -> bool:
        return type(other) is DocumentState and other.lenient == self.lenient

    def __hash__(self) -> int:
        return hash((DocumentState, self.lenient))


def _jsonl_now(data: bytes) -> bool:
    """True when ``data`` is JSONL by its first line, as :func:`dp_compact.sessions.source.read_source` tells it."""
    from dp_compact.sessions.source import UTF8_BOM, _jsonl_by_first_line

    return _jsonl_by_first_line(data.removeprefix(UTF8_BOM))


def read_document(path: Path | str, data: bytes, state: DocumentState | None) -> tuple[Session, bytes]:
    """The session of the document named ``path`` (its bytes ``data``, as read just before), read
    whole as the application reads it, and the state, pickled, to keep (module docstring).

    ``state`` None reads it strictly (as ``plan`` does). Raises NotIncremental as the module
    docstring says.
    """
    from dp_compact.sessions import read_session

    if state is None:
        state = DocumentState(False)
    elif type(state) is not DocumentState:
        raise NotIncremental("the state is not of a JSON document")
    if _jsonl_now(data):
        raise NotIncremental("the file is JSONL")
    try:
        session = read_session(path, lenient=state.lenient, raw_json=True)
    except Exception as exc:  # the application reads it again and reports what it reports
        raise NotIncremental(f"the document cannot be read here: {exc}") from exc
    return session, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def document_state(path: Path | str, data: bytes, lenient: bool) -> bytes | None:
    """The pickled :class:`DocumentState` of ``path`` (its bytes ``data``) when the application reads
    it as one JSON document (:func:`dp_compact.sessions.source.read_source`; or one JSON object on one line,
    which the application reads as a document when no JSONL reader takes it), else None (JSONL, unreadable)."""
    from dp_compact.errors import DpCompactError
    from dp_compact.sessions.source import read_source

    if _jsonl_now(data):
        return None
    try:
        source = read_source(path, lenient=lenient)
        one_line = source.records is not None and len(source.records) == 1 and isinstance(source.sample[0].value, dict)
        if source.document is None and not one_line:  # one object on one line: a document written without indent
            return None
    except (DpCompactError, OSError, ValueError):
        return None
    return pickle.dumps(DocumentState(lenient), protocol=pickle.HIGHEST_PROTOCOL)
