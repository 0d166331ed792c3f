"""Reassemble (DESIGN §5.7): summary message, acknowledgement when needed, untouched tail.

The output conversation is

1. (OpenAI) the system messages given, unchanged and in order: the session's instructions, not the
   markers of earlier compactions, which the pipeline archives with the head
   (:func:`dp_compact.pipeline.split.split_system`);
2. one user message whose text holds the sections ``[summary]`` (intro and summary body),
   ``[anchors]`` (one line per anchor, when there are any) and ``[archive]`` (the reference);
3. one assistant acknowledgement, only when the tail opens with a user message: after an
   assistant-led tail the summary user message already alternates;
4. the tail in the target API's shape (:func:`dp_compact.pipeline.convert.to_api`): the same
   dicts as read when the shape matches, so Anthropic tool results stay in one user message.

Marker and acknowledgement texts come from ``prompts.toml``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dp_compact.pipeline.convert import system_messages_for, to_api
from dp_compact.pipeline.texts import texts
from dp_compact.pipeline.types import Anchor, Api
from dp_compact.conversation import Message

__all__ = ["acknowledgement_message", "reassemble", "summary_message_text"]


def summary_message_text(
    summary: str, anchors: Sequence[Anchor], archive_ref: str | None, *, n_messages: int, head_tokens: int, user_turns: int = 0,
    llm_calls: int = 0, compaction: int = 1, kept_messages: int | None = None, model: str | None = None,
    window: int | None = None, avg_tokens: float | None = None, token_ratio: float | None = None,
    prefix_tokens: int | None = None, write_1h_share: float | None = None,
) -> str:
    """Text of the summary user message: ``[summary]``, ``[anchors]`` and ``[archive]`` sections.

    Parameters
    ----------
    summary : str
        The summary body (labelled sections) from a summarizer.
    anchors : sequence of Anchor
        Rendered one per line; the section is left out when there are none.
    archive_ref : str or None
        ``archive://<session>/<id>``, or None when the head was not archived.
    n_messages, head_tokens : int
        Size of the head (messages; tokens), stated in the intro line.
    user_turns, llm_calls : int
        User turns and LLM calls the head held, earlier summaries' included, and ``compaction``
        the number of this compaction in the session: stated in the intro line, where the
        session readers count them back (:func:`dp_compact.conversation.summary_counts`), so
        that t, L and c of DESIGN §2 survive compaction.
    kept_messages : int, optional
        Messages written after the summary (the tail, and the acknowledgement when there is one),
        stated so that a planner asked again before anything is added knows it
        (``Session.messages_since_compaction``); None leaves it out.
    model, window : str or None, int or None
        The model and context window (tokens) the conversation ran with, stated so that the
        compacted file is planned with the same prices and window (the readers take them back
        when the file records none); None leaves them out.
    avg_tokens, token_ratio : float or None
        The usage evidence the conversation was planned with: avg of DESIGN §2 (mean prompt
        tokens per call, from its usage records) and the provider tokens per cl100k token
        measured on it, stated so that the compacted file, which has no usage records, is
        planned with the same avg and token scale (``Session.recorded_avg_tokens``,
        ``Session.recorded_token_ratio``); None leaves them out.
    prefix_tokens : int or None
        The fixed prefix V (tokens) measured from the conversation's usage records, stated so that
        the compacted file is planned with the same V (``Session.recorded_prefix_tokens``); None
        leaves it out.
    write_1h_share : float or None
        The share of the conversation's cache writes made as 1-hour entries (its usage records),
        stated so that the compacted file is priced with the same write lifetime
        (``Session.recorded_write_1h_share``); None or 0 leaves it out (5-minute entries, the default).

    Examples
    --------
    >>> print(summary_message_text("User goals:\\n- fix it", (), None, n_messages=3, head_tokens=120).splitlines()[0])
    [summary]
    """
    t = texts()
    kept = "" if kept_messages is None else t.kept.format(kept_messages=kept_messages)
    recorded = ("" if not model else t.recorded_model.format(model=model)) + (
        "" if not window else t.recorded_window.format(window=f"{window:,}")) + (
        "" if not avg_tokens else t.recorded_avg.format(avg=f"{round(avg_tokens):,}")) + (
        "" if not token_ratio else t.recorded_ratio.format(ratio=f"{token_ratio:.4f}")) + (
        "" if not prefix_tokens else t.recorded_prefix.format(prefix=f"{prefix_tokens:,}")) + (
        "" if not write_1h_share else t.recorded_writes.format(share=f"{100 * write_1h_share:.0f}"))
    parts = [t.marker, t.intro.format(
        n_messages=n_messages, user_turns=user_turns, llm_calls=llm_calls, head_tokens=f"{head_tokens:,}", compaction=compaction,
        kept=kept, recorded=recorded,
    ), "", summary.strip()]
    if anchors:
        parts += ["", t.anchors_marker, *(a.render() for a in anchors)]
    parts += ["", t.archive_marker, t.archive_line.format(ref=archive_ref) if archive_ref else t.no_archive_line]
    return "\n".join(parts)


def acknowledgement_message() -> dict[str, Any]:
    """The assistant acknowledgement that follows the summary before a user-led tail."""
    return {"role": "assistant", "content": texts().acknowledgement}


def reassemble(
    summary_text: str,
    tail: Sequence[Message],
    api: Api,
    *,
    system_raw: Sequence[Any] = (),
    system_text: str = "",
) -> list[dict[str, Any]]:
    """The compacted conversation as dicts in ``api``'s shape (module docstring for the layout).

    Parameters
    ----------
    summary_text : str
        Full text of the summary message (:func:`summary_message_text`).
    tail : sequence of Message
        The kept messages, ``messages[cut:]``, non-empty.
    api : {"anthropic", "openai"}
    system_raw : sequence of dict
        The raw system/developer messages to write first for OpenAI (the session's, less the
        markers of earlier compactions: :func:`dp_compact.pipeline.split.split_system`).
    system_text : str
        Used for an OpenAI system message when the reader kept no raw system message.

    Returns
    -------
    list of dict
        One JSONL line each; the tail's dicts are the objects read when already in shape.

    Raises
    ------
    ValueError
        If ``tail`` is empty.
    """
    if not tail:
        raise ValueError("the tail is empty: a compaction keeps at least one message")
    summary = {"role": "user", "content": summary_text}
    kept = to_api(tail, api, issued=[summary])
    ack = [acknowledgement_message()] if kept[0].get("role") == "user" else []
    return [*system_messages_for(system_raw, system_text, api), summary, *ack, *kept]
