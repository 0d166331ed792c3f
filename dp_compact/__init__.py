"""dp_compact: decide whether compacting an LLM agent conversation pays now, and how much to keep."""

from dp_compact.api import plan_file, plan_session, resolve_prices
from dp_compact.errors import (
    DpCompactError,
    MalformedLineError,
    NoFeasibleCutError,
    NotASessionError,
    SessionError,
    SettingsError,
    UnknownFormatError,
    UnknownProfileError,
)
from dp_compact.planner import Plan, plan
from dp_compact.pricing import PROFILES, Prices, get_prices, list_profiles
from dp_compact.sessions import Message, Session, read_session
from dp_compact.settings import Settings, load_settings

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
