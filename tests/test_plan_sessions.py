"""Every real transcript in ../shared/sessions plans without error."""

from __future__ import annotations

import pytest

from dp_compact.core import _reference
from dp_compact.api import plan_session, session_tokens
from dp_compact.errors import NotASessionError
from dp_compact.measure.estimation import call_message_counts
from dp_compact.sessions import read_session
from dp_compact.settings import load_settings
from tests.conftest import SESSIONS, need, session_files

FILES = session_files()


@pytest.mark.skipif(not FILES, reason="../shared/sessions is absent")
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
@pytest.mark.parametrize("model", ["recall", "seed"])
@pytest.mark.slow
def test_real_session_plans_and_context_is_last_prompt_plus_what_followed(path, model):
    try:
        session = read_session(path)
    except NotASessionError as exc:
        assert "ui" in str(exc).lower() and str(path) in str(exc)
        return
    settings = load_settings(model=model)
    plan = plan_session(session, settings, use_cache=False)
    assert plan.n_messages == len(session.messages) > 0
    assert plan.decision in {"compact", "clear", "keep"}
    if plan.decision == "clear":  # DESIGN §9: every message stays, old tool results before the depth cleared
        assert model == "recall" and plan.k == plan.n_messages and plan.clearing["saved_tokens"] > 0
        assert 0 < plan.clearing["depth"] <= plan.n_messages - plan.min_keep
    if session.usage:
        # the last call's prompt, plus its response and any tool results appended after it
        answered = int(call_message_counts(session.messages, session.usage)[-1])
        assert answered >= 0
        appended = int(session_tokens(session, settings, use_cache=False)[answered:].sum())
        # the planner passes T only, so the split is T's share (rounding: half a token per message at most)
        assert plan.estimates.context_tokens == pytest.approx(session.usage[-1].prompt_tokens + appended, abs=len(session.messages) / 2 + 1)
        assert plan.estimates.context_source == "usage"
        assert any(note.startswith("current context = the last call's prompt") for note in plan.notes)
        assert plan.estimates.avg_tokens == pytest.approx(sum(u.prompt_tokens for u in session.usage) / len(session.usage))
    if plan.decision == "compact":
        assert _reference.is_feasible_cut(session.messages, plan.cut, user_turns_only=model == "seed")
        assert plan.head_tokens + plan.tail_tokens == plan.total_tokens


@pytest.mark.skipif(not FILES, reason="../shared/sessions is absent")
def test_single_long_autonomous_turn_is_cuttable_between_rounds():
    path = SESSIONS / "openai_chat" / "sweagent_marshmallow_fc.traj"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    session = read_session(path)
    # DESIGN's seed values of V and L, and the recall curve of the previous calibration (0.51, 1.4
    # user turns), under which the benefit stays negative here and the forced rule must cut.
    settings = load_settings(max_context_tokens=8_000, min_keep_ratio=0.25, v=5000, l=5, recall_q0=0.51,
                             recall_tau=1.4, recall_age="turns")
    plan = plan_session(session, settings, use_cache=False)
    assert session.user_turns <= 2
    assert plan.decision == "compact" and plan.rule == "force"
    assert session.messages[plan.cut].role == "assistant"
    assert plan.n_feasible_cuts >= 5


def _first_call_prefix(session, tokens) -> int | None:
    """The fixed prefix by hand: the first live usage record with a prompt, its response the last assistant
    message starting at or before its line, the prompt less every message before that response."""
    first_line = session.messages[0].line
    for usage in session.usage:
        if usage.line < first_line or usage.prompt_tokens <= 0:
            continue
        before = [i for i, m in enumerate(session.messages) if m.role == "assistant" and 0 < m.line <= usage.line]
        if before:
            return usage.prompt_tokens - int(sum(int(t) for t in tokens[: before[-1]]))
        return None
    return None


@pytest.mark.skipif(not FILES, reason="../shared/sessions is absent")
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
@pytest.mark.slow
def test_real_session_plans_with_the_prefix_its_first_call_measures_as_replay_charges_it(path):
    """V is the first recorded call's prompt less the messages it carried, where usage records give one that makes
    sense (positive, at most half the window), else DP_V; on a file without a recorded compaction (the replay
    judges its whole history then) it is the V the replay charges; DP_V given wins."""
    from dp_compact.measure.estimation import MAX_MEASURED_V_SHARE
    from dp_compact.replay.shell import replay_file

    try:
        session = read_session(path)
    except NotASessionError:
        return
    settings = load_settings()
    plan = plan_session(session, settings, use_cache=False)
    by_hand = _first_call_prefix(session, session_tokens(session, settings, use_cache=False)) if session.usage else None
    if by_hand is not None and 0 < by_hand <= MAX_MEASURED_V_SHARE * plan.prices.max_context_tokens:
        assert (plan.settings["v"], plan.v_source) == (by_hand, "measured")
        assert any(n.startswith(f"V {by_hand:,} tokens: this session's own fixed prefix") for n in plan.notes)
    else:
        assert (plan.settings["v"], plan.v_source) == (settings.v, "default")
    assert plan.to_dict()["v_tokens"] == plan.settings["v"]
    if not session.compactions:
        assert replay_file(path, settings, ["never"], use_cache=False).params.v_tokens == plan.settings["v"]
    given = plan_session(session, load_settings(v=12_345), use_cache=False)
    assert (given.settings["v"], given.v_source) == (12_345, "setting")


@pytest.mark.skipif(not (SESSIONS / "claude_code" / "cc_posthog_dashboard_compact.jsonl").exists(), reason="../shared/sessions is absent")
def test_a_compaction_after_the_rule_of_one_round_says_which_cut_it_takes_instead():
    """cc_posthog_dashboard_compact: the cut keeping only the last API round (one message) saves less
    than it loses and is set aside; the plan compacts at the next cut, and its explanation says so."""
    session = read_session(SESSIONS / "claude_code" / "cc_posthog_dashboard_compact.jsonl")
    plan = plan_session(session, load_settings(), use_cache=False)
    assert plan.decision == "compact" and plan.lookahead["loss_rule"]
    assert plan.k > plan.min_keep
    assert any("the last API round" in note for note in plan.notes)
    assert f"this one keeps the last {plan.k} messages ({plan.tail_tokens:,} tokens)" in plan.explanation


def test_the_plans_settings_name_the_profile_it_priced():
    """``settings.provider`` in a plan is the profile priced: the session's recorded model when none was given, else the one given."""
    path = need(SESSIONS / "codex" / "codex_raze.jsonl")
    session = read_session(path)
    assert session.model and session.model != load_settings().provider
    plan = plan_session(session, load_settings())
    assert plan.settings["provider"] == plan.prices.name == session.model
    given = plan_session(session, load_settings(provider="gpt-4o"))
    assert given.settings["provider"] == given.prices.name == "gpt-4o"
