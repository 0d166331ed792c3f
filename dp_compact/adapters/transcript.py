"""What an adapter keeps of one conversation between calls (:class:`LiveTranscript`).

The framework's messages as last seen, their chat-completions dicts and usage records, the
reader's pass over them (:class:`~dp_compact.sessions.openai_chat.LiveReader`), each message's
token counts, and the time of each LLM call: a call that appends messages converts, reads and
counts only those, and the session, its tokens and so its plan are those a full read
(:func:`dp_compact.adapters.live.live_session`) gives. :mod:`dp_compact.adapters.live` plans from it.

Pure: the times are given (the adapters read their clock).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dp_compact._fast import replacer
from dp_compact.conversation import Message, Session, Usage, message_kind
from dp_compact.measure.memo import extended, starts_with
from dp_compact.sessions import openai_chat
from dp_compact.sessions.common import json_size, shrunk_recorded
from dp_compact.sessions.source import Record

__all__ = ["BULK_COUNT_MESSAGES", "LiveTranscript", "Wires"]

#: Messages counted at once above which the persistent token cache is opened (a conversation seen
#: whole, e.g. the first call of a resumed thread); fewer are counted directly (opening it costs more).
BULK_COUNT_MESSAGES = 64


#: :func:`dataclasses.replace` of a session and of a usage record, made once per call (:func:`~dp_compact._fast.replacer`).
_replace_session, _replace_usage = replacer(Session), replacer(Usage)


#: One framework message as chat-completions dicts, each with what the adapter maps it back by
#: (pydantic-ai: the indices of the parts it stands for; LangChain: None).
Wires = list[tuple[dict[str, Any], Any]]


def _same_prefix(old: Sequence[Any], new: Sequence[Any]) -> int:
    """Length of the longest common prefix of ``old`` and ``new``: the same objects, or equal ones."""
    if len(old) <= len(new) and old == list(new[:len(old)]):  # the usual append: one pass in C, the same objects at once
        return len(old)
    if all(map(operator.is_, old, new)):
        return min(len(old), len(new))
    for index, (a, b) in enumerate(zip(old, new, strict=False)):
        if a is not b and a != b:
            return index
    return min(len(old), len(new))


class LiveTranscript:
    """What an adapter keeps of one conversation between calls (module docstring).

    Parameters
    ----------
    session_id : str
        The conversation's name: the session's path, the archive's session.

    Attributes
    ----------
    items : list
        The framework's messages as last given (held: the pipeline's output maps back to them).
    raws, payloads, origins : list
        Each chat-completions dict, what the adapter maps it back by, and the index of its message in ``items``.
    rebuilds : int
        Calls that were not an append (the state was rebuilt from the messages given).
    new_from : int
        Index in ``items`` of the first message the latest call added (0 after a rebuild).
    now_s : float or None
        The time of the latest call, epoch seconds.
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.rebuilds = 0
        self.new_from = 0
        self.now_s: float | None = None
        self._clear()

    def _clear(self) -> None:
        """Forget every message (the times of the calls they came from are the caller's to keep)."""
        self.items: list[Any] = []
        self.raws: list[dict[str, Any]] = []
        self.payloads: list[Any] = []
        self.origins: list[int] = []
        self._wires: list[Wires] = []
        self._item_times: list[float | None] = []
        self._usage: list[Usage] = []
        self._call_times: list[float | None] = []
        self._reader = openai_chat.LiveReader(self.session_id)
        self._counted: Sequence[Message] = ()
        self._family: str | None = None
        self._parts: Any = None
        self._read = _ReadSession(self._reader)
        self._usage_seen: tuple[Usage, ...] = ()  # self._usage and self._call_times as tuples, as last given
        self._times_seen: tuple[float | None, ...] = ()

    def update(
        self, items: Sequence[Any], now_s: float | None, *, convert: Callable[[Any], Wires],
        usages: Callable[[Sequence[Any]], list[Usage | None]], usage: Callable[[Any], Usage | None],
        is_ours: Callable[[Any], bool], key: Callable[[Any], Any] = id,
    ) -> None:
        """Take the messages ``items`` of the call made at ``now_s``: read the appended ones, or all of
        them again when the list is not an append (an earlier message replaced or edited, as our
        compactions and clearings do, or one of our summaries among the new ones).

        Parameters
        ----------
        items : sequence
            The framework's messages, oldest first.
        now_s : float or None
            Epoch seconds of the call about to be made (None: unknown).
        convert : callable
            One message as its chat-completions dicts (:data:`Wires`).
        usages, usage : callable
            The usage records of every message (those made before our last compaction or clearing,
            stale, left out), and of one appended message.
        is_ours : callable
            True for a message of ours (a summary; pydantic-ai: also a request whose results we
            cleared): its metadata changes which usage records are stale.
        key : callable
            What names a message across copies (LangChain: its id), to keep the time of its call.

        Raises
        ------
        MalformedLineError
            A message that is not a chat-completions message (the state is then cleared).
        """
        start = _same_prefix(self.items, items)
        appended = start == len(self.items) and not any(is_ours(m) for m in items[start:])
        previous = self.now_s
        converted: dict[int, Wires] = {}  # a rebuild's messages converted before, by object
        if appended:
            self.items[:start] = items[:start]  # a checkpointer's equal copies: the objects given now
            new_times: list[float | None] = [previous] * (len(items) - start)
            new_usages = [usage(m) for m in items[start:]]
        else:
            self.rebuilds += 1
            known = {key(m): t for m, t in zip(self.items, self._item_times, strict=True)}
            converted.update((id(m), w) for m, w in zip(self.items, self._wires, strict=True))
            last_known = max((i for i, m in enumerate(items) if key(m) in known), default=-1)
            new_times = [known.get(key(m), previous if i > last_known else None) for i, m in enumerate(items)]
            new_usages = usages(items)
            self._clear()
            start = 0
        self.new_from = start
        try:
            self._append(items[start:], new_times, new_usages, convert, converted)
        except ValueError:  # MalformedLineError: nothing half-read is kept
            self._clear()
            raise
        self.now_s = now_s

    def _append(self, items: Sequence[Any], times: list[float | None], usages: list[Usage | None], convert: Callable[[Any], Wires],
                converted: dict[int, Wires]) -> None:
        """Convert and read the messages ``items`` appended, with the time of the call each came from and their usage."""
        records = []
        for item, at, used in zip(items, times, usages, strict=True):
            wires = converted.get(id(item)) or convert(item)
            index = len(self.items)
            self.items.append(item)
            self._item_times.append(at)
            self._wires.append(wires)
            for raw, payload in wires:
                line = len(self.raws) + 1
                self.raws.append(raw)
                self.payloads.append(payload)
                self.origins.append(index)
                records.append(Record(line, raw, json_size(raw)))
                if raw.get("role") == "assistant":
                    self._call_times.append(at)
                if used is not None:  # as live_session places it: on each dict of the message
                    self._usage.append(_replace_usage(used, line=line))
        self._reader.add(records)

    def session(self, facts: Any = None, system_text: str = "") -> Session:
        """The conversation as :func:`~dp_compact.adapters.live.live_session` reads it (``facts``: the
        :class:`~dp_compact.adapters.live.ModelFacts` of the model, or None), each assistant message timed by the call that made it
        (``Session.call_times``, epoch seconds; None where the call came before this adapter saw the conversation)."""
        # the lists only grow between two rebuilds: each tuple is the last one extended (a plan's passes over it resume)
        self._usage_seen = extended(self._usage_seen, self._usage[len(self._usage_seen):])
        self._times_seen = extended(self._times_seen, self._call_times[len(self._times_seen):])
        extra: dict[str, Any] = {"usage": self._usage_seen, "call_times": self._times_seen}
        if facts is not None and facts.name:
            extra["model"] = facts.name
        if facts is not None and facts.window:
            extra["context_window"] = facts.window
        if system_text:
            extra["system_text"] = system_text
        return self._read.session(extra)  # the reader's session with these fields, made at once

    def token_parts(self, session: Session, settings: Any) -> Any:
        """:func:`~dp_compact.measure.tokens.message_token_parts` of ``session.messages`` (a session of this
        transcript), counting only the messages not counted before."""
        from dp_compact.measure.tokens import TokenParts, message_token_parts
        from dp_compact.prepare import session_family

        messages = session.messages
        family = session_family(session, settings)
        if family != self._family or self._parts is None:
            self._family, self._counted, self._parts = family, (), None
        done = _identical_prefix(self._counted, messages)
        if self._parts is not None and done < len(self._counted):  # a message changed: count all again
            done, self._parts = 0, None
        if len(messages) - done > BULK_COUNT_MESSAGES:  # a conversation seen whole: the persistent cache may know its texts
            from dp_compact.measure.tokens import TokenCache

            cache = TokenCache()
            try:
                new = message_token_parts(messages[done:], cache=cache, family=family)
            finally:
                cache.close()
        else:
            new = message_token_parts(messages[done:], family=family)
        old = self._parts
        if old is not None:
            new = TokenParts(np.concatenate((old.text, new.text)), np.concatenate((old.images, new.images)),
                             np.concatenate((old.documents, new.documents)), old.referenced + new.referenced)
        self._counted, self._parts = messages, new
        return new


class _ReadSession:
    """``reader.session()`` of a :class:`~dp_compact.sessions.openai_chat.LiveReader`, assembled from the
    session assembled last time and the messages read since (:meth:`session`).

    The reader's session costs a pass over every message (the links of tool results to their calls,
    the counts of user turns and LLM calls, the statements of earlier compactions). When the messages
    read since the last call are a plain append, that session is the last one with them appended:
    no marker, summary or system message among them (the live part, its counts' base and the prefix
    stay), every tool result after its call and no call id used twice (linking leaves the order and
    the ids as they are: the state of its first pass is kept), no statement of a shrunk or cleared
    file (:func:`~dp_compact.sessions.common.shrunk_recorded`), and not a run whose actions live in
    the assistant text (read with tool calls made up). Anything else is read whole, as the reader reads it.

    Parameters
    ----------
    reader : LiveReader
        The reader whose messages are assembled (its pass over them: messages, live start, counts).
    """

    def __init__(self, reader: openai_chat.LiveReader) -> None:
        self._reader = reader
        self._base: Session | None = None  # the reader's session as last read whole
        self._changes: dict[str, Any] = {}  # the fields of the reader's session now that differ from self._base's (appends since)
        self._key: tuple[int, ...] = ()
        self._done = 0  # reader messages in self._session
        self._times = 0  # reader call times in self._session
        self._calls: set[str] = set()  # call ids made in the live part, in the first pass of link_tool_results
        self._made = 0  # calls made in the live part (more than len(self._calls): an id used twice)
        self._early = False  # a result in the live part whose call does not come before it
        self._has_calls = False  # some message calls tools or answers a call
        self._marks = False  # some message without calls reads as an action of a text-action run
        self._stated = False  # some tool result states what a shrink or clearing of its file recorded

    @property
    def _session(self) -> Session | None:
        """The session ``reader.session()`` returned at the last :meth:`session` (equal to it); None before the first."""
        if self._base is None or not self._changes:
            return self._base
        return _replace_session(self._base, **self._changes)

    def _field(self, name: str) -> Any:
        """Field ``name`` of :attr:`_session`, without making that session."""
        changes = self._changes
        return changes[name] if name in changes else getattr(self._base, name)

    def session(self, extra: dict[str, Any] | None = None) -> Session:
        """The session ``reader.session()`` returns now (equal to it: the same messages, counts and fields), with the
        fields ``extra`` (field name: value) replaced: ``replace(reader.session(), **extra)``, made as one session."""
        state = self._reader._reader  # the reader's pass: messages, live start, markers, system messages, call times
        messages = state.messages
        new = messages[self._done:]
        self._observe(new, self._done - state.live_start)
        key = (state.live_start, state.compactions, len(state.system_raw), len(state.records))
        plain = (self._base is not None and key == self._key and not self._early and self._made == len(self._calls)
                 and not self._stated and (self._has_calls or not self._marks) and "summary" not in map(message_kind, new))
        if plain:  # the last session with the messages read since appended: its changed fields (Session has no __post_init__)
            added = tuple(new)
            kinds = list(map(message_kind, added))
            since = self._field("messages_since_compaction")
            self._changes = {
                "messages": extended(self._field("messages"), added), "history": extended(self._field("history"), added),
                "user_turns": self._field("user_turns") + kinds.count("prompt"),
                "llm_calls": self._field("llm_calls") + kinds.count("assistant"),
                "messages_since_compaction": None if since is None else since + len(added),
                "call_times": extended(self._field("call_times"), state.times[self._times:]),
            }
        else:
            self._base, self._changes = self._reader.session(), {}
            if key != self._key:  # another live part: its first linking pass again
                self._key, self._calls, self._made, self._early = key, set(), 0, False
                self._link(messages[state.live_start:])
        self._done, self._times = len(messages), len(state.times)
        if not extra:
            return self._session  # type: ignore[return-value]
        if "system_text" in extra and self._field("system_text"):  # a system text given stands in only for none read
            extra = {name: value for name, value in extra.items() if name != "system_text"}
        return _replace_session(self._base, **{**self._changes, **extra})  # type: ignore[arg-type]

    def _observe(self, new: Sequence[Message], offset: int) -> None:
        """Take in the messages ``new`` read since the last call (``offset``: the index of the first in the live part)."""
        if offset >= 0:
            self._link(new)
        calls = any(m.tool_calls or m.tool_results for m in new)
        if not calls and not self._has_calls and not self._marks:
            self._marks = openai_chat._is_action_trajectory(list(new), None)
        self._has_calls = self._has_calls or calls
        self._stated = self._stated or any(shrunk_recorded(r.text) for m in new for r in m.tool_results)

    def _link(self, messages: Sequence[Message]) -> None:
        """The first pass of :func:`~dp_compact.sessions.common.link_tool_results` over ``messages`` of the
        live part, continued: which call ids were made, how many calls, and whether a result came before its call."""
        made = self._calls
        for message in messages:
            results = message.tool_results
            if results and not self._early:
                self._early = any(r.call_id not in made for r in results)
            calls = message.tool_calls
            if calls:
                self._made += len(calls)
                made.update(c.id for c in calls)


def _identical_prefix(old: Sequence[Any], new: Sequence[Any]) -> int:
    """Length of the longest common prefix of ``old`` and ``new`` made of the same objects."""
    if starts_with(new, old):  # the usual append (a session extended from the last one: at once)
        return len(old)
    if all(map(operator.is_, old, new)):
        return min(len(old), len(new))
    for index, (a, b) in enumerate(zip(old, new, strict=False)):
        if a is not b:
            return index
    return min(len(old), len(new))
