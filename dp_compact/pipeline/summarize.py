"""Summarize the head (DESIGN §5.5): the ``Summarizer`` interface and the extractive summarizer.

A summarizer is any callable ``summarizer(request: SummaryRequest) -> str`` returning the body
of the summary: labelled sections, without the ``[summary]`` marker, anchors or archive line,
which the reassembly adds (``prompts.toml``). It may raise :class:`~dp_compact.errors.CompactionError`
(or a subclass) when it cannot summarize; any such failure aborts the compaction and leaves the
input untouched. ``dp_compact.pipeline.llm`` implements it with the official SDKs; this module
has the default, :class:`ExtractiveSummarizer` (deterministic, offline).

Whatever the summarizer, :func:`check_summary` then rejects an empty or too short answer
(:class:`~dp_compact.errors.SummaryTooShortError`) and :func:`with_instructions` appends any
standing user instruction the summary lost, so instructions survive every compaction.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from dp_compact.errors import SummaryTooShortError
from dp_compact.text.patterns import EDIT_TOOL_NAME, PATH_ARGUMENT_NAME, SHELL_ARGUMENT_KEYS
from dp_compact.pipeline.extract import (
    TextMemo,
    call_names,
    call_paths,
    clean_user_text,
    command_of,
    error_lines,
    instruction_sentences,
    paths,
    sentences,
    user_turn_texts,
)
from dp_compact.pipeline.texts import parse_sections, render_sections
from dp_compact.conversation import Message
from dp_compact.measure.file_operations import file_operations
from dp_compact._fast import keep_newest
from dp_compact.measure.tokens import count_text_tokens
from dp_compact.text.patterns import WORKDIR_KEYS

__all__ = [
    "MIN_SUMMARY_CHARS",
    "carried_forward",
    "THIN_SUMMARY_CHARS",
    "ExtractiveSummarizer",
    "SummaryRequest",
    "Summarizer",
    "check_summary",
    "warm_summary",
    "with_instructions",
]

MIN_SUMMARY_CHARS = 120  # shortest acceptable summary of a head of at least 20x that much text
ITEM_CHARS = 240  # longest item line of the extractive summary
#: Below this many characters the sections are thin (a head of tool calls with little text around
#: them) and the summary adds what each tool call did (:func:`_tool_calls`): twice the minimum, so
#: the summary clears ``MIN_SUMMARY_CHARS`` with room to spare.
THIN_SUMMARY_CHARS = 2 * MIN_SUMMARY_CHARS
_ARGUMENT_CHARS = 80  # longest key argument shown in a tool-call item
#: Sections in the order the budget is filled, and items per round (file paths are short and
#: the most often re-read facts of a coding session: DESIGN §2 recall calibration).
_FILL_ORDER = ("requirements", "files", "errors", "commands", "decisions", "open_items")
_ITEMS_PER_ROUND = {"files": 4}
_HEADING_TOKENS = 8  # a section heading line and the blank line before it, tokens (cl100k, measured)
_DECISION = re.compile(
    r"\b(I'll|I will|we'll|let's|decid\w*|chose|choos\w*|instead|the fix|fixed|root cause|because|so that|"
    r"the plan|going to|switch\w* to|concluded?|turns out|the (?:bug|issue|problem) (?:is|was))\b",
    re.I,
)
_OPEN = re.compile(r"\b(todo|next step|remaining|not yet|pending|follow[- ]?up|still (?:need|to|fail)|need to|needs to|left to|I'll|I will)\b", re.I)
_FILE_NAME = re.compile(r"\.\w{1,8}$")  # a file, not a directory


@dataclass(frozen=True, slots=True)
class SummaryRequest:
    """Everything a summarizer may use (DESIGN §5.5).

    Attributes
    ----------
    head : tuple of Message
        The head as read; ``Message.raw`` holds each message in its source API shape, which an
        LLM summarizer sends unchanged for a cache-aligned request (same prefix, head as sent).
    shrunk_head : tuple of Message
        The same messages with long tool results replaced by previews (:mod:`.shrink`); the head
        itself in the requests :func:`~dp_compact.pipeline.compact.compact_session` gives
        :class:`ExtractiveSummarizer`, which never reads it.
    previous_summary : str or None
        Text of the previous summary message when the head opens with one, else None.
    target_tokens : int
        S of DESIGN §2 (``DP_S``): the summary's intended size, tokens.
    max_tokens : int
        Hard upper bound for the summary, tokens (2·S, or less when the context is tight).
    instructions : tuple of str
        Standing user instructions in force (carried forward and from the head), verbatim.
    system_text : str
        The session's system prompt (part of the fixed prefix V), "" when unknown.
    tools : tuple of dict
        Tool schemas of the session when known (for a cache-aligned LLM request).
    system_messages : tuple of dict
        The session's system / developer messages as read (``Session.system_messages``: raw
        dicts, in order, unmerged), which a cache-aligned request repeats unchanged; () when the
        source keeps its system prompt elsewhere (then ``system_text`` stands for it).
    earlier : tuple of Message
        Recorded messages before the live conversation, which the tool compacted itself (Claude
        Code, Codex): their requests and changed files are carried too (:func:`carried_forward`).
    """

    head: tuple[Message, ...]
    shrunk_head: tuple[Message, ...]
    previous_summary: str | None
    target_tokens: int
    max_tokens: int
    instructions: tuple[str, ...] = ()
    system_text: str = ""
    tools: tuple[dict[str, Any], ...] = field(default=())
    system_messages: tuple[dict[str, Any], ...] = field(default=())
    earlier: tuple[Message, ...] = field(default=())


class Summarizer(Protocol):
    """A summarizer: ``__call__(request) -> str``, the summary body in labelled sections.

    Raise :class:`~dp_compact.errors.CompactionError` (or a subclass) on failure; return text
    of at most ``request.max_tokens`` tokens. An optional ``name`` attribute identifies it in
    reports (default: the class name).
    """

    def __call__(self, request: SummaryRequest) -> str:
        """Summarize ``request.head``."""
        ...


#: What the summary derives from one text (a tool result's error line and preview, a call's key
#: argument and working folder, an assistant text's sentences), remembered: the same texts are
#: summarized again by a later compaction or a later run of a long-lived process.
_MEMO = TextMemo()
#: Texts whose token counts :func:`_token_counts` keeps (the least recently used forgotten first).
COUNT_MEMO_TEXTS = 8192
#: Text -> cl100k tokens, of the items and sections the summary weighs (:func:`_token_counts`).
_COUNTS: dict[str, int] = {}


def _token_counts(texts: Sequence[str]) -> list[int]:
    """cl100k tokens of each of ``texts`` (:func:`~dp_compact.measure.tokens.count_text_tokens`), the
    counts of texts weighed before (the same items, a second pass, a later summary) remembered."""
    counts = [_COUNTS.pop(t, None) for t in texts]
    missing = [t for t, c in zip(texts, counts, strict=True) if c is None]
    found = iter(count_text_tokens(missing).tolist() if missing else ())
    counts = [next(found) if c is None else c for c in counts]
    _COUNTS.update(zip(texts, counts, strict=True))
    keep_newest(_COUNTS, COUNT_MEMO_TEXTS)
    return counts


def _clip(text: str, limit: int = ITEM_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _files(head: Sequence[Message]) -> list[str]:
    """Paths touched or named in the head: files before directories, then edited and often named
    first (a user mention weighs more than a tool call); ``(edited)`` when a tool changed them."""
    edited: set[str] = set()
    counts: Counter[str] = Counter()
    for message in head:
        for call in message.tool_calls:
            for path in call_paths(call):
                counts[path] += 2
                if EDIT_TOOL_NAME.search(call.name):
                    edited.add(path)
        if message.is_user_message:  # typed, context the client gave the model (a skill, a hook), or a previous summary
            for path in paths(clean_user_text(message.text)):
                counts[path] += 3  # named in a user message
    for path in [p for p in counts if p.startswith(("/", "~"))]:  # an absolute path and its relative form are one file
        relative = [q for q in counts if "/" in q and not q.startswith(("/", "~")) and path.endswith("/" + q.lstrip("./"))]
        shorter = max(relative, key=len, default=None)
        if shorter is not None:
            counts[shorter] += counts.pop(path)
            if path in edited:
                edited.add(shorter)
    ranked = sorted(counts, key=lambda p: (not _FILE_NAME.search(p), -counts[p] - 2 * (p in edited)))
    return [f"{p} (edited)" if p in edited else p for p in ranked]


def _commands(head: Sequence[Message]) -> list[str]:
    """Shell commands run in the head, newest first, without duplicates."""
    found = [cmd for m in head for c in m.tool_calls if (cmd := command_of(c))]
    return [_clip(c, 160) for c in dict.fromkeys(reversed(found))]


def _errors(head: Sequence[Message]) -> list[str]:
    """First error line of each failed or error-mentioning tool result, newest first.

    A bare status line ("Exit code 1") is followed by the next line, which says what failed.
    """
    names = call_names(head)
    found = []
    for message in head:
        for result in message.tool_results:
            first = _error_line(result.text, result.is_error)
            if first is not None:
                found.append(_clip(f"{names.get(result.call_id, 'tool')}: {first}", 200))
    return list(dict.fromkeys(reversed(found)))


def _error_line(text: str, is_error: bool) -> str | None:
    """What :func:`_errors` says of a tool result of ``text``: its first error line (a short one
    with the line after it), else for a failed result its first line; None for neither (remembered)."""
    return _MEMO.value_of(("error_line", text, bool(is_error)), text, lambda: _parsed_error_line(text, is_error))  # type: ignore[no-any-return]


def _parsed_error_line(text: str, is_error: bool) -> str | None:
    """:func:`_error_line`, searched (no memo)."""
    errors = error_lines(text, 1)
    if not errors and not is_error:
        return None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = errors[0] if errors else (lines[0] if lines else "(no output)")
    at = lines.index(first) if first in lines else -1
    if len(first) < 24 and 0 <= at < len(lines) - 1:
        first = f"{first} / {lines[at + 1]}"
    return first


def _key_argument(arguments: str) -> str:
    """The argument that says what a tool call did: a shell command or path, else the first short scalar (remembered)."""
    return _MEMO.value_of(("key_argument", arguments), arguments, lambda: _parsed_key_argument(arguments))  # type: ignore[no-any-return]


def _parsed_key_argument(arguments: str) -> str:
    """:func:`_key_argument`, parsed (no memo)."""
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError:
        return _clip(arguments, _ARGUMENT_CHARS)
    if not isinstance(parsed, dict):
        return _clip(str(parsed), _ARGUMENT_CHARS)
    scalars = [(k, v) for k, v in parsed.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool) and str(v).strip()]
    preferred = [(k, v) for k, v in scalars if k in SHELL_ARGUMENT_KEYS or PATH_ARGUMENT_NAME.search(k)]
    for key, value in preferred or scalars[:1]:
        return _clip(f"{key}={value}", _ARGUMENT_CHARS)
    return ""


def _tool_calls(head: Sequence[Message]) -> list[str]:
    """Each tool call of the head, oldest first: name, key argument and a one-line preview of its
    result (its first error line when it has one, else its first non-blank line, and its size)."""
    results = {r.call_id: r for m in head for r in m.tool_results}
    found = []
    for message in head:
        for call in message.tool_calls:
            argument = _key_argument(call.arguments)
            item = f"{call.name}({argument})" if argument else call.name
            result = results.get(call.id)
            if result is not None:
                item += _result_preview(result.text, result.is_error)
            found.append(_clip(item))
    return list(dict.fromkeys(found))


def _result_preview(text: str, is_error: bool) -> str:
    """The end of :func:`_tool_calls`' item for a result of ``text``: `` → `` its first error line,
    else its first non-blank line (``error: `` before a failure that does not say so), and its size (remembered)."""
    return _MEMO.value_of(("result_preview", text, bool(is_error)), text, lambda: _parsed_result_preview(text, is_error))  # type: ignore[no-any-return]


def _parsed_result_preview(text: str, is_error: bool) -> str:
    """:func:`_result_preview`, searched (no memo)."""
    errors = error_lines(text, 1)
    first = errors[0] if errors else next((line.strip() for line in text.splitlines() if line.strip()), "(no output)")
    flag = "error: " if (errors or is_error) and "error" not in first.lower() else ""
    return f" → {flag}{_clip(first, 120)} ({len(text):,} characters)"


def _assistant_sentences(head: Sequence[Message], pattern: re.Pattern[str]) -> list[str]:
    """Assistant text sentences matching ``pattern``, newest first, without duplicates. A line
    that opens with a lower-case letter continues a sentence wrapped onto several lines: a
    fragment ("instead; judgment is left to the reader."), not a sentence, so it is left out."""
    found = [s for m in head if m.role == "assistant" for s in _matching_sentences(m.text, pattern)]
    return [_clip(s) for s in dict.fromkeys(reversed(found))]


def _matching_sentences(text: str, pattern: re.Pattern[str]) -> tuple[str, ...]:
    """The sentences of ``text`` that :func:`_assistant_sentences` takes for ``pattern``, in order (remembered)."""
    return _MEMO.value_of(("assistant_sentences", text, pattern), text,  # type: ignore[no-any-return]
                          lambda: tuple(s for s in sentences(text) if pattern.search(s) and len(s) > 12 and not s[0].islower()))


def _requirements(head: Sequence[Message]) -> list[str]:
    """Requirement sentences ("must …", "make sure …") of the user turns, oldest first."""
    return [s for _, text in user_turn_texts(enumerate(head), injected=True) for s in instruction_sentences(text, standing=False)]


def _requests(head: Sequence[Message]) -> list[str]:
    """Every user turn of the head (a request the person typed), oldest first, on one line each."""
    return [_clip(text) for _, text in user_turn_texts(enumerate(head))]


def _changed(head: Sequence[Message]) -> list[str]:
    """Every file the head's tool calls created, edited or deleted (:func:`~dp_compact.measure.file_operations.file_operations`),
    in order of first change; relative paths joined to the latest working folder a call named."""
    workdir: str | None = None
    found: list[str] = []
    for message in head:
        for call in message.tool_calls:
            _, writes = file_operations(call, workdir)
            found.extend(writes)
            workdir = _workdir(call.arguments) or workdir
    return list(dict.fromkeys(found))


def _workdir(arguments: str) -> str | None:
    """The working folder a tool call's JSON ``arguments`` name (``workdir``, ``cwd``), else None (remembered)."""
    return _MEMO.value_of(("workdir", arguments), arguments, lambda: _parsed_workdir(arguments))  # type: ignore[no-any-return]


def _parsed_workdir(arguments: str) -> str | None:
    """:func:`_workdir`, parsed (no memo)."""
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    return next((v for k in WORKDIR_KEYS if isinstance(v := parsed.get(k), str) and v), None)


def warm_summary(messages: Sequence[Message], workdir: str | None = None) -> str | None:
    """Work out, and remember, what :class:`ExtractiveSummarizer` and :func:`carried_forward` derive
    from each of ``messages`` on its own (its calls' paths, commands, key arguments, working
    folders and file operations; its results' error lines and previews; its sentences and
    instructions), so that a summary of a head holding them later finds them made. ``workdir``:
    the working folder a call before them named (:func:`_changed`); returns the one after them.
    Changes nothing a summary says."""
    for message in messages:
        for call in message.tool_calls:
            call_paths(call)
            command_of(call)
            _key_argument(call.arguments)
            file_operations(call, workdir)
            workdir = _workdir(call.arguments) or workdir
        for result in message.tool_results:
            _error_line(result.text, result.is_error)
            _result_preview(result.text, result.is_error)
        if message.role == "assistant":
            _matching_sentences(message.text, _DECISION)
            _matching_sentences(message.text, _OPEN)
        if message.is_user_message:
            paths(clean_user_text(message.text))
    for _, text in user_turn_texts(enumerate(messages), injected=True):
        instruction_sentences(text, standing=False)
    return workdir


def _same_request(item: str) -> str:
    """Key of a request item: its first 40 characters, whitespace collapsed (a condensed copy is the same request)."""
    return " ".join(item.split())[:40].rstrip("…")


def carried_forward(request: SummaryRequest) -> dict[str, list[str]]:
    """What every summary must carry (DESIGN §9 "Retention"): every request the person made and
    every file created or changed, from the segments the tool compacted itself, the previous
    summary and the head, oldest first.

    Returns ``{"requests": [...], "changed": [...]}``, items in full (one line each); see
    :func:`condensed` for the forms that fit a budget.
    """
    previous = parse_sections(request.previous_summary or "")
    requests: dict[str, str] = {}
    for item in [*_requests(request.earlier), *previous.get("requests", []), *previous.get("goals", []), *_requests(request.head)]:
        requests.setdefault(_same_request(item), item)
    carried = [p for item in previous.get("changed", []) if not item.startswith("(") for p in item.split("; ")]
    changed = list(dict.fromkeys([*_changed(request.earlier), *carried, *_changed(request.head)]))
    return {"requests": list(requests.values()), "changed": changed}


#: Shorter and shorter forms of a request (characters) tried when the carried sections do not fit;
#: 48 keeps the first 40 characters the person typed, enough to recognise it.
_REQUEST_FORMS = (ITEM_CHARS, 120, 72, 48)


def _short_path(path: str) -> str:
    """The last two components of a path (``src/app.py`` of ``/home/u/repo/src/app.py``)."""
    parts = [p for p in re.split(r"[\\/]+", path) if p]
    return "/".join(parts[-2:]) if len(parts) > 2 else path


def condensed(carried: dict[str, list[str]], budget: int) -> dict[str, list[str]]:
    """``carried`` in the fullest form that fits ``budget`` tokens, never dropping an item while a
    shorter form remains: requests clipped to 240, 120, 72 then 48 characters; then paths to their
    last two components, then several paths to a line. Only when even that exceeds the budget are
    the oldest items left out (never the first request), replaced by one line saying how many
    (the archive keeps them).
    """
    requests, changed = carried.get("requests", []), carried.get("changed", [])

    def cost(sections: dict[str, list[str]]) -> int:
        return _token_counts([render_sections(sections)])[0] if any(sections.values()) else 0

    forms: list[dict[str, list[str]]] = []
    for limit in _REQUEST_FORMS:
        forms.append({"requests": [_clip(r, limit) for r in requests], "changed": list(changed)})
    short = list(dict.fromkeys(map(_short_path, changed)))
    forms.append({"requests": forms[-1]["requests"], "changed": short})
    forms.append({"requests": forms[-1]["requests"], "changed": ["; ".join(short[i:i + 6]) for i in range(0, len(short), 6)]})
    for form in forms:
        if cost(form) <= budget:
            return form
    requests, changed = forms[-1]["requests"], forms[-1]["changed"]
    # Leave out the oldest items (never the first request), one at a time from the longer list, until
    # the rest fits: each item's cost counted once (a line "- item"), so this is linear in the items.
    item_costs = _token_counts([f"- {x}\n" for x in (*requests, *changed)])
    request_costs, changed_costs = item_costs[: len(requests)], item_costs[len(requests):]
    note_cost = 2 * 16  # the two "(N more ...: see the archive)" lines, tokens at most
    total = cost(forms[-1]) + note_cost
    first_r, first_c = 1, 0  # next request / changed line to leave out
    while total > budget and (first_r < len(requests) or first_c < len(changed)):
        if first_c < len(changed) and len(changed) - first_c >= len(requests) - first_r:
            total -= changed_costs[first_c]
            first_c += 1
        else:  # the first request stays (DESIGN §9: after five compactions the first request is still there)
            total -= request_costs[first_r]
            first_r += 1
    notes = {"requests": [f"({first_r - 1} more requests: see the archive)"] if first_r > 1 else [],
             "changed": [f"({first_c} more lines of changed files: see the archive)"] if first_c else []}
    return {"requests": requests[:1] + notes["requests"] + requests[first_r:], "changed": notes["changed"] + changed[first_c:]}


def collect_sections(request: SummaryRequest) -> dict[str, list[str]]:
    """Candidate items per section, most important first (carried items of a previous summary last)."""
    previous = parse_sections(request.previous_summary or "")
    sections = {
        "instructions": list(request.instructions),
        "requirements": _requirements(request.head),
        "files": _files(request.head) + previous.get("files", []),
        "commands": _commands(request.head) + previous.get("commands", []),
        "errors": _errors(request.head) + previous.get("errors", []),
        "decisions": _assistant_sentences(request.head, _DECISION) + previous.get("decisions", []),
        "open_items": _assistant_sentences(request.head[-6:], _OPEN) + previous.get("open_items", []),
        "tools": _tool_calls(request.head) + previous.get("tools", []),
    }
    seen: set[str] = set()
    unique: dict[str, list[str]] = {}
    for key in ("instructions", "requirements", "open_items", "errors", "files", "commands", "decisions", "tools"):
        unique[key] = [item for item in dict.fromkeys(sections[key]) if item not in seen]
        seen.update(unique[key])
    return unique


def _fill(sections: dict[str, list[str]], budget: int, order: Sequence[str] = _FILL_ORDER,
          carried: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Pick items round-robin over the sections of ``order`` up to ``budget`` tokens; instructions
    and the ``carried`` sections (every request and changed file, :func:`condensed`) are always kept."""
    keys = [k for k in order if sections.get(k)]
    lines = [f"- {item}\n" for key in keys for item in sections[key]]
    costs = iter(_token_counts(lines))
    pending = {key: [(item, next(costs)) for item in sections[key]] for key in keys}
    chosen: dict[str, list[str]] = {**(carried or {}), "instructions": list(sections.get("instructions", []))}
    chosen = {k: v for k, v in chosen.items() if v or k == "instructions"}
    used = _token_counts([render_sections(chosen)])[0] if any(chosen.values()) else 0
    while any(pending.values()):
        for key in keys:
            if not pending[key]:
                continue
            for item, cost in [pending[key].pop(0) for _ in range(min(_ITEMS_PER_ROUND.get(key, 1), len(pending[key])))]:
                cost += _HEADING_TOKENS * (key not in chosen and not (key == "requirements" and chosen["instructions"]))
                if used + cost <= budget:
                    chosen.setdefault(key, []).append(item)
                    used += cost
    chosen["instructions"] += chosen.pop("requirements", [])
    return chosen


@dataclass(frozen=True, slots=True)
class ExtractiveSummarizer:
    """Deterministic offline summarizer: labelled sections of items taken verbatim from the head.

    Sections (``prompts.toml``): the user's goals, standing instructions, files touched,
    commands run, errors seen, decisions, open items. Items are filled round-robin until the
    summary reaches ``request.target_tokens`` (S), never above ``request.max_tokens``, except
    that standing instructions are always all kept. A previous summary's items are carried.
    When these sections are thin (under ``THIN_SUMMARY_CHARS`` characters: a short prompt and tool
    calls whose outputs hold no file, command or error), a section of the tool calls is added
    (name, key argument, first line of the result, error lines first), so the summary says what
    the head did and clears :func:`check_summary`'s minimum.
    """

    name: str = "extractive"
    #: Runs offline: it cannot fail the way a model request does, so the circuit breaker never gates it.
    offline: bool = True

    def __call__(self, request: SummaryRequest) -> str:
        """The summary body for ``request`` (see the class docstring)."""
        sections = collect_sections(request)
        budget = min(request.target_tokens, request.max_tokens)
        carried = condensed(carried_forward(request), _carried_budget(request))
        body = render_sections(_fill(sections, budget, carried=carried))
        if len(body) < THIN_SUMMARY_CHARS and sections.get("tools"):
            body = render_sections(_fill(sections, budget, (*_FILL_ORDER, "tools"), carried=carried))
        return body


def _carried_budget(request: SummaryRequest) -> int:
    """Tokens the carried sections may take: the summary's hard bound less the instructions and a
    tenth for the other sections (DESIGN §9: the summary stays within its size bound)."""
    instructions = _token_counts([render_sections({"instructions": list(request.instructions)})])[0] if request.instructions else 0
    return max(request.max_tokens - instructions - request.max_tokens // 10, 0)


def check_summary(summary: str, head: Sequence[Message]) -> str:
    """``summary`` stripped, or :class:`SummaryTooShortError` when it is empty or too short.

    Too short: under ``MIN_SUMMARY_CHARS`` characters, or under a twentieth of the head's text
    when that is less (a head of a few words may have a summary of a few words; a handful of
    tool outputs, a summary of a line or two).
    """
    text = (summary or "").strip()
    head_chars = sum(len(m.text) + sum(len(r.text) for r in m.tool_results) for m in head)
    needed = min(MIN_SUMMARY_CHARS, max(1, head_chars // 20))
    if len(text) < needed:
        raise SummaryTooShortError(
            f"the summary has {len(text)} characters, fewer than the {needed} required for a head of "
            f"{len(head)} messages ({head_chars:,} characters): compaction aborted, input untouched"
        )
    return text


def with_instructions(summary: str, instructions: Sequence[str], request: SummaryRequest | None = None) -> str:
    """``summary`` plus an instructions section holding every standing instruction it lacks and,
    given the ``request``, the requests and changed files it lacks (:func:`carried_forward`,
    condensed to the room left under ``request.max_tokens``): whatever the summarizer (an LLM may
    leave some out), every summary carries the whole past forward (DESIGN §9)."""
    missing = [i for i in instructions if i not in summary]
    out = f"{summary}\n\n{render_sections({'instructions': missing})}".strip() if missing else summary
    if request is None:
        return out
    carried = carried_forward(request)
    flat = " ".join(out.split())
    lacking = {
        "requests": [r for r in carried["requests"] if _same_request(r) not in flat],
        "changed": [p for p in carried["changed"] if p not in flat and _short_path(p) not in flat],
    }
    if not any(lacking.values()):
        return out
    room = request.max_tokens - _token_counts([out])[0]
    return f"{out}\n\n{render_sections(condensed(lacking, max(room, 0)))}".strip()
