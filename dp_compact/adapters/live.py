"""A live conversation, held by an agent framework, as a :class:`~dp_compact.conversation.Session`.

Every adapter does the same three things before a model call: turn the framework's messages
into chat-completions dicts (its own converter), read them with the session reader of that
format (:mod:`dp_compact.sessions.openai_chat`: user turns, our earlier summaries, c and the
counts a summary carries), plan it (DESIGN §2, §7, §8) and carry the plan out: a compaction
runs the pipeline (:func:`dp_compact.pipeline.compact.compact_session`, DESIGN §5) with the
archive; a clearing of old tool results (DESIGN §9) archives the results before the plan's depth
and gives each its placeholder (:func:`dp_compact.pipeline.clear.clear_session`), which the
adapter writes into the framework's own tool results (:class:`LiveClearing`). Nothing here
decides anything the planner does not: this module builds the inputs and applies one adapter
rule (:func:`adapter_decision`).

:class:`~dp_compact.adapters.transcript.LiveTranscript` is what an adapter keeps of each conversation between calls, so that a
call costs work in proportion to what was appended, not to the conversation: the framework's
messages as last seen, their chat-completions dicts and usage records, the reader's pass over
them (:class:`~dp_compact.sessions.openai_chat.LiveReader`), each message's token counts, and the
time of each LLM call. Messages that are the same objects as last time (or equal to them: a
checkpointer's copies) followed by new ones are an append; anything else (the framework replaced
or edited an earlier message, or our own compaction or clearing rewrote the list) rebuilds the state
from the messages given. Either way the session, its tokens and so its plan are those a full read gives
(tests/test_adapter_live.py checks it call by call over real transcripts).

Pure but for the clock: :class:`LiveCompactor` reads "now" with its ``clock`` (``time.time``
unless given) at each call, the time of that call (DESIGN §8: the silence since the last call,
and whether the cache has expired).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from dp_compact.adapters.transcript import LiveTranscript
from dp_compact.conversation import Session, Usage
from dp_compact.sessions import openai_chat
from dp_compact.sessions.common import dumps
from dp_compact.sessions.source import Record, Source

__all__ = [
    "RULE_LOSS_GUARD",
    "WALL_CLOCK",
    "LiveClearing",
    "LiveCompactor",
    "LiveTranscript",
    "ModelFacts",
    "adapter_decision",
    "cleared_texts",
    "known_model",
    "live_session",
    "output_pairs",
    "plan_forced",
]

#: How a plan names "now" read by an adapter (``Timing.source``).
WALL_CLOCK = "wall clock"

@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What the framework knows about the model it calls.

    ``name`` is the model id (prices come from its profile or genai-prices, DESIGN §3, unless
    ``DP_PROVIDER`` or ``provider=`` names one); ``window`` is its context window in tokens, taken
    as the window the session records (``DP_MAX_CONTEXT_TOKENS`` still wins, DESIGN §6).
    """

    name: str | None = None
    window: int | None = None


@lru_cache(maxsize=256)
def known_model(name: str) -> bool:
    """True when prices are known for the model ``name`` (a built-in profile or genai-prices' bundled
    data, :func:`~dp_compact.pricing.get_prices`), so that a name a framework records for a test or
    function model (``function:...``) does not replace the one the user gave."""
    from dp_compact.errors import UnknownProfileError
    from dp_compact.pricing import get_prices

    try:
        get_prices(name)
    except (UnknownProfileError, ValueError):
        return False
    return True


def live_session(
    messages: Sequence[dict[str, Any]],
    usages: Sequence[Usage | None],
    *,
    session_id: str,
    facts: ModelFacts = ModelFacts(),
    system_text: str = "",
) -> Session:
    """The live conversation as a :class:`Session` read by the chat-completions reader.

    Parameters
    ----------
    messages : sequence of dict, length N'
        Chat-completions messages (``system``/``developer`` first when the framework keeps them
        among the messages; they become the fixed prefix V, not messages). Each dict is kept as
        the message's ``raw``, so a kept tail comes back as the same objects.
    usages : sequence of Usage or None, length N'
        The usage record of the call that produced each message (assistant messages), in
        tokens; None for every other message and for records older than the last compaction or
        clearing (they measured a prompt that no longer exists). ``Usage.line`` is set here.
    session_id : str
        The name of the conversation (the archive's session, the plan's path).
    facts : ModelFacts
        Model name and window.
    system_text : str
        A system prompt the framework sends outside the messages (part of V).

    Returns
    -------
    Session
        ``format`` ``openai_chat``; message ``line`` = position + 1; ``usage`` in order.

    Raises
    ------
    MalformedLineError
        A message that is not a chat-completions message (``session_id:position+1``).
    ValueError
        If ``usages`` and ``messages`` differ in length.
    """
    if len(usages) != len(messages):
        raise ValueError(f"{len(usages)} usage entries for {len(messages)} messages")
    records = tuple(Record(n + 1, m, len(dumps(m).encode())) for n, m in enumerate(messages))
    session = openai_chat.read(Source(path=session_id, records=records))
    usage = tuple(replace(u, line=n + 1) for n, u in enumerate(usages) if u is not None)
    extra: dict[str, Any] = {"usage": usage}
    if facts.name:
        extra["model"] = facts.name
    if facts.window:
        extra["context_window"] = facts.window
    if system_text and not session.system_text:
        extra["system_text"] = system_text
    return replace(session, **extra)


def output_pairs(output: Sequence[dict[str, Any]], originals: Sequence[Any], raws: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], Any | None]]:
    """Each output dict with the framework message it is unchanged from, else None (a new message).

    ``raws[i]`` is the dict ``originals[i]`` was converted to; the pipeline returns a kept
    message's raw dict itself (:func:`dp_compact.pipeline.convert.to_api`), so identity finds it.
    """
    by_id = {id(raw): original for raw, original in zip(raws, originals, strict=True)}
    return [(message, by_id.get(id(message))) for message in output]


#: An adapter's rule (:func:`adapter_decision`): the plan compacts where the context does not force it,
#: but its net benefit at the cut does not exceed the expected loss there (DESIGN §9: a compaction
#: saves money without the agent visibly forgetting); the adapter keeps.
RULE_LOSS_GUARD = "saving-below-loss"


def plan_forced(plan: Any) -> bool:
    """True when the context must shrink before the next call: above DP_FORCE_RATIO · M, or (look-ahead)
    passing it with the next call's growth (no schedule may keep)."""
    over = plan.estimates.context_tokens > plan.force_threshold_tokens
    return bool(over or plan.rule == "force" or (plan.lookahead is not None and plan.lookahead.get("keep_usd") is None))


def adapter_decision(plan: Any) -> tuple[str, Any]:
    """What an adapter does with ``plan``: ``("compact", plan)``, ``("clear", plan)`` (clear the old tool
    results before ``plan.clearing["depth"]``, DESIGN §9) or ``("keep", plan)``.

    The look-ahead's plans (the default planner, and every provider-native compaction) are carried
    out as planned: their own rule already weighs what a compaction drops (a compaction keeping
    less than one API round must save more than its expected loss,
    :func:`dp_compact.core.planner_lookahead.plan_ahead`), so there is one loss rule, the
    planner's. The single-step planners (``DP_PLANNER=myopic`` or ``seed``) have no such rule:
    a compaction of theirs the context does not force whose net benefit at its cut is not above the
    expected loss there (terms ``net`` and ``info_loss``, $) is kept, and the plan returned says so
    (rule :data:`RULE_LOSS_GUARD`). A clearing is carried out as planned."""
    if plan.decision == "clear":
        return "clear", plan
    if plan.decision != "compact":
        return "keep", plan
    net, loss = float(plan.terms.get("net", 0.0)), float(plan.terms.get("info_loss", 0.0))
    if plan.planner == "lookahead" or plan_forced(plan) or net > loss:
        return "compact", plan
    why = (f"the plan compacts keeping {plan.k} message{'s' if plan.k != 1 else ''} ({plan.explanation}), but its net benefit"
           f" at that cut (${net:.4f}) does not exceed the expected loss of what it drops (${loss:.4f}): the adapter keeps"
           " every message until compacting pays more than the agent may lose (DESIGN §9)")
    kept = replace(plan, decision="keep", rule=RULE_LOSS_GUARD, explanation=why, k=plan.n_messages, cut=0,
                   tail_tokens=plan.total_tokens, head_tokens=0, context_after_tokens=plan.estimates.context_tokens)
    return "keep", kept


@dataclass(frozen=True, slots=True)
class LiveClearing:
    """A clearing of old tool results carried out on a live conversation (DESIGN §9): what the adapter
    writes into the framework's messages.

    ``result`` is the :class:`~dp_compact.pipeline.clear.ClearResult` (``depth``, ``archive_ref``,
    ``cleared_message_indices`` into the session's messages, ``facts`` in cl100k tokens, ``plan`` the
    plan that chose it). ``texts`` maps the index of a chat-completions dict in
    :attr:`LiveTranscript.raws <dp_compact.adapters.transcript.LiveTranscript.raws>` to the new text of
    each tool result it carries, in order: the placeholder naming ``archive_ref#msg-N``
    (:func:`~dp_compact.measure.clearing.placeholder_text`), None for a result that stays.
    """

    result: Any
    texts: dict[int, tuple[str | None, ...]]

    @property
    def archive_ref(self) -> str | None:
        """Where the cleared messages are archived (``archive://<session>/<id>``; ``#msg-N`` for message N)."""
        return self.result.archive_ref


def cleared_texts(session: Session, raws: Sequence[dict[str, Any]], result: Any) -> dict[int, tuple[str | None, ...]]:
    """:attr:`LiveClearing.texts` of ``result`` (a clearing of ``session``, whose messages' ``raw`` are
    dicts of ``raws``): the placeholders of ``result.cleared``, by the index in ``raws`` of each changed
    message's dict.

    Raises
    ------
    ValueError
        A changed message whose dict is not one of ``raws`` (the session is not of these dicts).
    """
    where = {id(raw): j for j, raw in enumerate(raws)}
    out: dict[int, tuple[str | None, ...]] = {}
    for i in result.cleared_message_indices:
        old, new = session.messages[i], result.cleared[i]
        j = where.get(id(old.raw))
        if j is None:
            raise ValueError(f"{session.path}: message {i} is not one of the conversation's dicts")
        out[j] = tuple(b.text if b.text != a.text else None for a, b in zip(old.tool_results, new.tool_results, strict=True))
    return out


def _build_encoder() -> None:
    """Build the cl100k encoder now (once a process, about 85 ms), as the plan server does: an adapter
    counts the messages appended before every model call, which the encoder counts 3 to 6 times faster
    than the pure-Python count a process uses until it has counted
    :data:`~dp_compact.measure.tokens.BPE_CHARS_BEFORE_ENCODER` characters (the same counts either way).
    A failure (no tiktoken data) leaves counting as it was."""
    from dp_compact.measure import tokens

    try:
        tokens._encoding()
    except (ImportError, OSError, ValueError):
        return


class LiveCompactor:
    """What every framework adapter keeps: settings, archive, summarizer, and the plans, compactions
    and clearings made so far; :meth:`compact_live` plans a conversation and carries the plan out.
    Made with the ``tiktoken`` tokenizer, it builds the token encoder at once (:func:`_build_encoder`).

    Parameters
    ----------
    archive : ArchiveStore, None or "default"
        Where compacted heads and cleared tool results go; "default" is the settings' archive
        folder (``DP_ARCHIVE_DIR``, else the user data directory); None archives nothing (and so
        clears nothing: a placeholder must name where its original is).
    summarizer : callable, optional
        Default: the offline extractive summarizer.
    clock : callable, optional
        Epoch seconds now (default ``time.time``): read once per call, the time of that call
        (DESIGN §8: the silence since the last call, a cold cache).
    clears : bool
        Whether the plan's clearings of old tool results are carried out (DESIGN §9); False when
        a provider's compaction acts instead (an adapter's ``native=``). With ``clears`` False or
        no archive, the adapter plans with ``clear_tool_results`` off, as the Claude Code hooks plan.
    archive_free_clearing : bool
        A clearing needs no archive (the provider's ``clear_tool_uses_20250919`` clears what the
        model is shown, the conversation keeps the originals).
    **settings
        Any ``DP_*`` setting by its field name (DESIGN §3); ``clear_tool_results`` (default on,
        ``DP_CLEAR_TOOL_RESULTS``) lets the plan clear old tool results instead of compacting.

    Attributes
    ----------
    plans : list of Plan
        The plan of each call, as carried out (a kept compaction says so, rule :data:`RULE_LOSS_GUARD`).
    compactions : list of CompactionResult
        The compactions carried out, in order.
    clearings : list of ClearResult
        The clearings of old tool results carried out, in order (``depth``, ``archive_ref``, the
        session indices of the messages changed, tokens removed; ``plan`` the plan that chose it).

    Raises
    ------
    SettingsError
        An invalid setting.
    """

    def __init__(self, *, archive: Any = "default", summarizer: Any = None, clock: Callable[[], float] | None = None,
                 clears: bool = True, archive_free_clearing: bool = False, **settings: Any) -> None:
        from dp_compact.settings import load_settings

        self.clock = clock if clock is not None else time.time
        self.transcripts: dict[str, LiveTranscript] = {}
        self.settings = load_settings(**settings)
        if archive == "default":
            from dp_compact.pipeline.archive import ArchiveStore

            archive = ArchiveStore(self.settings.archive_dir)
        self.archive = archive
        if self.settings.clear_tool_results and (not clears or (archive is None and not archive_free_clearing)):  # one it cannot carry out
            self.settings = self.settings.model_copy(update={"clear_tool_results": False})
        self.summarizer = summarizer
        if self.settings.tokenizer == "tiktoken":
            _build_encoder()
        self.plans: list[Any] = []
        self.compactions: list[Any] = []
        self.clearings: list[Any] = []

    def compact(self, session: Session) -> Any:
        """The :class:`~dp_compact.pipeline.compact.CompactionResult` when the plan compacts
        ``session`` (as an OpenAI chat conversation), else None; a failed summary leaves the
        conversation untouched (DESIGN §5) and is logged. The whole session is read and planned
        (no kept state), and a plan that clears old tool results is recorded, not carried out:
        :meth:`compact_live` is what the adapters call."""
        import logging

        from dp_compact.errors import CompactionError
        from dp_compact.pipeline.compact import compact_session

        try:
            result = compact_session(session, self.settings, to="openai", summarizer=self.summarizer, archiver=self.archive)
        except CompactionError as exc:
            logging.getLogger("dp_compact.adapters").warning("dp-compact: compaction skipped: %s", exc)
            return None
        if result.plan is not None:
            self.plans.append(result.plan)
        if result.decision != "compact":
            return None
        self.compactions.append(result)
        return result

    def transcript(self, session_id: str) -> LiveTranscript:
        """The state kept for the conversation ``session_id`` (made on first use)."""
        found = self.transcripts.get(session_id)
        if found is None:
            found = self.transcripts[session_id] = LiveTranscript(session_id)
        return found

    def plan_live(self, transcript: LiveTranscript, facts: ModelFacts = ModelFacts(), system_text: str = "") -> tuple[Any, Any, Any]:
        """``(prepared, timing, plan)`` of ``transcript`` as it is now: prepared from the tokens it keeps
        (:func:`~dp_compact.prepare.prepare_counted`), timed by this adapter's clock (its calls' times,
        "now" the call about to be made), planned as ``dp-compact plan`` plans (:func:`~dp_compact.prepare.plan_prepared`,
        the hit share measured from the usage records). Appends nothing to :attr:`plans`."""
        from dp_compact.prepare import (
            plan_prepared,
            plan_timing,
            prepare,
            prepare_counted,
        )

        session = transcript.session(facts, system_text)
        if self.settings.tokenizer == "tiktoken":
            prepared = prepare_counted(session, self.settings, transcript.token_parts(session, self.settings))
        else:
            prepared = prepare(session, self.settings)
        timing = plan_timing(session, transcript.now_s, WALL_CLOCK, imminent=True)  # the call is made right after
        return prepared, timing, plan_prepared(prepared, timing=timing)

    def compact_live(self, transcript: LiveTranscript, facts: ModelFacts = ModelFacts(), system_text: str = "",
                     clear_with: Callable[[LiveTranscript, Any], None] | None = None) -> Any:
        """Plan ``transcript`` (:meth:`plan_live`) and carry the plan out: the
        :class:`~dp_compact.pipeline.compact.CompactionResult` of a compaction at its cut, the
        :class:`LiveClearing` of a clearing of old tool results at its depth (DESIGN §9), else None.
        The plan is appended to :attr:`plans`, a compaction to :attr:`compactions`, a clearing's
        :class:`~dp_compact.pipeline.clear.ClearResult` to :attr:`clearings`.

        A failed summary or clearing (:class:`~dp_compact.errors.CompactionError`) is logged and
        leaves the conversation untouched (DESIGN §5), but a clearing that fails where the context
        must shrink before the next call compacts at the forced cut (``--force``'s) instead. A
        compaction the context does not force is made only when the plan's net benefit at its cut
        exceeds the expected loss there, else the plan is recorded as kept (:func:`adapter_decision`,
        rule :data:`RULE_LOSS_GUARD`).

        ``clear_with(transcript, plan)``, when given, carries a clearing out instead (a provider's
        ``clear_tool_uses_20250919``, which leaves the conversation as it is): the plan is recorded
        and None returned.

        Raises
        ------
        ArchiveError
            The archive could not be written (nothing is changed).
        """
        prepared, timing, planned = self.plan_live(transcript, facts, system_text)
        action, plan = adapter_decision(planned)
        if action == "keep":  # most calls: nothing more to import or do
            self.plans.append(plan)
            return None
        import logging

        from dp_compact.errors import CompactionError
        from dp_compact.pipeline.compact import compact_session

        if action == "clear" and clear_with is not None:
            self.plans.append(plan)
            clear_with(transcript, plan)
            return None
        if action == "clear":
            cleared = self._clear_live(transcript, prepared.session, plan)
            if cleared is not None or not plan_forced(plan):
                return cleared
            action = "force"  # the context must shrink: compact at the forced cut instead
        try:
            result = compact_session(prepared.session, self.settings, to="openai", summarizer=self.summarizer, archiver=self.archive,
                                     timing=timing, prepared=prepared, planned=planned, force=action == "force")
        except CompactionError as exc:
            self.plans.append(plan)
            logging.getLogger("dp_compact.adapters").warning("dp-compact: compaction skipped: %s", exc)
            return None
        if action == "force" and result.decision == "compact":  # the plan as carried out: a forced compaction
            why = (f"context {plan.estimates.context_tokens:,} tokens must shrink before the next call; the plan clears old tool"
                   f" results ({plan.explanation}), which could not be done: compacted at the forced cut instead")
            done = replace(plan, decision="compact", rule="force", explanation=why, k=result.k, cut=result.cut,
                           tail_tokens=result.tail_tokens, head_tokens=result.head_tokens)
            result = replace(result, plan=done)
        self.plans.append(result.plan if result.plan is not None else plan)
        if result.decision != "compact":
            return None
        self.compactions.append(result)
        return result

    def _clear_live(self, transcript: LiveTranscript, session: Session, plan: Any) -> LiveClearing | None:
        """Clear the old tool results of ``session`` (``transcript``'s) before the plan's depth, archiving them:
        the :class:`LiveClearing`, recorded with its plan; None when nothing could be cleared (the failure
        logged; the plan recorded unless the context forces a compaction instead)."""
        import logging

        from dp_compact.errors import CompactionError
        from dp_compact.pipeline.clear import ACTION_CLEAR, clear_session

        try:
            result = clear_session(session, depth=int(plan.clearing["depth"]), to="openai", archiver=self.archive, settings=self.settings)
            texts = cleared_texts(session, transcript.raws, result) if result.decision == ACTION_CLEAR else {}
        except CompactionError as exc:
            why = f"clearing skipped: {exc}"
        else:
            if texts:
                result = replace(result, plan=plan)
                self.plans.append(plan)
                self.clearings.append(result)
                return LiveClearing(result, texts)
            why = f"clearing skipped: {result.explanation}"
        logging.getLogger("dp_compact.adapters").warning("dp-compact: %s", why)
        if not plan_forced(plan):
            self.plans.append(plan)
        return None
