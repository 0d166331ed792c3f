"""Reading a session file before its format is known: live logs, compressed and binary files."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.errors import MalformedLineError, SessionError
from dp_compact.pipeline.io import read_messages
from dp_compact.sessions import read_session
from dp_compact.sessions.source import read_source

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[1] / "dp_compact" / "examples" / "session.jsonl"
LINES = [
    {"role": "user", "content": "Fix the VAT rounding."},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "pytest"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "1 failed"}]},
    {"role": "assistant", "content": "Found it."},
]
HALF = b'{"role": "user", "content": "and now the inv'


def _live(tmp_path: Path, tail: bytes = HALF) -> Path:
    """A JSONL log whose last line an agent is still writing (no line break after it)."""
    path = tmp_path / "live.jsonl"
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in LINES) + tail)
    return path


# ---------------------------------------------------------------- a live log


def test_read_source_half_written_last_line_is_left_out_and_numbered(tmp_path):
    source = read_source(_live(tmp_path))
    assert [r.line for r in source.records] == [1, 2, 3, 4]
    assert (source.partial_line, source.skipped) == (5, 0)


def test_read_session_half_written_last_line_keeps_the_complete_messages(tmp_path):
    session = read_session(_live(tmp_path))
    assert (len(session.messages), session.partial_line, session.skipped_lines) == (4, 5, 0)


def test_read_source_complete_last_line_without_line_break_is_read(tmp_path):
    source = read_source(_live(tmp_path, b'{"role": "user", "content": "thanks"}'))
    assert (len(source.records), source.partial_line) == (5, None)


def test_read_source_malformed_line_before_the_last_is_still_an_error(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"role": "user", "content": "hi"}\n{"role": "assi\n{"role": "assistant", "content": "ok"}')
    source = read_source(path)  # lines are parsed as they are read
    with pytest.raises(MalformedLineError, match=r"s\.jsonl:2: line 2 is not valid JSON") as caught:
        list(source.records)
    assert caught.value.line == 2
    with pytest.raises(MalformedLineError, match=r"s\.jsonl:2: line 2 is not valid JSON"):
        read_session(path)


def test_read_source_truncated_last_line_with_line_break_is_an_error(tmp_path):
    with pytest.raises(MalformedLineError, match=r"live\.jsonl:5: "):
        list(read_source(_live(tmp_path, HALF + b"\n")).records)  # a line break after it: the writer finished it


def test_read_messages_for_validate_refuses_a_half_written_last_line(tmp_path):
    with pytest.raises(MalformedLineError, match=r"live\.jsonl:5: "):
        read_messages(_live(tmp_path))


def test_plan_half_written_last_line_is_a_note_not_an_error(tmp_path):
    path = _live(tmp_path)
    result = runner.invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["N"] == 4
    assert f"{path}:5: half-written last line left out (no line break after it: the agent is still writing it)" in data["notes"]


def test_compact_half_written_last_line_is_a_note_on_stderr(tmp_path):
    path = _live(tmp_path)
    result = runner.invoke(app, ["compact", str(path), "--keep", "1", "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    assert f"dp-compact: note: {path}:5: half-written last line left out" in result.stderr
    assert json.loads(result.stdout)["n_messages"] == 4


# ---------------------------------------------------------------- compressed and binary files


@pytest.mark.parametrize(("compress", "what", "command"), [
    (gzip.compress, "gzip-compressed", "gunzip"),
    (bz2.compress, "bzip2-compressed", "bunzip2"),
    (lzma.compress, "xz-compressed", "unxz"),
])
def test_read_source_compressed_file_says_what_it_is_and_how_to_undo_it(tmp_path, compress, what, command):
    path = tmp_path / "s.jsonl"
    path.write_bytes(compress(EXAMPLE.read_bytes()))
    with pytest.raises(SessionError) as caught:
        read_source(path)
    assert str(caught.value) == f"{path}: this is a {what} file; decompress it first ({command})"
    assert caught.value.line is None


def test_read_source_binary_file_says_it_is_not_a_transcript(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)))
    with pytest.raises(SessionError) as caught:
        read_source(path)
    assert str(caught.value) == f"{path}: binary data, not a JSON/JSONL transcript"


def test_read_source_utf16_file_says_to_convert_it(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(EXAMPLE.read_text("utf-8").encode("utf-16"))
    with pytest.raises(SessionError, match="UTF-16 text, not UTF-8"):
        read_source(path)


@pytest.mark.parametrize("command", [["plan"], ["compact", "--dry-run"], ["replay"]])
def test_cli_gzip_session_is_one_line_exit_2_no_traceback(tmp_path, command):
    path = tmp_path / "session.jsonl.gz"
    path.write_bytes(gzip.compress(EXAMPLE.read_bytes()))
    result = runner.invoke(app, [command[0], str(path), *command[1:]])
    assert result.exit_code == 2
    assert result.stderr == f"dp-compact: {path}: this is a gzip-compressed file; decompress it first (gunzip)\n"
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_cli_binary_session_is_one_line_exit_2(tmp_path):
    path = tmp_path / "image.json"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64))
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 2
    assert result.stderr == f"dp-compact: {path}: binary data, not a JSON/JSONL transcript\n"


# ---------------------------------------------------------------- a UTF-8 byte order mark


def _real_or_example() -> list[Path]:
    from tests.conftest import session_files

    return session_files() or [EXAMPLE]


@pytest.mark.parametrize("path", _real_or_example(), ids=lambda p: p.name)
def test_utf8_bom_is_read_as_nothing_in_every_format(tmp_path, path):
    copy = tmp_path / f"bom-{path.name}"
    copy.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    try:
        expected = read_session(path)
    except SessionError as exc:  # a file that is not a session says the same with a BOM
        with pytest.raises(type(exc)):
            read_session(copy)
        return
    session = read_session(copy)
    assert (session.format, session.messages, session.usage) == (expected.format, expected.messages, expected.usage)
    assert session.user_turns == expected.user_turns and session.messages


def test_utf8_bom_jsonl_first_line_is_a_record_not_an_error(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"".join(json.dumps(r).encode() + b"\n" for r in LINES))
    source = read_source(path)
    assert [r.line for r in source.records] == [1, 2, 3, 4] and source.records[0].value == LINES[0]
    assert source.nbytes == path.stat().st_size
    assert read_messages(path)[0] == LINES[0]


def test_utf8_bom_session_plans_from_the_command_line(tmp_path):
    path = tmp_path / "s.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(LINES, indent=1).encode())
    result = runner.invoke(app, ["plan", str(path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["N"] == 4


def test_utf16_with_its_bom_still_says_to_convert_it(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\xff\xfe" + EXAMPLE.read_text("utf-8").encode("utf-16-le"))
    with pytest.raises(SessionError) as caught:
        read_source(path)
    assert str(caught.value) == f"{path}: UTF-16 text, not UTF-8; convert it first (iconv -f UTF-16 -t UTF-8)"


def test_seed_stats_file_with_a_utf8_bom_is_read(tmp_path):
    from dp_compact.sessions import read_seed_stats

    path = tmp_path / "stats.json"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"current_turn_count": 3}')
    assert read_seed_stats(path).current_turn_count == 3


@pytest.mark.parametrize("shape", ["object", "array"])
def test_a_cut_off_pretty_printed_document_is_named_where_it_ends(tmp_path, shape):
    """A JSON document spread over lines and cut off is an error at the line where the parser
    stopped, not at line 1 as if it were JSONL."""
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"} for i in range(40)]
    text = json.dumps({"messages": messages} if shape == "object" else messages, indent=2)
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) * 2 // 3])
    expected = text[: len(text) * 2 // 3].rstrip().count("\n") + 1
    with pytest.raises(MalformedLineError, match=r"cut\.json:\d+: not valid JSON \(.+\): the file is one JSON document") as caught:
        read_source(path)
    assert abs(caught.value.line - expected) <= 1 and caught.value.line > 1


def test_a_jsonl_file_with_a_broken_first_line_is_still_named_at_line_1(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"role": "us\n{"role": "user", "content": "x"}\n{"role": "assistant", "content": "y"}\n')
    with pytest.raises(MalformedLineError, match=r"s\.jsonl:1: line 1 is not valid JSON"):
        read_session(path)
