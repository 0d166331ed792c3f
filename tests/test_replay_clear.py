"""Replay of clearing old tool results (DESIGN §9, docs/replay.md point 6b): hand-computed charges,
refetches of cleared results, composition with compaction, properties, the shared sessions."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from dp_compact.conversation import Message, ToolCall, ToolResult
from dp_compact.core.cuts import message_arrays
from dp_compact.errors import SettingsError
from dp_compact.measure.clearing import clearing_facts, tool_result_layout
from dp_compact.pricing import Prices
from dp_compact.replay.meter import (
    CallContext,
    Clearing,
    Compaction,
    ReplayParams,
    make_recording,
    prefix_floor_usd,
    replay,
)
from dp_compact.replay.policies import ClearOld, parse_policy
from dp_compact.replay.receipts import receipts
from dp_compact.settings import load_settings
from tests.conftest import SESSIONS, need
from tests.strategies import conversations

# ----------------------------------------------------------------------------- a small session
#
#   index  role       tokens  call           clearable result (tokens removed / placeholder)
#   0      user          100
#   1      assistant      50   call 0, c1
#   2      tool         1000                 900 / 40  -> saves 860
#   3      assistant      20   call 1, c2
#   4      tool         2000                 1,900 / 40 -> saves 1,860
#   5      assistant      40   call 2
#   6      user          200
#   7      assistant      30   call 3
#   8      user           10
#   9      assistant      60   call 4
#
# Prices 3.00 input / 0.30 cache / 15.00 output $/MTok, no write price, V = 1,000, S = 100.
# Prompts under "never": 1,100 / 2,150 / 4,170 / 4,410 / 4,450. Sums below in $ · 1e6.

LONG = "x" * 900
MESSAGES = (
    Message("user", "start"),
    Message("assistant", "", tool_calls=(ToolCall("c1", "bash", "{}"),)),
    Message("tool", tool_results=(ToolResult("c1", LONG),)),
    Message("assistant", "", tool_calls=(ToolCall("c2", "bash", "{}"),)),
    Message("tool", tool_results=(ToolResult("c2", LONG),)),
    Message("assistant", "done"),
    Message("user", "next"),
    Message("assistant", "ok"),
    Message("user", "more"),
    Message("assistant", "ok"),
)
TOKENS = np.array([100, 50, 1000, 20, 2000, 40, 200, 30, 10, 60])
POSITIONS = np.array([1, 3, 5, 7, 9])
FACTS = clearing_facts(TOKENS, [2, 4], [900, 1900], [40, 40], [True, True])


def _recording(uses: tuple[list[int], list[int]] | None = None):
    pairs = None if uses is None else (np.array(uses[0]), np.array(uses[1]))
    return make_recording(MESSAGES, TOKENS, message_arrays(MESSAGES), POSITIONS, TOKENS[POSITIONS], uses=pairs,
                          clearing=FACTS)


def _params(window: int = 10_000) -> ReplayParams:
    return ReplayParams(prices=Prices("test", 3.0, 0.3, 15.0, None, window, "test"), v_tokens=1000, s_tokens=100)


def _settings():
    return load_settings(v=1000, s=100, planner="myopic")


@dataclass
class _Script:
    """A policy that takes the given action before the given calls."""

    actions: dict[int, Compaction | Clearing]
    name: str = "script"
    fixed: bool = True
    tool: str = ""
    seen: list[int] = field(default_factory=list)

    def before_call(self, ctx: CallContext) -> Compaction | Clearing | None:
        return self.actions.get(ctx.call)

    def on_overflow(self, ctx: CallContext) -> Compaction | None:
        return None


def _usd(x: float) -> float:
    return round(x * 1e6, 6)


def test_clear_policy_charge_equals_hand_computation_rewrite_from_first_cleared_result_no_request():
    # clear:0.44:3 fires at 4,400 tokens: call 3 (4,410), depth 7 − 3 = 4 clears message 2 only
    never = replay(_recording(), parse_policy("never", _settings()), _params())
    cleared = replay(_recording(), parse_policy("clear:0.44:3", _settings()), _params())
    assert cleared.compaction_usd == 0 and cleared.compactions == 0
    assert (cleared.clearings, cleared.cleared_tokens) == (1, 860)
    assert cleared.contexts.tolist() == [1100, 2150, 4170, 4410 - 860, 4450 - 860]
    # call 3 under never: 4,170 read · 0.3 = 1,251, 240 new · 3 = 720
    # cleared: the cache keeps V + messages [0, 2) = 1,150: read 345, 3,550 − 1,150 = 2,400 new · 3 = 7,200
    # call 4 under never: 4,410 read = 1,323, 40 new = 120; cleared: 3,550 read = 1,065, 40 new = 120
    assert _usd(cleared.total_usd) == _usd(never.total_usd) - 1251 - 720 + 345 + 7200 - 1323 + 1065
    # the trigger is not reached again at call 4 (3,590 < 4,400): one clearing, no compaction
    assert cleared.schedule == ()


def test_clear_deeper_later_rewrites_only_from_the_newly_cleared_result():
    script = _Script({3: Clearing(3), 4: Clearing(9)})
    result = replay(_recording(), script, _params())
    assert result.clearings == 2 and result.cleared_tokens == 860 + 1860
    # call 4: the cache holds call 3's prompt (3,550); it keeps V + [0, 4) with message 2 cleared:
    # 1,000 + 100 + 50 + 140 + 20 = 1,310 read; prompt 4,450 − 2,720 = 1,730, 420 new
    never = replay(_recording(), parse_policy("never", _settings()), _params())
    call4 = 1310 * 0.3 + 420 * 3 + 60 * 15
    call3 = 1150 * 0.3 + 2400 * 3 + 30 * 15
    assert _usd(result.call_usd[4]) == pytest.approx(call4)
    assert _usd(result.call_usd[3]) == pytest.approx(call3)
    assert _usd(result.call_usd[:3].sum()) == pytest.approx(_usd(never.call_usd[:3].sum()))
    assert result.compaction_usd == 0


def test_clearing_then_a_use_of_the_cleared_result_charges_a_refetch():
    # call 3 uses message 2 (cleared before it) and message 4 (not cleared at depth 4)
    rec = _recording(([2, 4], [3, 3]))
    never = replay(rec, parse_policy("never", _settings()), _params())
    assert never.refetches == 0 and never.loss_usd == 0
    cleared = replay(rec, parse_policy("clear:0.44:3", _settings()), _params())
    assert cleared.refetches == 1
    # one extra call on the 3,550-token prompt from cache (1,065), 60 output tokens (900), the
    # message's 1,000 tokens fresh at 3 (3,000); calls 3 and 4 carry them from cache (300 each)
    assert _usd(cleared.loss_usd) == 1065 + 900 + 3000 + 300 + 300
    (event,) = cleared.refetch_log
    assert (event.call, event.message, event.event) == (3, 2, 0)  # the clearing (event 0) cleared it
    # fetched again, it counts as present: a second use by call 4 is free
    again = replay(_recording(([2, 2], [3, 4])), parse_policy("clear:0.44:3", _settings()), _params())
    assert again.refetches == 1


def test_clearing_composes_with_compaction_head_priced_with_placeholders():
    script = _Script({2: Clearing(3), 3: Compaction(cut=5, carry_tokens=100)})
    result = replay(_recording(([2], [4])), script, _params())
    assert (result.clearings, result.compactions) == (1, 1)
    # the compaction's request reads V + H with message 2 cleared: 1,000 + 100 + 50 + 140 + 20 + 2,000 = 3,310
    (_, compaction) = result.events
    assert compaction.head_prompt_tokens == 3310 and compaction.action == "summarize"
    # the later use of message 2 is a refetch of a message the compaction dropped
    assert result.refetches == 1 and result.refetch_log[0].event == 1
    assert result.contexts[3] == 1000 + 100 + 40 + 200


def test_clearing_receipts_have_no_request_and_count_apart_from_compactions():
    rec, params = _recording(), _params()
    result = replay(rec, parse_policy("clear:0.44:3", _settings()), params)
    found = receipts(rec, params, result).to_dict()
    assert (found["compactions"], found["clearings"]) == (0, 1)
    (receipt,) = found["receipts"]
    assert receipt["action"] == "clear" and receipt["request_usd"] == 0 and receipt["summary_tokens"] == 860
    # one clearing and no overflow: its net is never's total less the policy's
    never = replay(rec, parse_policy("never", _settings()), params)
    assert receipt["net_usd"] == pytest.approx(never.total_usd - result.total_usd)


def test_parse_clear_policy_rejects_bad_numbers():
    assert isinstance(parse_policy("clear:0.5", _settings()), ClearOld)
    assert parse_policy("clear:0.5:0", _settings()).keep_messages == 0
    for bad in ("clear:0", "clear:1.5", "clear:0.5:x", "clear:0.5:-1", "clear"):
        with pytest.raises(SettingsError):
            parse_policy(bad, _settings())


def test_anthropic_clear_uses_the_documented_defaults():
    policy = parse_policy("anthropic-clear", _settings())
    assert (policy.trigger_tokens, policy.keep_tool_uses, policy.tool) == (100_000, 3, "claude-code")


# ----------------------------------------------------------------------------- properties


@st.composite
def clearable_recordings(draw: st.DrawFn):
    """A conversation with random token counts and uses, every tool result clearable with a random saving."""
    messages = tuple(draw(conversations()))
    tokens = np.array(draw(st.lists(st.integers(0, 5000), min_size=len(messages), max_size=len(messages))), dtype=np.int64)
    positions = np.array([i for i, m in enumerate(messages) if m.role == "assistant"], dtype=np.int64)
    outputs = np.array(draw(st.lists(st.integers(0, 2000), min_size=positions.size, max_size=positions.size)), dtype=np.int64)
    owners = tool_result_layout(messages, min_chars=0).message_index
    shares = np.array(draw(st.lists(st.floats(0, 1), min_size=owners.size, max_size=owners.size)))
    per = np.bincount(owners, minlength=len(messages))
    removed = np.floor(tokens[owners] * shares / np.maximum(per[owners], 1)).astype(np.int64)
    added = np.minimum(removed, draw(st.integers(0, 60)))
    facts = clearing_facts(tokens, owners, removed, added, np.ones(owners.size, bool))
    calls = np.array(draw(st.lists(st.integers(0, max(positions.size - 1, 0)), max_size=8 if positions.size else 0)),
                     dtype=np.int64)
    used = np.array([draw(st.integers(0, max(int(positions[c]) - 1, 0))) for c in calls.tolist()], dtype=np.int64)
    uses = (used, calls) if positions.size else None
    return make_recording(messages, tokens, message_arrays(messages), positions, outputs, uses=uses, clearing=facts)


@hypothesis_settings(max_examples=60, deadline=None)
@given(rec=clearable_recordings(), ratio=st.floats(0.01, 1.0), keep=st.integers(0, 5), write=st.sampled_from([None, 3.75]))
def test_clear_policy_never_charges_a_summary_request_and_never_sends_more_than_never(rec, ratio, keep, write):
    params = ReplayParams(Prices("test", 3.0, 0.3, 15.0, write, 10**9, "test"), v_tokens=1000, s_tokens=100)
    never = replay(rec, parse_policy("never", _settings()), params)
    cleared = replay(rec, parse_policy(f"clear:{ratio}:{keep}", _settings()), params)
    assert cleared.compaction_usd == 0 and cleared.compactions == 0 and cleared.overflows == 0
    assert np.all(cleared.contexts <= never.contexts)
    assert np.all(cleared.contexts >= params.v_tokens)
    assert cleared.total_usd >= cleared.floor_usd - 1e-12 >= prefix_floor_usd(rec, params) - 2e-12
    assert int((never.contexts - cleared.contexts).max(initial=0)) <= cleared.cleared_tokens
    assert (cleared.clearings > 0) == (cleared.cleared_tokens > 0)


@hypothesis_settings(max_examples=40, deadline=None)
@given(rec=clearable_recordings(), window=st.integers(2_000, 60_000))
def test_clear_policies_keep_the_replay_invariants_on_overflow(rec, window):
    params = ReplayParams(Prices("test", 3.0, 0.3, 15.0, None, window + 33_000, "test"), v_tokens=1000, s_tokens=100)
    for spec in ("clear:0.3", "clear:0.6:0", "anthropic-clear"):
        result = replay(rec, parse_policy(spec, _settings()), params)
        assert result.total_usd >= result.floor_usd - 1e-12
        assert result.truncations <= result.overflows
        assert result.compactions <= result.overflows or spec == "anthropic-clear"
        if result.overflows == 0:
            assert result.peak_context_tokens <= params.window


# ----------------------------------------------------------------------------- shared sessions


@pytest.mark.slow
def test_shared_sessions_oracle_is_at_most_every_policy_including_clearing():
    from dp_compact.fleet.jobs import replay_directory

    policies = ("oracle", "never", "claude-code", "anthropic-clear", "clear:0.5", "clear:0.3:3")
    report = replay_directory(need(SESSIONS), load_settings(), policies, workers=2)
    assert report.sessions
    for session in report.sessions:
        oracle = session.oracle_usd()
        for result in session.results:
            assert oracle <= result.total_usd + 1e-9, (session.path, result.policy)
    totals = {r["policy"]: r for r in report.totals()}
    assert totals["anthropic-clear"]["clearings"] > 0 and totals["anthropic-clear"]["cleared_tokens"] > 0


@pytest.mark.slow
def test_shared_session_oracle_is_at_most_clearing_under_the_strict_detector():
    """Before clearing joined the oracle's action set, clear:0.3:3 beat it here ($0.8117 against $0.8285)."""
    from dp_compact.replay.shell import replay_file

    report = replay_file(need(SESSIONS / "codex/codex_raze.jsonl"), load_settings(), ["oracle", "clear:0.3:3"],
                         detector="strict")
    oracle, cleared = (r.total_usd for r in report.results)
    assert oracle <= cleared + 1e-9
