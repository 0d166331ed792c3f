"""The shortcuts that keep an adapter's call that does not compact cheap give what the long way gives."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from dp_compact.conversation import Message, Session, call_seconds, positions_holding_blocks, raw_as_json
from dp_compact.core import timing
from dp_compact.measure import tokens
from dp_compact.prepare import plan_timing


def _messages(n: int) -> list[Message]:
    with raw_as_json():  # plain messages keep a shape of their raw: they hold no blocks
        plain = [Message("user", f"hi {i}", raw={"content": f"hi {i}"}) for i in range(n)]
    pictured = Message("user", raw={"content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]})
    loose = Message("assistant", "ok", raw={"role": "assistant", "content": "ok"})  # a dict as given: may hold blocks
    out: list[Message] = []
    for i, message in enumerate(plain):
        out.append(message)
        if i % 3 == 0:
            out.append(pictured)
        if i % 4 == 1:
            out.append(loose)
        if i % 5 == 2:
            out.append(Message("tool", "result"))  # raw None
    return out


@pytest.mark.parametrize("n", [0, 1, 2, 5, 9, 20, 40])
def test_few_messages_are_looked_at_one_by_one_with_the_same_positions(n):
    messages = _messages(n)
    assert tokens._may_hold_blocks(messages) == positions_holding_blocks(messages).tolist()
    assert tokens._may_hold_blocks(messages[: tokens._FEW_BLOCK_MESSAGES]) == \
        positions_holding_blocks(messages[: tokens._FEW_BLOCK_MESSAGES]).tolist()


def test_call_seconds_resumed_read_each_time_as_call_seconds_does():
    times = ("1970-01-01T00:01:00+00:00", 1_700_000_000_000, None, 1.8e9, True, "not a time", 12, 2.5e12, "2026-12-06T17:00:00Z")
    session = Session(path="", format="", messages=(), call_times=times)
    expected = call_seconds(session)
    for split in range(len(times) + 1):
        state = timing._seconds_extend(timing._seconds_extend(timing.array("d"), times[:split]), times[split:])
        got = timing._seconds_finish(state)
        assert got.tobytes() == expected.tobytes()
    with pytest.raises(OverflowError):  # a number no float holds: raised as call_seconds raises it
        call_seconds(Session(path="", format="", messages=(), call_times=(10**400,)))
    with pytest.raises(OverflowError):
        timing._seconds_extend(timing.array("d"), (10**400,))


@pytest.mark.parametrize("call_times", [(), (None, None), (1.8e9, 1.8e9 + 30.0, None, 1.8e9 + 95.0)])
def test_imminent_timing_is_the_timing_marked_imminent(call_times):
    session = Session(path="", format="", messages=(), call_times=call_times)
    for now in (None, 1.8e9 + 200.0):
        assert plan_timing(session, now, "wall clock", imminent=True) == replace(plan_timing(session, now, "wall clock"), imminent=True)
    assert not plan_timing(session, None).imminent


def test_langchain_middleware_reads_the_thread_once_per_call(tmp_path, monkeypatch):
    pytest.importorskip("langchain")
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from dp_compact.adapters.langchain import DpCompactMiddleware
    from dp_compact.pipeline.archive import ArchiveStore

    clock = iter(np.arange(1.8e9, 1.8e9 + 3000.0, 30.0).tolist())
    middleware = DpCompactMiddleware("claude-sonnet-4", archive=ArchiveStore(tmp_path), clock=lambda: next(clock))
    reads = []
    real = DpCompactMiddleware._session_id

    def counting(self):
        reads.append(1)
        return real(self)

    monkeypatch.setattr(DpCompactMiddleware, "_session_id", counting)
    messages: list = [HumanMessage("list the files", id="h0")]
    for step in range(4):
        messages.append(AIMessage("", id=f"a{step}", tool_calls=[{"name": "ls", "args": {}, "id": f"c{step}"}],
                                  usage_metadata={"input_tokens": 3000 + 40 * step, "output_tokens": 20, "total_tokens": 3020 + 40 * step}))
        messages.append(ToolMessage("a.py b.py", tool_call_id=f"c{step}", name="ls", id=f"t{step}"))
        reads.clear()
        assert middleware.before_model({"messages": list(messages)}, None) is None  # type: ignore[arg-type]
        assert len(reads) == 1
    assert [p.decision for p in middleware.plans] == ["keep"] * 4
    assert [m.id for m in middleware.history()] == [m.id for m in messages]
    assert all(math.isfinite(p.estimates.context_tokens) for p in middleware.plans)
