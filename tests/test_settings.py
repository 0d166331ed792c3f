"""Settings of DESIGN §3: precedence, validation, every variable."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dp_compact.api import resolve_prices
from dp_compact.errors import SettingsError, UnknownProfileError
from dp_compact.measure.estimation import DEFAULT_CALLS_PER_TURN
from dp_compact.settings import Settings, load_settings
from tests.conftest import REPO

DESIGN = REPO.parent / "shared" / "DESIGN.md"


def _design_table() -> dict[str, str]:
    """DESIGN §3's settings table: ``DP_*`` name -> its default cell, as written."""
    if not DESIGN.exists():
        pytest.skip(f"{DESIGN} is absent: DESIGN §3's table cannot be read")
    text = DESIGN.read_text(encoding="utf-8")
    section = text[text.index("## 3. Settings"):text.index("## 4.")]
    table: dict[str, str] = {}
    for row in section.splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("DP_"):
            for name in cells[0].split("/"):
                table[name.strip()] = cells[1]
    return table


def _design_value(cell: str) -> object:
    """A default cell read by hand's rules: "from profile …" is None (the profile decides), a number
    is that number (its first word: "5 (0 = measure)" is 5), a word is itself."""
    if cell.startswith("from profile"):
        return None
    word = cell.split()[0].replace(",", "")
    try:
        return float(word)
    except ValueError:
        return word


def _three_digits(value: float) -> float:
    """A calibrated value as shipped: three significant digits."""
    return float(f"{value:.3g}")


def _calibrated_departures() -> dict[str, object]:
    """The defaults that depart from DESIGN §3's table, from the committed calibration.

    ``calibration/results.json`` holds the fits (``dp-compact calibrate ../shared/sessions``);
    ``calibration/README.md`` and the ``Settings`` docstring say which are shipped: the recall
    curve in its chosen unit, V rounded to 100 tokens, L measured per session (0; the pooled L is
    the fallback, checked below), the survival curve of session lengths (DESIGN §7, which also
    makes the look-ahead planner the default), and no fixed token ratio (each family's calibrated
    one, :data:`dp_compact.measure.tokens.TOKEN_RATIOS`).
    """
    results = json.loads((REPO / "calibration" / "results.json").read_text(encoding="utf-8"))
    unit = results["recall_age"]
    return {
        "v": round(results["V"]["value"], -2), "l": 0.0,
        "recall_age": unit, "recall_q0": _three_digits(results["recall"][unit]["q0"]["value"]),
        "recall_tau": _three_digits(results["recall"][unit]["tau"]["value"]),
        "survival_alpha": _three_digits(results["survival"]["alpha"]["value"]),
        "survival_scale": _three_digits(results["survival"]["scale_calls"]["value"]),
        "planner": "lookahead", "token_ratio": None,
        # not in DESIGN §3's table: measured by replay (docs/cost-model.md "How little may be kept verbatim")
        "min_verbatim_tokens": 0,
        # DESIGN §9 (no §3 row): clearing is one of the look-ahead's actions (docs/cost-model.md "Clearing old tool results")
        "clear_tool_results": True,
        # DESIGN §9 (no §3 row): dp's own actions unless an adapter's native= says the provider's (dp_compact.core.native_costs)
        "native": "none",
    }


def test_settings_defaults_are_design_table_and_calibrated_departures():
    """Every default is DESIGN §3's, or a calibrated departure documented in calibration/."""
    table = _design_table()
    departures = _calibrated_departures()
    settings = load_settings()
    # the pipeline's file locations are not cost settings: None = the platform's user directories
    locations = {name for name, info in Settings.model_fields.items() if info.exclude}
    assert locations == {"archive_dir", "breaker_path"} and all(getattr(settings, name) is None for name in locations)
    fields = set(Settings.model_fields) - locations
    from_design = {name.removeprefix("DP_").lower(): _design_value(cell) for name, cell in table.items()}
    assert set(from_design) | set(departures) == fields  # no setting without a documented default
    for name, value in from_design.items():
        if name in departures:
            assert table[f"DP_{name.upper()}"] == "calibrated" or name in {"v", "l"}, name  # the known departures
            continue
        assert getattr(settings, name) == value, (name, table[f"DP_{name.upper()}"])
    for name, value in departures.items():
        assert getattr(settings, name) == value, name
    # DESIGN's "5 (0 = measure)": 0 measures L; where it cannot be measured, the pooled L of the calibration
    results = json.loads((REPO / "calibration" / "results.json").read_text(encoding="utf-8"))
    assert DEFAULT_CALLS_PER_TURN == round(results["L"]["value"]) and "0 = measure" in table["DP_L"]
    # DESIGN: "from profile (200,000)": the default profile's window
    assert resolve_prices(settings).max_context_tokens == int(table["DP_MAX_CONTEXT_TOKENS"].split("(")[1].split(")")[0].replace(",", ""))
    planner = re.search(r"DP_PLANNER=(\w+)\|", DESIGN.read_text(encoding="utf-8"))
    assert planner is not None and departures["planner"] == planner.group(1)  # DESIGN §7: the look-ahead planner is the default


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
        "DP_MINKEEP (in the .env file) is not a dp-compact setting and is ignored (see 'dp-compact --help' and docs/settings.md)",
        "DP_PLANER is not a dp-compact setting and is ignored (see 'dp-compact --help' and docs/settings.md)",
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


@pytest.mark.parametrize("provider", ["claude-sonnet-4", "gpt-4o", "deepseek-v4-flash"])
def test_cache_read_may_cost_at_most_the_input_price(provider):
    """A cache read priced above uncached input is refused, naming DP_P_CACHE; equal is allowed."""
    base = resolve_prices(load_settings(provider=provider))
    assert resolve_prices(load_settings(provider=provider, p_cache=base.p_input)).p_cache == base.p_input
    with pytest.raises(SettingsError, match="DP_P_CACHE") as info:
        resolve_prices(load_settings(provider=provider, p_cache=base.p_input * 1.01))
    assert "must not cost more than input" in str(info.value)
    with pytest.raises(SettingsError, match="DP_P_CACHE"):  # lowering the input price under the cache price, too
        resolve_prices(load_settings(provider=provider, p_input=base.p_cache / 2))


def test_cli_cache_read_above_input_is_a_one_line_error(tmp_path):
    from typer.testing import CliRunner

    from dp_compact.cli import app

    session = tmp_path / "s.jsonl"
    session.write_text('{"role": "user", "content": "hello"}\n{"role": "assistant", "content": "hi"}\n')
    result = CliRunner().invoke(app, ["plan", str(session)], env={"DP_P_INPUT": "1", "DP_P_CACHE": "2"})
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)  # an error line, not a traceback
    assert "DP_P_CACHE=2.0: a cache read must not cost more than input" in result.output
