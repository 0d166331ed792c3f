"""Anchors (DESIGN §5.4): a few short verbatim snippets of the most important head messages.

Each head message gets an importance score from the signals of seeds/000 §4.3 (user messages,
file paths, identifiers, error/failure words, tool calls), plus a small bonus for recency; the
best ``ANCHOR_LIMIT`` become :class:`~dp_compact.pipeline.types.Anchor` s with their message
index, in conversation order. Thinking text is never used (signed or not, it is internal).

Standing user instructions ("always …", "never …", "from now on …", "don't …") are collected
here too: from the head's user turns and, when the head opens with a previous summary message,
from that summary, so that they survive any number of successive compactions.
"""

from __future__ import annotations

from collections.abc import Sequence

from dp_compact.pipeline.extract import (
    call_names,
    clean_user_text,
    error_lines,
    identifiers,
    instruction_sentences,
    paths,
    user_turn_texts,
)
from dp_compact.pipeline.texts import parse_sections
from dp_compact.pipeline.types import Anchor
from dp_compact.conversation import Message, is_summary_text
from dp_compact.text.summary_text import summary_body

__all__ = [
    "ANCHOR_LIMIT",
    "ANCHOR_SNIPPET_CHARS",
    "carried_instructions",
    "head_instructions",
    "score_message",
    "select_anchors",
    "snippet",
]

ANCHOR_LIMIT = 5  # anchors per compaction: "a few" (DESIGN §5.4); seeds/000 shows two to five
ANCHOR_SNIPPET_CHARS = 200  # characters per anchor snippet
INSTRUCTION_CHARS = 300  # longest instruction sentence carried verbatim
_WEIGHTS = {"user": 3.0, "instruction": 2.0, "path": 1.5, "identifier": 0.5, "error": 2.0, "tool_error": 1.0, "call": 1.0}
_RECENCY_BONUS = 1.0


def _clip(text: str, limit: int = ANCHOR_SNIPPET_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _own_text(message: Message) -> str:
    """``message.text``, for a user message without the blocks a client injects (:func:`clean_user_text`)."""
    return clean_user_text(message.text) if message.role == "user" else message.text


def _visible_text(message: Message) -> str:
    """Text a person would read in ``message``: text, tool calls and results, never thinking."""
    parts = [_own_text(message)]
    parts += [f"{c.name} {c.arguments}" for c in message.tool_calls]
    parts += [r.text for r in message.tool_results]
    return "\n".join(p for p in parts if p)


def score_message(message: Message) -> float:
    """Importance of one head message (higher is more worth keeping verbatim).

    Signals (seeds/000 §4.3): a user turn, a standing instruction in it, file paths (up to 3),
    identifiers (up to 2), error/failure words, failed tool results, tool calls.
    """
    text = _visible_text(message)
    score = 0.0
    if message.is_user_turn:
        score += _WEIGHTS["user"] + _WEIGHTS["instruction"] * bool(instruction_sentences(text))
    score += _WEIGHTS["path"] * min(len(paths(text)), 3)
    score += _WEIGHTS["identifier"] * min(len(identifiers(text)), 2)
    score += _WEIGHTS["error"] * bool(error_lines(text, 1))
    score += _WEIGHTS["tool_error"] * any(r.is_error for r in message.tool_results)
    score += _WEIGHTS["call"] * bool(message.tool_calls)
    return score


def snippet(message: Message, names: dict[str, str]) -> str:
    """A one-line verbatim excerpt of ``message`` (at most ``ANCHOR_SNIPPET_CHARS`` characters).

    User and assistant messages give their text (assistant: then their tool calls; a user message
    without the blocks a client injects, :func:`~dp_compact.pipeline.extract.clean_user_text`, so
    that a message holding only a ``<system-reminder>`` gives none); a tool result gives its
    tool name and its first error line, else its first line.
    """
    if message.role == "tool":
        parts = []
        for result in message.tool_results:
            lines = error_lines(result.text, 1) or [line for line in result.text.splitlines() if line.strip()][:1]
            parts.append(f"{names.get(result.call_id, 'tool')} -> {lines[0] if lines else '(empty)'}")
        return _clip("; ".join(parts))
    text = _own_text(message)
    calls = "; ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
    return _clip(" ".join(p for p in (text, calls and f"[calls {calls}]") if p))


def select_anchors(head: Sequence[Message], *, limit: int = ANCHOR_LIMIT) -> tuple[Anchor, ...]:
    """The ``limit`` most important head messages as anchors, in conversation order.

    Parameters
    ----------
    head : sequence of Message
        The head (messages ``[0, cut)``); a previous summary message at index 0 is skipped
        (its content is carried by the summary itself).
    limit : int

    Returns
    -------
    tuple of Anchor
        At most ``limit``, with distinct snippets; ties go to the later message.
    """
    names = call_names(head)
    n = max(len(head), 1)
    scored = []
    for index, message in enumerate(head):
        if index == 0 and is_summary_text(message.text):
            continue
        text = snippet(message, names)
        if not text:
            continue
        scored.append((score_message(message) + _RECENCY_BONUS * index / n, index, message.role, text))
    best, seen = [], set()
    for item in sorted(scored, key=lambda item: (item[0], item[1]), reverse=True):
        if item[3] not in seen:  # the same snippet twice (a repeated failure) says nothing new
            seen.add(item[3])
            best.append(item)
        if len(best) == limit:
            break
    return tuple(Anchor(index, role, text, round(score, 3)) for score, index, role, text in sorted(best, key=lambda b: b[1]))


def carried_instructions(summary_text: str) -> list[str]:
    """Standing instructions of a previous summary message, to carry into the next summary.

    Ours: the items under the instructions heading (``prompts.toml``). Another tool's summary
    (Claude Code, Codex): the instruction-like sentences of its body, not of the closing note the
    tool addresses to the model ("do not acknowledge the summary", :func:`summary_body`).
    """
    ours = parse_sections(summary_text)
    if "instructions" in ours:
        return ours["instructions"]
    return instruction_sentences(summary_body(summary_text), limit_chars=INSTRUCTION_CHARS)


def head_instructions(head: Sequence[Message]) -> list[str]:
    """Every standing instruction in force after the head, oldest first, without duplicates.

    Instructions carried by a previous summary at the start of the head come first, then the
    instruction sentences of the head's user turns.
    """
    found: list[str] = []
    if head and is_summary_text(head[0].text):
        found += carried_instructions(head[0].text)
    for _, text in user_turn_texts(enumerate(head), injected=True):
        found += instruction_sentences(text, limit_chars=INSTRUCTION_CHARS)
    return list(dict.fromkeys(found))

