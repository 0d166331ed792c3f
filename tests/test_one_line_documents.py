"""A session document written on one line (``json.dump`` without indent, ``JSON.stringify``) is read
as the document it is, not refused as a JSONL file of one unknown record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dp_compact.errors import UnknownFormatError
from dp_compact.sessions import read_session
from tests.conftest import session_files


def _documents() -> list[Path]:
    found = []
    for path in session_files():
        try:
            json.loads(path.read_bytes())
        except ValueError:
            continue  # JSONL
        found.append(path)
    return found


@pytest.mark.parametrize("source", _documents(), ids=lambda p: p.name)
def test_a_document_on_one_line_reads_as_the_same_session(source, tmp_path):
    try:
        indented = read_session(source)
    except Exception as exc:  # noqa: BLE001 - a file that is no session (a UI log) stays refused, for the same reason
        with pytest.raises(type(exc)):
            read_session(_one_line(source, tmp_path))
        return
    one_line = read_session(_one_line(source, tmp_path))
    assert one_line.format == indented.format
    assert [(m.role, m.text, m.tool_calls, m.tool_results) for m in one_line.messages] == \
        [(m.role, m.text, m.tool_calls, m.tool_results) for m in indented.messages]
    assert one_line.usage == indented.usage and one_line.model == indented.model


def _one_line(source: Path, tmp_path: Path) -> Path:
    copy = tmp_path / source.name
    copy.write_text(json.dumps(json.loads(source.read_bytes()), ensure_ascii=False) + "\n")
    assert len(copy.read_bytes().splitlines()) == 1
    return copy


def test_one_line_object_of_no_format_is_still_refused(tmp_path):
    copy = tmp_path / "other.json"
    copy.write_text(json.dumps({"title": "notes", "items": [1, 2, 3]}))
    with pytest.raises(UnknownFormatError):
        read_session(copy)


def test_one_line_jsonl_record_still_reads_as_jsonl(tmp_path):
    copy = tmp_path / "messages.jsonl"
    copy.write_text(json.dumps({"role": "user", "content": "fix the failing test"}) + "\n")
    session = read_session(copy)
    assert [m.role for m in session.messages] == ["user"] and session.format != "empty"
