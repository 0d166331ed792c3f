"""Values shared by the pipeline stages (DESIGN §5) and the archive protocol they call.

The stages pass these between them; none of them does IO. An :class:`Archiver` is the only
side effect the orchestrator needs besides writing the output, and it is passed in
(dependency injection, as httpx takes a transport): the default store lives in
``dp_compact.pipeline.archive`` (``ArchiveStore``), tests pass an in-memory fake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["API_ANTHROPIC", "API_OPENAI", "Anchor", "Api", "Archiver", "Violation"]

Api = Literal["anthropic", "openai"]
API_ANTHROPIC: Api = "anthropic"
API_OPENAI: Api = "openai"


@runtime_checkable
class Archiver(Protocol):
    """Stores the head verbatim and returns a reference to it (DESIGN §5.6).

    Implementations: ``dp_compact.pipeline.archive.ArchiveStore`` (JSONL + metadata, SQLite
    index, ``restore``/``search``); any object with this ``write`` method will do.
    """

    def write(self, session_id: str, head_raw: list[dict[str, Any]], metadata: dict[str, Any]) -> str:
        """Archive ``head_raw`` (the head's messages as read, in order) with ``metadata``.

        Parameters
        ----------
        session_id : str
            A file-name-safe name of the session (``[A-Za-z0-9._-]``).
        head_raw : list of dict
            The head messages in their source API shape, unchanged.
        metadata : dict
            JSON-ready: summary, anchors, paths, identifiers, keywords, token counts, time, ...

        Returns
        -------
        str
            The reference ``archive://<session>/<id>`` written into the summary message.
        """
        ...


@dataclass(frozen=True, slots=True)
class Anchor:
    """A short verbatim snippet of a head message kept next to the summary (DESIGN §5.4).

    ``index`` is the message's 0-based position in the live conversation (the head starts at
    0), ``role`` its role, ``snippet`` at most ``ANCHOR_SNIPPET_CHARS`` characters of its text and
    ``score`` the importance that selected it.
    """

    index: int
    role: str
    snippet: str
    score: float

    def render(self) -> str:
        """The anchor as one line of the ``[anchors]`` section: ``- #index role: snippet``."""
        return f"- #{self.index} {self.role}: {self.snippet}"


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken structural rule of an API (DESIGN §5.7), found by :mod:`.validate`.

    ``index`` is the 0-based position of the offending message in the file (system messages
    included), ``rule`` a short stable name (``roles-alternate``, ``orphan-tool-result``, ...).
    """

    index: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"message {self.index}: {self.rule}: {self.detail}"
