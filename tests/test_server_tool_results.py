"""Server tools (Anthropic ``server_tool_use`` answered inside the same assistant message): their
result blocks are counted as tokens of that message, and owe nothing to the next message."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from dp_compact.core.cuts import feasible_cut_mask, message_arrays
from dp_compact.sessions import read_session
from dp_compact.sessions.anthropic import message_from_anthropic
from dp_compact.measure.tokens import MESSAGE_OVERHEAD_TOKENS, count_message_tokens, count_text_tokens

SEARCH = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "python 3.9 eol"}}
RESULT = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
    {"type": "web_search_result", "url": "https://devguide.python.org/versions/", "title": "Status of Python versions",
     "encrypted_content": "Eo8CCioIBxgCIiQ4YzE2ZjA3Ny1hYjZm" * 40, "page_age": "3 weeks ago"},
]}
ASSISTANT = {"role": "assistant", "content": [{"type": "text", "text": "Checking."}, SEARCH, RESULT, {"type": "text", "text": "It is EOL."}]}


def test_search_result_block_is_counted_in_its_assistant_message() -> None:
    message = message_from_anthropic(ASSISTANT)
    visible = '[{"type":"web_search_result","url":"https://devguide.python.org/versions/","title":"Status of Python versions","page_age":"3 weeks ago"}]'
    assert message.text == f"Checking.\n{visible}\nIt is EOL."
    assert "Eo8C" not in message.text  # the opaque page content is not text
    counted = "\n".join([message.text, "web_search", json.dumps(SEARCH["input"], separators=(",", ":"))])
    assert int(count_message_tokens([message])[0]) == int(count_text_tokens([counted])[0]) + MESSAGE_OVERHEAD_TOKENS


def test_code_execution_and_error_results_are_counted_too() -> None:
    run = {"type": "code_execution_tool_result", "tool_use_id": "srvtoolu_2",
           "content": {"type": "code_execution_result", "stdout": "42\n", "stderr": "", "return_code": 0}}
    error = {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_3", "content": {"type": "web_fetch_tool_error", "error_code": "url_not_accessible"}}
    message = message_from_anthropic({"role": "assistant", "content": [run, error]})
    assert message.text.splitlines() == [
        '{"type":"code_execution_result","stdout":"42\\n","stderr":"","return_code":0}',
        '{"type":"web_fetch_tool_error","error_code":"url_not_accessible"}',
    ]


def test_fetched_pdf_counts_as_its_document_not_as_text() -> None:
    pdf = base64.b64encode(b"%PDF-1.4 not really").decode()
    fetch = {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_4", "content": {
        "type": "web_fetch_result", "url": "https://a.org/x.pdf",
        "content": {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}}}}
    message = message_from_anthropic({"role": "assistant", "content": [fetch]})
    assert message.images == 1 and pdf not in message.text and "https://a.org/x.pdf" in message.text


def test_server_round_needs_no_result_and_the_next_user_message_is_a_turn(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    lines = [{"role": "user", "content": "Is 3.9 supported?"}, ASSISTANT, {"role": "user", "content": "Then move to 3.12."},
             {"role": "assistant", "content": "Done."}]
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n", encoding="utf-8")
    session = read_session(path)
    assert [m.kind for m in session.messages] == ["prompt", "assistant", "prompt", "assistant"]
    assert session.user_turns == 2
    assert feasible_cut_mask(message_arrays(session.messages))[2]
