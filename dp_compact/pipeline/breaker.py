"""Circuit breaker for summary failures (DESIGN §5.5; seeds/002: ``CompactCircuitBreaker``).

After ``FAILURE_THRESHOLD`` consecutive failed summaries of one session, compaction of that
session is paused: :meth:`CircuitBreaker.check` raises :class:`~dp_compact.errors.CircuitOpenError`
until ``COOLDOWN_S`` seconds have passed since the last failure (then one attempt is let
through: success closes the breaker, failure opens it again) or until :meth:`reset`. This stops
an agent hook from paying for the same failing summary request after every LLM call.

State is one small JSON file, ``breaker.json`` under the user state directory (platformdirs
``user_state_dir("dp-compact")``, i.e. ``$XDG_STATE_HOME/dp-compact``), mapping the resolved
session path to ``{"failures": n, "last_failure": unix seconds, "last_error": text}``. It is
written atomically; an unreadable file counts as empty (the breaker never blocks on its own
bookkeeping). This is IO: only the orchestrator's shell uses it.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dp_compact.errors import CircuitOpenError
from dp_compact.io import write_atomic

__all__ = ["COOLDOWN_S", "FAILURE_THRESHOLD", "CircuitBreaker", "default_state_path"]

FAILURE_THRESHOLD = 3  # consecutive failures that open the breaker (seeds/002: max_failures = 3)
COOLDOWN_S = 600.0  # seconds the breaker stays open after the last failure


def default_state_path() -> Path:
    """``breaker.json`` under the user state directory (platformdirs)."""
    from platformdirs import user_state_dir

    return Path(user_state_dir("dp-compact")) / "breaker.json"


class CircuitBreaker:
    """Counts consecutive summary failures per session and refuses work when open.

    Parameters
    ----------
    path : Path, optional
        State file; default :func:`default_state_path`.
    threshold : int
        Consecutive failures that open the breaker.
    cooldown_s : float
        Seconds after the last failure before one attempt is allowed again.
    clock : callable
        Returns the time in seconds (``time.time``; tests pass a fake).
    """

    def __init__(
        self,
        path: Path | str | None = None,
        *,
        threshold: int = FAILURE_THRESHOLD,
        cooldown_s: float = COOLDOWN_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path) if path is not None else default_state_path()
        self.threshold, self.cooldown_s, self.clock = threshold, cooldown_s, clock

    @staticmethod
    def key(session_path: Path | str) -> str:
        """The state key of a session: its resolved path."""
        return str(Path(session_path).resolve())

    def _load(self) -> dict[str, Any]:
        """The state file's content ({} when missing or unreadable)."""
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save(self, data: dict[str, Any]) -> None:
        """Write the state atomically; failures to write are ignored (bookkeeping only)."""
        with contextlib.suppress(OSError):
            write_atomic(self.path, json.dumps(data).encode("utf-8"))

    def failures(self, session_path: Path | str) -> int:
        """Consecutive failures recorded for the session."""
        entry = self._load().get(self.key(session_path)) or {}
        return int(entry.get("failures", 0))

    def check(self, session_path: Path | str) -> None:
        """Raise :class:`CircuitOpenError` when the breaker is open for this session."""
        entry = self._load().get(self.key(session_path)) or {}
        failures = int(entry.get("failures", 0))
        waited = self.clock() - float(entry.get("last_failure", 0.0))
        if failures >= self.threshold and waited < self.cooldown_s:
            raise CircuitOpenError(
                f"{session_path}: compaction paused after {failures} consecutive summary failures "
                f"(last: {entry.get('last_error', '?')}); retry in {self.cooldown_s - waited:.0f} s "
                "or run with --reset-breaker"
            )

    def record_failure(self, session_path: Path | str, error: str) -> int:
        """Count one more failure; returns the consecutive failures now recorded."""
        data = self._load()
        key = self.key(session_path)
        failures = int((data.get(key) or {}).get("failures", 0)) + 1
        data[key] = {"failures": failures, "last_failure": self.clock(), "last_error": error[:300]}
        self._save(data)
        return failures

    def record_success(self, session_path: Path | str) -> None:
        """Close the breaker for the session (forget its failures)."""
        self.reset(session_path)

    def reset(self, session_path: Path | str) -> None:
        """Forget the session's failures."""
        data = self._load()
        if data.pop(self.key(session_path), None) is not None:
            self._save(data)
