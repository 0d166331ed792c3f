"""The replay's shell: read sessions, count tokens, align recorded calls, run policies, aggregate.

:mod:`dp_compact.replay` is the pure core; this module does the IO (session files, worker
processes) and builds the reports the command line renders. How a session becomes a
:class:`~dp_compact.replay.Recording` (messages, calls, times) is :mod:`dp_compact.replay.load`,
whose names are re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from dp_compact.conversation import Session
from dp_compact.errors import DpCompactError, SettingsError, skip_reason
from dp_compact.io import SESSION_SUFFIXES, session_files
from dp_compact.prepare import prepare
from dp_compact.replay.bill import BillCheck, bill_check
from dp_compact.replay.load import (
    DETECTOR_MODES,
    call_times,
    load_recording,
    prepared_recording,
    recorded_calls,
    replay_history,
    replay_params,
    replay_v_tokens,
    resolve_ttl,
)
from dp_compact.replay.meter import (
    FIXED_RECORDING,
    Policy,
    PolicyResult,
    Recording,
    ReplayParams,
    prefix_floor_usd,
    replay,
)
from dp_compact.replay.policies import ORACLE, SUMMARY_TOKENS, parse_policy
from dp_compact.replay.receipts import PolicyReceipts, receipts
from dp_compact.replay.recorded import measured_hit_share, recorded_costs, unrecorded_shrinks
from dp_compact.sessions import read_session
from dp_compact.sessions.source import skipped_lines_note
from dp_compact.settings import Settings

__all__ = [
    "DETECTOR_MODES",
    "SESSION_SUFFIXES",
    "DetectorRun",
    "DirectoryReplay",
    "parse_policies",
    "summary_tokens",
    "SessionReplay",
    "call_times",
    "check_detector",
    "load_recording",
    "prepared_recording",
    "recorded_calls",
    "replay_file",
    "replay_history",
    "replay_or_skip",
    "replay_params",
    "replay_session",
    "replay_v_tokens",
    "session_files",
]



def check_detector(detector: str) -> None:
    """Raise SettingsError unless ``detector`` is one of :data:`DETECTOR_MODES` (before any work starts)."""
    if detector not in DETECTOR_MODES:
        raise SettingsError("--detector", detector, f"one of {', '.join(DETECTOR_MODES)}")


def summary_tokens(tool: str, settings: Settings) -> int:
    """S charged to a policy standing for ``tool`` (DESIGN §6): ``DP_S`` when given, else :data:`SUMMARY_TOKENS`."""
    if "s" in settings.model_fields_set:
        return settings.s
    return SUMMARY_TOKENS.get(tool, settings.s)


#: A policy, or its ``--policy`` spec (parsed on use).
Parsed = Policy | str


def parse_policies(policies: Sequence[Parsed], settings: Settings) -> tuple[Policy, ...]:
    """Policies as given, ``--policy`` spec strings parsed (:func:`~dp_compact.replay.policies.parse_policy`);
    done once per run.

    Raises
    ------
    SettingsError
        An unknown policy spec.
    """
    return tuple(parse_policy(p, settings) if isinstance(p, str) else p for p in policies)


@dataclass(frozen=True)
class DetectorRun:
    """The policies of one session replayed under one lost-information detector (``--detector both``).

    ``detector``: ``"verbatim"`` or ``"strict"``; ``n_uses``: the uses it found; ``results``: one
    per policy, in the order asked.
    """

    detector: str
    n_uses: int
    results: tuple[PolicyResult, ...]

    def to_dict(self) -> dict[str, Any]:
        """``{"detector", "uses", "oracle_usd", "best_fixed_usd", "policies": [...]}``; per policy
        its total and loss ($), refetches, ratios and rank (1 = cheapest)."""
        return _ranking(self.detector, self.n_uses, [r.to_dict() for r in self.results])


def _ranking(detector: str, n_uses: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One detector's ranking: totals, ratios to the best fixed rule and the oracle, ranks."""
    best = _best_fixed({r["policy"]: (r["fixed"], r["total_usd"]) for r in rows})
    oracle = next((r["total_usd"] for r in rows if r["policy"] == ORACLE), None)
    order = sorted(range(len(rows)), key=lambda i: rows[i]["total_usd"])
    ranks = {i: rank + 1 for rank, i in enumerate(order)}
    return {"detector": detector, "uses": n_uses, "oracle_usd": oracle, "best_fixed_usd": best,
            "policies": [{"policy": r["policy"], "fixed": r["fixed"], "total_usd": r["total_usd"], "loss_usd": r["loss_usd"],
                          "refetches": r["refetches"], "vs_best_fixed": _ratio(r["total_usd"], best),
                          "vs_oracle": _ratio(r["total_usd"], oracle), "rank": ranks[i]} for i, r in enumerate(rows)]}


@dataclass(frozen=True)
class SessionReplay:
    """One session replayed under several policies.

    Attributes
    ----------
    path, format : str
    n_messages, n_calls : int
        Messages replayed (the whole history) and LLM calls.
    call_source : str
        ``"usage"`` (output tokens from usage records) or ``"messages"``.
    timed_calls : int
        Calls with a known time (the TTL applies between those).
    n_uses : int
        Uses of earlier messages the lost-information detector found (DESIGN §6).
    params : ReplayParams
        Prices ($/MTok), window M, V (tokens) and where it comes from (``v_source``), the default
        S, TTL, loss mode.
    prefix_floor_usd : float
        Every call reading V from cache plus the recorded output, $: no policy costs less.
    results : tuple[PolicyResult, ...]
        One per policy, in the order asked.
    notes : tuple[str, ...]
        The session's prepared notes (:attr:`dp_compact.prepare.PreparedSession.notes`: reading,
        prices and window, token scale, V), then the warm cache's, the cache-hit share's and the
        lines skipped.
    bill : BillCheck or None
        The ``recorded`` replay against the bill of its usage records (:mod:`dp_compact.replay.bill`);
        None for a session without usage records.
    detector : str
        The lost-information detector (:data:`DETECTOR_MODES`); under ``"both"``, ``results`` and
        ``n_uses`` are the first detector's (``verbatim``).
    by_detector : tuple[DetectorRun, ...]
        Under ``"both"``: the policies under each detector, ``verbatim`` then ``strict``; else empty.
    receipts : tuple[PolicyReceipts, ...] or None
        Per policy, every compaction's receipt (:mod:`dp_compact.replay.receipts`), when asked.
    live_messages : int or None
        Messages after the recording's last compaction, the conversation ``plan`` reads (None:
        not given).
    """

    path: str
    format: str
    n_messages: int
    n_calls: int
    call_source: str
    timed_calls: int
    n_uses: int
    params: ReplayParams
    prefix_floor_usd: float
    results: tuple[PolicyResult, ...]
    notes: tuple[str, ...] = ()
    bill: BillCheck | None = None
    detector: str = "verbatim"
    by_detector: tuple[DetectorRun, ...] = ()
    receipts: tuple[PolicyReceipts, ...] | None = None
    live_messages: int | None = None

    def best_fixed_usd(self) -> float | None:
        """Total $ of the cheapest fixed policy replayed, None when there is none."""
        return _best_fixed({r.policy: (r.fixed, r.total_usd) for r in self.results})

    def oracle_usd(self) -> float | None:
        """Total $ of the oracle when it was replayed."""
        return next((r.total_usd for r in self.results if r.policy == ORACLE), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: session facts, prices, V (tokens) and its source, the assumption, and per policy the terms,
        ``vs_best_fixed`` and ``vs_oracle``."""
        best, oracle = self.best_fixed_usd(), self.oracle_usd()
        return {
            "session": {"path": self.path, "format": self.format, "messages": self.n_messages, "live_messages": self.live_messages,
                        "calls": self.n_calls, "call_source": self.call_source, "timed_calls": self.timed_calls, "uses": self.n_uses},
            "prices": self.params.prices.to_dict(), "v_tokens": self.params.v_tokens,
            "v_source": self.params.v_source, "warm_tokens": self.params.warm_tokens, "s_tokens": self.params.s_tokens,
            "cache_ttl_s": self.params.cache_ttl_s, "cache_ttl_reason": self.params.ttl_reason,
            "cache_hit_share": self.params.cache_hit_share, "max_context_tokens": self.params.window, "loss": self.params.loss,
            "detector": self.detector, "by_detector": [run.to_dict() for run in self.by_detector] or None,
            "assumption": FIXED_RECORDING, "prefix_floor_usd": self.prefix_floor_usd, "best_fixed_usd": best,
            "oracle_usd": oracle, "notes": list(self.notes),
            "bill_check": self.bill.to_dict() if self.bill is not None else None,
            "policies": [{**r.to_dict(), "vs_best_fixed": _ratio(r.total_usd, best), "vs_oracle": _ratio(r.total_usd, oracle)}
                         for r in self.results],
            **({"receipts": [r.to_dict() for r in self.receipts]} if self.receipts is not None else {}),
        }


def _best_fixed(totals: dict[str, tuple[bool, float]]) -> float | None:
    """The lowest total among fixed policies."""
    fixed = [total for is_fixed, total in totals.values() if is_fixed]
    return min(fixed) if fixed else None


def _ratio(total: float, best: float | None) -> float | None:
    """total / best, None without a best (or a zero best)."""
    return total / best if best else None


_SUMMED = ("calls", "cache_read_usd", "input_usd", "write_usd", "output_usd", "compaction_usd", "loss_usd", "compactions",
           "forced", "overflows", "truncations", "refetches", "floor_usd", "clearings", "cleared_tokens")


@dataclass(frozen=True)
class DirectoryReplay:
    """Every session under a folder replayed: rows, sessions skipped (path, reason) and totals."""

    folder: str
    policies: tuple[str, ...]
    sessions: tuple[SessionReplay, ...]
    skipped: tuple[tuple[str, str], ...]
    loss: str = "refetch"
    detector: str = "verbatim"

    def totals(self) -> list[dict[str, Any]]:
        """Per policy over all sessions: summed $ and counts, peak, call-weighted mean context, ratios."""
        return self._totals([s.results for s in self.sessions])

    def totals_by_detector(self) -> list[dict[str, Any]]:
        """Under ``--detector both``: per detector, the ranking of the summed totals
        (:meth:`DetectorRun.to_dict`'s keys, ``uses`` summed); else empty."""
        if self.detector != "both" or not self.sessions:
            return []
        out = []
        for d, run in enumerate(self.sessions[0].by_detector):
            rows = self._totals([s.by_detector[d].results for s in self.sessions])
            out.append(_ranking(run.detector, sum(s.by_detector[d].n_uses for s in self.sessions), rows))
        return out

    def _totals(self, per_session: list[tuple[PolicyResult, ...]]) -> list[dict[str, Any]]:
        rows = []
        for index, name in enumerate(self.policies):
            results = [r[index] for r in per_session]
            row: dict[str, Any] = {"policy": name, "fixed": bool(results and results[0].fixed)}
            row.update({key: sum(getattr(r, key) for r in results) for key in _SUMMED})
            row["total_usd"] = sum(r.total_usd for r in results)
            row["summary_tokens"] = results[0].summary_tokens if results else 0
            row["peak_context_tokens"] = max((r.peak_context_tokens for r in results), default=0)
            weighted = sum(r.mean_context_tokens * r.calls for r in results)
            row["mean_context_tokens"] = weighted / row["calls"] if row["calls"] else 0.0
            rows.append(row)
        best = _best_fixed({row["policy"]: (row["fixed"], row["total_usd"]) for row in rows})
        oracle = next((row["total_usd"] for row in rows if row["policy"] == ORACLE), None)
        for row in rows:
            row["vs_best_fixed"] = _ratio(row["total_usd"], best)
            row["vs_oracle"] = _ratio(row["total_usd"], oracle)
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the folder, the assumption, each session's report, the skipped files and the totals."""
        return {
            "folder": self.folder, "policies": list(self.policies), "loss": self.loss, "detector": self.detector,
            "assumption": FIXED_RECORDING, "sessions": [s.to_dict() for s in self.sessions],
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped], "totals": self.totals(),
            "totals_by_detector": self.totals_by_detector() or None,
        }


def _replay_one(recording: Recording, policy: Policy, params: ReplayParams, settings: Settings) -> PolicyResult:
    """One policy over one recording, charged its tool's summary size (DESIGN §6)."""
    return replay(recording, policy, replace(params, s_tokens=summary_tokens(policy.tool, settings)))


def replay_session(
    session: Session, settings: Settings, policies: Sequence[Parsed], *, cache_ttl_s: float | None = None,
    use_cache: bool = True, loss: str = "refetch", write_share: float | None = None, detector: str = "verbatim",
    with_receipts: bool = False,
) -> SessionReplay:
    """Replay an already read session under each parsed policy (:func:`parse_policies`), and check
    the ``recorded`` replay against the bill of its usage records (:mod:`dp_compact.replay.bill`).

    ``cache_ttl_s`` (s): the ``--cache-ttl`` given, else None: the session's recorded write
    lifetime where the recording has times, else no expiry (:func:`~dp_compact.replay.load.resolve_ttl`).
    ``write_share`` (in [0, 1]): price every cache write as that share of 1-hour entries instead
    of the session's recorded mix (:meth:`~dp_compact.pricing.Prices.with_write_share`: 0 = all
    5-minute, 1 = all 1-hour writes; the default TTL follows it); the bill stays the bill.
    ``detector`` (:data:`DETECTOR_MODES`): the lost-information detector whose uses are charged;
    ``"both"`` replays every policy under each (``SessionReplay.by_detector``). ``with_receipts``:
    a receipt per compaction of every policy (:mod:`dp_compact.replay.receipts`; under ``"both"``
    the verbatim detector's).

    The session is prepared over its recorded history (:func:`~dp_compact.prepare.prepare`,
    ``history=True``). Every policy, the oracle included, is charged the same V (tokens): the
    prepared one, ``DP_V`` / ``--v`` when given, else the session's own prefix measured from its
    usage records, else ``DP_V`` (a note says which). Costs in $.

    Raises
    ------
    SettingsError
        Prices that break DESIGN §3 rules, or an unknown ``detector``.
    UnknownProfileError
        As :func:`~dp_compact.prepare.choose_prices`.
    """
    check_detector(detector)
    parsed = parse_policies(policies, settings)
    prepared = prepare(session, settings, use_cache=use_cache, history=True)
    if write_share is not None:
        prepared = replace(prepared, prices=prepared.prices.with_write_share(write_share))
    detectors = ("verbatim", "strict") if detector == "both" else (detector,)
    recording, source = prepared_recording(prepared, detector=detectors[0])
    timed = int(np.isfinite(recording.call_times).sum())
    ttl, ttl_reason = resolve_ttl(prepared.prices, cache_ttl_s, timed)
    params, notes = replay_params(prepared, ttl, loss)
    params = replace(params, ttl_reason=ttl_reason)
    _, shrink_note = unrecorded_shrinks(recording)
    share, share_note = measured_hit_share(recording, params)
    params = replace(params, cache_hit_share=share)
    notes = (*notes, share_note) if share_note else notes
    notes = (*notes, shrink_note) if shrink_note else notes
    if session.skipped_lines:
        notes = (*notes, skipped_lines_note(session.skipped_lines, session.skipped_line_numbers))
    results = tuple(_replay_one(recording, policy, params, settings) for policy in parsed)
    runs: tuple[DetectorRun, ...] = ()
    if detector == "both":
        other = prepared_recording(prepared, detector="strict")[0]  # the same recording, the strict detector's uses
        runs = (DetectorRun("verbatim", int(recording.use_calls.size), results),
                DetectorRun("strict", int(other.use_calls.size),
                            tuple(_replay_one(other, policy, params, settings) for policy in parsed)))
    found = None
    if with_receipts:
        found = tuple(receipts(recording, replace(params, s_tokens=summary_tokens(policy.tool, settings)), result)
                      for policy, result in zip(parsed, results, strict=True))
    else:  # what the receipts are made of stays out of the report (a fleet's workers send it back)
        results = tuple(replace(r, events=(), refetch_log=()) for r in results)
        runs = tuple(replace(run, results=tuple(replace(r, events=(), refetch_log=()) for r in run.results)) for run in runs)
    bill = None
    if session.usage:
        costs = recorded_costs(recording, params)
        bill = bill_check(session.usage, prepared.placement, recording, params.prices, costs)
    return SessionReplay(
        path=session.path, format=session.format, n_messages=len(recording.messages), n_calls=recording.n_calls,
        call_source=source, timed_calls=timed, n_uses=int(recording.use_calls.size), params=params,
        prefix_floor_usd=prefix_floor_usd(recording, params), results=results, notes=notes, bill=bill,
        detector=detector, by_detector=runs, receipts=found, live_messages=len(session.messages),
    )


def replay_file(
    path: Path | str, settings: Settings, policies: Sequence[Parsed], *, cache_ttl_s: float | None = None,
    lenient: bool = False, use_cache: bool = True, loss: str = "refetch", write_share: float | None = None,
    detector: str = "verbatim", with_receipts: bool = False,
) -> SessionReplay:
    """Read ``path`` (any supported format) and replay it under each policy (spec strings are parsed first);
    ``detector`` and ``with_receipts`` as :func:`replay_session`.

    Raises
    ------
    SessionError
        Unreadable, malformed or unknown-format input (names file and line).
    SettingsError, UnknownProfileError
        As :func:`replay_session`.
    """
    resolved = parse_policies(policies, settings)  # bad specs fail before the file is read
    check_detector(detector)
    session = read_session(path, lenient=lenient, raw_json=True)
    return replay_session(session, settings, resolved, cache_ttl_s=cache_ttl_s, use_cache=use_cache, loss=loss,
                          write_share=write_share, detector=detector, with_receipts=with_receipts)


def _replay_or_skip(path: Path, settings: Settings, policies: tuple[Parsed, ...], options: dict[str, Any]) -> SessionReplay | str:
    """A worker's job: the replay of one file, or the reason it was skipped (a DpCompactError)."""
    try:
        return replay_file(path, settings, policies, **options)
    except DpCompactError as exc:  # the path is already on the row
        return skip_reason(exc)


#: The per-file job :func:`replay_directory` maps (public for :mod:`dp_compact.fleet`).
replay_or_skip = _replay_or_skip
