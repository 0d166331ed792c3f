"""The PreCompact hook's fast path: what the plan server archives is what the plain command archives.

The served run remembers what it derives from each message (paths, identifiers, error lines,
shell operations, token counts), prepares them after the transcript's status line, and flushes
and indexes its archive after it has answered; none of this may change a byte of the archive,
its index rows, the summary or the hook's output.
"""

from __future__ import annotations

import json
import random
import sqlite3
import time
from pathlib import Path

import pytest

from dp_compact.conversation import ToolCall, ToolResult
from dp_compact.measure import file_operations as operations_module
from dp_compact.measure.file_operations import file_operations
from dp_compact.pipeline import extract
from dp_compact.pipeline.archive import ArchiveStore, DeferredArchiver
from dp_compact.pipeline.extract import identifiers, joined_identifiers, joined_paths, paths
from tests.conftest import SESSIONS, need
from tests.hot_helpers import run_client
from tests.test_plan_server import _ARCHIVE_ID, _append, _archive_files, _full, _lines, live_hooks

#: Environment of the plain command: no hot path, no plan server.
_PLAIN = {"NO_DP_COMPACT_HOT": "1", "NO_DP_COMPACT_SERVER": "1"}


def _rows(index: Path, ref: str) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """The index row and the FTS row of ``ref``, without what differs from run to run (ref, id, time)."""
    with sqlite3.connect(index) as db:
        row = db.execute("SELECT session, summary, message_count, sha256 FROM archives WHERE ref = ?", (ref,)).fetchone()
        fts = db.execute("SELECT summary, keywords, body FROM archive_fts WHERE ref = ?", (ref,)).fetchone()
    assert row is not None and fts is not None, f"{ref} is not indexed"
    return row, fts


def _archive(store: ArchiveStore, ref: str) -> tuple[bytes, dict[str, object]]:
    """The archive's JSONL bytes and its metadata without ref, id and creation time."""
    session, archive_id = ref.removeprefix("archive://").split("/")
    data = (store.root / session / f"{archive_id}.jsonl").read_bytes()
    metadata = {k: v for k, v in store.metadata(ref).items() if k not in ("ref", "id", "created")}
    return data, metadata


def _indexed(store: ArchiveStore, ref: str, seconds: float = 30.0) -> bool:
    """True once ``ref`` is indexed (a server commits its archive after it has answered)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if store.index.lookup(ref) is not None:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("name", ["cc_fundwise.jsonl", pytest.param("cc_task43_develop.jsonl", marks=pytest.mark.slow)])
def test_served_pre_compact_archives_what_the_plain_command_archives(name, server, env, tmp_path):
    lines = _lines(name)
    copy, env, status, pre = live_hooks(tmp_path, env, b"".join(lines[:-3]), "auto")
    assert run_client(["hook"], env, tmp_path, status)[0][0] == 0  # no state yet: run here, the state kept
    store, plain_store = ArchiveStore(tmp_path / "archive"), ArchiveStore(tmp_path / "archive-plain")
    plain_env = {**env, **_PLAIN, "DP_ARCHIVE_DIR": str(plain_store.root)}  # its own archive: the same conversation is archived once a store
    for at, line in enumerate(lines[-3:-1]):
        _append(copy, line)
        if at == 0:  # as in Claude Code: the status line of the grown transcript first (the server prepares after it)
            assert run_client(["hook"], env, tmp_path, status) == ((0, _full(["hook"], env, tmp_path, status)[1], ""), True)
        served, answered = run_client(["hook"], env, tmp_path, pre)
        plain = run_client(["hook"], plain_env, tmp_path, pre)[0]
        assert answered and served[0] == plain[0] == 0 and served[2] == plain[2] == ""
        assert _ARCHIVE_ID.sub(r"\1ID", served[1]) == _ARCHIVE_ID.sub(r"\1ID", plain[1])
        refs = [_ARCHIVE_ID.search(out[1]).group(0) for out in (served, plain)]
        assert _indexed(store, refs[0])
        assert _archive(store, refs[0]) == _archive(plain_store, refs[1])
        assert _rows(store.index_path, refs[0]) == _rows(plain_store.index_path, refs[1])
        assert store.restore(refs[0]) == plain_store.restore(refs[1])
    again, answered = run_client(["hook"], env, tmp_path, pre)  # the hook again on the same conversation: archived once
    assert answered and again[1].strip().endswith(f"{refs[0]} (already archived)")
    assert len(_archive_files(store.root)) == len(_archive_files(plain_store.root)) == 2  # one archive a conversation
    assert not list(store.root.rglob("*.pending"))  # every staged archive committed


def test_deferred_archive_is_indexed_on_commit_or_by_the_next_write_when_its_writer_died(tmp_path):
    store = ArchiveStore(tmp_path)
    head = [{"role": "user", "content": "fix src/app.py"}, {"role": "assistant", "content": "done"}]
    deferred = DeferredArchiver(store)
    ref = deferred.write("s", head, {"summary": "fixed src/app.py"})
    assert store.index.lookup(ref) is None  # placed, not yet indexed
    deferred.commit()
    assert store.restore(ref) == head and not list(tmp_path.rglob("*.pending"))
    assert store.metadata(ref)["summary"] == "fixed src/app.py"

    lost = DeferredArchiver(store)
    orphan = lost.write("s", head, {"summary": "again"})
    marker = next(tmp_path.rglob("*.pending"))
    state = json.loads(marker.read_bytes())
    state["pid"] = 2**22 + 12345  # a writer that died before its commit
    marker.write_text(json.dumps(state))
    assert orphan in store.recover() and store.restore(orphan) == head  # its metadata holds its reference: indexed


def test_unsynced_write_keeps_every_file_and_leaves_no_marker(tmp_path):
    store = ArchiveStore(tmp_path)
    head = [{"role": "user", "content": "x" * 1000}]
    ref = store.write("s", head, {"summary": "s"})
    assert store.restore(ref) == head
    names = sorted(p.name.rsplit(".", 1)[1] for p in tmp_path.rglob("*") if p.is_file() and p.parent != tmp_path)
    assert names == ["json", "jsonl"]


def _texts() -> list[str]:
    """Message texts and tool-call arguments of the shared Claude Code and Codex sessions, and edge cases."""
    from dp_compact.sessions import read_session

    found = ["", "\n", "a/b.py\nc/d.py", "x.py", "./x", "~/a/b", "foo.bar\nbaz_qux", "CamelCase\n\nsnake_case", "/a/b/\n.c"]
    for folder in ("claude_code", "codex"):
        for path in sorted((SESSIONS / folder).glob("*.jsonl"))[:3]:
            session = read_session(need(path), lenient=True)
            found += [m.text for m in session.messages][:400]
            found += [c.arguments for m in session.messages for c in m.tool_calls][:400]
    return found


def test_joined_searches_equal_the_search_of_the_joined_text():
    texts = _texts()
    rng = random.Random(7)
    for _ in range(30):
        sample = rng.sample(texts, min(len(texts), rng.randint(1, 60)))
        joined = "\n".join(sample)
        for limit in (3, 200):
            assert joined_paths(sample, limit) == paths(joined)[:limit]
            assert joined_identifiers(sample, limit) == identifiers(joined)[:limit]


def test_remembered_searches_return_fresh_equal_lists():
    text = "edit src/a.py and src/b.py; foo_bar.baz"
    first = paths(text)
    first.append("changed")
    assert paths(text) == ["src/a.py", "src/b.py"] == extract._paths(text)
    call = ToolCall("1", "Bash", json.dumps({"command": "cat a.txt > b.txt && sed -i 's/x/y/' c.py"}))
    reads, writes = file_operations(call, "/w")
    writes.append("changed")
    assert file_operations(call, "/w") == (["/w/a.txt"], ["/w/b.txt", "/w/c.py"])
    assert operations_module._parsed_shell_operations("cat a.txt > b.txt") == (["a.txt"], ["b.txt"])


def test_memo_forgets_the_least_recently_used_past_its_bounds():
    memo = extract.TextMemo(entries=2, chars=10)
    memo.put(("a",), (1,), 4)
    memo.put(("b",), (2,), 4)
    assert memo.get(("a",)) == (1,)  # now the most recently used
    memo.put(("c",), (3,), 4)  # over 10 characters: b goes
    assert memo.get(("b",)) is None and memo.get(("a",)) == (1,) and memo.get(("c",)) == (3,)
    memo.put(("d",), (4,), 11)  # longer than the whole bound: never kept
    assert memo.get(("d",)) is None


def test_warm_compaction_changes_no_summary(tmp_path):
    from dp_compact.pipeline.compact import compact_session, warm_compaction
    from dp_compact.sessions import read_session
    from dp_compact.settings import load_settings

    session = read_session(need(SESSIONS / "claude_code" / "cc_raze_hooks.jsonl"), lenient=True)
    settings = load_settings()
    extract._MEMO.clear()
    cold = compact_session(session, settings, keep=1, archiver=None)
    warm_compaction(session.messages)
    warm = compact_session(session, settings, keep=1, archiver=None)
    assert cold.summary == warm.summary and cold.anchors == warm.anchors


def test_error_line_and_result_preview_are_those_of_the_text():
    from dp_compact.pipeline.summarize import _error_line, _result_preview

    result = ToolResult("1", "Error: boom\nmore", is_error=True)
    for _ in range(2):  # searched, then remembered
        assert _error_line(result.text, True) == "Error: boom / more"
        assert _result_preview(result.text, True) == " → Error: boom (16 characters)"
        assert _error_line("all fine", False) is None
        assert _result_preview("\n  ok  \n", True) == " → error: ok (8 characters)"


@pytest.mark.parametrize("name", ["cc_raze_hooks.jsonl", "cc_fundwise.jsonl", pytest.param("cc_task43_develop.jsonl", marks=pytest.mark.slow)])
def test_whole_reading_continued_is_the_hooks_reading(name, tmp_path):
    from dp_compact.hot import precompact
    from dp_compact.hot.state import file_signature
    from dp_compact.sessions import read_session

    lines = _lines(name)
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(b"".join(lines[:-4]))
    for line in [None, *lines[-4:]]:
        if line is not None:
            _append(copy, line)
        read = precompact._read_whole(copy)
        assert read is not None and read == read_session(copy, lenient=True)
        assert precompact._read_whole(copy) is read  # the file as it was: the reading kept
    assert precompact._READS.pop(copy)[0] == file_signature(copy)


def test_work_after_an_answer_never_raises_and_a_failed_commit_is_tried_again(monkeypatch):
    from dp_compact.errors import ArchiveError
    from dp_compact.hot import precompact

    tries: list[int] = []

    def commit() -> None:
        tries.append(1)
        raise ArchiveError("the index is locked")

    monkeypatch.setattr(precompact, "_AFTER_REPLY", [(commit, True, 0)])
    monkeypatch.setattr(precompact, "_PREPARING", {Path("x.jsonl"): (None, 0, None, False)})  # a preparation that fails
    for _ in range(5):
        precompact.after_reply(lambda: False)
    assert len(tries) == precompact.COMMIT_TRIES and not precompact._AFTER_REPLY and not precompact._PREPARING
