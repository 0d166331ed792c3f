"""The settings of an earlier run, kept without pydantic (:class:`KeptSettings`).

Building :class:`dp_compact.settings.Settings` imports pydantic-settings (about 110 ms a
process). The hot path (:mod:`dp_compact.hot.main`) keeps, with each transcript's state, the
values a run's settings held and which were given, keyed by everything that made them
(:func:`settings_key`: every ``DP_*`` variable, the ``.env`` file of the working folder); a
run that finds the same key plans with :class:`KeptSettings`, which answers what the planner
asks of settings.
"""

from __future__ import annotations

import os
import sys
import types
from typing import Any

__all__ = ["KeptSettings", "install_lean_settings_module", "remove_lean_settings_module", "settings_key"]

#: The settings file pydantic-settings reads from the working folder (``dp_compact.settings.ENV_FILE``).
ENV_FILE = ".env"


def settings_key() -> bytes:
    """What the settings depend on besides flags: every ``DP_*`` variable (any case, as
    pydantic-settings matches them), the working folder's ``.env`` (its absolute path and bytes)."""
    variables = sorted((name, value) for name, value in os.environ.items() if name.upper().startswith("DP_"))
    try:
        with open(ENV_FILE, "rb") as handle:
            env_file: bytes | None = handle.read()
    except FileNotFoundError:
        env_file = None
    except OSError:
        env_file = b"\0unreadable"
    return repr((variables, os.path.abspath(ENV_FILE), env_file)).encode()


class KeptSettings:
    """A :class:`dp_compact.settings.Settings` as kept: its values, which of them were given
    (``model_fields_set``) and its ``model_dump()``; immutable.

    Answers attribute access, ``model_fields_set``, ``explicit_provider()``, ``model_dump()``
    (also ``exclude_unset``) and ``model_copy(update=...)`` as the model does (``model_copy``
    adds the updated names to the given ones, as pydantic does).
    """

    __slots__ = ("_values", "_given", "_dump")

    def __init__(self, values: dict[str, Any], given: frozenset[str], dump: dict[str, Any]) -> None:
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_given", frozenset(given))
        object.__setattr__(self, "_dump", dict(dump))

    @classmethod
    def of(cls, settings: Any) -> KeptSettings:
        """The kept form of a real :class:`~dp_compact.settings.Settings`."""
        names = type(settings).model_fields
        return cls({name: getattr(settings, name) for name in names}, frozenset(settings.model_fields_set), settings.model_dump())

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("settings are immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (KeptSettings, (self._values, self._given, self._dump))

    @property
    def model_fields_set(self) -> set[str]:
        """Names given by a flag, a ``DP_*`` variable or ``.env``."""
        return set(self._given)

    def explicit_provider(self) -> bool:
        """True when the provider was given (``Settings.explicit_provider``)."""
        return "provider" in self._given

    def model_dump(self, *, exclude_unset: bool = False) -> dict[str, Any]:
        """``Settings.model_dump()``: the cost settings (paths left out), a new dict."""
        return {k: v for k, v in self._dump.items() if not exclude_unset or k in self._given}

    def model_copy(self, *, update: dict[str, Any] | None = None) -> KeptSettings:
        """A copy with ``update`` applied (unvalidated, as ``BaseModel.model_copy``)."""
        update = dict(update or {})
        dump = {**self._dump, **{k: v for k, v in update.items() if k in self._dump}}
        return KeptSettings({**self._values, **update}, self._given | set(update), dump)


def _no_settings(**flags: Any) -> Any:
    """``load_settings`` of the stand-in module (imported by name, never called by the hot path):
    raises ImportError, which ends the hot path's run (the application's builds the settings)."""
    raise ImportError("the hot path's stand-in of dp_compact.settings builds no settings")


def install_lean_settings_module() -> bool:
    """Stand :class:`KeptSettings` in for ``dp_compact.settings`` while the planner's modules are
    imported, which name ``Settings`` in annotations only (and ``load_settings`` without calling it
    on the hot path's runs: the stand-in's raises ImportError); True when installed (False: the real
    module is loaded already). :func:`remove_lean_settings_module` undoes it."""
    if "dp_compact.settings" in sys.modules:
        return False
    module = types.ModuleType("dp_compact.settings", "Stand-in of dp_compact.settings for the hot path (dp_compact.hot.settings).")
    module.Settings = KeptSettings  # type: ignore[attr-defined]
    module.load_settings = _no_settings  # type: ignore[attr-defined]
    module.__lean__ = True  # type: ignore[attr-defined]
    sys.modules["dp_compact.settings"] = module
    return True


def remove_lean_settings_module() -> None:
    """Take the stand-in out, and every dp_compact module imported since that may hold it, so
    that the real modules load on the next import (a fallback to the whole command line)."""
    module = sys.modules.get("dp_compact.settings")
    if module is None or not getattr(module, "__lean__", False):
        return
    for name in [n for n in sys.modules if n.startswith("dp_compact.") and not n.startswith(("dp_compact.hot", "dp_compact.errors"))]:
        del sys.modules[name]
