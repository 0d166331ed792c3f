"""The planner's shell: read a session file, count tokens, resolve prices, call :func:`plan`.

This is the IO edge of the library (files, the token cache); :mod:`dp_compact.core.planner` stays pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dp_compact.core.cuts import message_arrays
from dp_compact.errors import SettingsError, UnknownProfileError
from dp_compact.io import bulk_allocation
from dp_compact.measure.estimation import measured_token_ratio, session_prefix
from dp_compact.core.planner import Plan, plan
from dp_compact.pricing import Prices, base_model_name, get_prices
from dp_compact.sessions import read_session
from dp_compact.conversation import Session
from dp_compact.sessions.source import partial_line_note
from dp_compact.settings import Settings
from dp_compact.measure.tokens import (
    REFERENCED_DOCUMENT_TOKENS,
    TokenCache,
    count_message_tokens,
    message_token_parts,
    provider_family,
    referenced_documents,
    token_ratio,
)
from dp_compact.measure.windows import context_window, known_windows, largest_accepted_prompt, window_note

if TYPE_CHECKING:
    from dp_compact.replay.timeline import Timeline

__all__ = [
    "choose_prices",
    "curve_file",
    "curve_plans",
    "plan_file",
    "plan_session",
    "read_notes",
    "resolve_prices",
    "session_family",
    "session_tokens",
    "timeline_file",
    "token_scale",
]


def choose_prices(settings: Settings, session: Session | None = None) -> tuple[Prices, tuple[str, ...]]:
    """The prices and window in force, and notes on how they were chosen (DESIGN §3 precedence).

    The profile is ``settings.provider`` when given by a flag, ``DP_PROVIDER`` or ``.env``;
    otherwise the model the session records, when a profile or genai-prices knows it; otherwise
    the default profile. ``DP_P_*`` override the profile's prices. The window is
    :func:`dp_compact.measure.windows.context_window` of the session, the profile's window standing for
    the price database: ``DP_MAX_CONTEXT_TOKENS`` when given, else the session's evidence
    (recorded window, recorded auto-compaction, the tool's default, accepted prompts; DESIGN §6).
    Plan, curve, timeline, compact and replay all get their window here.

    Returns
    -------
    (Prices, tuple[str, ...])
        The prices, and one sentence per choice a user should know about; always one
        ``"context window N tokens: <source>"`` (:func:`~dp_compact.measure.windows.window_note`).

    Raises
    ------
    UnknownProfileError
        If an explicitly given provider is unknown.
    SettingsError
        If the cache-read price exceeds the input price; or (``DP_MAX_CONTEXT_TOKENS``) if the
        session's model is in no price list, no window is given or recorded, and its accepted
        prompts exceed every window known for it: the window is then unknown, and a guess
        would drive the forced rule (shared case 25).
    """
    notes: list[str] = []
    model = session.model if session is not None else None
    base: Prices | None = None
    unknown_model = False
    if not settings.explicit_provider() and model:
        try:
            base = get_prices(model)
            notes.append(f"prices of {base.name}, the model recorded in the session")
        except UnknownProfileError:
            base = _copy_of_known(model, notes)
            if base is None:
                notes.append(f"the session's model {model!r} has no known prices: using {settings.provider}")
                unknown_model = True
    if base is None:
        base = get_prices(settings.provider)
        if session is not None and not model and not settings.explicit_provider():
            notes.append(f"prices of {base.name}, the default provider: the session records no model (give yours with --provider or DP_PROVIDER)")
    if "assumed" in base.source:
        notes.append(f"{base.name}: {base.source}")
    overrides: dict[str, object] = {
        name: getattr(settings, name) for name in ("p_input", "p_cache", "p_out", "p_cache_write") if getattr(settings, name) is not None
    }
    window, source = context_window(session, base.max_context_tokens, explicit=settings.max_context_tokens, database_name=base.name,
                                    database_source=base.window_source or None)
    if unknown_model and settings.max_context_tokens is None and session is not None:
        _check_window_known(session, base, window)
    overrides.update(max_context_tokens=window, window_source=source)
    notes.append(window_note(window, source))
    prices = replace(base, **overrides)  # type: ignore[arg-type]
    if prices.p_cache > prices.p_input:
        raise SettingsError("DP_P_CACHE", prices.p_cache, f"a cache read must not cost more than input ({prices.p_input} $/MTok)")
    return prices, tuple(notes)


def _check_window_known(session: Session, fallback: Prices, window: int) -> None:
    """Raise when a model no price list has needs a window beyond every one known for it (see :func:`choose_prices`)."""
    if window in (*known_windows(session.model, fallback.max_context_tokens), session.context_window):
        return
    raise SettingsError("DP_MAX_CONTEXT_TOKENS", None, (
        f"the context window of {session.model!r} is unknown (no price list has the model) and the session's calls already"
        f" took prompts of {largest_accepted_prompt(session):,} tokens, more than the {fallback.max_context_tokens:,} of"
        f" {fallback.name}: give the window with DP_MAX_CONTEXT_TOKENS or --max-context-tokens"
    ))


def resolve_prices(settings: Settings, session_model: str | None = None) -> Prices:
    """The prices and window in force for ``session_model`` (see :func:`choose_prices`).

    Raises
    ------
    UnknownProfileError
        If an explicitly given provider is unknown.
    """
    stub = None if session_model is None else Session(path="", format="", messages=(), model=session_model)
    return choose_prices(settings, stub)[0]


def token_scale(
    session: Session, settings: Settings, counts: npt.NDArray[np.int64], image_tokens: npt.NDArray[np.int64] | None = None
) -> tuple[float, str]:
    """Provider tokens per counted token for ``session``, and where the factor comes from.

    ``DP_TOKEN_RATIO`` when set; else the ratio measured from the session's own usage records
    (:func:`~dp_compact.measure.estimation.measured_token_ratio`, images taken off when
    ``image_tokens`` gives them); else the one a summary of ours states was measured on the
    conversation it compacted (``Session.recorded_token_ratio``); else the calibrated factor of
    its provider family (:func:`~dp_compact.measure.tokens.token_ratio`, 1 for an unknown family).
    ``bytes4`` counts are the seed's and never scaled. The factor applies to text: images are in
    provider tokens.
    """
    if settings.tokenizer != "tiktoken":
        return 1.0, "none (bytes4)"
    if settings.token_ratio is not None:
        return settings.token_ratio, "setting"
    measured = measured_token_ratio(session, counts, image_tokens)
    if measured is not None:
        return measured, "measured"
    if session.recorded_token_ratio is not None:  # a compacted file: measured on the conversation it compacted
        return session.recorded_token_ratio, "recorded"
    family = session_family(session, settings)
    return token_ratio(family), f"family {family or 'unknown'}"


def session_family(session: Session, settings: Settings) -> str:
    """The provider family whose tokens ``session``'s messages are in: its recorded model's (or its
    format's, :func:`~dp_compact.measure.tokens.provider_family`); for a session that records no model,
    the family of the provider given (``--provider``, ``DP_PROVIDER``); else ``"unknown"``."""
    family = provider_family(session.model, session.format)
    if family == "unknown" and not session.model and settings.explicit_provider():
        family = provider_family(settings.provider)
    return family


def _token_parts(session: Session, settings: Settings, use_cache: bool) -> tuple[npt.NDArray[np.int64], float, str, int]:
    """Counted tokens per live message scaled by :func:`token_scale`, with the factor, its source
    and the documents given by reference (:func:`~dp_compact.measure.tokens.referenced_documents`).

    The images' tokens are priced by the session's provider (:func:`~dp_compact.measure.tokens.image_token_counts`)
    and left unscaled; the rest is scaled. With the cache, the session file's stored counts
    answer its unchanged messages (:class:`~dp_compact.measure.tokens.TokenCache`).
    """
    tiktoken = settings.tokenizer == "tiktoken"
    family = session_family(session, settings)
    if not tiktoken:
        counts = count_message_tokens(session.messages, tokenizer=settings.tokenizer)
        images, referenced = np.zeros(len(counts), dtype=np.int64), referenced_documents(session.messages)
    else:
        cache = TokenCache() if use_cache else None
        try:
            file = str(Path(session.path).resolve()) if session.path and Path(session.path).is_file() else None
            parts = message_token_parts(session.messages, cache=cache, family=family, file=file)
        finally:
            if cache is not None:
                cache.close()
        counts, images, referenced = parts.total, parts.images, parts.referenced
    ratio, source = token_scale(session, settings, counts, images)
    scaled = counts if ratio == 1.0 else np.rint((counts - images) * ratio).astype(np.int64) + images
    return scaled, ratio, source, referenced


def _scaled_tokens(session: Session, settings: Settings, use_cache: bool) -> tuple[npt.NDArray[np.int64], float, str]:
    """Counted tokens per live message scaled by :func:`token_scale`, with the factor and its source (:func:`_token_parts`)."""
    return _token_parts(session, settings, use_cache)[:3]


def session_tokens(session: Session, settings: Settings, *, use_cache: bool = True) -> npt.NDArray[np.int64]:
    """Tokens per live message, shape (N,): counted with the settings' tokenizer (persistent cache),
    then scaled to the provider's tokens by :func:`token_scale` and rounded.
    """
    return _scaled_tokens(session, settings, use_cache)[0]


def plan_session(session: Session, settings: Settings, *, use_cache: bool = True) -> Plan:
    """Plan an already read session (tokens counted here). Raises as :func:`resolve_prices`.

    The fixed prefix V (tokens) is the session's own, measured from its usage records, unless
    ``DP_V`` / ``--v`` is given or the records measure none that makes sense
    (:func:`~dp_compact.measure.estimation.fixed_prefix`; ``Plan.v_source``). The plan's notes say how
    prices, window, token scale and V were chosen and how the current context was obtained
    (:func:`~dp_compact.measure.estimation.current_context`), and name a half-written last line left out
    of the file (``Session.partial_line``).
    """
    with bulk_allocation():
        return _plan_session(session, settings, use_cache)


def _plan_session(session: Session, settings: Settings, use_cache: bool) -> Plan:
    """:func:`plan_session` without the collector's pause."""
    prices, notes = choose_prices(settings, session)
    message_tokens, ratio, source, referenced = _token_parts(session, settings, use_cache)
    notes = (*read_notes(session, referenced), *notes)
    if ratio != 1.0:
        notes = (*notes, f"message tokens scaled by {ratio:.3g} provider tokens per cl100k token ({source})")
    elif source.startswith("family "):  # nothing measured, recorded or calibrated: the counts stand unscaled
        family = source.removeprefix("family ")
        known = "no model is recorded, so no provider family is known" if family == "unknown" else f"no factor is calibrated for the {family} family"
        notes = (*notes, f"message tokens are cl100k counts, unscaled: no token ratio could be measured from usage records and {known} (set --token-ratio to scale them)")
    settings, v_source, v_note = session_prefix(session, settings, message_tokens, prices.max_context_tokens)
    notes = (*notes, v_note)
    result = plan(session, message_tokens, settings, prices, arrays=message_arrays(session.messages))
    return replace(result, notes=notes + result.notes, v_source=v_source)


def read_notes(session: Session, referenced: int | None = None) -> tuple[str, ...]:
    """What reading left out that a user should know: a half-written last line (``Session.partial_line``),
    and documents given by reference, whose size is estimated (:func:`~dp_compact.measure.tokens.referenced_documents`;
    ``referenced`` when already counted)."""
    notes = () if session.partial_line is None else (partial_line_note(session.path, session.partial_line),)
    referenced = referenced_documents(session.messages) if referenced is None else referenced
    if referenced:
        notes += (f"{referenced} document(s) given by URL or file id cannot be read here: each one's size is estimated"
                  f" at {REFERENCED_DOCUMENT_TOKENS:,} tokens, one page of the provider's per-page PDF estimate"
                  " (text and page image; more pages cost more)",)
    return notes


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
    with bulk_allocation():  # one pause for reading and planning; the session is freed before the collector resumes
        session = read_session(path, lenient=lenient, stats=stats, raw_json=True)
        result = plan_session(session, settings, use_cache=use_cache)
        del session
    return result


def _copy_of_known(model: str, notes: list[str]) -> Prices | None:
    """Prices of the model that ``model`` is a copy or dated snapshot of (``gpt-5.3-codex-bak``), with a note; else None."""
    base_name = base_model_name(model)
    if base_name is None:
        return None
    try:
        base = get_prices(base_name)
    except UnknownProfileError:
        return None
    notes.append(f"prices of {base.name}: the session's model {model!r} is read as {base_name!r} (its suffix names no other model)")
    return base


def curve_plans(
    session: Session, message_tokens: npt.NDArray[np.int64], base: Settings, *,
    providers: Sequence[str | None] = (None,), models: Sequence[str] = ("recall",),
) -> list[Plan]:
    """Plan ``session`` under every provider × cost model (the curves to overlay).

    Parameters
    ----------
    session : Session
    message_tokens : ndarray[int64], shape (N,)
        Tokens per message, counted once for every plan.
    base : Settings
        Settings the others start from; ``providers`` and ``models`` replace its profile and model.
    providers : sequence of str or None
        Profiles (None: the one ``base`` and the session give).
    models : sequence of {"recall", "seed"}

    Returns
    -------
    list of Plan
        One per provider × model; each plan's ``notes`` start with how its prices and window
        were chosen (:func:`choose_prices`).

    Raises
    ------
    UnknownProfileError
        If a provider is unknown.
    """
    from dp_compact.settings import load_settings

    arrays = message_arrays(session.messages)
    flags = base.model_dump(exclude_unset=True)
    plans = []
    for provider in providers:
        for model in models:
            settings = load_settings(**{**flags, "model": model, **({"provider": provider} if provider else {})})
            prices, notes = choose_prices(settings, session)
            result = plan(session, message_tokens, settings, prices, arrays=arrays)
            plans.append(replace(result, notes=notes + result.notes))
    return plans


def curve_file(
    path: Path | str, settings: Settings, *, providers: Sequence[str] = (), models: Sequence[str] = (),
    lenient: bool = False, use_cache: bool = True,
) -> tuple[list[Plan], tuple[str, ...]]:
    """Read ``path`` and plan it per provider × cost model: the data of ``dp-compact curve``.

    ``models`` are planned besides ``settings.model``; with no ``providers``, the profile the
    settings and the session give.

    Returns
    -------
    (list of Plan, tuple of str)
        The plans (:func:`curve_plans`) and the reading notes (:func:`read_notes`).

    Raises
    ------
    SessionError, UnknownProfileError
        Unreadable session or unknown provider.
    """
    with bulk_allocation():  # as plan_file
        session = read_session(path, lenient=lenient, raw_json=True)
        tokens = session_tokens(session, settings, use_cache=use_cache)
        every_model = list(dict.fromkeys([settings.model, *models]))
        plans = curve_plans(session, tokens, settings, providers=list(providers) or [None], models=every_model)
        notes = read_notes(session)
        del session
    return plans, notes


def timeline_file(path: Path | str, settings: Settings, *, lenient: bool = False, use_cache: bool = True) -> tuple[Timeline, tuple[str, ...]]:
    """Read ``path``'s history and plan it at every LLM call: the data of ``dp-compact timeline``.

    Returns
    -------
    (Timeline, tuple of str)
        :func:`dp_compact.replay.timeline.timeline` of the file, and the notes: reading (:func:`read_notes`
        of its live segment), then why the line of the advice taken is not drawn, if it is not.

    Raises
    ------
    SessionError, UnknownProfileError
        Unreadable session or unknown provider.
    """
    from dp_compact.calibration.history import read_history
    from dp_compact.replay.timeline import timeline

    history = read_history(path, lenient=lenient)
    line = timeline(history, settings, use_cache=use_cache)
    return line, read_notes(history.segments[-1]) + ((line.followed_note,) if line.followed_note else ())
