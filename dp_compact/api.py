"""The planner's shell: read a session file, count tokens, resolve prices, call :func:`plan`.

This is the IO edge of the library (files, the token cache); :mod:`dp_compact.planner` stays pure.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from dp_compact.cuts import message_arrays
from dp_compact.errors import UnknownProfileError
from dp_compact.planner import Plan, plan
from dp_compact.pricing import Prices, get_prices
from dp_compact.sessions import read_session
from dp_compact.sessions.model import Session
from dp_compact.settings import Settings
from dp_compact.tokens import TokenCache, count_message_tokens

__all__ = ["plan_file", "plan_session", "resolve_prices", "session_tokens"]


def resolve_prices(settings: Settings, session_model: str | None = None) -> Prices:
    """The prices and window in force (DESIGN §3 precedence).

    The profile is ``settings.provider`` when given by a flag, ``DP_PROVIDER`` or ``.env``;
    otherwise the model the session records, when a profile or genai-prices knows it; otherwise
    the default profile. ``DP_P_*`` and ``DP_MAX_CONTEXT_TOKENS`` then override its numbers.

    Raises
    ------
    UnknownProfileError
        If an explicitly given provider is unknown.
    """
    base: Prices | None = None
    if not settings.explicit_provider() and session_model:
        try:
            base = get_prices(session_model)
        except UnknownProfileError:
            base = None
    if base is None:
        base = get_prices(settings.provider)
    overrides = {
        name: getattr(settings, name)
        for name in ("p_input", "p_cache", "p_out", "p_cache_write", "max_context_tokens")
        if getattr(settings, name) is not None
    }
    return replace(base, **overrides) if overrides else base


def session_tokens(session: Session, settings: Settings, *, use_cache: bool = True) -> npt.NDArray[np.int64]:
    """Tokens per live message, shape (N,), with the settings' tokenizer and the persistent cache."""
    cache = TokenCache() if use_cache and settings.tokenizer == "tiktoken" else None
    try:
        return count_message_tokens(session.messages, tokenizer=settings.tokenizer, cache=cache)
    finally:
        if cache is not None:
            cache.close()


def plan_session(session: Session, settings: Settings, *, use_cache: bool = True) -> Plan:
    """Plan an already read session (tokens counted here). Raises as :func:`resolve_prices`."""
    prices = resolve_prices(settings, session.model)
    message_tokens = session_tokens(session, settings, use_cache=use_cache)
    return plan(session, message_tokens, settings, prices, arrays=message_arrays(session.messages))


def plan_file(
    path: Path | str,
    settings: Settings,
    *,
    lenient: bool = False,
    stats: Path | str | None = None,
    use_cache: bool = True,
) -> Plan:
    """Read ``path`` (any supported format) and plan it.

    Parameters
    ----------
    path : Path or str
        The session file; never modified.
    settings : Settings
    lenient : bool
        Skip malformed lines instead of failing.
    stats : Path or str, optional
        The seed agent's ``stats.json``.
    use_cache : bool
        Use the persistent token cache (``--no-cache`` turns it off).

    Returns
    -------
    Plan

    Raises
    ------
    SessionError
        Unreadable, malformed (names file and line) or unknown-format input.
    UnknownProfileError
        Unknown provider.
    """
    session = read_session(path, lenient=lenient, stats=stats)
    return plan_session(session, settings, use_cache=use_cache)
