"""dp_compact.hot.lines: an Anthropic messages file's kept state gives what a whole read gives."""

from __future__ import annotations

import json
import pickle
from itertools import pairwise
from pathlib import Path

import pytest

from dp_compact.conversation import holds_no_blocks
from dp_compact.hot import common_lines
from dp_compact.hot.lines import CodexState, LinesState, read_grown, read_grown_any, read_grown_codex
from dp_compact.hot.transcript import NotIncremental, TranscriptState
from dp_compact.sessions import read_session
from tests.conftest import REFERENCE, REPO, SESSIONS, need, session_files


def _anthropic_first_line(path: Path) -> bool:
    """True when the file's first line is a ``{role, content}`` message (an Anthropic-format candidate)."""
    with open(path, "rb") as handle:
        first = handle.readline()
    try:
        value = json.loads(first.removeprefix(b"\xef\xbb\xbf"))
    except ValueError:
        return False
    return isinstance(value, dict) and value.get("role") in ("user", "assistant") and "type" not in value


ANTHROPIC = [p for p in session_files() if _anthropic_first_line(p)]
CODEX = sorted((SESSIONS / "codex").glob("*.jsonl")) if SESSIONS.exists() else []
SEED_REFERENCE = sorted((REFERENCE / "conversations").glob("*.jsonl")) if REFERENCE.exists() else []


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _whole(path: Path):
    return read_session(path, raw_json=True)


def _grown(path: Path, data: bytes, kept: bytes | None, read=read_grown):
    """``read`` from the kept state (unpickled), and from nothing when it cannot continue."""
    try:
        return read(str(path), data, pickle.loads(kept) if kept else None)
    except NotIncremental:
        return read(str(path), data, None)


def _sweep(lines_: list[bytes], copy: Path, steps: list[int], read=read_grown) -> int:
    """Write the first ``step`` lines for each step, then also half of the next line, and the next
    line without its line break; each time the session ``read`` gives from the kept state equals a
    whole read. Returns the steps compared."""
    kept, compared = None, 0
    for step in steps:
        data = b"".join(lines_[:step])
        copy.write_bytes(data)
        session, kept = _grown(copy, data, kept, read)
        assert session == _whole(copy), f"{copy.name}: {step} lines"
        compared += 1
        if step < len(lines_):
            for more in (lines_[step][: len(lines_[step]) // 2], lines_[step].rstrip(b"\r\n")):
                copy.write_bytes(data + more)
                assert read(str(copy), data + more, pickle.loads(kept))[0] == _whole(copy), f"{copy.name}: {step} lines and {more[:20]!r}"
    return compared


def _steps(count: int, every_up_to: int, samples: int = 40) -> list[int]:
    """Every line count up to ``count`` when it is at most ``every_up_to``, else the first ones and about ``samples`` more."""
    if count <= every_up_to:
        return list(range(1, count + 1))
    return sorted({*range(1, 13), *range(1, count + 1, max(1, count // samples)), count})


@pytest.fixture
def seed_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A 300-line conversation of the seed agent's format (bench/bench_seed_awk.py)."""
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    from bench_seed_awk import seed_conversation

    path = tmp_path / "seed.jsonl"
    seed_conversation(300, path)
    return path


@pytest.mark.parametrize("source", ANTHROPIC, ids=lambda p: p.name)
def test_every_append_of_a_shared_anthropic_file(source: Path, tmp_path: Path) -> None:
    if _whole(source).format != "anthropic":
        pytest.skip(f"{source.name} is read as {_whole(source).format}")
    lines_ = _lines(source)
    assert _sweep(lines_, tmp_path / source.name, list(range(1, len(lines_) + 1))) == len(lines_)


def test_shared_sessions_hold_an_anthropic_file() -> None:
    need(SESSIONS)
    assert any(_whole(p).format == "anthropic" for p in ANTHROPIC)


@pytest.mark.parametrize("source", SEED_REFERENCE, ids=lambda p: p.name)
def test_appends_of_the_seed_reference_conversations(source: Path, tmp_path: Path) -> None:
    lines_ = _lines(source)
    if not lines_:
        pytest.skip(f"{source.name} is empty")
    assert _sweep(lines_, tmp_path / source.name, _steps(len(lines_), 120)) > 0


def test_every_append_of_a_seed_file(seed_file: Path, tmp_path: Path) -> None:
    lines_ = _lines(seed_file)
    assert len(lines_) == 300
    assert _sweep(lines_, tmp_path / "copy.jsonl", list(range(1, 301))) == 300


def test_one_read_after_many_appends_keeps_few_chunks(seed_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common_lines, "MAX_CHUNK_MESSAGES", 64)
    lines_ = _lines(seed_file)
    copy = tmp_path / "copy.jsonl"
    kept = read_grown(str(copy), b"".join(lines_[:10]), None)[1]
    for step in range(11, 301):
        data = b"".join(lines_[:step])
        session, kept = read_grown(str(copy), data, pickle.loads(kept))
    state = pickle.loads(kept)
    assert len(state.chunks) <= 300 // 64 + 8
    assert all(b[0][0] - a[0][0] <= 64 for a, b in pairwise(state.chunks))
    copy.write_bytes(data)
    assert session == _whole(copy)


def test_the_kept_state_keeps_the_shared_shapes(seed_file: Path) -> None:
    data = seed_file.read_bytes()
    _, kept = read_grown(str(seed_file), data, None)
    session, _ = read_grown(str(seed_file), data, pickle.loads(kept))
    whole = _whole(seed_file)
    assert [holds_no_blocks(m.raw) for m in session.history] == [holds_no_blocks(m.raw) for m in whole.history]
    assert any(holds_no_blocks(m.raw) for m in session.history)


def test_a_rewrite_that_is_not_an_append_is_refused(seed_file: Path) -> None:
    data = seed_file.read_bytes()
    _, kept = read_grown(str(seed_file), data, None)
    changed = data.replace(b'"role":"user"', b'"role": "user"', 1)
    with pytest.raises(NotIncremental):
        read_grown(str(seed_file), changed + b'{"role":"user","content":"more"}\n', pickle.loads(kept))
    with pytest.raises(NotIncremental):
        read_grown(str(seed_file), data[: len(data) // 2], pickle.loads(kept))


def test_a_half_written_last_line_is_left_out_then_read(seed_file: Path, tmp_path: Path) -> None:
    lines_ = _lines(seed_file)
    copy = tmp_path / "copy.jsonl"
    data = b"".join(lines_[:20])
    _, kept = read_grown(str(copy), data, None)
    half = data + lines_[20][:30]
    copy.write_bytes(half)
    session, kept_half = read_grown(str(copy), half, pickle.loads(kept))
    assert session == _whole(copy)
    assert session.partial_line == 21 and len(session.history) == 20
    whole_line = half + lines_[20][30:]
    copy.write_bytes(whole_line)
    session, _ = read_grown(str(copy), whole_line, pickle.loads(kept_half))
    assert session == _whole(copy) and session.partial_line is None and len(session.history) == 21


def test_a_last_line_without_a_line_break_is_read_and_not_kept(tmp_path: Path) -> None:
    copy = tmp_path / "copy.jsonl"
    first, second = b'{"role":"user","content":"hi"}\n', b'{"role":"assistant","content":"hello"}'
    copy.write_bytes(first + second)
    session, kept = read_grown(str(copy), first + second, None)
    assert session == _whole(copy) and len(session.history) == 2
    assert pickle.loads(kept).consumed == len(first)
    copy.write_bytes(second)  # a whole file of one line without a line break
    assert read_grown(str(copy), second, None)[0] == _whole(copy)


def test_blank_lines(seed_file: Path, tmp_path: Path) -> None:
    lines_ = _lines(seed_file)[:30]
    copy = tmp_path / "copy.jsonl"
    kept, data = None, b""
    for at, line in enumerate(lines_):
        data += line + (b"\n" if at % 3 == 0 else b"  \t\r\n" if at % 3 == 1 else b"")
        copy.write_bytes(data)
        session, kept = _grown(copy, data, kept)
        assert session == _whole(copy), at
    data += b"   "  # white space without a line break after it
    copy.write_bytes(data)
    assert read_grown(str(copy), data, pickle.loads(kept))[0] == _whole(copy)


def test_a_byte_order_mark_and_crlf_line_breaks(seed_file: Path, tmp_path: Path) -> None:
    lines_ = [line.replace(b"\n", b"\r\n") for line in _lines(seed_file)[:40]]
    lines_[0] = b"\xef\xbb\xbf" + lines_[0]
    assert _sweep(lines_, tmp_path / "bom.jsonl", list(range(1, 41))) == 40


def test_a_lone_surrogate_is_repaired_as_a_whole_read_repairs_it(tmp_path: Path) -> None:
    copy = tmp_path / "copy.jsonl"
    data = b'{"role":"user","content":"cut \\ud83d emoji"}\n{"role":"assistant","content":"ok"}\n'
    copy.write_bytes(data)
    _, kept = read_grown(str(copy), data[:-1], None)  # the last line is read, not kept
    session, _ = read_grown(str(copy), data, pickle.loads(kept))
    whole = _whole(copy)
    assert session == whole and session.repaired_lines == whole.repaired_lines == (1,)


@pytest.mark.parametrize("text", [
    b'[{"role":"user","content":"hi"}]\n',  # a JSON array
    b'{"messages": []}\n',
    b'{"messages": [{"role":"user","content":"hi"}]}\n',
    b'[\n{"role":"user","content":"hi"}\n]\n',  # a document over several lines
    b'\n{"role":"user","content":"hi"}\n',  # a blank first line
    b'{"role":"user","content":"hi"}\nnot json\n{"role":"user","content":"hi"}\n',
    b'{"role":"user","content":"hi"}\n{"role":"system","content":"be brief"}\n',  # OpenAI chat
    b'{"role":"user","content":"hi"}\n{"role":"assistant","content":"x","function_call":{"name":"f"}}\n',
    b'{"role":"user","content":"hi"}\n{"role":"user","content":"\x00"}\n',
    b'{"role":"user","content":"hi"}\n{"role":"user","content":7}\n',
    b'{"role":"user","con',  # no complete line
    b"",
])
def test_what_is_not_read_incrementally(text: bytes, tmp_path: Path) -> None:
    with pytest.raises(NotIncremental):
        read_grown(str(tmp_path / "f.jsonl"), text, None)


def test_a_later_line_that_makes_the_file_openai_chat_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "copy.jsonl"
    data = b'{"role":"user","content":"hi"}\n{"role":"assistant","content":"hello"}\n'
    _, kept = read_grown(str(copy), data, None)
    more = data + b'{"role":"user","content":"x","tool_call_ids":["a"]}\n'
    copy.write_bytes(more)
    assert _whole(copy).format == "openai_chat"
    with pytest.raises(NotIncremental):
        read_grown(str(copy), more, pickle.loads(kept))


def test_a_tool_block_among_the_first_records_keeps_the_file_anthropic(tmp_path: Path) -> None:
    copy = tmp_path / "copy.jsonl"
    data = (b'{"role":"user","content":"hi"}\n'
            b'{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]}\n'
            b'{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}\n')
    _, kept = read_grown(str(copy), data, None)
    more = data + b'{"role":"user","content":"x","tool_call_ids":["a"]}\n'
    copy.write_bytes(more)
    session, _ = read_grown(str(copy), more, pickle.loads(kept))
    assert session == _whole(copy) and session.format == "anthropic"


def test_read_grown_any_picks_the_reader_by_state_and_by_content(seed_file: Path, tmp_path: Path) -> None:
    data = seed_file.read_bytes()
    session, kept = read_grown_any(str(seed_file), data, None)
    assert session == _whole(seed_file) and type(pickle.loads(kept)) is LinesState
    assert read_grown_any(str(seed_file), data, pickle.loads(kept))[0] == session
    with pytest.raises(NotIncremental):
        read_grown_any(str(seed_file), data, object())
    other = tmp_path / "other.jsonl"
    other.write_bytes(b'{"type":"say","ts":1,"say":"text","text":"hi"}\n')
    with pytest.raises(NotIncremental):
        read_grown_any(str(other), other.read_bytes(), None)


def test_read_grown_any_reads_claude_code_with_the_transcript_reader() -> None:
    source = need(SESSIONS / "claude_code" / "cc_raze_hooks.jsonl")
    data = source.read_bytes()
    session, kept = read_grown_any(str(source), data, None)
    assert type(pickle.loads(kept)) is TranscriptState
    assert session == _whole(source)
    assert read_grown_any(str(source), data, pickle.loads(kept))[0] == session
    with pytest.raises(NotIncremental):
        read_grown(str(source), data, pickle.loads(kept))  # a transcript's state is not this reader's


@pytest.mark.parametrize("source", CODEX, ids=lambda p: p.name)
def test_appends_of_the_shared_codex_rollouts(source: Path, tmp_path: Path) -> None:
    lines_ = _lines(source)
    assert _whole(source).format == "codex"
    assert _sweep(lines_, tmp_path / source.name, _steps(len(lines_), 40), read_grown_codex) > 0


def test_codex_refusals(tmp_path: Path) -> None:
    copy = tmp_path / "rollout.jsonl"
    meta = b'{"timestamp":"t","type":"session_meta","payload":{"id":"x","base_instructions":{"text":"be good"}}}\n'
    event = b'{"timestamp":"t","type":"event_msg","payload":{"type":"task_started","model_context_window":1000}}\n'
    user = b'{"timestamp":"t","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}\n'
    with pytest.raises(NotIncremental):  # no Codex envelope among the records yet
        read_grown_codex(str(copy), event, None)
    session, kept = read_grown_codex(str(copy), meta + event + user, None)
    copy.write_bytes(meta + event + user)
    assert session == _whole(copy) and type(pickle.loads(kept)) is CodexState
    claude = b'{"type":"user","uuid":"u1","parentUuid":null,"message":{"role":"user","content":"hi"}}\n'
    copy.write_bytes(meta + event + user + claude)
    assert _whole(copy).format == "claude_code"
    with pytest.raises(NotIncremental):
        read_grown_codex(str(copy), meta + event + user + claude, pickle.loads(kept))
    broken = b'{"timestamp":"t","type":"response_item","payload":7}\n'
    with pytest.raises(NotIncremental):
        read_grown_codex(str(copy), meta + event + user + broken, pickle.loads(kept))
    with pytest.raises(NotIncremental):
        read_grown_codex(str(copy), meta + event + user, pickle.loads(read_grown(str(copy), user, None)[1]))
    copy.write_bytes(meta + event + user)
    assert read_grown_any(str(copy), meta + event + user, None)[0] == session


@pytest.mark.parametrize("block_at", [999, 1000])
def test_a_tool_block_counts_only_among_the_first_records(block_at: int, tmp_path: Path) -> None:
    copy = tmp_path / "copy.jsonl"
    plain = [b'{"role":"user","content":"hi"}\n', b'{"role":"assistant","content":"hello"}\n']
    lines_ = [plain[i % 2] for i in range(block_at)]
    lines_.append(b'{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]}\n')
    data = b"".join(lines_)
    _, kept = read_grown(str(copy), data, None)
    more = data + b'{"role":"user","content":"x","function_call":{"name":"f"}}\n'
    copy.write_bytes(more)
    whole = _whole(copy)
    if whole.format == "anthropic":
        assert read_grown(str(copy), more, pickle.loads(kept))[0] == whole
    else:
        with pytest.raises(NotIncremental):
            read_grown(str(copy), more, pickle.loads(kept))
    assert whole.format == ("anthropic" if block_at < 1000 else "openai_chat")


def test_the_state_object_is_the_kept_state(seed_file: Path, tmp_path: Path) -> None:
    lines_ = _lines(seed_file)[:60]
    copy = tmp_path / "copy.jsonl"
    state, before = None, b""
    for step, line in enumerate(lines_, 1):
        for text in (before + line[:10], before + line.rstrip(b"\n"), before + line):  # half, no line break, whole
            copy.write_bytes(text)
            try:
                session, kept = read_grown(str(copy), text, state)
            except NotIncremental:
                assert state is None  # the first line half-written
                continue
            assert session == _whole(copy), step
            state = state or pickle.loads(kept)
        before += line
