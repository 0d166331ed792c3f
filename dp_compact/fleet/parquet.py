"""Fleet results as Parquet (pyarrow, no pandas), written atomically.

Replay (:func:`replay_table`): one row per session and policy, columns

``path, format``, ``v_tokens`` (int: the fixed prefix V charged to every policy of the session,
tokens), ``v_source`` (where V comes from: ``measured`` from the session's usage records,
``recorded`` by an earlier dp-compact compaction or shrink in the file, ``setting`` given as
``DP_V`` / ``--v``, or the ``default`` ``DP_V``), ``warm_tokens`` (int: the
tokens of V the first recorded call found cached, which every policy starts with), ``detector``
(the lost-information detector the row's loss was charged under: ``verbatim`` or ``strict``; under
``--detector both`` each policy has one row per detector), ``policy, fixed,
total_usd, cache_read_usd, input_usd, write_usd, output_usd, compaction_usd, loss_usd,
floor_usd`` ($), ``calls, compactions, overflows, truncations, refetches, summary_tokens,
peak_context_tokens`` (int), ``mean_context_tokens`` (float, tokens), ``error`` (null). A
session that failed has one row: its ``path`` and ``error``, every other column null. Terms as
:class:`dp_compact.replay.meter.PolicyResult` (DESIGN §6).

Calibration (:func:`calibration_table`): one row per session, the columns of
:meth:`dp_compact.calibration.SessionMeasures.row` (``summary_tokens`` a list of int) and
``error``; a skipped session has its ``path`` and ``error`` only.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dp_compact.calibration import Calibration
from dp_compact.io import write_atomic
from dp_compact.replay.shell import DirectoryReplay

__all__ = ["CALIBRATION_COLUMNS", "REPLAY_COLUMNS", "calibration_table", "replay_table", "write_parquet"]

_MONEY = ("total_usd", "cache_read_usd", "input_usd", "write_usd", "output_usd", "compaction_usd", "loss_usd", "floor_usd")
_COUNTS = ("calls", "compactions", "overflows", "truncations", "refetches", "summary_tokens", "peak_context_tokens")
#: Replay columns and their Arrow types (names of :func:`pyarrow` type constructors).
REPLAY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("path", "string"), ("format", "string"), ("v_tokens", "int64"), ("v_source", "string"), ("warm_tokens", "int64"),
    ("detector", "string"), ("policy", "string"),
    ("fixed", "bool_"), *((name, "float64") for name in _MONEY), *((name, "int64") for name in _COUNTS),
    ("mean_context_tokens", "float64"), ("error", "string"),
)
#: Calibration columns and their Arrow types (``list_int64``: a list of int64).
CALIBRATION_COLUMNS: tuple[tuple[str, str], ...] = (
    ("path", "string"), ("format", "string"), ("family", "string"), ("model", "string"), ("n_messages", "int64"),
    ("user_turns", "int64"), ("llm_calls", "int64"), ("v_tokens", "float64"), ("calls_per_turn", "float64"),
    ("avg_tokens", "float64"), ("token_ratio", "float64"), ("summary_tokens", "list_int64"), ("recall_l", "float64"),
    ("judged_messages", "int64"), ("verbatim_uses", "int64"), ("file_edit_uses", "int64"), ("calls_placed", "int64"),
    ("error", "string"),
)


def replay_rows(result: DirectoryReplay) -> list[dict[str, Any]]:
    """Rows of :func:`replay_table` as dicts (sessions in path order, then the skipped ones; under
    ``--detector both`` a session's verbatim rows, then its strict ones)."""
    rows: list[dict[str, Any]] = []
    for session in result.sessions:
        runs = [(run.detector, run.results) for run in session.by_detector] or [(session.detector, session.results)]
        for detector, results in runs:
            for r in results:
                row: dict[str, Any] = {"path": session.path, "format": session.format, "v_tokens": session.params.v_tokens,
                                       "v_source": session.params.v_source, "warm_tokens": session.params.warm_tokens,
                                       "detector": detector, "policy": r.policy, "fixed": r.fixed}
                row.update({name: getattr(r, name) for name in (*_MONEY, *_COUNTS, "mean_context_tokens")})
                row["error"] = None
                rows.append(row)
    rows.extend({"path": path, "error": reason} for path, reason in result.skipped)
    return rows


def calibration_rows(calibration: Calibration, failures: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """Rows of :func:`calibration_table` as dicts (measured sessions in input order, then failures)."""
    rows = [{**s.row(), "error": None} for s in calibration.sessions]
    rows.extend({"path": path, "error": reason} for path, reason in failures)
    return rows


def _table(rows: list[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> Any:
    """A ``pyarrow.Table`` of ``rows`` with ``columns``' types (missing values null)."""
    import pyarrow as pa

    types = {"string": pa.string(), "bool_": pa.bool_(), "float64": pa.float64(), "int64": pa.int64(),
             "list_int64": pa.list_(pa.int64())}
    schema = pa.schema([(name, types[kind]) for name, kind in columns])
    return pa.table({name: [row.get(name) for row in rows] for name, _ in columns}, schema=schema)


def replay_table(result: DirectoryReplay) -> Any:
    """The replay of a fleet as a ``pyarrow.Table`` (module docstring)."""
    return _table(replay_rows(result), REPLAY_COLUMNS)


def calibration_table(calibration: Calibration, failures: Sequence[tuple[str, str]] = ()) -> Any:
    """The per-session calibration measures as a ``pyarrow.Table`` (module docstring)."""
    return _table(calibration_rows(calibration, failures), CALIBRATION_COLUMNS)


def write_parquet(table: Any, path: Path | str) -> Path:
    """Write ``table`` to ``path`` as Parquet, atomically (:func:`dp_compact.io.write_atomic`).

    Raises
    ------
    OSError
        The folder or file cannot be written (``path`` is left as it was).
    ImportError
        Without pyarrow (the ``dask`` extra).
    """
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return write_atomic(path, buffer.getvalue())
