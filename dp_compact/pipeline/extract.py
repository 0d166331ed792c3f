"""Text signals the anchors and the extractive summary look for (DESIGN §5.4, §5.5).

File paths, identifiers, error lines, user instructions and shell commands, found with
regular expressions over message text (the shared ones in :mod:`dp_compact.text.patterns`). Pure
functions over strings and messages. What :func:`paths`, :func:`identifiers`, :func:`error_lines`,
:func:`instruction_sentences`, :func:`clean_user_text`, :func:`command_of`, :func:`call_paths` and
:func:`keywords` find in a text is remembered for the most recent texts (:class:`TextMemo`): the
anchors, the summary and the archive's metadata search the same message texts, and a long-lived
process (the plan server) searches a conversation again each time it is archived.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from dp_compact.conversation import Message, ToolCall
from dp_compact.text.patterns import (
    ERROR,
    HAS_EXTENSION,
    IDENTIFIER,
    INJECTED_BLOCK,
    PATH,
    PATH_ARGUMENT_NAME,
    SHELL_ARGUMENT_KEYS,
    SHELL_TOOL_NAME,
)

__all__ = [
    "TextMemo",
    "call_names",
    "call_paths",
    "clean_user_text",
    "command_of",
    "error_lines",
    "identifiers",
    "instruction_sentences",
    "is_instruction",
    "joined_identifiers",
    "joined_paths",
    "keywords",
    "paths",
    "sentences",
    "user_turn_texts",
]

#: Standing instructions ("always …", "never …", "from now on …", "don't …"): kept in
#: every summary whatever its size.
_STANDING = re.compile(r"\b(always|never|from now on|going forward|henceforth|don'?t|do not|no longer)\b", re.I)
#: Requirements ("must …", "make sure …"): kept while the summary budget allows.
_REQUIREMENT = re.compile(r"\b(must(?:n'?t)?|make sure|be sure|avoid|have to|need to)\b", re.I)
_MIN_INSTRUCTION_CHARS = 12  # shorter lines are headings ("## Don't"), not instructions
#: A list item's opening: a bullet (``-``, ``*``, ``•``, ``+``) or a number (``1.``, ``2)``).
_LIST_ITEM = re.compile(r"(?:[-*•+]|\d+[.)])\s")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]{3,}")
_STOPWORDS = frozenset(
    "this that with from have will would could should there their them then than what when where which while "
    "your about into also just only some more most very been were they here does done make sure please can't "
    "don't need want like file files code line lines using used does".split()
)


class TextMemo:
    """The values of a pure function of a string (and a few hashable arguments), kept for the most
    recently used keys: at most ``entries`` keys holding at most ``chars`` characters of text in all
    (the least recently used forgotten first; a longer text is never kept). A key holds its text,
    so what is kept is the texts themselves, shared with their messages while those live.

    Values are kept as given: the function's callers get them as tuples and copy them. The
    defaults hold what a compaction derives from a conversation that fills a window of a million
    tokens (about 6 characters counted for each character of its text, each text being kept for
    several searches; 1.0 M of text take 5.4 M).
    """

    __slots__ = ("_values", "_chars", "entries", "chars")

    def __init__(self, entries: int = 1 << 16, chars: int = 32 << 20) -> None:
        self._values: dict[tuple[object, ...], tuple[object, int]] = {}
        self._chars = 0
        self.entries, self.chars = entries, chars

    def get(self, key: tuple[object, ...]) -> object | None:
        """The value kept for ``key`` (made the most recently used), else None."""
        found = self._values.pop(key, None)
        if found is None:
            return None
        self._values[key] = found
        return found[0]

    def value_of(self, key: tuple[object, ...], text: object, make: Callable[[], Any]) -> Any:
        """``make()``, a pure function of the string ``text`` named by ``key``: the value kept for
        ``key``, else made and kept; a ``text`` that is not a string is never kept (made each time)."""
        if type(text) is not str:
            return make()
        found = self.get(key)
        if found is None:
            found = (make(),)
            self.put(key, found, len(text))
        return found[0]  # type: ignore[index]

    def put(self, key: tuple[object, ...], value: object, size: int) -> None:
        """Keep ``value`` for ``key``, whose text has ``size`` characters."""
        if size > self.chars:
            return
        values = self._values
        previous = values.pop(key, None)
        values[key] = (value, size)
        self._chars += size - (previous[1] if previous is not None else 0)
        while len(values) > self.entries or self._chars > self.chars:
            try:
                oldest = next(iter(values))
                self._chars -= values.pop(oldest)[1]
            except (KeyError, RuntimeError, StopIteration):  # another thread changed it meanwhile
                break

    def clear(self) -> None:
        """Forget every value."""
        self._values = {}
        self._chars = 0


#: The remembered searches of :func:`paths`, :func:`identifiers`, :func:`error_lines`,
#: :func:`instruction_sentences`, :func:`clean_user_text`, :func:`command_of`, :func:`call_paths` and
#: the words :func:`keywords` counts.
_MEMO = TextMemo()


def _kept(key: tuple[object, ...], text: str, search: Callable[[], list[str]]) -> list[str]:
    """``search()`` of ``text`` (``key`` names the search and its arguments), from :data:`_MEMO` when kept;
    a text that is not a string is searched each time."""
    return list(_MEMO.value_of(key, text, lambda: tuple(search())))


def paths(text: str) -> list[str]:
    """File paths in ``text``, in order of first appearance, without duplicates.

    A path has a slash and either a file extension or at least two slashes or a ``/``,
    ``./``, ``~/`` start; or it is a bare file name with a known extension. URLs are skipped.

    Examples
    --------
    >>> paths("edit src/invoicing/totals.py and config/export.yaml, see https://x.org/a/b.html")
    ['src/invoicing/totals.py', 'config/export.yaml']
    """
    return _kept(("paths", text), text, lambda: _paths(text))


def _paths(text: str) -> list[str]:
    """:func:`paths`, searched (no memo)."""
    found: dict[str, None] = {}
    for match in PATH.finditer(text):
        candidate = match.group(1).rstrip(".-")
        slashes = candidate.count("/")
        if not any(c.isalpha() for c in candidate):
            continue
        if slashes and not (HAS_EXTENSION.search(candidate) or slashes >= 2 or candidate[:1] in "/.~"):
            continue
        found.setdefault(candidate, None)
    return list(found)


def identifiers(text: str) -> list[str]:
    """Code identifiers (dotted names, snake_case, CamelCase) in order of first appearance."""
    return _kept(("identifiers", text), text, lambda: _identifiers(text))


def _identifiers(text: str) -> list[str]:
    """:func:`identifiers`, searched (no memo)."""
    return list(dict.fromkeys(m.group(0) for m in IDENTIFIER.finditer(text) if not HAS_EXTENSION.search(m.group(0))))


def joined_paths(texts: Iterable[str], limit: int) -> list[str]:
    """``paths("\\n".join(texts))[:limit]``, from each text's own (remembered) :func:`paths`: no path
    spans a line break and a line break bounds one as the text's start and end do, so the paths of
    the joined text are those of each text in turn; texts after the ``limit``-th path are not searched."""
    found: dict[str, None] = {}
    for text in texts:
        if len(found) >= limit:
            break
        found.update(dict.fromkeys(paths(text)))
    return list(found)[:limit]


def joined_identifiers(texts: Iterable[str], limit: int) -> list[str]:
    """``identifiers("\\n".join(texts))[:limit]``, from each text's own (remembered) :func:`identifiers`
    (as :func:`joined_paths`: an identifier spans no line break, which bounds one as a text's ends do)."""
    found: dict[str, None] = {}
    for text in texts:
        if len(found) >= limit:
            break
        found.update(dict.fromkeys(identifiers(text)))
    return list(found)[:limit]


#: A stem of every word :data:`~dp_compact.text.patterns.ERROR` matches, lower case: a text holding
#: none of them has no error line (a test in the module's tests keeps the two in step).
_ERROR_WORDS = ("error", "exception", "traceback", "fail", "fatal", "panic", "denied", "not found", "cannot", "can't",
                "unable", "invalid", "refused", "time", "crash", "broken", "missing", "undefined", "segfault", "abort")


def error_lines(text: str, limit: int = 3) -> list[str]:
    r"""Up to ``limit`` lines of ``text`` that mention an error or failure, stripped, in order,
    without duplicates; one scan of the text that stops at the ``limit``-th line found.

    >>> error_lines("ok\nError: x failed\nfine\nTraceback (most recent call last):\nError: x failed")
    ['Error: x failed', 'Traceback (most recent call last):']
    """
    return _kept(("error_lines", text, limit), text, lambda: _error_lines(text, limit))


def _error_lines(text: str, limit: int) -> list[str]:
    """:func:`error_lines`, searched (no memo)."""
    lower = text.lower()
    if not any(word in lower for word in _ERROR_WORDS):  # a substring test runs far faster than the pattern
        return []
    found: dict[str, None] = {}
    position = 0
    while len(found) < limit and (match := ERROR.search(text, position)) is not None:
        start = max(text.rfind("\n", 0, match.start()), text.rfind("\r", 0, match.start())) + 1
        end = min((i for i in (text.find("\n", match.end()), text.find("\r", match.end())) if i >= 0), default=len(text))
        line = text[start:end].strip()
        if line:
            found.setdefault(line, None)
        position = end + 1
    return list(found)


def sentences(text: str) -> list[str]:
    """``text`` split into sentences and lines, stripped, empty ones dropped."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def is_instruction(sentence: str, *, standing: bool = True) -> bool:
    """True for a standing user instruction ("never …", "always …", "don't …"); with
    ``standing=False``, for a requirement ("must …", "make sure …") instead."""
    return bool((_STANDING if standing else _REQUIREMENT).search(sentence))


def instruction_sentences(text: str, *, standing: bool = True, limit_chars: int = 300) -> list[str]:
    """Sentences of ``text`` that are standing instructions (or, ``standing=False``, requirements
    that are not standing instructions), each at most ``limit_chars`` characters.

    A sentence that ends with a colon leads into the list items on the lines after it ("Do not
    leave the system in a state where:"): it is taken with as many of them as fit in
    ``limit_chars``, and left out when none does (alone it says nothing). An instruction that is
    itself a list item is taken without its bullet or number (``- never log tokens`` and ``2. never
    log tokens`` are ``never log tokens``), so that one carried from summary to summary stays one.

    >>> instruction_sentences("Do not leave the repo in a state where:\\n- tests fail\\n- the build is red\\nThanks")
    ['Do not leave the repo in a state where: - tests fail - the build is red']
    >>> instruction_sentences("Rules:\\n- - never log tokens\\n2. Always run the tests first")
    ['never log tokens', 'Always run the tests first']
    """
    return _kept(("instruction_sentences", text, standing, limit_chars), text, lambda: _instruction_sentences(text, standing, limit_chars))


#: A line of a Markdown block quote: its marker (``> ``, after any indent).
_QUOTE_MARK = re.compile(r"^[ \t]*>[ \t]?")
#: How a sentence or a list's lead-in ends.
_SENTENCE_STOPS = (".", "!", "?", ":", ";")


def unquoted(text: str) -> str:
    """``text`` with its Markdown block quotes unwrapped: each quoted line without its ``>`` marker,
    joined to the quoted line before it when that one does not end a sentence (a quoted paragraph
    is wrapped over several lines), so that a quoted request stays one sentence.

    >>> unquoted("> Use the documented key\\n  > and do not invent secrets.\\n> Then build.\\nThanks")
    'Use the documented key and do not invent secrets.\\nThen build.\\nThanks'
    """
    if ">" not in text:
        return text
    out: list[str] = []
    quoted = False
    for line in text.split("\n"):
        mark = _QUOTE_MARK.match(line)
        if mark is None:
            out.append(line)
            quoted = False
            continue
        body = line[mark.end():].strip()
        if quoted and out and out[-1].strip() and body and not out[-1].rstrip().endswith(_SENTENCE_STOPS):
            out[-1] = f"{out[-1].rstrip()} {body}"
        else:
            out.append(body)
        quoted = True
    return "\n".join(out)


def _instruction_sentences(text: str, standing: bool, limit_chars: int) -> list[str]:
    """:func:`instruction_sentences`, searched (no memo)."""
    found = []
    parts = sentences(unquoted(text))
    for index, s in enumerate(parts):
        while (bullet := _LIST_ITEM.match(s)) is not None:  # a list item's own words: the summary gives it its bullet
            s = s[bullet.end():].lstrip()
        if not (_MIN_INSTRUCTION_CHARS <= len(s) <= limit_chars and not s.startswith("#")
                and is_instruction(s) == standing and (standing or is_instruction(s, standing=False))):
            continue
        if s.endswith(":"):
            items = list(itertools.takewhile(_LIST_ITEM.match, parts[index + 1:]))
            while items and len(" ".join([s, *items])) > limit_chars:
                items.pop()
            if not items:
                continue
            s = " ".join([s, *items])
        found.append(s)
    return found


def clean_user_text(text: str) -> str:
    """A user message's text without blocks a client injects (``<system-reminder>`` and the like) (remembered)."""
    return _MEMO.value_of(("clean_user_text", text), text, lambda: INJECTED_BLOCK.sub("", text).strip())  # type: ignore[no-any-return]


def user_turn_texts(messages: Iterable[tuple[int, Message]], *, injected: bool = False) -> list[tuple[int, str]]:
    """``(index, text)`` of the user turns (:attr:`Message.is_user_turn`), with injected context too
    when ``injected``; never summaries. Texts are :func:`clean_user_text`; empty ones are left out."""
    out = []
    for index, message in messages:
        if message.is_user_turn or (injected and message.kind == "injected"):
            text = clean_user_text(message.text)
            if text:
                out.append((index, text))
    return out


def command_of(call: ToolCall) -> str | None:
    """The shell command a tool call runs, or None when it is not a shell tool call."""
    if type(call.name) is not str:
        return _command_of(call)
    found = _kept(("command_of", call.arguments, call.name), call.arguments, lambda: [_command_of(call)])
    return found[0] if found else _command_of(call)


def _command_of(call: ToolCall) -> str | None:
    """:func:`command_of`, parsed (no memo)."""
    try:
        arguments = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        arguments = call.arguments
    if isinstance(arguments, dict):
        for key in SHELL_ARGUMENT_KEYS:
            value = arguments.get(key)
            if isinstance(value, list):
                value = " ".join(map(str, value))
            if isinstance(value, str) and value.strip():
                return value.strip()
        return None
    if isinstance(arguments, str) and SHELL_TOOL_NAME.search(call.name) and arguments.strip():
        return arguments.strip()
    return None


def call_names(messages: Sequence[Message]) -> dict[str, str]:
    """Tool-call id → tool name over ``messages``."""
    return {call.id: call.name for m in messages for call in m.tool_calls}


def keywords(texts: Iterable[str], limit: int = 20) -> list[str]:
    """The ``limit`` most frequent words of ``texts`` (4+ letters, lower-cased, common words skipped)."""
    counts: dict[str, int] = {}
    for text in texts:
        for lowered in _kept(("keyword_words", text), text, lambda text=text: _keyword_words(text)):
            counts[lowered] = counts.get(lowered, 0) + 1
    return sorted(counts, key=lambda w: (-counts[w], w))[:limit]


def _keyword_words(text: str) -> list[str]:
    """The words of ``text`` :func:`keywords` counts, lower-cased, in order (common words left out)."""
    return [lowered for word in _WORD.findall(text) if (lowered := word.lower()) not in _STOPWORDS]


def call_paths(call: ToolCall) -> list[str]:
    """File paths a tool call touches: from its path-like arguments and shell command, not file contents."""
    return _kept(("call_paths", call.arguments), call.arguments, lambda: _call_paths(call))


def _call_paths(call: ToolCall) -> list[str]:
    """:func:`call_paths`, parsed (no memo)."""
    try:
        arguments = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        return paths(call.arguments)
    if not isinstance(arguments, dict):
        return paths(str(arguments))
    values = [str(v) for k, v in arguments.items() if isinstance(v, (str, list)) and (PATH_ARGUMENT_NAME.search(k) or k in SHELL_ARGUMENT_KEYS)]
    return [p for p in paths("\n".join(values)) if not p.startswith("/dev/")]
