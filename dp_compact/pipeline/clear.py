"""Clearing old tool results (DESIGN §9, "More than one kind of action"): ``dp-compact compact --action clear``.

Every clearable tool result (:data:`~dp_compact.measure.clearing.CLEAR_MIN_CHARS` characters or
more, not cleared already) in messages ``[0, depth)`` gets a placeholder instead of its content
(:func:`~dp_compact.measure.clearing.placeholder_text`: its size, and the archive reference and
message that restore it). Nothing else changes: no message is removed or added, user messages,
assistant text, tool calls and thinking blocks are the same values (an assistant message is
never touched, so a signed thinking block stays byte-identical), and each result keeps its
call id and its place right after its call (the DESIGN §5 rules of :mod:`.validate` hold
because the structure is the input's). The changed messages are archived verbatim first
(:mod:`.archive`; ``dp-compact restore REF`` gives them all, ``REF#msg-N`` the one message N,
``dp-compact recall`` finds them), with the two-step write of ``compact``: staged, output
written and validated, then indexed; on any failure nothing is written and the staged archive
is removed.

How much it saves and where the cache is rewritten, at every depth: :mod:`dp_compact.measure.clearing`.
:func:`clear_messages` is pure; :func:`clear_session` and :func:`clear_file` are the shell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from dp_compact.conversation import Message, Session
from dp_compact.errors import CompactionError
from dp_compact.measure.clearing import (
    CLEAR_KEEP_TOOL_RESULTS,
    CLEAR_MIN_CHARS,
    ClearingFacts,
    clearing_facts_for,
    depth_keeping_results,
    placeholder_text,
    tool_result_layout,
)
from dp_compact.measure.tokens import count_message_tokens
from dp_compact.pipeline.archive import ArchiveStore, StagingArchiver, archive_session_name, preview_ref
from dp_compact.pipeline.convert import system_messages_for, to_api
from dp_compact.pipeline.extract import identifiers, paths
from dp_compact.pipeline.io import check_output, target_api, write_messages
from dp_compact.pipeline.shrink import replace_results
from dp_compact.pipeline.types import Api, Archiver
from dp_compact.pipeline.validate import validate_messages
from dp_compact.sessions import read_session

__all__ = ["ACTION_CLEAR", "ClearResult", "clear_depth", "clear_file", "clear_messages", "clear_session"]

#: The action's name in ``--action``, ``--json`` and the archive's metadata.
ACTION_CLEAR = "clear"
#: Paths and identifiers of the cleared results stored (and indexed for ``recall``) per archive.
_MAX_KEYS = 200


def clear_messages(messages: Sequence[Message], depth: int, ref: str, *, min_chars: int = CLEAR_MIN_CHARS,
                   statement: str = "") -> tuple[Message, ...]:
    """``messages`` with every clearable tool result before ``depth`` replaced by its placeholder.

    Parameters
    ----------
    messages : sequence of Message
        Never modified.
    depth : int
        Results in messages ``[0, depth)`` are cleared (0 to N).
    ref : str
        The archive reference the placeholders name.
    min_chars : int
        Results shorter than this stay (:data:`~dp_compact.measure.clearing.CLEAR_MIN_CHARS`).
    statement : str
        What the conversation ran with (:func:`~dp_compact.pipeline.shrink.shrunk_statement`), written
        into the first placeholder after its size, so that the cleared file is planned as the
        conversation it is (model, window, context, avg, token ratio, V); empty: none.

    Returns
    -------
    tuple of Message
        Same length and order; unchanged messages are the same objects. A changed message
        whose source shape cannot carry the placeholder (a result linked by position) is
        rebuilt from its fields when written, so no original content is written.
    """
    layout = tool_result_layout(messages, min_chars=min_chars)
    clear = layout.clearable & (layout.message_index < depth)
    out = list(messages)
    positions = sorted({int(i) for i in layout.message_index[clear]})
    for position in positions:
        message = messages[position]
        first = int(np.searchsorted(layout.message_index, position))
        texts = [
            placeholder_text(len(r.text), ref, position) if clear[first + n] else None for n, r in enumerate(message.tool_results)
        ]
        if statement and position == positions[0]:  # the first placeholder states what the conversation ran with
            at = next(n for n, t in enumerate(texts) if t is not None)
            head, _, rest = texts[at].partition("; restore with: ")
            texts[at] = f"{head}{statement}; restore with: {rest}"
        changed = replace_results(message, texts)
        if changed.raw is not None and changed.raw == message.raw:  # the raw holds the results elsewhere
            changed = replace(changed, raw=None)
        out[position] = changed
    return tuple(out)


def clear_depth(messages: Sequence[Message], *, keep: int | None = None, keep_results: int = CLEAR_KEEP_TOOL_RESULTS) -> int:
    """The depth to clear at: ``N - keep`` with ``--keep K`` (messages kept uncleared), else the depth
    that keeps the last ``keep_results`` clearable results (:func:`~dp_compact.measure.clearing.depth_keeping_results`)."""
    if keep is not None:
        return max(len(messages) - keep, 0)
    return depth_keeping_results(tool_result_layout(messages), keep_results)


@dataclass(frozen=True, slots=True)
class ClearResult:
    """What ``compact --action clear`` did, or would do with ``dry_run``.

    ``decision`` is ``clear`` or ``keep`` (nothing clearable before the depth: nothing written).
    ``depth``: results in messages ``[0, depth)`` were cleared; ``kept_messages = N - depth``.
    ``facts``: the :class:`~dp_compact.measure.clearing.ClearingFacts` at that depth (tokens
    removed, placeholder tokens, first changed message, ...), in cl100k tokens;
    ``tokens_before`` / ``tokens_after``: the conversation's message tokens counted before and
    after. ``archive_ref``: where the originals are (``REF#msg-N`` for message N). ``plan``: the
    :class:`~dp_compact.core.decision.Plan` that chose the clearing (``compact`` without
    ``--action``, an adapter), None for ``--action clear``. ``cleared``: the session's messages
    as cleared (:func:`clear_messages`; same length and order, unchanged ones the same objects),
    empty when nothing was cleared; an adapter writes their placeholders into its own messages.
    """

    path: str
    format: str
    decision: str
    explanation: str
    api: Api
    depth: int
    n_messages: int
    facts: dict[str, int]
    tokens_before: int = 0
    tokens_after: int = 0
    archive_ref: str | None = None
    output: str | None = None
    dry_run: bool = False
    cleared_message_indices: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    messages: tuple[dict[str, Any], ...] = field(default=(), repr=False)
    plan: Any = field(default=None, repr=False, compare=False)
    cleared: tuple[Message, ...] = field(default=(), repr=False, compare=False)

    @property
    def written(self) -> bool:
        """True when the output file was written."""
        return self.output is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields: the action, depth, tokens removed and added, the archive key (messages left out)."""
        data = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("messages", "facts", "cleared_message_indices", "plan", "cleared")}
        return {
            "action": ACTION_CLEAR, **data, "kept_messages": self.n_messages - self.depth,
            "cleared_results": self.facts["cleared_results"], "changed_messages": self.facts["changed_messages"],
            "tokens_removed": self.facts["removed_tokens"], "placeholder_tokens": self.facts["placeholder_tokens"],
            "tokens_saved": self.facts["saved_tokens"], "first_changed_message": self.facts["first_changed_message"],
            "rewritten_tokens": self.facts["rewritten_tokens"], "cleared_message_indices": list(self.cleared_message_indices),
            "written": self.written, "plan": self.plan.to_dict() if self.plan is not None else None,
        }


def _metadata(session: Session, originals: Sequence[Message], indices: Sequence[int], depth: int, facts: dict[str, int]) -> dict[str, Any]:
    """Archive metadata of a clearing: what was cleared, where it was, its paths and identifiers (indexed for recall)."""
    text = "\n".join(r.text for m in originals for r in m.tool_results)
    summary = (f"tool results of {len(indices)} messages (before message {depth}) of {Path(session.path).name}"
               f" cleared by dp-compact: {facts['cleared_results']} results, {facts['removed_tokens']:,} tokens")
    return {
        "action": ACTION_CLEAR, "summary": summary, "message_indices": list(indices), "depth": depth,
        "file_paths": paths(text)[:_MAX_KEYS], "identifiers": identifiers(text)[:_MAX_KEYS],
        "token_counts": facts, "source_path": session.path, "format": session.format,
    }


def _written(session: Session, messages: Sequence[Message], api: Api) -> list[dict[str, Any]]:
    """The conversation in ``api``'s shape, system messages first (OpenAI)."""
    return [*system_messages_for(session.system_messages, session.system_text, api), *to_api(messages, api)]


def clear_session(
    session: Session,
    *,
    depth: int | None = None,
    keep: int | None = None,
    to: str | None = None,
    archiver: Archiver | None = None,
    dry_run: bool = False,
    min_chars: int = CLEAR_MIN_CHARS,
    settings: Any = None,
) -> ClearResult:
    """Clear the old tool results of an already read session in memory (writes no output).

    Parameters
    ----------
    session : Session
        Never modified.
    depth : int, optional
        Clear results in messages ``[0, depth)``; default :func:`clear_depth` of ``keep``.
    keep : int, optional
        Messages kept uncleared at the end (``--keep K``); default: keep the last
        :data:`~dp_compact.measure.clearing.CLEAR_KEEP_TOOL_RESULTS` clearable results.
    to : {"anthropic", "openai"}, optional
        Target API (:func:`~dp_compact.pipeline.io.target_api`).
    archiver : Archiver, optional
        Where the changed messages are archived; without one, clearing is refused (the
        placeholders would name nothing).
    dry_run : bool
        Archive nothing; the placeholders name a reference of the archive's shape.
    min_chars : int
        Smallest result cleared.
    settings : Settings, optional
        With them the first placeholder states the model, window, context, avg, token ratio and V
        the conversation ran with (:func:`~dp_compact.pipeline.shrink.statement_for`), as a shrunk
        file does; None: no statement.

    Raises
    ------
    CompactionError
        No archive store, or an output that would break the API's rules (nothing archived).
    ArchiveError
        The archive could not be written.
    """
    messages = session.messages
    api = target_api(session, to)
    depth = clear_depth(messages, keep=keep) if depth is None else min(max(depth, 0), len(messages))
    tokens = count_message_tokens(messages)
    sized = preview_ref(archive_session_name(session.path))
    facts: ClearingFacts = clearing_facts_for(messages, tokens, ref=sized, min_chars=min_chars)
    at = facts.at(depth)
    indices = tuple(int(i) for i in facts.changed_message_indices[: at["changed_messages"]])
    base: dict[str, Any] = {
        "path": session.path, "format": session.format, "api": api, "depth": depth, "n_messages": len(messages), "facts": at,
        "tokens_before": int(tokens.sum()), "dry_run": dry_run, "cleared_message_indices": indices,
    }
    if not indices:
        why = f"no tool result of {min_chars:,} characters or more before message {depth}: nothing to clear"
        return ClearResult(decision="keep", explanation=why, tokens_after=int(tokens.sum()), **base)
    if archiver is None and not dry_run:
        raise CompactionError(f"{session.path}: clearing needs an archive store (the placeholders name where the originals are)")
    cleared = clear_messages(messages, depth, sized, min_chars=min_chars)
    written = _written(session, cleared, api)
    violations = validate_messages(written, api)
    if violations:  # checked before anything is archived
        raise CompactionError(f"{session.path}: the cleared conversation would break {api} rules: {violations[0]}")
    ref, statement = None, _statement(session, settings, cleared)
    if not dry_run:
        originals = [messages[i] for i in indices]
        ref = archiver.write(archive_session_name(session.path), [m.raw for m in originals], _metadata(session, originals, indices, depth, at))
    if ref is not None or statement:  # the placeholders as they are written: the archive's key, the statement (a dry run too)
        cleared = clear_messages(messages, depth, sized if ref is None else ref, min_chars=min_chars, statement=statement)
        written = _written(session, cleared, api)
    notes = ("the system prompt is not written: Anthropic takes it as the request's `system` parameter",) if (
        api == "anthropic" and (session.system_messages or session.system_text)) else ()
    verb = "would clear" if dry_run else "cleared"
    why = f"{verb} {at['cleared_results']} tool result(s) in {len(indices)} message(s) before message {depth}"
    after = int(count_message_tokens(cleared).sum())
    # the placeholders as written (the real archive key and statement), so that before − removed + added = after
    base["facts"] = {**at, "placeholder_tokens": after - (base["tokens_before"] - int(at["removed_tokens"])),
                     "saved_tokens": base["tokens_before"] - after}
    return ClearResult(decision=ACTION_CLEAR, explanation=why, tokens_after=after,
                       archive_ref=ref, notes=notes, messages=tuple(written), cleared=cleared, **base)


def _statement(session: Session, settings: Any, cleared: Sequence[Message]) -> str:
    """The statement the first placeholder carries (:func:`~dp_compact.pipeline.shrink.statement_for`), '' without settings."""
    if settings is None:
        return ""
    from dp_compact.pipeline.shrink import statement_for

    return statement_for(session, settings, cleared) or ""


def clear_file(
    path: Path | str,
    *,
    output: Path | str,
    depth: int | None = None,
    keep: int | None = None,
    to: str | None = None,
    archiver: Archiver | None = None,
    dry_run: bool = False,
    lenient: bool = False,
    settings: Any = None,
) -> ClearResult:
    """Clear the old tool results of the session in ``path`` and write the result to ``output``.

    Parameters as :func:`clear_session`; ``output`` is written atomically in the target API's
    shape, validated, only when something was cleared and not ``dry_run``, and never over the
    input. With an :class:`~.archive.ArchiveStore` the archive is staged, then indexed once the
    output is written, or removed when it could not be (:meth:`~.archive.ArchiveStore.stage`).

    Raises
    ------
    SessionError
        Unreadable input.
    CompactionError
        No archive store, invalid output or write failure (nothing written, nothing archived).
    ArchiveError
        The archive could not be written (nothing written).
    """
    session = read_session(path, lenient=lenient)
    if not dry_run:
        check_output(output, source=path)
    staging = StagingArchiver(archiver, str(Path(output).absolute())) if isinstance(archiver, ArchiveStore) and not dry_run else None
    try:
        result = clear_session(session, depth=depth, keep=keep, to=to, archiver=staging if staging is not None else archiver, dry_run=dry_run,
                               settings=settings)
        if result.decision != ACTION_CLEAR or dry_run:
            return result
        write_messages(output, result.messages, result.api, source=path)
    except BaseException:
        if staging is not None:
            staging.discard()  # the archive records no clearing whose output was not written
        raise
    if staging is not None:
        staging.commit()
    return replace(result, output=str(output))
