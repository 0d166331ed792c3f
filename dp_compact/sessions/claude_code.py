"""Claude Code session transcripts (``~/.claude/projects/<project>/<session>.jsonl``, DESIGN §4).

One record per line; ``type`` selects the kind. ``user`` and ``assistant`` records carry
messages, and ``attachment`` records context the CLI injects into the next request (task and
todo reminders, queued task notifications, files re-read after a compaction, skill and tool
listings, ...): each becomes an ``injected`` user message holding the text Claude Code sends for
it (:mod:`dp_compact.sessions.claude_code_attachments`), placed after the tool results of the
response it follows. Every other type (``system``, ``progress``, ``file-history-snapshot``,
``queue-operation``, ``last-prompt``, ``summary``, ...) is bookkeeping and skipped, except the
``system``/``compact_boundary`` marker. Quirks handled (``sessions/FORMATS.md`` (a)):

- One API response is written as several ``assistant`` lines sharing ``message.id``, possibly
  interleaved with the results of its tool calls (streamed tool execution). They become ONE
  assistant message holding every block in order, followed by ONE tool message holding all the
  results that answer it (the Anthropic API shape). Usage is counted once per ``message.id``
  with the last line's numbers (``output_tokens`` grows across the lines).
- ``<synthetic>`` API-error placeholders (``model == "<synthetic>"`` or ``isApiErrorMessage``)
  are not LLM calls, carry no usage and are not sent back to the API: dropped.
- Sidechain records (``isSidechain``: sub-agent traffic) are not part of the main conversation.
- ``isMeta`` user lines (skill bodies, command caveats and output injected by the CLI), task
  notifications, interruption markers and local-command output are kept as user messages (they
  are sent to the model) of kind ``injected``, compaction summaries of kind ``summary``: neither
  is a user turn (:attr:`~dp_compact.conversation.Message.is_user_turn`).
- ``compact_boundary``: only the messages after the last marker are the live conversation; it
  starts with the ``isCompactSummary`` user message. Each marker is also kept as a
  :class:`~dp_compact.conversation.RecordedCompaction`: ``compactMetadata.trigger`` and
  ``preTokens``, and the text of the summary message that follows it; and as a
  :class:`~dp_compact.conversation.CompactionMarker` (``preTokens``, ``postTokens``, where it
  splits the history), from which the history's segments are made without reading again.
- Each API response's time is the ``timestamp`` of its first line (``Session.call_times``).
- File order is kept unless a record's ``parentUuid`` names a record written later; such a
  record is moved right after its parent (a tool result written before its call).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from itertools import chain
from typing import Any

from dp_compact.text.patterns import is_injected_text
from dp_compact.sessions.anthropic import anthropic_message
from dp_compact.sessions.claude_code_attachments import attachment_message
from dp_compact.sessions.common import build_session, is_summary_text, relink
from dp_compact.conversation import CompactionMarker, Message, MessageKind, RecordedCompaction, Session, Usage, new_message
from dp_compact.sessions.source import Record, Records, Source, each_record, is_plain_string
from dp_compact.sessions.usage import usage_from_api

__all__ = ["DESCRIPTION", "FORMAT", "read", "sniff"]

FORMAT = "claude_code"
DESCRIPTION = "Claude Code transcript JSONL (type/uuid/parentUuid/message records, ~/.claude/projects)"

_SYNTHETIC_MODEL = "<synthetic>"


def _is_message_record(value: Any) -> bool:
    """A Claude Code ``user``/``assistant`` record: envelope keys plus a ``message`` object."""
    return (
        isinstance(value, dict)
        and value.get("type") in ("user", "assistant")
        and isinstance(value.get("message"), dict)
        and "uuid" in value
        and ("parentUuid" in value or "sessionId" in value)
    )


def _is_bookkeeping_record(value: Any) -> bool:
    """A Claude Code record that holds no message (``progress``, ``queue-operation``,
    ``file-history-snapshot``, ``last-prompt``, ...): a ``type`` with Claude Code's ``sessionId``,
    or a file-history snapshot."""
    return isinstance(value, dict) and isinstance(value.get("type"), str) and (
        isinstance(value.get("sessionId"), str) or (value["type"] == "file-history-snapshot" and "snapshot" in value))


def sniff(source: Source) -> bool:
    """True for JSONL holding a Claude Code ``user``/``assistant`` record among its first records
    (``Source.sample``), or only records Claude Code writes before the first message (a session
    just started: read as a transcript with no message yet)."""
    if source.records is None:
        return False
    sample = source.sample
    return any(_is_message_record(r.value) for r in sample) or (
        bool(sample) and all(_is_bookkeeping_record(r.value) for r in sample))


def _links(records: Sequence[Record]) -> list[tuple[Any, Any] | None]:
    """``(uuid, parentUuid)`` of each record by position (None for a line skipped as malformed);
    the records are parsed one at a time and not kept."""
    values = records.values() if isinstance(records, Records) else (r.value for r in records)
    links: list[tuple[Any, Any] | None] = []
    append = links.append
    for value in values:
        if isinstance(value, dict):
            append((value.get("uuid"), value.get("parentUuid")))
        else:  # a malformed line a lenient source skips, or a value that is not a record (an error when read)
            append(None if value is Records.SKIPPED else (None, None))
    return links


def _order(links: Sequence[tuple[Any, Any] | None]) -> list[int] | None:
    """Positions in reading order: file order, except that a record whose parent comes later
    follows its parent (and a record whose parent never comes stays in place); None when that is
    the file order itself (no parent comes after its child, as in most files)."""
    known = {uuid for link in links if link is not None and isinstance(uuid := link[0], str)}
    seen: set[str] = set()
    for link in links:
        if link is None:
            continue
        uuid, parent = link
        if isinstance(parent, str) and parent not in seen and parent in known:
            break
        if isinstance(uuid, str):
            seen.add(uuid)
    else:
        return None
    out: list[int] = []
    emitted: set[str] = set()
    waiting: dict[str, list[int]] = defaultdict(list)
    for position, link in enumerate(links):
        if link is None:
            continue
        parent = link[1]
        if isinstance(parent, str) and parent in known and parent not in emitted:
            waiting[parent].append(position)
            continue
        stack = [position]
        while stack:
            current = stack.pop()
            out.append(current)
            uuid = links[current][0]  # type: ignore[index]
            if isinstance(uuid, str):
                emitted.add(uuid)
                stack.extend(reversed(waiting.pop(uuid, [])))
    return out + sorted(p for group in waiting.values() for p in group)


class _ParentLater(Exception):
    """Raised by :func:`_reading_order` when its one pass cannot give the order of :func:`_order`."""


class _Held(Exception):
    """Raised by :meth:`_Reader.record` while it reads in file order, at the first record whose
    parent has not come yet: from that record on, :func:`_reading_order` gives the order."""

    def __init__(self, record: Record) -> None:
        super().__init__(record.line)
        self.record = record


#: Parents not come yet that :func:`_reading_order` looks for, one search of the rest of the file
#: each, before it reads the uuids of the rest of the file once instead.
_DANGLING_CHECKS = 16


def _reading_order(records: Records, rest: Iterable[Record] | None = None, emitted: set[str] | None = None) -> Iterator[Record]:
    """The records in the order of :func:`_order`, in one pass over the file (``rest``: the
    records from where a reader stopped reading in file order, whose uuids so far are
    ``emitted``; default: every record, none emitted).

    A record whose parent has not come yet is held back when the parent may still come (it is
    held, or the record itself, or a uuid further on in the file), and follows its parent the
    moment the parent comes, as :func:`_order` places it; only such records are held. Whether a
    parent may come is asked of the file's bytes: it may when a ``uuid`` spelled as it is comes
    just further on (:meth:`Records.spelled_soon`, the usual case: a tool result a few lines
    before its call); not at all when its quoted spelling is nowhere further on
    (:meth:`Records.absent_after`), else when it is among the ``uuid`` values further on
    (:meth:`Records.plain_values_after`), or always when unsure (escapes). A record held for a
    parent that never came as a record's uuid (a ``uuid`` key deeper in some record, or unsure)
    would have stayed in place: the pass raises :class:`_ParentLater` at the end, and the
    reader takes the two passes of :func:`_order`. The others held at the end come last, in
    file order, as :func:`_order` leaves them.
    """
    emitted = set() if emitted is None else emitted  # uuids of the records given so far
    held: set[str] = set()  # uuids of the records held back
    waiting: dict[str, list[Record]] = {}
    later: set[str] | None = None  # uuid values further on in the file, once read
    unsure = checks = 0
    for record in records if rest is None else rest:
        value = record.value
        uuid, parent = (value.get("uuid"), value.get("parentUuid")) if type(value) is dict else (None, None)
        if type(parent) is str and parent not in emitted:
            if parent in held or parent == uuid:
                come = True
            elif later is not None:
                come = unsure or parent in later or not is_plain_string(parent)
            elif records.spelled_soon(record.line, "uuid", parent):  # a uuid just further on: no search of the rest
                come = True
            elif checks < _DANGLING_CHECKS and records.absent_after(record.line, parent):
                checks += 1
                come = False
            else:
                found = records.plain_values_after(record.line, "uuid")
                later, unsure = (set(), True) if found is None else (found, False)
                come = unsure or parent in later or not is_plain_string(parent)
            if come:
                waiting.setdefault(parent, []).append(record)
                if type(uuid) is str:
                    held.add(uuid)
                continue
        yield record
        if type(uuid) is str:
            emitted.add(uuid)
            if waiting:
                yield from _released(uuid, waiting, emitted)
    if waiting:
        if any(parent not in held for parent in waiting):  # a parent that never came: it would have stayed in place
            raise _ParentLater
        yield from sorted((r for group in waiting.values() for r in group), key=lambda r: r.line)


def _released(uuid: str, waiting: dict[str, list[Record]], emitted: set[str]) -> Iterator[Record]:
    """The held records that follow the record ``uuid`` just given, depth first, as :func:`_order` places them."""
    stack = list(reversed(waiting.pop(uuid, [])))
    while stack:
        record = stack.pop()
        yield record
        child = record.value.get("uuid")
        if type(child) is str:
            emitted.add(child)
            stack.extend(reversed(waiting.pop(child, [])))


class _Part:
    """Blocks collected from one or more lines that become one message."""

    __slots__ = ("line", "blocks", "nbytes", "lines", "key", "call_ids", "source")

    def __init__(self, line: int, blocks: list[Any], nbytes: int, key: str, source: Any, calls: bool) -> None:
        """The part of one line's ``blocks`` (held as they are until a second line adds to them;
        see :meth:`add` for ``calls``). Arguments in order: a part is made per line."""
        self.line, self.key, self.source = line, key, source
        self.blocks = blocks
        self.nbytes, self.lines = nbytes, 1
        self.call_ids: set[str] = _call_ids(blocks) if calls else _NO_IDS

    def add(self, blocks: list[Any], nbytes: int, calls: bool) -> None:
        """Add one line's blocks; ``calls``: keep the ids of their tool calls (an API response's part)."""
        self.blocks = [*self.blocks, *blocks]  # a new list: the first line's stays as parsed
        self.nbytes += nbytes
        self.lines += 1
        if calls:
            self.call_ids = self.call_ids | _call_ids(blocks)

    def message(self, role: str) -> Message:
        return anthropic_message({"role": role, "content": self.blocks}, self.line, self.nbytes, self.lines)


#: The call ids of a part that holds no API response's calls (shared, never changed).
_NO_IDS: frozenset[str] = frozenset()


def _call_ids(blocks: list[Any]) -> set[str]:
    """Ids of the ``tool_use`` blocks among ``blocks``."""
    ids = set()
    for b in blocks:
        if type(b) is dict or isinstance(b, dict):
            if b.get("type") == "tool_use" and "id" in b:
                ids.add(_as_id(b["id"]))
    return ids


def _as_id(value: Any) -> str:
    """A call id as its :class:`~dp_compact.conversation.ToolCall` or ``ToolResult`` holds it (a string)."""
    return value if type(value) is str else str(value)


def _blocks(record: Record, kind: str) -> tuple[dict[str, Any], list[Any] | str]:
    """The ``message`` object and its content of a user/assistant record, validated."""
    message = record.value.get("message")
    if not isinstance(message, dict):
        raise ValueError(f"a Claude Code {kind!r} record needs a 'message' object")
    content = message.get("content")
    if content is None:
        return message, []
    if not isinstance(content, (str, list)):
        raise ValueError(f"message.content of a {kind!r} record must be a string or a list of blocks")
    return message, content


def _recorded_compaction(value: dict[str, Any], line: int) -> RecordedCompaction:
    """What a ``compact_boundary`` record tells: ``compactMetadata.trigger`` and ``preTokens``."""
    meta = value.get("compactMetadata") if isinstance(value.get("compactMetadata"), dict) else {}
    trigger, pre = meta.get("trigger"), meta.get("preTokens")
    return RecordedCompaction(
        "claude-code", line, trigger=trigger if isinstance(trigger, str) else None,
        pre_tokens=pre if isinstance(pre, int) and not isinstance(pre, bool) and pre > 0 else None,
    )


def _marker(value: dict[str, Any], line: int, messages: int, usage: int) -> CompactionMarker:
    """The :class:`CompactionMarker` of a ``compact_boundary`` record: ``compactMetadata.preTokens`` and
    ``postTokens`` when they are integers, and the messages and usage records read before it."""
    meta = value.get("compactMetadata") if isinstance(value.get("compactMetadata"), dict) else {}
    pre, post = meta.get("preTokens"), meta.get("postTokens")
    return CompactionMarker(line, pre_tokens=pre if isinstance(pre, int) else None, post_tokens=post if isinstance(post, int) else None,
                            messages_before=messages, usage_before=usage)


def _with_summaries(markers: list[CompactionMarker], messages: list[Message]) -> tuple[CompactionMarker, ...]:
    """``markers`` with their summary: the first message of the segment each opens, when it is a user message."""
    ends = [m.messages_before for m in markers[1:]] + [len(messages)] if markers else []
    return tuple(
        replace(m, summary_text=messages[m.messages_before].text)
        if m.messages_before < end and messages[m.messages_before].role == "user" else m
        for m, end in zip(markers, ends, strict=True)
    )


def _kind(value: dict[str, Any], message: Message) -> MessageKind:
    """``summary`` (``isCompactSummary`` or its text), ``injected`` for a user message the CLI wrote
    (meta, notification, interruption, local-command output, a non-human ``origin``), else ``prompt``."""
    text = message.text.lstrip()
    if value.get("isCompactSummary") or is_summary_text(text):
        return "summary"
    if value.get("isMeta") or value.get("isVisibleInTranscriptOnly"):
        return "injected"
    origin = value.get("origin")
    if isinstance(origin, dict) and origin.get("kind") not in (None, "human", "user"):
        return "injected"
    return "injected" if is_injected_text(text) else "prompt"


class _Reader:
    """State of one pass over the records."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.messages: list[Message] = []
        self.usage: dict[str, Usage] = {}
        self.assistant: _Part | None = None
        self.results: _Part | None = None
        self.live_start = 0
        self.compactions = 0
        self.skipped = 0
        self.model: str | None = None
        self.records: list[RecordedCompaction] = []
        self.markers: list[CompactionMarker] = []
        self.times: list[Any] = []  # the timestamp of each assistant message emitted (Session.call_times)
        self.assistant_time: Any = None  # that of the open response's first line
        self.awaiting_summary = False
        self.attachments: list[Message] = []
        self.in_order = True  # reading in file order: every parent so far has come (see record)
        self.uuids: list[str] = []  # uuids of the records read in order (a set is made of them only when asked)
        self.last_uuid: str | None = None  # the last of them: the parent of most records
        self.emitted: set[str] = set()  # the first ``self.in_set`` of them
        self.in_set = 0

    def read_uuids(self) -> set[str]:
        """The uuids of the records read in file order so far, as a set."""
        if self.in_set < len(self.uuids):
            self.emitted.update(self.uuids[self.in_set :])
            self.in_set = len(self.uuids)
        return self.emitted

    def flush(self) -> None:
        """Emit the open assistant message, the tool message answering it and the attachments since."""
        if self.assistant is not None:
            self.messages.append(self.assistant.message("assistant"))
            self.times.append(self.assistant_time)
            self.assistant = None
        if self.results is not None:
            self.messages.append(self.results.message("user"))
            self.results = None
        if self.attachments:
            self.messages.extend(self.attachments)
            self.attachments = []

    def attachment_line(self, record: Record) -> None:
        """Context injected by the CLI: an ``injected`` user message after the open response's results."""
        message = attachment_message(record.value.get("attachment"), line=record.line, nbytes=record.nbytes)
        if message is None:
            return
        if self.assistant is None and self.results is None:
            self.messages.append(message)
        else:
            self.attachments.append(message)

    def record(self, record: Record) -> None:
        """Handle one record (raises ValueError when it breaks the format's rules)."""
        value = record.value
        if not isinstance(value, dict):
            raise ValueError("a Claude Code record must be a JSON object")
        if self.in_order:  # what _reading_order does for each record, without a generator between the file and the reader
            parent = value.get("parentUuid")
            if type(parent) is str and parent != self.last_uuid and parent not in self.read_uuids():
                raise _Held(record)
            uuid = value.get("uuid")
            if type(uuid) is str:
                self.uuids.append(uuid)
                self.last_uuid = uuid
        if value.get("isSidechain") is True:
            return
        kind = value.get("type")
        if kind == "assistant":
            self.assistant_line(record)
        elif kind == "user":
            self.user_line(record)
        elif kind == "system":
            if value.get("subtype") == "compact_boundary":
                self.flush()
                self.compactions += 1
                self.live_start = len(self.messages)
                self.records.append(_recorded_compaction(value, record.line))
                self.markers.append(_marker(value, record.line, len(self.messages), len(self.usage)))
                self.awaiting_summary = True
        elif kind == "attachment":
            self.attachment_line(record)

    def assistant_line(self, record: Record) -> None:
        """One content block (or more) of an API response."""
        value = record.value
        message = value.get("message")
        content = message.get("content") if type(message) is dict else None
        if type(content) is not list:  # a string, none, or not valid (_blocks raises)
            message, content = _blocks(record, "assistant")
        model = message.get("model")
        if model == _SYNTHETIC_MODEL or value.get("isApiErrorMessage"):
            return
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        key = message.get("id") or value.get("uuid") or f"line {record.line}"
        if type(key) is not str:
            key = str(key)
        part = self.assistant
        if part is not None and part.key == key:
            part.add(blocks, record.nbytes, True)
        else:
            self.flush()
            self.assistant = _Part(record.line, blocks, record.nbytes, key, None, True)
            self.assistant_time = value.get("timestamp")
        if isinstance(model, str):
            self.model = model
        usage = message.get("usage")
        if isinstance(usage, dict):  # the last line's numbers, at the line of the response's first usage
            first = self.usage.get(key)
            if (counted := usage_from_api(usage, record.line if first is None else first.line)) is not None:
                self.usage[key] = counted

    def user_line(self, record: Record) -> None:
        """A human prompt, an injected user message, or tool results."""
        value = record.value
        message = value.get("message")
        content = message.get("content") if type(message) is dict else None
        if type(content) is not list:  # a string, none, or not valid (_blocks raises)
            _, content = _blocks(record, "user")
        results = []  # the call ids its tool results answer (_as_id, inline)
        if isinstance(content, list):
            for b in content:
                if (type(b) is dict or isinstance(b, dict)) and b.get("type") == "tool_result":
                    answered = b.get("tool_use_id", "")
                    results.append(answered if type(answered) is str else str(answered))
        if results:
            origin = value.get("sourceToolAssistantUUID")
            assistant, open_results = self.assistant, self.results
            if (assistant is not None and set(results) <= assistant.call_ids) or (
                assistant is None and open_results is not None and origin and open_results.source == origin
            ):
                if open_results is None:
                    self.results = _Part(record.line, content, record.nbytes, "", origin, False)  # type: ignore[arg-type]
                else:
                    open_results.add(content, record.nbytes, False)  # type: ignore[arg-type]
                return
            self.flush()
            if origin:  # results whose call is missing from the file: keep them together
                self.results = _Part(record.line, content, record.nbytes, "", origin, False)  # type: ignore[arg-type]
                return
        else:
            self.flush()
        message = anthropic_message({"role": "user", "content": content}, record.line, record.nbytes, 1)
        if message.role == "user" and (kind := _kind(value, message)) != message.kind:  # made again only when it differs
            message = new_message(
                "user", message.text, message.tool_calls, message.tool_results, thinking=message.thinking,
                signed_thinking=message.signed_thinking, images=message.images, line=message.line,
                source_bytes=message.source_bytes, source_lines=message.source_lines, raw=message.raw, kind=kind,
            )
        self.messages.append(message)
        if self.awaiting_summary and value.get("isCompactSummary"):
            self.records[-1] = replace(self.records[-1], summary_text=message.text)
        self.awaiting_summary = False


def read(source: Source) -> Session:
    """Read a Claude Code transcript into a :class:`Session`.

    Parameters
    ----------
    source : Source
        JSONL records of the transcript.

    Returns
    -------
    Session
        Live messages after the last ``compact_boundary``; one usage record per distinct
        ``message.id`` (tokens; prompt = input + cache reads + cache writes) in call order;
        ``user_turns`` counts typed prompts only; ``llm_calls`` = ``len(usage)``;
        ``compaction_records`` one per ``compact_boundary`` (trigger, ``preTokens``, summary);
        ``markers`` one per ``compact_boundary`` (where it splits the history); ``call_times`` the
        ``timestamp`` of each response's first line.

    Raises
    ------
    MalformedLineError
        A ``user``/``assistant`` record without a ``message`` object or with invalid content,
        or a line that is not a JSON object (``path:line``); skipped when the source is lenient.
    """
    records = source.records or ()
    reader = _Reader(source)
    try:  # one pass, the records held back that come before their parent
        if not isinstance(records, Records):
            raise _ParentLater
        walk = iter(records)
        try:  # in file order while each record's parent has come before it (most files, whole)
            reader.skipped += each_record(source, walk, reader.record)
        except _Held as held:  # from here on the records held back follow their parent
            reader.in_order = False
            reader.skipped += each_record(source, _reading_order(records, chain([held.record], walk), reader.read_uuids()), reader.record)
    except _ParentLater:  # a first pass keeps each record's uuid and parent
        order = _order(_links(records))
        reader = _Reader(source)
        reader.in_order = False
        reader.skipped += each_record(source, records if order is None else (records[i] for i in order), reader.record)
    reader.flush()
    messages = relink(reader.messages, reader.live_start)
    return build_session(
        path=source.path,
        format=FORMAT,
        messages=messages,
        usage=list(reader.usage.values()),
        live_start=reader.live_start,
        compactions=reader.compactions,
        model=reader.model,
        skipped_lines=source.skipped + reader.skipped,
        compaction_records=tuple(reader.records),
        markers=_with_summaries(reader.markers, messages),
        call_times=tuple(reader.times),
    )
