"""The fast paths of reading a session give what the plain rules give.

Each test here checks a shortcut of the planning read against the rule it stands for: a file
read a piece at a time against the same file held whole, the one-pass Claude Code order against
the two-pass one, the factored block markers against both marker patterns, the prefix checks of
user-message kinds against the plain ones, the one-step usage object against the general one, the
Cline results linked as they are read against the old positional rule.
"""

from __future__ import annotations

import re
import uuid

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import dp_compact.sessions.source as source_module
from dp_compact.conversation import BLOCK_MARKERS, MARKER_WORDS, WALK_FROM_BYTES, Message, ToolCall, ToolResult, raw_as_json, raw_value, unmarked
from dp_compact.measure.documents import DOCUMENT_MARKERS
from dp_compact.errors import MalformedLineError
from dp_compact.measure.images import IMAGE_MARKERS
from dp_compact.text.patterns import INJECTED_PREFIXES, _CONTEXT_BLOCK, is_injected_text
from dp_compact.sessions import read_session
from dp_compact.sessions.anthropic import answers_by_position, message_from_anthropic
from dp_compact.sessions.claude_code import _links, _order
from dp_compact.sessions.source import Records, read_source
from dp_compact.sessions.usage import usage_from_api
from dp_compact.text.summary_text import SUMMARY_PREFIXES, is_summary_text
from dp_compact.measure.tokens import _key

# --- a file read in pieces -------------------------------------------------------------------


def _lines(draw_parts: list[bytes], ending: str, bom: bool, broken: bool) -> bytes:
    body = b"\n".join(draw_parts)
    body += {"newline": b"\n", "none": b"", "partial": b'\n{"role": "us'}[ending]
    if broken and draw_parts:
        body = body.replace(b"}", b"", 1)
    return (b"\xef\xbb\xbf" if bom else b"") + body


_PART = st.one_of(
    st.builds(lambda n, i: orjson.dumps({"role": "user", "content": "x" * n, "i": i}), st.integers(0, 900), st.integers(0, 99)),
    st.sampled_from([b"", b"   \t", b'  {"a": 1}', b"\r"]),
)


def _read_all(path, piece: int, lenient: bool, monkeypatch) -> tuple:
    """Everything a reader can ask of the records of ``path`` read with pieces of ``piece`` bytes."""
    monkeypatch.setattr(source_module, "PIECE_BYTES", piece)
    monkeypatch.setattr(source_module, "BINARY_SNIFF_BYTES", 4)  # the first piece is a piece too
    try:
        source = read_source(path, lenient=lenient)
    except MalformedLineError as exc:
        return ("error", exc.line)
    records = source.records
    assert records is not None
    try:
        forward = [(r.line, r.value, r.nbytes) for r in records]
        values = list(records.values())
        backward = [records[i].line for i in range(len(records) - 1, -1, -1)] if not lenient else []
        head = [r.line for r in records[:5]]
    except MalformedLineError as exc:
        return ("error", exc.line)
    return forward, values, backward, head, len(records), source.partial_line, source.nbytes, source.skipped


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_PART, max_size=30), st.sampled_from(["newline", "none", "partial"]), st.booleans(), st.booleans(), st.booleans())
def test_a_file_read_in_pieces_reads_as_the_file_held_whole(tmp_path, monkeypatch, parts, ending, bom, broken, lenient):
    """Lines, values, numbers, sizes, a half-written last line and malformed lines are the same
    whether the file is held whole or read a few bytes at a time, forwards, backwards or sliced."""
    path = tmp_path / "session.jsonl"
    path.write_bytes(_lines(parts, ending, bom, broken))
    whole = _read_all(path, 1 << 22, lenient, monkeypatch)
    for piece in (1, 60, 700):
        assert _read_all(path, piece, lenient, monkeypatch) == whole


def _long_session(n: int) -> bytes:
    return b"\n".join(orjson.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "x" * 200})
                      for i in range(n)) + b"\n"


def test_a_large_file_is_not_held_whole(tmp_path, monkeypatch):
    """Past the piece size the records hold one piece of the file, not its whole text."""
    monkeypatch.setattr(source_module, "PIECE_BYTES", 10_000)
    path = tmp_path / "long.jsonl"
    path.write_bytes(_long_session(2_000))
    records = read_source(path).records
    assert isinstance(records, Records) and records._whole is None
    assert len(list(records)) == 2_000
    assert records._piece is not None and len(records._piece[1]) < 20_000
    assert [m.text.split()[1] for m in read_session(path).messages][-1] == "1999"


def test_a_file_rewritten_while_it_is_read_is_an_error_not_a_wrong_reading(tmp_path, monkeypatch):
    from dp_compact.errors import SessionError

    monkeypatch.setattr(source_module, "PIECE_BYTES", 10_000)
    path = tmp_path / "long.jsonl"
    path.write_bytes(_long_session(500))
    records = read_source(path).records
    path.write_bytes(_long_session(30))  # truncated and written anew
    with pytest.raises(SessionError, match="rewritten while it was read"):
        list(records)


def test_a_file_that_grows_while_it_is_read_is_read_as_it_was(tmp_path, monkeypatch):
    monkeypatch.setattr(source_module, "PIECE_BYTES", 10_000)
    path = tmp_path / "long.jsonl"
    path.write_bytes(_long_session(500))
    records = read_source(path).records
    with path.open("ab") as file:
        file.write(_long_session(3))
    assert len(list(records)) == 500


# --- the Claude Code order in one pass --------------------------------------------------------

_IDS = ["a", "b", "c", "d", "e", "A", "caf\u00e9"]


def _claude_line(uid, parent, n, nested=None):
    """A user record; ``nested``: an id it names in other keys too (a ``uuid`` deeper in the record
    and ``sourceToolAssistantUUID``), which a search of the bytes finds but which is no record's uuid."""
    record = {"type": "user", "message": {"role": "user", "content": f"prompt {n}"}, "uuid": uid, "parentUuid": parent,
              "sessionId": "s"}
    if nested is not None:
        record |= {"toolUseResult": {"uuid": nested}, "sourceToolAssistantUUID": nested}
    return orjson.dumps(record)


def _escaped(line: bytes, uid) -> bytes:
    """The line with its uuid spelled with an escape of its first letter (``\\u0061`` for ``a``)."""
    if not isinstance(uid, str) or not uid or not uid[0].isascii():
        return line
    return line.replace(b'"uuid":"' + uid.encode(), b'"uuid":"\\u%04x' % ord(uid[0]) + uid[1:].encode(), 1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from([*_IDS, None]), st.sampled_from([*_IDS, None, "gone"]), st.booleans(),
                          st.sampled_from([None, None, "gone", *_IDS])), max_size=9),
       st.integers(0, 4))
def test_claude_code_read_in_one_pass_orders_as_the_two_pass_rule(tmp_path, monkeypatch, links, pad):
    """Whatever the links (parents later, missing, their own, repeated, spelled with escapes, named
    deeper in a later record only, in one piece or many), the messages come in the order of :func:`_order`."""
    monkeypatch.setattr(source_module, "PIECE_BYTES", 64)
    monkeypatch.setattr(source_module, "BINARY_SNIFF_BYTES", 4)
    lines = [_claude_line(uid, parent, n, nested) for n, (uid, parent, _, nested) in enumerate(links)]
    lines = [_escaped(line, uid) if escape else line for line, (uid, _, escape, _) in zip(lines, links, strict=True)]
    lines += [_claude_line(None, None, 100 + i) for i in range(pad)]
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    records = read_source(path).records
    order = _order(_links(records))
    expected = [records[i].value["message"]["content"] for i in (range(len(records)) if order is None else order)]
    assert [m.text for m in read_session(path).history] == expected


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(['"uuid"', '"xuuid"', '"uuidx"', ":", " ", "\n", "\t", '"a"', '"ab"', ",", "{", "}", "1"]), max_size=14),
       st.sampled_from(["a", "ab", "b"]), st.integers(0, 3), st.integers(1, 400))
def test_a_key_spelled_with_a_value_is_found_as_json_parsing_would_find_it(tmp_path, monkeypatch, tokens, text, first, near):
    """``spelled_soon`` finds ``"uuid": "<text>"`` exactly where the pattern of
    :meth:`Records.plain_values_after` does in the lines after the one asked about (white space around
    the colon; a key that only ends as ``uuid`` does not count), within its bytes only."""
    monkeypatch.setattr(source_module, "NEAR_BYTES", near)
    body = "".join(tokens).replace("\n", " ")
    lines = [b'{"n": 0}', b'{"n": 1, "uuid": "ab"}', ('{"v": [' + body.replace("{", "[").replace("}", "]") + ']}').encode(), b'{"n": 3}']
    path = tmp_path / "lines.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    records = read_source(path).records
    after = b"\n".join(lines[first + 1 :])  # the bytes after line first + 1 and its line break
    pattern = re.compile(rb'"uuid"\s*:\s*"' + re.escape(text.encode()) + b'"')
    found = pattern.search(after)
    soon = found is not None and found.end() <= near - 1  # spelled_soon's bytes start at the line break
    assert records.spelled_soon(first + 1, "uuid", text) is soon
    monkeypatch.setattr(source_module, "NEAR_BYTES", 1 << 18)
    assert records.spelled_soon(first + 1, "uuid", text) is (found is not None)
    assert records.spelled_soon(first + 1, "uuid", 'say "a"') is False


def test_claude_code_children_before_their_parent_are_read_in_one_pass(tmp_path, monkeypatch):
    """A first record whose parent is in an earlier file, a child written before its parent, and a
    parent named later only by another key (``sourceToolAssistantUUID``) are read in one pass; a
    parent named later only by a ``uuid`` deeper in a record takes the two passes, in the same order."""
    import dp_compact.sessions.claude_code as claude_code

    calls = []
    monkeypatch.setattr(claude_code, "_links", lambda records: calls.append(1) or _links(records))
    ids = [str(uuid.UUID(int=i + 1)) for i in range(6)]
    lines = [_claude_line(ids[0], str(uuid.UUID(int=999)), 0), *(_claude_line(ids[i], ids[i - 1], i) for i in range(1, 6))]
    path = tmp_path / "resumed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert [m.text for m in read_session(path).messages] == [f"prompt {i}" for i in range(6)]
    path.write_bytes(b"\n".join([lines[0], lines[2], lines[1], *lines[3:]]) + b"\n")  # a child before its parent
    assert [m.text for m in read_session(path).messages] == [f"prompt {i}" for i in range(6)]
    path.write_bytes(b"\n".join([lines[0], lines[4], lines[1], lines[2], lines[3], lines[5]]) + b"\n")  # a grandchild too
    assert [m.text for m in read_session(path).messages] == [f"prompt {i}" for i in range(6)]
    gone = str(uuid.UUID(int=998))
    naming = _claude_line(ids[4], ids[3], 4, nested=gone)
    named = [lines[0], _claude_line(ids[1], gone, 1), *lines[2:4], naming.replace(b'{"uuid"', b'{"id"'), lines[5]]
    path.write_bytes(b"\n".join(named) + b"\n")
    assert [m.text for m in read_session(path).messages] == [f"prompt {i}" for i in range(6)]
    assert calls == []
    deeper = [*named[:4], naming.replace(b'"sourceToolAssistantUUID"', b'"origin"'), named[5]]
    path.write_bytes(b"\n".join(deeper) + b"\n")
    assert [m.text for m in read_session(path).messages] == [f"prompt {i}" for i in range(6)]
    assert calls == [1]


# --- marker and kind rules ---------------------------------------------------------------------

_MARKER_WORDS = sorted({w for p in (IMAGE_MARKERS, DOCUMENT_MARKERS) for w in re.findall(r"[A-Za-z_]+", p.pattern.decode())})


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([*_MARKER_WORDS, "image_", "imag", "files", "input", "in", '"', "\\", " ", "x", ":", "Data"]),
                max_size=8))
def test_factored_block_markers_match_exactly_where_either_pattern_does(pieces):
    text = "".join(pieces).encode()
    either = IMAGE_MARKERS.search(text) is not None or DOCUMENT_MARKERS.search(text) is not None
    assert (BLOCK_MARKERS.search(text) is not None) == either


def test_every_marker_word_is_a_block_marker():
    assert _MARKER_WORDS and all(BLOCK_MARKERS.fullmatch(b'"' + w.encode() + b'"') for w in _MARKER_WORDS)


def test_the_marker_words_are_the_words_of_both_patterns():
    assert MARKER_WORDS == set(_MARKER_WORDS)


_WORDISH = st.sampled_from([*_MARKER_WORDS, "image_", "files", "type", "text", "", '"image"', "file\\", "a file"])
_JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), _WORDISH, st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.one_of(_WORDISH, st.text(max_size=8)), inner, max_size=4)),
    max_leaves=25,
)


@settings(max_examples=600, deadline=None)
@given(_JSONISH)
def test_a_walk_without_markers_agrees_with_the_search_of_the_json_text(value):
    """:func:`unmarked` is sure only where the search of the written JSON finds no marker, and
    sure wherever the value is plain JSON of shallow nesting without any marker word."""
    try:
        text = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # integers past 64 bits
        assert not unmarked(value)
        return
    searched = BLOCK_MARKERS.search(text) is None
    if unmarked(value):
        assert searched
    else:
        assert not searched or _depth(value) >= 6


def _depth(value, level=0):
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


_TEXTISH = st.one_of(_WORDISH, st.text(max_size=12))
_BLOCKS = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": _TEXTISH}, optional={"cache_control": _JSONISH}),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": _TEXTISH, "name": _TEXTISH, "input": _JSONISH}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": _TEXTISH, "content": st.one_of(_TEXTISH, _JSONISH)},
                          optional={"is_error": st.booleans()}),
    st.fixed_dictionaries({"type": st.sampled_from(["image", "document", "thinking", "server_tool_use", "web_search_tool_result"])},
                          optional={"source": _JSONISH, "text": _TEXTISH}),
    _JSONISH,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["user", "assistant"]), st.one_of(_TEXTISH, st.lists(_BLOCKS, max_size=4)))
@example("user", [{"type": "text", "text": 'say "image'}])
@example("assistant", [{"type": "tool_use", "id": "t1", "name": "file", "input": {}}])
@example("assistant", [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"type": "image", "source": {}}}])
def test_a_message_read_keeps_the_shape_only_where_the_search_finds_no_marker(role, content):
    """Read to be planned, a ``{role, content}`` message keeps only its shape where its JSON text
    holds no image or document marker, found by the reader's walk of its blocks or by the search."""
    raw = {"role": role, "content": content}
    try:
        text = orjson.dumps(raw, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # integers past 64 bits: not JSON
        return
    with raw_as_json():
        kept = message_from_anthropic(raw).raw
    shape = {"content": [] if isinstance(content, list) else ""}
    if BLOCK_MARKERS.search(text) is None:
        assert raw_value(kept) == shape
    elif not unmarked(raw) and _depth(raw) < 6:  # a marker word as a key or string: kept whole, its blocks searched later
        assert bytes(kept) == text
    else:  # a quote before a word (`say "image`) that the search takes for a marker: either is right
        assert bytes(kept) == text or raw_value(kept) == shape


@pytest.mark.parametrize("content", ["plain words " * 200, [{"type": "tool_result", "tool_use_id": "t", "content": "x = \"a\"\n" * 300}],
                                     [{"type": "image", "source": {"type": "base64", "data": "AAAA"}}, {"type": "text", "text": "see"}]])
def test_a_large_message_keeps_the_same_raw_walked_as_searched(content):
    raw = {"role": "user", "content": content}
    with raw_as_json():
        walked = Message("user", "t", raw=raw, source_bytes=WALK_FROM_BYTES)
        searched = Message("user", "t", raw=raw, source_bytes=WALK_FROM_BYTES - 1)
    assert walked.raw == searched.raw and raw_value(walked.raw) == raw_value(searched.raw)


def _plain_injected(text: str) -> bool:
    stripped = text.lstrip()
    return stripped.startswith(INJECTED_PREFIXES) or (bool(stripped) and not _CONTEXT_BLOCK.sub("", stripped).strip())


def _plain_summary(text: str) -> bool:
    head = text[:4096].lstrip()[:120]
    return any(head.startswith(prefix) for prefix in SUMMARY_PREFIXES)


_OPENINGS = st.sampled_from([*INJECTED_PREFIXES, *SUMMARY_PREFIXES, "<system-reminder>x</system-reminder>", "<ide_opened>f</ide_opened>",
                             "fix it", "<", "", "\n"])


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 5000), st.lists(_OPENINGS, max_size=3), st.sampled_from([" ", "\n", "\t"]))
def test_user_message_kind_checks_equal_the_plain_rules(spaces, openings, space):
    """Long leading white space included (the checks look at a text's opening only)."""
    text = space * spaces + "".join(openings)
    assert is_injected_text(text) == _plain_injected(text)
    assert is_summary_text(text) == _plain_summary(text)


# --- usage, Cline results, cache keys -----------------------------------------------------------

_COUNT = st.one_of(st.integers(-2, 10**7), st.none(), st.booleans(), st.sampled_from([3.0, 2.5, "12", "x"]))
_USAGE_KEYS = ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "prompt_tokens",
               "completion_tokens", "cached_input_tokens"]


class _Count(int):
    """An int that the one-step path of :func:`usage_from_api` does not take (it wants exact ints)."""


def _general_usage(usage, line):
    """:func:`usage_from_api` by its general path: every count through :func:`token_count`."""
    return usage_from_api({k: _Count(v) if type(v) is int else v for k, v in usage.items()}, line)


@settings(max_examples=500, deadline=None)
@given(st.one_of(
    st.dictionaries(st.sampled_from(_USAGE_KEYS), _COUNT, max_size=5),
    st.fixed_dictionaries({k: _COUNT for k in _USAGE_KEYS[:4]}, optional={k: _COUNT for k in _USAGE_KEYS[4:]}),
    st.fixed_dictionaries({k: st.integers(-2, 10**7) for k in _USAGE_KEYS[:4]}),  # the one-step shape, a count below 0 included
))
def test_one_step_usage_equals_the_general_reading(usage):
    try:
        expected = _general_usage(usage, 7)
    except ValueError as exc:
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            usage_from_api(usage, 7)
        return
    assert usage_from_api(usage, 7) == expected


_CLINE_TEXTS = st.sampled_from(["[read_file for 'a.py'] Result:\nok", "[execute_command] Result: done", "[other] Result: x", "go on"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(
    st.builds(lambda name: {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": name, "input": {}}]},
              st.sampled_from(["read_file", "execute_command"])),
    st.builds(lambda text: {"role": "user", "content": [{"type": "text", "text": text}]}, _CLINE_TEXTS),
    st.builds(lambda text: {"role": "user", "content": text}, _CLINE_TEXTS),
    st.just({"role": "assistant", "content": "thinking aloud"}),
), max_size=8))
def test_cline_results_linked_as_read_equal_the_positional_rule(tmp_path, messages):
    """Each user message answering the call before it becomes its result, as answers_by_position
    says over the messages read whole."""
    expected: list[Message] = []
    for obj in messages:
        message = message_from_anthropic(obj)
        previous = expected[-1] if expected else None
        if previous is not None and answers_by_position(previous, message):
            results = tuple(ToolResult(c.id, message.text) for c in previous.tool_calls)
            message = Message("tool", "", tool_results=results, line=message.line, source_bytes=message.source_bytes)
        expected.append(message)
    path = tmp_path / "cline.json"
    path.write_bytes(orjson.dumps(messages))
    if not messages:
        return
    got = read_session(path, raw_json=True).messages
    assert [(m.role, m.text, m.tool_results, m.kind) for m in got] == [(m.role, m.text, m.tool_results, m.kind) for m in expected]


def test_token_cache_keys_name_the_text_and_nothing_else():
    assert _key("hello") == _key("hello") and len(_key("hello")) == 16
    assert len({_key(t) for t in ["", "a", "b", "a ", "\udc80", "é"]}) == 6


def test_message_made_by_slots_is_the_dataclass_it_was():
    """Fields, defaults, kind rules, equality without raw, immutability and replace."""
    import dataclasses

    message = Message("user", "<task-notification>x</task-notification>", raw={"content": "x"})
    assert message.kind == "injected" and message.source_lines == 1 and message.tool_calls == ()
    assert message == Message("user", "<task-notification>x</task-notification>", raw=None)
    assert dataclasses.replace(message, kind="summary").kind == "summary"
    assert Message("tool", kind="prompt").kind == "tool_result"
    with pytest.raises(dataclasses.FrozenInstanceError):
        message.text = "y"  # type: ignore[misc]
    assert ToolCall("a", "b") == ToolCall("a", "b", "") and hash(ToolCall("a", "b")) == hash(ToolCall("a", "b", ""))


# --- the planning pass over the messages ------------------------------------------------------

_TEXTS = st.sampled_from(["", "a", "b c", "\n"])
_MESSAGES = st.lists(st.one_of(
    st.builds(lambda t, ids: Message("assistant", t, tuple(ToolCall(i, "run", "{}") for i in ids)), _TEXTS,
              st.lists(st.sampled_from(["c1", "c2", "c3"]), max_size=2)),
    st.builds(lambda ids, t: Message("tool", tool_results=tuple(ToolResult(i, t) for i in ids)),
              st.lists(st.sampled_from(["c1", "c2", "c3", "gone"]), min_size=1, max_size=2), _TEXTS),
    st.builds(lambda t, kind, content: Message("user", t, kind=kind, raw={"content": content}), _TEXTS,
              st.sampled_from(["prompt", "injected", "summary"]), st.sampled_from(["x", []])),
), max_size=10)


@settings(max_examples=300, deadline=None)
@given(_TEXTS, _TEXTS, st.lists(st.tuples(_TEXTS, _TEXTS), max_size=2), st.lists(_TEXTS, max_size=2))
def test_counted_text_is_the_non_empty_parts_joined(text, thinking, calls, results):
    from dp_compact.measure.tokens import message_token_text

    message = Message("assistant" if calls or not results else "tool", text, tuple(ToolCall("i", n, a) for n, a in calls),
                      tuple(ToolResult("i", r) for r in results), thinking)
    parts = [text, thinking, *[p for call in calls for p in call], *results]
    assert message_token_text(message) == "\n".join(p for p in parts if p)


def _link_in_two_passes(messages):
    """link_tool_results' second pass run whatever the first found (the rule before its early exit)."""
    later = {}
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            later.setdefault(call.id, index)
    ordered, deferred, seen = [], {}, set()
    for index, message in enumerate(messages):
        ids = [r.call_id for r in message.tool_results]
        waiting = [later[c] for c in ids if c not in seen and c in later and later[c] > index]
        if message.tool_results and message.role == "tool" and waiting and len(waiting) == len(ids):
            deferred.setdefault(min(waiting), []).append(message)
            continue
        ordered.append(message)
        seen.update(call.id for call in message.tool_calls)
        ordered.extend(deferred.pop(index, []))
    return ordered + [m for rest in deferred.values() for m in rest]


@settings(max_examples=400, deadline=None)
@given(_MESSAGES)
def test_results_after_their_calls_keep_their_order_as_the_second_pass_would(messages):
    from dp_compact.sessions.common import _unique_call_ids, link_tool_results

    assert link_tool_results(messages) == _unique_call_ids(_link_in_two_passes(messages))


@settings(max_examples=300, deadline=None)
@given(_MESSAGES)
def test_message_arrays_read_turns_and_roles_by_the_message_rules(messages):
    from dp_compact.core.cuts import ROLE_ASSISTANT, ROLE_TOOL, ROLE_USER, message_arrays

    arrays = message_arrays(messages)
    roles = [ROLE_USER if m.is_user_message else ROLE_ASSISTANT if m.role == "assistant" else ROLE_TOOL for m in messages]
    turns = [m.is_user_turn for m in messages]
    plain = [m.is_user_turn and not isinstance(m.raw["content"], list) for m in messages]
    assert arrays.roles.tolist() == roles and arrays.plain_user.tolist() == plain
    assert arrays.turn_index.tolist() == [sum(turns[: i + 1]) for i in range(len(messages))]


# --- the shared real transcripts ---------------------------------------------------------------


def _shared_jsonl():
    from dp_compact.io import session_files
    from tests.conftest import SESSIONS

    if not SESSIONS.is_dir():
        return []
    return [p for p in session_files(SESSIONS) if read_source(p).records is not None]


@pytest.mark.skipif(not _shared_jsonl(), reason="../shared/sessions is absent")
@pytest.mark.parametrize("path", _shared_jsonl(), ids=lambda p: p.name)
@pytest.mark.slow
def test_a_real_transcript_read_in_pieces_reads_as_held_whole(path, monkeypatch):
    """Every shared JSONL transcript, read 64 KB at a time, gives the same session (its messages,
    usage, counts, history) as read whole; Claude Code files in one pass as in two."""
    from dp_compact.errors import NotASessionError

    try:
        whole = read_session(path, raw_json=True)
    except NotASessionError:
        pytest.skip(f"{path.name} is not a conversation")
    monkeypatch.setattr(source_module, "PIECE_BYTES", 1 << 16)
    records = read_source(path).records
    assert path.stat().st_size <= 1 << 16 or (isinstance(records, Records) and records._whole is None)
    pieces = read_session(path, raw_json=True)
    assert pieces == whole and pieces.history == whole.history and pieces.compaction_records == whole.compaction_records
    if whole.format == "claude_code":
        import dp_compact.sessions.claude_code as claude_code

        monkeypatch.setattr(claude_code, "Records", type("NotRecords", (), {}))  # the reader takes the two-pass order
        assert read_session(path, raw_json=True).history == whole.history
