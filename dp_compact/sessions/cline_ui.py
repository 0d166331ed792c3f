"""Cline's UI log (``ui_messages.json``): recognised so it can be refused clearly (DESIGN §4).

The log is a JSON array of ``{ts, type: "say"|"ask", say|ask: <subtype>, text, ...}`` entries
the extension renders; it is not the conversation sent to the model. The conversation of the
same task is ``api_conversation_history.json`` beside it, which the ``anthropic`` reader reads.
"""

from __future__ import annotations

from typing import Any, NoReturn

from dp_compact.errors import NotASessionError
from dp_compact.sessions.source import SNIFF_RECORDS, Source

__all__ = ["DESCRIPTION", "FORMAT", "IS_SESSION", "read", "sniff"]

FORMAT = "cline_ui"
DESCRIPTION = "Cline UI log (ui_messages.json: [{ts, type: say|ask}]); not a conversation"
IS_SESSION = False


def _is_entry(value: Any) -> bool:
    """A ``{ts: epoch ms, type: say|ask}`` entry."""
    return (
        isinstance(value, dict)
        and value.get("type") in ("say", "ask")
        and isinstance(value.get("ts"), (int, float))
        and not isinstance(value.get("ts"), bool)
    )


def sniff(source: Source) -> bool:
    """True for a JSON array (or JSONL) whose first entries (``SNIFF_RECORDS``) are all Cline ``say``/``ask`` entries."""
    if source.records is not None:
        values = [r.value for r in source.sample]
    elif isinstance(source.document, list):
        values = source.document[:SNIFF_RECORDS]
    else:
        return False
    return bool(values) and all(_is_entry(v) for v in values)


def read(source: Source) -> NoReturn:
    """Refuse the UI log.

    Raises
    ------
    NotASessionError
        Always: the message names the file and asks for ``api_conversation_history.json``.
    """
    raise NotASessionError(
        source.path,
        None,
        "this is a Cline UI log (ui_messages.json: say/ask entries the extension displays), not a conversation; "
        "give the matching api_conversation_history.json of the same task instead",
    )
