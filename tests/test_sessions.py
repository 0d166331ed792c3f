"""Session readers (DESIGN §4): every real file in ../shared/sessions, and small inline examples
of each format and quirk described in ../shared/sessions/FORMATS.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dp_compact.errors import MalformedLineError, NotASessionError, UnknownFormatError
from dp_compact.sessions import READERS, Session, read_session
from dp_compact.sessions.source import read_source

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SESSIONS = SHARED / "sessions"
CASES = SHARED / "cases"

#: Tool results whose call the real file does not hold (records lost between 23:20 and 23:31):
#: cc_task43_develop.jsonl lines 243-248 answer tool_use ids that appear nowhere in the file.
ORPHANS = {"cc_task43_develop.jsonl": 4}


def _shared(path: Path) -> Path:
    if not path.exists():
        pytest.skip("../shared/sessions is absent")
    return path


def _real_files() -> list[Path]:
    if not SESSIONS.exists():
        return []
    return sorted(p for p in SESSIONS.rglob("*") if p.is_file() and p.suffix in {".json", ".jsonl", ".traj"} and p.name != "manifest.json")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write(tmp_path: Path, records: list[Any] | dict[str, Any], name: str = "s.jsonl") -> Path:
    path = tmp_path / name
    if isinstance(records, dict):
        path.write_text(json.dumps(records, indent=1), encoding="utf-8")
    else:
        path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


def _orphan_results(session: Session) -> list[str]:
    """Result call ids with no call in an earlier live message."""
    seen: set[str] = set()
    orphans = []
    for message in session.messages:
        orphans += [r.call_id for r in message.tool_results if r.call_id not in seen]
        seen.update(c.id for c in message.tool_calls)
    return orphans


# --------------------------------------------------------------------------- real files


@pytest.mark.parametrize("path", _real_files() or [SESSIONS / "absent"], ids=lambda p: p.name)
def test_read_session_real_file_is_well_formed(path: Path) -> None:
    _shared(path)
    if path.name.startswith("cline_ui_messages"):
        with pytest.raises(NotASessionError, match="api_conversation_history"):
            read_session(path)
        return
    session = read_session(path)
    assert session.messages
    assert {m.role for m in session.messages} <= {"user", "assistant", "tool"}
    assert len(_orphan_results(session)) == ORPHANS.get(path.name, 0)
    for message in session.messages:
        assert message.role == "tool" or not message.tool_results
        assert message.role == "assistant" or not message.tool_calls
    lines = [u.line for u in session.usage if u.line]
    assert lines == sorted(lines)
    assert session.user_turns >= 1
    assert session.llm_calls >= 1


def test_orphan_results_of_task43_truly_lack_their_calls() -> None:
    path = _shared(SESSIONS / "claude_code" / "cc_task43_develop.jsonl")
    orphans = _orphan_results(read_session(path))
    text = path.read_text(encoding="utf-8")
    for call_id in orphans:
        assert f'"id": "{call_id}"' not in text and f'"id":"{call_id}"' not in text


@pytest.mark.parametrize("name", ["cc_fundwise", "cc_posthog_dashboard_compact", "cc_privacy_x402", "cc_raze_hooks", "cc_task43_develop"])
def test_claude_code_usage_matches_raw_message_ids(name: str) -> None:
    path = _shared(SESSIONS / "claude_code" / f"{name}.jsonl")
    ids: dict[str, int] = {}
    last_prompt = 0
    for record in _lines(path):
        message = record.get("message") or {}
        usage = message.get("usage") or {}
        if record.get("type") != "assistant" or message.get("model") == "<synthetic>":
            continue
        prompt = sum(int(usage.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
        if prompt:
            ids[message["id"]] = prompt
            last_prompt = prompt
    session = read_session(path)
    assert len(session.usage) == len(ids) == session.llm_calls
    assert session.usage[-1].prompt_tokens == last_prompt


def test_claude_code_posthog_compaction_starts_live_at_summary() -> None:
    session = read_session(_shared(SESSIONS / "claude_code" / "cc_posthog_dashboard_compact.jsonl"))
    assert session.compactions == 1
    first = session.messages[0]
    assert first.role == "user" and first.line == 832
    assert first.text.startswith("This session is being continued from a previous conversation")
    assert session.user_turns == 15  # typed prompts only: 4 before, 11 after the compaction
    assert session.usage[-1].prompt_tokens == 89199


def test_claude_code_task43_streamed_tool_results_follow_their_call() -> None:
    session = read_session(_shared(SESSIONS / "claude_code" / "cc_task43_develop.jsonl"))
    assert session.user_turns == 10
    assert session.usage[-1].prompt_tokens == 258045
    for index, message in enumerate(session.messages):
        if message.role == "tool" and index and session.messages[index - 1].role == "assistant":
            calls = {c.id for c in session.messages[index - 1].tool_calls}
            assert {r.call_id for r in message.tool_results} <= calls


def test_claude_code_fundwise_result_written_before_its_call_is_moved_after_it() -> None:
    session = read_session(_shared(SESSIONS / "claude_code" / "cc_fundwise.jsonl"))
    index = next(i for i, m in enumerate(session.messages) if m.line == 227)
    assert session.messages[index].role == "tool"
    assert session.messages[index - 1].line == 228 and session.messages[index - 1].tool_calls


def test_case_14_split_response_gives_one_message_and_one_usage_per_id() -> None:
    session = read_session(_shared(CASES / "14-claude-code-split-response-usage" / "input.jsonl"))
    assert len(session.messages) == 10
    assert [u.prompt_tokens for u in session.usage] == [36723, 37961, 38372, 38760, 39112]
    assert session.user_turns == 2
    assert session.llm_calls == 5


def test_codex_pharma_two_compactions_and_deduplicated_token_counts() -> None:
    path = _shared(SESSIONS / "codex" / "codex_pharma_2compactions.jsonl")
    expected: list[int] = []
    previous = None
    for record in _lines(path):
        payload = record.get("payload") or {}
        if payload.get("type") != "token_count" or not payload.get("info"):
            continue
        key = json.dumps([payload["info"].get("total_token_usage"), payload["info"].get("last_token_usage")], sort_keys=True)
        if key != previous and payload["info"]["last_token_usage"]["input_tokens"]:
            expected.append(payload["info"]["last_token_usage"]["input_tokens"])
        previous = key
    session = read_session(path)
    assert session.compactions == 2
    assert [u.prompt_tokens for u in session.usage] == expected
    assert len(expected) == 348  # 715 token_count events: 1 null, 364 repeats, 2 zero
    assert session.usage[-1].prompt_tokens == 105475
    assert session.context_window == 258400 and session.window_source == "Codex's model_context_window"
    assert session.user_turns == 13  # the 13 event_msg/user_message prompts
    assert session.messages[0].role == "user" and session.messages[0].line == 1695  # replacement history
    summary = [m for m in session.messages if m.text.startswith("Another language model started")]
    assert len(summary) == 1


@pytest.mark.parametrize(("name", "calls", "last"), [("codex_fundwise_tui", 4, 44241), ("codex_meridianops_windows", 77, 226874), ("codex_raze", 18, 101627)])
def test_codex_usage_counts(name: str, calls: int, last: int) -> None:
    session = read_session(_shared(SESSIONS / "codex" / f"{name}.jsonl"))
    assert len(session.usage) == session.llm_calls == calls
    assert session.usage[-1].prompt_tokens == last
    assert session.system_text and not any("<permissions instructions>" in m.text for m in session.messages)


def test_openai_converted_file_two_compactions_live_starts_at_summary() -> None:
    session = read_session(_shared(SESSIONS / "openai_chat" / "oai_task393c91_converted.json"))
    assert session.compactions == 2
    assert session.messages[0].text.startswith("This session is being continued")
    assert session.model == "claude-sonnet-4-6"
    assert session.user_turns == 10  # 16 user messages - 2 summaries - 4 interruption markers


def test_sweagent_tool_call_ids_list_and_reused_ids() -> None:
    session = read_session(_shared(SESSIONS / "openai_chat" / "sweagent_marshmallow_fc.traj"))
    assert session.llm_calls == 13  # info.model_stats.api_calls
    assert session.user_turns == 1
    assert "autonomous programmer" in session.system_text
    ids = [c.id for m in session.messages for c in m.tool_calls]
    assert len(ids) == len(set(ids)) == 13
    assert all(m.role == "tool" for m in session.messages[2::2])


def test_miniswe_observations_become_tool_results() -> None:
    session = read_session(_shared(SESSIONS / "openai_chat" / "miniswe_github_issue.traj.json"))
    roles = [m.role for m in session.messages]
    assert roles == ["user"] + ["assistant", "tool"] * 10
    assert session.user_turns == 1
    assert session.messages[2].tool_results[0].text.startswith("<returncode>1</returncode>")


def test_atif_terminus_observations_linked_to_previous_agent_step() -> None:
    session = read_session(_shared(SESSIONS / "other" / "atif_terminus_hvac.json"))
    assert [m.role for m in session.messages] == ["user"] + ["assistant", "tool"] * 20 + ["assistant"]
    assert session.user_turns == 1 and not session.usage
    assert session.model == "claude-haiku-4-5-20251001"


def test_gemini_stream_live_conversation_is_the_last_run() -> None:
    session = read_session(_shared(SESSIONS / "other" / "gemini_cli_stream_figma.jsonl"))
    assert session.messages[0].line == 92 and session.messages[1].line == 94
    assert session.user_turns == 2 and not session.usage  # the last run's two prompts; the first run's two are another conversation
    assert session.llm_calls == sum(m.role == "assistant" for m in session.messages) == 28
    assert session.messages[-1].role == "assistant" and session.messages[-1].tool_calls  # pending call


# --------------------------------------------------------------------------- detection


def test_unknown_format_case_16_lists_supported_formats() -> None:
    path = _shared(CASES / "16-unknown-format-lines" / "input.jsonl")
    with pytest.raises(UnknownFormatError) as info:
        read_session(path)
    message = str(info.value)
    for name in ("input.jsonl", "anthropic", "openai", "claude_code", "codex"):
        assert name in message


def test_no_reader_accepts_case_16() -> None:
    source = read_source(_shared(CASES / "16-unknown-format-lines" / "input.jsonl"))
    assert not [r.FORMAT for r in READERS if r.sniff(source)]


def test_plain_anthropic_lines_are_left_to_the_anthropic_reader(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    assert read_session(path).format == "anthropic"


# --------------------------------------------------------------------------- Claude Code


def _cc(kind: str, uuid: str, parent: str | None, message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s", "message": message, **extra}


def _cc_asst(uuid: str, parent: str, mid: str, blocks: list[dict[str, Any]], out: int = 5, **usage: int) -> dict[str, Any]:
    numbers = {"input_tokens": 3, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 10, "output_tokens": out, **usage}
    return _cc("assistant", uuid, parent, {"id": mid, "role": "assistant", "model": "claude-x", "content": blocks, "usage": numbers})


def _use(call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": "ls"}}


def _result(call_id: str, content: Any = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content}


def test_claude_code_streamed_split_response_is_one_assistant_and_one_tool_message(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        {"type": "file-history-snapshot", "messageId": "x", "snapshot": {}},
        _cc("user", "u1", None, {"role": "user", "content": "list files twice"}),
        _cc_asst("a1", "u1", "msg_1", [{"type": "thinking", "thinking": "t", "signature": "sig"}], out=1),
        _cc_asst("a2", "a1", "msg_1", [_use("t1")], out=2),
        _cc("user", "r1", "a2", {"role": "user", "content": [_result("t1")]}),
        {"type": "progress", "uuid": "p1", "parentUuid": "r1", "data": {"type": "hook_progress"}},
        _cc_asst("a3", "r1", "msg_1", [_use("t2")], out=9),
        _cc("user", "r2", "a3", {"role": "user", "content": [_result("t2")]}),
        {"type": "queue-operation", "operation": "enqueue"},
        _cc_asst("a4", "r2", "msg_2", [{"type": "text", "text": "done"}], out=4, cache_read_input_tokens=300),
        {"type": "system", "subtype": "turn_duration", "uuid": "s1", "parentUuid": "a4", "durationMs": 1},
        {"type": "last-prompt", "lastPrompt": "x"},
    ])
    session = read_session(path)
    assert [m.role for m in session.messages] == ["user", "assistant", "tool", "assistant"]
    assistant, tool = session.messages[1], session.messages[2]
    assert [c.id for c in assistant.tool_calls] == ["t1", "t2"] and assistant.signed_thinking
    assert [b["type"] for b in assistant.raw["content"]] == ["thinking", "tool_use", "tool_use"]
    assert [r.call_id for r in tool.tool_results] == ["t1", "t2"] and tool.source_lines == 2
    assert [(u.prompt_tokens, u.output_tokens) for u in session.usage] == [(113, 9), (313, 4)]
    assert session.llm_calls == 2 and session.user_turns == 1


def test_claude_code_synthetic_api_error_is_dropped(tmp_path: Path) -> None:
    synthetic = _cc("assistant", "e1", "u1", {"id": "x", "role": "assistant", "model": "<synthetic>",
                                              "content": [{"type": "text", "text": "API Error: 529"}],
                                              "usage": {"input_tokens": 0, "output_tokens": 0}}, isApiErrorMessage=True)
    path = _write(tmp_path, [
        _cc("user", "u1", None, {"role": "user", "content": "go"}),
        synthetic,
        _cc_asst("a1", "e1", "msg_1", [{"type": "text", "text": "ok"}]),
    ])
    session = read_session(path)
    assert [m.text for m in session.messages] == ["go", "ok"]
    assert len(session.usage) == 1 and session.llm_calls == 1


def test_claude_code_compact_boundary_and_injected_user_messages(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        _cc("user", "u1", None, {"role": "user", "content": "first prompt"}),
        _cc_asst("a1", "u1", "msg_1", [{"type": "text", "text": "one"}]),
        _cc("user", "m1", "a1", {"role": "user", "content": [{"type": "text", "text": "Base directory for this skill"}]}, isMeta=True),
        {"type": "system", "subtype": "compact_boundary", "uuid": "b1", "parentUuid": None, "content": "Conversation compacted",
         "compactMetadata": {"trigger": "auto", "preTokens": 1}},
        _cc("user", "c1", "b1", {"role": "user", "content": "This session is being continued from a previous conversation ..."},
            isCompactSummary=True, isVisibleInTranscriptOnly=True),
        _cc("user", "n1", "c1", {"role": "user", "content": "<task-notification>\n<task-id>x</task-id>"}, origin={"kind": "task-notification"}),
        _cc("user", "u2", "n1", {"role": "user", "content": "second prompt"}),
        _cc_asst("a2", "u2", "msg_2", [{"type": "text", "text": "two"}]),
    ])
    session = read_session(path)
    assert session.compactions == 1
    assert [m.text[:13] for m in session.messages] == ["This session ", "<task-notific", "second prompt", "two"]
    assert session.user_turns == 2 and len(session.usage) == 2


def test_claude_code_assistant_line_without_message_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        _cc("user", "u1", None, {"role": "user", "content": "go"}),
        {"type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": "s"},
    ])
    with pytest.raises(MalformedLineError) as info:
        read_session(path)
    assert info.value.line == 2 and str(path) in str(info.value)
    assert read_session(path, lenient=True).skipped_lines == 1


def test_claude_code_images_in_tool_results_are_counted_not_copied(tmp_path: Path) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo" * 1000}}
    nested = [{"type": "text", "text": "screenshot"}, image, {"type": "search_result", "content": [image]}]
    path = _write(tmp_path, [
        _cc("user", "u1", None, {"role": "user", "content": "look"}),
        _cc_asst("a1", "u1", "msg_1", [_use("t1")]),
        _cc("user", "r1", "a1", {"role": "user", "content": [_result("t1", nested)]}),
    ])
    tool = read_session(path).messages[2]
    assert tool.images == 2
    assert "iVBOR" not in tool.tool_results[0].text and "screenshot" in tool.tool_results[0].text


# --------------------------------------------------------------------------- Codex


def _env(kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": "2026-01-01T00:00:00Z", "type": kind, "payload": payload}


def _token_count(total: int, last: int, cached: int = 0) -> dict[str, Any]:
    usage = {"input_tokens": last, "cached_input_tokens": cached, "output_tokens": 7}
    return _env("event_msg", {"type": "token_count", "info": {"total_token_usage": {"input_tokens": total},
                                                              "last_token_usage": usage, "model_context_window": 1000}})


def _msg(role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def test_codex_rollout_groups_items_dedupes_token_counts_and_compacts(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        _env("session_meta", {"id": "x", "base_instructions": {"text": "You are Codex."}}),
        _env("response_item", _msg("developer", "<permissions instructions>")),
        _env("response_item", _msg("user", "<environment_context>\n  <cwd>/x</cwd>")),
        _env("turn_context", {"model": "gpt-5"}),
        _env("response_item", _msg("user", "fix the bug")),
        _env("event_msg", {"type": "user_message", "message": "fix the bug"}),
        _env("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}], "encrypted_content": "gAAA"}),
        _env("response_item", _msg("assistant", "Looking.")),
        _env("response_item", {"type": "function_call", "name": "exec_command", "arguments": "{\"cmd\":\"ls\"}", "call_id": "c1"}),
        _env("response_item", {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch", "call_id": "c2"}),
        _token_count(100, 100, 40),
        _env("response_item", {"type": "function_call_output", "call_id": "c1", "output": "a.py"}),
        _env("event_msg", {"type": "exec_command_end", "call_id": "c1"}),
        _env("response_item", {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done"}),
        _token_count(100, 100, 40),
        _env("compacted", {"message": "sum", "replacement_history": [
            _msg("user", "fix the bug"),
            _msg("user", "Another language model started to solve this problem and produced a summary: ...")]}),
        _token_count(100, 0),
        _env("event_msg", {"type": "context_compacted"}),
        _env("response_item", _msg("assistant", "Continuing.")),
        _token_count(150, 50, 10),
        _env("world_state", {"anything": 1}),
    ])
    session = read_session(path)
    assert session.compactions == 1
    assert [m.role for m in session.messages] == ["user", "user", "assistant"]
    assert [(u.prompt_tokens, u.cache_read_tokens) for u in session.usage] == [(100, 40), (50, 10)]
    assert session.user_turns == 1 and session.model == "gpt-5" and session.context_window == 1000
    assert "You are Codex." in session.system_text and "<permissions instructions>" in session.system_text
    assert session.llm_calls == 2


def test_codex_parallel_calls_form_one_assistant_message(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        _env("session_meta", {"id": "x"}),
        _env("response_item", _msg("user", "go")),
        _env("response_item", {"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}),
        _env("response_item", {"type": "function_call", "name": "a", "arguments": "{}", "call_id": "c1"}),
        _env("response_item", {"type": "function_call", "name": "b", "arguments": "{}", "call_id": "c2"}),
        _token_count(10, 10),
        _env("response_item", {"type": "function_call_output", "call_id": "c1", "output": "1"}),
        _env("response_item", {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "2"}]}),
    ])
    session = read_session(path)
    assert [m.role for m in session.messages] == ["user", "assistant", "tool", "tool"]
    assistant = session.messages[1]
    assert [c.id for c in assistant.tool_calls] == ["c1", "c2"] and assistant.signed_thinking
    assert assistant.raw["tool_calls"][1]["function"]["name"] == "b"
    assert session.messages[3].tool_results[0].text == "2"


def test_codex_response_item_without_payload_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, [_env("session_meta", {"id": "x"}), {"timestamp": "t", "type": "response_item"}])
    with pytest.raises(MalformedLineError, match=r":2: "):
        read_session(path)


# --------------------------------------------------------------------------- OpenAI chat


def test_openai_tool_call_ids_list_and_boundary_marker(tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    path = _write(tmp_path, {"messages": [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "a", "tool_calls": [call]},
        {"role": "tool", "content": "out", "tool_call_ids": ["c1"]},
        {"role": "system", "content": "[compact_boundary] Conversation compacted"},
        {"role": "user", "content": "This session is being continued from a previous conversation. Summary: ..."},
        {"role": "user", "content": "next"},
    ]}, "conv.json")
    session = read_session(path)
    assert session.compactions == 1 and session.system_text == "sys"
    assert [m.text for m in session.messages] == [
        "This session is being continued from a previous conversation. Summary: ...", "next"]
    assert session.user_turns == 2


def test_openai_result_before_its_call_is_moved_after_it(tmp_path: Path) -> None:
    def call(i: str) -> dict[str, Any]:
        return {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    path = _write(tmp_path, [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "assistant", "content": None, "tool_calls": [call("b")]},
    ])
    session = read_session(path)
    assert [(m.role, m.text or (m.tool_results[0].text if m.tool_results else "")) for m in session.messages] == [
        ("user", "go"), ("assistant", ""), ("tool", "A"), ("assistant", ""), ("tool", "B")]
    assert not _orphan_results(session)


def test_openai_content_blocks_variant_with_duplicated_calls_and_token_counts(tmp_path: Path) -> None:
    tool_call = {"type": "tool_call", "tool_call_id": "c1", "name": "shell", "arguments": "{\"cmd\": \"ls\"}"}
    info = {"last_token_usage": {"input_tokens": 900, "cached_input_tokens": 800, "output_tokens": 5}, "total_token_usage": {"input_tokens": 900}}
    path = _write(tmp_path, {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "list"}], "_metadata": {"timestamp": "t"}},
            {"role": "assistant", "content": [{"type": "text", "text": "Listing."}, tool_call],
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\": \"ls\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "tool_output", "text": [{"type": "text", "text": "a.py"}]}]},
            {"role": "user", "content": "This session is being continued from a previous conversation ..."},
        ],
        "meta": {"token_counts": [{"_timestamp": "t", "info": info}, {"_timestamp": "t", "info": info},
                                  {"_timestamp": "u", "info": {**info, "total_token_usage": {"input_tokens": 1800}}}]},
    }, "held_out.json")
    session = read_session(path)
    assert session.format == "openai_chat" and session.compactions == 1
    assert [m.role for m in session.messages] == ["user"]  # the live conversation starts at the summary
    assert [u.prompt_tokens for u in session.usage] == [900, 900] and session.llm_calls == 2


def test_openai_held_out_variant_messages_before_compaction(tmp_path: Path) -> None:
    path = _write(tmp_path, {"messages": [
        {"role": "user", "content": "list"},
        {"role": "assistant", "content": [{"type": "text", "text": "Listing."},
                                          {"type": "tool_call", "tool_call_id": "c1", "name": "shell", "arguments": "{}"}],
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "tool_output", "text": "a.py"}]},
    ], "meta": {}}, "held_out.json")
    assistant, tool = read_session(path).messages[1:]
    assert assistant.text == "Listing." and [c.id for c in assistant.tool_calls] == ["c1"]
    assert tool.tool_results[0].text == "a.py"


def test_sweagent_older_history_observations_link_to_synthetic_calls(tmp_path: Path) -> None:
    path = _write(tmp_path, {"history": [
        {"role": "system", "content": "You are SWE-agent."},
        {"role": "user", "content": "Fix issue 1"},
        {"role": "assistant", "content": "Look.\n```\nls\n```", "action": "ls"},
        {"role": "user", "content": "a.py", "message_type": "observation"},
        {"role": "assistant", "content": "Done.\n```\nsubmit\n```"},
        {"role": "user", "content": "diff --git", "message_type": "observation"},
    ], "trajectory": [], "info": {"model_stats": {"api_calls": 2, "tokens_sent": 10}}}, "run.traj")
    session = read_session(path)
    assert [m.role for m in session.messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert session.messages[2].tool_results[0].call_id == session.messages[1].tool_calls[0].id
    assert session.user_turns == 1 and session.llm_calls == 2 and not session.usage


def test_openai_message_with_bad_tool_calls_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"role": "system", "content": "s"}, {"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": "oops"}])
    with pytest.raises(MalformedLineError) as info:
        read_session(path)
    assert info.value.line == 3


# --------------------------------------------------------------------------- Gemini CLI, ATIF


def test_gemini_stream_delta_chunks_and_parallel_results(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        {"type": "init", "session_id": "s1", "model": "gemini-x"},
        {"type": "message", "role": "user", "content": "build it"},
        {"type": "message", "role": "assistant", "content": "I will ", "delta": True},
        {"type": "message", "role": "assistant", "content": "read two files.", "delta": True},
        {"type": "tool_use", "tool_name": "read_file", "tool_id": "r1", "parameters": {"file_path": "a"}},
        {"type": "tool_use", "tool_name": "read_file", "tool_id": "r2", "parameters": {"file_path": "b"}},
        {"type": "tool_result", "tool_id": "r1", "status": "success", "output": "A"},
        {"type": "tool_result", "tool_id": "r2", "status": "error", "error": {"type": "x", "message": "missing"}},
        {"type": "tool_use", "tool_name": "write_file", "tool_id": "w1", "parameters": {}},
        {"type": "tool_result", "tool_id": "w1", "status": "success"},
        {"type": "message", "role": "assistant", "content": "Done", "delta": True},
        {"type": "result", "status": "success", "stats": {"total_tokens": 10, "tool_calls": 3}},
    ])
    session = read_session(path)
    assert [m.role for m in session.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert session.messages[1].text == "I will read two files."
    assert [r.is_error for r in session.messages[2].tool_results] == [False, True]
    assert session.messages[2].tool_results[1].text == "missing"
    assert not session.usage and session.llm_calls == 3 and session.model == "gemini-x"


def test_gemini_stream_restart_counts_turns_calls_and_compactions_of_the_last_run_only(tmp_path: Path) -> None:
    """An ``init`` with a new session_id starts another conversation: what the earlier run did
    (its turns, calls and a compaction) is no part of the live one's counts."""
    def run(session_id: str, turns: int, calls_per_turn: int) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = [{"type": "init", "session_id": session_id, "model": "gemini-x"}]
        for turn in range(turns):
            events.append({"type": "message", "role": "user", "content": f"task {turn}"})
            for call in range(calls_per_turn):
                call_id = f"{session_id}-{turn}-{call}"
                events.append({"type": "tool_use", "tool_name": "read_file", "tool_id": call_id, "parameters": {}})
                events.append({"type": "tool_result", "tool_id": call_id, "status": "success", "output": "x"})
            events.append({"type": "message", "role": "assistant", "content": "done"})
        return [*events, {"type": "result", "status": "success", "stats": {}}]

    summary = {"type": "message", "role": "user", "content": "This session is being continued from a previous conversation. Summary: ..."}
    path = _write(tmp_path, [*run("a", 3, 2), summary, *run("b", 2, 1)[1:]])
    assert read_session(path).compactions == 1  # one session id: the summary compacted it
    path = _write(tmp_path, [*run("a", 3, 2), summary, *run("b", 2, 1)])
    session = read_session(path)
    assert [m.kind for m in session.messages].count("prompt") == 2
    assert session.user_turns == 2 and session.compactions == 0
    assert session.llm_calls == sum(m.role == "assistant" for m in session.messages) == 4
    assert len(session.history) > len(session.messages)  # the earlier run is kept in the history


def test_gemini_saved_chat_calls_results_and_usage(tmp_path: Path) -> None:
    call = {"id": "c1", "name": "run_shell_command", "args": {"command": "ls"}, "status": "success",
            "result": [{"functionResponse": {"id": "c1", "name": "run_shell_command", "response": {"output": "a.py"}}}]}
    path = _write(tmp_path, {"sessionId": "s", "projectHash": "h", "messages": [
        {"id": "1", "type": "user", "content": "list"},
        {"id": "2", "type": "gemini", "content": "", "toolCalls": [call], "thoughts": [{"subject": "Plan", "description": "ls"}],
         "tokens": {"input": 1200, "output": 10, "cached": 1000, "thoughts": 5}, "model": "gemini-2.5-pro"},
        {"id": "3", "type": "info", "content": "ignored"},
        {"id": "4", "type": "gemini", "content": "One file.", "tokens": {"input": 1300, "output": 4, "cached": 1200}},
    ]}, "chat.json")
    session = read_session(path)
    assert [m.role for m in session.messages] == ["user", "assistant", "tool", "assistant"]
    assert session.messages[2].tool_results[0].text == "a.py" and session.messages[1].thinking == "Plan: ls"
    assert [(u.prompt_tokens, u.cache_read_tokens, u.output_tokens) for u in session.usage] == [(1200, 1000, 15), (1300, 1200, 4)]


def test_atif_structured_steps_with_metrics(tmp_path: Path) -> None:
    path = _write(tmp_path, {"schema_version": "ATIF-v1.4", "session_id": "x", "agent": {"name": "a", "version": "1", "model_name": "m"}, "steps": [
        {"step_id": 1, "source": "system", "message": "You are an agent."},
        {"step_id": 2, "source": "user", "message": "price of GOOGL?"},
        {"step_id": 3, "source": "agent", "message": "Searching.", "reasoning_content": "two calls",
         "tool_calls": [{"tool_call_id": "p1", "function_name": "search", "arguments": {"q": "price"}},
                        {"tool_call_id": "v1", "function_name": "search", "arguments": {"q": "volume"}}],
         "observation": {"results": [{"source_call_id": "p1", "content": "$185"}, {"source_call_id": "v1", "content": "1.5M"},
                                     {"content": "note without call"}]},
         "metrics": {"prompt_tokens": 520, "completion_tokens": 80, "cached_tokens": 200}},
        {"step_id": 4, "source": "agent", "message": "GOOGL is $185.", "metrics": {"prompt_tokens": 600, "completion_tokens": 44}},
        {"step_id": 5, "source": "user", "message": "thanks"},
    ]}, "traj.json")
    session = read_session(path)
    assert [m.role for m in session.messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert len(session.messages[1].tool_calls) == 3 and len(session.messages[2].tool_results) == 3
    assert [u.prompt_tokens for u in session.usage] == [520, 600] and session.user_turns == 2
    assert session.system_text == "You are an agent." and session.model == "m"


def test_atif_step_with_bad_tool_calls_is_malformed(tmp_path: Path) -> None:
    path = _write(tmp_path, {"schema_version": "ATIF-v1.6", "steps": [{"step_id": 1, "source": "agent", "message": "", "tool_calls": "x"}]}, "t.json")
    with pytest.raises(MalformedLineError, match="step 1"):
        read_session(path)


def test_openai_jsonl_record_that_is_not_a_message_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"role": "system", "content": "s"}, {"role": "user", "content": "x"}, {"kind": "usage", "n": 1},
                             {"role": "assistant", "content": "y"}])
    with pytest.raises(MalformedLineError) as info:
        read_session(path)
    assert info.value.line == 3
    session = read_session(path, lenient=True)
    assert session.skipped_lines == 1 and [m.text for m in session.messages] == ["x", "y"]


def test_codex_compacted_without_replacement_history_starts_live_at_summary(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        _env("session_meta", {"id": "x"}),
        _env("response_item", _msg("user", "first")),
        _env("response_item", _msg("assistant", "ok")),
        _env("compacted", {"message": "Summary of the work so far."}),
        _env("response_item", _msg("user", "second")),
    ])
    session = read_session(path)
    assert [m.text for m in session.messages] == ["Summary of the work so far.", "second"]
    assert session.compactions == 1 and session.user_turns == 2


def test_claude_code_record_written_before_its_parent_follows_the_parent(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        _cc("user", "u1", None, {"role": "user", "content": "go"}),
        _cc("user", "r1", "a1", {"role": "user", "content": [_result("t1")]}, sourceToolAssistantUUID="a1"),
        _cc_asst("a1", "u1", "msg_1", [_use("t1")]),
        _cc_asst("a2", "r1", "msg_2", [{"type": "text", "text": "done"}]),
    ])
    session = read_session(path)
    assert [(m.role, m.line) for m in session.messages] == [("user", 1), ("assistant", 3), ("tool", 2), ("assistant", 4)]


# --------------------------------------------------------------------------- recorded compactions


def test_claude_code_posthog_records_its_auto_compaction() -> None:
    session = read_session(_shared(SESSIONS / "claude_code" / "cc_posthog_dashboard_compact.jsonl"))
    (record,) = session.compaction_records
    assert (record.tool, record.line, record.trigger, record.pre_tokens) == ("claude-code", 831, "auto", 167_766)
    assert record.summary_text == session.messages[0].text  # the isCompactSummary message on line 832
    assert record.summary_text.startswith("This session is being continued") and len(record.summary_text) == 11_188


def test_codex_pharma_records_two_compactions_with_summaries() -> None:
    session = read_session(_shared(SESSIONS / "codex" / "codex_pharma_2compactions.jsonl"))
    assert [(r.tool, r.line, r.trigger, r.pre_tokens) for r in session.compaction_records] == [
        ("codex", 783, None, 211_015), ("codex", 1695, None, 210_138)]  # last non-zero token_count before each
    assert all(r.summary_text.startswith("Another language model started") for r in session.compaction_records)
    assert session.compactions == 2  # the context_compacted events belong to their compacted lines


def test_openai_converted_claude_code_file_records_two_claude_code_compactions() -> None:
    session = read_session(_shared(SESSIONS / "openai_chat" / "oai_task393c91_converted.json"))
    assert [r.tool for r in session.compaction_records] == ["claude-code", "claude-code"]
    assert all(r.summary_text.startswith("This session is being continued") for r in session.compaction_records)
    assert session.compaction_records[-1].summary_text == session.messages[0].text
    assert session.compactions == 2


@pytest.mark.parametrize("path", _real_files() or [SESSIONS / "absent"], ids=lambda p: p.name)
def test_real_file_records_one_compaction_per_marker(path: Path) -> None:
    _shared(path)
    if path.name.startswith("cline_ui_messages"):
        return
    session = read_session(path)
    assert len(session.compaction_records) == session.compactions


def test_claude_code_boundary_metadata_and_summary_become_a_record(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        _cc("user", "u1", None, {"role": "user", "content": "first prompt"}),
        _cc_asst("a1", "u1", "msg_1", [{"type": "text", "text": "one"}]),
        {"type": "system", "subtype": "compact_boundary", "uuid": "b1", "parentUuid": None, "content": "Conversation compacted",
         "compactMetadata": {"trigger": "manual", "preTokens": 1234, "postTokens": 99}},
        _cc("user", "c1", "b1", {"role": "user", "content": [{"type": "text", "text": "This session is being continued ... Summary: A"}]},
            isCompactSummary=True),
        _cc("user", "u2", "c1", {"role": "user", "content": "second prompt"}),
        {"type": "system", "subtype": "compact_boundary", "uuid": "b2", "parentUuid": None, "content": "Conversation compacted"},
        _cc("user", "u3", "b2", {"role": "user", "content": "not a summary"}),
    ])
    session = read_session(path)
    first, second = session.compaction_records
    assert (first.tool, first.line, first.trigger, first.pre_tokens, first.summary_text) == (
        "claude-code", 3, "manual", 1234, "This session is being continued ... Summary: A")
    assert (second.line, second.trigger, second.pre_tokens, second.summary_text) == (6, None, None, "")
    assert session.compactions == 2


def test_codex_compacted_and_context_compacted_are_one_record_a_lone_event_another(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        _env("session_meta", {"id": "x"}),
        _env("response_item", _msg("user", "go")),
        _env("response_item", _msg("assistant", "ok")),
        _token_count(100, 900),
        _env("compacted", {"message": "Summary one."}),
        _token_count(100, 0),
        _env("event_msg", {"type": "context_compacted"}),
        _env("response_item", _msg("assistant", "more")),
        _token_count(300, 700),
        _env("event_msg", {"type": "context_compacted"}),  # no compacted line of its own
    ])
    session = read_session(path)
    assert [(r.tool, r.line, r.pre_tokens, r.summary_text) for r in session.compaction_records] == [
        ("codex", 5, 900, "Summary one."), ("codex", 10, 700, "")]
    assert session.compactions == 1  # Session.compactions counts compacted lines only, as before


def test_codex_context_compacted_before_its_compacted_line_is_one_record(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        _env("session_meta", {"id": "x"}),
        _env("response_item", _msg("user", "go")),
        _token_count(100, 500),
        _env("event_msg", {"type": "context_compacted"}),
        _env("compacted", {"message": "Summary."}),
    ])
    (record,) = read_session(path).compaction_records
    assert (record.line, record.pre_tokens, record.summary_text) == (5, 500, "Summary.")


@pytest.mark.parametrize(("text", "tool"), [
    ("This session is being continued from a previous conversation. Summary: x", "claude-code"),
    ("Another language model started to solve this problem and produced a summary: x", "codex"),
    ("[summary] (3 messages) were compacted", "other"),
])
def test_openai_summary_message_without_boundary_records_the_tool_its_text_names(tmp_path: Path, text: str, tool: str) -> None:
    path = _write(tmp_path, [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"},
                             {"role": "assistant", "content": "a"}, {"role": "user", "content": text}])
    (record,) = read_session(path).compaction_records
    assert (record.tool, record.line, record.summary_text) == (tool, 4, text)


def test_openai_boundary_marker_is_a_claude_code_record_with_the_next_summary(tmp_path: Path) -> None:
    path = _write(tmp_path, {"messages": [
        {"role": "user", "content": "task"},
        {"role": "system", "content": "[compact_boundary] Conversation compacted"},
        {"role": "user", "content": "[summary] written by some converter"},
        {"role": "system", "content": "[compact_boundary] Conversation compacted"},
        {"role": "user", "content": "next"},
    ]}, "conv.json")
    session = read_session(path)
    assert [(r.tool, r.summary_text) for r in session.compaction_records] == [
        ("claude-code", "[summary] written by some converter"), ("claude-code", "")]
    assert session.compactions == 2


def test_anthropic_summary_markers_are_recorded(tmp_path: Path) -> None:
    path = _write(tmp_path, [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "This session is being continued from a previous conversation. Summary: x"},
        {"role": "assistant", "content": "b"},
    ])
    session = read_session(path)
    assert [(r.tool, r.line) for r in session.compaction_records] == [("claude-code", 3)] and session.compactions == 1


def test_codex_compacted_without_message_takes_the_summary_of_its_replacement_history(tmp_path: Path) -> None:
    summary = "Another language model started to solve this problem and produced a summary: done X."
    path = _write(tmp_path, [
        _env("session_meta", {"id": "x"}),
        _env("response_item", _msg("user", "go")),
        _env("compacted", {"message": "", "replacement_history": [_msg("user", "go"), _msg("user", summary)]}),
    ])
    (record,) = read_session(path).compaction_records
    assert (record.line, record.pre_tokens, record.summary_text) == (3, None, summary)


# --------------------------------------------------------------------------- Anthropic: user turns after a tool call


def _search_round(text: str, n: int) -> dict[str, Any]:
    """An assistant message that ran web_search on the server: call and result in the one message."""
    call_id = f"srvtoolu_{n:02d}"
    return {"role": "assistant", "content": [
        {"type": "text", "text": text},
        {"type": "server_tool_use", "id": call_id, "name": "web_search", "input": {"query": "python 3.9 end of life"}},
        {"type": "web_search_tool_result", "tool_use_id": call_id, "content": [
            {"type": "web_search_result", "url": "https://devguide.python.org/versions/", "title": "Status", "encrypted_content": "Eo8C"}]},
        {"type": "text", "text": "3.9 is end of life."},
    ]}


def _client_round(call_id: str, name: str = "Edit") -> list[dict[str, Any]]:
    return [
        {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": name, "input": {"file_path": "Dockerfile"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "updated"}]},
    ]


@pytest.mark.parametrize("typed", [
    "Move us to 3.12 and keep the image tag names.",
    [{"type": "text", "text": "Move us to 3.12 and keep the image tag names."}],
], ids=["string", "text-blocks"])
def test_anthropic_user_message_after_server_tool_round_is_a_user_turn(tmp_path: Path, typed: Any) -> None:
    path = _write(tmp_path, [
        {"role": "user", "content": "Is 3.9 still supported?"},
        _search_round("Let me check.", 1),
        {"role": "user", "content": typed},
        *_client_round("toolu_01"),
        _search_round("Checking psycopg2 wheels.", 2),
        {"role": "user", "content": "Good. Update the CI matrix too."},
        {"role": "assistant", "content": "Done."},
    ])
    session = read_session(path)
    assert [m.role for m in session.messages] == ["user", "assistant", "user", "assistant", "tool", "assistant", "user", "assistant"]
    assert [i for i, m in enumerate(session.messages) if m.is_user_turn] == [0, 2, 6]
    assert session.user_turns == 3
    assert session.messages[1].tool_calls[0].id == "srvtoolu_01" and not session.messages[2].tool_results


def test_anthropic_user_message_after_interrupted_call_is_a_user_turn(tmp_path: Path) -> None:
    """A tool_use nothing answers, then a typed message: the person interrupted the call."""
    path = _write(tmp_path, [
        {"role": "user", "content": "Read the Dockerfile."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_a", "name": "Read", "input": {"file_path": "Dockerfile"}}]},
        {"role": "user", "content": [{"type": "text", "text": "Stop, read requirements.txt instead."}]},
        {"role": "assistant", "content": "Reading requirements.txt."},
    ])
    session = read_session(path)
    assert [m.role for m in session.messages] == ["user", "assistant", "user", "assistant"]
    assert session.user_turns == 2


def test_anthropic_cline_result_is_linked_by_position(tmp_path: Path) -> None:
    """Cline's API history answers a tool_use with a plain user message opening '[<tool> ...] Result:'."""
    path = _write(tmp_path, [
        {"role": "user", "content": [{"type": "text", "text": "<task>Fix the card game.</task>"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "A.cs"}}]},
        {"role": "user", "content": [{"type": "text", "text": "[read_file for 'A.cs'] Result:\nclass A {}"},
                                     {"type": "text", "text": "<environment_details>...</environment_details>"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "attempt_completion", "input": {"result": "done"}}]},
        {"role": "user", "content": [{"type": "text", "text": "[attempt_completion] Result:\nThe user has provided feedback."}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_3", "name": "read_file", "input": {"path": "B.cs"}}]},
        {"role": "user", "content": [{"type": "text", "text": "Never mind B.cs; look at C.cs."}]},
    ])
    session = read_session(path)
    assert [m.role for m in session.messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant", "user"]
    assert [r.call_id for r in session.messages[2].tool_results] == ["toolu_1"]
    assert session.messages[2].tool_results[0].text.startswith("[read_file for 'A.cs'] Result:")
    assert session.user_turns == 2


def test_anthropic_real_cline_history_links_every_result_by_position() -> None:
    session = read_session(_shared(SESSIONS / "anthropic_messages" / "cline_api_history_cardgame.jsonl"))
    after_call = [b for a, b in zip(session.messages, session.messages[1:]) if a.tool_calls]
    assert after_call and all(m.role == "tool" for m in after_call)
    assert session.user_turns == 1 and not _orphan_results(session)


_ID_KEYS = ("type", "role", "id", "name", "tool_use_id", "tool_call_id", "call_id", "subtype")


def _set_everywhere(value: Any, key: str, new: Any) -> int:
    """Set ``key`` to ``new`` in every object nested in ``value``; how many were set."""
    count = 0
    if isinstance(value, dict):
        if key in value:
            value[key], count = new, 1
        return count + sum(_set_everywhere(v, key, new) for v in value.values())
    if isinstance(value, list):
        return sum(_set_everywhere(v, key, new) for v in value)
    return 0


@pytest.mark.parametrize("path", _real_files() or [SESSIONS / "absent"], ids=lambda p: p.name)
@pytest.mark.slow
def test_a_type_or_id_that_is_not_a_string_is_read_or_named_never_a_crash(path: Path, tmp_path: Path) -> None:
    """A block type, role or call id written as a list or an object (not hashable) in one line of
    a real transcript: the file is read (the value names nothing), or the error names the file
    and line; never a TypeError from inside a reader."""
    import orjson

    from dp_compact import api
    from dp_compact.errors import SessionError
    from dp_compact.settings import Settings

    _shared(path)
    data = path.read_bytes()
    lines = data.splitlines()
    jsonl = len(lines) > 1 and lines[0].lstrip().startswith(b"{") and lines[0].rstrip().endswith(b"}")
    tried = 0
    for number, key in enumerate(_ID_KEYS):
        bad: Any = [1] if number % 2 else {"a": 1}
        if jsonl:  # the middle line holding the key
            holding = [i for i, line in enumerate(lines) if b'"' + key.encode() + b'"' in line]
            if not holding:
                continue
            at = holding[len(holding) // 2]
            value = orjson.loads(lines[at])
            if not _set_everywhere(value, key, bad):
                continue
            text = b"\n".join([*lines[:at], orjson.dumps(value), *lines[at + 1 :]]) + b"\n"
        else:
            value = orjson.loads(data)
            if not _set_everywhere(value, key, bad):
                continue
            text = orjson.dumps(value)
        changed = tmp_path / f"{key}{path.suffix}"
        changed.write_bytes(text)
        tried += 1
        try:
            session = read_session(changed, raw_json=True)
            api.plan_session(session, Settings(), use_cache=False)
        except SessionError as exc:
            assert str(changed) in str(exc)
    assert tried
