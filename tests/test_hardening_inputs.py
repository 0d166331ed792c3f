"""Bounded search (CLI and MCP), MCP tools confined to regular files under allowed roots
and paged, plausible usage counts and windows, a .env that is not UTF-8: one-line errors, never a
traceback."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.errors import (
    ArchiveError,
    DpCompactError,
    EnvFileError,
    SessionError,
    SettingsError,
)
from dp_compact.measure.windows import MAX_PLAUSIBLE_WINDOW_TOKENS, context_window
from dp_compact.pipeline.archive import MAX_SEARCH_LIMIT, ArchiveStore
from dp_compact.pipeline.archive_index import MAX_QUERY_TERMS, fts_query, query_terms
from dp_compact.sessions import read_session
from dp_compact.sessions.usage import MAX_TOKENS_PER_CALL, token_count, usage_from_api
from dp_compact.settings import load_settings

from .pipeline_helpers import write_jsonl

runner = CliRunner()


# --- 4. bounded search -----------------------------------------------------------------------


@pytest.fixture
def big_store(tmp_path: Path) -> ArchiveStore:
    store = ArchiveStore(tmp_path / "archive")
    store.write("big", [{"role": "user", "content": "word question answer " * 20_000}], {"summary": "the question of words"})
    return store


def test_query_terms_are_distinct_and_capped():
    assert fts_query("question QUESTION question") == '"question"'
    assert query_terms("a* a* b") == ["a*", "b"]
    with pytest.raises(ArchiveError, match=f"at most {MAX_QUERY_TERMS}"):
        query_terms(" ".join(f"w{i}" for i in range(MAX_QUERY_TERMS + 1)))
    assert len(query_terms(" ".join(["same"] * 500)[:999])) == 1  # repetition is not a term more


def test_a_200_byte_query_of_one_repeated_word_answers_in_well_under_a_second(big_store):
    query = " ".join(["question"] * 22)
    assert len(query) <= 200
    start = time.process_time()
    hits = big_store.search(query)
    assert time.process_time() - start < 0.5
    assert hits and "[question]" in hits[0].snippet.lower()
    start = time.process_time()
    assert big_store.search("word question answer")  # one term with 20,000 hits in a 400 KB head: FTS5's snippet() took seconds
    assert time.process_time() - start < 0.5


@pytest.mark.parametrize("limit", [2**63, -1, True, MAX_SEARCH_LIMIT + 1])
def test_search_limit_out_of_range_is_a_clear_error(big_store, limit):
    with pytest.raises(ArchiveError, match="limit must be"):
        big_store.search("question", limit=limit)


def test_cli_recall_huge_limit_is_one_line_not_a_traceback(big_store):
    result = runner.invoke(app, ["recall", "question", "--limit", str(2**63)], env={"DP_ARCHIVE_DIR": str(big_store.root)})
    assert result.exit_code == 2 and "Traceback" not in result.output and "--limit" in result.output


def test_search_stops_after_its_step_budget(big_store, monkeypatch):
    from dp_compact.pipeline import archive_index

    monkeypatch.setattr(archive_index, "MAX_QUERY_STEPS", 1)
    monkeypatch.setattr(archive_index, "_PROGRESS_EVERY", 10)
    with pytest.raises(ArchiveError, match="matches too much"):
        big_store.search("question")


# --- 5. MCP ----------------------------------------------------------------------------------

mcp_server = pytest.importorskip("dp_compact.adapters.mcp_server", exc_type=ImportError)


@pytest.fixture
def roots(tmp_path, monkeypatch):
    monkeypatch.setenv("DP_MCP_ROOTS", str(tmp_path / "allowed"))
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    (tmp_path / "allowed").mkdir()
    return tmp_path


def test_mcp_plan_reads_only_regular_files_under_the_roots(roots):
    inside = write_jsonl(roots / "allowed" / "s.jsonl", [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}])
    assert mcp_server.plan_tool(str(inside))["decision"] in ("keep", "compact")
    outside = write_jsonl(roots / "s.jsonl", [{"role": "user", "content": "hi"}])
    with pytest.raises(SessionError, match="outside the folders"):
        mcp_server.plan_tool(str(outside))
    link = roots / "allowed" / "link.jsonl"
    link.symlink_to(outside)  # a link inside pointing outside is resolved first
    with pytest.raises(SessionError, match="outside the folders"):
        mcp_server.plan_tool(str(link))
    fifo = roots / "allowed" / "pipe.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(SessionError, match="not a regular file"):
        mcp_server.plan_tool(str(fifo))  # would block forever if opened
    with pytest.raises(SessionError, match="not a regular file"):
        mcp_server.plan_tool(str(roots / "allowed"))


def test_mcp_default_roots_are_the_current_folder_and_the_transcript_folders(monkeypatch, tmp_path):
    monkeypatch.delenv("DP_MCP_ROOTS", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    found = mcp_server.allowed_roots()
    assert found[0] == tmp_path.resolve() and (tmp_path / "home" / ".claude" / "projects").resolve() in found


@pytest.mark.parametrize("value", [10**30, 0, -5, MAX_PLAUSIBLE_WINDOW_TOKENS + 1])
def test_mcp_plan_bounds_max_context_tokens(roots, value):
    inside = write_jsonl(roots / "allowed" / "s.jsonl", [{"role": "user", "content": "hi"}])
    with pytest.raises(SettingsError, match="max_context_tokens"):
        mcp_server.plan_tool(str(inside), max_context_tokens=value)


def test_mcp_restore_is_paged(roots):
    store = ArchiveStore(roots / "archive")
    head = [{"role": "user", "content": f"message {i} " + "x" * 3_000} for i in range(40)] + [{"role": "user", "content": "y" * 320_000}]
    ref = store.write("s", head, {"summary": "s"})
    pages, offset = [], 0
    while offset is not None:
        page = mcp_server.restore_tool(ref, offset, 20_000)
        assert len(json.dumps(page["messages"])) < 25_000 or page["shortened"]
        pages.append(page)
        offset = page["next_offset"]
    got = [m for p in pages for m in p["messages"]]
    assert got[:40] == head[:40] and len(got) == 41 and pages[-1]["shortened"] == [40]
    assert "dp-compact restore gives the whole message" in got[40]["content"]
    with pytest.raises(ArchiveError, match="max_chars"):
        mcp_server.restore_tool(ref, 0, 10**12)


def test_mcp_recall_has_the_archive_bounds(roots):
    with pytest.raises(ArchiveError):
        mcp_server.recall_tool("w " * 10 + " ".join(f"t{i}" for i in range(40)))
    with pytest.raises(ArchiveError, match="limit"):
        mcp_server.recall_tool("anything", limit=2**63)


# --- 6. plausible counts and windows; no traceback -----------------------------------------------


@pytest.mark.parametrize("value", [2**63, 2**62, 1e308, float(MAX_TOKENS_PER_CALL + 1), str(10**20), MAX_TOKENS_PER_CALL + 1])
def test_implausible_token_counts_are_rejected_with_the_reason(value):
    with pytest.raises(ValueError, match="more than any provider accepts"):
        token_count(value, "input_tokens")


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1, 1.5, "12a"])
def test_token_counts_that_are_not_counts_stay_rejected(value):
    with pytest.raises(ValueError, match="non-negative whole number"):
        token_count(value, "input_tokens")


def test_a_sum_of_counts_above_the_bound_is_rejected():
    half = MAX_TOKENS_PER_CALL // 2 + 1
    with pytest.raises(ValueError, match="prompt of"):
        usage_from_api({"input_tokens": half, "cache_read_input_tokens": half, "cache_creation_input_tokens": 0, "output_tokens": 1})
    assert usage_from_api({"input_tokens": 10, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 0, "output_tokens": 1}).prompt_tokens == 15


@pytest.mark.parametrize("usage", [
    {"input_tokens": 2**63, "output_tokens": 1},
    {"input_tokens": 1e308, "output_tokens": 1},
    {"input_tokens": 10, "cache_creation_input_tokens": 2**62, "cache_read_input_tokens": 0, "output_tokens": 1},
])
def test_cli_plan_on_an_absurd_usage_count_is_one_line_naming_file_line_and_rule(tmp_path, usage):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"role": "user", "content": "hi"}) + "\n" + json.dumps({"role": "assistant", "content": "x", "usage": usage}) + "\n")
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 2 and result.exception is None or isinstance(result.exception, SystemExit)
    line = result.output.strip().splitlines()[-1]
    assert "s.jsonl:2" in line and "more than any provider accepts" in line and "Traceback" not in result.output


def _session_with_prompts(tmp_path: Path, prompts: list[int]):
    messages = []
    for i, prompt in enumerate(prompts):
        messages += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a", "model": "claude-sonnet-4-5",
                                                            "usage": {"input_tokens": prompt, "output_tokens": 1}}]
    return read_session(write_jsonl(tmp_path / "w.jsonl", messages))


def test_a_window_from_one_implausible_prompt_is_not_believed(tmp_path):
    window, source = context_window(_session_with_prompts(tmp_path, [31, 5_000_000, 40]), 200_000, database_name="x")
    assert window < 5_000_000 and "not believed" in source and "line" in source
    corroborated, _ = context_window(_session_with_prompts(tmp_path, [3_900_000, 4_200_000]), 200_000, database_name="x")
    assert corroborated >= 4_200_000  # two prompts near each other: the provider did accept them
    slightly, _ = context_window(_session_with_prompts(tmp_path, [150_000]), 128_000, database_name="x")
    assert slightly >= 150_000  # a prompt a little above the listed window is evidence


def test_env_file_that_is_not_utf8_is_a_one_line_error_for_every_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_bytes(b"DP_V=1000\nDP_S=\xff\xfe\n")
    with pytest.raises(EnvFileError, match=r"\.env:2: .*not UTF-8"):
        load_settings()
    session = write_jsonl(tmp_path / "s.jsonl", [{"role": "user", "content": "hi"}])
    for args in (["plan", str(session)], ["compact", str(session), "-o", "o.jsonl"], ["recall", "x"], ["restore", "archive://a/b"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and ".env:2" in result.output and "Traceback" not in result.output, (args, result.output)
    hook = runner.invoke(app, ["hook"], input=json.dumps({"transcript_path": str(session)}))
    assert ".env:2" in hook.output and not isinstance(hook.exception, UnicodeDecodeError)


def test_every_error_above_is_a_library_error():
    for error in (ArchiveError, SessionError, SettingsError, EnvFileError):
        assert issubclass(error, DpCompactError)
