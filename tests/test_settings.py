"""Settings of DESIGN §3: precedence, validation, every variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from dp_compact.api import resolve_prices
from dp_compact.errors import SettingsError, UnknownProfileError
from dp_compact.settings import Settings, load_settings

# DESIGN §3's table, except V, L and the recall curve: calibrated (calibration/README.md).
DESIGN_DEFAULTS = {
    "provider": "claude-sonnet-4", "v": 20_800, "s": 500, "l": 0.0, "baseline_e": 8, "e_fixed": 0.0, "r": 0.8,
    "beta": 0.03, "quality_penalty": 0.2, "min_keep_ratio": 0.25, "force_ratio": 0.9, "model": "recall",
    "tokenizer": "tiktoken", "p_input": None, "p_cache": None, "p_out": None, "p_cache_write": None,
    "max_context_tokens": None, "recall_q0": 0.0394, "recall_tau": 2.05, "recall_age": "rounds", "token_ratio": None,
}


def test_settings_defaults_are_design_table():
    settings = load_settings()
    for name, value in DESIGN_DEFAULTS.items():
        assert getattr(settings, name) == value, name


@pytest.mark.parametrize(
    ("variable", "value", "field", "expected"),
    [
        ("DP_PROVIDER", "gpt-4o", "provider", "gpt-4o"), ("DP_P_INPUT", "2.5", "p_input", 2.5),
        ("DP_P_CACHE", "0.25", "p_cache", 0.25), ("DP_P_OUT", "8", "p_out", 8.0),
        ("DP_P_CACHE_WRITE", "3.75", "p_cache_write", 3.75), ("DP_MAX_CONTEXT_TOKENS", "64000", "max_context_tokens", 64000),
        ("DP_V", "3000", "v", 3000), ("DP_S", "800", "s", 800), ("DP_L", "0", "l", 0.0), ("DP_BASELINE_E", "12", "baseline_e", 12),
        ("DP_E_FIXED", "3", "e_fixed", 3.0), ("DP_R", "0.7", "r", 0.7), ("DP_BETA", "0.05", "beta", 0.05),
        ("DP_QUALITY_PENALTY", "0", "quality_penalty", 0.0), ("DP_MIN_KEEP_RATIO", "0.1", "min_keep_ratio", 0.1),
        ("DP_FORCE_RATIO", "0.8", "force_ratio", 0.8), ("DP_MODEL", "seed", "model", "seed"),
        ("DP_RECALL_Q0", "0.5", "recall_q0", 0.5), ("DP_RECALL_TAU", "7", "recall_tau", 7.0),
        ("DP_RECALL_AGE", "turns", "recall_age", "turns"), ("DP_TOKENIZER", "bytes4", "tokenizer", "bytes4"),
    ],
)
def test_settings_every_dp_variable_is_read(monkeypatch, variable, value, field, expected):
    monkeypatch.setenv(variable, value)
    assert getattr(load_settings(), field) == expected


def test_settings_recall_defaults_are_the_committed_calibration():
    """DP_RECALL_* ship the fit of calibration/results.json in its chosen unit (DESIGN §2, §6)."""
    import json

    from tests.conftest import REPO

    results = json.loads((REPO / "calibration" / "results.json").read_text(encoding="utf-8"))
    unit = results["recall_age"]
    fields = Settings.model_fields
    assert fields["recall_age"].default == unit
    assert fields["recall_q0"].default == pytest.approx(results["recall"][unit]["q0"]["value"], rel=0.02)
    assert fields["recall_tau"].default == pytest.approx(results["recall"][unit]["tau"]["value"], rel=0.02)


def test_settings_flag_beats_env(monkeypatch):
    monkeypatch.setenv("DP_E_FIXED", "3")
    assert load_settings(e_fixed=7).e_fixed == 7


def test_settings_flag_none_does_not_beat_env(monkeypatch):
    monkeypatch.setenv("DP_E_FIXED", "3")
    assert load_settings(e_fixed=None).e_fixed == 3


def test_settings_env_beats_dotenv(monkeypatch, tmp_path: Path):
    (tmp_path / ".env").write_text("DP_V=1111\nDP_S=222\n")
    monkeypatch.setenv("DP_V", "3333")
    settings = load_settings()
    assert (settings.v, settings.s) == (3333, 222)


def test_settings_dotenv_beats_default(tmp_path: Path):
    (tmp_path / ".env").write_text("DP_BETA=0.07\n")
    assert load_settings().beta == 0.07


def test_settings_override_beats_profile():
    prices = resolve_prices(load_settings(provider="gpt-4o", p_input=9.0, max_context_tokens=50_000))
    assert (prices.p_input, prices.p_cache, prices.max_context_tokens) == (9.0, 1.25, 50_000)


def test_settings_profile_beats_default():
    prices = resolve_prices(load_settings(provider="deepseek-v4-flash"))
    assert (prices.p_input, prices.p_cache, prices.p_out, prices.max_context_tokens) == (1.0, 0.02, 3.0, 64_000)


def test_settings_session_model_used_only_without_explicit_provider(monkeypatch):
    assert resolve_prices(load_settings(), "gpt-4o").name == "gpt-4o"
    monkeypatch.setenv("DP_PROVIDER", "claude-sonnet-4")
    assert resolve_prices(load_settings(), "gpt-4o").name == "claude-sonnet-4"


@pytest.mark.parametrize(
    ("variable", "value", "rule"),
    [
        ("DP_P_INPUT", "-1", "greater than 0"), ("DP_MIN_KEEP_RATIO", "1.5", "less than or equal to 1"),
        ("DP_MIN_KEEP_RATIO", "0", "greater than 0"), ("DP_FORCE_RATIO", "2", "less than or equal to 1"),
        ("DP_V", "lots", "valid integer"), ("DP_R", "abc", "valid number"), ("DP_MODEL", "magic", "recall"),
        ("DP_TOKENIZER", "words", "tiktoken"),
    ],
)
def test_settings_invalid_value_names_variable_value_and_rule(monkeypatch, variable, value, rule):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert variable in message and value in message and rule in message
    assert "\n" not in message


def test_settings_unknown_provider_lists_close_matches():
    with pytest.raises(UnknownProfileError, match="claude-sonnet-4"):
        resolve_prices(load_settings(provider="claude-sonet-4"))


def test_settings_are_immutable():
    with pytest.raises(Exception, match="frozen"):
        load_settings().v = 1  # type: ignore[misc]
    assert Settings.model_config["env_prefix"] == "DP_"


def test_unknown_dp_names_and_values_from_the_env_file_are_named(tmp_path, monkeypatch):
    """A typo in a DP_* name would be silently ignored; a value from .env may be forgotten: both are said."""
    from typer.testing import CliRunner

    from dp_compact.cli import app
    from dp_compact.settings import variable_notes

    notes = variable_notes({"DP_PLANER": "myopic", "DP_V": "4000", "HOME": "/"}, {"DP_V": "5000", "DP_S": "600", "DP_MINKEEP": "1"})
    assert notes == [
        "DP_MINKEEP (in the .env file) is not a dp-compact setting and is ignored (see 'dp-compact --help' and the README's settings)",
        "DP_PLANER is not a dp-compact setting and is ignored (see 'dp-compact --help' and the README's settings)",
        "DP_S=600 comes from the .env file",  # DP_V is set in the environment, which wins over .env
    ]
    assert variable_notes({"DP_ARCHIVE_DIR": "/tmp/a"}, {}) == []
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("DP_S=600\n")
    monkeypatch.setenv("DP_PLANER", "myopic")
    session = Path(__file__).parent.parent / "dp_compact" / "examples" / "session.jsonl"
    done = CliRunner().invoke(app, ["plan", str(session), "--no-cache"])
    assert done.exit_code == 0
    assert "DP_PLANER is not a dp-compact setting" in done.output and "DP_S=600 comes from the .env file" in done.output
