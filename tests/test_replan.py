"""Compacted and shrunk output re-plans as the same conversation (model, window, usage evidence)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dp_compact.api import plan_file
from dp_compact.measure.estimation import DEFAULT_AVG_TOKENS
from dp_compact.pipeline import compact_file, shrink_file
from dp_compact.sessions import read_session
from dp_compact.sessions.common import shrunk_recorded, summary_usage
from dp_compact.settings import load_settings
from tests.conftest import SESSIONS, need

# Real sessions with usage records: Claude Code (one compaction by the planner's own choice) and Codex
# (a recorded window, two recorded compactions).
COMPACTED = ["claude_code/cc_fundwise.jsonl", "codex/codex_pharma_2compactions.jsonl"]
# Shrink finds old long tool results in these; cc_task43 ran on a 1M window (accepted prompts over 200K).
SHRUNK = ["claude_code/cc_task43_develop.jsonl", "claude_code/cc_posthog_dashboard_compact.jsonl", "codex/codex_pharma_2compactions.jsonl"]


@pytest.mark.parametrize("name", COMPACTED)
def test_compacted_file_replans_keep_with_the_same_model_window_and_usage(name: str, tmp_path: Path):
    source = need(SESSIONS / name)
    settings = load_settings(clear_tool_results=False)  # a summarizing compaction (clearing: tests/test_plan_clearing.py)
    before = plan_file(source, settings, use_cache=False)
    assert before.decision == "compact" and before.estimates.avg_source == "measured"
    out = tmp_path / "compacted.jsonl"
    result = compact_file(source, settings, output=out, use_cache=False)
    assert result.decision == "compact" and out.exists()
    after = plan_file(out, settings, use_cache=False)
    assert (after.decision, after.rule) == ("keep", "just-compacted")
    assert after.prices.name == before.prices.name and after.prices.max_context_tokens == before.prices.max_context_tokens
    # avg: the mean prompt per call over the source's usage records, computed here from the records
    usage = read_session(source).usage
    mean_prompt = sum(u.prompt_tokens for u in usage) / len(usage)
    assert after.estimates.avg_tokens != DEFAULT_AVG_TOKENS and after.estimates.avg_source == "recorded"
    assert after.estimates.avg_tokens == pytest.approx(mean_prompt, abs=0.5)  # stated rounded to a token
    # t, L and c carry over; the token scale measured on the source is the one the compacted file uses
    assert after.estimates.user_turns == before.estimates.user_turns
    assert after.estimates.calls_per_turn == pytest.approx(before.estimates.calls_per_turn)
    assert after.estimates.compactions == before.estimates.compactions + 1
    scale = [n for n in before.notes if n.startswith("message tokens scaled by")]
    assert scale and scale[0].endswith("(measured)")
    assert any(n.startswith(scale[0].split(" (")[0]) and n.endswith("(recorded)") for n in after.notes)
    # the plan of the compacted file is below the window, as the source's plan said it would be
    assert after.estimates.context_tokens < after.prices.max_context_tokens
    # V measured on the source's usage records is the one the compacted file, which has none, is planned with
    assert before.v_source == "measured" and (after.settings["v"], after.v_source) == (before.settings["v"], "recorded")
    assert any(n.startswith(f"V {before.settings['v']:,} tokens: as the statement of an earlier") for n in after.notes)


def test_summary_usage_reads_only_our_summaries():
    text = ("[summary]\nEarlier messages of this conversation (9 messages, 1 user turns, 4 LLM calls, about 900 tokens, "
            "2 messages follow) were compacted by dp-compact (compaction 1; model m; window 200,000 tokens; "
            "avg 12,345 prompt tokens per call; ratio 1.6300 provider tokens per cl100k token). What they held:")
    assert summary_usage(text) == (12_345.0, 1.63)
    assert summary_usage(text.replace("[summary]", "Summary:")) == (None, None)
    assert summary_usage(text.replace("; avg 12,345 prompt tokens per call", "")) == (None, 1.63)


@pytest.mark.parametrize("name", SHRUNK)
def test_shrunk_file_plans_its_shrunk_context_under_the_same_window(name: str, tmp_path: Path):
    source = need(SESSIONS / name)
    settings = load_settings()
    before = plan_file(source, settings, use_cache=False)
    out = tmp_path / "shrunk.jsonl"
    result = shrink_file(source, output=out, settings=settings)
    assert result.output is not None and result.chars_after < result.chars_before
    after = plan_file(out, settings, use_cache=False)
    window = before.prices.max_context_tokens
    assert (after.prices.name, after.prices.max_context_tokens) == (before.prices.name, window)
    assert after.estimates.context_tokens < before.estimates.context_tokens  # previews replaced long results
    if before.estimates.context_tokens < window:
        assert after.estimates.context_tokens < window
    assert after.estimates.avg_tokens == pytest.approx(before.estimates.avg_tokens, abs=0.5)
    # the shrunk file keeps the source's measured V where its own usage records measure none
    assert before.v_source == "measured"
    assert (after.settings["v"], after.v_source) == (before.settings["v"], "recorded")
    # the context saved is what the previews saved, at the source's token scale (within rounding)
    statement = next(
        shrunk_recorded(r.text) for line in out.read_text().splitlines() for r in _results(json.loads(line))
        if shrunk_recorded(r.text)
    )
    assert statement["recorded_context"][0] == after.estimates.context_tokens
    # t, the calls behind L and c are the whole conversation's, though the file holds only its live part
    original = read_session(source)
    assert statement["recorded_totals"] == (original.user_turns, original.llm_calls, original.compactions)
    assert (after.estimates.user_turns, after.estimates.compactions) == (before.estimates.user_turns, before.estimates.compactions)
    assert after.estimates.calls_per_turn == pytest.approx(before.estimates.calls_per_turn)


def _results(row: dict) -> list:
    """Tool results of one written line, as objects with a ``text``."""
    from types import SimpleNamespace

    content = row.get("content")
    if row.get("role") == "tool":
        return [SimpleNamespace(text=content if isinstance(content, str) else json.dumps(content))]
    if isinstance(content, list):
        return [SimpleNamespace(text=b["content"] if isinstance(b.get("content"), str) else json.dumps(b.get("content")))
                for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return []


def test_shrunk_file_cc_task43_was_over_the_window_without_the_statement(tmp_path: Path):
    """Issue record: the shrunk cc_task43 was planned at 131 % of a 200K default window; its session
    accepted prompts over 258K tokens (a 1M window). The statement keeps the window and the context."""
    source = need(SESSIONS / "claude_code" / "cc_task43_develop.jsonl")
    out = tmp_path / "shrunk.jsonl"
    shrink_file(source, output=out, settings=load_settings())
    after = plan_file(out, load_settings(), use_cache=False)
    assert after.prices.max_context_tokens == 1_000_000 and after.estimates.context_source == "recorded"
    assert after.estimates.context_tokens < 0.5 * after.prices.max_context_tokens
