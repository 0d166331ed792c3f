"""The "used later" detector of DESIGN §6: verbatim repetition and edits after reads."""

from __future__ import annotations

import json
import string

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_compact.measure.reuse import (
    BOILERPLATE_SHARE,
    KIND_FILE_EDIT,
    KIND_VERBATIM,
    MIN_REUSE_CHARS,
    Uses,
    file_operations,
    find_uses,
)
from dp_compact.sessions import read_session
from dp_compact.conversation import Message, ToolCall, ToolResult
from tests.conftest import SESSIONS, need, session_files


def _text(seed: int, size: int = 260) -> str:
    """Random letters: no run of 10 characters recurs between two seeds."""
    rng = np.random.default_rng(seed)
    return "".join(rng.choice(list(string.ascii_letters + " "), size=size))


def _fillers(count: int, first_seed: int = 1000) -> list[Message]:
    """Unrelated user messages, so that a text in two messages is not boilerplate."""
    return [Message("user", _text(first_seed + i, 40)) for i in range(count)]


def _pairs(uses: Uses) -> list[tuple[int, int, int]]:
    return list(zip(uses.message.tolist(), uses.at.tolist(), uses.kind.tolist(), strict=True))


def _call(call_id: str, name: str, **arguments: object) -> ToolCall:
    return ToolCall(call_id, name, json.dumps(arguments))


# -- (a) verbatim -----------------------------------------------------------------------------


def test_constants_are_design_values():  # DESIGN §6
    assert MIN_REUSE_CHARS == 200 and BOILERPLATE_SHARE == 0.2 and (KIND_VERBATIM, KIND_FILE_EDIT) == (0, 1)


@pytest.mark.parametrize(("shared", "expected"), [(200, [(0, 1, KIND_VERBATIM)]), (199, [])])
def test_find_uses_verbatim_exactly_200_characters_counts_199_does_not(shared: int, expected: list):
    source = _text(1, 400)
    messages = [Message("user", source), Message("assistant", "§" + source[50 : 50 + shared] + "¶"), *_fillers(10)]
    assert _pairs(find_uses(messages)) == expected


def test_find_uses_counts_characters_not_bytes():
    source = "é€" * 150  # 300 characters, 750 UTF-8 bytes
    messages = [Message("tool", tool_results=(ToolResult("c", source),)), Message("assistant", source[:200]), *_fillers(10)]
    assert _pairs(find_uses(messages)) == [(0, 1, KIND_VERBATIM)]
    assert _pairs(find_uses([messages[0], Message("assistant", source[:199]), *_fillers(10)])) == []


def test_find_uses_latest_copy_wins():
    source = _text(2)
    messages = [
        Message("user", source),
        Message("tool", tool_results=(ToolResult("c1", "header\n" + source),)),
        Message("assistant", "as shown: " + source),
        *_fillers(12),
    ]
    assert _pairs(find_uses(messages)) == [(1, 2, KIND_VERBATIM)]


def test_find_uses_run_longer_than_window_goes_to_each_latest_holder():
    source = _text(3, 300)
    messages = [Message("user", source), Message("tool", tool_results=(ToolResult("c", source[:200]),)),
                Message("assistant", source), *_fillers(12)]
    # source[:200] is newest in message 1; the windows reaching past it only in message 0
    assert _pairs(find_uses(messages)) == [(0, 2, KIND_VERBATIM), (1, 2, KIND_VERBATIM)]


def test_find_uses_boilerplate_above_share_is_ignored_at_share_is_not():
    boiler = _text(4)
    # 3 holders of 12 messages = 25 % > 20 %: boilerplate
    many = [Message("user", boiler), Message("user", boiler + "x"), Message("assistant", boiler), *_fillers(9)]
    assert len(find_uses(many)) == 0
    # 2 holders of 10 messages = 20 %: not more than the share, so a use
    two = [Message("user", boiler), Message("assistant", boiler), *_fillers(8)]
    assert _pairs(find_uses(two)) == [(0, 1, KIND_VERBATIM)]
    assert len(find_uses(two, boilerplate_share=0.15)) == 0


def test_find_uses_only_assistant_messages_use():
    source = _text(5)
    messages = [Message("tool", tool_results=(ToolResult("c", source),)), Message("user", source), *_fillers(10)]
    assert len(find_uses(messages)) == 0


def test_find_uses_tool_call_arguments_compare_as_json_string_values():
    content = "def f(x):\n    return \"quoted\" + x\n" * 10  # newlines and quotes are escaped in the JSON text
    read = _call("r1", "Read", file_path="/a.py")
    edit = _call("e1", "Edit", file_path="/b.py", old_string=content[:220], new_string="pass")
    messages = [Message("assistant", tool_calls=(read,)), Message("tool", tool_results=(ToolResult("r1", content),)),
                Message("assistant", tool_calls=(edit,)), *_fillers(10)]
    assert _pairs(find_uses(messages)) == [(1, 2, KIND_VERBATIM)]


def test_find_uses_non_json_arguments_are_raw_text():
    source = _text(6)
    messages = [Message("user", source), Message("assistant", tool_calls=(ToolCall("p", "apply_patch", "+" + source),)), *_fillers(10)]
    assert _pairs(find_uses(messages)) == [(0, 1, KIND_VERBATIM)]


def test_find_uses_invalid_parameters_raise():
    with pytest.raises(ValueError):
        find_uses([], min_chars=0)
    with pytest.raises(ValueError):
        find_uses([], boilerplate_share=0.0)


def test_find_uses_empty_and_tiny_conversations():
    assert len(find_uses([])) == 0
    uses = find_uses([Message("user", "hi"), Message("assistant", "hi")])
    assert uses.message.dtype == np.int64 and uses.at.dtype == np.int64 and uses.kind.dtype == np.int8 and len(uses) == 0


# -- (b) edits and writes after reads ---------------------------------------------------------


def _read(index: int, path: str, name: str = "Read", **more: object) -> list[Message]:
    call = _call(f"r{index}", name, file_path=path, **more)
    return [Message("assistant", tool_calls=(call,)), Message("tool", tool_results=(ToolResult(f"r{index}", f"content {index}"),))]


def _edit(index: int, path: str, name: str = "Edit") -> list[Message]:
    call = _call(f"e{index}", name, file_path=path, old_string="a", new_string="b")
    return [Message("assistant", tool_calls=(call,)), Message("tool", tool_results=(ToolResult(f"e{index}", "ok"),))]


def test_find_uses_edit_after_read_uses_the_read_result():
    messages = [Message("user", "fix it"), *_read(1, "/src/a.py"), *_edit(2, "/src/a.py")]
    assert _pairs(find_uses(messages)) == [(2, 3, KIND_FILE_EDIT)]


def test_find_uses_edit_of_other_path_or_without_read_is_no_use():
    messages = [Message("user", "fix it"), *_read(1, "/src/a.py"), *_edit(2, "/src/b.py"), *_edit(3, "/src/c.py")]
    assert len(find_uses(messages)) == 0


def test_find_uses_fresh_read_moves_the_attribution():
    messages = [Message("user", "go"), *_read(1, "/src/a.py"), *_read(2, "/src/./a.py"), *_edit(3, "/src/a.py")]
    assert _pairs(find_uses(messages)) == [(4, 5, KIND_FILE_EDIT)]


def test_find_uses_edit_after_intermediate_write_is_not_attributed_to_the_old_read():
    messages = [Message("user", "go"), *_read(1, "/src/a.py"), *_edit(2, "/src/a.py", "Write"), *_edit(3, "/src/a.py")]
    assert _pairs(find_uses(messages)) == [(2, 3, KIND_FILE_EDIT)]


def test_find_uses_failed_read_is_no_content():
    call = _call("r1", "Read", file_path="/a.py")
    messages = [Message("assistant", tool_calls=(call,)), Message("tool", tool_results=(ToolResult("r1", "no such file", is_error=True),)),
                *_edit(2, "/a.py")]
    assert len(find_uses(messages)) == 0


def test_find_uses_verbatim_wins_over_edit_for_the_same_pair():
    content = _text(7)
    read = _call("r1", "Read", file_path="/a.py")
    edit = _call("e1", "Edit", file_path="/a.py", old_string=content, new_string="x")
    messages = [Message("assistant", tool_calls=(read,)), Message("tool", tool_results=(ToolResult("r1", content),)),
                Message("assistant", tool_calls=(edit,)), *_fillers(10)]
    assert _pairs(find_uses(messages)) == [(1, 2, KIND_VERBATIM)]


def test_find_uses_codex_relative_read_then_absolute_patch():
    read = _call("c1", "exec_command", cmd="sed -n '1,200p' backend/main.go && echo --- && nl -ba web/app.js | sed -n '1,80p'",
                 workdir="/home/u/proj")
    patch = "*** Begin Patch\n*** Update File: /home/u/proj/backend/main.go\n@@\n-a\n+b\n*** End Patch\n"
    messages = [Message("user", "go"), Message("assistant", tool_calls=(read,)), Message("tool", tool_results=(ToolResult("c1", "package main"),)),
                Message("assistant", tool_calls=(ToolCall("p1", "apply_patch", patch),))]
    assert _pairs(find_uses(messages)) == [(2, 3, KIND_FILE_EDIT)]


@pytest.mark.parametrize(
    ("call", "reads", "writes"),
    [
        (ToolCall("1", "apply_patch", "*** Begin Patch\n*** Update File: src/a.py\n@@\n*** Add File: b.md\n+x\n"
                                      "*** Delete File: old/c.txt\n*** End Patch"), [], ["/w/src/a.py", "/w/b.md", "/w/old/c.txt"]),
        (_call("2", "shell", command=["bash", "-lc", "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: x.py\n@@\n-cat y.py\n*** End Patch\nEOF"]),
         [], ["/w/x.py"]),
        (_call("3", "exec_command", cmd="cat > out.txt <<'EOF'\ncat secret.txt\nEOF"), [], ["/w/out.txt"]),
        (_call("4", "Bash", command="head -n 40 src/a.py; tail -5 /var/log/x.log | grep err"), ["/w/src/a.py", "/var/log/x.log"], []),
        (_call("5", "Bash", command="sed -i 's/a/b/' conf.ini && sed -n '/x/p' notes.md"), ["/w/notes.md"], ["/w/conf.ini"]),
        (_call("6", "str_replace_editor", command="view", path="/r/a.py"), ["/r/a.py"], []),
        (_call("7", "str_replace_based_edit_tool", command="str_replace", path="/r/a.py", old_str="a", new_str="b"), [], ["/r/a.py"]),
        (_call("8", "read_file", absolute_path="/r/../r/b.py"), ["/r/b.py"], []),
        (_call("9", "write_to_file", absolutePath="/r/c.cs", content="x"), [], ["/r/c.cs"]),
        (_call("10", "shell_command", command="Get-Content sessions\\a.json", workdir="C:\\Users\\u\\task"),
         ["C:\\Users\\u\\task\\sessions\\a.json"], []),
        (_call("11", "Bash", command="ls -la && grep -n foo a.py"), [], []),
    ],
)
def test_file_operations_recognise_reads_writes_and_patch_paths(call: ToolCall, reads: list[str], writes: list[str]):
    assert file_operations(call, "/w") == (reads, writes)


# -- properties ---------------------------------------------------------------------------------


def _leaves(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return []


def _reference_verbatim(messages: list[Message], width: int, share: float) -> set[tuple[int, int]]:
    """Rule (a) by brute force over substrings (DESIGN §6)."""
    def arguments(call: ToolCall) -> str:
        try:
            return "\n".join(_leaves(json.loads(call.arguments)))
        except ValueError:
            return call.arguments

    using = [[m.text, *map(arguments, m.tool_calls)] if m.role == "assistant" else [] for m in messages]
    sources = [[m.text, *(r.text for r in m.tool_results), *(map(arguments, m.tool_calls) if m.role == "assistant" else [])]
               for m in messages]

    def holds(index: int, window: str) -> bool:
        return any(window in text for text in sources[index])

    pairs = set()
    for at, texts in enumerate(using):
        for text in texts:
            for start in range(len(text) - width + 1):
                window = text[start : start + width]
                if sum(holds(i, window) for i in range(len(messages))) > share * len(messages):
                    continue
                earlier = [i for i in range(at) if holds(i, window)]
                if earlier:
                    pairs.add((earlier[-1], at))
    return pairs


_SMALL_TEXT = st.text(alphabet="ab", max_size=14)


@st.composite
def _small_conversations(draw: st.DrawFn) -> list[Message]:
    messages = []
    for index in range(draw(st.integers(1, 9))):
        role = draw(st.sampled_from(["user", "assistant", "tool"]))
        if role == "tool":
            messages.append(Message("tool", tool_results=tuple(ToolResult(f"c{index}{k}", draw(_SMALL_TEXT)) for k in range(draw(st.integers(1, 2))))))
        elif role == "assistant":
            calls = []
            for k in range(draw(st.integers(0, 2))):
                arguments = json.dumps({"a": draw(_SMALL_TEXT), "b": [draw(_SMALL_TEXT)]}) if draw(st.booleans()) else draw(_SMALL_TEXT)
                calls.append(ToolCall(f"k{index}{k}", "bash", arguments))
            messages.append(Message("assistant", draw(_SMALL_TEXT), tool_calls=tuple(calls)))
        else:
            messages.append(Message("user", draw(_SMALL_TEXT)))
    return messages


@settings(max_examples=300, deadline=None)
@given(_small_conversations(), st.integers(1, 5), st.sampled_from([0.2, 0.5, 1.0]))
def test_find_uses_verbatim_equals_brute_force(messages: list[Message], width: int, share: float):
    uses = find_uses(messages, min_chars=width, boilerplate_share=share)
    assert set(zip(uses.message.tolist(), uses.at.tolist(), strict=True)) == _reference_verbatim(messages, width, share)
    assert np.all(uses.kind == KIND_VERBATIM)


@settings(max_examples=100, deadline=None)
@given(_small_conversations(), st.integers(1, 4))
def test_find_uses_arrays_sorted_unique_read_only(messages: list[Message], width: int):
    uses = find_uses(messages, min_chars=width, boilerplate_share=1.0)
    keys = uses.at * (len(messages) + 1) + uses.message
    assert np.all(np.diff(keys) > 0) and np.all(uses.message < uses.at)
    with pytest.raises(ValueError):
        uses.message[:1] = 0


# -- real transcripts ---------------------------------------------------------------------------


@pytest.mark.slow
def test_find_uses_real_sessions_point_backwards_from_assistant_messages():
    files = session_files()
    if not files:
        need(SESSIONS)
    total = 0
    for path in files:
        if path.name == "cline_ui_messages_cardgame.json":  # a UI log, not a conversation
            continue
        session = read_session(path)
        messages = session.history or session.messages
        uses = find_uses(messages)
        total += len(uses)
        assert np.all(uses.message < uses.at), path.name
        assert all(messages[a].role == "assistant" for a in uses.at.tolist()), path.name
        keys = uses.at * (len(messages) + 1) + uses.message
        assert np.all(np.diff(keys) > 0), path.name
    assert total > 100


@pytest.mark.parametrize("name", ["claude_code/cc_task43_develop.jsonl", "codex/codex_pharma_2compactions.jsonl"])
@pytest.mark.slow
def test_find_uses_real_coding_sessions_have_edit_after_read_uses(name: str):
    session = read_session(need(SESSIONS / name))
    messages = session.history or session.messages
    uses = find_uses(messages)
    edits = uses.kind == KIND_FILE_EDIT
    assert edits.sum() >= 1 and (uses.kind == KIND_VERBATIM).sum() >= 1
    for source in uses.message[edits].tolist():  # the read result a file edit goes back to
        assert messages[source].tool_results, source
