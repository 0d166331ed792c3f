"""Property tests of the pipeline (DESIGN §5): any requested k, random conversations of both APIs.

For conversations with tool loops, parallel calls, signed thinking blocks, long tool results and
pending calls: the output validates (our validator and the SDKs' request types), the tail is the
input's tail unchanged, and the archived head + tail reproduce the input's messages exactly.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

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
