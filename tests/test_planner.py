"""The decision rules of DESIGN §2 and their invariants."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_compact.core import _reference
from dp_compact.core.planner import forced_cut, min_keep, plan
from dp_compact.pricing import Prices
from dp_compact.conversation import Message, ToolCall, ToolResult, Usage
from dp_compact.settings import load_settings
from tests.strategies import conversations, session_of


@pytest.fixture(autouse=True)
def _myopic(monkeypatch: pytest.MonkeyPatch) -> None:
    """These are DESIGN §2's decision rules: DP_PLANNER=myopic (the look-ahead has tests/test_lookahead.py)."""
    monkeypatch.setenv("DP_PLANNER", "myopic")

PRICES = Prices("test", 3.0, 0.30, 15.0, None, 200_000, "DESIGN §2")


def _tokens(messages, draw_scale: int = 400) -> np.ndarray:
    return np.array([50 + (len(m.text) + sum(len(r.text) for r in m.tool_results)) * draw_scale for m in messages], dtype=np.int64)


@settings(max_examples=120, deadline=None)
@given(conversations(), st.sampled_from(["recall", "seed"]), st.floats(0.05, 1.0), st.integers(1_000, 400_000), st.floats(0.5, 60))
def test_plan_chosen_cut_is_feasible_and_keeps_at_least_min_keep(messages, model, ratio, window, e_fixed):
    session = session_of(messages)
    prices = replace(PRICES, max_context_tokens=window)
    result = plan(session, _tokens(messages), load_settings(model=model, min_keep_ratio=ratio, e_fixed=e_fixed), prices)
    n = len(messages)
    assert 0 <= result.cut <= n and result.k == n - result.cut
    if result.decision == "compact":
        assert _reference.is_feasible_cut(messages, result.cut, user_turns_only=model == "seed")
        assert 1 <= result.k < n
        if result.rule == "benefit":
            assert result.k >= min_keep(n, ratio) and result.terms["net"] > 0
        elif result.rule == "lookahead":  # DESIGN §7 (the default planner with the recall model): it pays now
            assert result.k >= result.min_keep and result.lookahead["saves_usd"] > 0
        else:  # above the threshold, or (look-ahead) the next call's growth takes it past the window
            assert result.rule == "force"
            assert result.estimates.context_tokens > 0.9 * window or result.lookahead["keep_usd"] is None


@settings(max_examples=120, deadline=None)
@given(conversations(), st.floats(0.5, 60), st.floats(0, 1), st.floats(0.1, 30))
def test_plan_recall_model_never_compacts_where_seed_would_not(messages, e_fixed, q0, tau):
    session, tokens = session_of(messages), _tokens(messages)
    common = dict(model="recall", e_fixed=e_fixed, recall_tau=tau, min_keep_ratio=0.05)
    recall = plan(session, tokens, load_settings(recall_q0=q0, **common), PRICES)
    seed_terms = plan(session, tokens, load_settings(recall_q0=0.0, **common), PRICES)  # ④ without recall = seed's
    if recall.benefit is None or seed_terms.benefit is None:
        return
    assert np.all(recall.benefit.net <= seed_terms.benefit.net + 1e-15)
    if recall.rule == "benefit":
        at = int(np.flatnonzero(seed_terms.benefit.cut == recall.cut)[0])
        assert seed_terms.benefit.net[at] > 0


def _ten_turns(user=1000, assistant=500, result=1800, final=100):
    """DESIGN §2 worked check: ten user turns of six tool calls each, ~149K tokens."""
    messages, tokens = [], []
    for turn in range(10):
        messages.append(Message("user", f"turn {turn}", raw={"role": "user", "content": f"turn {turn}"}))
        tokens.append(user)
        for call in range(6):
            call_id = f"c{turn}_{call}"
            messages.append(Message("assistant", tool_calls=(ToolCall(call_id, "bash"),)))
            messages.append(Message("tool", tool_results=(ToolResult(call_id, "out"),)))
            tokens += [assistant, result]
        messages.append(Message("assistant", "done"))
        tokens.append(final)
    return session_of(messages), np.array(tokens, dtype=np.int64)


def _turns_kept(result, session) -> int:
    return sum(m.role == "user" for m in session.messages[result.cut :]) if result.decision == "compact" else 10


@pytest.mark.parametrize("remaining", [40, 20, 10, 5])
def test_plan_seed_model_keeps_one_turn_at_every_r(remaining):
    session, tokens = _ten_turns()
    assert tokens.sum() == pytest.approx(149_000, rel=0.01)
    result = plan(session, tokens, load_settings(model="seed", min_keep_ratio=0.05, e_fixed=remaining / 5, l=5), PRICES)
    assert (result.decision, _turns_kept(result, session)) == ("compact", 1)


def test_plan_recall_model_depth_depends_on_r():
    session, tokens = _ten_turns()
    kept = {}
    for remaining in (40, 20, 10, 5):
        settings_r = load_settings(model="recall", recall_age="turns", recall_q0=0.9, recall_tau=3,
                                   min_keep_ratio=0.05, e_fixed=remaining / 5, l=5)
        kept[remaining] = _turns_kept(plan(session, tokens, settings_r, PRICES), session)
    assert kept[10] == kept[5] == 10  # does not compact at R = 10 or 5 (DESIGN §2 worked check)
    assert 1 <= kept[40] <= kept[20] < 10  # compacts at high R, keeping more than the seed's minimum
    assert kept[20] > 1


def test_plan_empty_session_keeps_with_reason():
    result = plan(session_of([]), np.zeros(0, dtype=np.int64), load_settings(), PRICES)
    assert (result.decision, result.rule, result.k) == ("keep", "empty", 0)
    assert "no messages" in result.explanation


def test_plan_names_the_tool_results_that_answer_no_tool_call():
    """A tool result whose call is not in the transcript binds no cut; the plan's notes name it (and only then)."""
    messages = _autonomous(6)
    orphan = Message("tool", tool_results=(ToolResult("gone", "output of a call made before the transcript began"),))
    with_orphan = [messages[0], orphan, *messages[1:]]
    tokens = np.full(len(with_orphan), 100, dtype=np.int64)
    notes = [n for n in plan(session_of(with_orphan), tokens, load_settings(), PRICES).notes if "answer no tool call" in n]
    assert notes == ["1 tool result(s) answer no tool call in the transcript (message 1): they bind no cut, "
                     "and `compact` pairs any it keeps with a note so that the API accepts it"]
    plain = plan(session_of(messages), tokens[:-1], load_settings(), PRICES)
    assert not [n for n in plain.notes if "answer no tool call" in n]


def test_plan_of_a_real_transcript_names_its_orphan_tool_result():
    """cc_task43_develop holds one tool result whose call the transcript lost (message 97 of its live part)."""
    from dp_compact.api import plan_file
    from tests.conftest import SESSIONS, need

    path = SESSIONS / "claude_code" / "cc_task43_develop.jsonl"
    need(path)
    notes = [n for n in plan_file(path, load_settings()).notes if "answer no tool call" in n]
    assert len(notes) == 1 and notes[0].startswith("1 tool result(s) answer no tool call in the transcript (message 97)")


def _autonomous(rounds=150):
    messages = [Message("user", "solve", raw={"role": "user", "content": "solve"})]
    for r in range(rounds):
        messages.append(Message("assistant", tool_calls=(ToolCall(f"c{r}", "bash"),)))
        messages.append(Message("tool", tool_results=(ToolResult(f"c{r}", "x"),)))
    return messages


def test_plan_forced_rule_lands_on_feasible_cut_nearest_target():
    messages = _autonomous()
    session = replace(session_of(messages), usage=(Usage(150_000),))  # context from the last call
    tokens = np.full(len(messages), 100, dtype=np.int64)
    prices = replace(PRICES, max_context_tokens=160_000)
    result = plan(session, tokens, load_settings(model="seed", min_keep_ratio=0.25), replace(prices))
    assert result.rule == "no-feasible-cut" or result.decision == "keep"  # seed: only user-turn cuts, one turn
    result = plan(session, tokens, load_settings(min_keep_ratio=0.25), prices)
    target = max(3, int(np.floor(len(messages) * 0.25 + 0.5)))
    assert result.estimates.context_tokens == 150_000
    assert result.decision == "compact"
    if result.rule == "force":
        assert _reference.is_feasible_cut(messages, result.cut)
        assert result.k in (target, target + 1) or result.k == min(1, result.k)


def test_plan_forced_rule_takes_deepest_cut_when_target_stays_over_threshold():
    messages = _autonomous(20)
    session = replace(session_of(messages), usage=(Usage(195_000),))
    tokens = np.full(len(messages), 10, dtype=np.int64)  # dropping the head cannot bring 195K under 180K
    result = plan(session, tokens, load_settings(model="seed", min_keep_ratio=0.25, l=5), PRICES)
    assert result.decision == "keep"  # seed: no user-turn cut inside one turn
    result = plan(session, tokens, load_settings(min_keep_ratio=0.25, recall_q0=1.0, recall_tau=1000), PRICES)
    assert (result.decision, result.rule) == ("compact", "force")
    assert result.k == 2  # the deepest feasible cut: the last round (assistant + its result)
    assert forced_cut(result) == result.cut  # --force takes the same rule


def test_plan_keep_when_under_threshold_and_no_benefit():
    messages = _autonomous(5)
    result = plan(session_of(messages), np.full(len(messages), 10, dtype=np.int64), load_settings(), PRICES)
    assert (result.decision, result.rule) == ("keep", "no-benefit")
    assert result.k == len(messages) and result.cut == 0


def test_plan_rejects_token_array_of_wrong_shape():
    with pytest.raises(ValueError, match="shape"):
        plan(session_of(_autonomous(2)), np.zeros(3, dtype=np.int64), load_settings(), PRICES)


def test_min_keep_rounds_half_up_and_clamps():
    assert min_keep(10, 0.25) == 3  # floor(2.5 + 0.5) = 3
    assert min_keep(50, 0.25) == 13  # 12.5 rounds up, not to even
    assert min_keep(2, 0.25) == 2
    assert min_keep(1000, 0.001) == 3


def test_min_keep_takes_its_share_of_the_messages_before_our_summary():
    # 16 messages compacted to a summary + 5: the share is still of 16 (25 % -> 4), not of 6 (-> 3)
    assert min_keep(6, 0.25, earlier_messages=11) == 4
    assert min_keep(6, 0.25) == 3
    assert min_keep(4, 0.5, earlier_messages=40) == 4  # never more than N


def test_best_cut_ties_go_to_the_smaller_k():
    """DESIGN §2 decision 1: among cuts of equal NetBenefit the one keeping fewer messages wins,
    whatever order the candidates come in."""
    from types import SimpleNamespace

    from dp_compact.core.planner import _pick_best

    keep = np.array([9, 3, 7, 5, 4], dtype=np.int64)
    net = np.array([2.0, 1.0, 2.0, 2.0, 0.5])  # k = 9, 7 and 5 tie at the best net
    assert keep[_pick_best(SimpleNamespace(net=net), keep, least=3)] == 5
    backwards, net_backwards = keep[::-1].copy(), net[::-1].copy()
    assert backwards[_pick_best(SimpleNamespace(net=net_backwards), backwards, least=3)] == 5
    assert keep[_pick_best(SimpleNamespace(net=net), keep, least=6)] == 7  # k below the least kept is not a candidate
    assert _pick_best(SimpleNamespace(net=net), keep, least=10) is None

