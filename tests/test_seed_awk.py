"""bench/seed_planner.awk, the seed's original planner written again, decides as the golden does.

The benchmark (bench/bench_seed_awk.py) times ``dp-compact plan`` against this awk, so the awk
must be the seed's planner: every decision and every value at the best k of
../shared/reference/golden_seed_model.json, under both ways of summing K. ``dp-compact plan``
with the seed's settings (DP_MODEL=seed, DP_TOKENIZER=bytes4) makes the same decisions but
where it applies the forced fallback, which the original awk leaves to agent.sh (the golden's
``about``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REFERENCE, REPO
from tests.test_reference_seed import CASES, _plan

AWK = shutil.which("awk", path="/usr/bin")
SCRIPT = REPO / "bench" / "seed_planner.awk"

pytestmark = [
    pytest.mark.skipif(AWK is None, reason="/usr/bin/awk is absent"),
    pytest.mark.skipif(not CASES, reason="../shared/reference is absent"),
]


def awk_plan(case: dict, *, running: bool = False, forced: bool = False) -> tuple[int, dict[str, float]]:
    """The awk's decision (lines kept, 0 = do not compact) and its values at the best k."""
    stats = case["stats"]
    variables = {"t": stats["s0_current_turn_count"], "calls": stats["s1_agent_request_count"],
                 "c": stats["s2_compact_request_count"], "total_input": stats["s3_total_input_tokens"],
                 "ct": stats["s7_current_context_tokens"], "debug": 1, "running": int(running), "forced": int(forced)}
    args = [AWK, "-f", str(SCRIPT)]
    for name, value in variables.items():
        args += ["-v", f"{name}={value}"]
    env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C", **case["env"]}
    done = subprocess.run([*args, str(REFERENCE / case["file"])], capture_output=True, text=True, env=env, check=True, timeout=60)
    internals = {key: float(value) for key, value in (item.split("=") for item in done.stderr.split())}
    return int(done.stdout), internals


def _ids(cases: list[dict]) -> list[str]:
    return [f"{c['file'].split('/')[-1][:3]}-{c['profile'][:2]}" for c in cases]


@pytest.mark.parametrize("running", [False, True], ids=["quadratic", "running-sum"])
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_awk_reproduces_golden(case, running):
    keep, internals = awk_plan(case, running=running)
    assert keep == case["expected_keep"]
    ref = case["internals_at_best_k"]
    if ref is None:  # an empty file
        assert "best_k" not in internals
        return
    for key, value in ref.items():
        if key != "max_keep":  # NR, the upper end of the scan
            assert internals[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_awk_decides_as_dp_compact_seed_model(case, tmp_path):
    keep, _ = awk_plan(case)
    _, plan = _plan(case, tmp_path)
    if plan.rule == "force":
        # dp-compact applies agent.sh's 90 % fallback itself; the awk leaves it to its caller.
        assert keep == 0 and case["forced_fallback"]["ct_over_90pct"]
    else:
        assert keep == (plan.k if plan.decision == "compact" else 0)


def test_awk_forced_fallback_option():
    """``-v forced=1`` is agent.sh's rule: keep max(3, NR · DP_MIN_KEEP_RATIO) lines when no k pays."""
    case = next(c for c in CASES if c["file"].endswith("d09_edge_blank_noeol_120.jsonl") and c["profile"].startswith("P7"))
    assert awk_plan(case)[0] == 0
    assert awk_plan(case, forced=True)[0] == max(3, int(121 * float(case["env"]["DP_MIN_KEEP_RATIO"])))


SEED_CLI_CASES = [c for c in CASES if c["file"].split("/")[-1][:3] in {"d01", "d05", "d08", "d09"} and c["profile"][:2] in {"P1", "P4", "P8"}]


@pytest.mark.slow
@pytest.mark.parametrize("case", SEED_CLI_CASES, ids=_ids(SEED_CLI_CASES))
def test_awk_decides_as_dp_compact_plan_command(case, tmp_path):
    """The whole command, as bench/bench_seed_awk.py runs it: the seed's variables as DP_*."""
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({key.split("_", 1)[1]: value for key, value in case["stats"].items()}))
    env = {**os.environ, "DP_MODEL": "seed", "DP_TOKENIZER": "bytes4"}
    env |= {("DP_MAX_CONTEXT_TOKENS" if name == "MAX_CONTEXT_TOKENS" else name): value for name, value in case["env"].items()}
    exe = Path(sys.executable).parent / "dp-compact"
    done = subprocess.run([str(exe), "plan", str(REFERENCE / case["file"]), "--stats", str(stats), "--json"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert (plan["k"] if plan["decision"] == "compact" else 0) == awk_plan(case)[0] == case["expected_keep"]
