"""The ``llm`` summarizer end to end: the real anthropic/openai SDK clients against a local server.

The server is ``http.server`` on 127.0.0.1, port 0, started by each test; nothing else is
contacted. ``max_retries=0`` and a 10 s timeout keep failures fast.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dp_compact.errors import CompactionError, SummaryTooShortError
from dp_compact.pipeline.llm import DEFAULT_CONTEXT_WINDOWS, LLMSummarizer, count_request_tokens, summary_context_window
from dp_compact.pipeline.shrink import shrink_messages
from dp_compact.pipeline.summarize import SummaryRequest
from dp_compact.sessions import Message, read_session

pytest.importorskip("anthropic")
pytest.importorskip("openai")

SUMMARY = (
    "User goals:\n- Fix the failing test in src/calc.py\nUser instructions (still in force):\n"
    "- Always run pytest before committing.\nFiles touched:\n- src/calc.py (edit)\nCommands run:\n- pytest -q\n"
    "Decisions:\n- add() must return a + b, not a - b."
)
SYSTEM = "You are a careful coding agent. Work in /repo."
ANTHROPIC_TOOLS = [
    {"name": "bash", "description": "Run a shell command.", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}},
    {"name": "edit", "description": "Edit a file.", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
]
OPENAI_TOOLS = [
    {"type": "function", "function": {"name": "bash", "description": "Run a shell command.", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "edit", "description": "Edit a file.", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
]
Responder = Callable[[str, dict[str, Any]], tuple[int, dict[str, Any]]]


def _cl100k() -> Any:
    """The bundled cl100k_base encoding, loaded by tiktoken itself (the server's own counter)."""
    from dp_compact.measure.tokens import _encoding

    return _encoding()


@dataclass
class LocalServer:
    """What the local API server received, and how it answers."""

    base: str
    responder: Responder
    received: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: cl100k tokens of each request body as the server received it (the raw bytes, every key
    #: included): counted here, independently of the estimator that sized the request.
    received_tokens: list[int] = field(default_factory=list)


@pytest.fixture
def server(monkeypatch) -> Iterator[LocalServer]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    state = LocalServer(base="", responder=lambda path, body: (500, {}))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = json.loads(raw or b"{}")
            state.received.append((self.path, body))
            state.received_tokens.append(len(_cl100k().encode(raw.decode("utf-8"), disallowed_special=())))
            status, payload = state.responder(self.path, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence the access log
            return

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    state.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def anthropic_reply(text: str, stop_reason: str = "end_turn") -> Responder:
    def respond(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        content = [{"type": "text", "text": text}] if text is not None else []
        return 200, {
            "id": "msg_local", "type": "message", "role": "assistant", "model": body.get("model", "m"), "content": content,
            "stop_reason": stop_reason, "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 50},
        }

    return respond


def openai_reply(text: str | None, finish_reason: str = "stop") -> Responder:
    def respond(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        return 200, {
            "id": "chatcmpl-local", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
        }

    return respond


def server_error(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return 500, {"type": "error", "error": {"type": "api_error", "message": "Internal server error"}}


# --- sessions ------------------------------------------------------------------------------


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


def anthropic_rows(turns: int = 2, result_chars: int = 1200) -> list[dict[str, Any]]:
    """Anthropic messages: per turn a user request, a tool call, its (long) result and an answer."""
    rows: list[dict[str, Any]] = []
    for t in range(turns):
        first = "Always run pytest before committing. " if t == 0 else ""
        rows += [
            {"role": "user", "content": f"{first}Turn {t}: fix the failing test in src/calc.py."},
            {"role": "assistant", "content": [
                {"type": "text", "text": f"Running the tests ({t})."},
                {"type": "tool_use", "id": f"toolu_{t}", "name": "bash", "input": {"command": "pytest -q"}},
            ]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{t}", "content": (
                f"FAILED tests/test_calc.py::test_add_{t} - AssertionError: assert -1 == 3\n" + f"line {t} of output\n" * (result_chars // 16)
            )}]},
            {"role": "assistant", "content": f"Turn {t} done: add() returned a - b; fixed to a + b."},
        ]
    return rows


def openai_rows(turns: int = 2, result_chars: int = 1200) -> list[dict[str, Any]]:
    """The same conversation as OpenAI chat messages (system message first)."""
    rows: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for t in range(turns):
        first = "Always run pytest before committing. " if t == 0 else ""
        rows += [
            {"role": "user", "content": f"{first}Turn {t}: fix the failing test in src/calc.py."},
            {"role": "assistant", "content": f"Running the tests ({t}).", "tool_calls": [
                {"id": f"call_{t}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "pytest -q"})}},
            ]},
            {"role": "tool", "tool_call_id": f"call_{t}", "content": (
                f"FAILED tests/test_calc.py::test_add_{t} - AssertionError: assert -1 == 3\n" + f"line {t} of output\n" * (result_chars // 16)
            )},
            {"role": "assistant", "content": f"Turn {t} done: add() returned a - b; fixed to a + b."},
        ]
    return rows


def request_for(messages: tuple[Message, ...], *, tools: list[dict[str, Any]] | None = None, previous: str | None = None) -> SummaryRequest:
    return SummaryRequest(
        head=messages, shrunk_head=shrink_messages(messages), previous_summary=previous, target_tokens=500,
        max_tokens=1000, system_text=SYSTEM, tools=tuple(tools or ()),
    )


@pytest.fixture
def anthropic_head(tmp_path) -> tuple[Message, ...]:
    return read_session(_write_jsonl(tmp_path / "anthropic.jsonl", anthropic_rows())).messages


@pytest.fixture
def openai_head(tmp_path) -> tuple[Message, ...]:
    return read_session(_write_jsonl(tmp_path / "openai.jsonl", openai_rows())).messages


def summarizer(api: str, server: LocalServer, **kwargs: Any) -> LLMSummarizer:
    base = server.base if api == "anthropic" else f"{server.base}/v1"
    return LLMSummarizer(api, "test-model", base_url=base, api_key="dummy-key", timeout=10, max_retries=0, **kwargs)  # type: ignore[arg-type]


def _first_is_tool_result(message: dict[str, Any]) -> bool:
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    return message["role"] == "tool" or any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks)


# --- success: cache-aligned request ------------------------------------------------------------


def test_llm_anthropic_success_sends_cache_aligned_request(server, anthropic_head):
    server.responder = anthropic_reply(f"  {SUMMARY}\n")
    summary = summarizer("anthropic", server)(request_for(anthropic_head, tools=ANTHROPIC_TOOLS))
    assert summary == SUMMARY
    [(path, body)] = server.received
    assert path == "/v1/messages" and body["model"] == "test-model" and body["max_tokens"] == 1000
    assert body["system"] == SYSTEM and body["tools"] == ANTHROPIC_TOOLS
    assert body["messages"][:-1] == anthropic_rows()  # the head exactly as sent before, in order
    last = body["messages"][-1]
    assert last["role"] == "user" and last["content"].startswith("Summarize the conversation above")
    assert "User instructions (still in force):" in last["content"] and "500 tokens" in last["content"]


def test_llm_openai_success_sends_cache_aligned_request(server, openai_head):
    server.responder = openai_reply(SUMMARY)
    summary = summarizer("openai", server)(request_for(openai_head, tools=OPENAI_TOOLS))
    assert summary == SUMMARY
    [(path, body)] = server.received
    assert path == "/v1/chat/completions" and body["model"] == "test-model" and body["max_completion_tokens"] == 1000
    assert body["tools"] == OPENAI_TOOLS
    assert body["messages"][0] == {"role": "system", "content": SYSTEM}
    assert body["messages"][1:-1] == openai_rows()[1:]
    assert body["messages"][-1]["role"] == "user" and "Summarize" in body["messages"][-1]["content"]


def test_llm_previous_summary_not_in_head_is_quoted_in_instruction(server, anthropic_head):
    server.responder = anthropic_reply(SUMMARY)
    summarizer("anthropic", server)(request_for(anthropic_head, previous="User instructions (still in force):\n- Never push to main."))
    assert "Never push to main." in server.received[0][1]["messages"][-1]["content"]


def test_llm_foreign_shape_head_is_converted_and_tools_synthesized(server, openai_head):
    """An OpenAI-chat head sent to Anthropic: tool_use/tool_result blocks, no 'tool' role, tools named."""
    server.responder = anthropic_reply(SUMMARY)
    summarizer("anthropic", server)(request_for(openai_head))
    body = server.received[0][1]
    assert all(m["role"] in ("user", "assistant") for m in body["messages"])
    assert body["messages"][1]["content"][1] == {"type": "tool_use", "id": "call_0", "name": "bash", "input": {"command": "pytest -q"}}
    assert body["messages"][2]["content"][0]["type"] == "tool_result" and body["messages"][2]["content"][0]["tool_use_id"] == "call_0"
    assert [t["name"] for t in body["tools"]] == ["bash"]


# --- failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("answer", ["", "   \n", None, "OK."])
def test_llm_empty_or_short_answer_raises_summary_too_short(server, anthropic_head, openai_head, api, answer):
    server.responder = anthropic_reply(answer) if api == "anthropic" else openai_reply(answer)
    head = anthropic_head if api == "anthropic" else openai_head
    with pytest.raises(SummaryTooShortError, match=f"{api} model test-model"):
        summarizer(api, server)(request_for(head))


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_llm_http_500_raises_compaction_error_without_retry(server, anthropic_head, openai_head, api):
    server.responder = server_error
    head = anthropic_head if api == "anthropic" else openai_head
    with pytest.raises(CompactionError, match="HTTP 500") as info:
        summarizer(api, server)(request_for(head))
    assert not isinstance(info.value, SummaryTooShortError) and len(server.received) == 1


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_llm_answer_cut_off_at_output_limit_raises(server, anthropic_head, openai_head, api):
    server.responder = anthropic_reply(SUMMARY, "max_tokens") if api == "anthropic" else openai_reply(SUMMARY, "length")
    head = anthropic_head if api == "anthropic" else openai_head
    with pytest.raises(CompactionError, match="cut off"):
        summarizer(api, server)(request_for(head))


def test_llm_connection_refused_raises_compaction_error(anthropic_head):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    llm = LLMSummarizer("anthropic", "m", base_url=f"http://127.0.0.1:{port}", api_key="k", timeout=5, max_retries=0)
    with pytest.raises(CompactionError, match="APIConnectionError"):
        llm(request_for(anthropic_head))


POLICY = "Refunds over 200 EUR need a supervisor ticket."


def _two_system_rows(turns: int = 2) -> list[dict[str, Any]]:
    """openai_rows with a second system message (shared case 20's shape)."""
    rows = openai_rows(turns)
    return [rows[0], {"role": "system", "content": POLICY}, *rows[1:]]


def _request_with_systems(tmp_path: Path) -> SummaryRequest:
    session = read_session(_write_jsonl(tmp_path / "two.jsonl", _two_system_rows()))
    return SummaryRequest(
        head=session.messages, shrunk_head=shrink_messages(session.messages), previous_summary=None, target_tokens=500,
        max_tokens=1000, system_text=session.system_text, system_messages=session.system_messages,
    )


def test_llm_openai_request_repeats_every_system_message_unmerged(server, tmp_path):
    server.responder = openai_reply(SUMMARY)
    summarizer("openai", server)(_request_with_systems(tmp_path))
    messages = server.received[0][1]["messages"]
    rows = _two_system_rows()
    assert messages[:2] == rows[:2]  # two system messages stay two, in order, unchanged
    assert messages[2:-1] == rows[2:]  # then the head as sent before
    assert messages[-1]["role"] == "user" and "Summarize" in messages[-1]["content"]


def test_llm_anthropic_request_keeps_several_system_messages_apart(server, tmp_path):
    server.responder = anthropic_reply(SUMMARY)
    summarizer("anthropic", server)(_request_with_systems(tmp_path))
    assert server.received[0][1]["system"] == [{"type": "text", "text": SYSTEM}, {"type": "text", "text": POLICY}]


def test_compact_cli_llm_openai_request_opens_with_both_system_messages(server, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from dp_compact.cli import app

    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    server.responder = openai_reply(SUMMARY)
    rows = _two_system_rows(turns=4)
    session = _write_jsonl(tmp_path / "s.jsonl", rows)
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, [
        "compact", str(session), "-o", str(out), "--keep", "4", "--summarizer", "llm", "--llm-api", "openai",
        "--llm-model", "gpt-4.1", "--llm-base-url", f"{server.base}/v1",
    ])
    assert result.exit_code == 0, result.output
    sent = server.received[0][1]["messages"]
    assert sent[:2] == rows[:2] and sent[2:-1] == rows[2:len(sent) - 1]
    assert "1,000,000-token window: the price database's window for gpt-4.1" in result.stderr
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert written[:2] == rows[:2]


# --- sizing ------------------------------------------------------------------------------------


def test_llm_summary_window_is_the_models_own():
    """Not a fixed size: the price database's window for the model asked, an explicit one winning."""
    assert summary_context_window("openai", "gpt-4.1")[0] == 1_000_000
    assert summary_context_window("openai", "gpt-4")[0] == 8_192
    assert summary_context_window("openai", "gpt-4o-mini")[0] == 128_000
    assert summary_context_window("anthropic", "claude-opus-4-6")[0] == 200_000  # 1M is opt-in (windows.CLAUDE_WINDOWS)
    assert summary_context_window("openai", "gpt-4", explicit=32_000) == (32_000, "given with the summarizer (--llm-context-window)")
    window, source = summary_context_window("openai", "local-model-x")
    assert window == DEFAULT_CONTEXT_WINDOWS["openai"] and "not in the price database" in source
    assert LLMSummarizer("openai", "gpt-4.1").context_window == 1_000_000
    assert LLMSummarizer("anthropic", "claude-sonnet-4", context_window=50_000).context_window == 50_000
    with pytest.raises(ValueError, match="> 0 tokens"):
        summary_context_window("openai", "gpt-4", explicit=0)


def test_llm_request_is_sized_for_the_models_window(server, tmp_path):
    """A head of ~12K tokens fits gpt-4.1's window as it is, but is cut down for gpt-4's 8,192 tokens."""
    rows = openai_rows(3, 16_000)
    head = read_session(_write_jsonl(tmp_path / "s.jsonl", rows)).messages
    server.responder = openai_reply(SUMMARY)
    for model in ("gpt-4.1", "gpt-4"):
        LLMSummarizer("openai", model, base_url=f"{server.base}/v1", api_key="k", timeout=10, max_retries=0)(request_for(head))
    (_, large), (_, small) = server.received
    large_tokens, small_tokens = server.received_tokens
    assert large["messages"][1:-1] == rows[1:]
    assert large_tokens > 8_192  # as received: gpt-4.1's request would not fit gpt-4's window
    assert small_tokens + small["max_completion_tokens"] <= 8_192  # what gpt-4 received fits its window



@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_llm_too_long_head_is_shrunk_to_fit(server, tmp_path, api):
    """Long tool results, few turns: the shrunk head fits, so every turn is sent, results as previews."""
    rows = anthropic_rows(3, 40_000) if api == "anthropic" else openai_rows(3, 40_000)
    head = read_session(_write_jsonl(tmp_path / "s.jsonl", rows)).messages
    server.responder = anthropic_reply(SUMMARY) if api == "anthropic" else openai_reply(SUMMARY)
    window = 8_000
    summarizer(api, server, context_window=window)(request_for(head))
    body = server.received[0][1]
    messages = body["messages"]
    assert server.received_tokens[0] + body.get("max_tokens", body.get("max_completion_tokens")) <= window  # as received
    sent = json.dumps(messages)
    assert all(f"Turn {t}: fix" in sent for t in range(3)) and len(sent) < 40_000
    results = [m["content"] for m in messages if m["role"] == "tool"]
    results += [b["content"] for m in messages if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result"]
    assert len(results) == 3 and all(len(json.dumps(r)) < 1_000 for r in results)  # previews, not 40,000 characters


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_llm_too_long_head_drops_oldest_turns_without_orphan_results(server, tmp_path, api):
    rows = anthropic_rows(30, 1_500) if api == "anthropic" else openai_rows(30, 1_500)
    head = read_session(_write_jsonl(tmp_path / "s.jsonl", rows)).messages
    server.responder = anthropic_reply(SUMMARY) if api == "anthropic" else openai_reply(SUMMARY)
    window = 6_000
    summarizer(api, server, context_window=window, tools=ANTHROPIC_TOOLS if api == "anthropic" else OPENAI_TOOLS)(request_for(head))
    body = server.received[0][1]
    messages = body["messages"]
    output = body.get("max_tokens", body.get("max_completion_tokens"))
    assert server.received_tokens[0] + output <= window  # the server's own count of what it received
    conversation = messages[1:-1] if api == "openai" else messages[:-1]
    assert conversation and not _first_is_tool_result(conversation[0]) and conversation[0]["role"] == "user"
    assert conversation[0]["content"].startswith("Turn ")  # a user turn opens what is sent
    assert "Turn 29: fix" in json.dumps(conversation) and "Turn 0: fix" not in json.dumps(conversation)
    assert "Always run pytest" not in json.dumps(conversation)
    sent_ids = [b["tool_use_id"] for m in conversation if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result"]
    sent_ids += [m["tool_call_id"] for m in conversation if m["role"] == "tool"]
    call_ids = json.dumps([m for m in conversation if m["role"] == "assistant"])
    assert sent_ids and all(i in call_ids for i in sent_ids)  # every result sent has its call sent
    assert messages[-1]["role"] == "user" and "Summarize" in messages[-1]["content"]


def test_llm_request_that_cannot_fit_raises_before_sending(server, anthropic_head):
    server.responder = anthropic_reply(SUMMARY)
    with pytest.raises(CompactionError, match="cannot fit"):
        summarizer("anthropic", server, context_window=600)(request_for(anthropic_head))
    assert server.received == []


def test_llm_empty_head_raises(server):
    with pytest.raises(CompactionError, match="empty"):
        summarizer("openai", server)(request_for(()))


def test_llm_unknown_api_rejected():
    with pytest.raises(ValueError, match="unknown api"):
        LLMSummarizer("gemini", "m")  # type: ignore[arg-type]


def test_llm_module_imports_no_sdk():
    code = "import sys, dp_compact, dp_compact.pipeline.llm; print([m for m in ('anthropic', 'openai') if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "[]"


def test_llm_single_long_turn_is_cut_at_an_assistant_message(server, tmp_path):
    """One user turn with a long tool loop: no turn start fits, so the request opens at an
    assistant message (after an 'omitted' user stub for Anthropic), never at a tool result."""
    rows = anthropic_rows(1, 1_500)
    for t in range(1, 40):
        rows[-1:] = [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{t}", "name": "bash", "input": {"command": f"step {t}"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{t}", "content": f"output of step {t}\n" * 60}]},
            {"role": "assistant", "content": "Loop finished."},
        ]
    head = read_session(_write_jsonl(tmp_path / "s.jsonl", rows)).messages
    server.responder = anthropic_reply(SUMMARY)
    summarizer("anthropic", server, context_window=5_000, tools=ANTHROPIC_TOOLS)(request_for(head))
    messages = server.received[0][1]["messages"]
    assert messages[0] == {"role": "user", "content": "[earlier messages omitted]"}
    assert messages[1]["role"] == "assistant" and messages[1]["content"][0]["type"] == "tool_use"
    assert "step 39" in json.dumps(messages) and "Turn 0: fix" not in json.dumps(messages)
    assert count_request_tokens(None, ANTHROPIC_TOOLS, messages) + 1000 <= 5_000


def test_llm_uses_a_given_sdk_client(server, anthropic_head):
    import anthropic

    server.responder = anthropic_reply(SUMMARY)
    with anthropic.Anthropic(base_url=server.base, api_key="dummy-key", max_retries=0, timeout=10) as client:
        llm = LLMSummarizer("anthropic", "given-client-model", client=client, timeout=10)
        assert llm(request_for(anthropic_head)) == SUMMARY
    assert server.received[0][1]["model"] == "given-client-model" and llm.name == "llm:anthropic:given-client-model"


# --- the command line ------------------------------------------------------------------------


def test_compact_cli_with_llm_summarizer_writes_the_servers_summary(server, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from dp_compact.cli import app

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    summary = ("The user wants the parser fixed without changing its public interface. Files touched: src/parse.py "
               "and tests/test_parse.py. The edit made the failing tests pass. Always run pytest before committing.")
    server.responder = anthropic_reply(summary)
    session = _write_jsonl(tmp_path / "s.jsonl", anthropic_rows(turns=4))
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, [
        "compact", str(session), "-o", str(out), "--keep", "4", "--summarizer", "llm", "--llm-api", "anthropic",
        "--llm-model", "claude-test", "--llm-base-url", server.base,
    ])
    assert result.exit_code == 0, result.output
    assert len(server.received) == 1 and server.received[0][0].endswith("/v1/messages")
    first = json.loads(out.read_text().splitlines()[0])
    text = first["content"] if isinstance(first["content"], str) else " ".join(b.get("text", "") for b in first["content"])
    assert "src/parse.py" in text and "[summary]" in text


def test_compact_cli_llm_failure_leaves_no_output(server, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from dp_compact.cli import app

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    server.responder = server_error
    session = _write_jsonl(tmp_path / "s.jsonl", anthropic_rows(turns=4))
    before = session.read_bytes()
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, [
        "compact", str(session), "-o", str(out), "--keep", "4", "--summarizer", "llm", "--llm-model", "m",
        "--llm-base-url", server.base,
    ])
    assert result.exit_code == 2 and "dp-compact:" in result.stderr
    assert not out.exists() and session.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if "out" in p.name] == []


def test_compact_cli_anthropic_without_a_key_is_one_line_and_sends_nothing(server, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from dp_compact.cli import app

    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    session = _write_jsonl(tmp_path / "s.jsonl", anthropic_rows(turns=4))
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, [
        "compact", str(session), "-o", str(out), "--keep", "4", "--summarizer", "llm", "--llm-api", "anthropic",
        "--llm-model", "claude-test", "--llm-base-url", server.base,
    ])
    assert result.exit_code == 2 and "no API key" in result.output and "Traceback" not in result.output
    assert not out.exists() and server.received == []
