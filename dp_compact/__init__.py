"""dp_compact: decide whether compacting an LLM agent conversation pays now, and how much to keep.

Names are imported on first use (PEP 562), so ``import dp_compact`` and the command line's
start-up stay light; ``dp_compact.plan_file`` and the rest behave as ordinary attributes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "PROFILES",
    "DpCompactError",
    "MalformedLineError",
    "Message",
    "NoFeasibleCutError",
    "NotASessionError",
    "Plan",
    "Prices",
    "Session",
    "SessionError",
    "Settings",
    "SettingsError",
    "UnknownFormatError",
    "UnknownProfileError",
    "get_prices",
    "list_profiles",
    "load_settings",
    "plan",
    "plan_file",
    "plan_session",
    "read_session",
    "resolve_prices",
]

_WHERE = {
    "plan_file": "api", "plan_session": "api", "resolve_prices": "api",
    "DpCompactError": "errors", "MalformedLineError": "errors", "NoFeasibleCutError": "errors",
    "NotASessionError": "errors", "SessionError": "errors", "SettingsError": "errors",
    "UnknownFormatError": "errors", "UnknownProfileError": "errors",
    "Plan": "core.planner", "plan": "core.planner",
    "PROFILES": "pricing", "Prices": "pricing", "get_prices": "pricing", "list_profiles": "pricing",
    "Message": "sessions", "Session": "sessions", "read_session": "sessions",
    "Settings": "settings", "load_settings": "settings",
}

if TYPE_CHECKING:
    from dp_compact.api import plan_file, plan_session, resolve_prices
    from dp_compact.errors import (
        DpCompactError, MalformedLineError, NoFeasibleCutError, NotASessionError, SessionError,
        SettingsError, UnknownFormatError, UnknownProfileError,
    )
    from dp_compact.core.planner import Plan, plan
    from dp_compact.pricing import PROFILES, Prices, get_prices, list_profiles
    from dp_compact.sessions import Message, Session, read_session
    from dp_compact.settings import Settings, load_settings


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use."""
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'dp_compact' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"dp_compact.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Public names, including those not imported yet."""
    return sorted(set(globals()) | set(__all__))
