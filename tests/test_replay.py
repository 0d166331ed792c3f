"""Replay (docs/replay.md): hand-computed costs per policy, invariants, real sessions, CLI."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.core.cuts import message_arrays
from dp_compact.errors import SettingsError
from dp_compact.pricing import Prices
from dp_compact.replay.bill import usage_cost
from dp_compact.replay.meter import ReplayParams, counted_tokens_per_message, make_recording, prefix_floor_usd, replay
from dp_compact.replay.policies import (
    Schedule,
    CLAUDE_CODE_BUFFER_TOKENS,
    CLAUDE_CODE_OUTPUT_RESERVE_TOKENS,
    CODEX_AUTO_COMPACT_RATIO,
    CODEX_USER_MESSAGE_MAX_TOKENS,
    DEFAULT_POLICIES,
    LANGCHAIN_MESSAGES_TO_KEEP,
    LANGCHAIN_TRIGGER_RATIO,
    OPENHANDS_KEEP_FIRST,
    OPENHANDS_MAX_SIZE,
    LangChain,
    OpenHands,
    parse_policy,
)
from dp_compact.fleet.jobs import replay_directory
from dp_compact.replay.shell import load_recording, replay_file, replay_history, replay_v_tokens
from dp_compact.sessions import read_session
from dp_compact.conversation import Message, ToolCall, ToolResult
from dp_compact.settings import load_settings
from tests.conftest import SESSIONS, need, session_files
from tests.strategies import conversations

# ----------------------------------------------------------------------------- a small session
#
#   index  role       tokens  call
#   0      user          100
#   1      assistant      50   call 0 (prompt = messages [0, 1)), tool call c1
#   2      tool         1000
#   3      assistant      20   call 1
#   4      user          200
#   5      assistant      30   call 2, tool call c2
#   6      tool         2000
#   7      assistant      40   call 3
#
# Prices 3.00 input / 0.30 cache / 15.00 output $/MTok, V = 1,000, S = 100, L_instr = 70.
# Cumulative tokens: [0, 100, 150, 1150, 1170, 1370, 1400, 3400, 3440].
# Prompts under "never": 1,100 / 2,150 / 2,370 / 4,400 tokens; outputs 50 / 20 / 30 / 40.
# All sums below are in $ · 1e6 (tokens · $/MTok).

MESSAGES = (
    Message("user", "start"),
    Message("assistant", "", tool_calls=(ToolCall("c1", "bash", "{}"),)),
    Message("tool", tool_results=(ToolResult("c1", "out"),)),
    Message("assistant", "done"),
    Message("user", "next"),
    Message("assistant", "", tool_calls=(ToolCall("c2", "bash", "{}"),)),
    Message("tool", tool_results=(ToolResult("c2", "out"),)),
    Message("assistant", "done"),
)
TOKENS = np.array([100, 50, 1000, 20, 200, 30, 2000, 40])
POSITIONS = np.array([1, 3, 5, 7])


def _prices(window: int, write: float | None = None) -> Prices:
    return Prices("test", 3.0, 0.3, 15.0, write, window, "test")


def _params(window: int = 10_000, write: float | None = None, ttl: float | None = None) -> ReplayParams:
    return ReplayParams(prices=_prices(window, write), v_tokens=1000, s_tokens=100, cache_ttl_s=ttl)


def _recording(times: list[float] | None = None):
    return make_recording(MESSAGES, TOKENS, message_arrays(MESSAGES), POSITIONS, TOKENS[POSITIONS],
                          None if times is None else np.array(times))


def _settings(**flags):
    """Small V and S; DESIGN §2's decision (``myopic``) so that the arithmetic below can be followed by hand."""
    return load_settings(v=1000, s=100, **{"planner": "myopic", **flags})


def _total(result) -> float:
    return round(result.total_usd * 1e6, 6)


def test_replay_never_charges_cache_reads_new_input_and_output():
    result = replay(_recording(), parse_policy("never", _settings()), _params())
    # call 0: 1,100 new · 3 = 3,300;                    output 50 · 15 = 750
    # call 1: 1,100 read · 0.3 = 330, 1,050 new · 3 = 3,150;  output 20 · 15 = 300
    # call 2: 2,150 read · 0.3 = 645,   220 new · 3 = 660;    output 30 · 15 = 450
    # call 3: 2,370 read · 0.3 = 711, 2,030 new · 3 = 6,090;  output 40 · 15 = 600
    assert round(result.cache_read_usd * 1e6, 6) == 330 + 645 + 711
    assert round(result.input_usd * 1e6, 6) == 3300 + 3150 + 660 + 6090
    assert round(result.output_usd * 1e6, 6) == 750 + 300 + 450 + 600
    assert result.write_usd == 0 and result.compaction_usd == 0
    assert _total(result) == 16986
    assert (result.compactions, result.overflows, result.peak_context_tokens) == (0, 0, 4400)
    assert result.mean_context_tokens == (1100 + 2150 + 2370 + 4400) / 4


def test_replay_profile_with_write_price_charges_new_tokens_as_writes():
    result = replay(_recording(), parse_policy("never", _settings()), _params(write=3.75))
    # the 13,200/3 = 4,400 uncached tokens are cache writes at 3.75
    assert result.input_usd == 0
    assert round(result.write_usd * 1e6, 6) == 4400 * 3.75


def test_replay_cache_ttl_empties_the_cache_after_a_long_gap():
    result = replay(_recording([0, 10, 400, 410]), parse_policy("never", _settings()), _params(ttl=300))
    # call 2 comes 390 s after call 1: its 2,370 tokens are all new (7,110) instead of 645 + 660
    assert _total(result) == 16986 - 645 - 660 + 7110


def test_replay_cache_ttl_silence_exactly_the_ttl_keeps_the_cache():
    """DESIGN §8: the cache is cold after silence *longer* than the TTL; a gap of exactly the TTL still hits."""
    result = replay(_recording([0, 10, 310, 320]), parse_policy("never", _settings()), _params(ttl=300))
    # call 2 comes 300 s after call 1: 2,150 read · 0.3 = 645, 220 new · 3 = 660, as without a TTL
    assert _total(result) == 16986
    assert round(result.cache_read_usd * 1e6, 6) == 330 + 645 + 711
    longer = replay(_recording([0, 10, 310.5, 320.5]), parse_policy("never", _settings()), _params(ttl=300))
    assert _total(longer) == 16986 - 645 - 660 + 7110  # half a second more: all 2,370 tokens new


def test_replay_threshold_summary_only_keeps_the_last_round_and_restarts_from_v():
    result = replay(_recording(), parse_policy("threshold:0.3", _settings()), _params())
    # calls 0-2 as "never" (prompts < 3,000). Call 3: 4,400 >= 3,000 -> summary of all but the last
    # API round (a tail is never empty): cut 5, head [0, 5) = 1,370 tokens.
    #   request over V + H = 2,370, all cached: 711, 70 · 3 = 210, 100 · 15 = 1,500
    #   call 3 prompt V + S + 2,030 = 3,130: 1,000 read · 0.3 = 300, 2,130 new · 3 = 6,390, output 600
    assert round(result.compaction_usd * 1e6, 6) == 711 + 210 + 1500
    assert _total(result) == (330 + 645 + 300) + (3300 + 3150 + 660 + 6390) + 2100 + 2421
    assert result.compactions == 1 and result.peak_context_tokens == 3130
    assert result.schedule == ((3, 5),)


def test_replay_threshold_keeping_a_share_keeps_the_largest_feasible_tail_within_it():
    result = replay(_recording(), parse_policy("threshold:0.3:0.7", _settings()), _params())
    # budget 0.7 · 3,400 = 2,380; feasible cuts 1, 3, 4, 5 keep 3,300 / 2,250 / 2,230 / 2,030 tokens -> cut 3
    #   request over V + 1,150 = 2,150 (all cached): 645 + 210 + 1,500 = 2,355
    #   call 3 prompt 1,000 + 100 + 2,250 = 3,350: 300 read, 2,350 new · 3 = 7,050, output 600
    assert _total(result) == (330 + 645 + 300) + (3300 + 3150 + 660 + 7050) + 2100 + 2355


def test_replay_claude_code_compacts_at_window_minus_output_reserve_and_buffer():
    window = CLAUDE_CODE_OUTPUT_RESERVE_TOKENS + CLAUDE_CODE_BUFFER_TOKENS + 3000  # trigger at 3,000 tokens
    result = replay(_recording(), parse_policy("claude-code", _settings()), _params(window=window))
    assert _total(result) == 19296  # the same arithmetic as threshold:0.3 (summary only at call 3)


def test_replay_codex_keeps_recent_user_messages_beside_the_summary():
    result = replay(_recording(), parse_policy("codex", _settings()), _params(window=4000))
    # trigger 0.9 · 4,000 = 3,600 <= 4,400 at call 3; request as summary-only (cut 5: 2,421);
    # block = S + user tokens (100 + 200) = 400; call 3 prompt 3,430: 300 read, 2,430 new · 3 = 7,290, 600 out
    assert _total(result) == (330 + 645 + 300) + (3300 + 3150 + 660 + 7290) + 2100 + 2421


def test_replay_openhands_keeps_first_messages_summary_and_recent_events():
    result = replay(_recording(), OpenHands(max_size=6, keep_first=1), _params())
    # call 3 sees 7 events > 6: target 3 -> keep 3 - 1 - 1 = 1 recent message at least: cut 5, message 0 pinned
    #   request over V + 2,370 (cached): 711 + 210 + 1,500 = 2,421; cache keeps V + message 0 = 1,100
    #   call 3 prompt 1,000 + 100 + 100 + 2,030 = 3,230: 1,100 read · 0.3 = 330, 2,130 new · 3 = 6,390
    assert _total(result) == (330 + 645 + 330) + (3300 + 3150 + 660 + 6390) + 2100 + 2421


def test_replay_langchain_keeps_the_last_messages_at_a_feasible_cut():
    result = replay(_recording(), LangChain(trigger_ratio=0.3, keep_messages=2), _params())
    # call 3: 4,400 >= 3,000; keep >= 2 messages -> cut 5 (messages 5, 6)
    #   request 711 + 210 + 1,500 = 2,421; call 3 prompt 3,130: 300 read, 2,130 new · 3 = 6,390
    assert _total(result) == (330 + 645 + 300) + (3300 + 3150 + 660 + 6390) + 2100 + 2421


def test_replay_planner_forced_rule_compacts_where_the_context_passes_the_threshold():
    # R = E · L = 1 and QP = 0: NetBenefit is never positive, only the forced rule (0.2 · 10,000) acts,
    # on the prompt about to be sent (the replay knows it exactly).
    settings = _settings(e_fixed=1, l=1, quality_penalty=0, force_ratio=0.2)
    result = replay(_recording(), parse_policy("dp", settings), _params())
    # call 0: 1,100 new · 3 = 3,300, output 750
    # call 1: prompt 2,150 > 2,000 -> forced at the only cut, 1 (drop message 0):
    #   request over V + 100 = 1,100, cached: 330 + 210 + 1,500 = 2,040
    #   prompt 1,000 + 100 + 1,050 = 2,150: 1,000 read = 300, 1,150 new · 3 = 3,450, output 300
    # call 2: prompt 1,000 + 100 + 1,270 = 2,370 > 2,000; keeping 4 (the nearest to 3) leaves it there,
    #   so the deepest cut, 4 (the user message): request over V + 1,170 = 2,170: 2,150 read = 645,
    #   20 new · 3 = 60, 210, 1,500 -> 2,415; prompt 1,300: 300 read, 300 new · 3 = 900, output 450
    # call 3: prompt 1,000 + 100 + 2,230 = 3,330 > 2,000 -> the deepest cut, 5: request over
    #   V + 300 = 1,300 cached: 390 + 210 + 1,500 = 2,100; prompt 3,130: 300 read, 2,130 new · 3 = 6,390, output 600
    assert _total(result) == (3300 + 750) + (2040 + 300 + 3450 + 300) + (2415 + 300 + 900 + 450) + (2100 + 300 + 6390 + 600)
    assert result.compactions == 3


def test_replay_seed_planner_forced_rule_cuts_only_at_plain_user_turns():
    settings = _settings(e_fixed=1, l=1, quality_penalty=0, force_ratio=0.2)
    result = replay(_recording(), parse_policy("seed", settings), _params())
    # call 1: prompt 2,150 > 2,000 but no plain-user cut drops anything: sent as it is
    #   (1,100 read = 330, 1,050 new · 3 = 3,150, output 300)
    # call 2: forced at the user message 4: request over V + 1,170 = 2,170: 645 + 60 + 210 + 1,500 = 2,415;
    #   prompt 1,300: 300 + 900, output 450
    # call 3: prompt 3,330 > 2,000; the only plain-user cut (message 4) drops just the summary:
    #   request over V + 100 = 1,100 cached: 330 + 210 + 1,500 = 2,040; prompt 3,330: 300 read,
    #   2,330 new · 3 = 6,990, output 600
    assert _total(result) == (3300 + 750) + (330 + 3150 + 300) + (2415 + 300 + 900 + 450) + (2040 + 300 + 6990 + 600)
    assert result.compactions == 2


def test_replay_never_overflow_is_never_free_it_forces_a_summary_only_compaction():
    result = replay(_recording(), parse_policy("never", _settings()), _params(window=3200))
    # call 3: 4,400 > 3,200 -> overflow, rejected (free); never has no fallback: forced summary-only
    #   compaction at the deepest feasible cut 5: request over V + 1,370 = 2,370 tokens, all cached:
    #   711 + L_instr 70 · 3 = 210 + S 100 · 15 = 1,500 -> 2,421; the cache keeps V (1,000)
    #   call 3 prompt V + S + 2,030 = 3,130: 1,000 read · 0.3 = 300, 2,130 new · 3 = 6,390, output 600
    assert (result.overflows, result.forced, result.compactions, result.truncations) == (1, 1, 1, 0)
    assert _total(result) == 3300 + (330 + 3150) + (645 + 660) + 2421 + (300 + 6390) + 2100
    assert result.compaction_usd == pytest.approx(2421 / 1e6)
    assert result.peak_context_tokens == 3130


def test_replay_never_overflow_is_hard_truncated_only_when_even_the_summary_does_not_fit():
    result = replay(_recording(), parse_policy("never", _settings()), _params(window=3100))
    # as above, but V + S + 2,030 = 3,130 > 3,100: the summary is dropped too (hard truncation at the
    #   tail's start, no request): call 3 prompt 3,030: 300 read, 2,030 new · 3 = 6,090, output 600
    assert (result.overflows, result.forced, result.compactions, result.truncations) == (1, 1, 1, 1)
    assert _total(result) == 3300 + (330 + 3150) + (645 + 660) + 2421 + (300 + 6090) + 2100
    assert result.peak_context_tokens == 3030
    assert result.to_dict()["forced"] == 1


def test_replay_same_planner_policy_object_gives_the_same_result_twice():
    policy = parse_policy("dp", _settings(force_ratio=0.2))
    first, second = (replay(_recording(), policy, _params()) for _ in range(2))
    assert first == second


def test_parse_policy_rejects_unknown_names_and_bad_numbers():
    for spec in ("sometimes", "threshold", "threshold:0", "threshold:1.5", "threshold:0.8:-1", "threshold:x", "dp:1"):
        with pytest.raises(SettingsError, match="--policy"):
            parse_policy(spec, _settings())


def test_presets_use_the_documented_numbers():
    assert (CLAUDE_CODE_OUTPUT_RESERVE_TOKENS, CLAUDE_CODE_BUFFER_TOKENS) == (20_000, 13_000)
    assert (CODEX_AUTO_COMPACT_RATIO, CODEX_USER_MESSAGE_MAX_TOKENS) == (0.9, 20_000)
    assert (OPENHANDS_MAX_SIZE, OPENHANDS_KEEP_FIRST) == (120, 4)
    assert (LANGCHAIN_TRIGGER_RATIO, LANGCHAIN_MESSAGES_TO_KEEP) == (0.8, 20)
    assert all(parse_policy(name, _settings()).name == name for name in DEFAULT_POLICIES)


# ----------------------------------------------------------------------------- invariants


@st.composite
def recordings(draw: st.DrawFn):
    """A conversation with random token counts; one call per assistant message."""
    messages = tuple(draw(conversations()))
    tokens = np.array(draw(st.lists(st.integers(0, 5000), min_size=len(messages), max_size=len(messages))), dtype=np.int64)
    positions = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    outputs = np.array(draw(st.lists(st.integers(0, 2000), min_size=positions.size, max_size=positions.size)), dtype=np.int64)
    return make_recording(messages, tokens, message_arrays(messages), positions, outputs)


POLICIES = ("dp", "seed", "never", "threshold:0.5", "threshold:0.6:0.3", "threshold:0.7:3000", "claude-code", "codex",
            "openhands", "langchain")


@hypothesis_settings(max_examples=60, deadline=None)
@given(rec=recordings(), window=st.integers(2_000, 60_000), write=st.sampled_from([None, 3.75]))
def test_replay_invariants_hold_for_every_policy(rec, window, write):
    params = ReplayParams(_prices(window + 33_000, write), v_tokens=1000, s_tokens=100)
    floor = prefix_floor_usd(rec, params)
    for spec in POLICIES:
        result = replay(rec, parse_policy(spec, _settings()), params)
        assert result.total_usd >= result.floor_usd - 1e-12 >= floor - 2e-12
        assert result.calls == rec.n_calls and result.contexts.shape == (rec.n_calls,)
        assert result.truncations <= result.overflows
        if result.overflows == 0:
            assert result.peak_context_tokens <= params.window
    never = replay(rec, parse_policy("never", _settings()), params)
    assert never.compactions == never.forced <= never.overflows  # no free overflow: forced compactions only
    assert (never.compaction_usd > 0) == (never.compactions > 0)
    full = params.v_tokens + rec.prefix_tokens[rec.call_positions]
    assert (never.overflows > 0) == bool(full.size and full.max() > params.window)
    if never.overflows == 0:
        np.testing.assert_array_equal(never.contexts, full)


# ----------------------------------------------------------------------------- real sessions


def _readable(path: Path) -> bool:
    return not path.name.startswith("cline_ui_messages")


@pytest.mark.parametrize("path", [p for p in session_files() if _readable(p)] or [SESSIONS / "absent"], ids=lambda p: p.name)
@pytest.mark.slow
def test_replay_real_session_every_policy_runs(path):
    need(path)
    report = replay_file(path, load_settings(), [*DEFAULT_POLICIES, "threshold:0.8:0.3"], use_cache=False)
    assert report.n_calls > 0 and len(report.results) == len(DEFAULT_POLICIES) + 1
    for result in report.results:
        assert result.total_usd >= result.floor_usd >= report.prefix_floor_usd - 1e-9
        assert result.compactions >= 0 and result.calls == report.n_calls
    assert report.to_dict()["best_fixed_usd"] == min(r.total_usd for r in report.results if r.fixed)


def test_replay_history_drops_what_recorded_compactions_inserted():
    codex = read_session(need(SESSIONS / "codex" / "codex_pharma_2compactions.jsonl"))
    history = replay_history(codex)
    assert len(codex.history) - len(history) == 18  # 2 summaries and 16 replacement-history copies
    claude = read_session(need(SESSIONS / "claude_code" / "cc_posthog_dashboard_compact.jsonl"))
    assert len(replay_history(claude)) == len(claude.history) - 1 > len(claude.messages)


@pytest.mark.slow
def test_replay_directory_lists_every_session_and_skips_non_sessions():
    folder = need(SESSIONS)
    policies = ["never", "threshold:0.8:0.3", "dp"]
    report = replay_directory(folder, load_settings(), policies, workers=1)
    readable = [p for p in session_files() if _readable(p)]
    assert [Path(s.path) for s in report.sessions] == readable
    assert [Path(p).name for p, _ in report.skipped] == ["cline_ui_messages_cardgame.json"]
    ((path, reason),) = report.skipped
    assert "Cline UI log" in reason and path not in reason  # the row names the file once
    totals = {row["policy"]: row for row in report.totals()}
    # Recomputed from the per-session results: the sum over sessions of each policy's total, over
    # the least such sum among the fixed rules (never, threshold; dp adapts, so it is not one).
    summed = {name: sum(s.results[i].total_usd for s in report.sessions) for i, name in enumerate(policies)}
    best_fixed = min(summed["never"], summed["threshold:0.8:0.3"])
    for name in policies:
        assert totals[name]["total_usd"] == pytest.approx(summed[name], rel=1e-12)
        assert totals[name]["vs_best_fixed"] == pytest.approx(summed[name] / best_fixed, rel=1e-12)
    assert totals["dp"]["calls"] == sum(s.n_calls for s in report.sessions)


# ----------------------------------------------------------------------------- command line


def _write_session(path: Path) -> Path:
    lines = []
    for turn in range(6):
        lines.append({"role": "user", "content": f"task {turn} " + "word " * 400})
        lines.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"t{turn}", "name": "bash", "input": {"cmd": "ls"}}]})
        lines.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{turn}", "content": "file " * 3000}]})
        lines.append({"role": "assistant", "content": "done " * 50})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def test_cli_replay_prints_a_table_per_policy(tmp_path):
    session = _write_session(tmp_path / "s.jsonl")
    done = CliRunner().invoke(app, ["replay", str(session), "--policy", "never", "--policy", "threshold:0.05:0.5", "--v", "1000"])
    assert done.exit_code == 0, done.output
    assert "never" in done.output and "threshold:0.05:0.5" in done.output and "vs best fixed" in done.output


def test_cli_replay_prints_the_prices_as_plan_prints_them(tmp_path):
    """A price of three decimals ($0.175/MTok cache reads) is printed whole, as plan's profile line does."""
    session = _write_session(tmp_path / "s.jsonl")
    replayed = CliRunner().invoke(app, ["replay", str(session), "--policy", "never", "--provider", "gpt-5.3-codex"])
    planned = CliRunner().invoke(app, ["plan", str(session), "--provider", "gpt-5.3-codex"])
    assert replayed.exit_code == 0 and planned.exit_code == 0, replayed.output + planned.output
    prices = re.search(r"input (\S+) / cache (\S+) / output (\S+) \$/MTok", replayed.stdout)
    assert prices is not None and prices.group(2) == "0.175", replayed.stdout
    assert f"input {prices.group(1)} / cache {prices.group(2)} / output {prices.group(3)} $/MTok" in planned.stdout


def test_cli_replay_json_has_stable_keys(tmp_path):
    session = _write_session(tmp_path / "s.jsonl")
    done = CliRunner().invoke(app, ["replay", str(session), "--json", "--policy", "dp", "--policy", "never", "--cache-ttl", "300"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    assert {"session", "prices", "v_tokens", "s_tokens", "cache_ttl_s", "best_fixed_usd", "policies"} <= set(data)
    assert [p["policy"] for p in data["policies"]] == ["dp", "never"]
    assert {"total_usd", "cache_read_usd", "input_usd", "write_usd", "output_usd", "compaction_usd", "compactions",
            "overflows", "peak_context_tokens", "mean_context_tokens", "vs_best_fixed"} <= set(data["policies"][0])


def test_cli_replay_bad_policy_exits_2(tmp_path):
    session = _write_session(tmp_path / "s.jsonl")
    done = CliRunner().invoke(app, ["replay", str(session), "--policy", "sometimes"])
    assert done.exit_code == 2 and "unknown policy" in done.output


def test_cli_replay_plot_writes_an_image(tmp_path):
    pytest.importorskip("matplotlib")
    session = _write_session(tmp_path / "s.jsonl")
    done = CliRunner().invoke(app, ["replay", str(session), "--policy", "never", "--policy", "codex", "--plot", str(tmp_path / "c.png")])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_cli_replay_folder_in_worker_processes_prints_rows_and_totals(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        _write_session(folder / name)
    (folder / "notes.txt").write_text("not a session")
    done = CliRunner().invoke(app, ["replay", str(folder), "--policy", "never", "--policy", "dp", "--workers", "2"])
    assert done.exit_code == 0, done.output
    assert "a.jsonl" in done.output and "b.jsonl" in done.output and "total" in done.output


@pytest.mark.slow
def test_cli_replay_folder_shows_each_sessions_v_and_marks_the_ones_charged_dp_v():
    """A row per session with the V it is charged: the measured prefix as measured, ``DP_V`` marked ``*``."""
    folder = need(SESSIONS / "claude_code")
    done = CliRunner().invoke(app, ["replay", str(SESSIONS), "--policy", "never", "--json"])
    assert done.exit_code == 0, done.output
    charged = {Path(r["session"]["path"]).name: (r["v_tokens"], r["v_source"]) for r in json.loads(done.output)["sessions"]}
    shown = CliRunner().invoke(app, ["replay", str(SESSIONS), "--policy", "never"]).output
    rows: dict[str, str] = {}
    for line in shown.splitlines():  # the first table's row of each session (the bill-check table below names them too)
        if line.split() and line.split()[0] in charged:
            rows.setdefault(line.split()[0], line.split()[2])
    assert rows.keys() == charged.keys() and any(name.startswith("cc_") for name in rows) and folder.is_dir()
    for name, (v, source) in charged.items():
        assert rows[name] == f"{v:,}" + ("" if source == "measured" else "*"), name
    assert ("marked *, DP_V" in shown) is any(source != "measured" for _, source in charged.values())


# ----------------------------------------------------------------------------- lost information (DESIGN §6)


def _recording_with_uses(uses: list[tuple[int, int]]):
    return make_recording(MESSAGES, TOKENS, message_arrays(MESSAGES), POSITIONS, TOKENS[POSITIONS],
                          uses=(np.array([m for m, _ in uses]), np.array([c for _, c in uses])))


def test_replay_charges_a_refetch_for_a_dropped_message_a_later_call_uses():
    # threshold:0.3 compacts before call 3 at cut 5 (test above): messages 0-4 are dropped.
    # Call 3 uses message 2 (1,000 tokens, dropped), message 6 (in the tail) and message 0 before
    # the compaction (at call 1, still live): only message 2 is fetched again:
    #   extra call: the 3,130-token prompt from cache 939 + 60 output tokens · 15 = 900,
    #   message 2 fresh 1,000 · 3 = 3,000; carried by call 3: 1,000 · 0.3 = 300
    rec = _recording_with_uses([(2, 3), (6, 3), (0, 1)])
    charged = replay(rec, parse_policy("threshold:0.3", _settings()), _params())
    free = replay(rec, parse_policy("threshold:0.3", _settings()), replace(_params(), loss="none"))
    assert round(charged.loss_usd * 1e6, 6) == 939 + 900 + 3000 + 300
    assert charged.refetches == 1 and free.refetches == 0 and free.loss_usd == 0
    assert _total(charged) - _total(free) == 939 + 900 + 3000 + 300
    assert replay(rec, parse_policy("never", _settings()), _params()).loss_usd == 0  # nothing dropped


def test_replay_codex_does_not_lose_the_user_messages_it_keeps():
    rec = _recording_with_uses([(0, 3), (4, 3)])  # both user messages are used after the compaction
    result = replay(rec, parse_policy("codex", _settings()), _params(window=4000))
    assert result.compactions == 1 and result.refetches == 0
    rec = _recording_with_uses([(2, 3)])
    assert replay(rec, parse_policy("codex", _settings()), _params(window=4000)).refetches == 1


def test_replay_carried_refetches_are_read_by_the_next_compaction_then_dropped():
    # compact before call 2 (cut 3) and call 3 (cut 5); call 2 uses message 2 (dropped at call 2)
    rec = _recording_with_uses([(2, 2)])
    result = replay(rec, Schedule("s", {2: 3, 3: 5}), _params())
    # call 2: prompt V + S + 220 = 1,320: extra call 396 + 900 + 3,000, carried 300;
    # compaction before call 3 reads the 1,000 carried tokens once more (300), then they are gone
    assert round(result.loss_usd * 1e6, 6) == 396 + 900 + 3000 + 300 + 300
    assert result.refetches == 1 and result.schedule == ((2, 3), (3, 5))


def test_loss_mode_is_checked():
    with pytest.raises(ValueError, match="loss"):
        replace(_params(), loss="sometimes")
    done = CliRunner().invoke(app, ["replay", str(SESSIONS), "--loss", "sometimes"])
    assert done.exit_code == 2 and "--loss" in done.output


# ----------------------------------------------------------------------------- the oracle on real sessions


@pytest.mark.parametrize("loss", ["refetch", "none"])
@pytest.mark.slow
def test_oracle_is_at_most_every_policy_on_every_shared_session(loss):
    report = replay_directory(need(SESSIONS), load_settings(), DEFAULT_POLICIES, workers=2, loss=loss)
    assert len(report.sessions) >= 10
    for session in report.sessions:
        totals = {r.policy: r.total_usd for r in session.results}
        oracle = totals.pop("oracle")
        assert all(oracle <= total + 1e-9 for total in totals.values()), (session.path, oracle, totals)
        assert session.results[0].overflows == 0


def test_cli_replay_json_reports_the_oracle_ratio_and_the_assumption(tmp_path):
    session = _write_session(tmp_path / "s.jsonl")
    done = CliRunner().invoke(app, ["replay", str(session), "--policy", "oracle", "--policy", "never", "--v", "1000", "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    assert data["loss"] == "refetch" and "taken as fixed" in data["assumption"]
    ratios = {p["policy"]: p["vs_oracle"] for p in data["policies"]}
    assert ratios["oracle"] == 1.0 and ratios["never"] >= 1.0


def _recorded_and_fired(name: str, policy: str) -> tuple[list[int], list[int], int]:
    """Calls before which the file's tool compacted, and before which the preset did; the window."""
    session = read_session(need(SESSIONS / name))
    report = replay_file(session.path, load_settings(), [policy])
    history = replay_history(session)
    lines = np.array([m.line for m in history])
    positions = np.flatnonzero([m.role == "assistant" for m in history])  # one call per assistant message
    recorded = [int(np.searchsorted(positions, np.searchsorted(lines, r.line))) for r in session.compaction_records]
    return recorded, [call for call, _ in report.results[0].schedule], report.params.window


def test_codex_preset_compacts_where_codex_did_on_a_recorded_session():
    """The codex preset fires where Codex did: the first time within 3 calls; later ones (after a
    history that differs from the real one) within 15 % of the calls since the previous one."""
    recorded, fired, window = _recorded_and_fired("codex/codex_pharma_2compactions.jsonl", "codex")
    assert window == 258_400  # the window the rollout records
    assert len(fired) == len(recorded) == 2
    assert abs(fired[0] - recorded[0]) <= 3, (fired, recorded)
    assert abs(fired[1] - recorded[1]) <= 0.15 * (recorded[1] - recorded[0]), (fired, recorded)


def test_claude_code_preset_compacts_where_claude_code_did_on_a_recorded_session():
    """The transcript lacks half of what Claude Code sent (attachments, task notifications, tool
    schemas): the preset counts the context as the usage records do, so it fires where Claude Code did."""
    recorded, fired, window = _recorded_and_fired("claude_code/cc_posthog_dashboard_compact.jsonl", "claude-code")
    assert window == 200_000
    assert len(fired) == len(recorded) == 1
    assert abs(fired[0] - recorded[0]) <= 2, (fired, recorded)


@hypothesis_settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(-3_000, 9_000)), min_size=1, max_size=25),
       st.integers(0, 5_000), st.integers(1, 400))
def test_counted_tokens_give_every_recorded_prompt_back(steps, base, per_message):
    """Without a recorded compaction, the counted prefix at each recorded call is its recorded prompt
    (whatever the provider added unseen, truncated or trimmed); only a trim counts below 0."""
    n = sum(k for k, _ in steps) + 1
    tokens = np.full(n, per_message, dtype=np.int64)
    positions, prompts, p, prompt = [1], [base + per_message], 1, base + per_message
    for added, grown in steps:
        p, prompt = p + added, max(prompt + grown, 0)
        positions.append(p)
        prompts.append(prompt)
    positions_a, prompts_a = np.array(positions, dtype=np.int64), np.array(prompts, dtype=np.int64)
    counted, counted_v = counted_tokens_per_message(tokens, positions_a, prompts_a)
    assert counted_v == base
    trims = positions_a[1:][np.diff(prompts_a) < 0] - 1  # the last message before a call whose prompt shrank
    assert counted[np.setdiff1d(np.arange(n), trims)].min(initial=0) >= 0
    prefix = np.concatenate(([0], np.cumsum(counted)))
    assert np.array_equal(counted_v + prefix[positions_a], prompts_a)


def test_counted_tokens_start_a_segment_at_a_recorded_compaction():
    tokens = np.full(10, 100, dtype=np.int64)
    positions = np.array([2, 5, 8], dtype=np.int64)
    counted, _ = counted_tokens_per_message(tokens, positions, np.array([1_200, 1_800, 700]), np.array([False, False, True]))
    assert counted[2:5].sum() == 600  # 300 of ours, 300 more counted with the last of them
    assert counted[4] == 400 and np.array_equal(counted[5:8], [100, 100, 100])  # after the compaction: ours


def test_cli_replay_empty_folder_exits_2(tmp_path):
    done = CliRunner().invoke(app, ["replay", str(tmp_path)])
    assert done.exit_code == 2 and "no session file" in done.output


# ----------------------------------------------------------------------------- V: the session's own fixed prefix

SHORT_WITH_USAGE = ["claude_code/cc_raze_hooks.jsonl", "codex/codex_fundwise_tui.jsonl"]


def _bill(session, prices) -> float:
    """$ the usage records imply at ``prices``, as billed (1-hour writes at their price, each record at its tier)."""
    return sum(usage_cost(u, prices) for u in session.usage)


@pytest.mark.parametrize("name", SHORT_WITH_USAGE)
def test_replay_v_measured_from_usage_brings_never_to_the_recorded_bill(name):
    """A short session's bill is mostly its fixed prefix: measured from its own usage records, and
    starting from the cache its first call found (an earlier session's), the replay of ``never`` sends
    the prompts the provider counted, comes closer to the bill than with DP_V or a cold cache, and
    costs the bill within 5 %."""
    path = need(SESSIONS / name)
    session = read_session(path)
    measured = replay_file(path, load_settings(), ["never"])
    assert measured.params.v_source == "measured" and measured.to_dict()["v_source"] == "measured"
    recording, _ = load_recording(read_session(path, raw_json=True), load_settings())
    assert measured.params.v_tokens == recording.counted_v > load_settings().v
    assert any(n.startswith(f"V {measured.params.v_tokens:,} tokens: this session's own") for n in measured.notes)
    recorded_mean = sum(u.prompt_tokens for u in session.usage) / len(session.usage)
    assert measured.results[0].mean_context_tokens == pytest.approx(recorded_mean, rel=0.01)
    billed = _bill(session, measured.params.prices)
    default = replay_file(path, load_settings(v=load_settings().v), ["never"])  # DP_V's default charged
    assert abs(measured.results[0].total_usd / billed - 1) < abs(default.results[0].total_usd / billed - 1)
    warm = min(session.usage[0].cache_read_tokens, measured.params.v_tokens)
    assert warm > 0 and measured.params.warm_tokens == warm
    assert any(f"found {warm:,} tokens of its fixed prefix already cached" in n for n in measured.notes)
    cold = replay(recording, parse_policy("never", load_settings()), replace(measured.params, warm_tokens=0))
    assert abs(measured.results[0].total_usd / billed - 1) < abs(cold.total_usd / billed - 1)
    assert 0.95 <= measured.results[0].total_usd / billed <= 1.05


@pytest.mark.parametrize("policy", ["never", "dp", "oracle", "claude-code"])
def test_a_warm_first_cache_takes_the_same_amount_off_every_policy(policy):
    """Warm tokens are read, not written, by the first request whatever the policy does (the call, or a
    compaction's request before it): every total falls by warm · (P_write − P_cache) and nothing else changes."""
    cold = replay(_recording(), parse_policy(policy, _settings()), _params(write=3.75))
    warm = replay(_recording(), parse_policy(policy, _settings()), replace(_params(write=3.75), warm_tokens=600))
    assert warm.total_usd == pytest.approx(cold.total_usd - 600 * (3.75 - 0.3) / 1e6)
    assert (warm.compactions, warm.schedule) == (cold.compactions, cold.schedule)
    capped = replay(_recording(), parse_policy(policy, _settings()), replace(_params(write=3.75), warm_tokens=1000))
    assert capped.total_usd == pytest.approx(cold.total_usd - 1000 * (3.75 - 0.3) / 1e6)  # all of V (1,000)


def test_replay_explicit_v_wins_over_the_measured_prefix_for_every_policy(monkeypatch):
    path = need(SESSIONS / SHORT_WITH_USAGE[0])
    own = replay_file(path, load_settings(), ["never", "oracle", "dp"])
    monkeypatch.setenv("DP_V", "5000")
    given = replay_file(path, load_settings(), ["never", "oracle", "dp"])
    assert (given.params.v_tokens, given.params.v_source) == (5000, "setting")
    assert f"V 5,000 tokens: DP_V / --v as given (its usage records measure {own.params.v_tokens:,})" in given.notes
    shift = own.params.v_tokens - 5000
    for mine, theirs in zip(own.results, given.results, strict=True):
        assert theirs.peak_context_tokens == mine.peak_context_tokens - shift, theirs.policy
    assert given.prefix_floor_usd < own.prefix_floor_usd
    flag = CliRunner().invoke(app, ["replay", str(path), "--policy", "never", "--prefix-tokens", "7000", "--json"])
    assert flag.exit_code == 0, flag.output
    assert (json.loads(flag.stdout)["v_tokens"], json.loads(flag.stdout)["v_source"]) == (7000, "setting")


def test_replay_session_without_usage_is_charged_dp_v(tmp_path, monkeypatch):
    session = _write_session(tmp_path / "s.jsonl")  # no usage records
    report = replay_file(session, load_settings(), ["never"])
    assert (report.params.v_tokens, report.params.v_source) == (load_settings().v, "default")
    assert any("the DP_V default; the session has no usage record" in n for n in report.notes)
    monkeypatch.setenv("DP_V", "2500")
    assert replay_file(session, load_settings(), ["never"]).params.v_tokens == 2500


@pytest.mark.parametrize(("counted_v", "source", "why"), [
    (4_000, "measured", "this session's own fixed prefix"),
    (0, "default", "not positive"),
    (-300, "default", "not positive"),
    (6_000, "default", "more than 50% of the 10,000-token window"),
])
def test_replay_v_tokens_takes_a_measured_prefix_only_when_it_makes_sense(counted_v, source, why):
    rec = make_recording(MESSAGES, TOKENS, message_arrays(MESSAGES), POSITIONS, TOKENS[POSITIONS],
                         counted=(TOKENS, counted_v))
    settings = load_settings()
    v_tokens, got, note = replay_v_tokens(rec, settings, 10_000)
    assert (v_tokens, got) == ((counted_v, source) if source == "measured" else (settings.v, source))
    assert why in note
    assert replay_v_tokens(rec, load_settings(v=1234), 10_000)[:2] == (1234, "setting")


def test_replay_planner_plans_with_the_v_a_live_plan_would_measure_by_then(monkeypatch):
    """dp plans as ``dp-compact plan`` would at each point of the session: before the first call with DP_V (no
    usage record yet), from the first call on with the prefix that call's usage measures (the replay's measured V);
    with V given (``DP_V`` / ``--v``), or a V the replay did not measure, with the settings' V throughout."""
    import dp_compact.replay.planned as planned

    seen: list[int] = []
    real = planned.plan

    def spy(session, tokens, settings, prices, **options):
        assert "v" not in settings.model_fields_set or settings.v == options["v_tokens"]  # V is handed over, never set in the settings
        seen.append(options["v_tokens"])
        return real(session, tokens, settings, prices, **options)

    monkeypatch.setattr(planned, "plan", spy)
    default_v = load_settings().v
    replay(_recording(), parse_policy("dp", load_settings(s=100, planner="myopic")),
           replace(_params(), v_tokens=3_000, v_source="measured"))
    assert seen[0] == default_v and len(seen) > 1 and set(seen[1:]) == {3_000}
    for settings, params in ((_settings(), replace(_params(), v_tokens=3_000, v_source="measured")),  # V 1,000 given
                             (load_settings(s=100, planner="myopic"), replace(_params(), v_tokens=3_000))):  # not measured
        seen.clear()
        replay(_recording(), parse_policy("dp", settings), params)
        assert seen and set(seen) == {settings.v}


@pytest.mark.slow
def test_replay_directory_applies_the_v_rule_per_session_in_worker_processes(monkeypatch):
    folder = need(SESSIONS)
    report = replay_directory(folder, load_settings(), ["never"], workers=2)
    sources = {Path(s.path).name: (s.params.v_source, s.params.v_tokens) for s in report.sessions}
    assert sources["cc_raze_hooks.jsonl"][0] == "measured" and sources["cc_raze_hooks.jsonl"][1] > 30_000
    assert sources["miniswe_github_issue.traj.json"] == ("default", load_settings().v)
    monkeypatch.setenv("DP_V", "9000")
    given = replay_directory(folder, load_settings(), ["never"], workers=2)
    assert {(s.params.v_source, s.params.v_tokens) for s in given.sessions} == {("setting", 9000)}


@pytest.mark.parametrize("name", ["cc_fundwise.jsonl", "cc_privacy_x402.jsonl"])
def test_cli_replay_verdict_reads_the_policy_table(name, tmp_path):
    session = need(SESSIONS / "claude_code" / name)
    args = ["replay", str(session), "--policy", "dp", "--policy", "oracle", "--policy", "never", "--policy", "claude-code"]
    text = CliRunner().invoke(app, args)
    data = json.loads(CliRunner().invoke(app, [*args, "--json"]).output)
    assert text.exit_code == 0, text.output
    rows = {p["policy"]: p["total_usd"] for p in data["policies"]}
    best = min(("never", "claude-code"), key=lambda n: rows[n])
    line = next(line for line in text.output.splitlines() if line.startswith("verdict"))
    assert f"dp-compact ${rows['dp']:.4f}" in line and f"({best}, ${rows[best]:.4f})" in line
    change = round(abs(rows[best] - rows["dp"]) / rows[best] * 100)
    assert f"{change} % {'less' if rows['dp'] < rows[best] else 'more'} than" in line or change == 0
    assert f"{rows['dp'] / rows['oracle']:.2f} x the hindsight optimum (oracle, ${rows['oracle']:.4f}" in line
    no_dp = CliRunner().invoke(app, ["replay", str(session), "--policy", "never"])
    assert "verdict" not in no_dp.output
