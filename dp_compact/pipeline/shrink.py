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
from dp_compact.conversation import Message, Session
from dp_compact.settings import Settings

__all__ = [
    "PREVIEW_MAX_CHARS",
    "PREVIEW_MIN_CHARS",
    "SHRINK_KEEP_TURNS",
    "SHRINK_THRESHOLD_CHARS",
    "ShrinkResult",
    "preview",
    "replace_results",
    "shrink_message",
    "shrink_messages",
    "shrink_session",
    "shrunk_statement",
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
#: Opens every preview (:func:`preview`).
_HEADER = "[tool result shrunk by dp-compact:"


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
    header = f"{_HEADER} {len(text):,} characters, {text.count(chr(10)) + 1:,} lines of {kind}]"
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


def replace_results(message: Message, texts: Sequence[str | None]) -> Message:
    """A copy of ``message`` whose tool results are replaced by ``texts`` (None: kept), in its fields and its ``raw``.

    ``texts`` holds one entry per tool result of the message, in order. The result keeps its
    call id (and ``is_error``); the message's other blocks (text, images outside the results)
    and ``raw`` keys are kept; ``message`` itself is not changed. The one home of this rewrite:
    :func:`shrink_message` (previews) and :mod:`.clear` (placeholders) both call it.
    """
    if not any(t is not None for t in texts):
        return message
    results = tuple(r if t is None else replace(r, text=t) for r, t in zip(message.tool_results, texts, strict=True))
    raw = _shrunk_raw(message.raw, texts)
    images = text_and_images(raw.get("content"))[1] if isinstance(raw, dict) else message.images
    return replace(message, tool_results=results, raw=raw, images=images)


def shrink_message(message: Message) -> Message:
    """``message`` with every tool result over the threshold replaced by its :func:`preview`."""
    return replace_results(message, [preview(r.text) if len(r.text) > SHRINK_THRESHOLD_CHARS else None for r in message.tool_results])


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


#: Opens the statement a shrunk file carries in its first preview: what the conversation ran with.
SHRUNK_STATEMENT = "; conversation when shrunk: "


def shrunk_statement(*, model: str | None, window: int, context_tokens: int, n_messages: int,
                     avg_tokens: float | None, token_ratio: float | None,
                     totals: tuple[int, int, int] | None = None, prefix_tokens: int | None = None,
                     write_1h_share: float | None = None) -> str:
    """What a file ``dp-compact shrink`` writes states about its conversation, in the first preview's header.

    The output has no usage records and no place for the model, so the planner would read it
    with the default profile's window and V + T; this statement (read back by
    :func:`dp_compact.sessions.common.shrunk_recorded`) keeps the model, window (tokens), the
    current context after shrinking (tokens, with the live messages it covers), avg (prompt
    tokens per call), the measured token ratio, the share of 1-hour cache writes and ``totals``, the whole conversation's user turns,
    LLM calls and compactions (t, the calls behind L, and c of DESIGN §2: the shrunk file holds
    only the live part, after the last recorded compaction), so that the shrunk file is planned
    as the conversation it is.

    >>> shrunk_statement(model="m", window=200_000, context_tokens=1_234, n_messages=9, avg_tokens=None, token_ratio=None)
    '; conversation when shrunk: model m; window 200,000 tokens; context 1,234 tokens in 9 messages'
    """
    parts = ([f"model {model}"] if model else []) + [f"window {window:,} tokens", f"context {context_tokens:,} tokens in {n_messages} messages"]
    parts += [f"avg {round(avg_tokens):,} prompt tokens per call"] if avg_tokens else []
    parts += [f"ratio {token_ratio:.4f} provider tokens per cl100k token"] if token_ratio else []
    parts += [f"prefix {prefix_tokens:,} tokens"] if prefix_tokens else []
    parts += [f"writes {100 * write_1h_share:.0f}% 1-hour entries"] if write_1h_share else []
    parts += [f"history {totals[0]:,} user turns, {totals[1]:,} LLM calls, {totals[2]:,} compactions"] if totals else []
    return SHRUNK_STATEMENT + "; ".join(parts)


def _with_statement(message: Message, statement: str) -> Message:
    """``message`` (a shrunk one) with ``statement`` added to its first preview's header line."""
    index = next(i for i, r in enumerate(message.tool_results) if r.text.startswith(_HEADER))
    text = message.tool_results[index].text
    end = text.index("]")
    new = text[:end] + statement + text[end:]
    results = tuple(replace(r, text=new) if i == index else r for i, r in enumerate(message.tool_results))
    previews = [new if i == index else (r.text if r.text.startswith(_HEADER) else None) for i, r in enumerate(message.tool_results)]
    return replace(message, tool_results=results, raw=_shrunk_raw(message.raw, previews))


def statement_for(session: Session, settings: Settings, shrunk: Sequence[Message]) -> str | None:
    """:func:`shrunk_statement` for ``session`` shrunk to ``shrunk``: the current context after
    shrinking is the session's current context (DESIGN §2: last usage plus what was added since)
    less the tokens the previews saved, at the session's own token scale; window, ratio and V as
    :func:`~dp_compact.prepare.prepare` gives them. None when the session's prices or window
    cannot be chosen (the shrunk file then states nothing).
    """
    from dp_compact.errors import SettingsError, UnknownProfileError
    from dp_compact.measure.tokens import count_message_tokens
    from dp_compact.prepare import prepare

    try:
        prepared = prepare(session, settings, use_cache=True)
    except (SettingsError, UnknownProfileError):
        return None
    tokens, ratio = prepared.message_tokens, prepared.token_ratio
    est = prepared.estimates()
    after = count_message_tokens(shrunk, tokenizer=settings.tokenizer)
    after = after if ratio == 1.0 else np.rint(after * ratio).astype(np.int64)
    return shrunk_statement(
        model=session.model, window=prepared.window_tokens, n_messages=len(shrunk),
        context_tokens=max(est.context_tokens - int(tokens.sum() - after.sum()), 0),
        avg_tokens=None if est.avg_source == "default" else est.avg_tokens,
        token_ratio=prepared.evidenced_token_ratio,
        totals=(session.user_turns, session.llm_calls, session.compactions),
        prefix_tokens=prepared.evidenced_v_tokens, write_1h_share=prepared.prices.write_1h_share,
    )


def shrink_session(session: Session, *, keep_turns: int = SHRINK_KEEP_TURNS, settings: Settings | None = None) -> ShrinkResult:
    """Micro-compaction: shrink old, long tool results of ``session``; the recent part untouched.

    Parameters
    ----------
    session : Session
    keep_turns : int
        "Old" means before the first message of the last ``keep_turns`` user turns; those turns
        and everything after them are kept as they are. With fewer user turns nothing is old.
    settings : Settings, optional
        When given, the first preview's header states what the conversation ran with
        (:func:`statement_for`), so that the shrunk file re-plans as the same conversation.

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
    statement = statement_for(session, settings, messages) if settings is not None and changed else None
    if statement:
        first = next(i for i, (a, b) in enumerate(zip(session.messages, messages, strict=True)) if a is not b)
        messages = (*messages[:first], _with_statement(messages[first], statement), *messages[first + 1:])
    return ShrinkResult(messages, count, before, after, boundary)
