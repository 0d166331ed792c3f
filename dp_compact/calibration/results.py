"""The calibration over many session files (DESIGN §2, §3): pooled estimates and the recall fits.

Each file is measured on its own (:mod:`dp_compact.calibration.measures`); here the measures are
pooled: medians of V, avg, S and the token ratios (per provider family), pooled calls per user
turn, the recall curve q(a) in both age units of ``DP_RECALL_AGE`` fitted by q0 · exp(−a / τ)
(:mod:`dp_compact.calibration.recall`), and the survival of session lengths
(:mod:`dp_compact.calibration.fit`). Spreads are bootstraps over sessions.

Everything here is a function of the files it is given; nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dp_compact.calibration.fit import Estimate, bootstrap_draws, bootstrap_estimate, survival_estimates
from dp_compact.calibration.history import History, history_of
from dp_compact.calibration.idle import IdleFit, fit_idle
from dp_compact.calibration.measures import AGE_UNITS, SessionMeasures, measure_session
from dp_compact.calibration.recall import MIN_BIN_MESSAGES, RecallCounts, RecallFit, fit_exponential
from dp_compact.errors import DpCompactError, no_readable_session, skip_reason
from dp_compact.calibration.evidence import recorded_summary_tokens
from dp_compact.io import session_files as session_paths
from dp_compact.measure.reuse import BOILERPLATE_SHARE, MIN_REUSE_CHARS
from dp_compact.sessions import read_session
from dp_compact.settings import Settings, default_settings

__all__ = ["DEFAULT_BOOTSTRAP", "DETECTORS", "RECALL_DETECTOR", "STRICT_DETECTOR", "Calibration", "calibrate", "env_lines", "pool_sessions", "session_paths"]

#: Bootstrap resamples (over sessions) behind every spread.
DEFAULT_BOOTSTRAP = 400
#: How ``results.json`` says q(a) was counted (DESIGN §6 "Lost information", :mod:`dp_compact.measure.reuse`).
RECALL_DETECTOR = {
    "rule": "reuse.find_uses: a later assistant message repeats >= min_chars characters verbatim (windows held by more "
            "than boilerplate_share of the messages ignored), or edits/writes a file whose latest read result it holds",
    "min_chars": MIN_REUSE_CHARS, "boilerplate_share": BOILERPLATE_SHARE,
    "q": "share of messages of age a (seen by an LLM call) that a message at or after that call uses",
}
#: How ``results.json`` says the strict curve was counted (DESIGN §9 "Loss priced honestly").
STRICT_DETECTOR = {
    "rule": ("reuse.find_uses(detector='strict'): as the verbatim detector, and a later message that names a file path,"
             " code identifier or shell command of an earlier message uses its latest earlier mention"),
    "q": RECALL_DETECTOR["q"],
}
#: The detectors calibrate fits the recall curve under (``Calibration.fits_for``).
DETECTORS = ("verbatim", "strict")


@dataclass(frozen=True, slots=True)
class Calibration:
    """The calibration: per-session measures, pooled estimates, recall fits per age unit.

    Attributes
    ----------
    sessions : tuple[SessionMeasures, ...]
    skipped : tuple[str, ...]
        ``path: reason`` for files that are not conversations.
    v_tokens, calls_per_turn, avg_tokens, summary_tokens : Estimate or None
        Median V; pooled calls / user turns; median of the sessions' mean prompt; median S.
    token_ratios : dict[str, Estimate]
        Per provider family: median of the sessions' token ratios.
    recall_l : float or None
        L that turned API rounds into the ``rounds`` age unit in every session, or None: each
        session's own L, as the planner measures it (``SessionMeasures.recall_l``).
    recall : dict[str, RecallCounts]
        Pooled counts per age unit.
    recall_fits : dict[str, tuple[RecallFit, Estimate, Estimate]]
        Per unit: the fit on the pooled curve and the bootstrap spreads of q0 and τ.
    recall_session_r2 : dict[str, float]
        Per unit: weighted R² of the pooled fit on every session's own bins (how well one curve
        describes all sessions); the unit with the higher value is ``recall_age``.
    recall_age : str
    bootstrap : int
    recall_draws : dict[str, ndarray]
        Per unit: the bootstrap fits, shape (bootstrap, 2): columns q0 and τ (for bands).
    recorded_summaries : dict[str, tuple[int, ...]]
        Per tool (``claude-code``, ``codex``, ...): provider tokens of each compaction summary the
        files record (:func:`dp_compact.calibration.evidence.recorded_summary_tokens`); the replay charges
        each tool their mean (DESIGN §6).
    survival : (Estimate, Estimate) or None
        Lomax shape and scale (calls) of the sessions' lengths in LLM calls (:func:`~dp_compact.calibration.fit.fit_survival`;
        DESIGN §7: ``DP_SURVIVAL_ALPHA``, ``DP_SURVIVAL_SCALE``), with bootstrap spreads.
    min_bin_messages : int
        Pooled age bins observed through fewer messages were left out of the recall fits
        (:data:`~dp_compact.calibration.recall.MIN_BIN_MESSAGES`).
    idle : IdleFit or None
        The idle hazard (DESIGN §8): chances that a person answers a final answer after 5 minutes
        and after 1 hour, from the sessions' turn-end gaps (:mod:`dp_compact.calibration.idle`);
        None when no session has one. Shipped as :data:`dp_compact.core.timing.IDLE_HAZARD`.
    """

    sessions: tuple[SessionMeasures, ...]
    skipped: tuple[str, ...]
    v_tokens: Estimate | None
    calls_per_turn: Estimate | None
    avg_tokens: Estimate | None
    summary_tokens: Estimate | None
    token_ratios: dict[str, Estimate]
    recall_l: float | None
    recall: dict[str, RecallCounts]
    recall_fits: dict[str, tuple[RecallFit, Estimate, Estimate]]
    recall_session_r2: dict[str, float]
    recall_age: str
    bootstrap: int
    recall_draws: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict, repr=False)
    recorded_summaries: dict[str, tuple[int, ...]] = field(default_factory=dict)
    survival: tuple[Estimate, Estimate] | None = None
    min_bin_messages: int = MIN_BIN_MESSAGES
    idle: IdleFit | None = None
    recall_strict: dict[str, RecallCounts] = field(default_factory=dict)
    recall_fits_strict: dict[str, tuple[RecallFit, Estimate, Estimate]] = field(default_factory=dict)
    recall_session_r2_strict: dict[str, float] = field(default_factory=dict)

    def fits_for(self, detector: str) -> tuple[dict[str, RecallCounts], dict[str, tuple[RecallFit, Estimate, Estimate]], dict[str, float]]:
        """Pooled counts, fits and session R² per age unit under ``detector`` (:data:`DETECTORS`)."""
        if detector == "strict":
            return self.recall_strict, self.recall_fits_strict, self.recall_session_r2_strict
        return self.recall, self.recall_fits, self.recall_session_r2

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (``calibration/results.json``); a value that could not be measured (NaN) is None."""
        return _finite(self._raw_dict())

    def _raw_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` before NaN values become None."""
        def est(e: Estimate | None) -> dict[str, float | int] | None:
            return None if e is None else e.to_dict()

        def curves(detector: str) -> dict[str, Any]:
            pooled, fits, r2 = self.fits_for(detector)
            out = {}
            for unit, (fit, q0, tau) in fits.items():
                counts = pooled[unit]
                out[unit] = {
                    "q0": q0.to_dict(), "tau": tau.to_dict(),
                    "fit_on_pooled": {"q0": fit.q0, "tau": fit.tau, "r_squared": fit.r_squared, "bins": fit.bins},
                    "session_r_squared": r2[unit],
                    "pooled": {"age": list(range(counts.needed.size)), "needed": counts.needed.tolist(), "observed": counts.observed.tolist()},
                }
            return out

        recall = curves("verbatim")
        return {
            "V": est(self.v_tokens), "L": est(self.calls_per_turn), "avg": est(self.avg_tokens), "S": est(self.summary_tokens),
            "token_ratio": {family: e.to_dict() for family, e in self.token_ratios.items()},
            "recall_age": self.recall_age, "recall_l": self.recall_l, "recall": recall, "recall_detector": RECALL_DETECTOR,
            "recall_strict": curves("strict") if self.recall_fits_strict else None, "recall_strict_detector": STRICT_DETECTOR,
            "bootstrap": self.bootstrap,
            "recorded_summaries": {tool: {"tokens": list(n), "mean": sum(n) / len(n)} for tool, n in self.recorded_summaries.items()},
            "survival": None if self.survival is None else {
                "alpha": self.survival[0].to_dict(), "scale_calls": self.survival[1].to_dict(),
                "lengths_calls": [s.llm_calls for s in self.sessions],
            },
            "idle": None if self.idle is None else self.idle.to_dict(),
            "sessions": [s.row() for s in self.sessions], "skipped": list(self.skipped),
        }


def _finite(data: Any) -> Any:
    """``data`` with every non-finite float replaced by None (strict JSON has no NaN)."""
    if isinstance(data, dict):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_finite(value) for value in data]
    if isinstance(data, float) and not np.isfinite(data):
        return None
    return data


def _pooled(counts: Sequence[RecallCounts]) -> RecallCounts:
    """Sum of per-session counts."""
    total = counts[0]
    for c in counts[1:]:
        total = total + c
    return total


def _session_r2(fit: RecallFit, counts: Sequence[RecallCounts], min_messages: int = 10) -> float:
    """Weighted R² of ``fit`` on every session's bins observed by at least ``min_messages`` messages."""
    q, w, pred = [], [], []
    for c in counts:
        bins = np.flatnonzero(c.observed >= min_messages)
        q.append(c.needed[bins] / c.observed[bins])
        w.append(c.observed[bins].astype(float))
        pred.append(fit.q0 * np.exp(-bins / fit.tau))
    qa, wa, pa = np.concatenate(q), np.concatenate(w), np.concatenate(pred)
    if wa.sum() == 0:
        return float("nan")
    mean = (wa * qa).sum() / wa.sum()
    total = (wa * (qa - mean) ** 2).sum()
    return float(1.0 - (wa * (qa - pa) ** 2).sum() / total) if total > 0 else float("nan")


def _recall_fits(sessions: Sequence[SessionMeasures], resamples: int, rng: np.random.Generator,
                 detector: str = "verbatim") -> tuple[dict, dict, dict, dict]:
    """Pooled counts, fits with bootstrap spreads, session-level R² and the bootstrap fits, per age unit,
    under ``detector`` (``SessionMeasures.recall`` or ``recall_strict``)."""
    pooled, fits, r2, all_draws = {}, {}, {}, {}
    for unit in AGE_UNITS:
        counts = [(s.recall_strict if detector == "strict" else s.recall)[unit] for s in sessions]
        pooled[unit] = _pooled(counts)
        fit = fit_exponential(pooled[unit])
        draws = [fit_exponential(_pooled([counts[i] for i in rng.integers(0, len(counts), len(counts))])) for _ in range(resamples)]
        q0 = bootstrap_draws(fit.q0, [d.q0 for d in draws], len(counts))
        tau = bootstrap_draws(fit.tau, [d.tau for d in draws], len(counts))
        fits[unit] = (fit, q0, tau)
        r2[unit] = _session_r2(fit, counts)
        all_draws[unit] = np.array([(d.q0, d.tau) for d in draws], dtype=np.float64).reshape(-1, 2)
    return pooled, fits, r2, all_draws


def calibrate(
    paths: Iterable[Path | str], *, bootstrap: int = DEFAULT_BOOTSTRAP, seed: int = 0, recall_l: float | None = None,
    settings: Settings | None = None,
) -> Calibration:
    """Calibrate V, L, avg, S, token ratios and the recall curve from session files.

    Parameters
    ----------
    paths : iterable of Path or str
        Session files and directories (searched recursively, :func:`session_paths`).
    bootstrap : int
        Resamples over sessions for every spread.
    seed : int
        Seed of the resampling (results are reproducible).
    recall_l : float, optional
        L that turns API rounds into the ``rounds`` age unit in every session (what the planner
        does with ``DP_L`` set); default: each session's own L, as the planner measures it with
        the shipped ``DP_L = 0`` (:func:`~dp_compact.calibration.measures.planner_calls_per_turn`).
    settings : Settings, optional
        The tokenizer and ``DP_TOKEN_RATIO`` that scale the recorded summaries to provider tokens
        (:func:`~dp_compact.calibration.evidence.recorded_summary_tokens`); default: every default,
        no environment read (:func:`~dp_compact.settings.default_settings`). ``dp-compact calibrate``
        passes the environment's.

    Returns
    -------
    Calibration

    Raises
    ------
    SessionError
        If the one file given cannot be read (malformed, of an unknown format, a UI log). Among
        several files, each that cannot be read is skipped and listed in ``Calibration.skipped``
        as ``path: reason`` (:func:`~dp_compact.errors.skip_reason`), and the rest are calibrated.
        If no file is a readable session, a SessionError naming the inputs and the first
        reasons (:func:`~dp_compact.errors.no_readable_session`).
    """
    chosen = settings if settings is not None else default_settings()
    given = [paths] if isinstance(paths, (str, Path)) else list(paths)
    files = session_paths(given)
    histories: list[History] = []
    failed: list[tuple[str, str]] = []
    summaries: dict[str, list[int]] = {}
    for path in files:
        try:
            session = read_session(path, raw_json=True)  # read once: its history's segments come from this read
        except DpCompactError as exc:
            if len(files) == 1:
                raise
            failed.append((str(path), skip_reason(exc)))
            continue
        histories.append(history_of(session))
        for tool, tokens in recorded_summary_tokens(histories[-1].live, chosen):  # the live segment keeps the file's records
            summaries.setdefault(tool, []).append(tokens)
    if not histories:
        raise no_readable_session(", ".join(map(str, given)), failed, len(files))
    skipped = [f"{path}: {reason}" for path, reason in failed]
    l_used = float(recall_l) if recall_l else None
    sessions = [measure_session(h, recall_l=l_used) for h in histories]
    return pool_sessions(sessions, skipped, summaries, bootstrap=bootstrap, seed=seed, recall_l=recall_l)


def pool_sessions(
    sessions: Sequence[SessionMeasures], skipped: Sequence[str], summaries: dict[str, list[int]], *,
    bootstrap: int = DEFAULT_BOOTSTRAP, seed: int = 0, recall_l: float | None = None,
) -> Calibration:
    """The pooling step of :func:`calibrate`: estimates and fits from per-session measures.

    Parameters
    ----------
    sessions : sequence of SessionMeasures
        From :func:`measure_session`, in file order (the bootstrap draws depend on the order).
    skipped : sequence of str
        ``path: reason`` of the files left out.
    summaries : dict[str, list[int]]
        Per tool, the recorded summary tokens of every file in file order
        (:func:`dp_compact.calibration.evidence.recorded_summary_tokens` of each history's live segment).
    bootstrap, seed, recall_l
        As :func:`calibrate`.

    Raises
    ------
    ValueError
        Without any session.
    """
    if not sessions:
        raise ValueError("no readable session to pool")
    rng = np.random.default_rng(seed)
    pairs = [(s.llm_calls, s.user_turns) for s in sessions if s.user_turns and s.avg_tokens is not None]
    calls = bootstrap_estimate(pairs, lambda ps: sum(c for c, _ in ps) / max(sum(t for _, t in ps), 1), bootstrap, rng)
    l_used = float(recall_l) if recall_l else None
    with_usage = [s for s in sessions if s.prompt_tokens.size]
    ratios: dict[str, Estimate] = {}
    for family in sorted({s.family for s in with_usage}):
        values = [s.token_ratio for s in with_usage if s.family == family and s.token_ratio is not None]
        if (e := bootstrap_estimate(values, np.median, bootstrap, rng)) is not None:
            ratios[family] = e
    pooled, fits, r2, draws = _recall_fits(sessions, bootstrap, rng)
    survival = survival_estimates([float(s.llm_calls) for s in sessions], bootstrap, rng)
    idle = fit_idle([(s.path, s.idle_gaps) for s in sessions], bootstrap, np.random.default_rng(seed))  # its own stream: the other draws stay as they were
    scores = {u: (r2[u] if np.isfinite(r2[u]) else -np.inf) for u in AGE_UNITS}
    strict: tuple[dict, dict, dict, dict] = ({}, {}, {}, {})
    if all(s.recall_strict for s in sessions):  # its own stream: the verbatim draws stay as they were
        strict = _recall_fits(sessions, bootstrap, np.random.default_rng(seed + 1), detector="strict")
    return Calibration(
        sessions=tuple(sessions), skipped=tuple(skipped),
        v_tokens=bootstrap_estimate([s.v_tokens for s in with_usage if s.v_tokens is not None], np.median, bootstrap, rng),
        calls_per_turn=calls,
        avg_tokens=bootstrap_estimate([s.avg_tokens for s in with_usage if s.avg_tokens is not None], np.median, bootstrap, rng),
        summary_tokens=bootstrap_estimate([n for s in sessions for n in s.summary_tokens], np.median, bootstrap, rng),
        token_ratios=ratios, recall_l=l_used, recall=pooled, recall_fits=fits, recall_session_r2=r2,
        recall_age=max(AGE_UNITS, key=lambda u: scores[u]), bootstrap=bootstrap, recall_draws=draws,
        recorded_summaries={tool: tuple(n) for tool, n in sorted(summaries.items())}, survival=survival, idle=idle,
        recall_strict=strict[0], recall_fits_strict=strict[1], recall_session_r2_strict=strict[2],
    )


def env_lines(calibration: Calibration, detector: str = "verbatim") -> list[str]:
    """``export DP_…=…`` lines for the calibrated settings (recall, V, L; a token ratio for one family).

    ``detector``: whose recall curve (q0, τ) the lines set (:data:`DETECTORS`; ``strict`` makes the
    planner expect the loss the strict detector charges, DESIGN §9). A value that could not be measured is a ``#`` note instead of a line (never ``nan``); a
    calibration from one session opens with a note that its values are weak estimates.
    """
    fits = calibration.fits_for(detector)[1] or calibration.recall_fits
    _, q0, tau = fits[calibration.recall_age]
    if np.isfinite(q0.value) and np.isfinite(tau.value):
        lines = [f"export DP_RECALL_AGE={calibration.recall_age}", f"export DP_RECALL_Q0={q0.value:.3g}",
                 f"export DP_RECALL_TAU={tau.value:.3g}"]
    else:
        lines = ["# DP_RECALL_AGE, DP_RECALL_Q0, DP_RECALL_TAU: no recall fit (too few observed ages); shipped values kept"]
    if calibration.v_tokens is not None:
        lines.append(f"export DP_V={round(calibration.v_tokens.value, -2):.0f}")
    if calibration.calls_per_turn is not None:  # the L the rounds unit was measured with (0: per session)
        lines.append(f"export DP_L={calibration.recall_l or 0:g}")
    if len(calibration.token_ratios) == 1:
        (ratio,) = calibration.token_ratios.values()
        lines.append(f"export DP_TOKEN_RATIO={ratio.value:.3g}")
    if calibration.survival is not None:
        alpha, scale = calibration.survival
        lines += [f"export DP_SURVIVAL_ALPHA={alpha.value:.3g}", f"export DP_SURVIVAL_SCALE={scale.value:.3g}"]
    if len(calibration.sessions) < 2:
        lines.insert(0, "# one session: every value below is a weak estimate (no spread between sessions)")
    return lines

