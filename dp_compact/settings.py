"""Settings of DESIGN §3: ``DP_*`` variables read with pydantic-settings.

Precedence (DESIGN §3): command-line flag > ``DP_*`` environment variable > ``.env`` file >
pricing profile > default. Flags arrive as keyword arguments of :func:`load_settings` (only
the flags a user gave); prices left ``None`` here are filled from the profile by
:func:`dp_compact.pricing.get_prices` in the planner's shell.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from dp_compact.errors import SettingsError

__all__ = ["DEFAULT_PROVIDER", "Settings", "load_settings"]

#: DESIGN §3: the default pricing profile.
DEFAULT_PROVIDER = "claude-sonnet-4"


class Settings(BaseSettings):
    """Every ``DP_*`` variable of DESIGN §3, validated; immutable.

    Prices are in $/MTok, sizes in tokens. ``None`` prices and window mean "from the profile".
    Defaults are DESIGN §3's, except ``recall_q0`` / ``recall_tau``: provisional values of
    DESIGN §2's worked check (q0 = 0.9, τ = 3 user turns) until calibration replaces them.
    """

    model_config = SettingsConfigDict(
        env_prefix="DP_", env_file=".env", env_file_encoding="utf-8", frozen=True, extra="ignore"
    )

    provider: str = Field(DEFAULT_PROVIDER, min_length=1, description="pricing profile or model name")
    p_input: float | None = Field(None, gt=0, description="$/MTok uncached input")
    p_cache: float | None = Field(None, ge=0, description="$/MTok cache read")
    p_out: float | None = Field(None, ge=0, description="$/MTok output")
    p_cache_write: float | None = Field(None, ge=0, description="$/MTok cache write")
    max_context_tokens: int | None = Field(None, gt=0, description="context window M")
    v: int = Field(5000, ge=0, description="fixed prefix tokens V")
    s: int = Field(500, gt=0, description="summary tokens S")
    l: float = Field(5.0, ge=0, description="LLM calls per user turn (0 = measure)")  # noqa: E741
    baseline_e: int = Field(8, ge=0, description="baseline user turns")
    e_fixed: float = Field(0.0, ge=0, description="fixed E (0 = off)")
    r: float = Field(0.8, gt=0, le=1, description="retention per summary")
    beta: float = Field(0.03, ge=0, description="information-loss factor")
    quality_penalty: float = Field(0.2, ge=0, description="QP")
    min_keep_ratio: float = Field(0.25, gt=0, le=1, description="least share of messages kept")
    force_ratio: float = Field(0.9, gt=0, le=1, description="forced-compaction share of M")
    model: Literal["recall", "seed"] = Field("recall", description="cost model")
    recall_q0: float = Field(0.9, ge=0, le=1, description="recall probability of a message now")
    recall_tau: float = Field(3.0, gt=0, description="recall decay, user turns")
    recall_age: Literal["rounds", "turns"] = Field(
        "rounds", description="age a_j: API rounds divided by L (user-turn equivalents), or user turns"
    )
    tokenizer: Literal["tiktoken", "bytes4"] = Field("tiktoken", description="message token counter")

    def explicit_provider(self) -> bool:
        """True when the provider was given by a flag, ``DP_PROVIDER`` or ``.env``."""
        return "provider" in self.model_fields_set


def load_settings(**flags: Any) -> Settings:
    """Build :class:`Settings` from flags, ``DP_*`` variables, ``.env`` and defaults.

    Parameters
    ----------
    **flags
        Command-line values by field name (``provider=``, ``e_fixed=``, ...). ``None`` values
        are dropped, so that an option the user did not give never outranks ``DP_*``.

    Returns
    -------
    Settings

    Raises
    ------
    SettingsError
        On the first invalid value; names the variable (``DP_P_INPUT``), the value and the rule.
    """
    given = {key: value for key, value in flags.items() if value is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else "?"
        raise SettingsError(f"DP_{field.upper()}", error.get("input"), error["msg"]) from None
