"""pydantic-ai: :class:`DpCompactProcessor`, a history processor running the planner and the pipeline.

Use it as ``Agent(..., capabilities=[ProcessHistory(DpCompactProcessor(...))])`` (pydantic-ai 2)
or ``Agent(..., history_processors=[DpCompactProcessor(...)])`` (pydantic-ai 1). Before each
model request it reads the ``ModelMessage`` list as a session (:mod:`dp_compact.adapters.live`),
plans (DESIGN §2, §7) and, when the plan says compact, runs the pipeline at the planned feasible
cut (DESIGN §5): the head is summarized and archived, the summary becomes a ``ModelRequest``
(after the system prompt parts), an acknowledgement ``ModelResponse`` follows when the tail
starts with a user prompt, and the kept messages are returned as the same objects. When the plan
clears old tool results instead (DESIGN §9, ``DP_CLEAR_TOOL_RESULTS``, on by default), every message
is returned, and each ``ToolReturnPart`` (or tool ``RetryPromptPart``) before the plan's depth with a
long result (:data:`~dp_compact.measure.clearing.CLEAR_MIN_CHARS` characters or more) is a copy whose
content is a short placeholder naming the archive key of its original
(``archive://<session>/<id>#msg-N``), with the same ``tool_call_id`` and tool name, in a copy of its
``ModelRequest``; every other message is the same object. Otherwise the list is returned unchanged.

With an archive, :meth:`DpCompactProcessor.recall_toolset` is a ``FunctionToolset`` of two tools
for the agent (``toolsets=[...]``, or the ``Toolset`` capability): ``dp_recall`` searches what
compactions and clearings archived and ``dp_restore`` returns archived messages by their
``archive://`` key (:mod:`dp_compact.adapters.recall`). Without an archive nothing is cleared (a
placeholder must name its original). A history processor rewrites the run's history, so
``result.all_messages()`` is the compacted or cleared history; :meth:`DpCompactProcessor.history`
is the application's full record (every message as the run made it, ours and our cleared copies
left out).

With ``native=`` (:mod:`dp_compact.adapters.native`) the processor compacts nothing itself and the
provider acts, through pydantic-ai's own settings and capabilities: an Anthropic edit goes in
``Agent(model_settings=processor.native_model_settings())`` (``anthropic_context_management``,
``anthropic_betas``: the provider acts by the edit's own trigger), or, for Anthropic's compaction
decided by dp, the model wrapped by :meth:`DpCompactProcessor.native_model`, which sends the edit
with the requests dp's plan compacts at; OpenAI's compact endpoint is pydantic-ai's
``OpenAICompaction(trigger=processor.native_trigger)``, which calls ``/responses/compact`` when
dp's plan says compact. The plans price the provider's action as it is billed (``DP_NATIVE``).

The messages are kept between requests (:class:`~dp_compact.adapters.transcript.LiveTranscript`): a request
converts, reads and counts only the messages appended since the last one, and plans with the
processor's clock (the silence since the last request, DESIGN §8).

Token counts come from each ``ModelResponse.usage`` (pydantic-ai's ``input_tokens`` includes the
cache reads and writes) and the model from ``ModelResponse.model_name``; give the window with
``max_context_tokens=`` when the model's profile is not the one a price list knows. Requires
``pip install ".[pydantic-ai]"``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from dp_compact.errors import MissingExtraError

try:
    from pydantic_ai.messages import (
        ModelMessage, ModelRequest, ModelResponse, RetryPromptPart, SystemPromptPart, TextPart, ToolCallPart, ToolReturnPart,
        UserPromptPart,
    )
except ImportError as exc:
    raise MissingExtraError("pydantic_ai", "pydantic-ai", exc.name) from None

from dp_compact.adapters.live import LiveClearing, LiveCompactor, LiveTranscript, ModelFacts, adapter_decision, known_model
from dp_compact.adapters.recall import DEFAULT_RESTORE_CHARS, RECALL_DESCRIPTION, RESTORE_DESCRIPTION, Recall, Scope
from dp_compact.pipeline.compact import CompactionResult
from dp_compact.conversation import Usage

__all__ = ["METADATA_KEY", "DpCompactProcessor", "to_openai", "usage_of"]

#: Key of ``ModelRequest.metadata`` on the requests we make or rewrite (not sent to the model). On our
#: summary request: ``archive_ref`` and ``stale_responses``, how many kept ``ModelResponse`` s after it
#: measured the prompt before compaction. On a request whose tool results we cleared: ``cleared_ref``,
#: the archive key of the originals, ``stale_before`` (every response before it measured a prompt
#: holding them) and ``stale_responses`` (so did that many responses after it).
METADATA_KEY = "dp_compact"


def _user_text(content: Any) -> str:
    """A user prompt's text (non-text content named by its kind)."""
    if isinstance(content, str):
        return content
    return "\n".join(item if isinstance(item, str) else f"[{type(item).__name__}]" for item in content)


def _request_dicts(message: ModelRequest) -> list[tuple[dict[str, Any], list[int]]]:
    """Chat-completions dicts of a request, each with the indices of the parts it stands for."""
    out: list[tuple[dict[str, Any], list[int]]] = []
    for index, part in enumerate(message.parts):
        if isinstance(part, SystemPromptPart):
            out.append(({"role": "system", "content": part.content}, [index]))
        elif isinstance(part, UserPromptPart):
            out.append(({"role": "user", "content": _user_text(part.content)}, [index]))
        elif isinstance(part, ToolReturnPart):
            out.append(({"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response_str()}, [index]))
        elif isinstance(part, RetryPromptPart):
            body = part.model_response()
            wire = {"role": "tool", "tool_call_id": part.tool_call_id, "content": body} if part.tool_name else {"role": "user", "content": body}
            out.append((wire, [index]))
    return out


def _response_dict(message: ModelResponse) -> dict[str, Any]:
    """A response as one assistant dict: its text parts and tool calls (thinking and built-in tools left out)."""
    text = "\n".join(p.content for p in message.parts if isinstance(p, TextPart) and p.content)
    calls = [
        {"id": p.tool_call_id, "type": "function", "function": {"name": p.tool_name, "arguments": p.args_as_json_str()}}
        for p in message.parts if isinstance(p, ToolCallPart)
    ]
    return {"role": "assistant", "content": text or (None if calls else ""), **({"tool_calls": calls} if calls else {})}


def to_openai(messages: Sequence[ModelMessage]) -> list[tuple[dict[str, Any], int, list[int]]]:
    """Each chat-completions dict of ``messages`` with its message index and part indices."""
    return [(wire, n, parts) for n, message in enumerate(messages) for wire, parts in _wires(message)]


def usage_of(message: ModelMessage) -> Usage | None:
    """The :class:`Usage` of a ``ModelResponse`` (tokens; input includes cache reads and writes), else None."""
    usage = getattr(message, "usage", None)
    if not isinstance(message, ModelResponse) or usage is None or not usage.input_tokens:
        return None
    return Usage(
        prompt_tokens=usage.input_tokens, cache_read_tokens=usage.cache_read_tokens, cache_write_tokens=usage.cache_write_tokens,
        output_tokens=usage.output_tokens, convention="openai",
    )


def _wires(message: ModelMessage) -> list[tuple[dict[str, Any], list[int]]]:
    """A message as its chat-completions dicts, each with the indices of the parts it stands for."""
    if isinstance(message, ModelResponse):
        return [(_response_dict(message), list(range(len(message.parts))))]
    return _request_dicts(message)


def _usages(messages: Sequence[ModelMessage]) -> list[Usage | None]:
    """The usage record of each message; None for responses whose usage predates our last compaction."""
    stale = _stale(messages)
    return [None if n in stale else usage_of(m) for n, m in enumerate(messages)]


def _is_ours(message: ModelMessage) -> bool:
    """True for our summary request (it counts the kept responses whose usage is stale)."""
    return isinstance((getattr(message, "metadata", None) or {}).get(METADATA_KEY), dict)


def _stale(messages: Sequence[ModelMessage]) -> set[int]:
    """Indices of responses whose usage predates one of our compactions or clearings (stated on our summary
    request and on the requests a clearing rewrote): a record is stale once the prompt it measured was rewritten."""
    responses = [n for n, m in enumerate(messages) if isinstance(m, ModelResponse)]
    stale: set[int] = set()
    for n, message in enumerate(messages):
        info = (getattr(message, "metadata", None) or {}).get(METADATA_KEY)
        if isinstance(info, dict):
            after = bisect.bisect_right(responses, n)
            stale.update(responses[after : after + int(info.get("stale_responses", 0))])
            if info.get("stale_before"):
                stale.update(responses[:after])
    return stale


def _merged_metadata(first: dict[str, Any] | None, second: dict[str, Any] | None) -> dict[str, Any] | None:
    """The metadata of two requests merged into one: ours (:data:`METADATA_KEY`) merged too, the larger
    ``stale_responses`` kept (both count the responses after the same place)."""
    merged = {**(first or {}), **(second or {})}
    a, b = (first or {}).get(METADATA_KEY), (second or {}).get(METADATA_KEY)
    if isinstance(a, dict) and isinstance(b, dict):
        merged[METADATA_KEY] = {**a, **b, "stale_responses": max(int(a.get("stale_responses", 0)), int(b.get("stale_responses", 0)))}
    return merged or None


def _cleared(messages: Sequence[ModelMessage], wires: Sequence[tuple[int, Any]], clearing: LiveClearing) -> list[ModelMessage]:
    """``messages`` with the tool results of ``clearing`` replaced by their placeholders: copies of those
    parts and of their requests (:data:`METADATA_KEY` added), the other messages the same objects.
    ``wires``: the message index and part indices of each chat-completions dict."""
    contents: dict[int, dict[int, str]] = {}
    for j, texts in clearing.texts.items():
        n, parts = wires[j]
        if texts and texts[0] is not None and len(parts) == 1:
            contents.setdefault(n, {})[parts[0]] = texts[0]
    out = list(messages)
    responses = [n for n, m in enumerate(messages) if isinstance(m, ModelResponse)]
    for n, texts in contents.items():
        old = out[n]
        if not isinstance(old, ModelRequest):
            continue
        parts = [replace(p, content=texts[k]) if k in texts and isinstance(p, (ToolReturnPart, RetryPromptPart)) else p
                 for k, p in enumerate(old.parts)]
        info = dict((old.metadata or {}).get(METADATA_KEY) or {})
        after = len(responses) - bisect.bisect_right(responses, n)
        info.update(cleared_ref=clearing.archive_ref, stale_before=True, stale_responses=max(after, int(info.get("stale_responses", 0))))
        out[n] = replace(old, parts=parts, metadata={**(old.metadata or {}), METADATA_KEY: info})
    return out


class DpCompactProcessor(LiveCompactor):
    """A pydantic-ai history processor: plan before each request, compact when it pays (DESIGN §2, §5, §7).

    Parameters
    ----------
    model : str, optional
        Model name for prices and window when the responses name none, or name a model no price list knows
        (``ModelResponse.model_name`` wins when its prices are known).
    session_id : str
        Name of the conversation in the archive.
    archive : Archiver or None or "default"
        Where compacted heads go; ``"default"`` is :class:`~dp_compact.pipeline.archive.ArchiveStore`
        at ``DP_ARCHIVE_DIR`` (else the user data directory); None archives nothing.
    summarizer : Summarizer, optional
        Default the extractive summarizer (offline, no model call).
    recall : {"session", "all"} or None
        What :meth:`recall_toolset` searches (compacted heads and cleared tool results): this
        session's archives (default) or every session's.
    native : NativeAction, optional
        A provider-native action used instead of compacting or clearing here (see
        :meth:`native_model_settings` and :meth:`native_trigger`).
    clock : callable, optional
        Epoch seconds now, read before each request (default ``time.time``): the time of that
        request, from which the next plan knows the silence since the last one and whether the
        cache has expired (DESIGN §8). Inject one in tests.
    **settings
        Settings by field name (``provider=``, ``max_context_tokens=``, ``v=`` ...), as command-line
        flags: above ``DP_*`` and ``.env``. ``clear_tool_results=False`` (``DP_CLEAR_TOOL_RESULTS=false``)
        plans without clearing old tool results; it is off without an archive or with ``native``.

    Attributes
    ----------
    plans : list of Plan
        The plan made before each request, as carried out: ``decision`` ``"compact"``, ``"clear"``
        (old tool results cleared, ``plan.clearing["depth"]``) or ``"keep"``.
    compactions : list of CompactionResult
        The compactions carried out.
    clearings : list of ClearResult
        The clearings of old tool results carried out, in order (:class:`~dp_compact.pipeline.clear.ClearResult`:
        ``depth``, ``archive_ref``, ``cleared_message_indices``, ``facts`` in tokens, ``plan``).
    transcripts : dict of str to LiveTranscript
        What is kept of the conversation between requests (:class:`~dp_compact.adapters.transcript.LiveTranscript`,
        under ``session_id``): a request reads only the messages appended since the last one.

    Raises
    ------
    SettingsError
        An invalid setting (at construction).
    """

    def __init__(
        self, model: str | None = None, *, session_id: str = "pydantic-ai", archive: Any = "default", summarizer: Any = None,
        recall: Scope | None = "session", native: Any = None, clock: Any = None, **settings: Any,
    ) -> None:
        if native is not None:  # the plans price the provider's action (DP_NATIVE, dp_compact.core.native_costs)
            settings.setdefault("native", native.setting)
        super().__init__(archive=archive, summarizer=summarizer, clock=clock, clears=native is None, **settings)
        self.native = native
        self._native_due = False  # the last plan compacts with the provider's compaction (native_model)
        self.model = model.split(":", 1)[-1] if model else None
        self.session_id = session_id
        self.recall = Recall(self.archive, lambda: self.session_id, recall) if recall is not None and self.archive is not None else None
        self._history: list[ModelMessage] = []
        self._seen: set[int] = set()  # ids of the messages in _history and of those we made (held in _made)
        self._made: list[ModelMessage] = []

    def recall_toolset(self) -> Any:
        """The tools ``dp_recall`` and ``dp_restore`` over this session's archive, as a pydantic-ai ``FunctionToolset``.

        Raises
        ------
        ValueError
            If the processor has no archive or was made with ``recall=None``.
        """
        from pydantic_ai.toolsets import FunctionToolset

        recall = self.recall
        if recall is None:
            raise ValueError("no recall tools: the processor has no archive, or recall=None")

        def dp_recall(query: str, limit: int = 5) -> str:
            return recall.search(query, limit)

        def dp_restore(ref: str, offset: int = 0, max_chars: int = DEFAULT_RESTORE_CHARS) -> str:
            return recall.restore(ref, offset, max_chars)

        toolset: FunctionToolset[Any] = FunctionToolset()
        toolset.add_function(dp_recall, takes_ctx=False, name="dp_recall", description=RECALL_DESCRIPTION)
        toolset.add_function(dp_restore, takes_ctx=False, name="dp_restore", description=RESTORE_DESCRIPTION)
        return toolset

    def native_model_settings(self) -> dict[str, Any]:
        """pydantic-ai model settings asking for the Anthropic edit of ``native`` (``AnthropicModelSettings``).

        Raises
        ------
        ValueError
            If ``native`` is not an Anthropic context-management edit.
        """
        if self.native is None or self.native.provider != "anthropic":
            raise ValueError(f"no Anthropic native action: {self.native!r}")
        extra = self.native.anthropic_kwargs()
        return {"anthropic_context_management": extra["context_management"], "anthropic_betas": extra["betas"]}

    def native_model(self, model: Any) -> Any:
        """``model`` wrapped so that Anthropic's ``compact_20260112`` edit goes with the requests dp's plan
        compacts at (this processor plans each request, priced as the provider bills its compaction;
        the edit asks for the least trigger, so that it compacts then) and with no other request.

        Use it as the agent's model, with this processor among its capabilities:
        ``Agent(processor.native_model(model), capabilities=[ProcessHistory(processor)])``.

        Parameters
        ----------
        model : pydantic_ai.models.Model or str
            The agent's Anthropic model (a model name is resolved by pydantic-ai).

        Raises
        ------
        ValueError
            If ``native`` is not Anthropic's compaction.
        """
        from contextlib import asynccontextmanager

        from pydantic_ai.models.wrapper import WrapperModel

        if self.native is None or (self.native.provider, self.native.kind) != ("anthropic", "compact"):
            raise ValueError(f"native_model needs native=anthropic_compact(...), not {self.native!r}")
        processor = self

        class DpNativeCompaction(WrapperModel):
            """The wrapped model, with Anthropic's compaction edit on the requests dp's plan compacts at."""

            async def request(self, messages: list[ModelMessage], model_settings: Any, parameters: Any) -> Any:
                return await self.wrapped.request(messages, processor._native_settings(model_settings), parameters)

            @asynccontextmanager
            async def request_stream(self, messages: list[ModelMessage], model_settings: Any, parameters: Any,
                                     run_context: Any = None) -> Any:
                async with self.wrapped.request_stream(messages, processor._native_settings(model_settings), parameters,
                                                       run_context) as stream:
                    yield stream

        return DpNativeCompaction(model)

    def _native_settings(self, model_settings: Any) -> Any:
        """``model_settings`` with the compaction edit added when the last plan compacts (then forgotten)."""
        if not self._native_due:
            return model_settings
        self._native_due = False
        extra = self.native.now().anthropic_kwargs()
        merged = dict(model_settings or {})
        merged["anthropic_context_management"] = extra["context_management"]
        merged["anthropic_betas"] = sorted({*(merged.get("anthropic_betas") or ()), *extra["betas"]})
        return merged

    def native_trigger(self, messages: list[ModelMessage]) -> bool:
        """True when dp's plan says compact ``messages`` now: the ``trigger`` of pydantic-ai's ``OpenAICompaction``.

        The plan prices the provider's compaction as it is billed (``DP_NATIVE=openai-compact``:
        the request reads the whole input, the user messages are kept; :mod:`dp_compact.core.native_costs`).
        It is appended to :attr:`plans`; nothing is compacted here.
        """
        transcript = self._transcript(messages)
        self._record(messages[transcript.new_from:])  # the others were recorded at earlier requests
        action, plan = adapter_decision(self.plan_live(transcript, self._facts(messages))[2])
        self.plans.append(plan)
        return action == "compact"

    def _transcript(self, messages: Sequence[ModelMessage]) -> LiveTranscript:
        """The kept state of the conversation, updated with ``messages`` at the request made now."""
        transcript = self.transcript(self.session_id)
        transcript.update(messages, self.clock(), convert=_wires, usages=_usages, usage=usage_of, is_ours=_is_ours)
        return transcript

    def _facts(self, messages: Sequence[ModelMessage]) -> ModelFacts:
        """The model: the latest response's ``model_name`` when prices are known for it, else the one given
        (a ``FunctionModel`` or ``TestModel`` names itself ``function:...`` or ``test``), else that name."""
        recorded = next((m.model_name for m in reversed(messages) if isinstance(m, ModelResponse) and m.model_name), None)
        if recorded and (self.model is None or recorded == self.model or known_model(recorded)):
            return ModelFacts(recorded)
        return ModelFacts(self.model or recorded)

    def history(self, latest: Sequence[ModelMessage] = ()) -> list[ModelMessage]:
        """The full conversation as the runs made it, oldest first: the application's own record.

        Every message this processor was given, never our summaries, acknowledgements, trimmed or
        cleared copies, followed by the messages of ``latest`` not seen yet: pass ``result.all_messages()``
        to add the run's final answer (a processor runs before each request, so it never sees the
        last response). Held in memory; the archive keeps the compacted heads on disk.
        """
        return [*self._history, *(m for m in latest if id(m) not in self._seen)]

    def _record(self, messages: Sequence[ModelMessage]) -> None:
        """Add the messages not seen before to the history."""
        for message in messages:
            if id(message) not in self._seen:
                self._seen.add(id(message))
                self._history.append(message)

    def __call__(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """The history to send: compacted or cleared when the plan says so, else ``messages`` itself.

        A failed summary or clearing leaves the history untouched (DESIGN §5) and is logged.

        Raises
        ------
        ArchiveError
            The archive could not be written.
        """
        if self.native is not None:  # the provider compacts (native_model_settings, native_model, native_trigger)
            if (self.native.provider, self.native.kind) == ("anthropic", "compact"):
                self._native_due = self.native_trigger(messages)  # planned and recorded; native_model sends the edit
            else:
                self._record(messages)
            return messages
        transcript = self._transcript(messages)
        self._record(messages[transcript.new_from:])  # the others were recorded at earlier requests
        result = self.compact_live(transcript, self._facts(messages))
        if result is None:
            return messages
        if isinstance(result, LiveClearing):
            rebuilt = _cleared(transcript.items, list(zip(transcript.origins, transcript.payloads, strict=True)), result)
        else:
            wires = list(zip(transcript.raws, transcript.origins, transcript.payloads, strict=True))
            rebuilt = self._rebuild(transcript.items, wires, result)
        made = [m for m in rebuilt if id(m) not in self._seen]
        self._made.extend(made)  # held, so that their ids stay theirs
        self._seen.update(id(m) for m in made)
        return rebuilt

    def _rebuild(self, messages: list[ModelMessage], wires: list[tuple[dict[str, Any], int, list[int]]], result: CompactionResult) -> list[ModelMessage]:
        """The compacted history: originals whose every dict was kept, the kept parts of the others, new messages for the rest."""
        places = {id(w): (n, parts) for w, n, parts in wires}
        kept: dict[int, list[int]] = {}
        order: list[int | dict[str, Any]] = []  # message index of an original, or a new dict
        for wire in result.messages:
            if id(wire) not in places:
                order.append(wire)
                continue
            n, parts = places[id(wire)]
            if n not in kept:
                order.append(n)
            kept.setdefault(n, []).extend(parts)
        info = {"archive_ref": result.archive_ref, "stale_responses": sum(1 for n in kept if isinstance(messages[n], ModelResponse))}
        built: list[tuple[ModelMessage, bool]] = []  # (message, untouched original)
        for item in order:
            if isinstance(item, dict):
                text = str(item.get("content") or "")
                new: ModelMessage = ModelResponse(parts=[TextPart(text)]) if item.get("role") == "assistant" else \
                    ModelRequest(parts=[UserPromptPart(text)], metadata={METADATA_KEY: info})
                built.append((new, False))
            elif sorted(kept[item]) == list(range(len(messages[item].parts))):
                built.append((messages[item], True))
            else:
                built.append((replace(messages[item], parts=[messages[item].parts[i] for i in sorted(kept[item])]), False))
        out: list[tuple[ModelMessage, bool]] = []
        for message, untouched in built:  # one request where a new one meets another request
            if out and isinstance(message, ModelRequest) and isinstance(out[-1][0], ModelRequest) and not (untouched and out[-1][1]):
                previous = out[-1][0]
                metadata = _merged_metadata(previous.metadata, message.metadata)
                out[-1] = (replace(previous, parts=[*previous.parts, *message.parts], metadata=metadata), False)
            else:
                out.append((message, untouched))
        return [message for message, _ in out]
