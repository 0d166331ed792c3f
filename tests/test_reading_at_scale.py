"""Rules that keep reading a long session cheap give the same answers as the plain ones."""

from __future__ import annotations

import gc

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_compact.measure import tokens
from dp_compact.conversation import Message
from dp_compact.measure.documents import _document_of, find_documents
from dp_compact.errors import MalformedLineError, UnknownFormatError
from dp_compact.measure.images import _image_of, find_blocks, find_images
from dp_compact.io import bulk_allocation
from dp_compact.sessions import read_session
from dp_compact.sessions.claude_code import _links, _order
from dp_compact.sessions.source import SNIFF_RECORDS, Record

# Every block shape the document and image rules recognise (their module docstrings), which the
# strategy below thins out and buries in other JSON so that near-misses are drawn as well.
_SHAPES = [
    {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}},
    {"type": "document", "source": {"type": "text", "data": "plain"}},
    {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "t"}]}},
    {"type": "document", "source": {"type": "url", "url": "https://x/y.pdf"}},
    {"type": "document", "source": {"type": "file", "file_id": "file_1"}},
    {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0="}},
    {"type": "file", "file": {"file_id": "file_2"}},
    {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0="},
    {"type": "input_file", "file_url": "https://x/z.pdf"},
    {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}},
    {"inline_data": {"mime_type": "image/png", "data": "iVBORw0KGgo="}},
    {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/f.pdf"}},
    {"file_data": {"mime_type": "application/pdf", "file_uri": "gs://b/g.pdf"}},
    {"type": "image", "source": {"type": "base64", "data": "iVBORw0KGgo="}},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
    {"type": "input_image", "image_url": "https://x/i.png", "detail": "high"},
    {"inlineData": {"mimeType": "image/jpeg", "data": "/9j/"}},
]


@st.composite
def _thinned(draw: st.DrawFn, value):
    """``value`` with some keys of its dicts left out."""
    if isinstance(value, dict):
        return {k: draw(_thinned(v)) for k, v in value.items() if draw(st.integers(0, 4)) > 0}
    if isinstance(value, list):
        return [draw(_thinned(v)) for v in value]
    return value


_BLOCKS = st.sampled_from(_SHAPES).flatmap(_thinned) | st.sampled_from(["text", "x", 3])
_JSON = st.recursive(_BLOCKS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["content", "x", "output"]), inner, max_size=2),
                     max_leaves=8)


@settings(max_examples=400, deadline=None)
@given(_JSON)
def test_quick_reject_never_hides_a_document_or_an_image(raw):
    """The marker check skips only messages whose full walk finds nothing."""
    assert find_documents(raw) == find_blocks(raw, _document_of)
    assert find_images(raw) == find_blocks(raw, _image_of)


def _ordered_plain(records):
    """The reordering rule without the file-order shortcut (parent later in the file: child follows it)."""
    known = {r.value["uuid"] for r in records if isinstance(r.value, dict) and isinstance(r.value.get("uuid"), str)}
    out, emitted, waiting = [], set(), {}
    for record in records:
        parent = record.value.get("parentUuid") if isinstance(record.value, dict) else None
        if isinstance(parent, str) and parent in known and parent not in emitted:
            waiting.setdefault(parent, []).append(record)
            continue
        stack = [record]
        while stack:
            current = stack.pop()
            out.append(current)
            uuid = current.value.get("uuid") if isinstance(current.value, dict) else None
            if isinstance(uuid, str):
                emitted.add(uuid)
                stack.extend(reversed(waiting.pop(uuid, [])))
    return out + sorted((r for group in waiting.values() for r in group), key=lambda r: r.line)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", "e", None]), st.sampled_from(["a", "b", "c", "d", "e", None, "gone"])),
                max_size=8))
def test_claude_code_order_equals_the_plain_rule(links):
    """File order is kept exactly when no parent comes after its child; else the plain rule decides."""
    records = tuple(Record(i + 1, {"uuid": uuid, "parentUuid": parent}, 10) for i, (uuid, parent) in enumerate(links))
    order = _order(_links(records))  # None: file order
    assert [records[i].line for i in (range(len(records)) if order is None else order)] == [r.line for r in _ordered_plain(records)]


def _anthropic_lines(n: int) -> list[bytes]:
    return [orjson.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}) for i in range(n)]


def test_a_bad_record_after_the_sniffed_ones_is_an_error_naming_its_line(tmp_path):
    lines = _anthropic_lines(SNIFF_RECORDS + 20)
    lines[SNIFF_RECORDS + 10] = orjson.dumps({"role": "narrator", "content": "hi"})
    path = tmp_path / "long.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(MalformedLineError) as caught:
        read_session(path)
    assert caught.value.line == SNIFF_RECORDS + 11


@pytest.mark.parametrize(("count", "bad"), [(4, 2), (40, 30), (40, 0)])
def test_a_bad_record_among_the_sniffed_ones_is_an_error_naming_its_line_and_rule(tmp_path, count, bad):
    """A message list with one record of another role is read as one (not refused as a whole): the
    record is an error naming its line and the rule it breaks, and --lenient skips it; the file is
    not modified."""
    lines = _anthropic_lines(count)
    lines[bad] = orjson.dumps({"role": "robot", "content": "hi"})
    path = tmp_path / "one_bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    before = path.read_bytes()
    with pytest.raises(MalformedLineError) as caught:
        read_session(path)
    assert caught.value.line == bad + 1 and "role must be 'user' or 'assistant', not 'robot'" in str(caught.value)
    session = read_session(path, lenient=True)
    assert session.format == "anthropic" and len(session.messages) == count - 1
    assert session.skipped_line_numbers == (bad + 1,) and path.read_bytes() == before


def test_a_real_message_list_with_one_odd_record_names_it(tmp_path):
    """Cline's API history (../shared) with one record's role changed: an error naming that line, and
    --lenient reads every other message."""
    from tests.conftest import SESSIONS

    real = SESSIONS / "anthropic_messages" / "cline_api_history_cardgame.jsonl"
    if not real.is_file():
        pytest.skip("../shared/sessions/anthropic_messages is absent")
    lines = real.read_bytes().splitlines()
    record = orjson.loads(lines[6])
    record["role"] = "narrator"
    lines[6] = orjson.dumps(record)
    path = tmp_path / real.name
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(MalformedLineError) as caught:
        read_session(path)
    assert caught.value.line == 7 and "not 'narrator'" in str(caught.value)
    whole, lenient = read_session(real), read_session(path, lenient=True)
    assert lenient.format == whole.format == "anthropic" and lenient.skipped_line_numbers == (7,)
    assert len(lenient.messages) < len(whole.messages)


def test_a_file_of_mostly_other_records_is_still_refused(tmp_path):
    lines = _anthropic_lines(2) + [orjson.dumps({"seq": i, "kind": "log"}) for i in range(3)]
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(UnknownFormatError):
        read_session(path)


def test_an_openai_trait_after_the_sniffed_records_still_selects_openai(tmp_path):
    lines = _anthropic_lines(SNIFF_RECORDS + 4)
    lines.append(orjson.dumps({"role": "tool", "tool_call_id": "call_1", "content": "out"}))
    path = tmp_path / "late_tool.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    session = read_session(path)
    assert session.format == "openai_chat"
    assert len(session.messages) == SNIFF_RECORDS + 5


def test_blank_lines_and_crlf_are_read_as_before(tmp_path):
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(b'{"role": "user", "content": "a"}\r\n\n   \n{"role": "assistant", "content": "b"}\r\n')
    session = read_session(path)
    assert [m.text for m in session.messages] == ["a", "b"]
    assert [m.line for m in session.messages] == [1, 4]


def test_bulk_allocation_restores_the_collector():
    assert gc.isenabled()
    with bulk_allocation():
        assert not gc.isenabled()
        with bulk_allocation():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with bulk_allocation():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_file_row_of_the_token_cache_counts_as_without_it(tmp_path, monkeypatch):
    """Grown, edited and shortened files: the stored row answers only unchanged positions."""
    cache = tokens.TokenCache(tmp_path / "tokens.sqlite")
    messages = [Message("user" if i % 2 == 0 else "assistant", f"text number {i} " * (i % 7 + 1)) for i in range(40)]
    plain = tokens.count_message_tokens(messages)
    counted: list[int] = []
    real = tokens.count_text_tokens
    monkeypatch.setattr(tokens, "count_text_tokens", lambda texts: counted.append(len(texts)) or real(texts))

    def counts(ms):
        return tokens.message_token_parts(ms, cache=cache, file="/x/session.jsonl").total

    assert np.array_equal(counts(messages[:30]), plain[:30])
    assert np.array_equal(counts(messages), plain)  # grown: ten new texts counted
    assert counted == [30, 10]
    edited = [*messages[:5], Message("user", "changed"), *messages[6:]]
    expected = plain.copy()
    expected[5] = real(["changed"])[0] + tokens.MESSAGE_OVERHEAD_TOKENS
    assert np.array_equal(counts(edited), expected)
    assert counted == [30, 10, 1]
    assert np.array_equal(counts(messages[:12]), plain[:12])  # shortened: all known, message 5 from the key table
    assert counted == [30, 10, 1]
    keys, stored = cache.get_file("/x/session.jsonl")
    assert len(keys) == 16 * 12 and np.array_equal(stored, plain[:12] - tokens.MESSAGE_OVERHEAD_TOKENS)
    cache.close()


def test_lenient_file_of_malformed_lines_only_is_an_empty_session(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"not json\n{also not\n\n")
    session = read_session(path, lenient=True)
    assert (session.format, session.messages, session.skipped_lines) == ("empty", (), 2)
    with pytest.raises(MalformedLineError) as caught:
        read_session(path)
    assert caught.value.line == 1


def test_lenient_malformed_lines_are_counted_once_though_read_twice(tmp_path):
    lines = _anthropic_lines(6)
    lines[3] = b'{"role": "assis'
    path = tmp_path / "one_bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    session = read_session(path, lenient=True)  # sniffed, then read: line 4 parsed twice
    assert (len(session.messages), session.skipped_lines) == (5, 1)


def _claude_line(uuid: str, parent: str | None, kind: str, content) -> bytes:
    message = {"role": kind, "content": content}
    if kind == "assistant":
        message |= {"id": f"msg_{uuid}", "model": "claude-sonnet-4-5", "usage": {"input_tokens": 5, "output_tokens": 1}}
    return orjson.dumps({"type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s", "message": message})


def test_claude_code_record_written_before_its_parent_is_read_after_it(tmp_path):
    """Read in one pass when the file order holds; read again in parent order when a child comes first."""
    lines = [
        _claude_line("u1", None, "user", "first question"),
        _claude_line("a2", "u2", "assistant", [{"type": "text", "text": "second answer"}]),  # its parent comes next
        _claude_line("u2", "a1", "user", "second question"),
        _claude_line("a1", "u1", "assistant", [{"type": "text", "text": "first answer"}]),
    ]
    path = tmp_path / "out_of_order.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    texts = [m.text for m in read_session(path).messages]
    assert texts == ["first question", "first answer", "second question", "second answer"]
    path.write_bytes(b"\n".join([lines[0], lines[3], lines[2], lines[1]]) + b"\n")
    assert [m.text for m in read_session(path).messages] == texts


@pytest.mark.parametrize("late", [b"[1, 2]", b'"text"', b'{"type": "summary", "summary": "x"}'])
def test_a_non_message_after_the_sniffed_records_is_named_by_line(tmp_path, late):
    lines = _anthropic_lines(SNIFF_RECORDS + 3)
    lines.append(late)
    path = tmp_path / "late.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(MalformedLineError) as caught:
        read_session(path)
    assert caught.value.line == SNIFF_RECORDS + 4
    assert len(read_session(path, lenient=True).messages) == SNIFF_RECORDS + 3


def _shared_sessions():
    from dp_compact.io import session_files
    from tests.conftest import SESSIONS

    return session_files(SESSIONS) if SESSIONS.is_dir() else []


@pytest.mark.skipif(not _shared_sessions(), reason="../shared/sessions is absent")
@pytest.mark.parametrize("path", _shared_sessions(), ids=lambda p: p.name)
@pytest.mark.slow
def test_raw_kept_as_json_plans_as_the_parsed_raw(path, tmp_path, monkeypatch):
    """Reading to plan keeps each message's source as JSON text; the plan is the same to the digit."""
    from dp_compact.api import plan_session
    from dp_compact.conversation import RawJSON
    from dp_compact.errors import NotASessionError
    from dp_compact.settings import Settings

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    try:
        parsed = read_session(path)
    except NotASessionError:
        pytest.skip(f"{path.name} is not a conversation")
    text = read_session(path, raw_json=True)
    assert all(isinstance(m.raw, RawJSON) for m in text.messages if m.raw is not None)
    assert any(m.raw is not None for m in text.messages)
    assert text.messages == parsed.messages
    settings = Settings()
    assert plan_session(text, settings).to_dict() == plan_session(parsed, settings).to_dict()


def test_claude_code_non_object_line_is_an_error_in_either_order(tmp_path):
    """A ``null`` line is named by its line whether the file is read in file order or reordered."""
    lines = [_claude_line("u1", None, "user", "q"), b"null", _claude_line("a1", "u1", "assistant", [{"type": "text", "text": "a"}])]
    path = tmp_path / "null.jsonl"
    for body in (lines, [lines[0], lines[1], _claude_line("a0", "u9", "assistant", []), _claude_line("u9", "u1", "user", "x")]):
        path.write_bytes(b"\n".join(body) + b"\n")
        with pytest.raises(MalformedLineError) as caught:
            read_session(path)
        assert caught.value.line == 2


def test_raw_kept_for_planning_is_whole_only_where_blocks_need_it():
    from dp_compact.conversation import RawJSON, raw_as_json, raw_value

    png = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with raw_as_json():
        plain = Message("assistant", "long answer " * 50, raw={"role": "assistant", "content": [{"type": "text", "text": "long answer " * 50}]})
        typed = Message("user", "hello", raw={"role": "user", "content": "hello"})
        picture = Message("user", "see", images=1, raw={"role": "user", "content": [{"type": "text", "text": "see"}, png]})
        with raw_as_json(whole=True):
            whole = Message("assistant", "a", raw={"role": "assistant", "content": [{"type": "text", "text": "a"}]})
    assert raw_value(plain.raw) == {"content": []} and raw_value(typed.raw) == {"content": ""}
    with raw_as_json():
        again = Message("assistant", "other", raw={"role": "assistant", "content": [{"type": "text", "text": "other"}]})
    assert isinstance(plain.raw, RawJSON) and again.raw is plain.raw  # one shared shape, not a copy per message
    assert raw_value(picture.raw)["content"][1] == png and len(find_images(picture.raw)) == 1
    assert raw_value(whole.raw) == {"role": "assistant", "content": [{"type": "text", "text": "a"}]}
    outside = Message("user", "x", raw={"role": "user", "content": "x"})
    assert outside.raw == {"role": "user", "content": "x"}


def test_fleet_inputs_refuse_a_local_path_that_is_not_there(tmp_path):
    from dp_compact.errors import SessionError
    from dp_compact.fleet.inputs import list_inputs

    with pytest.raises(SessionError, match="cannot read the file"):
        list_inputs([tmp_path / "absent"])


def test_invalid_json_error_names_the_line_and_the_column_in_it(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"role": "user", "content": "a"}\n{"role": "assi\n')
    with pytest.raises(MalformedLineError, match=r"bad\.jsonl:2: line 2 is not valid JSON \(.+ at column \d+\)$"):
        read_session(path)



def _claude_code_sessions():
    from tests.conftest import SESSIONS

    folder = SESSIONS / "claude_code"
    return sorted(folder.glob("*.jsonl")) if folder.is_dir() else []


@pytest.mark.skipif(not _claude_code_sessions(), reason="../shared/sessions/claude_code is absent")
@pytest.mark.parametrize("path", _claude_code_sessions(), ids=lambda p: p.name)
@pytest.mark.slow
def test_real_claude_code_transcripts_read_as_the_two_pass_rule_searching_on_only_for_a_far_parent(path, monkeypatch):
    """Each real transcript reads as the plain two-pass rule reads it. Where every held-back
    record's parent is a uuid in the bytes just after it (a tool result written a few lines before
    its call), the rest of the file is not searched at all; else it is."""
    import dp_compact.sessions.claude_code as claude_code
    from dp_compact.sessions.source import NEAR_BYTES, Records, read_source

    searches, near = [], []
    for name in ("absent_after", "plain_values_after"):
        method = getattr(Records, name)
        monkeypatch.setattr(Records, name, lambda self, *a, _m=method, _n=name: searches.append(_n) or _m(self, *a))
    soon = Records.spelled_soon
    monkeypatch.setattr(Records, "spelled_soon", lambda self, *a: near.append(found := soon(self, *a)) or found)
    one_pass = read_session(path).history
    assert (searches == []) == all(near), (near, searches)
    ends = np.cumsum([len(line) + 1 for line in path.read_bytes().split(b"\n")])  # byte after each line's break
    uuid_line = {}
    for record in read_source(path).records:
        if isinstance(record.value, dict) and isinstance(record.value.get("uuid"), str):
            uuid_line.setdefault(record.value["uuid"], record.line)
    seen, dangling = set(), []  # (line, its parent's line or None) of each record written before its parent
    for record in read_source(path).records:
        value = record.value if isinstance(record.value, dict) else {}
        parent = value.get("parentUuid")
        if isinstance(parent, str) and parent not in seen and parent in uuid_line:
            dangling.append((record.line, uuid_line[parent]))
        if isinstance(value.get("uuid"), str):
            seen.add(value["uuid"])
    if dangling and all(far > line and ends[far - 1] - ends[line - 1] < NEAR_BYTES for line, far in dangling):
        assert near and all(near) and searches == []

    def two_passes(records, *rest):
        raise claude_code._ParentLater
        yield  # a generator, as _reading_order is

    monkeypatch.setattr(claude_code, "_reading_order", two_passes)
    assert one_pass == read_session(path).history
