"""The session's cache-write lifetimes and price date, read from its usage (DESIGN §8)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from dp_compact.conversation import Session, Usage, first_call_day
from dp_compact.prepare import choose_prices, write_lifetime_mix
from dp_compact.pricing import get_prices
from dp_compact.sessions import read_session
from dp_compact.sessions.anthropic import split_cline_cached
from dp_compact.sessions.usage import usage_from_api
from dp_compact.settings import Settings
from tests.conftest import SESSIONS, need


def _anthropic(write: int, one_hour: int) -> dict[str, object]:
    return {"input_tokens": 3, "cache_read_input_tokens": 100, "cache_creation_input_tokens": write, "output_tokens": 5,
            "cache_creation": {"ephemeral_5m_input_tokens": write - one_hour, "ephemeral_1h_input_tokens": one_hour}}


def test_usage_keeps_one_hour_writes_within_the_writes() -> None:
    usage = usage_from_api(_anthropic(400, 300))
    assert usage is not None and (usage.cache_write_tokens, usage.cache_write_1h_tokens) == (400, 300)
    capped = usage_from_api({**_anthropic(400, 0), "cache_creation": {"ephemeral_1h_input_tokens": 900}})
    assert capped is not None and capped.cache_write_1h_tokens == 400  # never more than the writes
    with pytest.raises(ValueError, match="ephemeral_1h_input_tokens"):
        usage_from_api({**_anthropic(400, 0), "cache_creation": {"ephemeral_1h_input_tokens": -1}})


@pytest.mark.parametrize(("one_hour", "share", "ttl"), [(0, 0.0, 300), (100, 0.25, 300), (400, 1.0, 3600)])
def test_mix_sets_the_write_price_and_the_cache_life(one_hour: int, share: float, ttl: int) -> None:
    usage = tuple(u for u in (usage_from_api(_anthropic(400, one_hour)), usage_from_api(_anthropic(400, one_hour))) if u)
    session = Session(path="s.jsonl", format="claude-code", messages=(), usage=usage, model="claude-opus-4-7")
    found, notes = write_lifetime_mix(session, get_prices("claude-opus-4-7"))
    assert found == pytest.approx(share) and "usage records" in notes[0]
    prices, _ = choose_prices(Settings(), session)
    assert prices.write_1h_share == pytest.approx(share) and prices.cache_ttl_s == ttl
    assert prices.p_write == pytest.approx((1 - share) * 6.25 + share * 10.0)  # opus 4.7: 1.25 x and 2 x input


def test_without_evidence_the_provider_default_is_stated() -> None:
    share, notes = write_lifetime_mix(None, get_prices("claude-sonnet-4"))
    assert share == 0.0 and "provider's default" in notes[0] and "5-minute" in notes[0]
    assert write_lifetime_mix(None, get_prices("gpt-4o")) == (0.0, ())  # no write premium, nothing to say


def test_cline_cached_count_is_split_into_reads_and_writes() -> None:
    first = split_cline_cached(Usage(1_010, cache_read_tokens=1_000, cache_split_estimated=True), None)
    assert (first.cache_read_tokens, first.cache_write_tokens) == (0, 1_000)  # nothing cached before the first call
    second = split_cline_cached(Usage(1_510, cache_read_tokens=1_500, cache_split_estimated=True), first)
    assert (second.cache_read_tokens, second.cache_write_tokens) == (1_000, 500)
    plain = Usage(10, 4, 2)
    assert split_cline_cached(plain, first) is plain


def test_cline_split_matches_its_ui_log_call_by_call() -> None:
    history = read_session(need(SESSIONS / "anthropic_messages" / "cline_api_history_cardgame.jsonl"))
    ui = json.loads(need(SESSIONS / "other" / "cline_ui_messages_cardgame.json").read_text())
    requests = [json.loads(m["text"]) for m in ui if m.get("say") == "api_req_started"]
    requests = [r for r in requests if "cacheReads" in r]
    assert len(requests) == len(history.usage) > 0
    assert [(u.cache_read_tokens, u.cache_write_tokens) for u in history.usage] == [
        (r["cacheReads"], r["cacheWrites"]) for r in requests
    ]


@pytest.mark.parametrize("name", ["cc_task43_develop.jsonl", "cc_fundwise.jsonl"])
def test_claude_code_sessions_write_one_hour_entries(name: str) -> None:
    session = read_session(need(SESSIONS / "claude_code" / name))
    prices, notes = choose_prices(Settings(), session)
    assert prices.write_1h_share > 0.5 and prices.cache_ttl_s == 3600
    assert prices.p_write == pytest.approx(prices.p_write_1h, rel=0.2)
    assert prices.p_write > 1.5 * prices.p_input
    day = first_call_day(session)
    assert day is not None and prices.price_date == day.isoformat()
    assert any("1-hour entries" in n for n in notes)


def test_first_call_day_ignores_times_no_calendar_holds(tmp_path: Path) -> None:
    session = Session(path="", format="", messages=(), call_times=(None, 10**30, "2026-03-30T22:50:53Z"))
    assert first_call_day(session) is None  # the first readable time is absurd: no evidence
    assert first_call_day(Session(path="", format="", messages=(), call_times=("x", "2026-03-30T22:50:53Z"))).isoformat() == "2026-03-30"


@pytest.mark.parametrize(("name", "args"), [
    ("cc_fundwise", ["compact", "--force", "--to", "anthropic"]), ("cc_fundwise", ["compact", "--force", "--to", "openai"]),
    ("cc_fundwise", ["compact", "--action", "clear", "--to", "openai"]), ("cc_posthog_dashboard_compact", ["shrink", "--to", "openai"]),
])
def test_a_rewritten_file_keeps_the_write_lifetime_its_conversation_had(name: str, args: list[str], tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """cc_fundwise writes every cache entry for 1 hour, cc_posthog two thirds of them; a file `compact` (a
    summary), its clearing (the first placeholder) or `shrink` (the first preview) writes holds no usage
    record, so it states the mix and the file is priced with it, not with the provider's 5-minute default."""
    from typer.testing import CliRunner

    from dp_compact.cli import app

    source = need(SESSIONS / "claude_code" / f"{name}.jsonl")
    prices = get_prices("claude-opus-4-7")
    recorded = write_lifetime_mix(read_session(source), prices)[0]
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    monkeypatch.setenv("NO_DP_COMPACT_HOT", "1")
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, [args[0], str(source), "-o", str(out), *args[1:]])
    assert result.exit_code == 0 and out.exists(), result.output
    rewritten = read_session(out)
    assert rewritten.usage == () and rewritten.recorded_write_1h_share == pytest.approx(recorded, abs=0.005) and recorded > 0.5
    share, notes = write_lifetime_mix(rewritten, prices)
    assert share == rewritten.recorded_write_1h_share and "as dp-compact stated them when it rewrote the file" in notes[0]
    assert write_lifetime_mix(replace(rewritten, recorded_write_1h_share=None), prices)[0] == 0.0
