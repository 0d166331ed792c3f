"""The window per session from evidence (DESIGN §6) and the recorded summary sizes: one test per
precedence rule on synthetic sessions, the accepted-prompt bound at its boundary, the shared sessions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dp_compact.api import choose_prices
from dp_compact.cli import app
from dp_compact.errors import SettingsError
from dp_compact.calibration.evidence import recorded_summary_tokens
from dp_compact.calibration.history import read_history
from dp_compact.sessions import read_session
from dp_compact.conversation import Message, RecordedCompaction, Session, Usage
from dp_compact.prepare import prepare
from dp_compact.settings import load_settings
from dp_compact.replay.timeline import timeline
from dp_compact.measure.windows import (
    CLAUDE_CODE_BUFFER_TOKENS,
    CLAUDE_CODE_OUTPUT_RESERVE_TOKENS,
    CODEX_AUTO_COMPACT_RATIO,
    claude_code_trigger_tokens,
    codex_trigger_tokens,
    context_window,
    known_windows,
    window_note,
)
from tests.conftest import SESSIONS, need


def _session(
    fmt: str = "claude_code", model: str | None = "claude-opus-4-7", *, prompts: tuple[int, ...] = (), window: int | None = None,
    records: tuple[RecordedCompaction, ...] = (), window_source: str = "",
) -> Session:
    usage = tuple(Usage(p, line=i + 1) for i, p in enumerate(prompts))
    return Session(path="s", format=fmt, messages=(), usage=usage, model=model, context_window=window, compaction_records=records,
                   window_source=window_source)


def _auto(pre: int, tool: str = "claude-code", trigger: str | None = "auto") -> RecordedCompaction:
    return RecordedCompaction(tool, 7, trigger=trigger, pre_tokens=pre, summary_text="s")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the tools' rules


def test_claude_code_trigger_is_window_minus_output_reserve_minus_buffer():
    assert (CLAUDE_CODE_BUFFER_TOKENS, CLAUDE_CODE_OUTPUT_RESERVE_TOKENS) == (13_000, 20_000)  # autoCompact.ts
    assert claude_code_trigger_tokens(200_000, "claude-opus-4-7") == 167_000
    assert claude_code_trigger_tokens(1_000_000, "claude-sonnet-4-6") == 967_000
    assert claude_code_trigger_tokens(200_000, "claude-3-5-sonnet-20241022") == 200_000 - 8_192 - 13_000  # max output 8,192


def test_codex_trigger_is_ninety_percent_of_the_window():
    assert CODEX_AUTO_COMPACT_RATIO == 0.9
    assert codex_trigger_tokens(258_400) == 232_560


def test_known_windows_claude_are_200k_and_1m_others_the_database_and_alternatives():
    assert known_windows("claude-opus-4-7", 1_000_000) == (200_000, 1_000_000)
    assert known_windows("anthropic/claude-sonnet-4", 200_000) == (200_000, 1_000_000)
    assert known_windows("gpt-5.3-codex", 400_000) == (272_000, 400_000)
    assert known_windows("gpt-4o", 128_000) == (128_000,)
    assert known_windows(None, 64_000) == (64_000,)


# --------------------------------------------------------------------------- precedence, one rule each


def test_context_window_explicit_setting_beats_all_evidence():
    session = _session(prompts=(900_000,), window=258_400, records=(_auto(167_766),))
    window, source = context_window(session, 1_000_000, explicit=50_000)
    assert window == 50_000 and "DP_MAX_CONTEXT_TOKENS" in source  # not raised by the accepted prompt either


def test_context_window_recorded_window_beats_auto_compaction_and_tool_default():
    session = _session("codex", "gpt-5.4", window=258_400, records=(_auto(950_000, "codex"),), window_source="Codex's model_context_window")
    assert context_window(session, 1_050_000) == (258_400, "the window recorded in the session (Codex's model_context_window)")


def test_context_window_claude_code_auto_compaction_picks_the_window_whose_trigger_is_nearest():
    window, source = context_window(_session(records=(_auto(167_766),)), 1_000_000)
    assert window == 200_000  # 167,000 is 766 away; 1M's 967,000 is far
    assert "Claude Code" in source and "167,766" in source and "line 7" in source and "200,000 - 20,000 - 13,000 = 167,000" in source


def test_context_window_auto_compaction_beats_the_tool_default():
    assert context_window(_session(records=(_auto(960_000),)), 1_000_000)[0] == 1_000_000  # 200K cannot hold it


def test_context_window_auto_compaction_only_among_windows_that_hold_it():
    # 200K holds 199,000 and its trigger 167,000 is nearer than 1M's 967,000; 200,001 only fits in 1M.
    assert context_window(_session(records=(_auto(199_000),)), 1_000_000)[0] == 200_000
    assert context_window(_session(records=(_auto(200_001),)), 1_000_000)[0] == 1_000_000


def test_context_window_codex_auto_compaction_uses_ninety_percent_rule():
    session = _session("codex", "gpt-5.3-codex", records=(_auto(244_000, "codex"),))
    window, source = context_window(session, 400_000)
    assert window == 272_000 and "Codex" in source and "90% of 272,000 = 244,800" in source


def test_context_window_latest_auto_compaction_decides():
    session = _session(records=(_auto(960_000), _auto(167_000)))
    assert context_window(session, 1_000_000)[0] == 200_000


@pytest.mark.parametrize("record", [_auto(960_000, trigger="manual"), _auto(960_000, trigger=None), _auto(960_000, tool="other")])
def test_context_window_manual_unknown_or_other_tool_compaction_is_no_window_evidence(record):
    assert context_window(_session(records=(record,)), 1_000_000) == (200_000, "Claude Code's default window for claude-opus-4-7")


def test_context_window_claude_code_default_beats_the_price_database():
    assert context_window(_session(), 1_000_000) == (200_000, "Claude Code's default window for claude-opus-4-7")
    assert context_window(_session(model=None), 64_000)[0] == 200_000


def test_context_window_converted_claude_code_session_gets_the_tool_default():
    converted = _session("openai_chat", "claude-sonnet-4-6", records=(RecordedCompaction("claude-code", 0, summary_text="s"),))
    window, source = context_window(converted, 1_000_000)
    assert window == 200_000 and source.endswith("(the file records Claude Code's compactions: a converted Claude Code session)")
    plain = _session("openai_chat", "claude-sonnet-4-6")
    assert context_window(plain, 1_000_000)[0] == 1_000_000


def test_context_window_claude_code_on_a_non_claude_model_takes_the_database():
    window, source = context_window(_session(model="glm-4.6"), 128_000, database_name="glm-4.6")
    assert (window, source) == (128_000, "the price database's window for glm-4.6")


def test_context_window_without_session_is_the_database_window():
    assert context_window(None, 128_000, database_name="gpt-4o") == (128_000, "the price database's window for gpt-4o")
    assert context_window(_session("anthropic", None), 200_000)[0] == 200_000


def test_context_window_rejects_a_non_positive_window():
    with pytest.raises(ValueError, match="> 0"):
        context_window(None, 0)


# --------------------------------------------------------------------------- the accepted-prompt bound


def test_context_window_accepted_prompt_equal_to_the_window_keeps_it():
    assert context_window(_session(prompts=(10, 200_000)), 1_000_000)[0] == 200_000


def test_context_window_accepted_prompt_one_above_raises_to_next_known_window():
    window, source = context_window(_session(prompts=(200_001, 10)), 1_000_000)
    assert window == 1_000_000
    assert "(200,000) is below a prompt the provider accepted (200,001 tokens)" in source and "next known window" in source


def test_context_window_accepted_prompt_above_every_known_window_is_rounded_up():
    session = _session("openai_chat", "gpt-4o", prompts=(128_001,))
    window, source = context_window(session, 128_000)
    assert window == 129_000 and "rounded up" in source
    assert context_window(_session("openai_chat", "gpt-4o", prompts=(129_000,)), 128_000)[0] == 129_000


def test_context_window_accepted_prompt_bounds_a_recorded_window():
    session = _session("codex", "gpt-5.3-codex", prompts=(300_000,), window=258_400)
    assert context_window(session, 400_000)[0] == 400_000


# --------------------------------------------------------------------------- choose_prices and the commands


def test_choose_prices_always_notes_the_window_and_its_source():
    prices, notes = choose_prices(load_settings(), None)
    assert prices.max_context_tokens == 200_000
    assert prices.window_source == "the price database's window for claude-sonnet-4"
    assert window_note(200_000, prices.window_source) in notes
    prices, notes = choose_prices(load_settings(max_context_tokens=90_000), _session(prompts=(150_000,)))
    assert prices.max_context_tokens == 90_000 and window_note(90_000, prices.window_source) in notes
    assert "DP_MAX_CONTEXT_TOKENS" in prices.window_source


def test_choose_prices_window_follows_the_session_not_the_database():
    prices, notes = choose_prices(load_settings(), _session(prompts=(150_000,)))  # genai-prices: claude-opus-4-7 1M
    assert prices.name == "claude-opus-4-7" and prices.max_context_tokens == 200_000
    assert "context window 200,000 tokens: Claude Code's default window for claude-opus-4-7" in notes


def test_choose_prices_unknown_model_with_prompts_above_the_fallback_window_asks_for_the_window():  # shared case 25
    session = _session(model="northwind-coder-2", prompts=(226_100, 228_997))
    with pytest.raises(SettingsError, match="DP_MAX_CONTEXT_TOKENS.*'northwind-coder-2' is unknown.*228,997"):
        choose_prices(load_settings(), session)
    assert choose_prices(load_settings(max_context_tokens=400_000), session)[0].max_context_tokens == 400_000
    assert choose_prices(load_settings(), _session(model="northwind-coder-2", prompts=(150_000,)))[0].max_context_tokens == 200_000


def test_choose_prices_known_model_with_prompts_above_its_windows_rounds_the_prompt_up():
    prices, notes = choose_prices(load_settings(provider="gpt-4o"), _session("anthropic", None, prompts=(152_557,)))
    assert prices.max_context_tokens == 153_000 and "rounded up" in prices.window_source


def test_window_note_states_window_and_source():
    assert window_note(1_000_000, "a: b") == "context window 1,000,000 tokens: a: b"


def _claude_code_file(tmp_path: Path, prompts: list[int], *, boundary_after: int | None = None) -> Path:
    """A small Claude Code transcript whose calls report ``prompts`` (a manual compaction after call ``boundary_after``)."""
    lines: list[dict] = []
    parent = None
    for i, prompt in enumerate(prompts):
        lines.append({"type": "user", "uuid": f"u{i}", "parentUuid": parent, "sessionId": "s",
                      "message": {"role": "user", "content": f"prompt {i}"}})
        lines.append({"type": "assistant", "uuid": f"a{i}", "parentUuid": f"u{i}", "sessionId": "s",
                      "message": {"id": f"m{i}", "role": "assistant", "model": "claude-opus-4-6", "content": [{"type": "text", "text": f"answer {i}"}],
                                  "usage": {"input_tokens": 3, "cache_read_input_tokens": prompt - 3, "output_tokens": 10}}})
        parent = f"a{i}"
        if boundary_after == i:
            lines.append({"type": "system", "subtype": "compact_boundary", "uuid": "b", "parentUuid": None, "content": "Conversation compacted",
                          "compactMetadata": {"trigger": "manual", "preTokens": prompt}})
            lines.append({"type": "user", "uuid": "c", "parentUuid": "b", "sessionId": "s", "isCompactSummary": True,
                          "message": {"role": "user", "content": "This session is being continued from a previous conversation. Summary: x"}})
            parent = "c"
    path = tmp_path / "cc.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return path


def test_cli_plan_shows_where_the_window_came_from(tmp_path: Path):
    path = _claude_code_file(tmp_path, [30_000, 250_000, 251_000])
    result = CliRunner().invoke(app, ["plan", str(path), "--json", "--no-cache"])
    data = json.loads(result.stdout)
    assert data["max_context_tokens"] == 1_000_000
    assert data["window_source"].startswith("Claude Code's default window for claude-opus-4-6 (200,000) is below a prompt")
    text = CliRunner().invoke(app, ["plan", str(path), "--no-cache"]).stdout
    assert "window    1,000,000 tokens: Claude Code's default window" in text
    assert text.count("Claude Code's default window") == 1  # not repeated as a note


def test_timeline_window_uses_every_call_of_the_file_not_only_the_live_segment(tmp_path: Path):
    path = _claude_code_file(tmp_path, [30_000, 250_000, 20_000, 21_000], boundary_after=1)
    line = timeline(read_history(path), load_settings(), use_cache=False)
    assert line.prices.max_context_tokens == 1_000_000 and "250,000 tokens" in line.window_source


# --------------------------------------------------------------------------- summary sizes


def test_recorded_summary_tokens_scale_counted_tokens_by_the_session_ratio():
    summary = "word " * 200
    session = Session(path="s", format="claude_code", messages=(Message("user", "hi"),), model="claude-opus-4-7",
                      compaction_records=(RecordedCompaction("claude-code", 3, summary_text=summary), RecordedCompaction("codex", 9)))
    ((tool, scaled),) = recorded_summary_tokens(session, settings=load_settings(token_ratio=2.0))
    (plain,) = [n for _, n in recorded_summary_tokens(session, settings=load_settings(token_ratio=1.0))]
    assert tool == "claude-code" and scaled == 2 * plain and 200 < plain < 210  # 200 words + message overhead
    ((_, bytes4),) = recorded_summary_tokens(session, load_settings(tokenizer="bytes4"))
    assert bytes4 == -(-len(summary) // 4) + 1  # the seed's estimate, never scaled
    assert recorded_summary_tokens(_session(), load_settings()) == ()
    prepared = prepare(session, load_settings(token_ratio=2.0), use_cache=False)  # a prepared session gives its own scale
    assert recorded_summary_tokens(prepared) == recorded_summary_tokens(session, load_settings(token_ratio=2.0))
    with pytest.raises(TypeError):  # the settings are the caller's: never read from the environment here
        recorded_summary_tokens(session)


# --------------------------------------------------------------------------- the shared sessions

EXPECTED_WINDOWS = {
    "claude_code/cc_posthog_dashboard_compact.jsonl": 200_000,  # auto-compacted at 167,766 (trigger 167,000)
    "claude_code/cc_fundwise.jsonl": 200_000,  # Claude Code's default
    "claude_code/cc_privacy_x402.jsonl": 200_000,
    "claude_code/cc_raze_hooks.jsonl": 200_000,
    "claude_code/cc_task43_develop.jsonl": 1_000_000,  # prompts up to 258,045
    "codex/codex_fundwise_tui.jsonl": 258_400,  # model_context_window
    "codex/codex_meridianops_windows.jsonl": 258_400,
    "codex/codex_pharma_2compactions.jsonl": 258_400,
    "codex/codex_raze.jsonl": 258_400,
    "openai_chat/oai_task393c91_converted.json": 200_000,  # a converted Claude Code session
}


@pytest.mark.parametrize(("name", "expected"), EXPECTED_WINDOWS.items(), ids=list(EXPECTED_WINDOWS))
def test_shared_session_window_from_evidence(name: str, expected: int):
    session = read_session(need(SESSIONS / name))
    prices, notes = choose_prices(load_settings(), session)
    assert prices.max_context_tokens == expected
    assert prices.window_source and window_note(expected, prices.window_source) in notes


def test_shared_posthog_window_comes_from_its_auto_compaction():
    session = read_session(need(SESSIONS / "claude_code" / "cc_posthog_dashboard_compact.jsonl"))
    source = choose_prices(load_settings(), session)[0].window_source
    assert "auto-compaction at 167,766 tokens on line 831" in source


def test_shared_sessions_recorded_summary_sizes():
    posthog = read_session(need(SESSIONS / "claude_code" / "cc_posthog_dashboard_compact.jsonl"))
    pharma = read_session(need(SESSIONS / "codex" / "codex_pharma_2compactions.jsonl"))
    ((tool, tokens),) = recorded_summary_tokens(posthog, load_settings())
    assert tool == "claude-code" and 3_000 < tokens < 10_000  # 3,234 cl100k tokens, scaled by the session's ratio
    assert [t for t, _ in recorded_summary_tokens(pharma, load_settings())] == ["codex", "codex"]
    assert all(1_500 < n < 2_500 for _, n in recorded_summary_tokens(pharma, load_settings()))
