"""Receipts: every compaction's cost, saving, payback and what it dropped that was used again."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.core.cuts import message_arrays
from dp_compact.pricing import Prices
from dp_compact.replay.context import tail_cut_mask
from dp_compact.replay.meter import ReplayParams, make_recording, replay
from dp_compact.replay.policies import Schedule, parse_policy
from dp_compact.replay.receipts import policy_receipts, receipts, recorded_receipts
from dp_compact.replay.recorded import recorded_costs
from dp_compact.replay.shell import replay_file
from dp_compact.settings import load_settings
from tests.conftest import REPO, SESSIONS, need
from tests.strategies import conversations

# The small session of tests/test_replay.py: tokens 100 50 1000 20 200 30 2000 40, calls at 1 3 5 7;
# prices 3.00 input / 0.30 cache / 15.00 output $/MTok, V = 1,000, S = 100. Prompts without a
# compaction: 1,100 / 2,150 / 2,370 / 4,400 tokens; outputs 50 / 20 / 30 / 40.
from tests.test_replay import MESSAGES, POSITIONS, TOKENS  # noqa: E402 - the same small session
PARAMS = ReplayParams(prices=Prices("test", 3.0, 0.3, 15.0, None, 10_000, "test"), v_tokens=1000, s_tokens=100)
SETTINGS = load_settings(v=1000, s=100)


def _recording(uses: list[tuple[int, int]] = ()):
    arrays = (np.array([m for m, _ in uses], np.int64), np.array([c for _, c in uses], np.int64))
    return make_recording(MESSAGES, TOKENS, message_arrays(MESSAGES), POSITIONS, TOKENS[POSITIONS], uses=arrays)


def test_receipt_of_one_compaction_by_hand():
    # compact before call 2, the tail starting at message 3: the prompt is V + S + 220 = 1,320.
    # Request: V + H = 2,150 tokens all cached (645), 70 instruction tokens (210), S out (1,500) = 2,355.
    # Call 2 writes 320 tokens (the cache keeps V) where it would have written 220: a rewrite of
    # 100 tokens (the summary) at 3.00 = 300.
    # Call 2: without 645 + 660 + 450 = 1,755, with 300 + 960 + 450 = 1,710; saving 45 + the rewrite 300.
    # Call 3: without 2,370 · 0.3 + 2,030 · 3 + 600 = 7,401; with 1,320 · 0.3 + 2,030 · 3 + 600 = 7,086: 315.
    rec = _recording()
    result = replay(rec, Schedule("s", {2: 3}), PARAMS)
    (receipt,) = policy_receipts(rec, PARAMS, result).receipts
    assert (receipt.number, receipt.call, receipt.cut, receipt.dropped_messages) == (1, 2, 3, 3)
    assert round(receipt.request_usd * 1e6, 6) == 2355 == round(result.compaction_usd * 1e6, 6)
    assert receipt.rewrite_tokens == 100 and round(receipt.rewrite_usd * 1e6, 6) == 300
    assert round(receipt.saved_usd * 1e6, 6) == 345 + 315
    assert receipt.saved_tokens == (2370 - 1320) + (4400 - 3350)
    assert round(receipt.net_usd * 1e6, 6) == 660 - 2655
    never = replay(rec, parse_policy("never", SETTINGS), PARAMS)
    assert receipt.net_usd == pytest.approx(never.total_usd - result.total_usd, abs=1e-12)
    assert receipt.paid_back_call is None and receipt.until_call == 4 and not receipt.next_compaction
    assert receipt.needed_at_call is None and receipt.used_again == () and receipt.source == "replay"


def test_receipt_lists_the_refetch_of_what_it_dropped():
    rec = _recording([(2, 3)])  # call 3 uses message 2, which the compaction before call 2 dropped
    result = replay(rec, Schedule("s", {2: 3}), PARAMS)
    (receipt,) = policy_receipts(rec, PARAMS, result).receipts
    (used,) = receipt.used_again
    assert (used.call, used.message, used.tokens) == (3, 2, 1000)
    assert used.usd == pytest.approx(result.loss_usd - 1000 * 0.3e-6)  # the fetch, not its carrying by call 3


def test_a_compaction_forced_by_an_overflow_is_marked_needed():
    params = ReplayParams(prices=Prices("test", 3.0, 0.3, 15.0, None, 4_000, "test"), v_tokens=1000, s_tokens=100)
    rec = _recording()
    result = replay(rec, parse_policy("never", SETTINGS), params)
    (receipt,) = policy_receipts(rec, params, result).receipts
    assert receipt.forced and receipt.needed_at_call == 3 == receipt.call == receipt.until_call
    assert receipt.to_dict()["needed_at_call"] == 3


@st.composite
def recordings(draw: st.DrawFn):
    """A conversation with random tokens, outputs, call times and uses of earlier messages."""
    messages = tuple(draw(conversations()))
    tokens = np.array(draw(st.lists(st.integers(0, 5000), min_size=len(messages), max_size=len(messages))), dtype=np.int64)
    positions = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    outputs = np.array(draw(st.lists(st.integers(0, 2000), min_size=positions.size, max_size=positions.size)), dtype=np.int64)
    gaps = draw(st.lists(st.sampled_from([5.0, 60.0, 400.0, 4000.0]), min_size=positions.size, max_size=positions.size))
    pairs = [(m, c) for c, p in enumerate(positions.tolist()) for m in range(p)]
    uses = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=10)) if pairs else []
    arrays = (np.array([m for m, _ in uses], np.int64), np.array([c for _, c in uses], np.int64))
    return make_recording(messages, tokens, message_arrays(messages), positions, outputs, 1.8e9 + np.cumsum(gaps), uses=arrays)


POLICIES = ("oracle", "never", "threshold:0.5", "threshold:0.6:0.3", "claude-code", "codex", "openhands", "langchain")


@hypothesis_settings(max_examples=50, deadline=None)
@given(rec=recordings(), window=st.integers(2_000, 40_000), write=st.sampled_from([None, 3.75]),
       ttl=st.sampled_from([None, 300.0]))
def test_receipts_add_up_to_the_policys_compactions(rec, window, write, ttl):
    params = ReplayParams(Prices("test", 3.0, 0.3, 15.0, write, window + 33_000, "test"), v_tokens=1000, s_tokens=100,
                          cache_ttl_s=ttl)
    for spec in POLICIES:
        result = replay(rec, parse_policy(spec, SETTINGS), params)
        found = receipts(rec, params, result).receipts
        assert len(found) == result.compactions, spec
        costs = sum(r.cost_usd for r in found)
        assert costs == pytest.approx(result.compaction_usd + sum(r.rewrite_usd for r in found), abs=1e-12), spec
        assert result.call_usd.sum() + result.compaction_usd == pytest.approx(result.total_usd, abs=1e-12)
        ends = 0
        for r in found:
            assert r.rewrite_usd >= 0 and r.rewrite_tokens >= 0 and r.call <= r.until_call <= rec.n_calls
            assert r.call >= ends  # the calls compared never overlap
            ends = r.until_call
            if r.paid_back_call is None:
                assert r.net_usd <= 1e-12, spec  # the cumulative saving never passed the cost, so neither did the last
            else:
                assert r.call <= r.paid_back_call < r.until_call
        refetched = [u for r in found for u in r.used_again]
        assert len(refetched) <= result.refetches and sum(u.usd for u in refetched) <= result.loss_usd + 1e-12


@hypothesis_settings(max_examples=60, deadline=None)
@given(rec=recordings(), data=st.data(), write=st.sampled_from([None, 3.75]), ttl=st.sampled_from([None, 300.0]))
def test_one_compactions_net_is_what_the_schedule_saves_against_never(rec, data, write, ttl):
    """With one compaction and no overflow, its receipt's net is exactly never's total less the schedule's."""
    assume(rec.n_calls >= 2)
    params = ReplayParams(Prices("test", 3.0, 0.3, 15.0, write, 10**9, "test"), v_tokens=1000, s_tokens=100, cache_ttl_s=ttl)
    call = data.draw(st.integers(1, rec.n_calls - 1))
    cuts = np.flatnonzero(tail_cut_mask(rec, 0, int(rec.call_positions[call])))
    assume(cuts.size > 0)
    result = replay(rec, Schedule("s", {call: int(data.draw(st.sampled_from(cuts.tolist())))}), params)
    never = replay(rec, parse_policy("never", SETTINGS), params)
    (receipt,) = policy_receipts(rec, params, result).receipts
    assert receipt.net_usd == pytest.approx(never.total_usd - result.total_usd, abs=1e-9)
    assert (receipt.paid_back_call is not None) >= (receipt.net_usd > 1e-12)


# ----------------------------------------------------------------------------- the recorded tool's compactions


def test_recorded_receipts_on_a_claude_code_session_that_compacted_once():
    path = need(SESSIONS / "claude_code/cc_posthog_dashboard_compact.jsonl")
    report = replay_file(path, load_settings(), ("recorded",), with_receipts=True)
    (policy,) = report.receipts
    (receipt,) = policy.receipts
    assert policy.policy == "recorded" and receipt.source == "recorded usage"
    assert receipt.request_usd == pytest.approx(report.results[0].compaction_usd)
    assert receipt.head_prompt_tokens == 167_766  # the context when it fired (preTokens)
    assert receipt.paid_back_call is not None and receipt.net_usd > 0
    assert receipt.call < receipt.paid_back_call <= receipt.until_call
    assert receipt.saved_tokens > 0 and receipt.dropped_messages > 0


def test_recorded_receipts_follow_each_recorded_compaction_in_order():
    from dp_compact.prepare import prepare
    from dp_compact.replay.load import prepared_recording, replay_params
    from dp_compact.sessions import read_session

    path = need(SESSIONS / "codex/codex_pharma_2compactions.jsonl")
    prepared = prepare(read_session(path, raw_json=True), load_settings(), history=True)
    rec, _ = prepared_recording(prepared)
    params, _ = replay_params(prepared, 300.0)
    costs = recorded_costs(rec, params)
    found = recorded_receipts(rec, params, costs).receipts
    assert [r.call for r in found] == [c.call for c in rec.cuts] and len(found) == 2
    assert [r.request_usd for r in found] == list(costs.compaction_usd)
    assert found[0].until_call <= found[1].call and (found[0].next_compaction or found[0].needed_at_call is not None)
    for r in found:
        assert all(u.usd is None and u.call >= r.call for u in r.used_again)


# ----------------------------------------------------------------------------- the command line


def test_cli_receipts_of_the_recorded_tool():
    path = need(SESSIONS / "claude_code/cc_posthog_dashboard_compact.jsonl")
    done = CliRunner().invoke(app, ["replay", str(path), "--policy", "recorded", "--receipts"])
    assert done.exit_code == 0, done.output
    assert re.search(r"^receipts  recorded: 1 compaction; requests \$0\.\d{4}, cache rewrites \$0\.\d{4}; saved \$\d+\.\d{4}"
                     r" on the calls that followed \(recorded usage\)", done.stdout, flags=re.MULTILINE)
    row = next(line for line in done.stdout.splitlines() if re.match(r"\s+1 ", line))
    assert " 83 " in row and "call 86" in row and "needed by call 160" in row


def test_cli_receipts_json_of_dp_names_its_keys():
    done = CliRunner().invoke(app, ["replay", str(REPO / "dp_compact/examples/session.jsonl"), "--policy", "dp",
                                    "--policy", "never", "--receipts", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    dp, never = data["receipts"]
    assert dp["policy"] == "dp" and dp["compactions"] == data["policies"][0]["compactions"]
    assert dp.get("clearings", 0) == data["policies"][0]["clearings"]  # a receipt per compaction and per clearing (DESIGN §9)
    assert len(dp["receipts"]) == dp["compactions"] + data["policies"][0]["clearings"]
    assert never["receipts"] == []
    assert sum(r["request_usd"] for r in dp["receipts"]) == pytest.approx(data["policies"][0]["compaction_usd"])
    documented = set(re.findall(r"`([a-z_]+)`", (REPO / "docs/replay.md").read_text("utf-8")))
    used = next(u for r in dp["receipts"] for u in r["used_again"])
    keys = {"receipts", *dp, *dp["receipts"][0], *used}
    assert keys <= documented, keys - documented


def test_cli_receipts_need_one_session_file(tmp_path):
    done = CliRunner().invoke(app, ["replay", str(tmp_path), "--receipts"])
    assert done.exit_code == 2 and "--receipts" in done.output
