"""Clearing old tool results as an action of the look-ahead planner (DESIGN §9)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings as hypothesis_settings, strategies as st
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.conversation import Message, ToolCall, ToolResult, Usage
from dp_compact.core.lookahead import Forecast, look_ahead
from dp_compact.core.planner import plan
from dp_compact.core.planner_lookahead import clear_depths
from dp_compact.measure.clearing import CLEAR_KEEP_TOOL_RESULTS, clearable_saved_tokens, clearing_facts_for, is_cleared_text
from dp_compact.measure.tokens import count_message_tokens
from dp_compact.pricing import Prices
from dp_compact.sessions import read_session
from dp_compact.settings import load_settings
from tests.conftest import SESSIONS
from tests.pipeline_helpers import write_jsonl
from tests.strategies import session_of

PRICES = Prices("test", 3.0, 0.30, 15.0, 3.75, 200_000, "DESIGN §2")
V, S = 20_000, 800
_REF = re.compile(r"restore (archive://\S+?)#msg-(\d+)\]")


def _forecast(calls: float | None, growth: float = 2_000.0) -> Forecast:
    return Forecast(growth_tokens=growth, calls_so_far=10, survival_alpha=1.5, survival_scale=50.0, remaining_calls=calls)


@hypothesis_settings(max_examples=40, deadline=None)
@given(st.integers(30_000, 150_000), st.floats(0.05, 0.6), st.floats(0.0, 0.5), st.booleans(), st.floats(0.0, 0.05))
def test_a_last_call_clearing_costs_its_own_call_and_loss(context, share, unchanged_share, cold, loss):
    """With the present call the last one, clearing costs that call's smaller prompt (read up to the
    first changed message, the rest written; all written when the cache is cold) and the loss."""
    x0 = context - V
    saved, unchanged = np.array([share * x0]), unchanged_share * (1 - share) * x0
    ahead = look_ahead(context, np.array([x0 // 2]), np.zeros(1), _forecast(1), PRICES, v_tokens=V, s_tokens=S,
                       limit_tokens=180_000, cold_now=cold, clear_saved_tokens=saved, clear_kept_tokens=unchanged,
                       clear_loss_usd=np.array([loss]))
    after = x0 - saved[0]
    if cold:
        call = PRICES.p_write * (V + after) / 1e6
    else:
        call = (PRICES.p_cache * (V + unchanged) + PRICES.p_write * (after - unchanged)) / 1e6
    assert ahead.clear_usd[0] == pytest.approx(call + loss, rel=1e-9)


@hypothesis_settings(max_examples=25, deadline=None)
@given(st.integers(40_000, 120_000), st.floats(0.1, 0.5), st.integers(3, 30))
def test_after_clearing_the_future_is_that_of_a_smaller_context(context, share, calls):
    """Clearing then goes on as keeping would from a context smaller by the saved tokens: the values
    agree with a look-ahead started there, less the first call (grid interpolation aside)."""
    x0 = context - V
    saved = float(round(share * x0))
    tail = 3_000  # the present's smallest tail bounds the future's: the same in both
    cleared = look_ahead(context, np.array([x0 - tail]), np.zeros(1), _forecast(calls), PRICES, v_tokens=V, s_tokens=S,
                         limit_tokens=180_000, clear_saved_tokens=np.array([saved]), clear_kept_tokens=0.0)
    smaller = look_ahead(int(context - saved), np.array([int(x0 - saved) - tail]), np.zeros(1), _forecast(calls), PRICES,
                         v_tokens=V, s_tokens=S, limit_tokens=180_000)
    g = 2_000.0
    first_clear = (PRICES.p_cache * V + PRICES.p_write * (x0 - saved)) / 1e6
    first_keep = (PRICES.p_cache * (V + x0 - saved - g) + PRICES.p_write * g) / 1e6
    assert cleared.clear_usd[0] - first_clear == pytest.approx(smaller.keep_usd - first_keep, rel=5e-3, abs=1e-6)


def test_clearing_above_the_threshold_is_not_an_action():
    ahead = look_ahead(170_000, np.array([100_000]), np.zeros(1), _forecast(10), PRICES, v_tokens=V, s_tokens=S,
                       limit_tokens=150_000, clear_saved_tokens=np.array([5_000.0, 40_000.0]))
    assert np.isinf(ahead.clear_usd[0]) and np.isfinite(ahead.clear_usd[1]) and ahead.best_clear == 1


def _session(rounds: int, result_chars: int, *, prompt_growth: int | None = None):
    """One user turn, then ``rounds`` tool rounds whose results are ``result_chars`` long, with usage."""
    messages = [Message("user", "port the parser", raw={"role": "user", "content": "port the parser"})]
    for i in range(rounds):
        call = ToolCall(f"c{i}", "read_file", json.dumps({"path": f"src/mod{i}.py"}))
        messages += [Message("assistant", f"reading module {i}", tool_calls=(call,)),
                     Message("tool", tool_results=(ToolResult(f"c{i}", f"# module {i}\n" + "x = 1\n" * (result_chars // 6)),))]
    tokens = np.array([10 if m.role != "tool" else result_chars // 4 for m in messages], dtype=np.int64)
    growth = prompt_growth or int(tokens[-2:].sum())
    usage = tuple(Usage(V + growth * i) for i in range(1, rounds + 1))
    return replace(session_of(messages), usage=usage, llm_calls=rounds), tokens


def test_plan_clears_long_old_results_and_names_the_action():
    session, tokens = _session(40, 12_000)
    result = plan(session, tokens, load_settings(), PRICES)
    assert result.decision == "clear" and result.rule == "clear"
    n = result.n_messages
    assert (result.k, result.cut, result.head_tokens) == (n, 0, 0)  # every message stays
    clearing = result.clearing
    saved = clearable_saved_tokens(session.messages, tokens)
    depths = clear_depths(saved, n, result.min_keep)
    assert clearing["depth"] in depths.tolist() and clearing["depth"] <= n - result.min_keep
    assert clearing["saved_tokens"] == int(saved[: clearing["depth"]].sum())
    # the last CLEAR_KEEP_TOOL_RESULTS long results stay
    assert int((saved[clearing["depth"]:] > 0).sum()) >= CLEAR_KEEP_TOOL_RESULTS
    assert result.context_after_tokens == result.estimates.context_tokens - clearing["saved_tokens"]
    assert "clearing old tool results now saves" in result.explanation and "no summary request" in result.explanation
    assert clearing["clear_usd"] < result.lookahead["keep_usd"] and clearing["clear_usd"] < result.lookahead["compact_usd"]
    assert json.loads(json.dumps(result.to_dict(), allow_nan=False))["clearing"]["depth"] == clearing["depth"]


def test_plan_never_clears_when_clearing_is_off_or_results_are_short():
    session, tokens = _session(40, 12_000)
    off = plan(session, tokens, load_settings(clear_tool_results=False), PRICES)
    assert off.decision in ("compact", "keep") and off.clearing is None
    short, short_tokens = _session(40, 600, prompt_growth=3_000)  # under CLEAR_MIN_CHARS: nothing is clearable
    assert not clearable_saved_tokens(short.messages, short_tokens).any()
    assert plan(short, short_tokens, load_settings(), PRICES).decision != "clear"


def test_clear_depths_keep_the_last_results_and_the_last_round():
    saved = np.array([0, 900, 0, 800, 0, 700, 0, 600, 0, 500])
    assert clear_depths(saved, 10, 1).tolist() == [2, 4]
    assert clear_depths(saved, 10, 7).tolist() == [2]
    assert clear_depths(saved, 10, 1, keep_results=0).tolist() == [2, 4, 6, 8]
    assert clear_depths(np.zeros(5, np.int64), 5, 1).size == 0


@pytest.mark.skipif(not SESSIONS.exists(), reason="../shared/sessions is absent")
@pytest.mark.parametrize("name", ["codex/codex_raze.jsonl", "claude_code/cc_fundwise.jsonl", "openai_chat/oai_task393c91_converted.json"])
def test_estimated_clearing_savings_are_close_to_the_exact_count(name):
    """The planner's estimate (character shares, no tokenizing) against :func:`clearing_facts_for`'s exact count."""
    path = SESSIONS / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    messages = read_session(path).messages
    tokens = count_message_tokens(messages)
    exact = clearing_facts_for(messages, tokens).saved_tokens[-1]
    estimate = clearable_saved_tokens(messages, tokens).sum()
    assert exact > 0 and estimate == pytest.approx(exact, rel=0.08)


def test_compact_carries_out_a_plan_that_clears(tmp_path, monkeypatch):
    """``dp-compact compact`` without --action does what the plan says: here, clear; the output is
    valid, every message stays, the cleared results name the archive, and restore returns them."""
    session, _ = _session(40, 12_000)
    rows = [{"role": "system", "content": "you are a coding agent"}]
    for m in session.messages:
        if m.role == "user":
            rows.append({"role": "user", "content": m.text})
        elif m.role == "assistant":
            rows.append({"role": "assistant", "content": m.text, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls]})
        else:
            rows += [{"role": "tool", "tool_call_id": r.call_id, "content": r.text} for r in m.tool_results]
    source = tmp_path / "session.jsonl"
    write_jsonl(source, rows)
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    monkeypatch.setenv("DP_PROVIDER", "claude-sonnet-4-5")
    runner = CliRunner()
    planned = runner.invoke(app, ["plan", str(source), "--json"])
    assert planned.exit_code == 0, planned.output
    if json.loads(planned.stdout)["decision"] != "clear":
        pytest.fail(f"the plan of this session should clear: {json.loads(planned.stdout)['explanation']}")
    out = tmp_path / "out.jsonl"
    done = runner.invoke(app, ["compact", str(source), "-o", str(out), "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["action"] == "clear" and data["written"] and data["depth"] == json.loads(planned.stdout)["clearing"]["depth"]
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert len([r for r in written if r["role"] != "system"]) == len(rows) - 1  # every message stays
    cleared = [r for r in written if r["role"] == "tool" and is_cleared_text(r["content"])]
    assert len(cleared) == data["cleared_results"] > 0
    assert runner.invoke(app, ["validate", str(out), "--api", "openai"]).exit_code == 0
    ref, index = _REF.search(cleared[0]["content"]).groups()
    restored = runner.invoke(app, ["restore", f"{ref}#msg-{index}"])
    assert restored.exit_code == 0 and "# module 0" in restored.stdout


def test_a_cleared_file_plans_as_the_conversation_it_was(tmp_path):
    """The first placeholder of a cleared file states the model, window, context, avg, token ratio and V,
    so planning the cleared file prices it as the source (as a shrunk file's first preview does)."""
    from dp_compact.api import plan_file
    from dp_compact.pipeline.archive import ArchiveStore
    from dp_compact.pipeline.compact import compact_file

    source = SESSIONS / "codex" / "codex_raze.jsonl"
    if not source.exists():
        pytest.skip(f"{source} is absent")
    settings = load_settings()
    before = plan_file(source, settings, use_cache=False)
    if before.decision != "clear":
        pytest.skip(f"the plan of {source.name} does not clear today: {before.explanation}")
    out = tmp_path / "cleared.jsonl"
    done = compact_file(source, settings, output=out, archiver=ArchiveStore(tmp_path / "archive"), use_cache=False)
    assert done.__class__.__name__ == "ClearResult" and done.written
    after = plan_file(out, settings, use_cache=False)
    assert after.prices.name == before.prices.name and after.prices.max_context_tokens == before.prices.max_context_tokens
    assert after.settings["v"] == before.settings["v"]
    assert after.estimates.context_tokens == pytest.approx(before.context_after_tokens, rel=0.05)  # what the plan said it would be
    assert after.estimates.avg_tokens == pytest.approx(before.estimates.avg_tokens, abs=1)
