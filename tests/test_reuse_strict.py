"""The strict "used later" detector of DESIGN §9: paths, identifiers and commands named again."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_compact.conversation import Message, ToolCall, ToolResult
from dp_compact.measure.reuse import KIND_TERM, KIND_VERBATIM, MIN_TERM_CHARS, find_uses, message_terms
from dp_compact.sessions import read_session
from tests.conftest import need, session_files


def _pairs(uses) -> set[tuple[int, int, int]]:
    return set(zip(uses.message.tolist(), uses.at.tolist(), uses.kind.tolist(), strict=True))


def _fillers(count: int) -> list[Message]:
    return [Message("user", f"note number {i} about nothing in particular") for i in range(count)]


def test_a_path_named_again_uses_its_latest_earlier_mention() -> None:
    messages = [
        Message("assistant", tool_calls=(ToolCall("c1", "Read", json.dumps({"file_path": "src/app/config_loader.py"})),)),
        Message("tool", tool_results=(ToolResult("c1", "def load_settings_file(path): ..."),)),
        *_fillers(10),
        Message("assistant", "The bug is in load_settings_file; see src/app/config_loader.py"),
    ]
    strict = _pairs(find_uses(messages, detector="strict"))
    at = len(messages) - 1
    assert strict == {(0, at, KIND_TERM), (1, at, KIND_TERM)}  # the path's latest mention: the call; the identifier's: the result
    assert _pairs(find_uses(messages)) == set()  # the lenient rule sees nothing: no 200 characters repeated


def test_a_command_run_again_uses_the_message_that_ran_it() -> None:
    run = ToolCall("c1", "Bash", json.dumps({"command": "pytest  -x tests/unit"}))
    again = ToolCall("c2", "Bash", json.dumps({"command": "pytest -x  tests/unit"}))
    messages = [Message("assistant", tool_calls=(run,)), Message("tool", tool_results=(ToolResult("c1", "ok"),)), *_fillers(10),
                Message("assistant", tool_calls=(again,))]
    assert (0, len(messages) - 1, KIND_TERM) in _pairs(find_uses(messages, detector="strict"))


def test_terms_held_by_too_many_messages_are_boilerplate() -> None:
    messages = [Message("user", "working in repo_root_dir now"), *[Message("user", "repo_root_dir again") for _ in range(5)],
                Message("assistant", "back to repo_root_dir")]
    assert _pairs(find_uses(messages, detector="strict")) == set()


def test_short_identifiers_do_not_count() -> None:
    assert message_terms("use x_y and ab_cd here") == set()
    assert len("load_x") == MIN_TERM_CHARS and message_terms("call load_x") == {"load_x"}


def test_unknown_detector_is_refused() -> None:
    with pytest.raises(ValueError, match="detector"):
        find_uses([], detector="lenient")


@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool"]),
                          st.lists(st.sampled_from(["alpha_beta", "src/a.py", "GammaDelta", "plain words", "x" * 210]), max_size=4)),
                max_size=14))
@settings(max_examples=60, deadline=None)
def test_strict_finds_every_lenient_use_and_only_earlier_messages(spec: list[tuple[str, list[str]]]) -> None:
    messages = [Message(role, " ".join(words)) if role != "tool" else Message("tool", tool_results=(ToolResult("c", " ".join(words)),))
                for role, words in spec]
    lenient, strict = find_uses(messages), find_uses(messages, detector="strict")
    assert {(m, a) for m, a, _ in _pairs(lenient)} <= {(m, a) for m, a, _ in _pairs(strict)}
    assert all(m < a and messages[a].role == "assistant" for m, a, _ in _pairs(strict))
    assert {(m, a, k) for m, a, k in _pairs(strict) if k == KIND_VERBATIM} == {p for p in _pairs(lenient) if p[2] == KIND_VERBATIM}


@pytest.mark.parametrize("path", session_files() or [None], ids=lambda p: p.name if p else "absent")
def test_strict_detector_on_real_sessions_finds_at_least_the_lenient_uses(path) -> None:
    if path is None:
        need(__import__("tests.conftest", fromlist=["SESSIONS"]).SESSIONS)
    try:
        session = read_session(path)
    except Exception as exc:  # a file that is not a conversation (the Cline UI log)
        pytest.skip(str(exc))
    lenient, strict = find_uses(session.messages), find_uses(session.messages, detector="strict")
    assert len(strict) >= len(lenient)
    assert {(m, a) for m, a, _ in _pairs(lenient)} <= {(m, a) for m, a, _ in _pairs(strict)}


def test_a_multi_line_quoted_script_is_not_read_as_shell() -> None:
    from dp_compact.measure.file_operations import file_operations

    script = 'cd /repo && node -e "\nconst c = connect();\nc.query(1).then(r => { console.error(r) })\n" > out.log'
    reads, writes = file_operations(ToolCall("1", "Bash", json.dumps({"command": script})))
    assert writes == ["/repo/out.log"] or writes == ["out.log"]  # the redirection after the quote, nothing inside it
