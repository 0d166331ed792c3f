"""Shrink stale tool results (DESIGN §5.3) and micro-compaction (``dp-compact shrink``).

A tool result longer than ``SHRINK_THRESHOLD_CHARS`` becomes a structured preview of
``PREVIEW_MIN_CHARS``–``PREVIEW_MAX_CHARS`` characters that states the original size: a JSON
result keeps its key fields (ids, names, status, errors, counts first), a text result keeps
its error lines, its first lines and its last lines. Thresholds are the seed's (seeds/000 §4.3:
``SHRINK_THRESHOLD`` 800 characters, previews of 400–600 characters).

Everything works on copies: the head handed to the summarizer, or the messages of a session
written to a new file. Messages and their ``raw`` dicts are never mutated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dp_compact.sessions.common import text_and_images
from dp_compact.sessions.model import Message, Session

__all__ = [
    "PREVIEW_MAX_CHARS",
    "PREVIEW_MIN_CHARS",
    "SHRINK_KEEP_TURNS",
    "SHRINK_THRESHOLD_CHARS",
    "ShrinkResult",
    "preview",
    "shrink_message",
    "shrink_messages",
    "shrink_session",
]

SHRINK_THRESHOLD_CHARS = 800  # seeds/000 §4.3 SHRINK_THRESHOLD
PREVIEW_MIN_CHARS = 400  # seeds/000 §4.3: previews of 400-600 characters
PREVIEW_MAX_CHARS = 600
#: Micro-compaction leaves the last SHRINK_KEEP_TURNS user turns (and everything after the
#: first of them) untouched: "old" tool results are those before that point.
SHRINK_KEEP_TURNS = 3

_ERROR_LINE = re.compile(r"\b(error|exception|traceback|failed|failure|fatal|panic|denied|not found|errno)\b", re.I)
_KEY_FIELD = re.compile(r"(^|_)(id|name|status|state|error|errors|message|code|path|file|title|type|result|summary|count|total|url|ok|success)s?$", re.I)
_SPACES = re.compile(r"[ \t]{4,}")


def _clip(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters (an ellipsis marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)] + "…"


def _value_repr(value: Any) -> str:
    """A short form of a JSON value: scalars clipped, containers by size."""
    if isinstance(value, dict):
        return "{" + ", ".join(list(value)[:4]) + (", …}" if len(value) > 4 else "}")
    if isinstance(value, list):
        return f"[{len(value)} items]"
    return _clip(json.dumps(value, ensure_ascii=False), 60)


def _json_lines(value: Any) -> list[str]:
    """Key fields of a parsed JSON result, most telling first."""
    if isinstance(value, list):
        first = _clip(json.dumps(value[0], ensure_ascii=False), 160) if value else ""
        return [f"array of {len(value)} items" + (f"; first: {first}" if first else "")]
    if not isinstance(value, dict):
        return [_clip(json.dumps(value, ensure_ascii=False), 200)]
    keys = sorted(value, key=lambda k: not _KEY_FIELD.search(str(k)))
    lines = [f"keys: {_clip(', '.join(map(str, value)), 160)}"]
    lines += [f"{key}: {_value_repr(value[key])}" for key in keys[:8]]
    return lines


def _parse_json(text: str) -> Any | None:
    """The result as JSON when it is an object or array, else None."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        return json.loads(stripped)
    except ValueError:
        return None


def preview(text: str) -> str:
    """A 400–600 character structured preview of a long tool result.

    Parameters
    ----------
    text : str
        The tool result's text, longer than ``SHRINK_THRESHOLD_CHARS`` characters.

    Returns
    -------
    str
        A header stating the original size (characters and lines) and kind, then key fields
        (JSON) or error lines (text), then the first and last lines, cut to at most
        ``PREVIEW_MAX_CHARS`` characters.

    Examples
    --------
    >>> p = preview("line\\n" * 400)
    >>> p.startswith("[tool result shrunk by dp-compact: 2,000 characters, 401 lines")
    True
    >>> 400 <= len(p) <= 600
    True
    """
    parsed = _parse_json(text)
    kind = "JSON" if parsed is not None else "text"
    header = f"[tool result shrunk by dp-compact: {len(text):,} characters, {text.count(chr(10)) + 1:,} lines of {kind}]"
    if parsed is not None:
        structured = _json_lines(parsed)
    else:
        structured = [f"error line: {_clip(line, 140)}" for line in text.splitlines() if _ERROR_LINE.search(line)][:3]
    body = "\n".join([header, *structured])[: PREVIEW_MAX_CHARS - 120]
    room = PREVIEW_MAX_CHARS - 20 - len(body)
    head_part, tail_part = _SPACES.sub("   ", text[: room * 3 // 5]), _SPACES.sub("   ", text[-(room * 2 // 5) :])
    out = f"{body}\nfirst: {head_part.rstrip()}\n…\nlast: {tail_part.lstrip()}"
    return out[:PREVIEW_MAX_CHARS]


def _shrunk_raw(raw: Any, previews: Sequence[str | None]) -> Any:
    """A copy of a tool-result message's ``raw`` with its long results replaced by previews.

    ``previews`` holds, per tool result of the message in order, its preview or None (kept).
    """
    if not isinstance(raw, dict):
        return raw
    content = raw.get("content")
    if "tool_call_id" in raw or not isinstance(content, list):  # OpenAI tool message / positional result
        new = next((p for p in previews if p is not None), None)
        return raw if new is None else {**raw, "content": new}
    slots = iter(previews)
    blocks = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            new = next(slots, None)
            block = block if new is None else {**block, "content": new}
        blocks.append(block)
    return {**raw, "content": blocks}


def shrink_message(message: Message) -> Message:
    """``message`` with every tool result over the threshold replaced by its :func:`preview`."""
    previews = [preview(r.text) if len(r.text) > SHRINK_THRESHOLD_CHARS else None for r in message.tool_results]
    if not any(p is not None for p in previews):
        return message
    results = tuple(r if p is None else replace(r, text=p) for r, p in zip(message.tool_results, previews, strict=True))
    raw = _shrunk_raw(message.raw, previews)
    images = text_and_images(raw.get("content"))[1] if isinstance(raw, dict) else message.images
    return replace(message, tool_results=results, raw=raw, images=images)


def shrink_messages(messages: Sequence[Message], *, upto: int | None = None) -> tuple[Message, ...]:
    """A copy of ``messages`` whose long tool results before index ``upto`` are previews.

    Parameters
    ----------
    messages : sequence of Message
    upto : int, optional
        Only messages ``[0, upto)`` are shrunk (default: all).

    Returns
    -------
    tuple of Message
        Same length and order; unchanged messages are the same objects.
    """
    stop = len(messages) if upto is None else upto
    return tuple(shrink_message(m) if i < stop and m.tool_results else m for i, m in enumerate(messages))


@dataclass(frozen=True, slots=True)
class ShrinkResult:
    """Outcome of micro-compaction: the new messages, how many results were shrunk, characters before/after."""

    messages: tuple[Message, ...]
    shrunk_results: int
    chars_before: int
    chars_after: int
    protected_from: int


def _old_boundary(messages: Sequence[Message], keep_turns: int) -> int:
    """Index of the first message of the last ``keep_turns`` user turns (0 when there are fewer)."""
    if keep_turns <= 0:
        return len(messages)
    users = np.flatnonzero(np.fromiter((m.is_user_turn for m in messages), dtype=bool, count=len(messages)))
    return int(users[-keep_turns]) if users.size >= keep_turns else 0


def shrink_session(session: Session, *, keep_turns: int = SHRINK_KEEP_TURNS) -> ShrinkResult:
    """Micro-compaction: shrink old, long tool results of ``session``; the recent part untouched.

    Parameters
    ----------
    session : Session
    keep_turns : int
        "Old" means before the first message of the last ``keep_turns`` user turns; those turns
        and everything after them are kept as they are. With fewer user turns nothing is old.

    Returns
    -------
    ShrinkResult
    """
    boundary = _old_boundary(session.messages, keep_turns)
    messages = shrink_messages(session.messages, upto=boundary)
    changed = [(a, b) for a, b in zip(session.messages, messages, strict=True) if a is not b]
    before = sum(len(r.text) for a, _ in changed for r in a.tool_results)
    after = sum(len(r.text) for _, b in changed for r in b.tool_results)
    count = sum(len(r.text) > SHRINK_THRESHOLD_CHARS for a, _ in changed for r in a.tool_results)
    return ShrinkResult(messages, count, before, after, boundary)
