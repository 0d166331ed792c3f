"""Provider-native compactions priced with their documented billing (DESIGN §9, dp_compact.core.native_costs):
the look-ahead's values against a brute force over every schedule, and the plans on real transcripts."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.core.benefit import compaction_request_cost
from dp_compact.core.lookahead import Forecast, look_ahead
from dp_compact.core.native_costs import (
    ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS,
    native_compaction,
)
from dp_compact.pricing import Prices
from tests.conftest import SESSIONS, need

PRICES = Prices("test", 3.0, 0.30, 15.0, 3.75, 200_000, "DESIGN §2")
SHARED = ["claude_code/cc_fundwise.jsonl", "codex/codex_raze.jsonl", "openai_chat/oai_task393c91_converted.json",
          "anthropic_messages/cline_api_history_cardgame.jsonl"]


def _brute_force_native(x0: float, t0: float, calls: int, g: float, v: float, s: float, limit: float, share: float,
                        start: float) -> tuple[float, float]:
    """Every schedule over ``calls`` calls, cheapest by exhaustive recursion, when every compaction is the
    provider's: its request reads V and the whole context, it keeps ``share`` of it (at least the present's
    ``t0``), and none happens at a prompt below ``start`` tokens."""
    pc, pw = PRICES.p_cache, PRICES.p_write
    least = max(t0, 1.0)

    def compact_call(x: float, t: float) -> float:
        return (compaction_request_cost(v + x, 0.0, s, PRICES) + pc * v + pw * (s + t)) / 1e6

    @functools.cache
    def best(n: int, x: float) -> float:  # the cost from call n on, the context before it being x
        if n >= calls:
            return 0.0
        options = []
        if v + x <= limit:
            options.append((pc * (v + x - g) + pw * g) / 1e6 + best(n + 1, x + g))
        if v + x >= start:
            for t in {min(least, x), min(max(share * x, least), x)}:
                if s + t + g <= limit - v:
                    options.append(compact_call(x, t) + best(n + 1, s + t + g))
        return min(options) if options else float("inf")

    keep = (pc * (v + x0 - g) + pw * g) / 1e6 + best(1, x0 + g)
    compact = compact_call(x0, t0) + best(1, s + t0 + g) if v + x0 >= start else float("inf")
    return keep, compact


@hypothesis_settings(max_examples=30, deadline=None)
@given(st.integers(20_000, 120_000), st.integers(2, 6), st.integers(500, 6_000), st.sampled_from([0.0, 0.1]),
       st.sampled_from([0.0, 50_000.0, 90_000.0]))
def test_native_values_equal_a_brute_force_over_every_schedule(context, calls, growth, share, start):
    """With a known length and no loss, keeping and the provider's compaction now cost what the cheapest
    schedule of provider compactions costs (grid error under 0.5 %): the request reads the whole context,
    later compactions keep the provider's share, none below its least trigger."""
    v, s, limit = 20_000, 800, 180_000
    x0 = context - v
    t0 = round(share * x0)
    forecast = Forecast(growth_tokens=growth, calls_so_far=10, survival_alpha=1.5, survival_scale=50.0, remaining_calls=calls)
    ahead = look_ahead(context, np.array([x0 - t0]), np.zeros(1), forecast, PRICES, v_tokens=v, s_tokens=s, limit_tokens=limit,
                       request_tokens=np.array([float(x0)]), future_tail_shares=(share,), whole_requests=True,
                       compact_from_tokens=start)
    keep, compact = _brute_force_native(x0, t0, calls, growth, v, s, limit, share, start)
    assert ahead.keep_usd == pytest.approx(keep, rel=5e-3)
    if np.isinf(compact):
        assert np.isinf(ahead.compact_usd[0])
    else:
        assert ahead.compact_usd[0] == pytest.approx(compact, rel=5e-3)


def test_native_defaults_price_dp_own_compaction_unchanged():
    """Without native arguments the look-ahead is dp's own (the request reads the head): passing the head as
    ``request_tokens`` and the default shares gives bit-identical values."""
    forecast = Forecast(growth_tokens=1_500, calls_so_far=30, survival_alpha=1.55, survival_scale=72.2)
    heads = np.array([20_000, 40_000, 60_000])
    plain = look_ahead(100_000, heads, np.array([0.01, 0.02, 0.04]), forecast, PRICES, v_tokens=18_000, s_tokens=780, limit_tokens=180_000)
    same = look_ahead(100_000, heads, np.array([0.01, 0.02, 0.04]), forecast, PRICES, v_tokens=18_000, s_tokens=780, limit_tokens=180_000,
                      request_tokens=heads.astype(np.float64))
    assert plain.keep_usd == same.keep_usd and np.array_equal(plain.compact_usd, same.compact_usd)
    whole = look_ahead(100_000, heads, np.array([0.01, 0.02, 0.04]), forecast, PRICES, v_tokens=18_000, s_tokens=780, limit_tokens=180_000,
                       request_tokens=np.full(3, 82_000.0), whole_requests=True)
    assert np.all(whole.compact_usd > plain.compact_usd) and whole.keep_usd >= plain.keep_usd  # reading the tail too costs more


def test_native_compaction_drops_what_each_provider_drops():
    roles = ["user", "assistant", "tool", "user", "assistant"]
    tokens, loss = np.array([5, 50, 400, 7, 30]), np.array([0.0, 0.1, 0.2, 0.0, 0.3])
    anthropic = native_compaction("anthropic-compact", roles, tokens, loss)
    assert (anthropic.head_tokens, anthropic.tail_tokens, anthropic.kept_messages) == (492, 0, 0)
    assert anthropic.loss_usd == pytest.approx(0.6) and anthropic.min_prompt_tokens == ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS
    openai = native_compaction("openai-compact", roles, tokens, loss)
    assert (openai.head_tokens, openai.tail_tokens, openai.kept_messages, openai.min_prompt_tokens) == (480, 12, 2, 0.0)
    with pytest.raises(ValueError, match="not a native compaction"):
        native_compaction("anthropic-clear", roles, tokens, loss)


@pytest.mark.parametrize("name", SHARED)
def test_native_plans_on_shared_sessions(name, tmp_path, monkeypatch):
    """``dp-compact plan --native ...`` on real transcripts, at a window small enough to force a compaction
    and at the default one: the provider's compaction drops what it drops, never below its least trigger."""
    path = need(SESSIONS / name)
    monkeypatch.setenv("NO_DP_COMPACT_HOT", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    runner = CliRunner()
    for window in (None, 60_000):
        extra = ["--max-context-tokens", str(window)] if window else []
        own = json.loads(runner.invoke(app, ["plan", str(path), "--json", *extra]).stdout)
        for action in ("anthropic-compact", "openai-compact"):
            result = runner.invoke(app, ["plan", str(path), "--json", "--native", action, *extra])
            assert result.exit_code == 0, result.output
            data = json.loads(result.stdout)
            native = data["lookahead"]["native"]
            assert native["action"] == action and native["request_tokens"] == data["context_tokens"] == own["context_tokens"]
            assert native["dropped_tokens"] + native["kept_tokens"] == data["T"]
            assert data["decision"] in ("keep", "compact")
            if action == "anthropic-compact":
                assert native["kept_messages"] == 0
                if data["context_tokens"] < ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS:
                    assert data["decision"] == "keep"
            if data["decision"] == "compact":
                assert data["k"] == 0 and data["cut"] == data["N"]
                assert data["context_after_tokens"] < data["force_threshold_tokens"]
            elif data["rule"] == "force" or data["context_tokens"] > data["force_threshold_tokens"]:
                assert data["rule"] == "no-feasible-cut"  # must shrink, and the provider cannot (it says why)
            if "would leave about" in data["explanation"]:  # the reason given is true: what it leaves is too large
                left = int(data["explanation"].split("would leave about ")[1].split(" tokens")[0].replace(",", ""))
                assert left >= min(data["force_threshold_tokens"], data["context_tokens"]) or data["decision"] == "keep" and \
                    "waiting is cheaper" in data["explanation"]


def test_compact_refuses_a_native_compaction(tmp_path):
    path = need(SESSIONS / "codex" / "codex_raze.jsonl")
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["compact", str(path), "-o", str(out), "--native", "anthropic-compact"])
    assert result.exit_code == 2 and "the provider carries that compaction out" in result.output and not out.exists()


def test_replay_prices_dp_with_a_provider_compaction():
    """``replay --native``: dp's schedule when every compaction is the provider's. Anthropic's keeps nothing,
    so each one leaves only the summary (the call after starts from V + S + that call's growth); OpenAI's
    keeps the user messages, carried with the summary; neither compacts below what it must, and both fit the window."""
    from dp_compact.replay.shell import replay_file
    from dp_compact.settings import load_settings

    path = need(SESSIONS / "codex" / "codex_pharma_2compactions.jsonl")
    runs = {a: replay_file(path, load_settings(native=a, max_context_tokens=150_000), ["dp"]).results[0]
            for a in ("none", "anthropic-compact", "openai-compact")}
    for action in ("anthropic-compact", "openai-compact"):
        run = runs[action]
        assert run.compactions > 0 and run.overflows == 0 and run.peak_context_tokens <= 150_000
    users = runs["openai-compact"].mean_context_tokens - runs["anthropic-compact"].mean_context_tokens
    assert users > 0  # the user messages the endpoint keeps are carried
    assert runs["none"].compactions + runs["none"].clearings > runs["anthropic-compact"].compactions  # dp's own cuts act more often
    seeds = [replay_file(path, load_settings(native=a, max_context_tokens=150_000), ["seed"]).results[0].total_usd
             for a in ("none", "openai-compact")]
    assert seeds[0] == seeds[1]  # the seed's plans are dp's own compactions whatever DP_NATIVE says
