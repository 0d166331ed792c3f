"""Mutated transcripts through the readers and the pipeline. Whatever the bytes,
a run either succeeds or raises a library error (one line on the command line, never a
traceback); the input is never changed; nothing partial is written (the output is absent or
whole and valid, no temporary file is left, the archive holds no row without its output)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dp_compact.errors import DpCompactError
from dp_compact.pipeline.archive import ArchiveStore
from dp_compact.pipeline.compact import compact_file
from dp_compact.pipeline.io import read_messages
from dp_compact.pipeline.validate import validate_messages
from dp_compact.sessions import read_session
from dp_compact.settings import default_settings


def _anthropic() -> list[dict]:
    out: list[dict] = []
    for i in range(6):
        out.append({"role": "user", "content": f"Fix test {i} in src/app_{i}.py; it fails with KeyError " * 4})
        out.append({"role": "assistant", "content": [{"type": "text", "text": "Looking."},
                                                     {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": f"pytest -k {i}"}}],
                    "usage": {"input_tokens": 1000 + 200 * i, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 10, "output_tokens": 20}})
        out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "FAILED KeyError 'x' " * 20}]})
        out.append({"role": "assistant", "content": [{"type": "text", "text": f"Fixed {i}."}]})
    return out


def _openai() -> list[dict]:
    out: list[dict] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(6):
        out.append({"role": "user", "content": f"Fix test {i} in src/app_{i}.py; it fails with KeyError " * 4})
        out.append({"role": "assistant", "content": None,
                    "tool_calls": [{"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": "pytest"})}}]})
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": "FAILED KeyError " * 20})
        out.append({"role": "assistant", "content": f"Fixed {i}.", "usage": {"prompt_tokens": 900 + 150 * i, "completion_tokens": 10}})
    return out


BASES = {"anthropic": _anthropic, "openai_chat": _openai}
ODD_VALUES = [2**63, 2**64 + 1, -1, -(2**63), 1e308, float("inf"), 1.5, "12", "", None, True, [], {}, "\ud800", "\x00", "é" * 3]


@st.composite
def mutated(draw) -> tuple[str, bytes]:
    fmt = draw(st.sampled_from(sorted(BASES)))
    messages = BASES[fmt]()
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(messages) - 1))
        kind = draw(st.sampled_from(["usage", "content", "role", "drop", "duplicate", "block", "key"]))
        message = dict(messages[at])
        if kind == "usage":
            field = draw(st.sampled_from(["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "prompt_tokens"]))
            message["usage"] = {**(message["usage"] if isinstance(message.get("usage"), dict) else {}), field: draw(st.sampled_from(ODD_VALUES))}
        elif kind == "content":
            message["content"] = draw(st.sampled_from(ODD_VALUES + [[{"type": "text", "text": " "}], [{"type": "advisor_tool_result"}]]))
        elif kind == "role":
            message["role"] = draw(st.sampled_from(["user", "assistant", "tool", "system", "robot", None, 7]))
        elif kind == "block" and isinstance(message.get("content"), list):
            message["content"] = [*message["content"], draw(st.sampled_from([
                {"type": "text", "text": ""}, {"type": "tool_result", "tool_use_id": "t0", "content": "again"},
                {"type": "mystery", "x": 1}, {"type": "tool_use", "id": "t1", "name": "x", "input": {}}]))]
        elif kind == "key":
            message[draw(st.sampled_from(["usage", "metrics", "tool_calls", "tool_call_id"]))] = draw(st.sampled_from(ODD_VALUES))
        if kind == "drop":
            del messages[at]
        elif kind == "duplicate":
            messages.insert(at, messages[at])
        else:
            messages[at] = message
    lines = [json.dumps(m, ensure_ascii=draw(st.booleans())) for m in messages]
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    edit = draw(st.sampled_from(["none", "truncate", "garbage", "bytes"]))
    if edit == "truncate":
        data = data[: draw(st.integers(0, len(data)))]
    elif edit == "garbage":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff\xfe", b"}", b"\n{", b"\x00", b"\\ud800"])) + data[at:]
    elif edit == "bytes" and data:
        data = data.replace(b"KeyError", draw(st.sampled_from([b"Key\\ud83dError", b"Key\xc3Error", b"Key\\u0000Error"])), 1)
    return fmt, data


def _run(tmp_path: Path, data: bytes, lenient: bool) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    source = folder / "in.jsonl"
    source.write_bytes(data)
    output = folder / "out.jsonl"
    store = ArchiveStore(folder / "archive")
    try:
        read_session(source, lenient=lenient)
        result = compact_file(source, default_settings(), output=output, keep=4, archiver=store, lenient=lenient, use_cache=False)
    except DpCompactError as exc:
        assert "\n" not in str(exc).strip() or "Traceback" not in str(exc)
        result = None
    assert source.read_bytes() == data  # the input is never modified
    leftovers = [p.name for p in folder.rglob("*") if p.name.startswith(".tmp-") or p.name.endswith(".pending")]
    assert leftovers == []
    if result is not None and result.written:
        written = read_messages(output)
        assert validate_messages(written, result.api or "anthropic") == ()
        assert store.index.ids() and result.archive_ref in output.read_text("utf-8")
    else:
        assert not output.exists()
        assert store.index.ids() == set()  # no archive row without its output


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mutated(), st.booleans())
def test_fuzz_mutated_transcripts_never_traceback_change_the_input_or_write_partially(tmp_path, case, lenient):
    _run(tmp_path, case[1], lenient)


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(mutated(), st.booleans())
def test_fuzz_mutated_transcripts_long_run(tmp_path, case, lenient):
    _run(tmp_path, case[1], lenient)
