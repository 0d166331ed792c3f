"""Repair instead of refuse, a compaction never grows the context, private files, a
crash-safe archive (two-step archive writes, recovery after a kill, whole index files)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.errors import ArchiveError, CompactionError
from dp_compact.io import clean_temporary_files, write_atomic
from dp_compact.pipeline import archive as archive_module
from dp_compact.pipeline.archive import ArchiveStore
from dp_compact.pipeline.compact import RULE_WOULD_GROW, compact_file
from dp_compact.pipeline.repairs import without_duplicate_results
from dp_compact.pipeline.validate import validate_messages
from dp_compact.sessions import read_session
from dp_compact.settings import load_settings

from .pipeline_helpers import read_jsonl, write_jsonl

runner = CliRunner()
HEAD_ITEM = {"role": "user", "content": "Ask about the parser module and its failing test case; " * 6}


def _base(turns: int = 8) -> list[dict[str, Any]]:
    """A plain conversation of ``turns`` user turns, each long enough that a summary is smaller than a head."""
    out: list[dict[str, Any]] = []
    for i in range(turns):
        out.append({"role": "user", "content": f"question {i} about the parser module and its failing test case " * 6})
        out.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {i} " * 60}]})
    return out


def _compact(tmp_path: Path, messages: list[dict[str, Any]], *, keep: int | None = 4, archive: bool = True, name: str = "in.jsonl"):
    source = write_jsonl(tmp_path / name, messages)
    before = source.read_bytes()
    store = ArchiveStore(tmp_path / "archive") if archive else None
    result = compact_file(source, load_settings(), output=tmp_path / "out.jsonl", keep=keep, archiver=store)
    assert source.read_bytes() == before  # the input is never modified
    return result, store


# --- 1. repair instead of refuse -------------------------------------------------------------


def _advisor_turn() -> dict[str, Any]:
    call = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "advisor", "input": {}}
    result = {"type": "advisor_tool_result", "tool_use_id": "srvtoolu_1", "content": {"type": "advisor_result", "text": "do x"}}
    return {"role": "assistant", "content": [call, result, {"type": "text", "text": "done"}]}


REPAIRS = {
    "empty assistant message in the tail": (lambda m: m[:13] + [{"role": "assistant", "content": []}] + m[13:], None),
    "empty text block in the tail": (
        lambda m: m[:13] + [{"role": "assistant", "content": [{"type": "text", "text": ""}, {"type": "text", "text": "ok"}]}] + m[14:],
        "white-space-only text block",
    ),
    "white-space text block alone in the tail": (
        lambda m: m[:13] + [{"role": "assistant", "content": [{"type": "text", "text": " \n"}]}] + m[14:],
        "white-space-only text block",
    ),
    "white-space text block beside text kept verbatim": (
        lambda m: m[:13] + [{"role": "assistant", "content": [{"type": "text", "text": " \n"}, {"type": "text", "text": "ok"}]}] + m[14:],
        None,
    ),
    "advisor_tool_result kept with its call": (lambda m: m[:13] + [_advisor_turn()] + m[14:], None),
    "unknown block type kept verbatim": (
        lambda m: m[:13] + [{"role": "assistant", "content": [{"type": "brand_new_block", "x": 1}, {"type": "text", "text": "y"}]}] + m[14:],
        None,
    ),
    "duplicated tool result in the tail": (
        lambda m: m[:12] + [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}] * 2},
            {"role": "assistant", "content": "final"},
        ],
        "repeated tool result",
    ),
}


@pytest.mark.parametrize("name", list(REPAIRS))
def test_compact_repairs_what_the_api_rules_allow_instead_of_refusing(tmp_path, name):
    edit, note = REPAIRS[name]
    result, _ = _compact(tmp_path, edit(_base()))
    assert result.decision == "compact" and result.written
    written = read_jsonl(tmp_path / "out.jsonl")
    assert validate_messages(written, "anthropic") == ()
    if note:
        assert any(note in n for n in result.notes), result.notes
    if "advisor" in name or "unknown" in name or "verbatim" in name:  # kept verbatim
        assert edit(_base())[13] in written


def test_compact_openai_drops_repeated_tool_messages_and_empty_assistant_messages(tmp_path):
    messages = [{"role": "system", "content": "sys"}]
    for i in range(6):
        messages += [{"role": "user", "content": f"question {i} about the parser " * 10},
                     {"role": "assistant", "content": f"answer {i} " * 40}]
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
        {"role": "tool", "tool_call_id": "c1", "content": "a"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "ok"},
    ]
    result, _ = _compact(tmp_path, messages, keep=6)
    written = read_jsonl(tmp_path / "out.jsonl")
    assert validate_messages(written, "openai") == ()
    assert sum(1 for m in written if m.get("role") == "tool") == 1
    assert any("repeated tool result" in n for n in result.notes) and any("empty assistant" in n for n in result.notes)


def test_lone_surrogate_escape_becomes_replacement_character_with_a_note(tmp_path):
    lines = [json.dumps(m) for m in _base()]
    lines[4] = lines[4].replace("question", "question \\ud83d", 1)  # half of a cut emoji, as JSON.stringify writes it
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n", "ascii")
    session = read_session(source)
    assert session.repaired_lines == (5,) and "\ufffd" in session.messages[4].text
    result = compact_file(source, load_settings(), output=tmp_path / "out.jsonl", keep=4, archiver=None)
    assert any("line 5" in n and "U+FFFD" in n for n in result.notes)
    document = tmp_path / "doc.json"
    document.write_text(json.dumps({"messages": _base(2)}, indent=1).replace("question", "q \\udc00", 1), "ascii")
    assert read_session(document).repaired_lines == (1,)


def test_a_malformed_line_is_still_an_error_naming_its_line(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(_base(1)[0]) + '\n{"role": "user", "content": "\\ud800\n', "utf-8")  # cut off, not a surrogate problem
    with pytest.raises(Exception, match=r"in\.jsonl:2"):
        list(read_session(source, lenient=False).messages)


def test_validate_accepts_consecutive_user_messages_as_the_messages_api_does(tmp_path):
    path = write_jsonl(tmp_path / "users.jsonl", [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}])
    result = runner.invoke(app, ["validate", str(path), "--api", "anthropic"])
    assert result.exit_code == 0, result.output
    # The tool pairing rule still holds: a result must directly follow its call's message.
    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]}
    late = [{"role": "user", "content": "a"}, call, {"role": "user", "content": "b"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}]
    assert {"unanswered-tool-use", "orphan-tool-result"} <= {v.rule for v in validate_messages(late, "anthropic")}


tool_ids = st.sampled_from(["a", "b", "c"])
texts = st.builds(lambda t: {"type": "text", "text": t}, st.sampled_from(["", " ", "\n\t", "x", "ok"]))
user_blocks = st.one_of(texts, st.builds(lambda i: {"type": "tool_result", "tool_use_id": i, "content": "r"}, tool_ids))
assistant_blocks = st.one_of(
    texts, st.builds(lambda i: {"type": "tool_use", "id": i, "name": "f", "input": {}}, tool_ids), st.just({"type": "mystery_block", "v": 1}),
)
plain = st.sampled_from(["", " ", "hello"])
raw_messages = st.lists(
    st.one_of(
        st.builds(lambda c: {"role": "user", "content": c}, st.one_of(st.lists(user_blocks, max_size=4), plain)),
        st.builds(lambda c: {"role": "assistant", "content": c}, st.one_of(st.lists(assistant_blocks, max_size=3), plain)),
    ),
    min_size=1, max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(raw_messages)
def test_property_repairs_leave_no_orphan_results_no_blank_text_and_no_repeated_answers(messages):
    from dp_compact.pipeline.convert import to_api
    from dp_compact.sessions.anthropic import message_from_anthropic

    issued = [b["id"] for m in messages if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_use"]
    assume(len(issued) == len(set(issued)))  # ids reused by an agent are renamed by the readers, not here
    read = [message_from_anthropic(m, line=i + 1) for i, m in enumerate(messages)]
    fixed = to_api(read, "anthropic", issued=[{"role": "user", "content": "summary"}])
    rules = {v.rule for v in validate_messages([{"role": "user", "content": "summary"}, *fixed], "anthropic")}
    assert not rules & {"orphan-tool-result", "empty-text", "duplicate-result", "empty-content"}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.builds(lambda i: {"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": "f", "input": {}}]}, tool_ids),
    st.builds(lambda ids: {"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": "r"} for i in ids]},
              st.lists(tool_ids, min_size=1, max_size=4)),
    st.builds(lambda i: {"role": "tool", "tool_call_id": i, "content": "r"}, tool_ids),
), max_size=10))
def test_property_duplicate_results_are_collapsed_to_one_answer_per_issued_call(messages):
    out = without_duplicate_results(messages)
    answered: set[str] = set()
    for message in out:
        for block in message.get("content") if isinstance(message.get("content"), list) else ():
            if message.get("role") == "assistant":
                answered -= {block["id"]}
        ids = [b["tool_use_id"] for b in message["content"]] if message.get("role") == "user" else (
            [message["tool_call_id"]] if message.get("role") == "tool" else [])
        assert len(ids) == len(set(ids)) and not answered & set(ids)
        answered |= set(ids)
        assert message.get("content")  # no message left empty


# --- 3, first half: a compaction never makes the context larger --------------------------------


def test_compact_of_a_tiny_session_writes_nothing_and_archives_nothing(tmp_path):
    tiny = [m for i in range(9) for m in ({"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": "ok"})]
    source = write_jsonl(tmp_path / "in.jsonl", tiny)
    store = ArchiveStore(tmp_path / "archive")
    result = compact_file(source, load_settings(), output=tmp_path / "out.jsonl", force=True, archiver=store)
    assert result.decision == "compact" and any("makes the context larger" in n for n in result.notes)  # --force: as asked
    (tmp_path / "out.jsonl").unlink()
    result = compact_file(source, load_settings(), output=tmp_path / "out.jsonl", requested=True, archiver=store, keep=None)
    if result.rule == RULE_WOULD_GROW:
        assert not (tmp_path / "out.jsonl").exists() and "larger" in result.explanation
    else:  # the planner found nothing to compact at all
        assert result.decision == "keep"


# --- 2. privacy ------------------------------------------------------------------------------


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_output_is_no_more_readable_than_its_input_and_archive_is_private(tmp_path, umask_022):
    source = write_jsonl(tmp_path / "in.jsonl", _base())
    source.chmod(0o600)
    compact_file(source, load_settings(), output=tmp_path / "out.jsonl", keep=4, archiver=ArchiveStore(tmp_path / "archive"))
    def mode(path: Path) -> int:
        return path.stat().st_mode & 0o777

    assert mode(tmp_path / "out.jsonl") == 0o600
    root = tmp_path / "archive"
    assert mode(root) == 0o700 and mode(root / "index.sqlite") == 0o600
    for path in root.rglob("*"):
        assert mode(path) == (0o700 if path.is_dir() else 0o600), path
    # A readable input gives a readable output, within the umask.
    source.chmod(0o644)
    (tmp_path / "out.jsonl").unlink()
    compact_file(source, load_settings(), output=tmp_path / "out.jsonl", keep=4, archiver=None)
    assert mode(tmp_path / "out.jsonl") == 0o644


def test_write_atomic_follows_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        assert write_atomic(tmp_path / "x", b"1").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)


def test_symlinked_archive_session_folder_is_refused(tmp_path):
    store = ArchiveStore(tmp_path / "archive")
    ref = store.write("alpha", [{"role": "user", "content": "hi"}], {"summary": "s"})
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "archive" / "alpha").rename(elsewhere)
    (tmp_path / "archive" / "alpha").symlink_to(elsewhere)
    before = sorted(p.name for p in elsewhere.iterdir())
    with pytest.raises(ArchiveError, match="symbolic link"):
        store.restore(ref)
    with pytest.raises(ArchiveError, match="symbolic link"):
        store.write("alpha", [{"role": "user", "content": "hi"}], {"summary": "s"})
    assert sorted(p.name for p in elsewhere.iterdir()) == before  # nothing written through the link


# --- 3. crash-safe archive -------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["zero bytes", "no tables"])
def test_a_damaged_index_reads_as_empty_and_the_next_write_mends_it(tmp_path, damage):
    root = tmp_path / "archive"
    root.mkdir()
    index = root / "index.sqlite"
    if damage == "zero bytes":
        index.write_bytes(b"")
    else:
        sqlite3.connect(index).execute("CREATE TABLE other (x)").connection.commit()
    store = ArchiveStore(root)
    assert store.search("anything") == []
    with pytest.raises(ArchiveError, match="no archive under"):
        store.restore("archive://s/20260101T000000000000Z-00000000")
    ref = store.write("s", [{"role": "user", "content": "needle"}], {"summary": "needle found"})
    assert store.restore(ref) == [{"role": "user", "content": "needle"}] and store.search("needle")[0].ref == ref
    env = {"DP_ARCHIVE_DIR": str(root)}
    assert runner.invoke(app, ["recall", "needle"], env=env).exit_code == 0


def test_a_new_index_is_created_whole_or_not_at_all(tmp_path, monkeypatch):
    root = tmp_path / "archive"
    monkeypatch.setattr(os, "link", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))  # killed before it is in place
    with pytest.raises(KeyboardInterrupt):
        ArchiveStore(root).write("s", [{"role": "user", "content": "x"}], {"summary": "s"})
    assert not (root / "index.sqlite").exists()
    assert [p.name for p in root.iterdir() if p.name.startswith(".tmp-")] == []
    monkeypatch.undo()
    store = ArchiveStore(root)
    ref = store.write("s", [{"role": "user", "content": "x"}], {"summary": "s"})
    assert store.restore(ref)


def test_output_that_cannot_be_written_leaves_no_archive_record(tmp_path, monkeypatch):
    source = write_jsonl(tmp_path / "in.jsonl", _base())
    store = ArchiveStore(tmp_path / "archive")
    import dp_compact.pipeline.compact as compact_module

    def fail(*args, **kwargs):
        raise CompactionError("disk full")

    monkeypatch.setattr(compact_module, "write_messages", fail)
    with pytest.raises(CompactionError, match="disk full"):
        compact_file(source, load_settings(), output=tmp_path / "out.jsonl", keep=4, archiver=store)
    assert store.index.ids() == set()
    assert [p for p in (tmp_path / "archive").rglob("*") if p.is_file() and p.name != "index.sqlite"] == []


def _dead_pid() -> int:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("output_written", [True, False])
def test_a_compaction_killed_between_archive_and_index_is_finished_or_undone_next_run(tmp_path, output_written):
    store = ArchiveStore(tmp_path / "archive")
    output = tmp_path / "out.jsonl"
    staged = store.stage("s", [{"role": "user", "content": "lost head"}], {"summary": "the lost head"}, output=str(output))
    state = json.loads(staged.marker.read_bytes())
    state["pid"] = _dead_pid()  # the writer was killed
    staged.marker.write_bytes(json.dumps(state).encode())
    if output_written:
        output.write_text(json.dumps({"role": "user", "content": f"summary ... {staged.ref}"}) + "\n")
    assert store.search("lost") == []  # not indexed yet
    recovered = store.recover()
    assert not staged.marker.exists()
    if output_written:
        assert recovered == [staged.ref] and store.restore(staged.ref) == [{"role": "user", "content": "lost head"}]
    else:
        assert recovered == [] and all(not f.exists() for f in staged.files)


def test_temporary_and_orphan_files_are_cleaned_on_the_next_write(tmp_path):
    store = ArchiveStore(tmp_path / "archive")
    ref = store.write("s", [{"role": "user", "content": "x"}], {"summary": "s"})
    folder = tmp_path / "archive" / "s"
    dead = _dead_pid()
    stale = folder / f".tmp-20260101T000000000000Z-deadbeef.jsonl.{dead}.abcd1234.part"
    stale.write_bytes(b"half")
    orphan = folder / "20260101T000000000000Z-deadbeef.jsonl"
    orphan.write_bytes(b"{}\n")
    live = folder / f".tmp-other.{os.getpid()}.abcd1234.part"  # a writer still running: left alone
    live.write_bytes(b"being written")
    store.write("s", [{"role": "user", "content": "y"}], {"summary": "s"})
    assert not stale.exists() and not orphan.exists() and live.exists()
    assert store.restore(ref)
    assert clean_temporary_files(folder) == []


def test_archive_module_keeps_its_public_names():
    assert {"ArchiveStore", "Staged", "write_jsonl_atomic"} <= set(archive_module.__all__)


def _kill_compact_after(tmp_path: Path, source: Path, output: Path, delay: float) -> None:
    """Run ``dp-compact compact`` in a subprocess and SIGKILL it after ``delay`` seconds (if still running)."""
    import signal
    import subprocess
    import sys

    env = {**os.environ, "DP_ARCHIVE_DIR": str(tmp_path / "archive"), "HOME": str(tmp_path)}
    env = {k: v for k, v in env.items() if not k.startswith("DP_") or k == "DP_ARCHIVE_DIR"}
    child = subprocess.Popen([sys.executable, "-m", "dp_compact.cli", "compact", str(source), "--keep", "4", "-o", str(output)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        child.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGKILL)
        child.wait()


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.3, 0.6, 0.9, 1.2, 1.5, 1.8, 2.1, 2.4, 3.0])
def test_a_kill_at_any_moment_of_compact_loses_nothing_and_recall_keeps_working(tmp_path, delay):
    source = write_jsonl(tmp_path / "in.jsonl", _base())
    before = source.read_bytes()
    output = tmp_path / "out.jsonl"
    _kill_compact_after(tmp_path, source, output, delay)
    assert source.read_bytes() == before
    store = ArchiveStore(tmp_path / "archive")
    store.recover()  # what the next run does first
    refs = {f"archive://{s}/{i}" for s, i in store.index.ids()}
    if output.exists():  # whole, valid, and its archive restorable
        written = read_jsonl(output)
        assert validate_messages(written, "anthropic") == ()
        ref = next(r for r in refs if r in output.read_text("utf-8"))
        assert store.restore(ref) == _base()[:12]
    else:
        assert refs == set()  # no archive row recorded for a compaction without output
    assert runner.invoke(app, ["recall", "parser"], env={"DP_ARCHIVE_DIR": str(tmp_path / "archive")}).exit_code == 0
    leftovers = [p.name for p in (tmp_path / "archive").rglob("*") if p.name.startswith(".tmp-") or p.name.endswith(".pending")]
    assert leftovers == []  # the next run cleaned what the killed one left


def test_an_output_of_a_read_only_input_is_writable_by_its_owner(tmp_path: Path) -> None:
    import stat as _stat

    from dp_compact.io import private_mode_of

    source = tmp_path / "in.jsonl"
    source.write_text("{}\n")
    source.chmod(0o444)
    assert private_mode_of(source) & _stat.S_IWUSR and not private_mode_of(source) & (_stat.S_IWGRP | _stat.S_IWOTH)
    source.chmod(0o600)
    assert private_mode_of(source) == 0o600  # never more readable than the input
