"""``compact --action clear`` (dp_compact.pipeline.clear): old tool results become placeholders, originals archived."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dp_compact.cli import app
from dp_compact.measure.clearing import CLEAR_MIN_CHARS, PLACEHOLDER_ARCHIVE_ID, is_cleared_text
from dp_compact.measure.tokens import count_text_tokens
from dp_compact.pipeline.archive import ArchiveStore
from dp_compact.pipeline.clear import clear_file, clear_session
from dp_compact.pipeline.convert import ORPHAN_RESULT_PREFIX, system_messages_for, to_api
from dp_compact.pipeline.validate import validate_messages
from dp_compact.sessions import read_session
from tests.conftest import SESSIONS, need
from tests.pipeline_helpers import FakeArchiver, write_jsonl
from tests.strategies import api_conversations

EXAMPLE = Path(__file__).resolve().parents[1] / "dp_compact" / "examples" / "session.jsonl"
_REF = re.compile(r"restore (archive://\S+?)#msg-(\d+)\]")
_ORPHAN_OPENING = ORPHAN_RESULT_PREFIX.split("{id}")[0]


def _results(messages, api):
    """(position, call id, content) of every tool result of written messages, in order."""
    for position, message in enumerate(messages):
        if api == "openai" and message.get("role") == "tool":
            yield position, message.get("tool_call_id"), message.get("content")
        elif api == "anthropic" and isinstance(message.get("content"), list):
            for block in message["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    yield position, block.get("tool_use_id"), block.get("content")


def _orphan_text(message):
    """(note, result text) of a tool result the repairs wrote as user text (its call was lost), else None."""
    content = message.get("content")
    if message.get("role") == "user" and isinstance(content, str) and content.startswith(_ORPHAN_OPENING):
        note, _, text = content.partition("\n")
        return note, text
    return None


def _without_results(message):
    """``message`` with the content of its tool results blanked (what clearing may change)."""
    if message.get("role") == "tool":
        return {**message, "content": None}
    if _orphan_text(message):
        return {**message, "content": _orphan_text(message)[0]}
    if isinstance(message.get("content"), list):
        blocks = [{**b, "content": None} if isinstance(b, dict) and b.get("type") == "tool_result" else b for b in message["content"]]
        return {**message, "content": blocks}
    return message


def _text(content):
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def _original_result(raw, call_id, api):
    """The content of the result ``call_id`` in an archived source message."""
    if raw.get("tool_call_id") == call_id:
        return raw.get("content")
    for block in raw.get("content") or ():
        if isinstance(block, dict) and block.get("type") == "tool_result" and block.get("tool_use_id") == call_id:
            return block.get("content")
    raise AssertionError(f"result {call_id} not in the archived message")


def check_clearing(session, result, restore, *, min_chars=CLEAR_MIN_CHARS):
    """Every invariant of a clearing: valid output, same structure, assistant messages (signed thinking)
    byte-identical, each cleared result a placeholder whose archive returns the exact original."""
    api = result.api
    baseline = [*system_messages_for(session.system_messages, session.system_text, api), *to_api(session.messages, api)]
    out = list(result.messages)
    assert validate_messages(out, api) == ()
    assert len(out) == len(baseline)
    for before, after in zip(baseline, out, strict=True):
        if before.get("role") == "assistant":  # tool calls, text and signed thinking blocks: byte-identical
            assert json.dumps(after, sort_keys=True) == json.dumps(before, sort_keys=True)
        assert _without_results(after) == _without_results(before)  # ids, order and adjacency unchanged
    cleared = 0
    for (_, call_id, new), (_, old_id, old) in zip(_results(out, api), _results(baseline, api), strict=True):
        assert call_id == old_id
        if new == old:
            continue
        cleared += 1
        assert is_cleared_text(new)
        assert len(_text(old)) >= min_chars or not isinstance(old, str)
        ref, index = _REF.search(new).groups()
        assert int(index) < result.depth
        [raw] = restore(f"{ref}#msg-{index}")
        assert _original_result(raw, call_id, api) == old
    for before, after in zip(baseline, out, strict=True):  # results whose call the transcript lost, written as text
        if _orphan_text(before) and after != before:
            cleared += 1
            assert is_cleared_text(_orphan_text(after)[1]) and len(_orphan_text(before)[1]) >= min_chars
    assert cleared == result.facts["cleared_results"]
    return cleared


class _FragmentArchiver(FakeArchiver):
    """The in-memory archive, restoring ``#msg-N`` as the store does (from the metadata's message indices)."""

    def restore(self, ref):
        base, _, fragment = ref.partition("#msg-")
        messages = self.heads[base]
        if not fragment:
            return messages
        return [messages[self.metadata[base]["message_indices"].index(int(fragment))]]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), api=st.sampled_from(["anthropic", "openai"]))
def test_clear_session_keeps_every_rule_and_restores_the_originals(tmp_path, data, api):
    raws = data.draw(api_conversations(api, irregular=data.draw(st.booleans())))
    path = write_jsonl(tmp_path / f"conv_{api}.jsonl", raws)
    session = read_session(path)
    pristine = copy.deepcopy([m.raw for m in session.messages])
    depth = data.draw(st.integers(0, len(session.messages)))
    archive = _FragmentArchiver()
    result = clear_session(session, depth=depth, archiver=archive)
    assert [m.raw for m in session.messages] == pristine  # the input is never modified
    if result.decision == "keep":
        assert result.messages == () and not archive.heads
        assert not any(len(r.text) >= CLEAR_MIN_CHARS for m in session.messages[:depth] for r in m.tool_results)
        return
    check_clearing(session, result, archive.restore)
    [ref] = archive.heads
    assert archive.heads[ref] == [pristine[i] for i in result.cleared_message_indices]  # restore: the exact originals


def test_clear_leaves_short_results_and_everything_after_the_depth(tmp_path):
    long, short = "L" * 2_000, "ok"
    raws = [
        {"role": "user", "content": "read both files"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "sig"},
                                          {"type": "tool_use", "id": "a", "name": "Read", "input": {}},
                                          {"type": "tool_use", "id": "b", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": long},
                                     {"type": "tool_result", "tool_use_id": "b", "content": short}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": long}]},
        {"role": "assistant", "content": "done"},
    ]
    session = read_session(write_jsonl(tmp_path / "s.jsonl", raws))
    result = clear_session(session, depth=4, archiver=FakeArchiver())
    blocks = result.messages[2]["content"]
    assert is_cleared_text(blocks[0]["content"]) and blocks[0]["tool_use_id"] == "a"
    assert blocks[1] == raws[2]["content"][1]  # short: left as it is
    assert result.messages[4] == raws[4]  # after the depth: untouched
    assert result.messages[1] == raws[1]  # signed thinking unchanged
    assert result.facts["cleared_results"] == 1 and result.facts["first_changed_message"] == 2


def test_clear_without_an_archive_is_refused(tmp_path):
    from dp_compact.errors import CompactionError

    with pytest.raises(CompactionError, match="archive"):
        clear_session(read_session(EXAMPLE), keep=10, archiver=None)


def _transcripts():
    return sorted([*(SESSIONS / "claude_code").glob("*.jsonl"), *(SESSIONS / "codex").glob("*.jsonl")]) if SESSIONS.exists() else []


@pytest.mark.parametrize("path", _transcripts() or [SESSIONS / "claude_code"], ids=lambda p: p.name)
def test_clear_every_shared_transcript_validates_and_restores(tmp_path, path):
    need(path)
    if path.is_dir():
        pytest.skip(f"no Claude Code or Codex transcript in {SESSIONS}")
    session = read_session(path)
    store = ArchiveStore(tmp_path / "archive")
    n = len(session.messages)
    cleared_any = False
    for keep in sorted({n, n // 2, 4, None} - {0}, key=lambda k: -1 if k is None else k):
        output = tmp_path / f"out_{keep}.jsonl"
        result = clear_file(path, output=output, keep=keep, archiver=store)
        if result.decision == "keep":
            assert not output.exists()
            continue
        cleared_any = True
        assert CliRunner().invoke(app, ["validate", str(output), "--api", result.api]).exit_code == 0
        check_clearing(session, result, store.restore)
        archived = store.restore(result.archive_ref)
        assert archived == [json.loads(json.dumps(session.messages[i].raw)) for i in result.cleared_message_indices]
        assert result.tokens_after < result.tokens_before
        facts = result.to_dict()  # the report adds up: what was there, less what was removed, plus the placeholders as written
        assert facts["tokens_before"] - facts["tokens_removed"] + facts["placeholder_tokens"] == facts["tokens_after"]
        assert facts["tokens_saved"] == facts["tokens_before"] - facts["tokens_after"]
    has_long = any(len(r.text) >= CLEAR_MIN_CHARS for m in session.messages for r in m.tool_results)
    assert cleared_any == has_long


@pytest.mark.parametrize("name", ["codex/codex_meridianops_windows.jsonl", "claude_code/cc_fundwise.jsonl"])
def test_a_dry_run_writes_the_placeholders_a_real_run_writes_but_for_the_archive_id(tmp_path, name):
    """The dry run's placeholders carry the statement a real run's first one carries, and differ from a real
    run's only in the archive id: each by about what the two ids' own cl100k counts differ (the real id's time
    and random hex digits take 13 to 17 tokens, the placeholder's 14), give or take a token where it meets its
    neighbours."""
    from dp_compact.settings import Settings

    path = SESSIONS / name
    need(path)
    session, settings = read_session(path), Settings()
    dry = clear_session(session, dry_run=True, settings=settings)
    real = clear_session(session, archiver=ArchiveStore(tmp_path / "archive"), settings=settings)
    assert dry.decision == real.decision == "clear" and dry.cleared_message_indices == real.cleared_message_indices
    placeholders = dry.facts["cleared_results"]
    real_id, preview_id = real.archive_ref.rsplit("/", 1)[1], PLACEHOLDER_ARCHIVE_ID
    apart = abs(int(count_text_tokens([real_id])[0]) - int(count_text_tokens([preview_id])[0]))
    assert abs(real.facts["placeholder_tokens"] - dry.facts["placeholder_tokens"]) <= (apart + 1) * placeholders
    first = [r.text for r in dry.cleared[dry.cleared_message_indices[0]].tool_results if is_cleared_text(r.text)][0]
    assert "conversation when shrunk" in first
    texts = [r.text.replace(real.archive_ref, "REF") for i in real.cleared_message_indices for r in real.cleared[i].tool_results]
    ref = next(r.text for r in dry.cleared[dry.cleared_message_indices[0]].tool_results if is_cleared_text(r.text))
    preview = re.search(r"archive://[^#\]\s]+", ref).group(0)
    assert texts == [r.text.replace(preview, "REF") for i in dry.cleared_message_indices for r in dry.cleared[i].tool_results]


def test_cli_compact_action_clear_json_names_the_action_and_the_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    output = tmp_path / "out.jsonl"
    done = CliRunner().invoke(app, ["compact", str(EXAMPLE), "--action", "clear", "--keep", "20", "-o", str(output), "--json"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.stdout)
    assert data["action"] == "clear" and data["decision"] == "clear" and data["written"]
    assert data["depth"] == 110 and data["kept_messages"] == 20
    assert data["tokens_removed"] > data["placeholder_tokens"] > 0
    assert data["tokens_before"] - data["tokens_removed"] + data["placeholder_tokens"] == data["tokens_after"]
    assert data["archive_ref"].startswith("archive://session/")
    assert CliRunner().invoke(app, ["validate", str(output), "--api", "anthropic"]).exit_code == 0
    first = data["cleared_message_indices"][0]
    restored = CliRunner().invoke(app, ["restore", f"{data['archive_ref']}#msg-{first}"])
    original = json.loads(EXAMPLE.read_text("utf-8").splitlines()[first])
    assert json.loads(restored.stdout) == original
    hits = json.loads(CliRunner().invoke(app, ["recall", "eu_invoices.csv", "--json"]).stdout)
    assert data["archive_ref"] in [h["ref"] for h in hits]


def test_cli_compact_action_clear_refuses_summary_options(tmp_path):
    done = CliRunner().invoke(app, ["compact", str(EXAMPLE), "--action", "clear", "--force", "--dry-run"])
    assert done.exit_code != 0
    assert "--action clear" in done.output


def test_clear_file_failing_output_leaves_no_archive(tmp_path, monkeypatch):
    from dp_compact.errors import CompactionError
    from dp_compact.pipeline import clear as clear_module

    def broken(*args, **kwargs):
        raise CompactionError("disk full")

    monkeypatch.setattr(clear_module, "write_messages", broken)
    store = ArchiveStore(tmp_path / "archive")
    with pytest.raises(CompactionError):
        clear_file(EXAMPLE, output=tmp_path / "out.jsonl", keep=10, archiver=store)
    assert store.search("eu_invoices.csv") == []
    assert not (tmp_path / "out.jsonl").exists()
