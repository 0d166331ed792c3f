"""One rule for a user turn: :attr:`Message.is_user_turn`, from the kind its reader set once."""

from __future__ import annotations

import ast
import copy
import pickle
from dataclasses import FrozenInstanceError, dataclass, fields, replace
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_compact import _fast
from dp_compact.conversation import (
    MESSAGE_KINDS, Message, ToolCall, ToolResult, Usage, count_user_turns, holds_no_blocks, new_message, raw_as_json,
)
from dp_compact.core.cuts import message_ages, message_arrays
from dp_compact.pipeline.extract import user_turn_texts
from dp_compact.sessions import read_session
from dp_compact.sessions.source import Record, _make_record

SESSIONS = Path(__file__).resolve().parents[2] / "shared" / "sessions"
POSTHOG = SESSIONS / "claude_code" / "cc_posthog_dashboard_compact.jsonl"
PACKAGE = Path(__file__).resolve().parents[1] / "dp_compact"


@pytest.fixture(scope="module")
def posthog():
    if not POSTHOG.is_file():
        pytest.skip("shared sessions not available")
    return read_session(POSTHOG)


def _raw_user_records(path: Path) -> dict[int, dict]:
    """Line -> Claude Code ``user`` record of the main chain, read straight from the file."""
    records = {}
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        value = orjson.loads(line) if line.strip() else None
        if isinstance(value, dict) and value.get("type") == "user" and not value.get("isSidechain"):
            records[number] = value
    return records


def test_kinds_follow_the_claude_code_record(posthog) -> None:
    raw = _raw_user_records(POSTHOG)
    users = [m for m in posthog.history if m.role == "user"]
    by_line = {m.line: m for m in users}
    summaries = [n for n, v in raw.items() if v.get("isCompactSummary")]
    notifications = [n for n, v in raw.items() if isinstance(v["message"].get("content"), str)
                     and v["message"]["content"].startswith("<task-notification>")]
    assert summaries and len(notifications) > 10  # the file holds both, so the checks below can fail
    assert all(by_line[n].kind == "summary" and not by_line[n].is_user_turn for n in summaries)
    assert all(by_line[n].kind == "injected" and not by_line[n].is_user_turn for n in notifications)
    interrupted = [m for m in users if m.text.startswith("[Request interrupted by user")]
    assert interrupted and not any(m.is_user_turn for m in interrupted)


def test_every_count_uses_the_one_rule(posthog) -> None:
    history = posthog.history
    turns = [m for m in history if m.is_user_turn]
    # 15 prompts typed in the file (read by hand: 4 before the compaction, 11 after it)
    assert len(turns) == 15
    assert posthog.user_turns == len(turns) == count_user_turns(history)
    arrays = message_arrays(history)
    assert int(arrays.turn_index[-1]) == len(turns)
    assert np.array_equal(np.diff(np.concatenate(([0], arrays.turn_index))) == 1, [m.is_user_turn for m in history])
    ages = message_ages(arrays, "turns", 1.0)
    assert ages[-1] == len(turns)
    indices = {i for i, _ in user_turn_texts(enumerate(history))}
    assert indices and indices <= {i for i, m in enumerate(history) if m.is_user_turn}
    with_injected = {i for i, _ in user_turn_texts(enumerate(history), injected=True)}
    assert any(history[i].kind == "injected" for i in with_injected)
    assert not any(history[i].kind == "summary" for i in with_injected)


def test_a_cut_may_still_start_at_injected_context_and_summaries(posthog) -> None:
    from dp_compact.core.cuts import ROLE_USER

    arrays = message_arrays(posthog.history)
    user = np.flatnonzero(arrays.roles == ROLE_USER)
    assert {posthog.history[i].kind for i in user} == {"prompt", "injected", "summary"}


def test_kind_follows_the_role() -> None:
    assert Message("user", "fix it").kind == "prompt"
    assert Message("user", "[summary]\nearlier").kind == "summary"
    assert Message("user", "x", kind="injected").kind == "injected"
    assert Message("assistant", "a", kind="prompt").kind == "assistant"
    tool = replace(Message("user", "out", kind="prompt"), role="tool", tool_results=(ToolResult("c", "out"),))
    assert tool.kind == "tool_result" and not tool.is_user_turn
    assert Message("assistant", tool_calls=(ToolCall("c", "f"),)).kind in MESSAGE_KINDS


def test_no_other_user_turn_rule_in_the_package() -> None:
    """No module but the readers and :mod:`dp_compact.conversation` decides what is typed."""
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert not names & {"is_injected", "_is_typed", "_is_injected"}, path


@pytest.mark.parametrize(
    "value",
    [
        Message("user", "fix the bug", line=3, source_bytes=40, raw={"content": "fix the bug"}),
        Message("assistant", "ok", (ToolCall("c1", "Bash", '{"command":"ls"}'),), thinking="plan", signed_thinking=True, images=1),
        Message("tool", tool_results=(ToolResult("c1", "a.txt", True),), line=9, source_lines=2),
        ToolCall("c1", "Bash"),
        ToolResult("c1", "out"),
        Usage(1200, 1000, 100, 40, line=7, convention="anthropic"),
        Record(4, {"type": "user"}, 120),
        new_message("user", "fix the bug", line=3, source_bytes=40, raw={"content": "fix the bug"}),
        _make_record(4, {"type": "user"}, 120),
    ],
    ids=["prompt", "assistant", "tool", "call", "result", "usage", "record", "reader-message", "reader-record"],
)
def test_value_types_are_frozen_and_survive_pickle_copy_and_replace(value) -> None:
    """The value types, made by their class or by the readers' makers (dp_compact._fast), are frozen dataclasses."""
    assert type(value).__name__ in {"Message", "ToolCall", "ToolResult", "Usage", "Record"}
    name = fields(value)[0].name
    with pytest.raises(FrozenInstanceError):
        setattr(value, name, getattr(value, name))
    again = pickle.loads(pickle.dumps(value))
    assert again == value and type(again) is type(value)
    assert copy.deepcopy(value) == value and copy.copy(value) == value
    assert replace(value) == value
    if not isinstance(value, Record):  # Record holds a dict: not hashable
        assert hash(replace(value)) == hash(value)
    if isinstance(value, Message):
        assert again.raw == value.raw and again.kind == value.kind


def test_the_constructor_keeps_its_rules_and_errors() -> None:
    """Keywords, defaults and the kind rule are the dataclass's; a missing field is a TypeError."""
    assert Message("user", "<task-notification>done</task-notification>").kind == "injected"
    assert Message("user", "hi", kind="assistant").kind == "prompt"  # not a user kind: decided from the text
    assert Message("assistant", kind="prompt").kind == "assistant"
    assert Message(role="tool").source_lines == 1 and Message("assistant").tool_calls == ()
    with pytest.raises(TypeError):
        Message()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ToolCall("c1")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Usage(1, 2, unknown=3)  # type: ignore[call-arg]
    with raw_as_json():
        kept = Message("user", "hi", raw={"content": "hi"})
    assert holds_no_blocks(kept.raw) and pickle.loads(pickle.dumps(kept)).raw is not None


_ROLES = st.sampled_from(["user", "assistant", "tool"])
_KINDS = st.sampled_from([None, *MESSAGE_KINDS])
_TEXTS = st.sampled_from(["", "fix the bug", "<task-notification>done</task-notification>", "[summary] earlier", "x" * 3000])
_RAWS = st.sampled_from([None, {"content": "hi"}, {"role": "user", "content": [{"type": "image"}]}, {"content": "y" * 3000}])


@settings(max_examples=200, deadline=None)
@given(_ROLES, _TEXTS, _KINDS, _RAWS, st.integers(0, 5000), st.sampled_from(["", "shape", "whole"]))
def test_new_message_is_the_message_the_class_makes(role, text, kind, raw, source_bytes, keeping) -> None:
    """Rule 2 of dp_compact._fast: the readers' builder applies Message.__post_init__'s rules (kind, raw kept)."""
    arguments = {"role": role, "text": text, "images": 1, "line": 7, "source_bytes": source_bytes, "raw": raw, "kind": kind}
    if keeping:
        with raw_as_json(whole=keeping == "whole"):
            made, built = new_message(**arguments), Message(**arguments)
    else:
        made, built = new_message(**arguments), Message(**arguments)
    assert type(made) is Message and made == built and made.kind == built.kind and made.raw == built.raw
    assert [getattr(made, f.name) for f in fields(Message)] == [getattr(built, f.name) for f in fields(Message)]


def test_the_maker_takes_only_frozen_slotted_dataclasses() -> None:
    """Rule 1 of dp_compact._fast, checked when the maker is made (at import)."""

    @dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclass(slots=True)
    class NotFrozen:
        x: int

    for cls in (NoSlots, NotFrozen, dict):
        with pytest.raises(TypeError):
            _fast.maker(cls)


def test_the_replacer_is_dataclasses_replace() -> None:
    """dp_compact._fast.replacer: the object dataclasses.replace makes (type, every field, a bad name a TypeError),
    and dataclasses.replace itself for a class the maker does not take or that has a __post_init__."""
    usage = Usage(1000, 200, 30, 40, line=3, convention="openai")
    replaced = _fast.replacer(Usage)
    assert replaced is not replace and type(replaced(usage, line=9)) is Usage
    for changes in ({}, {"line": 9}, {"prompt_tokens": 5, "convention": "anthropic", "cache_split_estimated": True}):
        made, built = replaced(usage, **changes), replace(usage, **changes)
        assert made == built and [getattr(made, f.name) for f in fields(Usage)] == [getattr(built, f.name) for f in fields(Usage)]
    with pytest.raises(TypeError):
        replaced(usage, unknown=3)

    @dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            if self.x < 0:
                raise ValueError("x < 0")

    assert _fast.replacer(NoSlots) is replace and _fast.replacer(Checked) is replace and _fast.replacer(Message) is replace
