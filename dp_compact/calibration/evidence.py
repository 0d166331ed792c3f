"""What real transcripts tell about other tools' compactions (DESIGN §6 "Summary size per policy").

:func:`recorded_summary_tokens` measures the hand-over summaries that Claude Code, Codex and
converted sessions recorded (``Session.compaction_records``), in provider tokens, so that the
replay can charge each tool's policy the summary it really writes. The window evidence lives in
:mod:`dp_compact.measure.windows`.
"""

from __future__ import annotations

import numpy as np

from dp_compact.conversation import Message, Session
from dp_compact.measure.tokens import count_message_tokens
from dp_compact.prepare import PreparedSession, prepare_tokens
from dp_compact.settings import Settings

__all__ = ["recorded_summary_tokens"]


def recorded_summary_tokens(
    session: Session | PreparedSession, settings: Settings | None = None, *, use_cache: bool = False
) -> tuple[tuple[str, int], ...]:
    """Size of each hand-over summary the session records, in provider tokens.

    Each summary is counted as the user message it is sent as (:mod:`dp_compact.measure.tokens`: text
    tokens plus the per-message overhead), then scaled to the provider's tokens by the session's
    token scale as :mod:`dp_compact.prepare` prepares it (:attr:`~dp_compact.prepare.PreparedSession.token_ratio`:
    ``DP_TOKEN_RATIO``, else measured from its usage records, else its provider family's
    calibrated factor), and rounded.

    Parameters
    ----------
    session : Session or PreparedSession
        Its ``compaction_records`` hold the summaries; its messages and usage give the scale. A
        prepared session gives its scale as prepared.
    settings : Settings, optional
        With a :class:`Session`, required: the tokenizer and ``DP_TOKEN_RATIO`` as the caller
        gave them (the environment is not read here). Not used with a prepared session.
    use_cache : bool
        With a :class:`Session`: count its messages with the persistent token cache.

    Returns
    -------
    tuple of (str, int)
        ``(tool, tokens)`` per recorded compaction with a non-empty summary, in file order;
        ``tool`` is ``"claude-code"``, ``"codex"`` or ``"other"``.

    Raises
    ------
    TypeError
        A :class:`Session` without ``settings``.
    """
    if isinstance(session, PreparedSession):
        settings, ratio, session = session.settings, session.token_ratio, session.session
    elif settings is None:
        raise TypeError("recorded_summary_tokens of a Session needs its settings")
    else:
        ratio = None
    records = [r for r in session.compaction_records if r.summary_text]
    if not records:
        return ()
    if ratio is None:
        ratio = prepare_tokens(session, settings, use_cache=use_cache).token_ratio
    summaries = [Message(role="user", text=r.summary_text, source_bytes=len(r.summary_text.encode())) for r in records]
    counts = count_message_tokens(summaries, tokenizer=settings.tokenizer)
    scaled = np.rint(counts * ratio).astype(np.int64)
    return tuple((r.tool, int(n)) for r, n in zip(records, scaled.tolist(), strict=True))
