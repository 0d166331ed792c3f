"""The bill check (DESIGN §8 "As recorded"): on every shared session that records usage,
the ``recorded`` replay within 5 % of the bill of its usage records, the difference split into
named causes that add up to it."""

from __future__ import annotations

import pytest

from dp_compact.conversation import Usage
from dp_compact.pricing import Prices, PriceTier
from dp_compact.replay.bill import BILL_TOLERANCE, CAUSES, usage_cost
from dp_compact.replay.shell import replay_file
from dp_compact.settings import load_settings
from tests.conftest import SESSIONS, need

WITH_USAGE = [
    "anthropic_messages/cline_api_history_cardgame.jsonl",
    "claude_code/cc_fundwise.jsonl",
    "claude_code/cc_posthog_dashboard_compact.jsonl",
    "claude_code/cc_privacy_x402.jsonl",
    "claude_code/cc_raze_hooks.jsonl",
    "claude_code/cc_task43_develop.jsonl",
    "codex/codex_fundwise_tui.jsonl",
    "codex/codex_meridianops_windows.jsonl",
    "codex/codex_pharma_2compactions.jsonl",
    "codex/codex_raze.jsonl",
]


def test_usage_cost_prices_each_token_class_at_its_own_price_and_tier():
    prices = Prices("t", 3.0, 0.3, 15.0, 3.75, 1_000_000, "test", p_cache_write_1h=6.0,
                    tiers=(PriceTier(200_000, 6.0, 0.6, 22.5, 7.5, 12.0),))
    usage = Usage(prompt_tokens=1000, cache_read_tokens=500, cache_write_tokens=400, output_tokens=10, cache_write_1h_tokens=300)
    # 100 uncached · 3 + 500 · 0.3 + 100 5-minute writes · 3.75 + 300 1-hour writes · 6 + 10 · 15
    assert usage_cost(usage, prices) * 1e6 == pytest.approx(300 + 150 + 375 + 1800 + 150)
    big = Usage(prompt_tokens=200_001, cache_read_tokens=200_000, output_tokens=0)
    assert usage_cost(big, prices) * 1e6 == pytest.approx(1 * 6.0 + 200_000 * 0.6)  # the whole request at the tier


@pytest.mark.parametrize("name", WITH_USAGE)
def test_recorded_replay_is_within_five_percent_of_the_bill(name):
    report = replay_file(need(SESSIONS / name), load_settings(), ["recorded"])
    bill = report.bill
    assert bill is not None and bill.records > 0 and bill.bill_usd > 0
    assert bill.recorded_usd == report.results[0].total_usd
    assert abs(bill.ratio - 1) <= BILL_TOLERANCE, (name, bill.ratio, bill.causes)
    assert sum(c.usd for c in bill.causes) == pytest.approx(bill.recorded_usd - bill.bill_usd, abs=1e-9)
    assert [c.cause for c in bill.causes] == list(CAUSES)
    data = report.to_dict()["bill_check"]
    assert data["within_tolerance"] and data["ratio"] == pytest.approx(bill.ratio)


def test_claude_code_compaction_request_is_named_as_missing_from_the_bill():
    bill = replay_file(need(SESSIONS / "claude_code/cc_posthog_dashboard_compact.jsonl"), load_settings(), ["recorded"]).bill
    cause = next(c for c in bill.causes if c.cause == "compaction_requests")
    assert cause.count == 1 and cause.usd > 0 and "Claude Code writes none of its own" in cause.detail


def test_codex_compaction_requests_are_found_among_its_usage_records():
    bill = replay_file(need(SESSIONS / "codex/codex_pharma_2compactions.jsonl"), load_settings(), ["recorded"]).bill
    cause = next(c for c in bill.causes if c.cause == "compaction_requests")
    assert cause.count == 2 and "2 recorded as usage" in cause.detail
    assert next(c for c in bill.causes if c.cause == "no_replayed_call").count == 0  # both unplaced records are those requests
    assert next(c for c in bill.causes if c.cause == "missing_usage").count == 3


def test_session_without_usage_has_no_bill_check():
    report = replay_file(need(SESSIONS / "openai_chat/miniswe_github_issue.traj.json"), load_settings(), ["never"])
    assert report.bill is None and report.to_dict()["bill_check"] is None
