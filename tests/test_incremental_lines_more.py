"""dp_compact.hot.openai_lines and dp_compact.hot.gemini_lines: the kept state of an OpenAI chat
JSONL file or a Gemini CLI stream-json log gives what a whole read gives, and the CLI's output."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from dp_compact.hot import main as hot
from dp_compact.hot.lines import (
    INCREMENTAL_FORMATS,
    ChatState,
    GeminiState,
    LinesState,
    read_grown,
    read_grown_any,
    read_grown_chat,
    read_grown_gemini,
)
from dp_compact.hot.transcript import NotIncremental
from dp_compact.sessions import read_session
from dp_compact.sessions.source import SNIFF_RECORDS
from tests.conftest import CASES, SESSIONS, need
from tests.hot_helpers import run_in_process
from tests.test_incremental import _kept_states


def _format_of(path: Path) -> str | None:
    try:
        return read_session(path, raw_json=True).format
    except ValueError:
        return None


def _jsonl(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.glob(pattern)) if folder.exists() else []


#: Shared JSONL files of each format: the sessions, and the regression cases' inputs.
CHAT = [p for p in [*_jsonl(SESSIONS / "openai_chat", "*.jsonl"), *_jsonl(CASES, "*/input.jsonl")] if _format_of(p) == "openai_chat"]
GEMINI = [p for p in _jsonl(SESSIONS / "other", "gemini_cli_stream*.jsonl") if _format_of(p) == "gemini_cli"]


def _ids(path: Path) -> str:
    return path.name if path.name != "input.jsonl" else path.parent.name


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _whole(path: Path):
    """The whole read, or None when a whole read raises (a few records are not yet a session)."""
    try:
        return read_session(path, raw_json=True)
    except ValueError:
        return None


def _sweep(lines: list[bytes], copy: Path, read) -> int:
    """Append ``lines`` to ``copy`` one at a time; after each, ``read`` from the kept state (from
    nothing until a state is kept) gives the whole read's session, and raises NotIncremental where
    a whole read raises; so does half of the next line, and the next line without its line break.
    Returns the appends read from a kept state."""
    kept, continued = None, 0
    for step in range(1, len(lines) + 1):
        data = b"".join(lines[:step])
        copy.write_bytes(data)
        whole = _whole(copy)
        if whole is None:
            with pytest.raises(NotIncremental):
                read(str(copy), data, pickle.loads(kept) if kept else None)
            continue
        session, new = read(str(copy), data, pickle.loads(kept) if kept else None)  # never refused once it reads
        assert session == whole, f"{copy.name}: {step} lines"
        continued += kept is not None
        kept = new
        if step < len(lines):
            for more in (lines[step][: len(lines[step]) // 2], lines[step].rstrip(b"\r\n")):
                copy.write_bytes(data + more)
                assert read(str(copy), data + more, pickle.loads(kept))[0] == _whole(copy), f"{copy.name}: {step} lines and {more[:20]!r}"
    return continued


def test_the_new_formats_are_continued() -> None:
    assert {"openai_chat", "gemini_cli"} <= INCREMENTAL_FORMATS


@pytest.mark.parametrize("source", CHAT, ids=_ids)
def test_every_append_of_a_shared_openai_chat_file(source: Path, tmp_path: Path) -> None:
    lines = _lines(source)
    assert _sweep(lines, tmp_path / source.name, read_grown_chat) == len(lines) - 1
    assert _sweep(lines, tmp_path / "any.jsonl", read_grown_any) == len(lines) - 1


@pytest.mark.parametrize("source", GEMINI, ids=_ids)
def test_every_append_of_a_shared_gemini_stream(source: Path, tmp_path: Path) -> None:
    lines = _lines(source)
    assert _sweep(lines, tmp_path / source.name, read_grown_gemini) > len(lines) - 3
    assert _sweep(lines, tmp_path / "any.jsonl", read_grown_any) > len(lines) - 3


def test_shared_sessions_hold_both_formats() -> None:
    need(SESSIONS)
    assert any(p.parent.name == "openai_chat" for p in CHAT) and GEMINI


@pytest.mark.parametrize("source", [*CHAT[:2], *GEMINI], ids=_ids)
def test_the_state_object_is_the_kept_state(source: Path, tmp_path: Path) -> None:
    """The state read in place (as the plan server keeps it in memory) gives what its pickle gives,
    a last line without a line break (read into a copy) included."""
    copy, state, before = tmp_path / source.name, None, b""
    for step, line in enumerate(_lines(source)[:80], 1):
        for text in (before + line[:10], before + line.rstrip(b"\n"), before + line):  # half, no line break, whole
            copy.write_bytes(text)
            whole = _whole(copy)
            if whole is None or state is None:
                try:
                    session, kept = read_grown_any(str(copy), text, None)
                except NotIncremental:
                    continue
                assert session == whole
                state = pickle.loads(kept) if text.endswith(b"\n") else None
                continue
            assert read_grown_any(str(copy), text, state)[0] == whole, step
        before += line


def _chat(*values: dict) -> bytes:
    return b"".join(json.dumps(v).encode() + b"\n" for v in values)


SYSTEM = {"role": "system", "content": "be brief"}
USER = {"role": "user", "content": "hi"}
CALL = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "ok"}


@pytest.mark.parametrize("more", [
    {"type": "user", "uuid": "u", "parentUuid": None, "message": {"role": "user", "content": "hi"}, "role": "user", "content": "x"},
    {"type": "response_item", "payload": {}, "role": "user", "content": "x"},  # a Codex envelope
    {"type": "tool_use", "tool_id": "t", "role": "assistant", "content": "x"},  # a Gemini CLI stream event
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},  # an Anthropic block
    {"role": "user", "content": 7},  # breaks the reader's rules
    {"type": "say", "ts": 1, "text": "hi"},  # not a message
    [1, 2],
])
def test_openai_chat_refusals(more, tmp_path: Path) -> None:
    whole, _ = _refused(read_grown_chat, ChatState, tmp_path / "chat.jsonl", _chat(SYSTEM, USER, CALL, RESULT), more)
    assert whole is None or whole.format != "openai_chat" or whole.skipped_lines


def _refused(read: Any, state_type: type, copy: Path, data: bytes, more: Any) -> tuple[Any, bytes]:
    """``read`` keeps a ``state_type`` state of ``data`` (the whole read's session), then refuses to continue
    it past the record ``more`` (NotIncremental); the whole read of the grown file (None when it fails)
    and the state kept of ``data``, pickled."""
    copy.write_bytes(data)
    session, kept = read(str(copy), data, None)
    assert session == _whole(copy) and type(pickle.loads(kept)) is state_type
    grown = data + json.dumps(more).encode() + b"\n"
    copy.write_bytes(grown)
    with pytest.raises(NotIncremental):
        read(str(copy), grown, pickle.loads(kept))
    return _whole(copy), kept


@pytest.mark.parametrize(("text", "document"), [
    (_chat({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}), False),  # no OpenAI-only trait: Anthropic messages
    (b"[" + _chat(SYSTEM, USER).replace(b"\n", b",")[:-1] + b"]\n", True),  # a JSON array
    (json.dumps({"messages": [SYSTEM, USER]}, indent=1).encode(), True),
    (json.dumps({"messages": [SYSTEM, USER]}).encode() + b"\n", True),  # one line: the document written without indent
    (_chat({"role": "user", "content": "hi", "type": "say", "ts": 1}, {"role": "system", "content": "x", "type": "ask", "ts": 2}), False),  # Cline UI entries
    (_chat(SYSTEM)[:-5], False),  # no complete line
    (b"", False),
])
def test_what_is_not_read_as_openai_chat_incrementally(text: bytes, document: bool, tmp_path: Path) -> None:
    copy = tmp_path / "f.jsonl"
    copy.write_bytes(text)
    whole = _whole(copy)
    assert (whole is not None and whole.format == "openai_chat") == document  # a document is read whole each time
    with pytest.raises(NotIncremental):
        read_grown_chat(str(copy), text, None)


def test_an_openai_only_key_makes_a_plain_file_openai_chat_from_then_on(tmp_path: Path) -> None:
    copy = tmp_path / "chat.jsonl"
    plain = _chat(USER, {"role": "assistant", "content": "hello"})
    copy.write_bytes(plain)
    session, kept = read_grown_any(str(copy), plain, None)
    assert session.format == "anthropic" and type(pickle.loads(kept)) is LinesState
    grown = plain + _chat(CALL, RESULT)
    copy.write_bytes(grown)
    with pytest.raises(NotIncremental):  # the Anthropic state cannot continue: read anew as OpenAI chat
        read_grown_any(str(copy), grown, pickle.loads(kept))
    session, kept = read_grown_any(str(copy), grown, None)
    assert session == _whole(copy) and session.format == "openai_chat" and type(pickle.loads(kept)) is ChatState
    more = grown + _chat(USER)
    copy.write_bytes(more)
    assert read_grown_any(str(copy), more, pickle.loads(kept))[0] == _whole(copy)


def test_an_openai_only_key_after_the_first_records_is_found_from_nothing(tmp_path: Path) -> None:
    copy = tmp_path / "chat.jsonl"
    plain = [USER, {"role": "assistant", "content": "hello"}] * (SNIFF_RECORDS // 2)
    data = _chat(*plain, SYSTEM)
    copy.write_bytes(data)
    assert _whole(copy).format == "openai_chat"
    session, kept = read_grown_any(str(copy), data, None)  # the first records read as Anthropic messages
    assert session == _whole(copy) and type(pickle.loads(kept)) is ChatState


def test_an_action_trajectory_is_linked_as_a_whole_read_links_it(tmp_path: Path) -> None:
    """mini-swe-agent's JSONL: no tool calls, observations as user messages after a fenced action."""
    copy = tmp_path / "traj.jsonl"
    lines = _chat(SYSTEM, {"role": "user", "content": "fix it"}, {"role": "assistant", "content": "look"},
                  {"role": "user", "content": "what?"}, {"role": "assistant", "content": "```mswea_bash_command\nls\n```"},
                  {"role": "user", "content": "<returncode>0</returncode>"}, CALL, RESULT).splitlines(keepends=True)
    assert _sweep(lines, copy, read_grown_chat) == len(lines) - 1


def test_a_rewrite_of_an_openai_chat_file_is_refused(tmp_path: Path) -> None:
    data = _chat(SYSTEM, USER, CALL, RESULT)
    _, kept = read_grown_chat(str(tmp_path / "c.jsonl"), data, None)
    for changed in (data.replace(b'"ok"', b'"no"'), data[: len(data) // 2], b" " + data):
        with pytest.raises(NotIncremental):
            read_grown_chat(str(tmp_path / "c.jsonl"), changed + _chat(USER), pickle.loads(kept))
    with pytest.raises(NotIncremental):
        read_grown(str(tmp_path / "c.jsonl"), data, pickle.loads(kept))  # another reader's state


def _events(*values: dict) -> bytes:
    return b"".join(json.dumps(v).encode() + b"\n" for v in values)


INIT = {"type": "init", "session_id": "s1", "model": "gemini-2.5-pro", "timestamp": "2026-01-01T00:00:00Z"}
ASK = {"type": "message", "role": "user", "content": "hi", "timestamp": "2026-01-01T00:00:01Z"}


def _said(text: str, at: int, delta: bool = True) -> dict:
    return {"type": "message", "role": "assistant", "content": text, "delta": delta, "timestamp": f"2026-01-01T00:00:{at:02d}Z"}


def test_a_gemini_stream_with_streamed_chunks_a_restart_and_a_summary(tmp_path: Path) -> None:
    """Every append of a log whose assistant messages are streamed over several lines, with tool
    calls and results, a compaction summary and a restart (an ``init`` with a new session id)."""
    lines = _events(
        ASK, INIT, ASK, _said("Let", 2), _said(" me", 3), _said(" look", 4),
        {"type": "tool_use", "tool_id": "t1", "tool_name": "read_file", "parameters": {"path": "a"}},
        {"type": "tool_use", "tool_id": "t2", "tool_name": "read_file", "parameters": {"path": "b"}},
        {"type": "tool_result", "tool_id": "t1", "status": "success", "output": "A"},
        {"type": "tool_result", "tool_id": "t2", "status": "error", "error": {"message": "gone"}},
        _said("Done", 5, delta=False), _said(".", 6),
        {"type": "result", "status": "success", "stats": {"total_tokens": 10}},
        {"type": "message", "role": "user", "content": "<state_snapshot>what happened</state_snapshot>"},
        _said("Carrying on", 7),
        {"type": "init", "session_id": "s2", "model": "gemini-2.5-flash"},
        ASK, _said("Again", 8),
        {"type": "tool_use", "tool_id": "t3", "tool_name": "ls", "parameters": {}},
    ).splitlines(keepends=True)
    assert _sweep(lines, tmp_path / "stream.jsonl", read_grown_gemini) == len(lines) - 2  # the first line alone is no stream
    whole = _whole(tmp_path / "stream.jsonl")
    assert whole.model == "gemini-2.5-flash" and len(whole.history) > len(whole.messages) and len(whole.call_times) == 4


@pytest.mark.parametrize("more", [
    {"type": "user", "uuid": "u", "parentUuid": None, "message": {"role": "user", "content": "hi"}},  # a Claude Code record
    {"type": "response_item", "payload": {"type": "message"}},  # a Codex envelope
    {"type": "tool_use", "tool_name": "ls"},  # no tool id
    [1, 2],  # not an object
])
def test_gemini_refusals(more, tmp_path: Path) -> None:
    copy, data = tmp_path / "stream.jsonl", _events(INIT, ASK, _said("hello", 2))
    whole, kept = _refused(read_grown_gemini, GeminiState, copy, data, more)
    assert whole is None or whole.format != "gemini_cli"
    with pytest.raises(NotIncremental):  # a rewrite
        read_grown_gemini(str(copy), data.replace(b"hello", b"howdy") + _events(ASK), pickle.loads(kept))


@pytest.mark.parametrize("text", [
    _events(ASK, _said("hello", 2)),  # no stream event yet: not read as Gemini CLI
    json.dumps({"sessionId": "s", "messages": [{"type": "user", "content": "hi"}, {"type": "gemini", "content": "yo"}]}, indent=1).encode(),
    b"",
])
def test_what_is_not_read_as_a_gemini_stream_incrementally(text: bytes, tmp_path: Path) -> None:
    copy = tmp_path / "f.json"
    copy.write_bytes(text)
    with pytest.raises(NotIncremental):
        read_grown_gemini(str(copy), text, None)


def test_a_stream_event_after_the_first_records_does_not_make_a_gemini_stream(tmp_path: Path) -> None:
    copy = tmp_path / "stream.jsonl"
    data = _events(*[ASK] * SNIFF_RECORDS, INIT)
    copy.write_bytes(data)
    assert _whole(copy) is None or _whole(copy).format != "gemini_cli"
    with pytest.raises(NotIncremental):
        read_grown_gemini(str(copy), data, None)


# The CLI: ``dp-compact plan FILE --json`` from the kept state prints what the whole command prints.


def _same_plan(copy: Path, capsys, monkeypatch) -> str:
    args = ["plan", str(copy), "--json"]
    hot_run = run_in_process(args, capsys, monkeypatch)
    assert hot_run == run_in_process(args, capsys, monkeypatch, hot_path=False)
    assert hot_run[0] == 0
    return hot_run[1]


def _plan_sweep(source: Path, tmp_path: Path, capsys, monkeypatch, appended: int, *, live: bool) -> None:
    """Plan the file less its last ``appended`` lines, then after each appended line and after a
    rewrite: the hot path's output equals the whole command's; it continued from the kept state
    (in a long-lived process, from the reader state in memory, the kept file not loaded)."""
    monkeypatch.setattr(hot, "keep_live", live)
    monkeypatch.setattr(hot, "_LIVE", {})
    lines = _lines(source)
    copy = tmp_path / source.name
    copy.write_bytes(b"".join(lines[:-appended]))
    _same_plan(copy, capsys, monkeypatch)
    assert len(_kept_states()) == 1
    kept_state = hot._kept_state
    for at, line in enumerate(lines[-appended:]):
        with open(copy, "ab") as handle:
            handle.write(line)
        grown: list = []
        real = hot._grown_session

        def recorded(*args, grown=grown, real=real):
            grown.append(real(*args))
            return grown[-1]

        monkeypatch.setattr(hot, "_grown_session", recorded)
        if live and at:
            assert [type(v[2]) for v in hot._LIVE.values()] in ([ChatState], [GeminiState])
            monkeypatch.setattr(hot, "_kept_state", lambda *a: pytest.fail("loaded the kept file"))
        out = _same_plan(copy, capsys, monkeypatch)
        monkeypatch.setattr(hot, "_kept_state", kept_state)
        monkeypatch.setattr(hot, "_grown_session", real)
        assert grown and grown[0] is not None  # continued from the kept state
        assert json.loads(out)["N"] == len(read_session(copy, raw_json=True).messages)
    copy.write_bytes(b"".join(lines[: len(lines) // 2]))  # rewritten: read whole, the same as the command
    _same_plan(copy, capsys, monkeypatch)


@pytest.mark.parametrize("live", [False, True], ids=["one-shot process", "plan server"])
@pytest.mark.parametrize("source", [*[p for p in CHAT if p.parent.name == "openai_chat"], *GEMINI], ids=_ids)
def test_plan_from_the_kept_state_is_the_whole_commands(source: Path, live: bool, tmp_path: Path, capsys, monkeypatch) -> None:
    _plan_sweep(source, tmp_path, capsys, monkeypatch, 3, live=live)


@pytest.mark.slow
@pytest.mark.parametrize("source", [*[p for p in CHAT if p.parent.name == "openai_chat"], *GEMINI], ids=_ids)
def test_plan_from_the_kept_state_is_the_whole_commands_after_every_append(source: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    _plan_sweep(source, tmp_path, capsys, monkeypatch, len(_lines(source)) - 3, live=True)


#: Records of every format the two readers meet or must tell apart, for the random appends below.
_MIXED = [
    SYSTEM, USER, CALL, RESULT,
    {"role": "developer", "content": "[compact_boundary] x"},
    {"role": "user", "content": "This session is being continued from a previous conversation that ran out of context. Summary: x"},
    {"role": "assistant", "content": "hello", "timestamp": "2026-01-01T00:00:00Z"},
    {"role": "assistant", "content": "```mswea_bash_command\nls\n```"},
    {"role": "user", "content": "<returncode>0</returncode>"},
    {"role": "assistant", "content": [{"type": "tool_call", "id": "c2", "name": "g", "arguments": {}}]},
    {"role": "tool", "content": "answered by position"},
    {"role": "function", "name": "f", "content": "legacy"},
    {"role": "assistant", "content": "x", "function_call": {"name": "f", "arguments": "{}"}},
    {"role": "user", "content": "x", "tool_call_ids": ["a", "b"]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
    {"role": "user", "content": 7},
    INIT, {"type": "init", "session_id": "s2", "model": "m2"}, ASK,
    {"type": "message", "role": "user", "content": "<state_snapshot>x</state_snapshot>"},
    _said("chunk", 2), _said("whole", 3, delta=False),
    {"type": "tool_use", "tool_id": "t1", "tool_name": "ls", "parameters": {"a": 1}},
    {"type": "tool_result", "tool_id": "t1", "status": "success", "output": "A"},
    {"type": "tool_result", "tool_id": "t9", "status": "error", "error": {"message": "gone"}},
    {"type": "result", "status": "success"}, {"type": "tool_use", "tool_name": "no id"},
    {"type": "user", "uuid": "u", "parentUuid": None, "message": {"role": "user", "content": "hi"}},
    {"type": "response_item", "payload": {"type": "message", "role": "user", "content": []}},
    {"type": "say", "ts": 1, "say": "text", "text": "hi"},
]


@pytest.mark.parametrize("seed", [0, *[pytest.param(seed, marks=pytest.mark.slow) for seed in (1, 2, 3)]])
def test_random_appends_give_the_whole_read_or_are_refused(seed: int, tmp_path: Path) -> None:
    """Files of records drawn mostly from one format, now and then from another (or a blank or
    broken line), appended one at a time (also half a line, and a line without its line break):
    whatever the hot path reads from its kept state, or from nothing, is the whole read."""
    import random

    rng = random.Random(seed)
    compared = 0
    for trial in range(40):
        chat = trial % 2 == 0
        weights = [3 if ("type" not in v) == chat else 0.15 for v in _MIXED]
        lines = [rng.choice([b"\n", b"not json\n"]) if rng.random() < 0.03 else json.dumps(rng.choices(_MIXED, weights)[0]).encode() + b"\n"
                 for _ in range(rng.randint(1, 20))]
        copy, kept = tmp_path / f"{trial}.jsonl", None
        for step in range(1, len(lines) + 1):
            data = b"".join(lines[:step])
            more = lines[step] if step < len(lines) else b""
            for text in (data, data + more[:7], data + more.rstrip(b"\n")):
                copy.write_bytes(text)
                got = None
                for state in (kept, None):
                    try:
                        got, new = read_grown_any(str(copy), text, pickle.loads(state) if state else None)
                        break
                    except NotIncremental:
                        continue
                if got is not None:
                    assert got == _whole(copy), (trial, step, text[-200:])
                    compared += 1
                if text is data:
                    kept = new if got is not None else None
    assert compared > 100
