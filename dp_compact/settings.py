"""Settings of DESIGN §3: ``DP_*`` variables read with pydantic-settings.

Precedence (DESIGN §3): command-line flag > ``DP_*`` environment variable > ``.env`` file >
pricing profile > default. Flags arrive as keyword arguments of :func:`load_settings` (only
the flags a user gave); prices left ``None`` here are filled from the profile by
:func:`dp_compact.pricing.get_prices` in the planner's shell.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from dp_compact.errors import SettingsError

__all__ = ["DEFAULT_PROVIDER", "ENV_FILE", "Settings", "check_env_file", "default_settings", "env_file_values", "load_settings", "variable_notes"]

#: DESIGN §3: the default pricing profile.
DEFAULT_PROVIDER = "claude-sonnet-4"


class Settings(BaseSettings):
    """Every ``DP_*`` variable of DESIGN §3, validated; immutable.

    Prices are in $/MTok, sizes in tokens. ``None`` prices and window mean "from the profile".
    Defaults are DESIGN §3's, except those calibrated from real transcripts (``calibration/``,
    ``dp-compact calibrate ../shared/sessions``; 10 sessions with usage records, 16 in all):

    - ``recall_q0`` = 0.034, ``recall_tau`` = 2.17, ``recall_age`` = ``rounds``
      (``calibration/results.json``, ``recall.rounds``): q(a), the chance that a message of age
      a is used later by the replay judge's own rule (:func:`dp_compact.measure.reuse.find_uses`, DESIGN
      §6: ≥ 200 characters repeated verbatim, or an edit/write of a file it holds the latest read
      of), was fitted by q0 · exp(−a / τ) with a in API rounds divided by the session's own L,
      as the planner counts it (bootstrap 5–95 %: q0 0.018–0.045, τ 1.65–3.56). q0 is the
      planner's q_j at age 0 as measured, no conversion. API rounds / L describe single sessions
      better than user turns (weighted R² 0.60 against 0.50; turns: q0 0.034, τ 2.0). The same
      curve under the strict detector (DESIGN §9; ``recall_strict`` in results.json) is q0 0.219,
      τ 1.98: ``dp-compact calibrate --env --detector strict`` exports it. The default is the
      verbatim curve, chosen from replay (docs/calibration.md "Which curve the planner uses"):
      under the strict judge the strict curve does no better (dp/oracle 1.137 against 1.136) and
      under the verbatim judge much worse (1.182 against 1.055).
    - ``v`` = 18,300 tokens: median of the first call's prompt minus its messages (5–95 %:
      11,300–21,900); DESIGN's 5,000 is below every agent measured. ``dp-compact plan`` and
      ``replay`` take each session's prefix as its own usage records measure it, and ``v`` only
      when it is given or the session measures none (:func:`dp_compact.measure.estimation.fixed_prefix`).
    - ``l`` = 0: L is measured per session (LLM calls / user turns), since it ranges from 3 to
      47 across the sessions; where it cannot be measured, the pooled 23 calls per user turn
      (5–95 %: 16–29) replaces DESIGN's 5 (:data:`dp_compact.measure.estimation.DEFAULT_CALLS_PER_TURN`).

    - ``min_verbatim_tokens`` = 0: the least the look-ahead keeps verbatim after a cut. Replayed
      over the shared sessions, every bound from 1,000 to 40,000 tokens raised dp's total under
      both loss detectors (dp / oracle 1.046 → 1.063 … 1.757 verbatim, 1.126 → 1.130 … 1.520
      strict; docs/cost-model.md "How little may be kept verbatim").
    - ``clear_tool_results`` = True: the look-ahead may also clear old tool results (DESIGN §9)
      instead of compacting; False where the agent cannot carry a clearing out (the Claude Code
      hooks turn it off).

    ``token_ratio`` None scales cl100k counts by the ratio measured from the session's own usage
    records when it has them, else by the calibrated factor of its provider family
    (:data:`dp_compact.measure.tokens.TOKEN_RATIOS`). Every other default is DESIGN's: the
    transcripts cannot measure E, β, r, QP or the ratios (no outcome of a compaction is
    recorded), and S is the size our summarizer is asked for.

    ``native`` = ``none``: dp carries out its own compactions and clearings. The adapters set it
    from their ``native=`` action; the look-ahead then prices that provider's action with its
    documented billing (:mod:`dp_compact.core.native_costs`, DESIGN §9).

    ``archive_dir`` (DESIGN §5.6) and ``breaker_path`` (the circuit breaker's state file, §5.5)
    say where the pipeline keeps its files; None means the user data and state directories
    (platformdirs). They are not cost settings, so ``model_dump()`` and plans leave them out.
    """

    model_config = SettingsConfigDict(
        env_prefix="DP_", env_file=".env", env_file_encoding="utf-8", frozen=True, extra="ignore", allow_inf_nan=False
    )

    provider: str = Field(DEFAULT_PROVIDER, min_length=1, description="pricing profile or model name")
    p_input: float | None = Field(None, gt=0, description="$/MTok uncached input")
    p_cache: float | None = Field(None, ge=0, description="$/MTok cache read")
    p_out: float | None = Field(None, ge=0, description="$/MTok output")
    p_cache_write: float | None = Field(None, ge=0, description="$/MTok cache write")
    max_context_tokens: int | None = Field(None, gt=0, description="context window M")
    v: int = Field(18_300, ge=0, description="fixed prefix tokens V (calibrated)")
    s: int = Field(500, gt=0, description="summary tokens S")
    l: float = Field(0.0, ge=0, description="LLM calls per user turn (0 = measure from the session)")  # noqa: E741
    baseline_e: int = Field(8, ge=0, description="baseline user turns")
    e_fixed: float = Field(0.0, ge=0, description="fixed E (0 = off)")
    r: float = Field(0.8, gt=0, le=1, description="retention per summary")
    beta: float = Field(0.03, ge=0, description="information-loss factor")
    quality_penalty: float = Field(0.2, ge=0, description="QP")
    min_keep_ratio: float = Field(0.25, gt=0, le=1, description="least share of messages kept")
    force_ratio: float = Field(0.9, gt=0, le=1, description="forced-compaction share of M")
    min_verbatim_tokens: int = Field(
        0, ge=0, description="least tokens the look-ahead keeps verbatim after a cut (only restricts its cuts; measured)"
    )
    clear_tool_results: bool = Field(
        True, description="let the look-ahead clear old tool results (placeholders naming the archive) instead of compacting"
    )
    native: Literal["none", "anthropic-clear", "anthropic-compact", "openai-compact"] = Field(
        "none", description="which provider-native action carries a plan out (priced with its own billing), or none: dp's own"
    )
    model: Literal["recall", "seed"] = Field("recall", description="cost model")
    planner: Literal["lookahead", "myopic", "seed"] = Field(
        "lookahead", description="decision: look ahead over the expected future (DESIGN §7), §2 as is, or the seed's model "
        "(seed is DP_MODEL=seed, which always decides by §2 as is)"
    )
    # calibration/results.json, survival (dp-compact calibrate ../shared/sessions): Lomax fit of session lengths
    survival_alpha: float = Field(1.55, gt=0, description="survival of session lengths: Lomax shape (calibrated)")
    survival_scale: float = Field(72.2, gt=0, description="survival of session lengths: Lomax scale, calls (calibrated)")
    # calibration/results.json, recall.rounds (dp-compact calibrate ../shared/sessions): q0 0.037, τ 1.99
    recall_q0: float = Field(0.0338, ge=0, le=1, description="chance a message of age 0 is used later (calibrated)")
    recall_tau: float = Field(2.17, gt=0, description="recall decay, age units (calibrated)")
    recall_age: Literal["rounds", "turns"] = Field(
        "rounds", description="age a_j: API rounds divided by L (calibrated), or user turns"
    )
    tokenizer: Literal["tiktoken", "bytes4"] = Field("tiktoken", description="message token counter")
    token_ratio: float | None = Field(
        None, gt=0, description="provider tokens per cl100k token (None = calibrated factor of the session's family)"
    )
    archive_dir: Path | None = Field(
        None, exclude=True, description="archive root (None = <user data dir>/dp-compact/archive)"
    )
    breaker_path: Path | None = Field(
        None, exclude=True, description="circuit breaker state file (None = <user state dir>/dp-compact/breaker.json)"
    )

    @field_validator("archive_dir", "breaker_path", mode="before")
    @classmethod
    def _empty_is_default(cls, value: Any) -> Any:
        """An empty ``DP_ARCHIVE_DIR`` / ``DP_BREAKER_PATH`` means the default location; ``~`` is expanded."""
        if value == "" or value is None:
            return None
        return Path(value).expanduser()

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
        On the first invalid value; names the variable (``DP_P_INPUT``, followed by "(from the .env
        file)" when that is where it was set), the value and the rule.
    """
    given = {key: value for key, value in flags.items() if value is not None}
    check_env_file()
    try:
        return Settings(**given)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else "?"
        name = f"--{field.replace('_', '-')}" if field in given else f"DP_{field.upper()}"
        from_env_file = name.startswith("DP_") and name.upper() not in {key.upper() for key in os.environ}
        where = "from the .env file" if from_env_file else ""  # not a flag, not in the environment: read from .env
        raise SettingsError(name, error.get("input"), error["msg"], where) from None


#: The settings file read from the working folder (pydantic-settings ``env_file``).
ENV_FILE = ".env"


def check_env_file(path: str = ENV_FILE) -> bytes | None:
    """The bytes of the ``.env`` file when there is one, after checking it is UTF-8 text.

    Raises
    ------
    EnvFileError
        If it cannot be read or is not UTF-8: ``.env:LINE: rule`` (one line, for every command
        and the hook alike, where a traceback came before).
    """
    from dp_compact.errors import EnvFileError

    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise EnvFileError(path, None, f"cannot read the settings file: {exc.strerror or exc}") from None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise EnvFileError(path, line, f"the settings file is not UTF-8 text (byte 0x{data[exc.start]:02x}); save it as UTF-8") from None
    return data


def env_file_values(path: str = ENV_FILE) -> dict[str, str | None]:
    """The variables of the ``.env`` file (``dotenv_values``), {} without one; EnvFileError as :func:`check_env_file`."""
    if check_env_file(path) is None:
        return {}
    from dotenv import dotenv_values

    return dict(dotenv_values(path, encoding="utf-8"))


def default_settings() -> Settings:
    """:class:`Settings` with every default of DESIGN §3 and none given: no flag, ``DP_*`` variable
    or ``.env`` file is read (for library functions called without settings, such as
    :func:`dp_compact.calibration.calibrate`, which measure files, not a configuration).

    >>> default_settings().v, default_settings().model_fields_set
    (18300, set())
    """
    return Settings.model_construct()  # the declared defaults, which are valid; no settings source is read


def variable_notes(environ: Mapping[str, str], env_file: Mapping[str, str | None]) -> list[str]:
    """Notes on the ``DP_*`` variables a run sees: unknown names (ignored, so a typo would pass
    silently), and the settings whose value comes from the ``.env`` file (a value the user may
    not remember setting). Pure: the caller reads the environment and the file.

    Parameters
    ----------
    environ : mapping
        The process environment.
    env_file : mapping
        The ``.env`` file's variables (``dotenv_values``); empty without one.

    >>> for note in variable_notes({"DP_VV": "1"}, {"DP_V": "5000"}):
    ...     print(note)
    DP_V=5000 comes from the .env file
    DP_VV is not a dp-compact setting and is ignored (see 'dp-compact --help' and docs/settings.md)
    """
    known = {f"DP_{name.upper()}" for name in Settings.model_fields}
    notes = []
    for name in sorted({n for n in (*environ, *env_file) if n.upper().startswith("DP_")}):
        if name.upper() not in known:
            where = " (in the .env file)" if name in env_file and name not in environ else ""
            notes.append(f"{name}{where} is not a dp-compact setting and is ignored (see 'dp-compact --help' and docs/settings.md)")
        elif name in env_file and name not in environ:
            notes.append(f"{name}={env_file[name]} comes from the .env file")
    return notes
