"""Calibration of the cost model's inputs from real transcripts (DESIGN §2, §3, §7).

From every session file with usage records: the fixed prefix V (the first call's prompt minus
its messages), L (LLM calls per user turn), avg (prompt tokens per call), the summary sizes S of
the compactions the file records, and the ratio of provider-reported prompt tokens to our cl100k
estimate (per provider family). From every session file: the recall curve q(a) in both age units
of ``DP_RECALL_AGE``, counted with the replay judge's own detector of later uses
(:func:`dp_compact.measure.reuse.find_uses`, DESIGN §6) and fitted by q0 · exp(−a / τ), and the
survival of session lengths. Spreads are bootstraps over sessions.

A wing beside the core: it reads the core (cuts, estimation, reuse, tokens) and the readers,
and nothing in the cost model, the cuts, the estimation or the planner reads it. Modules:
:mod:`~dp_compact.calibration.history` (a file's segments between compaction markers),
:mod:`~dp_compact.calibration.measures` (what one file says),
:mod:`~dp_compact.calibration.recall` (the recall curve and its fit),
:mod:`~dp_compact.calibration.fit` (bootstrap estimates, the survival fit) and
:mod:`~dp_compact.calibration.results` (the pooled :class:`Calibration`).

Everything here is a function of the files it is given; nothing is written.
"""

from __future__ import annotations

from dp_compact.calibration.fit import Estimate, fit_survival
from dp_compact.calibration.history import CompactionMarker, History, history_of, read_history
from dp_compact.calibration.measures import AGE_UNITS, SessionMeasures, judged_messages, measure_session, planner_calls_per_turn
from dp_compact.calibration.recall import MAX_AGE_BINS, MIN_BIN_MESSAGES, RecallCounts, RecallFit, fit_exponential, recall_counts
from dp_compact.calibration.results import DEFAULT_BOOTSTRAP, Calibration, calibrate, env_lines, pool_sessions, session_paths

__all__ = [
    "AGE_UNITS",
    "DEFAULT_BOOTSTRAP",
    "MAX_AGE_BINS",
    "MIN_BIN_MESSAGES",
    "Calibration",
    "CompactionMarker",
    "Estimate",
    "History",
    "RecallCounts",
    "RecallFit",
    "SessionMeasures",
    "calibrate",
    "pool_sessions",
    "env_lines",
    "fit_exponential",
    "fit_survival",
    "history_of",
    "judged_messages",
    "measure_session",
    "planner_calls_per_turn",
    "read_history",
    "recall_counts",
    "session_paths",
]
