"""Shared fixtures: a clean DP_* environment, a temporary working directory, shared/ paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from tests.hot_helpers import env, server  # noqa: F401  the hot-path tests' fixtures (a runtime folder, a plan server)

# CI runs the property tests on a fixed sequence of examples, so that a run is reproducible.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SESSIONS = SHARED / "sessions"
CASES = SHARED / "cases"
REFERENCE = SHARED / "reference"


def need(path: Path) -> Path:
    """``path``, or skip the test when ../shared is absent."""
    if not SHARED.exists():
        pytest.skip(f"{SHARED} is absent (tests on shared data need ../shared beside the checkout)")
    if not path.exists():
        pytest.skip(f"{path} is absent from ../shared")
    return path


def session_files() -> list[Path]:
    """Every real session file under ../shared/sessions (empty when absent)."""
    if not SESSIONS.exists():
        return []
    from dp_compact.io import session_files as walk

    return walk(SESSIONS)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No DP_* variable leaks in, no .env is read from the checkout, caches and state go to tmp."""
    for name in list(os.environ):
        if name.startswith("DP_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the compaction circuit breaker
    monkeypatch.setenv("NO_DP_COMPACT_SERVER", "1")  # no resident plan server outlives a test (tests/test_plan_server.py starts its own)
