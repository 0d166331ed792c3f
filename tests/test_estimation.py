"""The current context (estimation.current_context): the last call's prompt plus what was appended after it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_compact.api import plan_session
from dp_compact.measure.estimation import (
    CONTRADICTION_MIN_TOKENS, RATIO_BOUNDS, call_message_counts, current_context, estimate, first_calls_after, measured_token_ratio,
    prompt_growths,
)
from dp_compact.sessions import read_session
from dp_compact.conversation import Message, SeedStats, Session, ToolCall, ToolResult, Usage
from dp_compact.settings import load_settings
from dp_compact.measure.tokens import count_message_tokens

SETTINGS = load_settings()


def _loop(first_line: int = 1) -> tuple[Message, ...]:
    """user, assistant(call c1), tool, assistant(call c2), tool: lines first_line + 0, 1, 2, 4, 6."""
    at = [first_line + d for d in (0, 1, 2, 4, 6)]
    return (
        Message("user", "run the tests", line=at[0]),
        Message("assistant", "running", tool_calls=(ToolCall("c1", "bash", '{"cmd": "pytest -x"}'),), line=at[1]),
        Message("tool", tool_results=(ToolResult("c1", "1 failed " * 40),), line=at[2]),
        Message("assistant", "again, verbose", tool_calls=(ToolCall("c2", "bash", '{"cmd": "pytest -vv"}'),), line=at[3]),
        Message("tool", tool_results=(ToolResult("c2", "DEBUG collected item\n" * 400),), line=at[4]),
    )


def _session(usage: tuple[Usage, ...], messages: tuple[Message, ...] | None = None, **extra) -> Session:
    return Session(path="s.jsonl", format="codex", messages=messages or _loop(), usage=usage, **extra)


TOKENS = np.array([1_000, 500, 3_000, 600, 4_000], dtype=np.int64)  # T = 9,100


def test_context_is_last_prompt_plus_response_and_tool_results_after_it():
    # the second call (token_count on line 6) answered with message 3; message 4 came after it
    session = _session((Usage(8_000, line=3), Usage(9_000, line=6)))
    ctx = current_context(session, SETTINGS, total_tokens=int(TOKENS.sum()), message_tokens=TOKENS)
    assert (ctx.tokens, ctx.source, ctx.appended_tokens) == (9_000 + 600 + 4_000, "usage", 4_600)
    assert "9,000 tokens, line 6" in ctx.note and "4,600 tokens of the 2 messages" in ctx.note


def test_context_after_a_final_answer_adds_the_answer():
    messages = _loop()[:4]  # ends with the response of the call on line 6
    session = _session((Usage(8_000, line=3), Usage(9_000, line=6)), messages)
    ctx = current_context(session, SETTINGS, total_tokens=int(TOKENS[:4].sum()), message_tokens=TOKENS[:4])
    assert ctx.tokens == 9_000 + 600


def test_context_without_message_tokens_counts_the_messages_itself():
    """The planner passes T only: the split is the counted share of T, exact when T was counted alike."""
    session = _session((Usage(8_000, line=3), Usage(9_000, line=6)))
    counted = count_message_tokens(session.messages)
    exact = current_context(session, SETTINGS, total_tokens=int(counted.sum()), message_tokens=counted)
    shared = current_context(session, SETTINGS, total_tokens=int(counted.sum()))
    assert shared == exact and exact.appended_tokens == int(counted[3:].sum())
    scaled = current_context(session, SETTINGS, total_tokens=2 * int(counted.sum()))  # T on a provider's scale
    assert scaled.appended_tokens == pytest.approx(2 * exact.appended_tokens, abs=1)


def test_estimate_carries_the_context_and_its_note():
    session = _session((Usage(8_000, line=3), Usage(9_000, line=6)))
    est = estimate(session, SETTINGS, total_tokens=int(TOKENS.sum()), message_tokens=TOKENS)
    assert (est.context_tokens, est.context_source) == (13_600, "usage")
    assert est.context_note.startswith("current context = the last call's prompt")


def test_record_without_a_source_line_is_taken_as_it_is():
    session = _session((Usage(150_000),))  # a replay or a synthetic record: nothing to place it by
    ctx = current_context(session, SETTINGS, total_tokens=int(TOKENS.sum()), message_tokens=TOKENS)
    assert (ctx.tokens, ctx.source, ctx.appended_tokens, ctx.note) == (150_000, "usage", 0, "")


def test_record_that_cannot_be_placed_is_taken_as_it_is():
    # the timeline's view: the last record's response is not among the messages (already claimed)
    session = _session((Usage(8_000, line=3), Usage(9_000, line=6)), _loop()[:3])
    ctx = current_context(session, SETTINGS, total_tokens=4_500, message_tokens=TOKENS[:3])
    assert (ctx.tokens, ctx.appended_tokens) == (9_000, 0)


def test_record_before_the_live_conversation_gives_v_plus_t():
    session = _session((Usage(90_000, line=5),), _loop(first_line=20))  # a compaction on the lines between
    ctx = current_context(session, SETTINGS, total_tokens=int(TOKENS.sum()), message_tokens=TOKENS)
    assert (ctx.tokens, ctx.source) == (SETTINGS.v + int(TOKENS.sum()), "estimate")
    assert "predates" in ctx.note


def test_record_far_below_the_messages_it_was_sent_is_not_trusted():
    # the call on line 6 was sent messages 0-2, 4,500 counted tokens; a prompt of 2,000 contradicts them
    session = _session((Usage(8_000, line=3), Usage(2_000, line=6)))
    ctx = current_context(session, SETTINGS, total_tokens=int(TOKENS.sum()), message_tokens=TOKENS)
    assert (ctx.tokens, ctx.source) == (SETTINGS.v + 9_100, "estimate")
    assert "contradicts the messages" in ctx.note and "line 6" in ctx.note and "4,500" in ctx.note


def test_small_prompts_are_not_judged_against_the_messages():
    small = np.array([100, 50, 300, 60, 400], dtype=np.int64)  # 450 sent < CONTRADICTION_MIN_TOKENS
    assert int(small[:3].sum()) < CONTRADICTION_MIN_TOKENS
    session = _session((Usage(200, line=6),))
    ctx = current_context(session, SETTINGS, total_tokens=int(small.sum()), message_tokens=small)
    assert (ctx.tokens, ctx.source) == (200 + 460, "usage")


def test_mixed_usage_conventions_are_named_in_the_note():
    usage = (Usage(8_000, 7_000, line=3, convention="anthropic"), Usage(9_000, 8_500, line=6, convention="openai"))
    ctx = current_context(_session(usage), SETTINGS, total_tokens=int(TOKENS.sum()), message_tokens=TOKENS)
    assert "OpenAI-style usage: input includes 8,500 cached" in ctx.note
    assert "mix Anthropic-style" in ctx.note


def test_seed_stats_counter_wins_and_no_usage_gives_v_plus_t():
    with_stats = _session((Usage(9_000, line=6),), stats=SeedStats(current_context_tokens=1_234))
    assert current_context(with_stats, SETTINGS, total_tokens=9_100).tokens == 1_234
    bare = current_context(_session(()), SETTINGS, total_tokens=9_100)
    assert (bare.tokens, bare.source) == (SETTINGS.v + 9_100, "estimate")


def _codex_rollout(tmp_path: Path, last_output: str) -> Path:
    """Case 18's shape, small: one call recorded at 26,000 prompt tokens, then a tool output."""
    def env(kind: str, payload: dict) -> dict:
        return {"timestamp": "2025-01-01T00:00:00Z", "type": kind, "payload": payload}

    records = [
        env("session_meta", {"id": "s", "base_instructions": {"text": "You are Codex."}}),
        env("turn_context", {"model": "gpt-oss:20b"}),
        env("event_msg", {"type": "task_started", "model_context_window": 32_768}),
        env("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "make the tests pass"}]}),
        env("response_item", {"type": "function_call", "name": "exec_command", "arguments": '{"cmd": "pytest -vv"}', "call_id": "c1"}),
        env("event_msg", {"type": "token_count", "info": {"last_token_usage": {"input_tokens": 26_000, "cached_input_tokens": 0,
                                                                               "output_tokens": 30}, "model_context_window": 32_768}}),
        env("response_item", {"type": "function_call_output", "call_id": "c1", "output": last_output}),
    ]
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_plan_compacts_when_the_output_after_the_last_record_crosses_the_threshold(tmp_path):
    lines = "".join(f"tests/test_mod_{i}.py::test_case_{i} DEBUG fixture setup took {i * 7} ms\n" for i in range(400))
    session = read_session(_codex_rollout(tmp_path, lines))
    plan = plan_session(session, SETTINGS, use_cache=False)
    assert plan.prices.max_context_tokens == 32_768
    assert plan.estimates.context_tokens > 26_000 + 0.9 * plan.total_tokens > 0.9 * 32_768
    assert plan.decision == "compact"
    assert any(note.startswith("current context = the last call's prompt (26,000 tokens") for note in plan.notes)


def test_plan_keeps_when_what_followed_is_small(tmp_path):
    session = read_session(_codex_rollout(tmp_path, "2 passed in 0.10s"))
    plan = plan_session(session, SETTINGS, use_cache=False)
    assert 26_000 < plan.estimates.context_tokens < 26_100 < 0.9 * 32_768


# ----------------------------------------------------------------------------- E and the token ratio


@pytest.mark.parametrize(
    ("baseline", "turns", "expected"),
    [
        (8, 0, 8), (8, 3, 5), (8, 4, 4), (8, 7, 4), (8, 30, 4),  # floor 8 // 2 = 4
        (9, 9, 4), (3, 2, 1),  # floor 9 // 2 = 4, 3 // 2 = 1
        (1, 0, 2), (1, 1, 2), (1, 5, 2),  # DESIGN §2: the floor is 2 when the baseline is 1 (not 1 // 2 = 0)
        (2, 0, 2), (2, 5, 1),  # baseline 2: floor 1
    ],
)
def test_expected_turns_floor_of_the_baseline(baseline, turns, expected):
    """DESIGN §2: E = max(DP_BASELINE_E − t, floor), floor = DP_BASELINE_E // 2, 2 when the baseline is 1."""
    messages = tuple(Message("user", f"turn {i}", line=i + 1) for i in range(turns)) or (Message("assistant", "hi", line=1),)
    session = Session(path="s.jsonl", format="anthropic", messages=messages, user_turns=turns)
    result = estimate(session, load_settings(baseline_e=baseline, e_fixed=0, l=1), total_tokens=100)
    assert (result.user_turns, result.expected_turns) == (turns, expected)
    assert result.remaining_calls == expected  # R = E · L with L = 1


def test_expected_turns_fixed_and_without_baseline():
    session = Session(path="s.jsonl", format="anthropic", messages=(Message("user", "go", line=1),), user_turns=1)
    assert estimate(session, load_settings(e_fixed=3.5), total_tokens=10).expected_turns == 3.5
    assert estimate(session, load_settings(baseline_e=0), total_tokens=10).expected_turns == 2  # DESIGN §2: else 2


def _ratio_session(ratio: float) -> tuple[Session, np.ndarray]:
    """The loop's two calls see messages [0, 1) and [0, 3): 3,500 counted tokens apart; the
    reported prompt grows by ``ratio`` × 3,500."""
    first = 8_000
    return _session((Usage(first, line=3), Usage(first + round(ratio * 3_500), line=6))), TOKENS


@pytest.mark.parametrize("ratio", [RATIO_BOUNDS[0], 1.0, 1.63, RATIO_BOUNDS[1]])
def test_measured_token_ratio_within_bounds_is_used(ratio):
    session, tokens = _ratio_session(ratio)
    assert measured_token_ratio(session, tokens) == pytest.approx(ratio, abs=1e-9)


@pytest.mark.parametrize("ratio", [0.2, RATIO_BOUNDS[0] - 0.01, RATIO_BOUNDS[1] + 0.01, 10.0])
def test_measured_token_ratio_outside_bounds_is_not_trusted(ratio):
    """A ratio far from any tokenizer's (0.2 or 10 provider tokens per cl100k token) says the transcript
    leaves content out or usage is misread: the family's calibrated ratio is used instead (None here)."""
    session, tokens = _ratio_session(ratio)
    assert measured_token_ratio(session, tokens) is None


def test_measured_token_ratio_leaves_out_the_step_across_a_recorded_compaction():
    """A whole recorded history keeps every message while the tool's prompt restarts from its
    summary at a recorded compaction: the step across it is left out, the others summed."""
    from dp_compact.conversation import RecordedCompaction

    messages = (*_loop(1), *_loop(11))  # ten messages; assistant messages at lines 2, 5, 12, 15
    tokens = np.concatenate([TOKENS, TOKENS])
    # calls see [0, 1), [0, 3), [0, 6), [0, 8): counted growth 3,500, 5,600 (across line 10), 3,500
    usage = (Usage(8_000, line=3), Usage(8_000 + 2 * 3_500, line=6), Usage(9_000, line=13), Usage(9_000 + 2 * 3_500, line=16))
    compacted = _session(usage, messages, compactions=1, compaction_records=(RecordedCompaction("claude-code", 10),))
    assert measured_token_ratio(compacted, tokens) == pytest.approx(2.0)
    # without the record, the drop is taken as the tool's own trim: first call to last, 8,000 / 12,600
    assert measured_token_ratio(_session(usage, messages), tokens) == pytest.approx(8_000 / 12_600)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 5_000), st.booleans()), min_size=2, max_size=30),
       st.lists(st.integers(0, 900), min_size=40, max_size=40), st.lists(st.integers(0, 300), min_size=40, max_size=40))
def test_prompt_growths_equals_a_loop_over_the_calls(calls, counts, images):
    """The vectorized growths equal a plain loop over consecutive calls that skips every step across a compaction."""
    sent = np.sort(np.array([c[0] for c in calls], dtype=np.int64))
    prompts = np.array([c[1] for c in calls], dtype=np.int64)
    compacted = np.array([False] + [c[2] for c in calls[1:]], dtype=bool)  # [j]: a compaction before call j
    tokens = np.array(counts, dtype=np.int64) + np.array(images, dtype=np.int64)
    image_tokens = np.array(images, dtype=np.int64)
    grown = prompt_growth = 0
    for j in range(1, len(calls)):
        if compacted[j]:
            continue
        between = range(int(sent[j - 1]), int(sent[j]))
        picture = sum(int(image_tokens[i]) for i in between)
        grown += sum(int(tokens[i]) for i in between) - picture
        prompt_growth += int(prompts[j] - prompts[j - 1]) - picture
    assert prompt_growths(sent, prompts, tokens, image_tokens, compacted) == (grown, prompt_growth)
    if not compacted.any():
        assert prompt_growths(sent, prompts, tokens, image_tokens) == (grown, prompt_growth)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 500), max_size=30, unique=True), st.lists(st.integers(0, 520), max_size=5))
def test_first_calls_after_equals_a_loop_over_the_compactions(call_lines, compaction_lines):
    lines = np.array(sorted(call_lines), dtype=np.int64)
    expected = [False] * lines.size
    for line in compaction_lines:
        after = next((j for j, at in enumerate(lines) if at >= line), lines.size)
        if 0 < after < lines.size:
            expected[after] = True
    assert first_calls_after(lines, compaction_lines).tolist() == expected


def test_the_replayed_history_of_a_compacted_session_has_the_ratio_of_its_live_conversation():
    """Measured over a whole recorded history (what replay counts), where the prompt drops at each
    compaction while the history keeps every message, the ratio stays near the live
    conversation's, instead of being dragged below it by the drop."""
    from dataclasses import replace

    from dp_compact.conversation import recorded_history
    from dp_compact.measure.tokens import message_token_parts
    from tests.conftest import SESSIONS, need, session_files

    checked = 0
    from dp_compact.errors import NotASessionError

    for path in session_files() or [need(SESSIONS)]:
        try:
            session = read_session(path)
        except NotASessionError:  # a UI log: no conversation
            continue
        if not session.compactions or len(session.usage) < 2:
            continue
        history = replace(session, messages=recorded_history(session))
        live = measured_token_ratio(session, message_token_parts(session.messages).total)
        whole = measured_token_ratio(history, message_token_parts(history.messages).total)
        if live is None:
            continue
        assert whole is not None and abs(whole / live - 1) < 0.25, (path.name, live, whole)
        checked += 1
    assert checked >= 1


def test_token_ratio_bounds_hold_every_calibrated_session():
    """Every per-session ratio the committed calibration measured (calibration/results.json) is within the bounds."""
    from tests.conftest import REPO

    results = json.loads((REPO / "calibration" / "results.json").read_text(encoding="utf-8"))
    ratios = [s["token_ratio"] for s in results["sessions"] if s.get("token_ratio") is not None]
    assert len(ratios) >= 5 and all(RATIO_BOUNDS[0] <= r <= RATIO_BOUNDS[1] for r in ratios)


def _placed_one_by_one(messages: list[Message], usage: list[Usage]) -> list[int]:
    """call_message_counts as a plain loop per call: the last assistant message starting at or
    before the record's line (file order among equal lines), unless an earlier call took it."""
    claimed: set[int] = set()
    out = []
    for record in usage:
        best = None
        for index, message in enumerate(messages):
            if message.role == "assistant" and message.line <= record.line and (best is None or message.line >= messages[best].line):
                best = index
        if best is None or best in claimed:
            out.append(-1)
        else:
            claimed.add(best)
            out.append(best)
    return out


@settings(max_examples=200, deadline=None)
@given(
    roles=st.lists(st.sampled_from(["user", "assistant", "tool"]), max_size=30),
    lines=st.lists(st.integers(0, 40), min_size=30, max_size=30),
    usage_lines=st.lists(st.integers(0, 45), max_size=20),
)
def test_call_placement_equals_a_plain_loop_per_call(roles, lines, usage_lines) -> None:
    """The vectorized placement of usage records on responses equals one loop per call, lines out of order included."""
    messages = [Message(role, "x", line=line) for role, line in zip(roles, lines)]
    usage = [Usage(100, line=line) for line in sorted(usage_lines)]
    assert call_message_counts(messages, usage).tolist() == _placed_one_by_one(messages, usage)
