"""DP_MIN_VERBATIM_TOKENS: the least the look-ahead keeps verbatim restricts its cuts, exactly."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from dp_compact.conversation import Message, Usage
from dp_compact.core._reference import is_feasible_cut
from dp_compact.core.lookahead import Forecast, look_ahead
from dp_compact.core.planner import plan, round_keep
from dp_compact.core.planner_lookahead import verbatim_bound
from dp_compact.pricing import Prices
from dp_compact.settings import load_settings
from tests.strategies import conversations, session_of
from tests.test_lookahead import _loop

PRICES = Prices("test", 3.0, 0.30, 15.0, 3.75, 200_000, "DESIGN §2")




def _reference_cuts(messages: list[Message], tokens: list[int], least_messages: int, least_tokens: int) -> list[int]:
    """The cuts the bound leaves, one cut at a time: feasible (DESIGN §1), keeping the last API round
    and at least ``least_tokens`` tokens of messages verbatim."""
    n = len(messages)
    return [cut for cut in range(1, n) if is_feasible_cut(messages, cut) and n - cut >= least_messages
            and sum(tokens[cut:]) >= least_tokens]


def test_verbatim_bound_keeps_the_cuts_with_enough_tail_and_yields_only_when_forced():
    tails = np.array([9_000, 4_000, 900], dtype=np.int64)
    assert verbatim_bound(tails, 0)[0].tolist() == [True, True, True]
    assert verbatim_bound(tails, 4_000)[0].tolist() == [True, True, False]
    eligible, facts = verbatim_bound(tails, 10_000)
    assert not eligible.any() and not facts["yielded"]
    eligible, facts = verbatim_bound(tails, 10_000, forced=True)
    assert eligible.all() and facts["yielded"]


@hypothesis_settings(max_examples=40, deadline=None)
@given(st.integers(20_000, 150_000), st.integers(2, 8), st.lists(st.booleans(), min_size=2, max_size=8))
def test_look_ahead_masks_ineligible_cuts_and_prices_the_eligible_as_a_bounded_future(context, n_cuts, flags):
    """Eligible cuts cost what they cost unmasked; ineligible ones cost inf (their price stays in unbounded_usd)."""
    flags = (flags * n_cuts)[:n_cuts]
    mask = np.array(flags, dtype=bool)
    v = 20_000
    heads = np.linspace((context - v) * 0.2, (context - v) * 0.9, n_cuts).round().astype(np.int64)
    forecast = Forecast(growth_tokens=900, calls_so_far=10, survival_alpha=1.5, survival_scale=50.0)
    ahead = look_ahead(context, heads, np.zeros(n_cuts), forecast, PRICES, v_tokens=v, s_tokens=800, limit_tokens=180_000,
                       eligible=mask)
    assert np.isinf(ahead.compact_usd[~mask]).all()
    np.testing.assert_array_equal(ahead.compact_usd[mask], ahead.unbounded_usd[mask])
    if mask.all():  # no bound: the plain look-ahead
        plain = look_ahead(context, heads, np.zeros(n_cuts), forecast, PRICES, v_tokens=v, s_tokens=800, limit_tokens=180_000)
        np.testing.assert_array_equal(plain.compact_usd, ahead.compact_usd)
        assert plain.keep_usd == ahead.keep_usd


@hypothesis_settings(max_examples=60, deadline=None)
@given(conversations(), st.integers(0, 60_000), st.floats(0.5, 30))
def test_plan_chooses_the_cheapest_cut_among_those_the_reference_leaves(messages, least_tokens, e_fixed):
    session = session_of(messages)
    tokens = np.array([300 + 40 * len(m.text) for m in messages], dtype=np.int64)
    result = plan(session, tokens, load_settings(e_fixed=e_fixed, min_verbatim_tokens=least_tokens), PRICES)
    left = _reference_cuts(messages, tokens.tolist(), round_keep(session), least_tokens)
    if any(n.startswith("compacting down to the last API round") for n in result.notes):  # the one-round rule set it aside
        left = [c for c in left if len(messages) - c > round_keep(session)]
    if result.decision == "compact" and not (result.verbatim_bound or {}).get("yielded"):
        assert result.cut in left
        assert result.tail_tokens >= least_tokens
        values = {int(c): float(u) for c, u in zip(result.benefit.cut, result.lookahead_usd)}
        assert values[result.cut] == min(values[c] for c in left)  # the cheapest of the cuts left
    if not left and result.decision == "compact":
        assert result.verbatim_bound["yielded"]  # only the window may override the bound


def test_zero_bound_is_the_unbounded_planner_and_the_plan_says_when_the_bound_binds():
    messages = _loop(rounds=40)
    tokens = np.full(len(messages), 1_500, dtype=np.int64)
    usage = tuple(Usage(20_800 + 3_000 * i) for i in range(1, 41))
    session = replace(session_of(messages), usage=usage, llm_calls=40)
    free = plan(session, tokens, load_settings(min_verbatim_tokens=0), PRICES)
    assert free.decision == "compact" and not free.verbatim_bound["binds"]
    assert free.tail_tokens < 30_000
    bounded = plan(session, tokens, load_settings(min_verbatim_tokens=30_000), PRICES)
    facts = bounded.to_dict()["verbatim_bound"]
    # the best cut without the bound (priced with the bounded future, so not always the free plan's own cut)
    assert facts["min_tokens"] == 30_000 and facts["binds"] and facts["free_best_tail_tokens"] < 30_000
    note = f"the best cut would keep {facts['free_best_tail_tokens']:,} tokens verbatim"
    assert any(n.startswith(note) and "DP_MIN_VERBATIM_TOKENS keeps at least 30,000" in n for n in bounded.notes)
    if bounded.decision == "compact":
        assert bounded.tail_tokens >= 30_000


def test_a_conversation_smaller_than_the_bound_is_kept_and_says_why():
    messages = _loop(rounds=6)
    tokens = np.full(len(messages), 500, dtype=np.int64)
    session = replace(session_of(messages), usage=tuple(Usage(20_000 + 1_000 * i) for i in range(1, 7)), llm_calls=6)
    result = plan(session, tokens, load_settings(min_verbatim_tokens=50_000), PRICES)
    assert result.decision == "keep" and "DP_MIN_VERBATIM_TOKENS" in result.explanation


def test_the_setting_is_validated_and_has_a_flag():
    from dp_compact.errors import SettingsError

    with pytest.raises(SettingsError, match="--min-verbatim-tokens"):
        load_settings(min_verbatim_tokens=-1)
    assert load_settings(min_verbatim_tokens=5).min_verbatim_tokens == 5


def test_one_api_round_is_the_last_tool_round_unless_a_user_message_came_after_it():
    """The least the look-ahead keeps without a bound: the last assistant message with tool calls
    and its results; after a user message, a new round starts (plain chat after old tool calls
    does not pin every message since them)."""
    loop = _loop(rounds=3)  # user, (assistant call, tool) x 3
    assert round_keep(session_of(loop)) == 2
    answered = [*loop, Message("assistant", "done")]
    assert round_keep(session_of(answered)) == 3  # the final answer belongs with the last tool round
    chat = [*answered] + [m for i in range(5) for m in (Message("user", f"status {i}?"), Message("assistant", "fine"))]
    assert round_keep(session_of(chat)) == 1  # the last answer: the tool round is far back
    assert round_keep(session_of([Message("user", "hi")])) == 1
