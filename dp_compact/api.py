"""The file entry points: read a session file, prepare it (:func:`dp_compact.prepare.prepare`), plan it.

This is the IO edge of the library (session files): :func:`plan_file`, :func:`curve_file` and
:func:`timeline_file` read a file once and hand it to the preparation every command starts from;
:mod:`dp_compact.core.planner` stays pure. The preparation's names (:func:`choose_prices`,
:func:`session_tokens`, :func:`token_scale`, ...) live in :mod:`dp_compact.prepare` and are
re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dp_compact.calibration.history import history_of
from dp_compact.conversation import Session
from dp_compact.core.planner import Plan
from dp_compact.core.timing import IdleHazard
from dp_compact.io import bulk_allocation
from dp_compact.prepare import (
    TRANSCRIPT_NOW,
    last_record_seconds,
    PreparedSession,
    choose_prices,
    plan_prepared,
    plan_timing,
    prepare,
    read_notes,
    reprice,
    resolve_prices,
    session_family,
    session_tokens,
    token_scale,
)
from dp_compact.sessions import read_session
from dp_compact.settings import Settings

if TYPE_CHECKING:
    from dp_compact.replay.timeline import Timeline

__all__ = [
    "choose_prices",
    "curve_file",
    "curve_plans",
    "last_record_seconds",
    "plan_file",
    "plan_session",
    "read_notes",
    "resolve_prices",
    "session_family",
    "session_tokens",
    "timeline_file",
    "token_scale",
]


def plan_session(session: Session, settings: Settings, *, use_cache: bool = True, now: float | None = None,
                 now_source: str = "wall clock", idle_hazard: IdleHazard | None = None) -> Plan:
    """Plan an already read session: :func:`~dp_compact.prepare.prepare`, then
    :func:`~dp_compact.prepare.plan_prepared`. Raises as :func:`~dp_compact.prepare.choose_prices`.

    The fixed prefix V (tokens) is the session's own, measured from its usage records, unless
    ``DP_V`` / ``--v`` is given or the records measure none that makes sense
    (:func:`~dp_compact.measure.estimation.fixed_prefix`; ``Plan.v_source``). The plan's notes say how
    prices, window, token scale and V were chosen and how the current context was obtained
    (:func:`~dp_compact.measure.estimation.current_context`), and name a half-written last line left out
    of the file (``Session.partial_line``).

    ``now`` (epoch seconds; adapters and the hook pass the wall clock) gives the silence since the
    session's last recorded call (DESIGN §8, :func:`~dp_compact.prepare.plan_timing`); None: its
    last call. ``idle_hazard``: a fitted one (DESIGN §8); default: the shipped one.
    """
    with bulk_allocation():
        prepared = prepare(session, settings, use_cache=use_cache)
        timing = plan_timing(prepared.session, now, now_source if now is not None else "transcript", hazard=idle_hazard)
        return plan_prepared(prepared, timing=timing)


def plan_file(
    path: Path | str,
    settings: Settings,
    *,
    lenient: bool = False,
    stats: Path | str | None = None,
    use_cache: bool = True,
    now: float | None = None,
    now_source: str = "--now",
    idle_hazard: IdleHazard | None = None,
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
    now : float, optional
        "Now", epoch seconds (``--now``; the wall clock for adapters): the plan knows the silence
        since the last recorded call (DESIGN §8). Default: the time of the file's last record
        (:func:`last_record_seconds`; deterministic on a file), else its last call's.
    now_source : str
        How the plan names where ``now`` comes from.
    idle_hazard : IdleHazard, optional
        A fitted idle hazard (``dp-compact calibrate``, DESIGN §8); default: the shipped one.

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
        if now is None:
            now, now_source = last_record_seconds(path), TRANSCRIPT_NOW
        prepared = prepare(session, settings, use_cache=use_cache)
        result = plan_prepared(prepared, timing=plan_timing(prepared.session, now, now_source, hazard=idle_hazard))
        del session
    return result


def curve_plans(
    prepared: PreparedSession | Session, message_tokens: npt.NDArray[np.int64] | None = None, base: Settings | None = None, *,
    providers: Sequence[str | None] = (None,), models: Sequence[str] = ("recall",),
) -> list[Plan]:
    """Plan a prepared session under every provider × cost model (the curves to overlay).

    Parameters
    ----------
    prepared : PreparedSession or Session
        The session as :func:`~dp_compact.prepare.prepare` gave it: its tokens (counted once for
        every plan), its placement and its measured V. A :class:`Session` with its
        ``message_tokens`` and ``base`` settings is prepared here with those tokens taken as given.
    message_tokens : ndarray[int64], shape (N,), optional
        Only with a :class:`Session`: its tokens per message, counted once for every plan.
    base : Settings, optional
        Only with a :class:`Session`: the settings the others start from (else the prepared ones).
    providers : sequence of str or None
        Profiles (None: the one the settings and the session give).
    models : sequence of {"recall", "seed"}

    Returns
    -------
    list of Plan
        One per provider × model (:func:`~dp_compact.prepare.plan_prepared` of
        :func:`~dp_compact.prepare.reprice`: each with the V its window allows); each plan's
        ``notes`` say how its prices, window and V were chosen.

    Raises
    ------
    UnknownProfileError
        If a provider is unknown.
    """
    from dp_compact.settings import load_settings

    if not isinstance(prepared, PreparedSession):
        if message_tokens is None or base is None:
            raise TypeError("curve_plans of a Session needs its message_tokens and base settings")
        prepared = prepare(prepared, base, message_tokens=message_tokens)
    flags = prepared.settings.model_dump(exclude_unset=True)
    plans = []
    for provider in providers:
        for model in models:
            settings = load_settings(**{**flags, "model": model, **({"provider": provider} if provider else {})})
            plans.append(plan_prepared(reprice(prepared, settings)))
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
        The plans (:func:`curve_plans`) and the reading notes (:func:`~dp_compact.prepare.read_notes`).

    Raises
    ------
    SessionError, UnknownProfileError
        Unreadable session or unknown provider.
    """
    with bulk_allocation():  # as plan_file
        session = read_session(path, lenient=lenient, raw_json=True)
        prepared = prepare(session, settings, use_cache=use_cache)
        every_model = list(dict.fromkeys([settings.model, *models]))
        plans = curve_plans(prepared, providers=list(providers) or [None], models=every_model)
        del session
    return plans, prepared.reading_notes


def timeline_file(path: Path | str, settings: Settings, *, lenient: bool = False, use_cache: bool = True) -> tuple[Timeline, tuple[str, ...]]:
    """Read ``path`` once and plan its history at every LLM call: the data of ``dp-compact timeline``.

    Returns
    -------
    (Timeline, tuple of str)
        :func:`dp_compact.replay.timeline.timeline` of the file's history
        (:func:`~dp_compact.calibration.history.history_of`), and the notes: reading
        (:func:`~dp_compact.prepare.read_notes` of its live segment), then why the line of the
        advice taken is not drawn, if it is not.

    Raises
    ------
    SessionError, UnknownProfileError
        Unreadable session or unknown provider.
    """
    from dp_compact.replay.timeline import timeline

    history = history_of(read_session(path, lenient=lenient, raw_json=True))
    line = timeline(history, settings, use_cache=use_cache)
    return line, read_notes(history.segments[-1]) + ((line.followed_note,) if line.followed_note else ())
