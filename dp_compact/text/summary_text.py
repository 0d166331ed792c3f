"""How a compaction's hand-over summary reads (DESIGN §4, §5.7): its opening and what ours states.

A summary message opens with a tool's hand-over sentence (:data:`SUMMARY_PREFIXES`): ours
(``[summary]``), Claude Code's or Codex's. Ours then has one intro line
(``pipeline/prompts.toml``, ``[summary] intro``)::

    Earlier messages of this conversation (N messages, T user turns, C LLM calls, about H tokens,
    K messages follow) were compacted by dp-compact (compaction c; model M; window W tokens).

whose counts the readers carry forward, so that t, L and c of DESIGN §2 survive compaction. The
parts ", K messages follow", "; model M" and "; window W tokens" are written only when known.
One regular expression reads the whole line; :func:`summary_counts`, :func:`summary_kept` and
:func:`summary_recorded` each take their part of it. Pure functions over strings.
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = [
    "BOUNDARY_PREFIX",
    "SUMMARY_CLOSING",
    "is_boundary_text",
    "recorded_prefix",
    "recorded_write_share",
    "recorded_usage",
    "summary_prefix",
    "summary_write_share",
    "summary_usage",
    "SUMMARY_PREFIXES",
    "CompactingTool",
    "is_summary_text",
    "summary_body",
    "summary_counts",
    "summary_kept",
    "summary_recorded",
    "summary_tool",
]

#: The agent whose compaction a marker records (:class:`~dp_compact.conversation.RecordedCompaction`).
CompactingTool = Literal["claude-code", "codex", "other"]

#: Text that opens a hand-over summary message written by a compaction: ours (DESIGN §5.7,
#: ``[summary]``) and Claude Code's / converters' ("This session is being continued ...").
SUMMARY_PREFIXES = (
    "[summary]",
    "This session is being continued from a previous conversation",
    "Another language model started to solve this problem and produced a summary",  # Codex
)

#: Text that opens a system message marking where an earlier compaction happened: Claude Code's
#: ``compact_boundary`` as converters write it in OpenAI chat (``[compact_boundary] Conversation
#: compacted``), followed by that compaction's summary message.
BOUNDARY_PREFIX = "[compact_boundary]"


#: The closing note Claude Code appends to its summary, addressed to the model about the hand-over
#: itself (where the full transcript is, "Continue the conversation from where it left off ...
#: Resume directly — do not acknowledge the summary ...", "Please continue the conversation from
#: where we left it off ..."): not the conversation's content, nor the user's instructions.
SUMMARY_CLOSING = re.compile(
    r"If you need specific details from before compaction\b|(?:Please c|C)ontinue the conversation from where (?:we|it) left (?:it )?off\b"
)


def summary_body(text: str) -> str:
    """A summary message's text without the closing note its tool appends (:data:`SUMMARY_CLOSING`).

    >>> summary_body("This session is being continued ... Summary: fix the bug.\\n"
    ...              "Continue the conversation from where it left off. Resume directly — do not recap.")
    'This session is being continued ... Summary: fix the bug.'
    """
    found = SUMMARY_CLOSING.search(text)
    return text if found is None else text[: found.start()].rstrip()


def is_summary_text(text: str) -> bool:
    """True when ``text`` opens like a compaction summary message (see ``SUMMARY_PREFIXES``)."""
    return text[:4096].lstrip()[:120].startswith(SUMMARY_PREFIXES)


def is_boundary_text(text: str) -> bool:
    """True when ``text`` (a system message's) is the marker of an earlier compaction (:data:`BOUNDARY_PREFIX`),
    not an instruction.

    >>> is_boundary_text("[compact_boundary] Conversation compacted"), is_boundary_text("You are a coding agent.")
    (True, False)
    """
    return text[:4096].lstrip().startswith(BOUNDARY_PREFIX)


def summary_tool(text: str) -> CompactingTool:
    """The tool whose hand-over sentence opens a summary message (``SUMMARY_PREFIXES``).

    Claude Code's "This session is being continued ..." gives ``claude-code``, Codex's "Another
    language model started ..." gives ``codex``; anything else (ours included) ``other``.
    """
    head = text.lstrip()
    if head.startswith(SUMMARY_PREFIXES[1]):
        return "claude-code"
    return "codex" if head.startswith(SUMMARY_PREFIXES[2]) else "other"


#: Our intro line (``pipeline/prompts.toml``): the counts, the optional kept messages, the
#: compaction number and the optional recorded model and window.
_INTRO = re.compile(
    r"\((?P<messages>\d[\d,]*) messages, (?P<turns>\d[\d,]*) user turns, (?P<calls>\d[\d,]*) LLM calls"
    r"(?:, about [\d,]+ tokens(?:, (?P<kept>\d[\d,]*) messages follow)?)?[^)]*\)"
    r" were compacted by dp-compact \(compaction (?P<compaction>\d+)(?P<recorded>(?:; [^;)]+)*)\)"
)
_INTRO_CHARS = 1000  # the intro is the summary's second line: search only its opening


def _intro(text: str) -> re.Match[str] | None:
    """Our intro line in ``text`` when it is a summary of ours, else None."""
    if not text.lstrip().startswith(SUMMARY_PREFIXES[0]):
        return None
    return _INTRO.search(text[:_INTRO_CHARS])


def _number(digits: str) -> int:
    return int(digits.replace(",", ""))


def summary_counts(text: str) -> tuple[int, int, int, int]:
    """(messages, user turns, LLM calls, compaction number) that a summary of ours states; zeros otherwise.

    Our summary message opens with ``[summary]`` and the intro line "(N messages, T user turns,
    C LLM calls, about H tokens) were compacted by dp-compact (compaction c)", so that t, L and c
    of DESIGN §2 survive compaction (they include what earlier summaries in the head stood for)
    and N, the messages of that head (an earlier summary among them counts as one), gives the
    planner the share it kept.

    >>> summary_counts("[summary]\\nEarlier messages (1,204 messages, 9 user turns, 88 LLM calls, about 1 tokens) "
    ...                "were compacted by dp-compact (compaction 2).")
    (1204, 9, 88, 2)
    >>> summary_counts("Earlier messages (1 messages, 1 user turns, 1 LLM calls) were compacted by dp-compact (compaction 1).")
    (0, 0, 0, 0)
    """
    found = _intro(text)
    if found is None:
        return 0, 0, 0, 0
    return (_number(found["messages"]), _number(found["turns"]), _number(found["calls"]), _number(found["compaction"]))


def summary_kept(text: str) -> int | None:
    """Messages a summary of ours states it is followed by (the kept tail and an acknowledgement), or None.

    >>> summary_kept("[summary]\\nEarlier messages (12 messages, 1 user turns, 5 LLM calls, about 900 tokens, "
    ...              "4 messages follow) were compacted by dp-compact (compaction 1).")
    4
    >>> summary_kept("[summary]\\nEarlier messages (12 messages, 1 user turns, 5 LLM calls, about 900 tokens) "
    ...              "were compacted by dp-compact (compaction 1).") is None
    True
    """
    found = _intro(text)
    return _number(found["kept"]) if found is not None and found["kept"] else None


def summary_recorded(text: str) -> tuple[str | None, int | None]:
    """The model and window (tokens) a summary of ours states the conversation ran with; None where it does not.

    >>> summary_recorded("[summary]\\nEarlier messages (3 messages, 1 user turns, 1 LLM calls, about 90 tokens) were "
    ...                  "compacted by dp-compact (compaction 1; model gpt-5.3-codex; window 258,400 tokens).")
    ('gpt-5.3-codex', 258400)
    """
    found = _intro(text)
    model, window = None, None
    for part in (found["recorded"].split(";") if found is not None else ()):
        key, _, value = part.strip().partition(" ")
        if key == "model" and value:
            model = value.strip()
        elif key == "window" and (digits := value.replace(",", "").split(" ")[0]).isdigit():
            window = int(digits)
    return model, window


def recorded_usage(parts: str) -> tuple[float | None, float | None]:
    """avg (prompt tokens per call) and token ratio (provider tokens per cl100k token) that the
    ``"; key value"`` statements ``parts`` of our intro or of a shrunk preview state; None where absent.

    >>> recorded_usage("; model m; avg 94,542 prompt tokens per call; ratio 2.0100 provider tokens per cl100k token")
    (94542.0, 2.01)
    """
    avg, ratio = None, None
    for part in parts.split(";"):
        key, _, value = part.strip().partition(" ")
        try:
            parsed = float(value.split(" ")[0].replace(",", ""))
        except ValueError:
            continue
        if key == "avg" and value.endswith("prompt tokens per call") and parsed > 0:
            avg = parsed
        elif key == "ratio" and value.endswith("provider tokens per cl100k token") and parsed > 0:
            ratio = parsed
    return avg, ratio


def recorded_prefix(parts: str) -> int | None:
    """The fixed prefix V (tokens) that the ``"; key value"`` statements ``parts`` of our intro or of
    a shrunk preview state was measured on the conversation; None where absent.

    >>> recorded_prefix("; model m; avg 94,542 prompt tokens per call; prefix 20,565 tokens")
    20565
    """
    for part in parts.split(";"):
        key, _, value = part.strip().partition(" ")
        digits = value.split(" ")[0].replace(",", "")
        if key == "prefix" and value.endswith(" tokens") and digits.isdigit() and int(digits) > 0:
            return int(digits)
    return None


def recorded_write_share(parts: str) -> float | None:
    """The share of cache writes made as 1-hour entries that the ``"; key value"`` statements
    ``parts`` of our intro state, in [0, 1]; None where absent.

    >>> recorded_write_share("; model m; prefix 20,565 tokens; writes 100% 1-hour entries")
    1.0
    """
    for part in parts.split(";"):
        key, _, value = part.strip().partition(" ")
        digits = value.split("%")[0]
        if key == "writes" and value.endswith("% 1-hour entries") and digits.isdigit() and int(digits) <= 100:
            return int(digits) / 100
    return None


def summary_write_share(text: str) -> float | None:
    """The share of 1-hour cache writes a summary of ours states for the conversation it compacted, or None.

    >>> summary_write_share("[summary]\\nEarlier messages (3 messages, 1 user turns, 1 LLM calls, about 90 tokens) were "
    ...                     "compacted by dp-compact (compaction 1; model m; writes 75% 1-hour entries).")
    0.75
    """
    found = _intro(text)
    return recorded_write_share(found["recorded"]) if found is not None else None


def summary_prefix(text: str) -> int | None:
    """The fixed prefix V (tokens) a summary of ours states was measured on the conversation it compacted, or None.

    >>> summary_prefix("[summary]\\nEarlier messages (3 messages, 1 user turns, 1 LLM calls, about 90 tokens) were "
    ...                "compacted by dp-compact (compaction 1; model m; prefix 20,565 tokens).")
    20565
    """
    found = _intro(text)
    return recorded_prefix(found["recorded"]) if found is not None else None


def summary_usage(text: str) -> tuple[float | None, float | None]:
    """avg (prompt tokens per call) and the token ratio a summary of ours states; None where it does not.

    >>> summary_usage("[summary]\\nEarlier messages (3 messages, 1 user turns, 1 LLM calls, about 90 tokens) were "
    ...               "compacted by dp-compact (compaction 1; model m; avg 94,542 prompt tokens per call;"
    ...               " ratio 2.0100 provider tokens per cl100k token).")
    (94542.0, 2.01)
    """
    found = _intro(text)
    return recorded_usage(found["recorded"]) if found is not None else (None, None)
