"""The hot path (dp_compact.hot): a transcript's kept state gives what a whole read gives."""

from __future__ import annotations

import json
import os
import pickle
import re
import sys
from pathlib import Path

import pytest

import dp_compact.settings  # noqa: F401  the real module: the hot path's stand-in is never installed in this process
from dp_compact.hot import main as hot
from dp_compact.hot.settings import KeptSettings, settings_key
from dp_compact.hot.state import state_dir
from dp_compact.hot.transcript import NotIncremental, read_grown
from dp_compact.sessions import read_session
from dp_compact.settings import load_settings
from tests.conftest import REFERENCE, SESSIONS, need, session_files
from tests.hot_helpers import run_in_process

CLAUDE_CODE = sorted((SESSIONS / "claude_code").glob("*.jsonl")) if SESSIONS.exists() else []
SMALL = "cc_raze_hooks.jsonl"


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _grown(path: Path, data: bytes, kept: bytes | None):
    """read_grown from the kept state, and from nothing when it cannot continue (what the hot path does)."""
    try:
        return read_grown(str(path), data, pickle.loads(kept) if kept else None)
    except NotIncremental:
        return read_grown(str(path), data, None)


def _sweep(source: Path, tmp_path: Path, steps: list[int]) -> int:
    """Append ``source``'s lines to a copy up to each of ``steps`` lines; at each, the session read
    from the kept state equals a whole read (and with half of the next line written). Returns the steps compared."""
    lines = _lines(source)
    copy = tmp_path / source.name
    kept, compared, done = None, 0, 0
    for step in steps:
        data = b"".join(lines[:step])
        copy.write_bytes(data)
        try:
            whole = read_session(copy, raw_json=True)
        except ValueError:  # a few records are not yet a session a reader accepts
            kept = None
            continue
        session, kept = _grown(copy, data, kept)
        assert session == whole, f"{source.name}: {step} lines"
        compared += 1
        if step < len(lines):
            half = data + lines[step][: len(lines[step]) // 2]
            copy.write_bytes(half)
            assert _grown(copy, half, kept)[0] == read_session(copy, raw_json=True), f"{source.name}: {step} lines and a half"
        done = step
    assert done == steps[-1]
    return compared


@pytest.mark.parametrize("source", CLAUDE_CODE, ids=lambda p: p.name)
def test_read_grown_equals_a_whole_read_at_sampled_appends(source, tmp_path):
    lines = _lines(source)
    steps = sorted({*range(1, min(len(lines), 12) + 1), *range(1, len(lines) + 1, max(1, len(lines) // 8)), len(lines)})
    assert _sweep(source, tmp_path, steps) > 5


@pytest.mark.slow
@pytest.mark.parametrize("source", CLAUDE_CODE, ids=lambda p: p.name)
def test_read_grown_equals_a_whole_read_after_every_append(source, tmp_path):
    lines = _lines(source)
    assert _sweep(source, tmp_path, list(range(1, len(lines) + 1))) > len(lines) // 2


def test_read_grown_refuses_a_rewrite_that_is_not_an_append(tmp_path):
    source = need(SESSIONS / "claude_code" / SMALL)
    data = source.read_bytes()
    _, kept = read_grown(str(source), data, None)
    middle = len(data) // 2
    for changed in (data[:-10], data[:middle] + b"X" + data[middle + 1 :], b" " + data[1:], data[:middle] + data[middle + 1 :] + b"\n"):
        with pytest.raises(NotIncremental):
            read_grown(str(source), changed, pickle.loads(kept))


def _kept_states() -> list[Path]:
    return sorted(state_dir().glob("*.pickle")) if state_dir().exists() else []


def _plan_matches_full(copy: Path, capsys, monkeypatch, *, as_json: bool = True) -> str:
    args = ["plan", str(copy), *(["--json"] if as_json else [])]
    hot_run = run_in_process(args, capsys, monkeypatch)
    full_run = run_in_process(args, capsys, monkeypatch, hot_path=False)
    assert hot_run == full_run
    return hot_run[1]


@pytest.mark.parametrize("name", [SMALL, "cc_privacy_x402.jsonl"])
def test_plan_from_the_kept_state_prints_what_the_whole_command_prints(name, tmp_path, capsys, monkeypatch):
    source = need(SESSIONS / "claude_code" / name)
    lines = _lines(source)
    copy = tmp_path / "live.jsonl"
    start = max(len(lines) - 6, 3)
    copy.write_bytes(b"".join(lines[:start]))
    _plan_matches_full(copy, capsys, monkeypatch)
    assert len(_kept_states()) == 1  # the first run read it whole and kept its state
    for line in lines[start:]:
        with open(copy, "ab") as handle:
            handle.write(line)
        _plan_matches_full(copy, capsys, monkeypatch, as_json=line is not lines[-1])


def test_plan_from_the_kept_state_loads_no_typer_pydantic_or_price_data(tmp_path):
    import subprocess

    source = need(SESSIONS / "claude_code" / SMALL)
    lines = _lines(source)
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(b"".join(lines[:-1]))
    env = {**os.environ}
    code = ("import sys\nfrom dp_compact.cli import main\nsys.argv = ['dp-compact', 'plan', sys.argv[1], '--json']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('typer', 'pydantic', 'pydantic_settings', 'genai_prices', 'tiktoken', 'dp_compact.calibration')"
            " if m in sys.modules), file=sys.stderr)")
    first = subprocess.run([sys.executable, "-c", code, str(copy)], capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    with open(copy, "ab") as handle:
        handle.write(lines[-1])
    second = subprocess.run([sys.executable, "-c", code, str(copy)], capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert "typer" in first.stderr  # the first run is the whole command line
    assert second.stderr.strip().splitlines()[-1] == "[]", second.stderr
    assert json.loads(second.stdout)["session"]["format"] == "claude_code"


def test_plan_reads_whole_after_a_change_that_is_not_an_append(tmp_path, capsys, monkeypatch):
    source = need(SESSIONS / "claude_code" / "cc_privacy_x402.jsonl")
    lines = _lines(source)
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(b"".join(lines))
    _plan_matches_full(copy, capsys, monkeypatch)
    copy.write_bytes(b"".join(lines[:-5]))  # truncated
    _plan_matches_full(copy, capsys, monkeypatch)
    edited = b"".join(lines[:-5]).replace(b'"type":"user"', b'"type": "user"', 1)  # edited in the middle, longer
    copy.write_bytes(edited)
    _plan_matches_full(copy, capsys, monkeypatch)
    same_size = edited.replace(b"a", b"e", 3)  # same size, other bytes
    assert len(same_size) == len(edited) != same_size
    copy.write_bytes(same_size)
    _plan_matches_full(copy, capsys, monkeypatch)


def test_plan_reads_whole_when_the_settings_change(tmp_path, capsys, monkeypatch):
    source = need(SESSIONS / "claude_code" / SMALL)
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(source.read_bytes())
    first = _plan_matches_full(copy, capsys, monkeypatch)
    key = settings_key()
    monkeypatch.setenv("DP_P_INPUT", "7.5")
    assert settings_key() != key
    changed = _plan_matches_full(copy, capsys, monkeypatch)
    assert json.loads(changed)["prices"]["p_input"] == 7.5 != json.loads(first)["prices"]["p_input"]
    monkeypatch.delenv("DP_P_INPUT")
    (tmp_path / ".env").write_text("DP_S=900\n")  # the working folder's .env is read (conftest chdirs to tmp_path)
    assert settings_key() != key
    from_env_file = _plan_matches_full(copy, capsys, monkeypatch)
    assert json.loads(from_env_file)["settings"]["s"] == 900


#: Files of the other formats small enough for the fast selection (bytes).
_SMALL_BYTES = 200_000


def _kinds() -> list:
    return [p if p.stat().st_size <= _SMALL_BYTES else pytest.param(p, marks=pytest.mark.slow)
            for p in session_files() if p.parent.name != "claude_code"]


@pytest.mark.parametrize("source", _kinds(), ids=lambda p: getattr(p, "name", None))
def test_plan_of_other_formats_is_the_whole_commands_after_an_append_or_a_rewrite(source, tmp_path, capsys, monkeypatch):
    copy = tmp_path / source.name
    data = source.read_bytes()
    lines = data.splitlines(keepends=True)
    line_format = len(lines) > 2 and all(line.lstrip()[:1] in (b"{", b"") for line in lines[:3])
    copy.write_bytes(b"".join(lines[:-1]) if line_format else data)
    first = run_in_process(["plan", str(copy), "--json"], capsys, monkeypatch)
    assert first == run_in_process(["plan", str(copy), "--json"], capsys, monkeypatch, hot_path=False)
    if line_format:
        copy.write_bytes(data)  # one record appended
    else:  # one JSON document: it cannot be appended to; rewritten
        copy.write_text(json.dumps(json.loads(data), indent=1, ensure_ascii=False))
    assert run_in_process(["plan", str(copy), "--json"], capsys, monkeypatch) == run_in_process(["plan", str(copy), "--json"], capsys, monkeypatch, hot_path=False)
    from dp_compact.hot.lines import INCREMENTAL_FORMATS
    from dp_compact.sessions import read_session

    # the JSONL formats the hot path continues, and one JSON document a reader reads (dp_compact.hot.document: read whole
    # from its kept state each time); no state for the others
    continued = read_session(source, raw_json=True).format in INCREMENTAL_FORMATS if line_format else first[0] in (0, 10)
    assert bool(_kept_states()) == continued


@pytest.mark.slow
@pytest.mark.parametrize("name", [SMALL, "cc_privacy_x402.jsonl"])
def test_plan_from_the_kept_state_is_the_whole_commands_after_every_append(name, tmp_path, capsys, monkeypatch):
    lines = _lines(need(SESSIONS / "claude_code" / name))
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(b"".join(lines[:2]))
    for line in lines[2:]:
        with open(copy, "ab") as handle:
            handle.write(line)
        _plan_matches_full(copy, capsys, monkeypatch)


def _status(path: Path) -> str:
    return json.dumps({"hook_event_name": "Status", "session_id": "s", "transcript_path": str(path), "model": {"id": "claude-sonnet-4-5"}})


def test_hook_status_line_from_the_kept_state_is_the_whole_commands(tmp_path, capsys, monkeypatch):
    source = need(SESSIONS / "claude_code" / "cc_privacy_x402.jsonl")
    lines = _lines(source)
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(b"".join(lines[:-3]))
    for line in lines[-3:]:
        hot_run = run_in_process(["hook"], capsys, monkeypatch, stdin=_status(copy))
        assert hot_run == run_in_process(["hook"], capsys, monkeypatch, hot_path=False, stdin=_status(copy))
        assert hot_run[0] == 0 and hot_run[1].startswith("ctx ")
        with open(copy, "ab") as handle:
            handle.write(line)
    assert any(p.name.startswith("hook-") for p in _kept_states())


@pytest.mark.parametrize("hot_path", [True, False])
def test_hook_status_line_names_a_missing_transcript_in_one_visible_line(hot_path, tmp_path, capsys, monkeypatch):
    code, out, err = run_in_process(["hook"], capsys, monkeypatch, hot_path=hot_path, stdin=_status(tmp_path / "gone.jsonl"))
    assert code == 1
    assert out.strip() == "dp-compact: cannot read the file: No such file or directory"  # the status line shows stdout
    assert err.strip().startswith("dp-compact: ") and "gone.jsonl" in err and len(err.strip().splitlines()) == 1


def test_hook_status_line_names_an_unreadable_transcript_in_one_visible_line(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "folder.jsonl"
    folder.mkdir()
    code, out, _ = run_in_process(["hook"], capsys, monkeypatch, stdin=_status(folder))
    assert code == 1 and out.startswith("dp-compact: a folder, not a session file")


def test_plan_names_a_missing_transcript_in_one_line(tmp_path, capsys, monkeypatch):
    code, out, err = run_in_process(["plan", str(tmp_path / "gone.jsonl")], capsys, monkeypatch)
    assert code == 2 and out == ""
    assert err.strip() == f"dp-compact: {tmp_path / 'gone.jsonl'}: cannot read the file: No such file or directory"
    code, out, _ = run_in_process(["plan", str(tmp_path / "gone.jsonl"), "--json"], capsys, monkeypatch)
    assert code == 2 and json.loads(out)["error"]["type"] == "SessionError"


def test_kept_settings_answer_as_the_settings_do(monkeypatch):
    monkeypatch.setenv("DP_PROVIDER", "gpt-4o")
    monkeypatch.setenv("DP_V", "9000")
    real = load_settings()
    kept = pickle.loads(pickle.dumps(KeptSettings.of(real)))
    assert kept.model_dump() == real.model_dump()
    assert kept.model_dump(exclude_unset=True) == real.model_dump(exclude_unset=True)
    assert kept.model_fields_set == real.model_fields_set and kept.explicit_provider() is real.explicit_provider() is True
    copied, real_copied = kept.model_copy(update={"model": "seed"}), real.model_copy(update={"model": "seed"})
    assert copied.model_dump() == real_copied.model_dump() and copied.model_fields_set == real_copied.model_fields_set
    for name in type(real).model_fields:
        assert getattr(kept, name) == getattr(real, name)
    with pytest.raises(AttributeError):
        kept.v = 1


def test_counts_without_the_encoder_equal_tiktokens_on_every_shared_message():
    from dp_compact.measure.bpe import MAX_CHARS, count_ordinary
    from dp_compact.measure.tokens import _encoding, message_token_text

    files = session_files()
    if not files:
        pytest.skip("../shared/sessions is absent")
    encoding = _encoding()
    ranks = encoding._mergeable_ranks
    compared = 0
    for path in files:
        try:
            messages = read_session(path, lenient=True).messages
        except ValueError:
            continue
        for message in messages:
            text = message_token_text(message)[:MAX_CHARS]
            counted = count_ordinary([text], ranks)
            if counted is not None:
                assert counted == [len(encoding.encode_ordinary(text))], (path.name, text[:80])
                compared += 1
    assert compared > 1000


def test_counts_without_the_encoder_leave_unsure_text_to_tiktoken():
    from dp_compact.measure.bpe import count_ordinary

    ranks = {b"a": 0}
    assert count_ordinary(["\u0d15\u0d3e"], ranks) is None  # Malayalam: not a block this module reads
    assert count_ordinary(["x" * 50_000], ranks) is None
    assert count_ordinary(["a"], None) is None


def _pre_compact(path: Path) -> str:
    return json.dumps({"hook_event_name": "PreCompact", "session_id": "s", "transcript_path": str(path), "trigger": "auto"})


#: An archive reference's id (time and random part), which differs from run to run.
_ARCHIVE_ID = re.compile(r"archive://([^/\s]+)/\d{8}T\d{12}Z-[0-9a-f]{8}")


def _archived(ref: str, root: Path | None = None) -> tuple[list, dict, tuple]:
    """What the archive (``root``, default ``DP_ARCHIVE_DIR``'s) holds under ``ref``: its messages, its metadata
    without id and time, its index row's count and digest."""
    from dp_compact.pipeline.archive import ArchiveStore

    store = ArchiveStore(root)
    meta = {k: v for k, v in store.metadata(ref).items() if k not in ("ref", "id", "created")}
    return store.restore(ref), meta, store.index.lookup(ref)[2:]


def test_hook_pre_compact_from_the_kept_state_archives_what_the_whole_command_archives(tmp_path, capsys, monkeypatch):
    source = need(SESSIONS / "claude_code" / "cc_privacy_x402.jsonl")
    lines = _lines(source)
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(b"".join(lines[:-2]))
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    assert hot.warm(["hook"], _pre_compact(copy)) is None  # no state kept yet: the application runs it
    run_in_process(["hook"], capsys, monkeypatch, stdin=_status(copy))  # the status line keeps the state
    for line in lines[-2:]:
        with open(copy, "ab") as handle:
            handle.write(line)
        capsys.readouterr()
        assert hot.warm(["hook"], _pre_compact(copy)) == 0  # from the kept state: no Typer, no settings built
        warm_out, warm_err = capsys.readouterr()
        monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive-full"))  # its own archive: a store archives a conversation once
        full_run = run_in_process(["hook"], capsys, monkeypatch, hot_path=False, stdin=_pre_compact(copy))
        monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
        assert full_run[0] == 0 and warm_err == full_run[2] == ""
        assert _ARCHIVE_ID.sub(r"archive://\1/ID", warm_out) == _ARCHIVE_ID.sub(r"archive://\1/ID", full_run[1])
        assert warm_out.startswith(f"dp-compact: archived {len(read_session(copy, lenient=True).messages)} messages as archive://live/")
        warm_ref, full_ref = (_ARCHIVE_ID.search(out).group(0) for out in (warm_out, full_run[1]))
        assert warm_ref != full_ref and _archived(warm_ref) == _archived(full_ref, tmp_path / "archive-full")
        again = run_in_process(["hook"], capsys, monkeypatch, stdin=_pre_compact(copy))  # the entry point takes it warm as well
        assert again[0] == 0 and again[1].strip().endswith(f"{warm_ref} (already archived)")


def test_hook_pre_compact_from_the_kept_state_loads_no_typer_or_pydantic(tmp_path):
    import subprocess

    source = need(SESSIONS / "claude_code" / SMALL)
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(source.read_bytes())
    env = {**os.environ, "DP_ARCHIVE_DIR": str(tmp_path / "archive")}
    code = ("import sys\nfrom dp_compact.cli import main\nsys.argv = ['dp-compact', 'hook']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('typer', 'pydantic', 'pydantic_settings', 'dp_compact.cli.app') if m in sys.modules), file=sys.stderr)")
    for payload in (_status(copy), _pre_compact(copy)):
        done = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert done.stdout.startswith("dp-compact: archived ") and done.stderr.strip().splitlines()[-1] == "[]", done.stderr


def test_hook_pre_compact_with_other_settings_is_the_whole_commands(tmp_path, capsys, monkeypatch):
    source = need(SESSIONS / "claude_code" / SMALL)
    copy = tmp_path / "live.jsonl"
    copy.write_bytes(source.read_bytes())
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    run_in_process(["hook"], capsys, monkeypatch, stdin=_status(copy))
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "elsewhere"))  # the kept settings are not current
    assert hot.warm(["hook"], _pre_compact(copy)) is None
    code, out, _ = run_in_process(["hook"], capsys, monkeypatch, stdin=_pre_compact(copy))
    assert code == 0 and (tmp_path / "elsewhere" / "live").is_dir() and not (tmp_path / "archive" / "live").exists()
    assert hot.warm(["hook"], _pre_compact(copy)) == 0  # the run kept the state under the new settings
    assert capsys.readouterr().out.startswith("dp-compact: archived ")


def test_kept_price_lookups_answer_without_the_price_data(monkeypatch):
    from datetime import date

    import dp_compact.prepare
    from dp_compact import pricing
    from dp_compact.errors import UnknownProfileError

    day = date(2026, 1, 5)
    known = pricing.get_prices("claude-opus-4-6", day)
    with pytest.raises(UnknownProfileError) as unknown:
        pricing.get_prices("no-such-model-at-all", day)
    kept = pickle.loads(pickle.dumps(pricing.price_lookups()))  # as the state keeps them
    assert ("claude-opus-4-6", "2026-01-05") in kept and not any(name == "claude-sonnet-4" for name, _ in kept)  # built-ins are not looked up
    monkeypatch.setattr(pricing, "_LOOKUPS", {})

    def no_data():
        raise AssertionError("the price data were read")

    monkeypatch.setattr(pricing, "_bundled_snapshot", no_data)
    pricing.seed_price_lookups({**kept, ("bad",): 1, ("x", "2026-01-05"): "not prices"})  # other layouts are left out
    assert pricing.get_prices("claude-opus-4-6", day) == known
    with pytest.raises(UnknownProfileError) as again:
        pricing.get_prices("no-such-model-at-all", day)
    assert again.value.close_matches == unknown.value.close_matches
    with pytest.raises(AssertionError, match="price data"):
        pricing.get_prices("claude-opus-4-6", date(2026, 1, 6))  # another day is looked up
    assert dp_compact.prepare.get_prices is pricing.get_prices  # the hot path answers through pricing's own lookups


def test_hot_form_takes_the_seed_stats_option_in_either_spelling():
    assert hot.hot_form(["plan", "c.jsonl", "--stats", "s.json", "--json"]) == ("plan", "c.jsonl", True, "s.json")
    assert hot.hot_form(["plan", "--stats=s.json", "c.jsonl"]) == ("plan", "c.jsonl", False, "s.json")
    assert hot.hot_form(["plan", "c.jsonl", "--stats"]) is None  # no value: the application says so
    assert hot.hot_form(["plan", "c.jsonl", "--stats", "s.json", "--now", "now"]) is None


@pytest.mark.parametrize("live", [False, True], ids=["one-shot process", "plan server"])
def test_plan_of_a_seed_conversation_with_stats_from_the_kept_state(live, tmp_path, capsys, monkeypatch):
    """The seed agent's conversation file (Anthropic messages JSONL) and its stats.json: after each
    appended line the hot path prints what the whole command prints; in a long-lived process the
    reader state is taken from memory (the kept file not read), and a rewrite is read whole again."""
    from dp_compact.hot.lines import LinesState

    source = need(REFERENCE / "conversations" / "d03_small_50.jsonl")
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"current_turn_count": 3, "agent_request_count": 15, "compact_request_count": 0,
                                 "total_input_tokens": 60000, "current_context_tokens": 100000}))
    monkeypatch.setattr(hot, "keep_live", live)
    monkeypatch.setattr(hot, "_LIVE", {})
    lines = _lines(source)
    copy = tmp_path / "conversation.jsonl"
    copy.write_bytes(b"".join(lines[:30]))
    args = ["plan", str(copy), "--stats", str(stats), "--json"]
    assert run_in_process(args, capsys, monkeypatch) == run_in_process(args, capsys, monkeypatch, hot_path=False)
    assert len(_kept_states()) == 1
    for at, line in enumerate(lines[30:]):
        with open(copy, "ab") as handle:
            handle.write(line)
        if live and at:  # the state of the last run is in memory: the kept file is not loaded
            assert [type(v[2]) for v in hot._LIVE.values()] == [LinesState]
            monkeypatch.setattr(hot, "_kept_state", lambda *a: pytest.fail("loaded the kept file"))
        code, out, err = run_in_process(args, capsys, monkeypatch)
        monkeypatch.setattr(hot, "_kept_state", _KEPT_STATE)
        assert (code, out, err) == run_in_process(args, capsys, monkeypatch, hot_path=False)
        assert json.loads(out)["N"] == 30 + at + 1
    copy.write_bytes(b"".join(lines[:40]))  # rewritten: read whole, the same as the command
    assert run_in_process(args, capsys, monkeypatch) == run_in_process(args, capsys, monkeypatch, hot_path=False)


_KEPT_STATE = hot._kept_state
