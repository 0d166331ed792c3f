"""Every real transcript in ../shared/sessions plans without error."""

from __future__ import annotations

import pytest

from dp_compact import _reference
from dp_compact.api import plan_session, session_tokens
from dp_compact.errors import NotASessionError
from dp_compact.estimation import call_message_counts
from dp_compact.sessions import read_session
from dp_compact.settings import load_settings
from tests.conftest import SESSIONS, session_files

FILES = session_files()


@pytest.mark.skipif(not FILES, reason="../shared/sessions is absent")
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
@pytest.mark.parametrize("model", ["recall", "seed"])
def test_real_session_plans_and_context_is_last_prompt_plus_what_followed(path, model):
    try:
        session = read_session(path)
    except NotASessionError as exc:
        assert "ui" in str(exc).lower() and str(path) in str(exc)
        return
    settings = load_settings(model=model)
    plan = plan_session(session, settings, use_cache=False)
    assert plan.n_messages == len(session.messages) > 0
    assert plan.decision in {"compact", "keep"}
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
