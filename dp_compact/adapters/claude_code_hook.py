"""Claude Code: a status line that shows the plan, and a ``PreCompact`` hook that archives the conversation.

Claude Code runs a status line command and hook commands with a JSON object on stdin; both
carry ``session_id`` and ``transcript_path`` (the session's JSONL transcript). ``dp-compact hook``
tells them apart by ``hook_event_name``:

- ``PreCompact`` (``trigger`` ``manual`` or ``auto``): Claude Code is about to replace the live
  conversation by its own summary. Everything it drops (the whole live conversation) is
  archived verbatim with the pipeline's archive step (summary, anchors and keywords indexed),
  under the transcript's session id, so ``dp-compact recall`` and ``restore`` (or the MCP
  server) find it afterwards. Prints ``archived N messages as archive://...``.
- anything else (the status line's input): plans the transcript (DESIGN §2, §7) and prints one
  line, ``ctx 142k/200k · compact now saves $0.42 · keep 33`` when compacting pays now, or
  ``ctx 142k/200k · keep all`` while waiting is cheaper, or ``ctx 142k/200k · keep; /compact on
  return if away > 5 min`` when compacting pays only once the cache has expired (DESIGN §8). ``model.id`` and
  ``context_window.context_window_size`` of the input stand for the model and window the
  transcript records, when it records none.

Only reads the transcript; never writes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dp_compact.errors import SessionError
from dp_compact.conversation import Message, Session

if TYPE_CHECKING:
    from dp_compact.settings import Settings

__all__ = ["PRE_COMPACT", "HookOutcome", "archive_before_compaction", "hook_settings", "run_hook", "status_line", "status_text",
           "with_payload_context"]

#: ``hook_event_name`` of the hook Claude Code runs before it compacts.
PRE_COMPACT = "PreCompact"
#: Text of the placeholder that stands for what follows the compaction (never archived).
_AFTER = "(Claude Code compacts the conversation here)"


@dataclass(frozen=True, slots=True)
class HookOutcome:
    """What ``dp-compact hook`` prints (``text``, one line) and, for ``PreCompact``, the archive reference."""

    text: str
    archive_ref: str | None = None


def _transcript(payload: Mapping[str, Any]) -> Session:
    """The transcript named by the payload, read leniently (a live transcript may end in a half-written line)."""
    from dp_compact.sessions import read_session

    path = payload.get("transcript_path")
    if not isinstance(path, str) or not path:
        raise SessionError("<stdin>", None, "no transcript_path: not the JSON of a Claude Code hook or status line")
    return read_session(Path(path).expanduser(), lenient=True)


def _session(payload: Mapping[str, Any]) -> Session:
    """The transcript named by the payload, with the payload's model and window where it records none."""
    return with_payload_context(_transcript(payload), payload)


def _not_started(session: Session, payload: Mapping[str, Any]) -> str | None:
    """The status line of a transcript that holds no message yet and no unreadable line (a session
    just started: Claude Code writes its bookkeeping records first), else None."""
    if session.messages or session.skipped_lines:
        return None
    window = payload.get("context_window")
    size = window.get("context_window_size") if isinstance(window, Mapping) else None
    return f"ctx 0k/{_k(size)} · no messages yet" if isinstance(size, int) and size > 0 else "ctx 0k · no messages yet"


def with_payload_context(session: Session, payload: Mapping[str, Any]) -> Session:
    """``session`` with the payload's ``model.id`` and ``context_window.context_window_size`` where it
    records no model or window.

    Raises
    ------
    SessionError
        The session has no message (the transcript's ``path`` is named).
    """
    path = session.path
    if not session.messages:
        skipped = f" ({session.skipped_lines} unreadable line(s) left out)" if session.skipped_lines else ""
        raise SessionError(path, None, f"no message could be read: not a Claude Code transcript{skipped}")
    model = payload.get("model")
    window = payload.get("context_window")
    extra: dict[str, Any] = {}
    if not session.model and isinstance(model, Mapping) and isinstance(model.get("id"), str):
        extra["model"] = model["id"]
    size = window.get("context_window_size") if isinstance(window, Mapping) else None
    if session.context_window is None and isinstance(size, int) and size > 0:
        extra["context_window"] = size
    return replace(session, **extra) if extra else session


def _k(tokens: float) -> str:
    """Tokens in thousands, ``142k``; from a million (as rounded) in millions, ``1M``, ``1.05M``.

    >>> [_k(t) for t in (258_000, 999_400, 999_600, 1_000_000, 1_048_576, 2_000_000)]
    ['258k', '999k', '1M', '1M', '1.05M', '2M']
    """
    if round(tokens / 1000) < 1000:
        return f"{tokens / 1000:.0f}k"
    return f"{tokens / 1e6:.3g}M"


def status_line(payload: Mapping[str, Any], settings: Settings) -> str:
    """The status line: context over window, and the plan (DESIGN §2 decision, §7 savings).

    Parameters
    ----------
    payload : mapping
        Claude Code's status line JSON (``transcript_path``; ``model.id`` and
        ``context_window.context_window_size`` used when the transcript records neither).
    settings : Settings

    Returns
    -------
    str
        ``ctx 142k/200k · compact now saves $0.42 · keep 33`` or ``ctx 142k/200k · keep all``;
        the saving is the look-ahead's against the best schedule that waits, else NetBenefit ($).
        ``ctx 0k · no messages yet`` for a transcript that holds no message yet (an empty file, or
        only the records Claude Code writes before the first message).

    Raises
    ------
    SessionError
        No ``transcript_path``, or an unreadable transcript.
    """
    import time

    from dp_compact.api import plan_session

    session = _transcript(payload)
    if (empty := _not_started(session, payload)) is not None:
        return empty
    plan = plan_session(with_payload_context(session, payload), hook_settings(settings), now=time.time(),
                        now_source="wall clock")  # the silence since the last call (DESIGN §8)
    return status_text(plan)


def hook_settings(settings: Any) -> Any:
    """The settings the status line plans with: ``settings`` with ``DP_CLEAR_TOOL_RESULTS`` off, since
    Claude Code cannot carry a clearing of old tool results out (docs/settings.md)."""
    if getattr(settings, "clear_tool_results", False):
        return settings.model_copy(update={"clear_tool_results": False})
    return settings


def status_text(plan: Any) -> str:
    """The status line of a :class:`~dp_compact.core.planner.Plan` (see :func:`status_line`)."""
    from dp_compact.core.decision import RULE_RESUME

    head = f"ctx {_k(plan.estimates.context_tokens)}/{_k(plan.prices.max_context_tokens)}"
    if plan.decision != "compact":
        if plan.rule == RULE_RESUME:  # keep now; when the person comes back after the cache expired, /compact first
            return f"{head} · keep; /compact on return if away > {_minutes(plan)}"
        return f"{head} · keep all"
    if plan.lookahead is None:  # the single-step planners: their NetBenefit
        return f"{head} · compact now saves ${plan.terms.get('net', 0.0):.2f} · keep {plan.k}"
    saves = plan.lookahead.get("saves_usd")
    if saves is None:  # keeping is not allowed: the context must shrink before the next call
        return f"{head} · compact now: nearly full · keep {plan.k}"
    return f"{head} · compact now saves ${saves:.2f} · keep {plan.k}"


def _minutes(plan: Any) -> str:
    """The cache's life the plan assumed, as "5 min" or "1 h" (DESIGN §8)."""
    ttl = (plan.timing or {}).get("cache_ttl_s") or plan.prices.cache_ttl_s
    return f"{ttl / 3600:g} h" if ttl >= 3600 else f"{ttl / 60:g} min"


def archive_before_compaction(payload: Mapping[str, Any], settings: Settings, archive: Any, *, token_cache: Any = None,
                              session: Session | None = None) -> HookOutcome:
    """Archive the live conversation that Claude Code's compaction is about to replace.

    The pipeline runs with the whole live conversation as its head: a placeholder user turn
    stands for what follows the compaction and is the one message kept (``--keep 1``), so the
    archive, its summary, anchors and index are the pipeline's own (DESIGN §5.6). Nothing is
    written but the archive.

    Parameters
    ----------
    payload : mapping
        The ``PreCompact`` hook's JSON (``transcript_path``, ``trigger``).
    settings : Settings
    archive : Archiver
        Usually :class:`~dp_compact.pipeline.archive.ArchiveStore` (``DP_ARCHIVE_DIR``).
    token_cache : optional
        Where the messages' token counts are looked up and kept instead of the persistent token
        cache: an object with :class:`~dp_compact.measure.tokens.TokenCache`'s ``get_many`` and
        ``put_many`` (a long-lived process's counts in memory); the counts, and so the archive,
        are the same.
    session : Session, optional
        The transcript already read as :func:`~dp_compact.sessions.read_session` reads it here
        (lenient, each message's ``raw`` its source as parsed JSON): a long-lived process's
        reading continued from where it stopped. Default: the transcript is read.

    Returns
    -------
    HookOutcome
        ``archived N messages as archive://<session>/<id>``, or ``nothing to archive``. A
        conversation the archive holds already, message for message (the hook run twice), is not
        archived again: its archive's reference is given, followed by ``(already archived)``.

    Raises
    ------
    SessionError
        No ``transcript_path``, or an unreadable transcript.
    CompactionError, ArchiveError
        The summary or the archive failed (nothing archived).
    """
    from dp_compact.pipeline.archive import archive_session_name
    from dp_compact.pipeline.compact import compact_session

    session = _session(payload) if session is None else with_payload_context(session, payload)
    if not session.messages:
        return HookOutcome("dp-compact: nothing to archive")
    archived_as = getattr(archive, "archived_as", None)
    if archived_as is not None and (ref := archived_as(archive_session_name(session.path), [m.raw for m in session.messages])) is not None:
        # the hook run again on the same conversation (a retried or repeated compaction): the archive it made holds it
        return HookOutcome(f"dp-compact: archived {len(session.messages)} messages as {ref} (already archived)", ref)
    after = Message(role="user", text=_AFTER, raw={"role": "user", "content": _AFTER})
    live = replace(session, messages=(*session.messages, after))
    prepared = None
    if token_cache is not None and getattr(settings, "tokenizer", None) == "tiktoken":
        from dp_compact.measure.tokens import message_token_parts
        from dp_compact.prepare import prepare_counted, session_family

        parts = message_token_parts(live.messages, cache=token_cache, family=session_family(live, settings))
        prepared = prepare_counted(live, settings, parts)  # what compact_session's prepare() makes of it
    result = compact_session(live, settings, keep=1, archiver=archive, prepared=prepared)
    return HookOutcome(f"dp-compact: archived {result.cut} messages as {result.archive_ref}", result.archive_ref)


def run_hook(payload: Any, settings: Settings, archive: Any = None) -> HookOutcome:
    """Dispatch Claude Code's JSON: ``PreCompact`` archives, anything else is the status line.

    Raises
    ------
    SessionError
        The input is not a JSON object, or as :func:`status_line` / :func:`archive_before_compaction`.
    """
    if not isinstance(payload, Mapping):
        raise SessionError("<stdin>", None, "expected a JSON object (the input of a Claude Code hook or status line)")
    if payload.get("hook_event_name") == PRE_COMPACT:
        return archive_before_compaction(payload, settings, archive)
    return HookOutcome(status_line(payload, settings))
