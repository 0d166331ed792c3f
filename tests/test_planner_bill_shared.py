"""dp against the hindsight oracle on the shared real sessions (DESIGN §6, §8, §9).

With loss charged (``--loss refetch``) and every request at the replay's bill (dated prices,
tiers, write mix, TTL, the measured cache-hit share, forced compactions on overflow), over the
shared sessions:

- verbatim detector: dp at most :data:`GOAL_VERBATIM` × the oracle. It was 1.05 while the oracle
  could only compact; the oracle now also clears old tool results (its total fell from $48.24 to
  $47.92) and the planner no longer compacts down to one API round when that saves less than it
  loses (DESIGN §9; dp $50.14 → $50.46), so 1.053 measured on 2026-12-06; the look-ahead then
  priced a refetch as the replay charges it (DESIGN §6: a short output, the message written to the
  cache; dp $50.46 → $50.20), 1.048;
- strict detector (DESIGN §9 judges the planner under it): at most :data:`BOUND_STRICT` × the
  oracle (1.104 measured on 2026-12-06, 1.100 with the refetch priced as the replay charges it),
  against the goal of 1.05 that it does not reach yet (a strict expected failure records it;
  docs/calibration.md lists what else was tried).

Slow (two folder replays, 10-60 s with two workers); skipped without ../shared/sessions.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dp_compact.fleet.jobs import replay_directory
from dp_compact.settings import load_settings

SESSIONS = Path(__file__).resolve().parents[2] / "shared" / "sessions"
GOAL_VERBATIM = 1.06
BOUND_STRICT = 1.12
GOAL_STRICT = 1.05

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not SESSIONS.exists(), reason="../shared/sessions is absent")]


def _totals(detector: str) -> dict[str, float]:
    report = replay_directory(SESSIONS, load_settings(), ["dp", "oracle"], workers=2, detector=detector)
    return {row["policy"]: row["total_usd"] for row in report.totals()}


@pytest.fixture(scope="module")
def totals() -> dict[str, float]:
    return _totals("verbatim")


@pytest.fixture(scope="module")
def strict() -> dict[str, float]:
    return _totals("strict")


def test_dp_near_the_oracle_with_loss_charged(totals: dict[str, float]):
    assert totals["dp"] <= GOAL_VERBATIM * totals["oracle"], f"dp / oracle = {totals['dp'] / totals['oracle']:.4f}"


def test_dp_never_beats_the_oracle(totals: dict[str, float], strict: dict[str, float]):
    assert totals["dp"] >= totals["oracle"] - 1e-6
    assert strict["dp"] >= strict["oracle"] - 1e-6


def test_dp_under_the_strict_detector_stays_within_its_measured_bound(strict: dict[str, float]):
    assert strict["dp"] <= BOUND_STRICT * strict["oracle"], f"dp / oracle = {strict['dp'] / strict['oracle']:.4f}"


@pytest.mark.xfail(strict=True, reason="DESIGN §9's goal under the strict detector (1.05 x the oracle) is not reached: 1.100 "
                   "measured; most of the gap is loss, the oracle keeping exactly the messages named again later")
def test_dp_within_five_percent_of_the_oracle_under_the_strict_detector(strict: dict[str, float]):
    assert strict["dp"] <= GOAL_STRICT * strict["oracle"]
