"""DP_MODEL=seed with --tokenizer bytes4 reproduces the seed's reference planner (DESIGN §2).

../shared/reference/golden_seed_model.json holds the original planner's decisions under nine
settings profiles. Its ``about`` names two intended differences, both asserted here:
dp_compact evaluates the benefit at the aligned (feasible) cut, and applies the forced
fallback, always at a feasible cut, where the original did not.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dp_compact.core import _reference
from dp_compact.api import plan_session
from dp_compact.core.benefit import BenefitInputs, net_benefit
from dp_compact.pricing import Prices
from dp_compact.sessions import read_session
from dp_compact.settings import load_settings
from tests.conftest import REFERENCE


def _golden_cases() -> list[dict]:
    path = REFERENCE / "golden_seed_model.json"
    if not path.exists():
        return []
    return json.loads(path.read_text())["cases"]


def _settings_for(env: dict[str, str]):
    return load_settings(
        model="seed", tokenizer="bytes4", p_input=float(env["DP_P_INPUT"]), p_cache=float(env["DP_P_CACHE"]),
        p_out=float(env["DP_P_OUT"]), v=int(env["DP_V"]), s=int(env["DP_S"]), l=float(env["DP_L"]),
        baseline_e=int(env["DP_BASELINE_E"]), e_fixed=float(env["DP_E_FIXED"]), r=float(env["DP_R"]),
        beta=float(env["DP_BETA"]), quality_penalty=float(env["DP_QUALITY_PENALTY"]),
        min_keep_ratio=float(env["DP_MIN_KEEP_RATIO"]), max_context_tokens=int(env["MAX_CONTEXT_TOKENS"]),
    )


def _plan(case: dict, tmp_path: Path):
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({key.split("_", 1)[1]: value for key, value in case["stats"].items()}))
    session = read_session(REFERENCE / case["file"], stats=stats)
    return session, plan_session(session, _settings_for(case["env"]), use_cache=False)


CASES = _golden_cases()


@pytest.mark.skipif(not CASES, reason="../shared/reference is absent")
@pytest.mark.parametrize("case", CASES, ids=[f"{c['file'].split('/')[-1][:3]}-{c['profile'][:2]}" for c in CASES])
def test_seed_model_reproduces_reference_decision(case, tmp_path):
    session, plan = _plan(case, tmp_path)
    expected = case["expected_keep"]
    over = case["forced_fallback"]["ct_over_90pct"]
    if plan.decision == "compact":
        assert _reference.is_feasible_cut(session.messages, plan.cut, user_turns_only=True)
    if expected > 0 and plan.rule == "benefit":
        assert plan.k == expected
    elif expected > 0:
        # Intended difference 1: the benefit is evaluated at the aligned cut itself.
        assert plan.best_candidate is not None and plan.best_candidate["k"] == expected
        assert plan.best_candidate["net"] <= 0 < case["internals_at_best_k"]["best_benefit"]
        assert plan.rule == ("force" if over else "no-benefit")
    elif over and plan.n_feasible_cuts:
        # Intended difference 2: the forced fallback applies, at a feasible cut.
        assert (plan.decision, plan.rule) == ("compact", "force")
    else:
        assert plan.decision == "keep"


@pytest.mark.skipif(not CASES, reason="../shared/reference is absent")
@pytest.mark.parametrize("case", [c for c in CASES if c["internals_at_best_k"]], ids=lambda c: f"{c['file'][14:17]}-{c['profile'][:2]}")
def test_seed_model_internals_match_reference(case, tmp_path):
    session, plan = _plan(case, tmp_path)
    ref = case["internals_at_best_k"]
    est = plan.estimates
    assert (est.expected_turns, est.calls_per_turn, est.remaining_calls) == (ref["E"], ref["L"], ref["R"])
    assert est.avg_tokens == pytest.approx(ref["avg"])
    blank_lines = ref["NR"] - len(session.messages)  # blank lines are lines to the seed, not messages
    assert plan.total_tokens + blank_lines == ref["total_tokens"]
    env = case["env"]
    prices = Prices("seed", float(env["DP_P_INPUT"]), float(env["DP_P_CACHE"]), float(env["DP_P_OUT"]), None,
                    int(env["MAX_CONTEXT_TOKENS"]), "golden")
    inputs = BenefitInputs(int(env["DP_V"]), int(env["DP_S"]), int(env["MAX_CONTEXT_TOKENS"]), ref["total_tokens"],
                           ref["R"], ref["avg"], est.compactions, float(env["DP_BETA"]), float(env["DP_R"]),
                           float(env["DP_QUALITY_PENALTY"]))
    terms = net_benefit(np.array([0]), np.array([ref["K"]]), prices=prices, inputs=inputs)
    assert terms.savings[0] == pytest.approx(ref["t1_savings"], abs=1e-9)
    assert terms.cache_miss[0] == pytest.approx(ref["t2_cache_miss"], abs=1e-9)
    assert terms.compact_cost[0] == pytest.approx(ref["t3_compact_cost"], abs=1e-9)
    assert terms.info_loss[0] == pytest.approx(ref["info_loss"], abs=1e-9)
    assert terms.quality[0] == pytest.approx(ref["t5_quality_signed"], abs=1e-9)
    assert terms.net[0] == pytest.approx(ref["best_benefit"], abs=1e-9)
