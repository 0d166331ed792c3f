"""Property tests of the pipeline (DESIGN §5): any requested k, random conversations of both APIs.

For conversations with tool loops, parallel calls, signed thinking blocks, long tool results and
pending calls: the output validates (our validator and the SDKs' request types), the tail is the
input's tail unchanged, and the archived head + tail reproduce the input's messages exactly.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dp_compact.errors import NoFeasibleCutError
from dp_compact.pipeline.compact import compact_file
from dp_compact.pipeline.validate import validate_messages
from dp_compact.settings import load_settings
from tests.pipeline_helpers import FakeArchiver, conversation, read_jsonl, sdk_errors, write_jsonl
from tests.strategies import api_conversations


def _results(message: dict, api: str) -> list[str]:
    if api == "openai":
        return [message["tool_call_id"]] if message["role"] == "tool" else []
    content = message["content"]
    return [b["tool_use_id"] for b in content if b.get("type") == "tool_result"] if isinstance(content, list) else []


def _calls(message: dict, api: str) -> list[str]:
    if api == "openai":
        return [c["id"] for c in message.get("tool_calls") or ()]
    content = message["content"]
    return [b["id"] for b in content if b.get("type") == "tool_use"] if isinstance(content, list) else []


def _feasible(conv: list[dict], cut: int, api: str) -> bool:
    """SCHEMA's feasible cut, checked directly: the tail opens on no tool result and holds every call it answers."""
    tail = conv[cut:]
    if not tail or _results(tail[0], api):
        return False
    called = {c for m in tail for c in _calls(m, api)}
    return all(r in called for m in tail for r in _results(m, api))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(api=st.sampled_from(["anthropic", "openai"]), data=st.data())
def test_compact_any_keep_output_validates_tail_unchanged_and_archive_restores(api: str, data: st.DataObject) -> None:
    messages = data.draw(api_conversations(api))
    conv = conversation(messages)
    keep = data.draw(st.integers(1, len(conv) + 1))
    archive = FakeArchiver()
    with tempfile.TemporaryDirectory() as tmp:
        source, output = write_jsonl(Path(tmp) / "in.jsonl", messages), Path(tmp) / "out.jsonl"
        try:
            result = compact_file(source, load_settings(), output=output, keep=keep, archiver=archive, use_cache=False)
        except NoFeasibleCutError:
            assert not any(_feasible(conv, cut, api) for cut in range(1, len(conv) - keep + 1))
            assert not output.exists()
            return
        written = read_jsonl(output)
    assert result.decision == "compact" and result.k >= keep
    assert _feasible(conv, len(conv) - result.k, api)
    assert validate_messages(written, api) == ()
    assert sdk_errors(written, api) == []
    out = conversation(written)
    assert out[len(out) - result.k :] == conv[len(conv) - result.k :]  # the tail, unchanged
    assert len(out) - result.k == (2 if conv[len(conv) - result.k]["role"] == "user" else 1)  # summary (+ ack)
    assert [m for m in written if m["role"] == "system"] == [m for m in messages if m["role"] == "system"]
    assert archive.restore(result.archive_ref) + conv[len(conv) - result.k :] == conv
    assert result.archive_ref in out[0]["content"]


def _atoms(messages: list[dict]) -> list[str]:
    """What a message says, as JSON-escaped strings: texts, tool-call ids and tool-result contents."""
    found: list[str] = []
    for message in messages:
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for block in blocks:
            found += [block.get(key) for key in ("text", "id", "tool_use_id", "content") if isinstance(block.get(key), str)]
        found += [call["id"] for call in message.get("tool_calls") or ()]
    return [json.dumps(atom)[1:-1] for atom in found if atom.strip()]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(api=st.sampled_from(["anthropic", "openai"]), data=st.data())
def test_compact_irregular_rounds_output_validates_and_loses_nothing_of_the_tail(api: str, data: st.DataObject) -> None:
    """Transcripts hold rounds no API accepts as they are: a message between the calls and their
    results, calls never answered before the next user message. Compacting them at any requested k
    still gives a valid request at a feasible cut, the archive restores the head exactly, and every
    text, call id and result of the tail is still in the output (repairs may merge or re-label, never drop)."""
    messages = data.draw(api_conversations(api, irregular=True))
    conv = conversation(messages)
    keep = data.draw(st.integers(1, len(conv) + 1))
    archive = FakeArchiver()
    with tempfile.TemporaryDirectory() as tmp:
        source, output = write_jsonl(Path(tmp) / "in.jsonl", messages), Path(tmp) / "out.jsonl"
        try:
            result = compact_file(source, load_settings(), output=output, keep=keep, archiver=archive, use_cache=False)
        except NoFeasibleCutError:
            assert not any(_feasible(conv, cut, api) for cut in range(1, len(conv) - keep + 1))
            return
        written = read_jsonl(output)
    cut = len(conv) - result.k
    assert result.decision == "compact" and result.k >= keep
    assert _feasible(conv, cut, api)
    assert validate_messages(written, api) == ()
    assert sdk_errors(written, api) == []
    assert archive.restore(result.archive_ref) + conv[cut:] == conv
    out_tail = json.dumps(conversation(written)[1:], ensure_ascii=True)
    assert [atom for atom in _atoms(conv[cut:]) if atom not in out_tail] == []


@pytest.mark.xfail(strict=False, reason="bug: an OpenAI tool result that arrives after another message is repaired as"
                   " missing ('[no result was recorded for this tool call]') and its real output re-labelled as the"
                   " result of a call 'not in this conversation' (pipeline/repairs.py openai_orphans_as_text), where"
                   " the call is in the conversation and its result was recorded")
@pytest.mark.parametrize("between", [{"role": "user", "content": "also check ci.yml"},
                                     {"role": "assistant", "content": "still running"}], ids=["user", "assistant"])
def test_compact_openai_delayed_tool_result_stays_the_result_of_its_call(between: dict) -> None:
    """repairs.py: only a result whose call is not in the written conversation becomes text, and only a
    call whose result the source never recorded gets a 'no result' result. A result that comes one
    message late has both: it must stay call_1's result (moved before the message that came between)."""
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    messages = [{"role": "user", "content": "fix the build"}, {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "now the tests"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                between, {"role": "tool", "tool_call_id": "call_1", "content": "PASSED"}, {"role": "assistant", "content": "done"}]
    source, output = write_jsonl(Path("in.jsonl"), messages), Path("out.jsonl")
    result = compact_file(source, load_settings(), output=output, keep=4, archiver=FakeArchiver(), use_cache=False)
    written = read_jsonl(output)
    assert result.k == 4 and validate_messages(written, "openai") == ()
    results = [m["content"] for m in written if m.get("role") == "tool" and m.get("tool_call_id") == "call_1"]
    assert results == ["PASSED"]
