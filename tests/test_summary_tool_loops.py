"""The extractive summary of a head of tool calls with large outputs and little text around them."""

from __future__ import annotations

import json

from dp_compact.pipeline.compact import compact_session
from dp_compact.pipeline.summarize import MIN_SUMMARY_CHARS
from dp_compact.sessions import read_session
from dp_compact.settings import load_settings

from tests.pipeline_helpers import FakeArchiver, write_jsonl


def _rows(label: str) -> str:
    """~40k characters of tool output with no path, command or error line."""
    return "\n".join(f"{label} row {i}: value {i * 7} lorem ipsum dolor sit amet consectetur" for i in range(600))


def _call(call_id: str, name: str, arguments: dict) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def test_head_of_a_short_prompt_and_two_large_tool_outputs_compacts(tmp_path):
    messages = [
        {"role": "user", "content": "Sum the sales."},
        _call("c1", "query_db", {"sql": "SELECT * FROM sales"}),
        {"role": "tool", "tool_call_id": "c1", "content": _rows("sales")},
        _call("c2", "fetch_report", {"report_id": "Q3-2024", "verbose": True}),
        {"role": "tool", "tool_call_id": "c2", "content": "ERROR: permission denied for report Q3-2024\n" + _rows("q3")},
        _call("c3", "query_db", {"sql": "SELECT 1"}),
        {"role": "tool", "tool_call_id": "c3", "content": "1"},
    ]
    assert all(len(m["content"]) > 35_000 for m in messages if m.get("tool_call_id") in ("c1", "c2"))
    session = read_session(write_jsonl(tmp_path / "loop.jsonl", messages))
    result = compact_session(session, load_settings(), keep=2, archiver=FakeArchiver())
    assert result.decision == "compact" and result.cut == 5
    summary = result.summary.split("[anchors]")[0]
    assert "query_db(sql=SELECT * FROM sales)" in summary and "fetch_report(report_id=Q3-2024)" in summary
    assert "permission denied for report Q3-2024" in summary  # the error line is the result's preview
    body = summary.split("What they held:")[1]
    assert len(body.strip()) >= MIN_SUMMARY_CHARS
