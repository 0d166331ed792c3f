"""``dp-compact compact``: the pipeline of DESIGN §5 end to end (the orchestrating shell).

read → plan (or ``--keep K`` / ``--force``) → split → shrink a copy of the head → anchors →
summarize → archive → reassemble → validate → write atomically. The stages are pure
(:mod:`.split`, :mod:`.shrink`, :mod:`.anchors`, :mod:`.summarize`, :mod:`.reassemble`,
:mod:`.validate`); reading, the archive, the circuit breaker and the output file are
touched here (and in :mod:`.io`) only. The input file is never modified; on any failure nothing
is written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from dp_compact.errors import CompactionError
from dp_compact.pipeline.anchors import INSTRUCTION_CHARS, head_instructions, score_message, select_anchors
from dp_compact.pipeline.archive import ArchiveStore, StagingArchiver, archive_session_name, preview_ref
from dp_compact.pipeline.clear import ACTION_CLEAR, ClearResult, clear_session
from dp_compact.pipeline.breaker import CircuitBreaker
from dp_compact.pipeline.extract import (
    error_lines,
    identifiers,
    instruction_sentences,
    joined_identifiers,
    joined_paths,
    keywords,
    paths,
    user_turn_texts,
)
from dp_compact.pipeline.convert import to_api
from dp_compact.pipeline.io import check_output, target_api, write_messages
from dp_compact.pipeline.repairs import repair_notes
from dp_compact.sessions.source import repaired_lines_note
from dp_compact.sessions.common import count_llm_calls, count_user_turns
from dp_compact.pipeline.reassemble import reassemble, summary_message_text
from dp_compact.pipeline.shrink import shrink_messages
from dp_compact.pipeline.split import cut_for_keep, keep_moved_note, split, split_system
from dp_compact.pipeline.summarize import (
    ExtractiveSummarizer,
    Summarizer,
    SummaryRequest,
    check_summary,
    warm_summary,
    with_instructions,
)
from dp_compact.pipeline.types import Anchor, Api, Archiver
from dp_compact.pipeline.validate import validate_messages
from dp_compact.core.planner import RULE_WAIT, Plan, forced_cut
from dp_compact.core.timing import Timing
from dp_compact.prepare import PreparedSession, plan_prepared, prepare
from dp_compact.sessions import read_session
from dp_compact.sessions.common import is_summary_text
from dp_compact.conversation import Message, Session, recorded_history
from dp_compact.settings import Settings
from dp_compact.measure.tokens import count_text_tokens

__all__ = ["RULE_FORCED_FLAG", "RULE_KEEP_FLAG", "RULE_REQUESTED", "RULE_WOULD_GROW", "CompactionResult", "StagingArchiver", "compact_file", "compact_session",
           "warm_compaction"]

RULE_KEEP_FLAG = "keep-flag"  # the user chose k (--keep K)
RULE_FORCED_FLAG = "force-flag"  # --force where the planner would keep everything
#: ``dp-compact compact`` without --keep where the look-ahead planner would wait for a compaction it
#: has scheduled (DESIGN §7): compacting was asked for now, at the cut the planner prices best now.
RULE_REQUESTED = "requested"
#: ``compact`` declined: the summary part would be no smaller than the head it replaces (DESIGN §5:
#: a compaction never makes the context larger; a tiny session's head is smaller than any summary).
#: With ``--keep K`` or ``--force`` the user chose it: the compaction is made, with a note saying it grows.
RULE_WOULD_GROW = "would-grow"
#: Share of the kept tail's message tokens added for JSON framing when sizing the summary: the
#: SCHEMA reference count (JSON of each message) runs ~4 % above the text count on case 07.
TAIL_FRAMING_FACTOR = 1.10
#: Smallest summary budget, tokens, even when the kept tail alone fills the window.
MIN_SUMMARY_BUDGET_TOKENS = 120


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What ``compact`` did, or would do with ``dry_run`` (DESIGN §5).

    ``decision`` is ``compact`` or ``keep`` (nothing to do, nothing written); ``rule`` names what
    decided (a planner rule, ``keep-flag`` or ``force-flag``). ``cut``/``k``: head = messages
    ``[0, cut)``, ``k`` kept. Tokens: ``head_tokens``/``tail_tokens`` as the planner counts them,
    ``summary_tokens`` of the summary message, ``output_tokens`` ≈ summary part + tail.
    ``messages`` is the output conversation (one dict per JSONL line); ``notes`` are warnings.
    """

    path: str
    format: str
    decision: str
    rule: str
    explanation: str
    output: str | None = None
    api: Api | None = None
    cut: int = 0
    k: int = 0
    n_messages: int = 0
    head_tokens: int = 0
    tail_tokens: int = 0
    summary_tokens: int = 0
    output_tokens: int = 0
    summary: str = ""
    anchors: tuple[Anchor, ...] = ()
    archive_ref: str | None = None
    summarizer: str = ""
    dry_run: bool = False
    notes: tuple[str, ...] = ()
    messages: tuple[dict[str, Any], ...] = field(default=(), repr=False)
    plan: Plan | None = field(default=None, repr=False)

    @property
    def written(self) -> bool:
        """True when the output file was written."""
        return self.output is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the plan as ``Plan.to_dict()``, the messages left out); ``action`` is
        ``summarize`` (``compact --action clear`` reports :class:`~.clear.ClearResult` instead)."""
        data = {"action": "summarize", **{k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("messages", "plan", "anchors")}}
        data["anchors"] = [asdict(a) for a in self.anchors]
        data["written"] = self.written
        data["plan"] = self.plan.to_dict() if self.plan is not None else None
        return data


def _choose_cut(
    prepared: PreparedSession, keep: int | None, force: bool, requested: bool = False, timing: Timing | None = None,
    planned: Plan | None = None,
) -> tuple[int | None, str, str, Plan | None]:
    """(cut or None, rule, explanation, plan) from ``--keep``, the planner (``planned`` when already made), a
    request, or ``--force``."""
    session = prepared.session
    messages = session.messages
    if not messages:
        return None, "empty", "the session has no messages: nothing to compact", None
    if keep is not None:
        seed = prepared.settings.model == "seed"
        cut = cut_for_keep(messages, keep, user_turns_only=seed, path=session.path)
        moved = keep_moved_note(messages, keep, cut, path=session.path, user_turns_only=seed)
        return cut, RULE_KEEP_FLAG, moved or f"--keep {keep}", None
    decided = planned if planned is not None else plan_prepared(prepared, timing=timing)
    if decided.decision == "compact":
        return decided.cut, decided.rule, decided.explanation, decided
    scheduled = decided.rule == RULE_WAIT and (decided.lookahead or {}).get("next_compaction_calls") is not None
    if requested and scheduled and not force and decided.best_candidate is not None:
        why = f"compacted now as asked, at the planner's best cut now ({decided.explanation})"
        return int(decided.best_candidate["cut"]), RULE_REQUESTED, why, decided
    if force:
        cut = forced_cut(decided)
        if cut is None:
            return None, decided.rule, decided.explanation, decided
        return cut, RULE_FORCED_FLAG, f"--force ({decided.explanation})", decided
    return None, decided.rule, decided.explanation, decided


#: The summary's hard bound is at least this many tokens, room allowing: what every request and
#: changed file of a long session takes in their shortest forms (DESIGN §9 "Retention"; 108 changed
#: files and 10 requests of the largest shared Claude Code session take about 1,300), still below
#: the summaries Claude Code writes itself (5,675-5,870 tokens, calibration/results.json).
RETAINED_SUMMARY_TOKENS = 2_000


def _summary_budget(settings: Settings, window: int, v_tokens: int, tail_tokens: int) -> tuple[int, int]:
    """(target, max) summary tokens: S and max(2·S, :data:`RETAINED_SUMMARY_TOKENS`), lowered so
    that V + summary + tail fits DP_FORCE_RATIO·M."""
    room = int(settings.force_ratio * window - v_tokens - TAIL_FRAMING_FACTOR * tail_tokens)
    limit = max(min(max(2 * settings.s, RETAINED_SUMMARY_TOKENS), room), MIN_SUMMARY_BUDGET_TOKENS)
    return min(settings.s, limit), limit


def _metadata(session: Session, head: tuple[Message, ...], body: str, anchors: tuple[Anchor, ...], counts: dict[str, int]) -> dict[str, Any]:
    """Archive metadata: summary, anchors, paths, identifiers, keywords, token counts, source."""
    # The paths and identifiers of the head's texts and then its calls' arguments, joined by line breaks.
    texts = [*(m.text for m in head), *(c.arguments for m in head for c in m.tool_calls)]
    return {
        "summary": body,
        "anchors": [asdict(a) for a in anchors],
        "file_paths": joined_paths(texts, 200),
        "identifiers": joined_identifiers(texts, 200),
        "keywords": keywords(t for _, t in user_turn_texts(enumerate(head))),
        "token_counts": counts,
        "source_path": session.path,
        "format": session.format,
        "compaction": session.compactions + 1,
    }


def warm_compaction(messages: Sequence[Message], workdir: str | None = None) -> str | None:
    """Work out, and remember, what a compaction with the extractive summary derives from each of
    ``messages`` on its own (:func:`~.summarize.warm_summary`, the anchors' scores and error
    lines, the archive metadata's paths, identifiers and keywords), so that compacting a head that
    holds them, in this process, finds that work done (a plan server prepares a transcript's
    ``PreCompact`` hook once it has answered its status line). ``workdir``: as
    :func:`~.summarize.warm_summary`; returns the working folder after them. Changes nothing a
    compaction writes."""
    workdir = warm_summary(messages, workdir)
    for message in messages:
        score_message(message)
        for result in message.tool_results:
            error_lines(result.text, 1)
        paths(message.text)
        identifiers(message.text)
        for call in message.tool_calls:
            paths(call.arguments)
            identifiers(call.arguments)
    for _, text in user_turn_texts(enumerate(messages), injected=True):
        instruction_sentences(text, limit_chars=INSTRUCTION_CHARS)
    keywords(text for _, text in user_turn_texts(enumerate(messages)))
    return workdir


def _summarize(request: SummaryRequest, summarizer: Summarizer, breaker: CircuitBreaker | None, path: str) -> str:
    """Run the summarizer with the circuit breaker; the checked summary with every standing instruction."""
    if breaker is not None:
        breaker.check(path)
    try:
        body = check_summary(summarizer(request), request.head)
    except CompactionError as exc:
        if breaker is not None:
            breaker.record_failure(path, str(exc))
        raise
    if breaker is not None:
        breaker.record_success(path)
    return with_instructions(body, request.instructions, request)


def _request(prepared: PreparedSession, head: tuple[Message, ...], tail_tokens: int, *, shrunk: bool = True) -> SummaryRequest:
    """The summary request for ``head``: shrunk copy, previous summary, instructions, token budget.
    ``shrunk`` False: the head itself stands for its shrunk copy (for :class:`~.summarize.ExtractiveSummarizer`,
    which never reads it; the previews cost a pass over every long tool result)."""
    session = prepared.session
    target, limit = _summary_budget(prepared.settings, prepared.window_tokens, prepared.v_tokens, tail_tokens)
    return SummaryRequest(
        head=head, shrunk_head=shrink_messages(head) if shrunk else head, previous_summary=head[0].text if is_summary_text(head[0].text) else None,
        target_tokens=target, max_tokens=limit, instructions=tuple(head_instructions(head)), system_text=session.system_text,
        system_messages=tuple(m for m in session.system_messages if isinstance(m, dict)), earlier=_earlier(session),
    )


def _earlier(session: Session) -> tuple[Message, ...]:
    """The recorded messages before the live conversation: segments the tool compacted itself
    (Claude Code, Codex), whose requests and changed files a summary still carries (DESIGN §9);
    () for a file without recorded compactions or without line numbers."""
    first = session.messages[0].line if session.messages else 0
    if not session.compactions or first <= 0:
        return ()
    return tuple(m for m in recorded_history(session) if 0 < m.line < first)


def _reading_notes(session: Session) -> tuple[str, ...]:
    """What reading repaired in the file (lone surrogates read as U+FFFD)."""
    return (f"{session.path}: {repaired_lines_note(session.repaired_lines)}",) if session.repaired_lines else ()


def _summary_part_tokens(messages: list[dict[str, Any]], written_tail: int) -> int:
    """Tokens of the written summary part (summary message and acknowledgement), counted as message text is."""
    lead = sum(1 for m in messages if m.get("role") in ("system", "developer"))
    part = messages[lead : len(messages) - written_tail]
    texts = [m["content"] if isinstance(m.get("content"), str) else json.dumps(m.get("content"), ensure_ascii=False) for m in part]
    return int(count_text_tokens(texts).sum()) if texts else 0


def _marker_notes(markers: Sequence[Any], archived: bool) -> tuple[str, ...]:
    """What became of the markers of earlier compactions among the system messages (:func:`~.split.split_system`)."""
    if not markers:
        return ()
    where = "archived with the head" if archived else "left out with the head (no archive store)"
    return (f"{len(markers)} marker(s) of earlier compactions ([compact_boundary] system messages) {where}, not written"
            " before the summary: the summary replaces the history they mark",)


def _notes(prepared: PreparedSession, api: Api, output_tokens: int, archived: bool) -> tuple[str, ...]:
    """Warnings for the user: head not archived; system prompt not written; output still above DP_FORCE_RATIO·M."""
    session, settings, window = prepared.session, prepared.settings, prepared.window_tokens
    notes = [] if archived else ["no archive store: the head was not archived"]
    if api == "anthropic" and (session.system_messages or session.system_text):
        notes.append("the system prompt is not written: Anthropic takes it as the request's `system` parameter")
    if prepared.v_tokens + output_tokens > settings.force_ratio * window:
        notes.append(
            f"V + output ≈ {prepared.v_tokens + output_tokens:,} tokens stays above {settings.force_ratio:g} x {window:,}: "
            "the kept tail alone is too large"
        )
    return tuple(notes)


def compact_session(
    session: Session,
    settings: Settings,
    *,
    keep: int | None = None,
    force: bool = False,
    requested: bool = False,
    to: str | None = None,
    summarizer: Summarizer | None = None,
    archiver: Archiver | None = None,
    breaker: CircuitBreaker | None = None,
    dry_run: bool = False,
    use_cache: bool = True,
    timing: Timing | None = None,
    prepared: PreparedSession | None = None,
    planned: Plan | None = None,
) -> CompactionResult:
    """Compact an already read session in memory (parameters and errors as :func:`compact_file`; writes no output).

    The session is prepared as every command prepares it (:func:`~dp_compact.prepare.prepare`): the
    plan, the summary's budget and what the summary states (avg, token ratio, V) come from there,
    and the result's notes open with the prepared notes (reading, prices and window, token
    scale, V), as ``plan`` prints them. ``timing``: what the plan knows of time (DESIGN §8; an
    adapter's wall clock), default the transcript's (:func:`~dp_compact.prepare.plan_prepared`);
    ``prepared``: ``session`` already prepared under ``settings`` (an adapter's incremental state,
    :func:`~dp_compact.prepare.prepare_counted`); ``planned``: the plan
    :func:`~dp_compact.prepare.plan_prepared` gives for ``prepared`` and ``timing``, already made
    (an adapter plans before deciding to compact), used instead of planning again.
    """
    api = target_api(session, to)
    prepared = prepared if prepared is not None else prepare(session, settings, use_cache=use_cache)
    tokens, window = prepared.message_tokens, prepared.window_tokens
    cut, rule, why, decided = _choose_cut(prepared, keep, force, requested, timing, planned)
    base = dict(path=session.path, format=session.format, rule=rule, explanation=why, api=api, n_messages=len(session.messages), plan=decided, dry_run=dry_run)
    if cut is None:
        return CompactionResult(decision="keep", k=len(session.messages), notes=prepared.notes, **base)
    head, tail = split(session.messages, cut)
    # Markers of earlier compactions lie before the head: they go with it into the archive, not ahead of the summary.
    prefix, markers = split_system(session.system_messages)
    head_tokens, tail_tokens = int(tokens[:cut].sum()), int(tokens[cut:].sum())
    summarizer = summarizer if summarizer is not None else ExtractiveSummarizer()
    # The breaker guards model requests: an offline summarizer and a dry run neither wait for it nor move it.
    guard = None if dry_run or getattr(summarizer, "offline", False) else breaker
    request = _request(prepared, head, tail_tokens, shrunk=type(summarizer) is not ExtractiveSummarizer)
    body = _summarize(request, summarizer, guard, session.path)
    anchors = select_anchors(head)
    # What the head stands for, as the session counts it (its reader's user turns; its calls from usage
    # records): the compacted file then adds its tail the way a reader counts it, and t and L carry over.
    head_turns = max(session.user_turns - count_user_turns(tail), 0)
    head_calls = max(session.llm_calls - count_llm_calls(tail), 0)

    # What follows the summary (the tail, and the acknowledgement when there is one), stated in it.
    after = sum(1 for m in reassemble("", tail, api) if m.get("role") not in ("system", "developer")) - 1

    # The usage evidence the session was planned with (its avg and measured token scale), stated in the
    # summary: the compacted file has no usage records, and re-plans with the same avg and scale.
    evidence = decided.estimates if decided is not None else prepared.estimates()
    avg = None if evidence.avg_source == "default" else evidence.avg_tokens
    measured_ratio = prepared.evidenced_token_ratio

    def assemble(ref: str | None) -> tuple[str, list[dict[str, Any]]]:
        text = summary_message_text(
            body, anchors, ref, n_messages=len(head), head_tokens=head_tokens, user_turns=head_turns,
            llm_calls=head_calls, compaction=session.compactions + 1, kept_messages=after,
            model=session.model, window=window, avg_tokens=avg, token_ratio=measured_ratio,
            prefix_tokens=prepared.evidenced_v_tokens, write_1h_share=prepared.prices.write_1h_share,
        )
        return text, reassemble(text, tail, api, system_raw=prefix, system_text=session.system_text)

    summary_text, messages = assemble(None if archiver is None else preview_ref(archive_session_name(session.path)))
    violations = validate_messages(messages, api)
    if violations:  # checked before anything is archived
        raise CompactionError(f"{session.path}: the compacted conversation would break {api} rules: {violations[0]}")
    written_tail = len(to_api(tail, api, issued=[{"role": "user", "content": ""}]))  # as reassemble writes it
    repaired = _reading_notes(session) + repair_notes([m.raw for m in tail], messages[len(messages) - written_tail :], api)
    repaired += _marker_notes(markers, archiver is not None)
    added = _summary_part_tokens(messages, written_tail)
    if added >= head_tokens and rule in (RULE_KEEP_FLAG, RULE_FORCED_FLAG):  # the user chose it: made as asked, and said so
        asked = f"--keep {keep}" if rule == RULE_KEEP_FLAG else "--force"
        repaired += ((f"the summary part ({added:,} tokens) is no smaller than the {len(head)}-message head it replaces"
                      f" ({head_tokens:,} tokens): this compaction makes the context larger ({asked} was asked for)"),)
    elif added >= head_tokens:  # DESIGN §5: a compaction replaces the head by something smaller, or is not made
        why = (f"the summary part ({added:,} tokens) would be no smaller than the {len(head)}-message head it replaces"
               f" ({head_tokens:,} tokens): compacting would make the context larger, so nothing is written")
        return CompactionResult(decision="keep", k=len(session.messages), notes=prepared.notes + repaired,
                                **{**base, "rule": RULE_WOULD_GROW, "explanation": why})
    ref = None
    if archiver is not None and not dry_run:
        metadata = _metadata(session, head, body, anchors, {"head": head_tokens, "tail": tail_tokens})
        if markers:  # archived first, where they stood (before message 0), numbered -m..-1 so that #msg-N still names message N
            metadata["message_indices"] = [*range(-len(markers), 0), *range(len(head))]
        ref = archiver.write(archive_session_name(session.path), [*markers, *(m.raw for m in head)], metadata)
        summary_text, messages = assemble(ref)
    elif archiver is not None:  # a dry run states the archive section a real run writes, and is sized with it
        summary_text, messages = assemble(preview_ref(archive_session_name(session.path)))
    summary_tokens = int(count_text_tokens([summary_text])[0])
    return CompactionResult(
        decision="compact", cut=cut, k=len(tail), head_tokens=head_tokens, tail_tokens=tail_tokens,
        summary_tokens=summary_tokens, output_tokens=summary_tokens + tail_tokens, summary=summary_text, anchors=anchors,
        archive_ref=ref, summarizer=getattr(summarizer, "name", type(summarizer).__name__),
        notes=prepared.notes + repaired + _notes(prepared, api, summary_tokens + tail_tokens, archiver is not None),
        messages=tuple(messages), **base,
    )


def compact_file(
    path: Path | str,
    settings: Settings,
    *,
    output: Path | str,
    keep: int | None = None,
    force: bool = False,
    requested: bool = False,
    to: str | None = None,
    dry_run: bool = False,
    summarizer: Summarizer | None = None,
    archiver: Archiver | None = None,
    breaker: CircuitBreaker | None = None,
    lenient: bool = False,
    use_cache: bool = True,
) -> CompactionResult | ClearResult:
    """Compact the session in ``path`` and write the result to ``output`` (DESIGN §5).

    When the planner decides to clear old tool results instead (DESIGN §9, ``Plan.decision ==
    "clear"``; no ``--keep``, no ``--force``), that is what is done: the result is then a
    :class:`~.clear.ClearResult` (:func:`~.clear.clear_session` at the plan's depth).

    Parameters
    ----------
    path : Path or str
        The session (any supported format). Never modified.
    settings : Settings
        Planner settings; ``S`` sizes the summary, ``V``, ``DP_FORCE_RATIO`` and ``M`` bound it.
    output : Path or str
        The compacted conversation, JSONL in the target API's shape; written atomically, only
        when the decision is ``compact`` and not ``dry_run``. Must not be the input.
    keep : int, optional
        ``--keep K``: the nearest feasible cut keeping at least ``K`` messages (no planning).
    force : bool
        Compact even when the planner would not: at the planner's forced-rule cut.
    requested : bool
        Compaction was asked for now (``dp-compact compact`` without ``--when-due``): where the
        look-ahead planner would wait for a compaction its best schedule makes later (rule
        ``wait`` with a next compaction, DESIGN §7), compact now at the cut it prices best now
        (rule ``requested``). Where no compaction pays within the session's expected future, or
        the conversation is our own output with nothing added, nothing is compacted.
    to : {"anthropic", "openai"}, optional
        Target API (default: Anthropic for anthropic/claude_code, OpenAI for openai_chat/codex).
    dry_run : bool
        Compute everything, archive and write nothing.
    summarizer : Summarizer, optional
        Default :class:`~.summarize.ExtractiveSummarizer`.
    archiver : Archiver, optional
        Where the head is archived; without one the summary says it was not archived.
    breaker : CircuitBreaker, optional
        Pauses a session's compaction after consecutive summary failures of a model summarizer;
        never consulted for an offline summarizer (``summarizer.offline``, the extractive one)
        nor for a dry run.
    lenient : bool
        Skip malformed lines of the input.
    use_cache : bool
        Use the persistent token cache.

    Returns
    -------
    CompactionResult
        ``output`` is set when the file was written.

    Raises
    ------
    SessionError
        Unreadable, malformed or unknown-format input.
    NoFeasibleCutError
        ``--keep K`` with no feasible cut keeping at least ``K`` messages.
    CompactionError
        Summary failure (:class:`SummaryTooShortError`), open breaker (:class:`CircuitOpenError`),
        invalid output or write failure. Nothing is written then.
    ArchiveError
        The archive could not be written (nothing is written).
    """
    session = read_session(path, lenient=lenient)
    if not dry_run:
        check_output(output, source=path)
    staging = StagingArchiver(archiver, str(Path(output).absolute())) if isinstance(archiver, ArchiveStore) and not dry_run else None
    try:
        done: CompactionResult | ClearResult = compact_session(
            session, settings, keep=keep, force=force, requested=requested, to=to, summarizer=summarizer,
            archiver=staging if staging is not None else archiver, breaker=breaker, dry_run=dry_run, use_cache=use_cache,
        )
        decided = done.plan
        if decided is not None and decided.decision == "clear" and decided.clearing is not None and done.decision == "keep":
            cleared = clear_session(session, depth=int(decided.clearing["depth"]), to=to,
                                    archiver=staging if staging is not None else archiver, dry_run=dry_run, settings=settings)
            done = replace(cleared, explanation=f"{cleared.explanation}: {decided.explanation}", notes=done.notes + cleared.notes,
                           plan=decided)
        if done.decision not in ("compact", ACTION_CLEAR) or dry_run:
            return done
        write_messages(output, done.messages, done.api or "anthropic", source=path)
    except BaseException:
        if staging is not None:
            staging.discard()  # the archive records no compaction or clearing whose output was not written
        raise
    if staging is not None:
        staging.commit()
    return replace(done, output=str(output))
