"""LangChain 1.x: :class:`DpCompactMiddleware`, the planner and pipeline before every model call.

A drop-in for ``SummarizationMiddleware`` in ``create_agent(..., middleware=[...])``. Before each
model call it reads the agent's messages as a session (:mod:`dp_compact.adapters.live`), plans
(DESIGN §2, §7) and, when the plan says compact, runs the pipeline at the planned feasible cut
(DESIGN §5: tool-call pairs intact, extractive summary, head archived so ``dp-compact recall``
finds it). The state's messages are then replaced the way ``SummarizationMiddleware`` does it
(``RemoveMessage(id=REMOVE_ALL_MESSAGES)`` and the new list): the summary as a ``HumanMessage``,
an acknowledgement ``AIMessage`` when the kept tail starts with a user message, and the kept
messages themselves, unchanged (same objects, ids and metadata). When the plan clears old tool
results instead (DESIGN §9, ``DP_CLEAR_TOOL_RESULTS``, on by default), the messages are replaced the
same way by the same list in which each ``ToolMessage`` before the plan's depth with a long result
(:data:`~dp_compact.measure.clearing.CLEAR_MIN_CHARS` characters or more) is a copy whose content is
a short placeholder naming the archive key of its original (``archive://<thread>/<id>#msg-N``):
same message id, ``tool_call_id``, name, status and artifact; every other message is the same
object. Otherwise nothing is returned and the messages are left as they are.

With an archive, the middleware also registers two tools (LangChain middleware's ``tools``):
``dp_recall`` searches what compactions and clearings archived and ``dp_restore`` returns archived
messages by their ``archive://`` key (:mod:`dp_compact.adapters.recall`; ``recall=None`` registers
none). Without an archive nothing is cleared (a placeholder must name its original). The
application's own record stays whole: :meth:`DpCompactMiddleware.history` returns every message of
a thread as the agent made it, summaries left out and tool results as they were before any clearing.

With ``native=`` an Anthropic action of :mod:`dp_compact.adapters.native` (``clear_tool_uses_20250919``
or ``compact_20260112``), the middleware compacts nothing itself: it adds the edit and its beta
header to model calls (``ModelRequest.model_settings``, which LangChain binds to the chat model,
as ``ChatAnthropic``'s ``context_management`` and ``betas``), and the provider acts, when dp's
plan, priced with the provider's billing (``DP_NATIVE``, :mod:`dp_compact.core.native_costs`),
says so. A compaction edit goes with the call the plan compacts at, with the least trigger the API
takes so that it compacts then. A clearing edit goes with every call from the one the plan clears
at on, asking to keep every tool use after the plan's depth, so that the provider clears the same
results on every later request (the cache stays valid); the middleware plans from the
conversation as the provider shows it to the model (those results as placeholders) and still
compacts itself when the plan compacts.

Each thread's messages are kept between calls (:class:`~dp_compact.adapters.transcript.LiveTranscript`): a call
converts, reads and counts only the messages appended since the last one, and plans with the
middleware's clock (the silence since the last call, DESIGN §8).

Token counts come from each ``AIMessage.usage_metadata`` where present (LangChain's convention:
``input_tokens`` includes cache reads); the window from the model's profile
(``max_input_tokens``) and the prices from the model's name (DESIGN §3 profiles, genai-prices);
``DP_*`` settings and keyword arguments win over both. Requires ``pip install ".[langchain]"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dp_compact.errors import MissingExtraError

try:
    from langchain.agents.middleware.types import AgentMiddleware, AgentState
    from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage
    from langchain_core.messages.utils import convert_to_messages, convert_to_openai_messages
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.runtime import Runtime
except ImportError as exc:
    raise MissingExtraError("langchain", "langchain", exc.name) from None

from dp_compact.adapters.live import LiveClearing, LiveCompactor, ModelFacts, adapter_decision, output_pairs
from dp_compact.adapters.recall import DEFAULT_RESTORE_CHARS, RECALL_DESCRIPTION, RESTORE_DESCRIPTION, Recall, Scope
from dp_compact.adapters.transcript import LiveTranscript
from dp_compact.conversation import Usage
from dp_compact.measure.clearing import CLEARED_PREFIX

__all__ = ["METADATA_KEY", "DpCompactMiddleware", "model_facts", "to_openai", "usage_of"]

#: Key of ``additional_kwargs`` on the messages we make or rewrite (never sent to the model). On our
#: summary ``HumanMessage``: ``archive_ref`` and ``stale_usage_ids``, the ids of the kept ``AIMessage`` s
#: whose usage records measured the prompt before compaction. On a ``ToolMessage`` whose result we
#: cleared: ``cleared_ref``, the archive key of its original; the last one cleared also carries
#: ``stale_usage_ids``, every ``AIMessage`` before the clearing (their prompts held the results).
METADATA_KEY = "dp_compact"


def model_facts(model: Any) -> ModelFacts:
    """Name and window (``profile["max_input_tokens"]``, tokens) of a chat model or model name."""
    if model is None or isinstance(model, str):
        return ModelFacts(name=model.split(":", 1)[-1] if isinstance(model, str) else None)
    name = None
    try:
        name = model._get_ls_params().get("ls_model_name")  # noqa: SLF001 - the name LangSmith traces under
    except (AttributeError, TypeError):
        pass
    name = name or getattr(model, "model_name", None) or getattr(model, "model", None)
    profile = getattr(model, "profile", None)
    profile = profile if isinstance(profile, Mapping) else {}
    window = profile.get("max_input_tokens")
    return ModelFacts(name=name if isinstance(name, str) else None, window=window if isinstance(window, int) and window > 0 else None)


def usage_of(message: BaseMessage) -> Usage | None:
    """The :class:`Usage` of an ``AIMessage`` from its ``usage_metadata`` (tokens), else None."""
    if not isinstance(message, AIMessage):  # before the attribute: another message has none, and looking costs microseconds
        return None
    meta = getattr(message, "usage_metadata", None)
    if not meta or not meta.get("input_tokens"):
        return None
    details = meta.get("input_token_details") or {}
    return Usage(
        prompt_tokens=int(meta["input_tokens"]), cache_read_tokens=int(details.get("cache_read") or 0),
        cache_write_tokens=int(details.get("cache_creation") or 0), output_tokens=int(meta.get("output_tokens") or 0),
        convention="openai",
    )


def to_openai(message: BaseMessage) -> dict[str, Any]:
    """One LangChain message as a chat-completions dict (``convert_to_openai_messages``)."""
    converted = convert_to_openai_messages(message)
    return converted if isinstance(converted, dict) else converted[0]


def _stale_ids(messages: Sequence[BaseMessage]) -> set[str]:
    """Ids of messages whose usage predates one of our compactions or clearings (stated on our summary
    message and on the last ``ToolMessage`` a clearing rewrote): a record is stale once the prompt it
    measured was rewritten."""
    stale: set[str] = set()
    for message in messages:
        info = message.additional_kwargs.get(METADATA_KEY) if isinstance(message, (HumanMessage, ToolMessage)) else None
        if isinstance(info, Mapping):
            stale.update(info.get("stale_usage_ids") or ())
    return stale


def _usages(messages: Sequence[BaseMessage]) -> list[Usage | None]:
    """The usage record of each message; None for those whose usage predates our last compaction or clearing."""
    stale = _stale_ids(messages)
    return [None if m.id in stale else usage_of(m) for m in messages]


def _wires(message: BaseMessage) -> list[tuple[dict[str, Any], None]]:
    """A message as its one chat-completions dict (:data:`~dp_compact.adapters.live.Wires`)."""
    return [(to_openai(message), None)]


def _is_ours(message: BaseMessage) -> bool:
    """True for our summary message (it names the kept messages whose usage is stale)."""
    return isinstance(message, HumanMessage) and isinstance(message.additional_kwargs.get(METADATA_KEY), Mapping)


def _cleared(messages: Sequence[BaseMessage], origins: Sequence[int], clearing: LiveClearing) -> list[BaseMessage]:
    """``messages`` with the tool results of ``clearing`` replaced by their placeholders: copies of those
    ``ToolMessage`` s (same id, ``tool_call_id``, name, status, artifact; :data:`METADATA_KEY` added), the
    other messages the same objects. ``origins``: the message index of each chat-completions dict."""
    texts = {origins[j]: t[0] for j, t in clearing.texts.items() if t and t[0] is not None and isinstance(messages[origins[j]], ToolMessage)}
    out = list(messages)
    if not texts:
        return out
    last = max(texts)
    stale = [m.id for m in messages if isinstance(m, AIMessage) and m.id]
    for n, text in texts.items():
        info: dict[str, Any] = {"cleared_ref": clearing.archive_ref}
        if n == last:
            info["stale_usage_ids"] = stale
        old = out[n]
        out[n] = old.model_copy(update={"content": text, "additional_kwargs": {**old.additional_kwargs, METADATA_KEY: info}})
    return out


def _key(message: BaseMessage) -> Any:
    """What names a message across a checkpointer's copies: its id, else the object."""
    return message.id or id(message)


class DpCompactMiddleware(AgentMiddleware, LiveCompactor):
    """Plan before each model call; compact at the planned cut when it pays (DESIGN §2, §5, §7).

    Parameters
    ----------
    model : BaseChatModel or str, optional
        The agent's model (or its name): its name gives prices, its profile the window.
    session_id : str, optional
        Name of the conversation in the archive; default the graph's ``thread_id``, else ``"langchain"``.
    archive : Archiver or None or "default"
        Where compacted heads go; ``"default"`` is :class:`~dp_compact.pipeline.archive.ArchiveStore`
        at ``DP_ARCHIVE_DIR`` (else the user data directory); None archives nothing.
    summarizer : Summarizer, optional
        Default the extractive summarizer (offline, no model call).
    recall : {"session", "all"} or None
        Offer the agent the tools ``dp_recall`` and ``dp_restore`` over the archive (compacted heads and
        cleared tool results): this thread's
        archives (``"session"``, the default) or every session's (``"all"``); None offers none.
        No tools without an archive.
    keep_history : bool
        Keep every message of each thread as the agent made it, for :meth:`history` (in memory).
    native : NativeAction, optional
        An Anthropic context-management edit (:func:`~dp_compact.adapters.native.anthropic_clear_tool_uses`,
        :func:`~dp_compact.adapters.native.anthropic_compact`) that carries the plan's compactions
        or clearings out instead of this middleware (priced as the provider bills it: ``native``
        sets ``DP_NATIVE``; module docstring). The edit's own ``trigger``, ``keep`` and
        ``clear_at_least`` are replaced by what the plan decided.
    clock : callable, optional
        Epoch seconds now, read before each model call (default ``time.time``): the time of that
        call, from which the next plan knows the silence since the last call and whether the
        cache has expired (DESIGN §8). Inject one in tests.
    **settings
        Settings by field name (``provider=``, ``max_context_tokens=``, ``planner=``, ``v=`` ...), as
        command-line flags: above ``DP_*``, ``.env`` and the profile. ``clear_tool_results=False``
        (``DP_CLEAR_TOOL_RESULTS=false``) plans without clearing old tool results; it is off without
        an archive or with ``native``.

    Attributes
    ----------
    plans : list of Plan
        The plan made before each model call, in order, as carried out: ``decision`` ``"compact"``,
        ``"clear"`` (old tool results cleared, ``plan.clearing["depth"]``) or ``"keep"``.
    transcripts : dict of str to LiveTranscript
        What is kept of each thread between calls (:class:`~dp_compact.adapters.transcript.LiveTranscript`):
        a call reads only the messages appended since the last one.
    compactions : list of CompactionResult
        The compactions carried out, in order.
    clearings : list of ClearResult
        The clearings of old tool results carried out, in order (:class:`~dp_compact.pipeline.clear.ClearResult`:
        ``depth``, ``archive_ref``, ``cleared_message_indices``, ``facts`` in tokens, ``plan``).
    tools : list of BaseTool
        The recall tools LangChain registers with the agent (empty without recall).

    Raises
    ------
    SettingsError
        An invalid setting (at construction).
    ValueError
        ``native`` is not an Anthropic context-management edit (OpenAI's compact endpoint returns
        an encrypted item LangChain messages cannot carry: use the pydantic-ai processor).
    """

    def __init__(
        self, model: Any = None, *, session_id: str | None = None, archive: Any = "default", summarizer: Any = None,
        recall: Scope | None = "session", keep_history: bool = True, native: Any = None, clock: Any = None, **settings: Any,
    ) -> None:
        if native is not None and getattr(native, "provider", None) != "anthropic":
            raise ValueError(f"native= takes an Anthropic context-management edit, not {native!r}")
        self.native = native
        self._native_due: dict[str, bool] = {}  # per thread: the last plan says the provider compacts now
        self._native_cleared: dict[str, frozenset[str]] = {}  # per thread: tool call ids the provider is asked to clear
        if native is not None:
            settings.setdefault("native", native.setting)
        clears_natively = native is not None and native.kind == "clear_tool_uses"
        AgentMiddleware.__init__(self)
        LiveCompactor.__init__(self, archive=archive, summarizer=summarizer, clock=clock, clears=native is None or clears_natively,
                               archive_free_clearing=clears_natively, **settings)
        self.facts = model_facts(model)
        self.session_id = session_id
        self.recall = Recall(self.archive, self._session_id, recall) if recall is not None and self.archive is not None else None
        self.tools = _recall_tools(self.recall) if self.recall is not None else []
        self.keep_history = keep_history
        self._histories: dict[str, tuple[list[BaseMessage], set[str]]] = {}

    def history(self, session_id: str | None = None) -> list[BaseMessage]:
        """Every message of a thread as the agent made it, oldest first: the application's full record.

        The state's messages lose the compacted head and the content of cleared tool results; this
        list keeps them (the same message objects as given, never our summaries, acknowledgements or
        cleared copies). It is held in memory by this middleware; the archive holds the same heads
        and results on disk (``dp-compact restore``).

        Parameters
        ----------
        session_id : str, optional
            The thread id (default: the one given at construction, else ``"langchain"``).

        Returns
        -------
        list of BaseMessage
            Empty when the thread is unknown or ``keep_history`` is False.
        """
        key = session_id or self.session_id or "langchain"
        return list(self._histories.get(key, ([], set()))[0])

    def _record(self, messages: Sequence[BaseMessage], thread: str | None = None) -> None:
        """Add the messages not seen before to this thread's history (ours left out); ``thread``: the
        :meth:`_session_id` already read for this call."""
        if not self.keep_history:
            return
        kept, seen = self._histories.setdefault(thread or self._session_id(), ([], set()))
        for message in messages:
            key = message.id or f"object-{id(message)}"
            if key in seen or METADATA_KEY in message.additional_kwargs:
                continue
            seen.add(key)
            kept.append(message)

    def _session_id(self) -> str:
        """The given session id, else the running graph's thread id, else ``langchain``. Read once per
        model call (outside a graph, ``get_config`` raises, at about 25 µs a time)."""
        if self.session_id:
            return self.session_id
        try:
            from langgraph.config import get_config

            thread = (get_config().get("configurable") or {}).get("thread_id")
        except RuntimeError:  # called outside a graph
            thread = None
        return str(thread) if thread else "langchain"

    def compact_messages(self, messages: Sequence[AnyMessage]) -> list[BaseMessage] | None:
        """The compacted or cleared message list, or None when the plan keeps everything (framework-free entry).

        Parameters
        ----------
        messages : sequence of BaseMessage
            The agent's messages, oldest first.

        Returns
        -------
        list of BaseMessage or None
            Compacted: summary ``HumanMessage``, acknowledgement ``AIMessage`` when needed, and the
            kept messages as the same objects. Cleared: every message, the cleared ``ToolMessage`` s
            as copies holding their placeholders, the others as the same objects. None when
            nothing is compacted or cleared (also when the summary or the clearing failed: the
            conversation is then left untouched, and the failure is logged).

        Raises
        ------
        ArchiveError
            The archive could not be written.
        """
        return self._compact_messages(messages, self._session_id())

    def _compact_messages(self, messages: Sequence[AnyMessage], thread: str) -> list[BaseMessage] | None:
        """:meth:`compact_messages` of the conversation ``thread`` (its :meth:`_session_id`, read once for the call)."""
        transcript = self.transcript(thread)
        transcript.update(messages, self.clock(), convert=self._converter(thread), usages=_usages, usage=usage_of, is_ours=_is_ours,
                          key=_key)
        clear_with = self._clear_natively if self.native is not None and self.native.kind == "clear_tool_uses" else None
        result = self.compact_live(transcript, self.facts, clear_with=clear_with)
        if result is None:
            return None
        if isinstance(result, LiveClearing):
            return _cleared(transcript.items, transcript.origins, result)
        messages, raws = transcript.items, transcript.raws  # the objects given now (a checkpointer's copies too)
        kept_ai = [m.id for m in messages[result.cut:] if isinstance(m, AIMessage) and m.id]
        info = {"archive_ref": result.archive_ref, "stale_usage_ids": kept_ai}
        out: list[BaseMessage] = []
        for message, original in output_pairs(result.messages, messages, raws):
            if original is not None:
                out.append(original)
                continue
            new = convert_to_messages([message])[0]
            new.additional_kwargs[METADATA_KEY] = info if isinstance(new, HumanMessage) else {"acknowledgement": True}
            out.append(new)
        return out

    def before_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Replace the messages by the compacted or cleared list when the plan says compact or clear; else None."""
        messages = state["messages"]
        if self.native is not None and self.native.kind == "compact":  # the provider compacts
            self._record(messages)
            self._plan_native(messages)
            return None
        thread = self._session_id()
        compacted = self._compact_messages(messages, thread)
        self._record(messages[self.transcript(thread).new_from:], thread)  # the others were recorded at earlier calls
        if compacted is None:
            return None
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *compacted]}

    async def abefore_model(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """As :meth:`before_model` (planning and the extractive summary are local computations)."""
        return self.before_model(state, runtime)

    def _plan_native(self, messages: Sequence[AnyMessage]) -> None:
        """Plan this call as the provider's compaction would be billed; remember whether it compacts now."""
        transcript = self.transcript(self._session_id())
        transcript.update(messages, self.clock(), convert=_wires, usages=_usages, usage=usage_of, is_ours=_is_ours, key=_key)
        action, plan = adapter_decision(self.plan_live(transcript, self.facts)[2])
        self.plans.append(plan)
        self._native_due[self._session_id()] = action == "compact"

    def _converter(self, thread: str | None = None) -> Any:
        """The conversion of a message for planning: as it is, or, for a tool result the provider is
        asked to clear, as a placeholder (what the model is shown); ``thread``: the :meth:`_session_id` read for this call."""
        cleared = self._native_cleared.get(thread or self._session_id())
        if not cleared:
            return _wires

        def convert(message: BaseMessage) -> list[tuple[dict[str, Any], None]]:
            if isinstance(message, ToolMessage) and message.tool_call_id in cleared:
                chars = len(message.content) if isinstance(message.content, str) else len(str(message.content))
                message = message.model_copy(update={"content": f"{CLEARED_PREFIX} {chars:,} characters; by the provider's"
                                                                f" clear_tool_uses_20250919]"})
            return _wires(message)
        return convert

    def _clear_natively(self, transcript: LiveTranscript, plan: Any) -> None:
        """Ask the provider to clear the tool results before the plan's depth from this call on (the
        state keeps them); the next call reads the conversation again with them as placeholders."""
        thread = self._session_id()
        depth = int(plan.clearing["depth"])
        end = transcript.origins[depth] if depth < len(transcript.origins) else len(transcript.items)
        excluded = set(self.native.edit.get("exclude_tools") or ())
        ids = {m.tool_call_id for m in transcript.items[:end] if isinstance(m, ToolMessage) and m.name not in excluded}
        self._native_cleared[thread] = self._native_cleared.get(thread, frozenset()) | ids
        self.transcripts.pop(thread, None)

    def _with_native(self, request: Any) -> Any:
        """``request`` with the native edit and its beta header added to its model settings: a
        compaction edit only when the plan said compact, asked to act now; a clearing edit once the
        plan has cleared, keeping every tool use but those cleared; else ``request``."""
        native = self.native
        if native.kind == "compact":
            if not self._native_due.pop(self._session_id(), False):
                return request
            native = native.now()
        else:
            cleared = self._native_cleared.get(self._session_id(), frozenset())
            uses = [c["id"] for m in request.messages if isinstance(m, AIMessage) for c in m.tool_calls]
            gone = sum(1 for i in uses if i in cleared)
            if not gone:
                return request
            native = native.keeping(len(uses) - gone)
        extra = native.anthropic_kwargs()
        settings = dict(request.model_settings)
        settings["betas"] = sorted({*(settings.get("betas") or ()), *extra["betas"]})
        settings["context_management"] = extra["context_management"]
        return request.override(model_settings=settings)

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        """Send the native edit with the call when ``native`` is set; else the call as it is."""
        return handler(self._with_native(request) if self.native is not None else request)

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        """As :meth:`wrap_model_call`."""
        return await handler(self._with_native(request) if self.native is not None else request)

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Record the run's last messages (the final answer) in the thread's history; no update."""
        self._record(state["messages"])
        return None

    async def aafter_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """As :meth:`after_agent`."""
        return self.after_agent(state, runtime)


def _recall_tools(recall: Recall) -> list[Any]:
    """``dp_recall`` and ``dp_restore`` as LangChain tools over ``recall``."""
    from langchain_core.tools import StructuredTool

    def dp_recall(query: str, limit: int = 5) -> str:
        return recall.search(query, limit)

    def dp_restore(ref: str, offset: int = 0, max_chars: int = DEFAULT_RESTORE_CHARS) -> str:
        return recall.restore(ref, offset, max_chars)

    return [
        StructuredTool.from_function(dp_recall, name="dp_recall", description=RECALL_DESCRIPTION),
        StructuredTool.from_function(dp_restore, name="dp_restore", description=RESTORE_DESCRIPTION),
    ]
