"""A live conversation, held by an agent framework, as a :class:`~dp_compact.conversation.Session`.

Every adapter does the same three things before a model call: turn the framework's messages
into chat-completions dicts (its own converter), read them with the session reader of that
format (:mod:`dp_compact.sessions.openai_chat`: user turns, our earlier summaries, c and the
counts a summary carries), and hand the session to :func:`dp_compact.pipeline.compact.compact_session`,
which plans (DESIGN §2, §7) and, when the plan says so, runs the pipeline (DESIGN §5) with the
archive. Nothing here decides anything: this module only builds the inputs.

Pure: no files, environment or clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from dp_compact.sessions import openai_chat
from dp_compact.sessions.common import dumps
from dp_compact.conversation import Session, Usage
from dp_compact.sessions.source import Record, Source

__all__ = ["LiveCompactor", "ModelFacts", "live_session", "output_pairs"]

@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What the framework knows about the model it calls.

    ``name`` is the model id (prices come from its profile or genai-prices, DESIGN §3, unless
    ``DP_PROVIDER`` or ``provider=`` names one); ``window`` is its context window in tokens, taken
    as the window the session records (``DP_MAX_CONTEXT_TOKENS`` still wins, DESIGN §6).
    """

    name: str | None = None
    window: int | None = None


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
        tokens; None for every other message and for records older than the last compaction
        (they measured a prompt that no longer exists). ``Usage.line`` is set here.
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


class LiveCompactor:
    """What every framework adapter keeps: settings, archive, summarizer, and the plans and
    compactions made so far; :meth:`compact` runs the pipeline on a live session.

    Parameters
    ----------
    archive : ArchiveStore, None or "default"
        Where compacted heads go; "default" is the settings' archive folder (``DP_ARCHIVE_DIR``,
        else the user data directory); None archives nothing.
    summarizer : callable, optional
        Default: the offline extractive summarizer.
    **settings
        Any ``DP_*`` setting by its field name (DESIGN §3).

    Raises
    ------
    SettingsError
        An invalid setting.
    """

    def __init__(self, *, archive: Any = "default", summarizer: Any = None, **settings: Any) -> None:
        from dp_compact.settings import load_settings

        self.settings = load_settings(**settings)
        if archive == "default":
            from dp_compact.pipeline.archive import ArchiveStore

            archive = ArchiveStore(self.settings.archive_dir)
        self.archive = archive
        self.summarizer = summarizer
        self.plans: list[Any] = []
        self.compactions: list[Any] = []

    def compact(self, session: Session) -> Any:
        """The :class:`~dp_compact.pipeline.compact.CompactionResult` when the plan compacts
        ``session`` (as an OpenAI chat conversation), else None; a failed summary leaves the
        conversation untouched (DESIGN §5) and is logged."""
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
