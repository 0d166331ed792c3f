"""What real transcripts tell about other tools' compactions (DESIGN §6 "Summary size per policy").

:func:`recorded_summary_tokens` measures the hand-over summaries that Claude Code, Codex and
converted sessions recorded (``Session.compaction_records``), in provider tokens, so that the
replay can charge each tool's policy the summary it really writes. The window evidence lives in
:mod:`dp_compact.measure.windows`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dp_compact.conversation import Message, Session

if TYPE_CHECKING:
    from dp_compact.settings import Settings

__all__ = ["recorded_summary_tokens"]


def recorded_summary_tokens(
    session: Session, tokenizer: str = "tiktoken", *, settings: Settings | None = None
) -> tuple[tuple[str, int], ...]:
    """Size of each hand-over summary the session records, in provider tokens.

    Each summary is counted as the user message it is sent as (:mod:`dp_compact.measure.tokens`: text
    tokens plus the per-message overhead), then scaled to the provider's tokens with the factor
    :func:`dp_compact.api.token_scale` gives for this session (measured from its usage records,
    else its provider family's calibrated factor), and rounded.

    Parameters
    ----------
    session : Session
        Its ``compaction_records`` hold the summaries; its live messages and usage give the scale.
    tokenizer : {"tiktoken", "bytes4"}
        How to count (``bytes4`` counts are never scaled).
    settings : Settings, optional
        Settings for the scale (``DP_TOKEN_RATIO``) and the tokenizer, replacing ``tokenizer``;
        default: the environment's ``DP_*`` settings with ``tokenizer``.

    Returns
    -------
    tuple of (str, int)
        ``(tool, tokens)`` per recorded compaction with a non-empty summary, in file order;
        ``tool`` is ``"claude-code"``, ``"codex"`` or ``"other"``.

    Raises
    ------
    SettingsError
        If ``tokenizer`` (or a ``DP_*`` variable) is invalid.
    """
    from dp_compact.api import token_scale
    from dp_compact.settings import load_settings
    from dp_compact.measure.tokens import count_message_tokens

    records = [r for r in session.compaction_records if r.summary_text]
    if not records:
        return ()
    chosen = settings if settings is not None else load_settings(tokenizer=tokenizer)
    summaries = [Message(role="user", text=r.summary_text, source_bytes=len(r.summary_text.encode())) for r in records]
    counts = count_message_tokens(summaries, tokenizer=chosen.tokenizer)
    ratio, _ = token_scale(session, chosen, count_message_tokens(session.messages, tokenizer=chosen.tokenizer))
    scaled = np.rint(counts * ratio).astype(np.int64)
    return tuple((r.tool, int(n)) for r, n in zip(records, scaled.tolist(), strict=True))
