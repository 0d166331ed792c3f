"""The archive of DESIGN §5.6: exact round trip, FTS5 recall, atomic writes, threads, CLI."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.errors import ArchiveError, DpCompactError
from dp_compact.pipeline import archive as archive_module
from dp_compact.pipeline.archive import ArchiveHit, ArchiveStore, default_archive_root, session_id_for, write_jsonl_atomic
from dp_compact.pipeline.archive_index import ArchiveIndex

runner = CliRunner()
REF_RE = re.compile(r"archive://[A-Za-z0-9._-]+/\d{8}T\d{12}Z-[0-9a-f]{8}")

HEAD = [
    {"role": "user", "content": "Always run the tests. Fix the KeyError in src/app/main.py — ünïcödé ✓ 日本語 🚀 \u2028\u2029\x85\x1c\r\n\t\x00"},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "look at the file", "signature": "c2lnbmF0dXJl" * 20},
            {"type": "text", "text": "Reading it."},
            {"type": "tool_use", "id": "toolu_01", "name": "read_file", "input": {"path": "src/app/main.py", "opts": {"n": [1, 2.5, None, True]}}},
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": [{"type": "text", "text": "x = {}\n" * 20_000}]}],
    },
    {"role": "assistant", "content": "Fixed: handle_missing_key() now guards the lookup.", "extra": {"big": 10**30, "f": 0.1, "neg": -0.0}},
]
META = {
    "summary": "Fixed the KeyError in main.py by adding handle_missing_key.",
    "keywords": ["KeyError", "lookup"],
    "file_paths": ["src/app/main.py"],
    "identifiers": ["handle_missing_key"],
    "token_counts": {"head_tokens": 41_000},
    "source_path": "/home/u/sessions/alpha.jsonl",
}


@pytest.fixture
def store(tmp_path: Path) -> ArchiveStore:
    return ArchiveStore(tmp_path / "archive")


def _jsonl(text: str) -> list:
    """JSONL lines split on newline only (U+2028 and friends may sit inside a line)."""
    return [json.loads(line) for line in text.split("\n") if line]


def _index_rows(store: ArchiveStore) -> int:
    if not store.index_path.exists():
        return 0
    db = sqlite3.connect(store.index_path)
    try:
        return db.execute("SELECT count(*) FROM archives").fetchone()[0] + db.execute("SELECT count(*) FROM archive_fts").fetchone()[0]
    finally:
        db.close()


def _visible_files(store: ArchiveStore) -> list[str]:
    return sorted(str(p.relative_to(store.root)) for p in store.root.rglob("*") if p.is_file() and not p.name.startswith("index.sqlite"))


def test_archive_write_restore_round_trip_is_exact(store):
    ref = store.write("alpha", HEAD, META)
    assert REF_RE.fullmatch(ref) and ref.startswith("archive://alpha/")
    assert store.restore(ref) == HEAD


def test_archive_round_trip_keeps_lone_surrogates_and_odd_values(store):
    head = [{"role": "user", "content": "bad \ud800 half", "n": [float("1e308"), -(2**70), {}, [], ""]}]
    assert store.restore(store.write("s", head, {"summary": "odd \udfff"})) == head


def test_archive_write_places_jsonl_and_metadata(store):
    ref = store.write("alpha", HEAD, META)
    session, archive_id = ref.removeprefix("archive://").split("/")
    assert _jsonl((store.root / session / f"{archive_id}.jsonl").read_text("utf-8")) == HEAD
    meta = json.loads((store.root / session / f"{archive_id}.json").read_text("utf-8"))
    assert meta["summary"] == META["summary"] and meta["file_paths"] == META["file_paths"]
    assert meta["ref"] == ref and meta["message_count"] == len(HEAD) and meta["created"].endswith("+00:00")
    assert store.metadata(ref) == meta


def test_archive_ids_sort_by_creation_time(store):
    refs = [store.write("alpha", HEAD[:1], {"summary": str(i)}) for i in range(5)]
    assert refs == sorted(refs) and len(set(refs)) == 5


def test_archive_search_finds_file_path_keyword_and_head_text(store):
    ref = store.write("alpha", HEAD, META)
    store.write("beta", [{"role": "user", "content": "write docs for README.md"}], {"summary": "Docs written."})
    for query in ("src/app/main.py", "keyerror", "handle_missing_key", "ünïcödé", "lookup", "handle_miss*"):
        hits = store.search(query)
        assert [h.ref for h in hits] == [ref], query
    hit = store.search("main.py")[0]
    assert isinstance(hit, ArchiveHit) and hit.session == "alpha" and hit.message_count == 4 and hit.score > 0
    assert hit.summary == META["summary"] and "[" in hit.snippet
    assert store.search("README.md")[0].session == "beta"
    assert store.search("nothing-like-this-anywhere") == []


def test_archive_search_filters_by_session_and_limit(store):
    a = store.write("alpha", HEAD[:1], {"summary": "shared topic"})
    b = store.write("beta", HEAD[:1], {"summary": "shared topic"})
    assert {h.ref for h in store.search("shared")} == {a, b}
    assert [h.ref for h in store.search("shared", session="beta")] == [b]
    assert [h.ref for h in store.search("shared", session="/some/dir/alpha.jsonl")] == [a]
    assert len(store.search("shared", limit=1)) == 1


def test_archive_search_ranks_summary_above_body(store):
    body_only = store.write("s", [{"role": "user", "content": "the word zebra appears once here"}], {"summary": "unrelated"})
    in_summary = store.write("s", [{"role": "user", "content": "nothing"}], {"summary": "zebra migration plan"})
    assert [h.ref for h in store.search("zebra")] == [in_summary, body_only]


@pytest.mark.parametrize(
    "query", ['"', "*", "-", ":", "(", ")", 'main"py', "NEAR(a b)", "a AND", "OR", "-x", "col:val", "^start", "'", "{a b}", "a + b", "", "   "],
)
def test_archive_search_fts_syntax_characters_do_not_crash(store, query):
    store.write("alpha", HEAD, META)
    assert isinstance(store.search(query), list)


def test_archive_search_quoted_word_still_matches(store):
    store.write("alpha", HEAD, META)
    assert len(store.search('"KeyError"')) == 1 and len(store.search("KeyError:")) == 1 and len(store.search("(main.py)")) == 1


def test_archive_empty_root_search_and_restore(store):
    assert store.search("anything") == []
    with pytest.raises(ArchiveError, match="no archive under archive://alpha/"):
        store.restore("archive://alpha/20250101T000000000000Z-0123abcd")
    assert not store.root.exists()


@pytest.mark.parametrize(
    "ref",
    [
        "", "archive://", "archive://alpha", "archive://alpha/", "archive://alpha/123", "http://alpha/20250101T000000000000Z-0123abcd",
        "archive://../etc/20250101T000000000000Z-0123abcd", "archive://alpha/../../20250101T000000000000Z-0123abcd",
        "archive://alpha/20250101T000000000000Z-0123abcd/x", "archive://al pha/20250101T000000000000Z-0123abcd",
    ],
)
def test_archive_restore_bad_ref_raises_archive_error(store, ref):
    store.write("alpha", HEAD[:1], {"summary": "x"})
    with pytest.raises(ArchiveError) as info:
        store.restore(ref)
    assert isinstance(info.value, DpCompactError) and "archive" in str(info.value)


def test_archive_restore_unknown_well_formed_ref_raises(store):
    store.write("alpha", HEAD[:1], {"summary": "x"})
    with pytest.raises(ArchiveError, match="no archive under archive://alpha/"):
        store.restore("archive://alpha/20250101T000000000000Z-0123abcd")


def test_archive_restore_detects_modified_file(store):
    ref = store.write("alpha", HEAD, META)
    session, archive_id = ref.removeprefix("archive://").split("/")
    path = store.root / session / f"{archive_id}.jsonl"
    path.write_text(path.read_text("utf-8").replace("KeyError", "KeyErr0r"), "utf-8")
    with pytest.raises(ArchiveError, match="checksum"):
        store.restore(ref)


def test_archive_files_without_index_row_stay_invisible(store):
    """A crash after the renames but before the index commit: restore and search see nothing."""
    store.write("alpha", HEAD[:1], {"summary": "indexed"})
    orphan_id = "20250101T000000000000Z-0123abcd"
    (store.root / "alpha" / f"{orphan_id}.jsonl").write_text(json.dumps(HEAD[0]) + "\n", "utf-8")
    (store.root / "alpha" / f"{orphan_id}.json").write_text(json.dumps({"summary": "orphan"}), "utf-8")
    with pytest.raises(ArchiveError, match="no archive under archive://alpha/"):
        store.restore(f"archive://alpha/{orphan_id}")
    assert store.search("orphan") == []


@pytest.mark.parametrize("failing_call", [1, 2])
def test_archive_write_failing_rename_leaves_nothing_and_next_write_works(store, monkeypatch, failing_call):
    first = store.write("alpha", HEAD[:1], {"summary": "first"})
    files_before, rows_before = _visible_files(store), _index_rows(store)
    real_replace, calls = os.replace, []

    def flaky_replace(src, dst):
        calls.append(dst)
        if len(calls) == failing_call:
            raise OSError(28, "No space left on device")
        return real_replace(src, dst)

    monkeypatch.setattr(archive_module.os, "replace", flaky_replace)
    with pytest.raises(ArchiveError, match="No space left"):
        store.write("alpha", HEAD, {"summary": "second mid-write crash"})
    monkeypatch.setattr(archive_module.os, "replace", real_replace)
    assert _visible_files(store) == files_before and _index_rows(store) == rows_before
    assert not [p for p in store.root.rglob("*") if p.name.startswith(".tmp-")]
    assert store.search("crash") == [] and store.restore(first) == HEAD[:1]
    third = store.write("alpha", HEAD, {"summary": "third"})
    assert store.restore(third) == HEAD and len(store.search("third")) == 1


def test_archive_write_failing_fsync_leaves_nothing(store, monkeypatch):
    def broken_fsync(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(archive_module.os, "fsync", broken_fsync)
    with pytest.raises(ArchiveError, match="Input/output error"):
        store.write("alpha", HEAD, META)
    monkeypatch.undo()
    assert _visible_files(store) == [] and _index_rows(store) == 0
    assert store.restore(store.write("alpha", HEAD, META)) == HEAD


def test_archive_write_failing_index_removes_placed_files(store, monkeypatch):
    store.write("alpha", HEAD[:1], {"summary": "first"})
    files_before = _visible_files(store)

    def broken_connect(self, *, write):
        raise ArchiveError("index is read-only")

    monkeypatch.setattr(ArchiveIndex, "connect", broken_connect)
    with pytest.raises(ArchiveError, match="read-only"):
        store.write("alpha", HEAD, META)
    monkeypatch.undo()
    assert _visible_files(store) == files_before and _index_rows(store) == 2


def test_archive_unserializable_input_raises_and_writes_nothing(store):
    with pytest.raises(ArchiveError, match="serializable"):
        store.write("alpha", [{"role": "user", "content": object()}], {"summary": "x"})
    with pytest.raises(ArchiveError, match="serializable"):
        store.write("alpha", HEAD, {"summary": "x", "bad": object()})
    assert not store.root.exists() or _visible_files(store) == []


def test_archive_metadata_accepts_dataclasses_paths_and_sets(store):
    from dp_compact.pipeline.types import Anchor

    ref = store.write("alpha", HEAD, {"summary": "s", "anchors": [Anchor(0, "user", "Always run the tests.", 3.0)],
                                      "source_path": Path("/x/alpha.jsonl"), "keywords": {"b", "a"}})
    meta = store.metadata(ref)
    assert meta["anchors"][0]["snippet"] == "Always run the tests." and meta["source_path"] == "/x/alpha.jsonl"
    assert meta["keywords"] == ["a", "b"] and len(store.search("always run")) == 1


def test_archive_concurrent_writes_from_threads_keep_index_whole(store):
    refs: list[str] = []
    lock, errors = threading.Lock(), []

    def writer(name: str) -> None:
        try:
            for i in range(15):
                ref = store.write(name, [{"role": "user", "content": f"{name} message {i} parallelword"}], {"summary": f"{name} {i}"})
                with lock:
                    refs.append(ref)
        except DpCompactError as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("left", "right")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors and len(set(refs)) == 30
    assert {h.ref for h in store.search("parallelword", limit=100)} == set(refs)
    assert len(store.search("parallelword", session="left", limit=100)) == 15
    for ref in refs:
        assert store.restore(ref)[0]["content"].endswith("parallelword")
    db = sqlite3.connect(store.index_path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("INSERT INTO archive_fts(archive_fts) VALUES('integrity-check')").fetchall() == []
    finally:
        db.close()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("alpha", "alpha"), ("/home/u/.claude/projects/p/4f1c-99.jsonl", "4f1c-99"), (Path("runs/s1.json"), "s1"),
        ("My Session (2)", "My_Session_2"), ("../..", "session"), ("", "session"), ("...hidden", "hidden"),
        ("C:\\Users\\x\\sess.jsonl", "sess"), ("日本語", "session"), ("a" * 200, "a" * 80),
    ],
)
def test_session_id_for_is_file_name_safe(name, expected):
    assert session_id_for(name) == expected


def test_default_archive_root_env_then_user_data_dir(monkeypatch, tmp_path):
    assert default_archive_root() == tmp_path / "data" / "dp-compact" / "archive"  # XDG_DATA_HOME from conftest
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "elsewhere"))
    assert default_archive_root() == tmp_path / "elsewhere" and ArchiveStore().root == tmp_path / "elsewhere"


def test_write_jsonl_atomic_replaces_and_keeps_old_file_on_failure(tmp_path, monkeypatch):
    out = tmp_path / "out.jsonl"
    write_jsonl_atomic(out, HEAD)
    assert _jsonl(out.read_text("utf-8")) == HEAD

    def failing_replace(src, dst):
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(archive_module.os, "replace", failing_replace)
    with pytest.raises(ArchiveError, match="Permission denied"):
        write_jsonl_atomic(out, HEAD[:1])
    assert _jsonl(out.read_text("utf-8")) == HEAD
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


# --- CLI -------------------------------------------------------------------------------------


@pytest.fixture
def cli_store(monkeypatch, tmp_path) -> ArchiveStore:
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "cli-archive"))
    return ArchiveStore()


def test_cli_restore_prints_jsonl(cli_store):
    ref = cli_store.write("alpha", HEAD, META)
    result = runner.invoke(app, ["restore", ref])
    assert result.exit_code == 0, result.output
    assert _jsonl(result.stdout) == HEAD


def test_cli_restore_writes_output_file(cli_store, tmp_path):
    ref = cli_store.write("alpha", HEAD, META)
    out = tmp_path / "restored" / "head.jsonl"
    result = runner.invoke(app, ["restore", ref, "-o", str(out)])
    assert result.exit_code == 0 and result.stdout == "" and "restored 4 messages" in result.stderr
    assert _jsonl(out.read_text("utf-8")) == HEAD


@pytest.mark.parametrize("ref", ["not-a-ref", "archive://alpha/20250101T000000000000Z-0123abcd"])
def test_cli_restore_bad_ref_exits_2_with_one_line(cli_store, ref):
    cli_store.write("alpha", HEAD[:1], {"summary": "x"})
    result = runner.invoke(app, ["restore", ref])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("dp-compact: ") and result.stderr.strip().count("\n") == 0 and "Traceback" not in result.output


def test_cli_recall_lists_matches_with_summaries(cli_store):
    a = cli_store.write("alpha", HEAD, META)
    b = cli_store.write("beta", [{"role": "user", "content": "edit src/app/main.py again"}], {"summary": "Second pass on main.py."})
    result = runner.invoke(app, ["recall", "src/app/main.py"])
    assert result.exit_code == 0 and a in result.stdout and b in result.stdout and META["summary"] in result.stdout
    result = runner.invoke(app, ["recall", "main.py", "--session", "beta", "--json"])
    hits = json.loads(result.stdout)
    assert result.exit_code == 0 and [h["ref"] for h in hits] == [b]
    assert set(hits[0]) == {"ref", "session", "created", "summary", "snippet", "message_count", "score"}


def test_cli_recall_no_match_and_odd_query(cli_store):
    cli_store.write("alpha", HEAD, META)
    for query in ("zzz-nothing", '"(*:-'):
        result = runner.invoke(app, ["recall", query])
        assert result.exit_code == 0 and "no matching archive" in result.stdout
    assert json.loads(runner.invoke(app, ["recall", "zzz", "--json"]).stdout) == []
