"""``calibrate`` fits the recall curve under both detectors (DESIGN §9) and ships both."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dp_compact.calibration import calibrate, env_lines, judged_messages
from dp_compact.calibration.history import read_history
from dp_compact.calibration.measures import measure_session
from dp_compact.measure.reuse import find_uses
from dp_compact.settings import load_settings

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "dp_compact" / "examples" / "session.jsonl"


def test_strict_counts_at_least_the_verbatim_uses():
    """Every verbatim or file-edit use is also a strict one: q(a) under strict is never below."""
    measures = measure_session(read_history(EXAMPLE))
    for unit, counts in measures.recall.items():
        strict = measures.recall_strict[unit]
        assert np.array_equal(strict.observed, counts.observed)
        assert (strict.needed >= counts.needed - 1e-9).all()
    judged = judged_messages(read_history(EXAMPLE).live)
    assert len(find_uses(judged, detector="strict")) >= len(find_uses(judged))


def test_calibration_reports_and_exports_both_curves():
    result = calibrate([EXAMPLE], bootstrap=5)
    data = result.to_dict()
    assert set(data["recall_strict"]) == set(data["recall"])
    assert "strict" in data["recall_strict_detector"]["rule"]
    verbatim = dict(line.removeprefix("export ").split("=") for line in env_lines(result) if line.startswith("export DP_RECALL"))
    strict = dict(line.removeprefix("export ").split("=") for line in env_lines(result, "strict") if line.startswith("export DP_RECALL"))
    unit = result.recall_age
    if np.isfinite(result.recall_fits_strict[unit][1].value):
        assert float(strict["DP_RECALL_Q0"]) == pytest.approx(result.recall_fits_strict[unit][1].value, rel=1e-2)
    assert float(verbatim["DP_RECALL_Q0"]) == pytest.approx(result.recall_fits[unit][1].value, rel=1e-2)


def test_shipped_results_carry_both_curves_and_the_default_is_the_verbatim_fit():
    """results.json ships both fits; the planner's default is the verbatim one (docs/calibration.md
    "Which curve the planner uses by default" gives the replay evidence)."""
    results = json.loads((REPO / "calibration" / "results.json").read_text(encoding="utf-8"))
    unit = results["recall_age"]
    strict, verbatim = results["recall_strict"][unit], results["recall"][unit]
    assert strict["q0"]["value"] > verbatim["q0"]["value"]  # the strict detector finds more later uses
    settings = load_settings()
    assert settings.recall_q0 == pytest.approx(verbatim["q0"]["value"], rel=0.02)
    assert settings.recall_tau == pytest.approx(verbatim["tau"]["value"], rel=0.02)
