"""One prepared session, from which every command starts (plan, curve, timeline, compact, shrink, replay).

:func:`prepare` turns a read :class:`~dp_compact.conversation.Session` and the user's
:class:`~dp_compact.settings.Settings` into one immutable :class:`PreparedSession`: the prices and
window in force and where they come from (:func:`choose_prices`), the usage records placed on the
messages once (:func:`~dp_compact.measure.estimation.place_calls`), the tokens of every message on
the provider's scale and where that scale comes from (:func:`token_scale`), the fixed prefix V and
its source (:func:`~dp_compact.measure.estimation.fixed_prefix`), and every note a user should
read about them. The settings are never changed: V lives on the prepared value, and the planner,
the pipeline and the replay take it from there.

Preparation reads no file but the token cache (``use_cache``); reading a session is
:mod:`dp_compact.sessions`, and the file entry points are :mod:`dp_compact.api`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from datetime import UTC, date, datetime
from functools import lru_cache

import numpy as np
import numpy.typing as npt

from dp_compact.conversation import Session, first_call_day, recorded_history
from dp_compact.core.cuts import message_arrays
from dp_compact.core.planner import Plan, plan
from dp_compact.core.hits import FULL_HITS, HitShare, hit_share_from_usage
from dp_compact.core.timing import RECENT_GAPS, IdleHazard, Timing, session_call_seconds
from dp_compact.errors import SettingsError, UnknownProfileError
from dp_compact.measure.columns import usage_columns
from dp_compact._fast import keep_newest
from dp_compact.measure.estimation import (
    CallPlacement,
    Estimates,
    estimate,
    fixed_prefix,
    measured_prefix,
    measured_token_ratio,
    place_calls,
)
from dp_compact.measure.tokens import (
    REFERENCED_DOCUMENT_TOKENS,
    TokenCache,
    TokenParts,
    count_message_tokens,
    message_token_parts,
    provider_family,
    referenced_documents,
    token_ratio,
)
from dp_compact.measure.windows import (
    context_window,
    known_windows,
    largest_accepted_prompt,
    window_note,
)
from dp_compact.pricing import Prices, base_model_name, get_prices
from dp_compact.sessions.source import partial_line_note
from dp_compact.settings import Settings

__all__ = [
    "TRANSCRIPT_NOW",
    "PreparedSession",
    "PreparedTokens",
    "choose_prices",
    "plan_hit_share",
    "plan_prepared",
    "last_record_seconds",
    "plan_timing",
    "prepare",
    "prepare_counted",
    "prepare_tokens",
    "read_notes",
    "reprice",
    "resolve_prices",
    "session_family",
    "session_tokens",
    "token_scale",
    "token_scale_note",
]


#: Sources of a token ratio or V that come from the session's own records (not a setting or a default).
_EVIDENCED = ("measured", "recorded")


@dataclass(frozen=True, slots=True, eq=False)
class PreparedSession:
    """A session ready to be planned, compacted or replayed (:func:`prepare`); immutable.

    Attributes
    ----------
    session : Session
        The session prepared: as read (its live conversation), or, prepared ``history=True``,
        the same session with its recorded history as its messages
        (:func:`~dp_compact.conversation.recorded_history`, what the replay appends).
    settings : Settings
        The settings as the user gave them, unchanged (V is :attr:`v_tokens`, not ``settings.v``).
    prices : Prices
        $/MTok, and the window M in ``max_context_tokens`` with its source in ``window_source``.
    price_notes : tuple[str, ...]
        How prices and window were chosen (:func:`choose_prices`); always one window note.
    message_tokens : ndarray[int64], shape (N,)
        Tokens per message of ``session.messages`` on the provider's scale (counted with the
        settings' tokenizer, scaled by :attr:`token_ratio`, images as the provider prices them). Read-only.
    token_ratio : float
        Provider tokens per counted token applied to the text (1.0 unscaled).
    token_ratio_source : str
        Where it comes from (:func:`token_scale`): ``"setting"``, ``"measured"``, ``"recorded"``,
        ``"family <name>"``, ``"none (bytes4)"``, or ``"given"`` (tokens counted by the caller).
    referenced_documents : int
        Documents given by URL or file id, each estimated (:func:`~dp_compact.measure.tokens.referenced_documents`).
    placement : CallPlacement
        The usage records placed on the messages, once (:func:`~dp_compact.measure.estimation.place_calls`).
    measured_v : int or None
        The fixed prefix the usage records measure, tokens (:func:`~dp_compact.measure.estimation.measured_prefix`);
        None when they measure none.
    v_tokens : int
        V, the fixed prefix every call sends, tokens (:func:`~dp_compact.measure.estimation.fixed_prefix`).
    v_source : {"setting", "measured", "recorded", "default"}
        Where V comes from (:data:`~dp_compact.measure.estimation.V_SOURCES`).
    history : bool
        True when prepared over the recorded history (the replay's view).
    reading_notes, token_notes : tuple[str, ...]
        What reading left out (:func:`read_notes`); how the message tokens were scaled
        (:func:`token_scale_note`, empty when there is nothing to say).
    v_note : str
        Where V comes from, one sentence.
    """

    session: Session
    settings: Settings
    prices: Prices
    price_notes: tuple[str, ...]
    message_tokens: npt.NDArray[np.int64]
    token_ratio: float
    token_ratio_source: str
    referenced_documents: int
    placement: CallPlacement
    measured_v: int | None
    v_tokens: int
    v_source: str
    history: bool
    reading_notes: tuple[str, ...]
    token_notes: tuple[str, ...]
    v_note: str

    def __post_init__(self) -> None:
        self.message_tokens.setflags(write=False)

    @property
    def window_tokens(self) -> int:
        """M, the context window, tokens."""
        return self.prices.max_context_tokens

    @property
    def window_source(self) -> str:
        """Where M comes from (:func:`~dp_compact.measure.windows.context_window`)."""
        return self.prices.window_source

    @property
    def notes(self) -> tuple[str, ...]:
        """Every note, in the order commands print them: reading, prices and window, token scale, V."""
        return (*self.reading_notes, *self.price_notes, *self.token_notes, self.v_note)

    @property
    def evidenced_token_ratio(self) -> float | None:
        """The token ratio when the session's own records give it (measured, or stated by an
        earlier summary of ours), else None: what a compaction's summary may state for the next plan."""
        return self.token_ratio if self.token_ratio_source in _EVIDENCED else None

    @property
    def evidenced_v_tokens(self) -> int | None:
        """V, tokens, when the session's own records give it (as :attr:`evidenced_token_ratio`), else None."""
        return self.v_tokens if self.v_source in _EVIDENCED else None

    def estimates(self) -> Estimates:
        """E, L, R, avg and c of the prepared session (:func:`~dp_compact.measure.estimation.estimate`)
        with its tokens, V and placement."""
        return estimate(self.session, self.settings, total_tokens=int(self.message_tokens.sum()),
                        message_tokens=self.message_tokens, v_tokens=self.v_tokens, placement=self.placement)


@dataclass(frozen=True, slots=True, eq=False)
class PreparedTokens:
    """The token part of a preparation (:func:`prepare_tokens`), for what needs no prices (calibration).

    Attributes
    ----------
    message_tokens : ndarray[int64], shape (N,)
        Tokens per message on the provider's scale, read-only (:attr:`PreparedSession.message_tokens`).
    token_ratio : float
        Provider tokens per counted token applied to the text.
    token_ratio_source : str
        Where it comes from (:func:`token_scale`).
    referenced_documents : int
        Documents given by URL or file id, each estimated.
    placement : CallPlacement
        The usage records placed on the messages, once.
    """

    message_tokens: npt.NDArray[np.int64]
    token_ratio: float
    token_ratio_source: str
    referenced_documents: int
    placement: CallPlacement

    def __post_init__(self) -> None:
        self.message_tokens.setflags(write=False)


def prepare_tokens(session: Session, settings: Settings, *, use_cache: bool = True) -> PreparedTokens:
    """Place ``session``'s usage records on its messages and count its messages' tokens on the
    provider's scale (:func:`token_scale`): the part of :func:`prepare` that needs no prices.

    Parameters
    ----------
    session : Session
        Messages (with their source lines) and usage records.
    settings : Settings
        The tokenizer, ``DP_TOKEN_RATIO`` and the provider given (a model-less session's family).
    use_cache : bool
        Use the persistent token cache.

    Returns
    -------
    PreparedTokens
    """
    placement = place_calls(session)
    tokens, ratio, source, referenced = _scaled_token_parts(session, settings, use_cache, placement)
    return PreparedTokens(tokens, ratio, source, referenced, placement)


def prepare(
    session: Session, settings: Settings, *, use_cache: bool = True, prices: Prices | None = None,
    history: bool = False, v_call: str | None = None, message_tokens: npt.NDArray[np.int64] | None = None,
) -> PreparedSession:
    """Prepare ``session`` under ``settings``: prices, window, tokens, token scale, V, placement, notes.

    Parameters
    ----------
    session : Session
        As read (:func:`~dp_compact.sessions.read_session`); never changed.
    settings : Settings
        As the user gave them; never changed.
    use_cache : bool
        Use the persistent token cache (``--no-cache`` turns it off).
    prices : Prices, optional
        Prices and window already chosen (the timeline chooses them once from every call of the
        file); their notes are then left out. Default: :func:`choose_prices` of ``session``.
    history : bool
        Prepare the recorded history (:func:`~dp_compact.conversation.recorded_history`: what the
        replay appends) instead of the live conversation; V is then measured from the first
        recorded call.
    v_call : str, optional
        How the V note names the call that measures it; default: "the first recorded call", or
        "the first call since the last compaction" for a live conversation that starts after one.
    message_tokens : ndarray[int64], shape (N,), optional
        Tokens per message the caller counted already, on the provider's scale: taken as they
        are (``token_ratio`` 1, source ``"given"``), not counted again.

    Returns
    -------
    PreparedSession

    Raises
    ------
    UnknownProfileError, SettingsError
        As :func:`choose_prices`.
    ValueError
        If ``message_tokens`` does not have one count per message.
    """
    price_notes: tuple[str, ...] = ()
    if prices is None:
        prices, price_notes = choose_prices(settings, session)
    view = replace(session, messages=recorded_history(session)) if history else session
    if message_tokens is None:
        counted = prepare_tokens(view, settings, use_cache=use_cache)
        placement, tokens, ratio, source = counted.placement, counted.message_tokens, counted.token_ratio, counted.token_ratio_source
        referenced = counted.referenced_documents
    else:
        placement, tokens, ratio, source = place_calls(view), np.array(message_tokens, dtype=np.int64), 1.0, "given"
        referenced = referenced_documents(view.messages)
        if tokens.shape != (len(view.messages),):
            raise ValueError(f"message_tokens must have shape ({len(view.messages)},), not {tokens.shape}")
    measured = measured_prefix(view, tokens, placement)
    v_tokens, v_source, v_note = _prefix(settings, measured, prices, view, history, v_call)
    return PreparedSession(
        session=view, settings=settings, prices=prices, price_notes=price_notes, message_tokens=tokens, token_ratio=ratio,
        token_ratio_source=source, referenced_documents=referenced, placement=placement, measured_v=measured,
        v_tokens=v_tokens, v_source=v_source, history=history, reading_notes=read_notes(session, referenced),
        token_notes=token_scale_note(ratio, source), v_note=v_note,
    )


def prepare_counted(session: Session, settings: Settings, parts: TokenParts) -> PreparedSession:
    """:func:`prepare` of a live ``session`` whose messages the caller counted already, by part
    (:func:`~dp_compact.measure.tokens.message_token_parts`, one row per message of ``session.messages``):
    the same prepared session, with the tokens scaled by :func:`token_scale` as :func:`prepare` scales
    them, and nothing counted or scanned again (the adapters keep the parts per message, so that a
    call costs work in proportion to what was appended). Raises as :func:`prepare`; ValueError if
    ``parts`` does not have one row per message."""
    if parts.text.shape != (len(session.messages),):
        raise ValueError(f"parts must have one row per message ({len(session.messages)}), not {parts.text.shape}")
    if settings.tokenizer != "tiktoken":
        raise ValueError("prepare_counted takes tiktoken counts; prepare() counts bytes4 itself")
    prices, price_notes = choose_prices(settings, session)
    placement = place_calls(session)
    counts = parts.total
    ratio, source = token_scale(session, settings, counts, parts.images, placement=placement)
    tokens = counts if ratio == 1.0 else np.rint((counts - parts.images) * ratio).astype(np.int64) + parts.images
    tokens = np.array(tokens, dtype=np.int64)
    measured = measured_prefix(session, tokens, placement)
    v_tokens, v_source, v_note = _prefix(settings, measured, prices, session, False)
    return PreparedSession(
        session=session, settings=settings, prices=prices, price_notes=price_notes, message_tokens=tokens, token_ratio=ratio,
        token_ratio_source=source, referenced_documents=parts.referenced, placement=placement, measured_v=measured,
        v_tokens=v_tokens, v_source=v_source, history=False, reading_notes=read_notes(session, parts.referenced),
        token_notes=token_scale_note(ratio, source), v_note=v_note,
    )


def _prefix(settings: Settings, measured: int | None, prices: Prices, session: Session, history: bool,
            v_call: str | None = None) -> tuple[int, str, str]:
    """V, its source and its note for ``prices``' window (:func:`~dp_compact.measure.estimation.fixed_prefix`);
    the note names the measuring call as ``v_call``, or "the first call since the last compaction"
    for a live conversation that starts after one, else "the first recorded call"."""
    since = not history and len(session.history) > len(session.messages)
    call = v_call or ("the first call since the last compaction" if since else "the first recorded call")
    return fixed_prefix(settings, measured, prices.max_context_tokens, call=call, recorded=session.recorded_prefix_tokens)


def reprice(prepared: PreparedSession, settings: Settings) -> PreparedSession:
    """``prepared`` under other settings (``curve``'s providers and cost models): the prices, window
    and notes :func:`choose_prices` gives for them, and V by the same rule for the new window and
    settings; the messages, their tokens and scale, and the placement stay as prepared.

    Raises
    ------
    UnknownProfileError, SettingsError
        As :func:`choose_prices`.
    """
    prices, price_notes = choose_prices(settings, prepared.session)
    v_tokens, v_source, v_note = _prefix(settings, prepared.measured_v, prices, prepared.session, prepared.history)
    return replace(prepared, settings=settings, prices=prices, price_notes=price_notes, v_tokens=v_tokens, v_source=v_source,
                   v_note=v_note)


#: Bytes read from the end of a file to find its last record's time (a few records of a transcript).
LAST_RECORD_BYTES = 1 << 16


#: How a plan names "now" taken from the transcript (:func:`last_record_seconds`).
TRANSCRIPT_NOW = "transcript (its last record)"


def last_record_seconds(path: Path | str) -> float | None:
    """Epoch seconds of the last record of a JSONL transcript that states a time (a top-level
    ``timestamp``: ISO 8601 text or epoch seconds / milliseconds, as Claude Code and Codex write
    every line), read from its last :data:`LAST_RECORD_BYTES`; None when none does (or the file is
    one JSON document, or not local)."""
    import json
    import math

    from dp_compact.core.timing import parse_instant

    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(size - LAST_RECORD_BYTES, 0))
            lines = handle.read().splitlines()
    except (OSError, TypeError, ValueError):
        return None
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "timestamp" in record:
            try:
                seconds = parse_instant(record["timestamp"])
            except ValueError:
                continue
            if math.isfinite(seconds):
                return seconds
    return None


def plan_timing(session: Session, now_s: float | None = None, source: str = "transcript", *,
                hazard: IdleHazard | None = None, imminent: bool = False) -> Timing:
    """What the plan knows of time (DESIGN §8): the seconds from the session's last recorded call
    (``Session.call_times``) to ``now_s`` (epoch seconds; None: the last call itself, so the
    silence is 0), never below 0; a session without times gives an unknown silence (a timeless
    plan). ``source`` names where "now" comes from; ``hazard`` None: the shipped one; ``imminent``:
    ``Timing.imminent`` (an adapter's call is made right after its plan)."""
    times = session_call_seconds(session)
    known = times[np.isfinite(times)]
    if known.size == 0:
        return Timing(None, hazard=hazard, source=source, imminent=imminent)
    last = float(known.max())
    gaps = tuple((known[1:] - known[:-1])[-RECENT_GAPS:].tolist())  # known: shape (K,)
    return Timing(max((last if now_s is None else float(now_s)) - last, 0.0), hazard=hazard, source=source, imminent=imminent,
                  recent_gaps_s=gaps)


def plan_prepared(prepared: PreparedSession, *, timing: Timing | None = None) -> Plan:
    """The plan of a prepared session (DESIGN §2, §7, §8): :func:`~dp_compact.core.planner.plan` with its
    tokens, prices, V and placement; its notes open with :attr:`PreparedSession.notes` and its
    ``v_source`` says where V comes from. ``timing``: the silence since the last call (DESIGN §8);
    default :func:`plan_timing` of the session at its file's last record (:func:`last_record_seconds`),
    else at its last recorded call. Raises as
    :func:`~dp_compact.core.planner.plan`."""
    session = prepared.session
    if timing is None:  # "now" is the transcript's last record, as `plan` takes it: plan, compact and curve agree
        now = last_record_seconds(session.path) if session.path else None
        timing = plan_timing(session, now, TRANSCRIPT_NOW if now is not None else "transcript")
    return plan(session, prepared.message_tokens, prepared.settings, prepared.prices, arrays=message_arrays(session.messages),
                v_tokens=prepared.v_tokens, placement=prepared.placement, timing=timing, cache_hit=plan_hit_share(prepared),
                lead_notes=prepared.notes, v_source=prepared.v_source)


def plan_hit_share(prepared: PreparedSession) -> HitShare:
    """The cache-hit share a plan prices (DESIGN §8): measured from the session's usage records
    (:func:`~dp_compact.core.hits.hit_share_from_usage`: recorded cache reads over what the cache
    held, the silences longer than the prices' TTL emptying it), as the replay measures it; 1
    without records of cache reads."""
    session = prepared.session
    if not session.usage:
        return FULL_HITS
    return hit_share_from_usage(session.usage, session_call_seconds(session), prepared.prices.cache_ttl_s)


#: The prices :func:`choose_prices` made from a profile lately, with the settings' price overrides and a window:
#: ``(base, settings, window, its source) -> (base, settings, prices)`` by the ids of the base prices and
#: settings (both held, so that an id names one object) and the window with its type. Prices and
#: settings are frozen, so the prices made are those ``replace`` makes again; an adapter's calls share them.
_WINDOWED: dict[tuple[Any, ...], tuple[Prices, Settings, Prices]] = {}
#: Entries of :data:`_WINDOWED` kept (an adapter plans with one model; a fleet run with a few).
WINDOWED_KEPT = 8


def _windowed(base: Prices, settings: Settings, overrides: dict[str, object], window: int, source: str) -> Prices:
    """``replace(base, **overrides)``, where ``overrides`` are the settings' prices with ``window`` and
    its ``source`` (:func:`choose_prices`): made once per base prices, settings and window."""
    key = (id(base), id(settings), type(window), window, source)
    kept = _WINDOWED.get(key)
    if kept is not None and kept[0] is base and kept[1] is settings:
        return kept[2]
    prices = replace(base, **overrides)  # type: ignore[arg-type]
    _WINDOWED[key] = (base, settings, prices)
    keep_newest(_WINDOWED, WINDOWED_KEPT)
    return prices


def choose_prices(settings: Settings, session: Session | None = None) -> tuple[Prices, tuple[str, ...]]:
    """The prices and window in force, and notes on how they were chosen (DESIGN §3 precedence).

    The profile is ``settings.provider`` when given by a flag, ``DP_PROVIDER`` or ``.env``;
    otherwise the model the session records, when a profile or genai-prices knows it; otherwise
    the default profile. ``DP_P_*`` override the profile's prices. The window is
    :func:`dp_compact.measure.windows.context_window` of the session, the profile's window standing for
    the price database: ``DP_MAX_CONTEXT_TOKENS`` when given, else the session's evidence
    (recorded window, recorded auto-compaction, the tool's default, accepted prompts; DESIGN §6).
    Every command gets its window here, through :func:`prepare`.

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
    day = _first_call_day(session) if session is not None else None
    if not settings.explicit_provider() and model:
        try:
            base = get_prices(model, day)
            notes.append(f"prices of {base.name}, the model recorded in the session" + (f", in force on {day.isoformat()}" if day and base.price_date else ""))
        except UnknownProfileError:
            base = _copy_of_known(model, notes, day)
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
    prices = _windowed(base, settings, overrides, window, source)
    share, share_note = write_lifetime_mix(session, prices)
    prices = prices.with_write_share(share)
    notes.extend(share_note)
    if prices.p_cache > prices.p_input:
        raise SettingsError("DP_P_CACHE", prices.p_cache, f"a cache read must not cost more than input ({prices.p_input} $/MTok)")
    return prices, tuple(notes)


def _first_call_day(session: Session) -> date | None:
    """:func:`~dp_compact.conversation.first_call_day` of ``session``, from its call times as
    :func:`~dp_compact.core.timing.session_call_seconds` reads them (once per time)."""
    try:
        seconds = session_call_seconds(session)
    except OverflowError:  # a number no float holds, maybe after the first known time: read them in order
        return first_call_day(session)
    if seconds.size and seconds[0] == seconds[0]:  # the first call's time is known (not NaN): no search
        first = seconds[0]
    else:
        known = (seconds == seconds).nonzero()[0]  # not NaN (seconds: 1-D)
        if known.size == 0:
            return None
        first = seconds[known[0]]
    try:
        return _utc_day(float(first))
    except (OverflowError, OSError, ValueError):  # a time no calendar holds: not evidence
        return None


@lru_cache(maxsize=64)
def _utc_day(seconds: float) -> date:
    """The UTC calendar day of epoch ``seconds`` (a float; once per time: a live conversation's first
    call stays its first). Raises as :meth:`datetime.fromtimestamp`."""
    return datetime.fromtimestamp(seconds, UTC).date()


def write_lifetime_mix(session: Session | None, prices: Prices) -> tuple[float, tuple[str, ...]]:
    """Share of cache writes made as 1-hour entries in ``session``'s usage, and a note (DESIGN §8).

    The recorded mix (Claude Code records ``cache_creation.ephemeral_1h_input_tokens`` per call:
    ``Usage.cache_write_1h_tokens``) when the session records cache writes; without that evidence,
    the share a file dp-compact rewrote states for its conversation (``Session.recorded_write_1h_share``);
    else the provider's default, 5-minute entries (share 0), stated. No note for a provider that
    charges no write premium and sells no 1-hour entries (OpenAI, Google, DeepSeek): the
    lifetime changes nothing there but the cache's life, which is 5 minutes.
    """
    usage = session.usage if session is not None else ()
    columns = usage_columns(usage)
    written = sum(u.cache_write_tokens for u in usage) if columns is None else int(columns.cache_write_tokens.sum())
    anthropic = "anthropic" in columns.conventions if columns is not None else any(u.convention == "anthropic" for u in usage)
    if written > 0 and anthropic:
        one_hour = sum(u.cache_write_1h_tokens for u in usage) if columns is None else int(columns.cache_write_1h_tokens.sum())
        share = one_hour / written
        mix = f"{share:.0%} of its {written:,} cache-write tokens were 1-hour entries (its usage records)"
        return share, (f"cache writes at {prices.with_write_share(share).p_write:.2f} $/MTok: {mix}; the cache lives"
                       f" {'1 hour' if share >= 0.5 else '5 minutes'} after its last use",)
    if prices.p_cache_write is None and prices.p_cache_write_1h is None:
        return 0.0, ()
    stated = session.recorded_write_1h_share if session is not None else None
    if stated is not None:  # a file dp-compact compacted, cleared or shrank: the conversation's own mix, as it stated it
        return stated, (f"cache writes at {prices.with_write_share(stated).p_write:.2f} $/MTok: {stated:.0%} 1-hour entries, as"
                        f" dp-compact stated them when it rewrote the file (the conversation's own usage records); the cache lives"
                        f" {'1 hour' if stated >= 0.5 else '5 minutes'} after its last use",)
    life = {"30m": "30-minute", "1h": "1-hour"}.get(prices.write_lifetime_at(0.0), "5-minute")
    return 0.0, (f"cache writes at {prices.p_write_5m:.2f} $/MTok, {life} entries: the provider's default"
                 " (the session records no write lifetime)",)


def _check_window_known(session: Session, fallback: Prices, window: int) -> None:
    """Raise when a model no price list has needs a window beyond every one known for it (see :func:`choose_prices`)."""
    if window in (*known_windows(session.model, fallback.max_context_tokens), session.context_window):
        return
    raise SettingsError("DP_MAX_CONTEXT_TOKENS", None, (
        f"the context window of {session.model!r} is unknown (no price list has the model) and the session's calls already"
        f" took prompts of {largest_accepted_prompt(session):,} tokens, more than the {fallback.max_context_tokens:,} of"
        f" {fallback.name}: give the window with DP_MAX_CONTEXT_TOKENS or --max-context-tokens"
    ))


def _copy_of_known(model: str, notes: list[str], day: date | None = None) -> Prices | None:
    """Prices of the model that ``model`` is a copy or dated snapshot of (``gpt-5.3-codex-bak``), with a note; else None."""
    base_name = base_model_name(model)
    if base_name is None:
        return None
    try:
        base = get_prices(base_name, day)
    except UnknownProfileError:
        return None
    notes.append(f"prices of {base.name}: the session's model {model!r} is read as {base_name!r} (its suffix names no other model)")
    return base


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
    session: Session, settings: Settings, counts: npt.NDArray[np.int64], image_tokens: npt.NDArray[np.int64] | None = None,
    *, placement: CallPlacement | None = None,
) -> tuple[float, str]:
    """Provider tokens per counted token for ``session``, and where the factor comes from.

    ``DP_TOKEN_RATIO`` when set; else the ratio measured from the session's own usage records
    (:func:`~dp_compact.measure.estimation.measured_token_ratio`, images taken off when
    ``image_tokens`` gives them; ``placement``: the records already placed); else the one a summary
    of ours states was measured on the conversation it compacted (``Session.recorded_token_ratio``);
    else the calibrated factor of its provider family (:func:`~dp_compact.measure.tokens.token_ratio`,
    1 for an unknown family). ``bytes4`` counts are the seed's and never scaled. The factor
    applies to text: images are in provider tokens.
    """
    if settings.tokenizer != "tiktoken":
        return 1.0, "none (bytes4)"
    if settings.token_ratio is not None:
        return settings.token_ratio, "setting"
    measured = measured_token_ratio(session, counts, image_tokens, placement)
    if measured is not None:
        return measured, "measured"
    if session.recorded_token_ratio is not None:  # a compacted file: measured on the conversation it compacted
        return session.recorded_token_ratio, "recorded"
    family = session_family(session, settings)
    return token_ratio(family), f"family {family or 'unknown'}"


def token_scale_note(ratio: float, source: str) -> tuple[str, ...]:
    """What a plan says about the token scale (:func:`token_scale`): the factor when the tokens
    are scaled; why not when nothing was measured, recorded or calibrated; else nothing."""
    if ratio != 1.0:
        return (f"message tokens scaled by {ratio:.3g} provider tokens per cl100k token ({source})",)
    if not source.startswith("family "):
        return ()
    family = source.removeprefix("family ")
    known = "no model is recorded, so no provider family is known" if family == "unknown" else f"no factor is calibrated for the {family} family"
    return ((f"message tokens are cl100k counts, unscaled: no token ratio could be measured from usage records and {known}"
             " (set --token-ratio to scale them)"),)


def session_family(session: Session, settings: Settings) -> str:
    """The provider family whose tokens ``session``'s messages are in: its recorded model's (or its
    format's, :func:`~dp_compact.measure.tokens.provider_family`); for a session that records no model,
    the family of the provider given (``--provider``, ``DP_PROVIDER``); else ``"unknown"``."""
    family = provider_family(session.model, session.format)
    if family == "unknown" and not session.model and settings.explicit_provider():
        family = provider_family(settings.provider)
    return family


def _scaled_token_parts(
    session: Session, settings: Settings, use_cache: bool, placement: CallPlacement | None = None
) -> tuple[npt.NDArray[np.int64], float, str, int]:
    """Counted tokens per message scaled by :func:`token_scale`, with the factor, its source and
    the documents given by reference (:func:`~dp_compact.measure.tokens.referenced_documents`).

    The images' tokens are priced by the session's provider (:func:`~dp_compact.measure.tokens.image_token_counts`)
    and left unscaled; the rest is scaled. With the cache, the session file's stored counts
    answer its unchanged messages (:class:`~dp_compact.measure.tokens.TokenCache`).
    """
    if settings.tokenizer != "tiktoken":
        counts = count_message_tokens(session.messages, tokenizer=settings.tokenizer)
        images, referenced = np.zeros(len(counts), dtype=np.int64), referenced_documents(session.messages)
    else:
        cache = TokenCache() if use_cache else None
        try:
            file = str(Path(session.path).resolve()) if session.path and Path(session.path).is_file() else None
            parts = message_token_parts(session.messages, cache=cache, family=session_family(session, settings), file=file)
        finally:
            if cache is not None:
                cache.close()
        counts, images, referenced = parts.total, parts.images, parts.referenced
    ratio, source = token_scale(session, settings, counts, images, placement=placement)
    scaled = counts if ratio == 1.0 else np.rint((counts - images) * ratio).astype(np.int64) + images
    return np.array(scaled, dtype=np.int64), ratio, source, referenced


def session_tokens(session: Session, settings: Settings, *, use_cache: bool = True) -> npt.NDArray[np.int64]:
    """Tokens per live message, shape (N,): counted with the settings' tokenizer (persistent cache),
    then scaled to the provider's tokens by :func:`token_scale` and rounded (as :func:`prepare` counts them)."""
    return _scaled_token_parts(session, settings, use_cache)[0]


def read_notes(session: Session, referenced: int | None = None) -> tuple[str, ...]:
    """What reading left out that a user should know: a half-written last line (``Session.partial_line``),
    and documents given by reference, whose size is estimated (:func:`~dp_compact.measure.tokens.referenced_documents`;
    ``referenced`` when already counted)."""
    notes = () if session.partial_line is None else (partial_line_note(session.path, session.partial_line),)
    referenced = referenced_documents(session.messages) if referenced is None else referenced
    if referenced:
        notes += ((f"{referenced} document(s) given by URL or file id cannot be read here: each one's size is estimated"
                   f" at {REFERENCED_DOCUMENT_TOKENS:,} tokens, one page of the provider's per-page PDF estimate"
                   " (text and page image; more pages cost more)"),)
    return notes
