"""The session an adapter assembles from the one of its last call (dp_compact.adapters.transcript._ReadSession).

After every record added, the assembled session must equal what the reader builds from all of its
records (``LiveReader.session()``): over the shared chat-completions transcripts fed record by
record, over a Claude Code transcript replayed through the LangChain middleware (its own
compactions and summaries included), and over appends that are not plain (a result before its
call, a call id used twice, a summary, a compaction marker, a system message, a shrunk file's
statement, a text-action run).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dp_compact.adapters.transcript import _ReadSession
from dp_compact.sessions.openai_chat import LiveReader
from dp_compact.sessions.source import Record
from tests.conftest import SESSIONS, need

SUMMARY = ("[summary]\nEarlier messages (12 messages, 3 user turns, 5 LLM calls, about 900 tokens, 2 messages follow) were"
           " compacted by dp-compact (compaction 1).\n\nThe user asked for a parser.")
SHRUNK = ("[tool result shrunk by dp-compact: 900 characters, 3 lines of text; conversation when shrunk: model m-1;"
          " window 1,000,000 tokens; context 12,345 tokens in 9 messages; avg 4,100 prompt tokens per call]\nfirst: ...")


def _same(assembled: Any, read: Any) -> None:
    """``assembled`` is ``read``: every field, the history, the times, the system messages and the markers."""
    assert assembled == read
    assert assembled.history == read.history
    assert assembled.call_times == read.call_times
    assert assembled.system_messages == read.system_messages
    assert assembled.compaction_records == read.compaction_records


def _feed(messages: list[dict[str, Any]], steps: list[int]) -> int:
    """Add ``messages`` to a reader in slices of ``steps`` (cycled), checking the assembled session after each;
    the number of sessions read whole (not assembled from the last one)."""
    reader = LiveReader("s")
    whole: list[int] = []
    reader.session = lambda: whole.append(1) or LiveReader.session(reader)  # type: ignore[method-assign]
    read = _ReadSession(reader)
    done, line, step = 0, 1, 0
    while done < len(messages):
        size = steps[step % len(steps)]
        step += 1
        records = [Record(line + i, m, len(json.dumps(m))) for i, m in enumerate(messages[done:done + size])]
        reader.add(records)
        line, done = line + len(records), done + len(records)
        _same(read.session(), LiveReader.session(reader))
    return len(whole)


def _chat_messages(path: Path) -> list[dict[str, Any]]:
    """The chat-completions messages of a shared transcript (JSONL lines, a JSON array or a ``{messages}`` document)."""
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    document = json.loads(text)
    return document if isinstance(document, list) else document["messages"]


@pytest.mark.parametrize("name", ["openai_chat/oai_task393c91_converted.json", "openai_chat/taubench_gpt4o_airline_task46.jsonl",
                                  "openai_chat/miniswe_github_issue.traj.json"])
def test_assembled_session_is_the_readers_record_by_record(name):
    messages = _chat_messages(need(SESSIONS / name))
    _feed(messages, [1])
    _feed(messages, [3, 1, 7])


def test_a_long_tool_transcript_is_assembled_from_the_last_session():
    messages = _chat_messages(need(SESSIONS / "openai_chat" / "oai_task393c91_converted.json"))
    # read whole: the first call, the two compactions' markers and the summary after the second; from message 320 on
    # a result comes before its call, and every later call is read whole
    assert _feed(messages[:300], [2]) == 4


def _call(i: int, cid: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"step {i}", "tool_calls": [{"id": cid, "type": "function",
                                                                          "function": {"name": "run", "arguments": "{}"}}]}


def _result(cid: str, text: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": text}


@pytest.mark.parametrize("odd", [
    [_result("late"), {"role": "user", "content": "go"}, _call(9, "late")],  # a result before its call
    [_call(8, "c0"), _result("c0")],  # a call id used twice
    [{"role": "user", "content": SUMMARY}, {"role": "assistant", "content": "noted"}],  # our summary
    [{"role": "system", "content": "[compact_boundary] auto"}, {"role": "user", "content": SUMMARY}],  # a marker, then a summary
    [{"role": "system", "content": "Also: be brief."}],  # a system message among the messages
    [_call(7, "s7"), _result("s7", SHRUNK)],  # a shrunk file's statement
])
def test_appends_that_are_not_plain_are_read_whole(odd):
    base = [{"role": "user", "content": "fix the bug"}]
    for i in range(6):
        base += [_call(i, f"c{i}"), _result(f"c{i}")]
    tail = [_call(20 + i, f"t{i}") for i in range(3)]
    messages = base + odd + [m for i, call in enumerate(tail) for m in (call, _result(f"t{i}"))]
    for steps in ([1], [2, 3]):
        _feed(messages, steps)
    assert _feed(messages, [len(base), len(odd), 100]) >= 2  # the odd append is read whole
    assert _feed(base + tail, [len(base), len(odd), 100]) == 1


def test_a_text_action_run_is_read_whole():
    messages = [{"role": "system", "content": "act"}, {"role": "user", "content": "task"}]
    for i in range(5):
        messages += [{"role": "assistant", "content": f"THOUGHT\n```mswea_bash_command\nls {i}\n```"},
                     {"role": "user", "content": f"<returncode>0</returncode> out {i}"}]
    assert _feed(messages, [1]) > len(messages) - 3  # read whole once its first action is seen
    _feed(messages, [2, 1])


def test_the_middlewares_session_is_the_readers_over_its_own_compactions(tmp_path):
    pytest.importorskip("langchain", reason="the langchain extra is not installed")
    from dp_compact.adapters import langchain as lc
    from tests.test_adapter_live import Clock, replay_langchain

    path = need(SESSIONS / "claude_code" / "cc_privacy_x402.jsonl")
    clock = Clock()
    middleware = lc.DpCompactMiddleware("claude-sonnet-4", archive=None, recall=None, keep_history=False, max_context_tokens=32_000,
                                        clock=clock)
    checked = []

    def check(messages: list[Any], times: dict[str, float], now: float) -> None:
        transcript = middleware.transcripts["langchain"]
        _same(transcript._read._session, transcript._reader.session())
        checked.append(len(messages))

    replay_langchain(path, middleware, clock, check)
    assert middleware.compactions and len(checked) > 5
