"""Tests of dp_compact.pricing: built-in profiles (DESIGN §3) and the offline genai-prices lookup."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dp_compact import pricing
from dp_compact.errors import UnknownProfileError
from dp_compact.api import choose_prices
from dp_compact.pricing import PROFILES, Prices, base_model_name, get_prices, list_profiles
from dp_compact.conversation import Session
from dp_compact.settings import load_settings

PROJECT_ROOT = Path(__file__).resolve().parents[1]

# DESIGN §3: name -> (p_input, p_cache, p_out, max_context_tokens), $/MTok and tokens.
DESIGN_PROFILES = {
    "claude-sonnet-4": (3.00, 0.30, 15.00, 200_000),
    "gpt-4o": (2.50, 1.25, 10.00, 128_000),
    "deepseek-v4-flash": (1.00, 0.02, 3.00, 64_000),
}
REQUIRED_PROFILES = {
    "claude-sonnet-4",
    "claude-opus-4.5",
    "claude-haiku-4.5",
    "gpt-4o",
    "gpt-4.1",
    "gpt-5",
    "gemini-2.5-pro",
    "gemini-2.5-flash",
    "deepseek-v4-flash",
}
# Built-in fields that knowingly differ from genai-prices' bundled data (see pricing's docstring).
GENAI_OVERRIDES = {
    "deepseek-v4-flash": {"p_input", "p_cache", "p_out", "max_context_tokens"},  # DESIGN §3 wins
    "gemini-2.5-pro": {"max_context_tokens"},  # genai-prices lists none; Google's model page
}
# Where each built-in is in genai-prices, for the drift check.
GENAI_IDS = {
    "claude-sonnet-4": "claude-sonnet-4",
    "claude-opus-4.5": "claude-opus-4-5",
    "claude-haiku-4.5": "claude-haiku-4-5",
    "gpt-4o": "gpt-4o",
    "gpt-4.1": "gpt-4.1",
    "gpt-5": "gpt-5",
    "gemini-2.5-pro": "gemini-2.5-pro",
    "gemini-2.5-flash": "gemini-2.5-flash",
    "deepseek-v4-flash": "deepseek-v4-flash",
}


@pytest.mark.parametrize("name", sorted(DESIGN_PROFILES))
def test_profiles_design_numbers_exact(name: str) -> None:
    p = PROFILES[name]
    assert (p.p_input, p.p_cache, p.p_out, p.max_context_tokens) == DESIGN_PROFILES[name]
    assert p.name == name


def test_profiles_cache_write_premium_only_where_charged() -> None:
    assert PROFILES["claude-sonnet-4"].p_cache_write == 3.75  # Anthropic: 1.25 x input, 5 minutes
    assert PROFILES["claude-opus-4.5"].p_cache_write == 6.25
    assert PROFILES["claude-haiku-4.5"].p_cache_write == 1.25
    assert PROFILES["gpt-4o"].p_cache_write is None
    assert PROFILES["deepseek-v4-flash"].p_cache_write is None


def test_profiles_required_names_present() -> None:
    assert REQUIRED_PROFILES <= set(PROFILES)
    assert all(key == p.name for key, p in PROFILES.items())


@pytest.mark.parametrize("prices", list_profiles(), ids=lambda p: p.name)
def test_profiles_each_sane(prices: Prices) -> None:
    assert 0 < prices.p_cache <= prices.p_input
    assert prices.p_out > 0
    assert prices.p_cache_write is None or prices.p_cache_write >= prices.p_input
    assert isinstance(prices.max_context_tokens, int) and prices.max_context_tokens > 0
    assert prices.source.startswith("written by hand from https://")


def test_profiles_gemini_window_at_least_one_million() -> None:
    gemini = [p for p in list_profiles() if p.name.startswith("gemini")]
    assert gemini
    assert all(p.max_context_tokens >= 1_000_000 for p in gemini)


def test_list_profiles_sorted_and_complete() -> None:
    names = [p.name for p in list_profiles()]
    assert names == sorted(names)
    assert set(names) == set(PROFILES)


#: pyproject allows any genai-prices >= 0.0.30, so a release the built-ins were not written from may
#: be installed: prices are compared within this relative tolerance (a vendor's price revision of a
#: few cents passes; a field read from the wrong column — cache read for input, output for input,
#: a factor 2 to 10 apart — fails). Pinning one release instead would tie every user's install to it.
GENAI_TOLERANCE = 0.25


@pytest.mark.parametrize("name", sorted(GENAI_IDS))
def test_profiles_agree_with_genai_prices_snapshot(name: str) -> None:
    """Drift check against whichever genai-prices is installed, within GENAI_TOLERANCE."""
    from genai_prices.types import TieredPrices

    _, model = pricing._bundled_snapshot().find_provider_model(GENAI_IDS[name], None, None, None)
    assert not isinstance(model.prices, list) or name in GENAI_OVERRIDES
    if isinstance(model.prices, list):
        return

    def base(value: object) -> float | None:
        value = value.base if isinstance(value, TieredPrices) else value
        return None if value is None else float(value)  # type: ignore[arg-type]

    expected = {
        "p_input": base(model.prices.input_mtok),
        "p_cache": base(model.prices.cache_read_mtok),
        "p_out": base(model.prices.output_mtok),
        "p_cache_write": base(model.prices.cache_write_mtok),
        "max_context_tokens": model.context_window,
    }
    for field, value in expected.items():
        if field in GENAI_OVERRIDES.get(name, set()):
            continue
        mine = getattr(PROFILES[name], field)
        if value is None or mine is None:  # listed on one side only: only a window may be missing there
            assert (mine is None and value is None) or field == "max_context_tokens", field
        else:
            assert mine == pytest.approx(value, rel=GENAI_TOLERANCE), field


@pytest.mark.parametrize("name", ["CLAUDE-SONNET-4", "Claude-Sonnet-4", " claude-sonnet-4 "])
def test_get_prices_case_insensitive(name: str) -> None:
    assert get_prices(name) is PROFILES["claude-sonnet-4"]


@pytest.mark.parametrize(
    ("name", "profile"),
    [
        ("claude-opus-4-5", "claude-opus-4.5"),
        ("Claude-Haiku-4-5", "claude-haiku-4.5"),
        ("gemini-2-5-pro", "gemini-2.5-pro"),
        ("gpt-4-1", "gpt-4.1"),
    ],
)
def test_get_prices_dash_for_dot_finds_builtin(name: str, profile: str) -> None:
    assert get_prices(name) is PROFILES[profile]


def test_get_prices_genai_only_name_uses_snapshot() -> None:
    assert "gpt-4o-mini" not in PROFILES
    p = get_prices("gpt-4o-mini")  # OpenAI's pricing page: 0.15 / 0.075 / 0.60, 128K, no write premium
    assert p.name == "gpt-4o-mini" and p.p_cache_write is None and p.max_context_tokens == 128_000
    assert (p.p_input, p.p_cache, p.p_out) == pytest.approx((0.15, 0.075, 0.6), rel=GENAI_TOLERANCE)
    assert p.p_cache < p.p_input < p.p_out  # each read from its own column
    from genai_prices import __version__

    assert p.source == f"genai-prices {__version__}"


def test_get_prices_genai_anthropic_keeps_cache_write() -> None:
    p = get_prices("Claude-3-5-Haiku-Latest")  # Anthropic: 0.80 / 0.08 / 4.00, writes 1.25 x input, 200K
    assert (p.p_input, p.p_cache, p.p_out, p.p_cache_write) == pytest.approx((0.8, 0.08, 4.0, 1.0), rel=GENAI_TOLERANCE)
    assert p.p_cache_write == pytest.approx(1.25 * p.p_input) and p.max_context_tokens == 200_000
    assert p.source.startswith("genai-prices ")


def test_get_prices_genai_tiered_keeps_base_and_every_tier() -> None:
    p = get_prices("claude-sonnet-4-5")  # tiered in genai-prices: 3.00 below 200K tokens, 6.00 above
    assert (p.p_input, p.p_cache, p.p_out) == pytest.approx((3.0, 0.3, 15.0), rel=GENAI_TOLERANCE)
    assert p.tier_starts == (200_000,) and "200,000" in p.source
    assert p.at(200_000) is p  # genai-prices' cliff: a prompt *above* the threshold pays the tier
    above = p.at(200_001)
    assert (above.p_input, above.p_cache, above.p_out) == pytest.approx((6.0, 0.6, 22.5), rel=GENAI_TOLERANCE)
    assert above.p_write_1h == pytest.approx(2 * above.p_input, rel=GENAI_TOLERANCE)


def test_anthropic_write_lifetimes_and_the_mix() -> None:
    p = get_prices("claude-opus-4-7")
    assert (p.p_write_5m, p.p_write_1h) == pytest.approx((1.25 * p.p_input, 2.0 * p.p_input))  # DESIGN §8
    assert p.p_write == p.p_write_5m and p.cache_ttl_s == 300
    mixed = p.with_write_share(0.75)
    assert mixed.p_write == pytest.approx(0.25 * p.p_write_5m + 0.75 * p.p_write_1h) and mixed.cache_ttl_s == 3600
    with pytest.raises(ValueError, match="write_1h_share"):
        p.with_write_share(1.5)


def test_dated_prices_apply_on_their_day() -> None:
    import datetime

    early = get_prices("claude-opus-4-6", datetime.date(2026, 3, 1))  # tiered until 2026-03-12 in genai-prices 0.2.5
    if not early.later:
        pytest.skip("the installed genai-prices lists one price for claude-opus-4-6")
    day, after = early.later[0]
    assert early.on("2026-03-01") is early and early.on(day) is after
    assert early.price_date == "2026-03-01" and after.price_date == day


def _snapshot_model(keep) -> str:
    """The first model id of the installed genai-prices data that ``keep(model)`` accepts (skip if none):
    which models lack a field changes between releases, so the case is found, not named."""
    for provider in pricing._bundled_snapshot().providers:
        for model in provider.models:
            if not isinstance(model.prices, list) and keep(model) and model.prices.input_mtok is not None and model.prices.output_mtok is not None:
                return model.id
    pytest.skip("the installed genai-prices lists no such model")


def test_get_prices_genai_without_cache_read_uses_input_price() -> None:
    name = _snapshot_model(lambda m: m.prices.cache_read_mtok is None)
    p = get_prices(name)
    assert p.p_cache == p.p_input
    assert "p_cache = p_input" in p.source


def test_get_prices_genai_without_window_assumes_128k() -> None:
    name = _snapshot_model(lambda m: m.context_window is None and not m.id.startswith("gemini"))
    p = get_prices(name)
    assert p.max_context_tokens == pricing.ASSUMED_CONTEXT_TOKENS == 128_000  # the gpt-4o window of DESIGN §3
    assert "128,000 tokens assumed" in p.source


def test_get_prices_provider_prefix_selects_provider() -> None:
    assert get_prices("openai/gpt-4o-mini") == get_prices("gpt-4o-mini")


def test_get_prices_unknown_name_lists_close_matches() -> None:
    with pytest.raises(UnknownProfileError) as info:
        get_prices("claude-sonet-4")
    assert info.value.name == "claude-sonet-4"
    assert info.value.close_matches[0] == "claude-sonnet-4"
    assert 1 <= len(info.value.close_matches) <= 5
    assert "claude-sonnet-4" in str(info.value)


def test_get_prices_unknown_name_suggests_genai_ids() -> None:
    with pytest.raises(UnknownProfileError) as info:
        get_prices("gpt-4o-mino")
    assert "gpt-4o-mini" in info.value.close_matches


def test_get_prices_nonsense_name_has_no_close_matches() -> None:
    with pytest.raises(UnknownProfileError) as info:
        get_prices("zzzzqqqq")
    assert info.value.close_matches == []


def test_prices_rejects_negative_price_and_empty_window() -> None:
    base = PROFILES["gpt-4o"]
    with pytest.raises(ValueError, match="p_cache"):
        dataclasses.replace(base, p_cache=-0.1)
    with pytest.raises(ValueError, match="max_context_tokens"):
        dataclasses.replace(base, max_context_tokens=0)


def test_prices_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        PROFILES["gpt-4o"].p_input = 0.0  # type: ignore[misc]


def test_import_pricing_does_not_import_genai_prices() -> None:
    code = "import dp_compact.pricing, sys; assert 'genai_prices' not in sys.modules"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=PROJECT_ROOT
    )
    assert result.returncode == 0, result.stderr


def test_get_prices_builtin_does_not_import_genai_prices() -> None:
    code = (
        "import sys; from dp_compact.pricing import get_prices; get_prices('claude-opus-4-5'); "
        "assert 'genai_prices' not in sys.modules"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=PROJECT_ROOT
    )
    assert result.returncode == 0, result.stderr


def test_get_prices_genai_lookup_works_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("pricing must not touch the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    pricing._bundled_snapshot.cache_clear()  # reload the data under the patch
    assert get_prices("gpt-4o-mini").p_out == pytest.approx(0.6, rel=GENAI_TOLERANCE)
    with pytest.raises(UnknownProfileError):
        get_prices("claude-sonet-4")


@pytest.mark.parametrize(("name", "expected"), [
    ("gpt-5.3-codex-bak", "gpt-5.3-codex"), ("claude-opus-4-6@2026-01-01", "claude-opus-4-6"),
    ("claude-sonnet-4-20250514", "claude-sonnet-4"), ("gpt-4o_backup", "gpt-4o"), ("gpt-4o", None), ("bak", None),
])
def test_base_model_name_strips_only_copy_and_date_suffixes(name, expected):
    assert base_model_name(name) == expected


def test_a_copy_of_a_known_model_is_priced_as_that_model_with_a_note():
    """Issue record: a ``-bak`` suffix on a known id is that id (shared codex_pharma session's model)."""
    session = Session(path="s.jsonl", format="codex", messages=(), model="gpt-5.3-codex-bak")
    prices, notes = choose_prices(load_settings(), session)
    assert prices.name == get_prices("gpt-5.3-codex").name and prices.p_input == get_prices("gpt-5.3-codex").p_input
    assert any("read as 'gpt-5.3-codex'" in note for note in notes)
    unknown = Session(path="s.jsonl", format="codex", messages=(), model="zz-unknown-model-bak")
    prices, notes = choose_prices(load_settings(), unknown)
    assert prices.name == "claude-sonnet-4" and any("has no known prices" in note for note in notes)


def test_openai_priced_writes_live_thirty_minutes() -> None:
    model = _snapshot_model(lambda m: m.id.startswith("gpt-") and m.prices.cache_write_mtok is not None)
    p = get_prices(model)
    assert p.cache_ttl_s == pricing.OPENAI_WRITE_TTL_S and p.write_lifetime == "30m"
    assert get_prices("gpt-5").cache_ttl_s == pricing.CACHE_TTL_5M_S  # no write price: the in-memory cache
