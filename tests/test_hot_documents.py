"""The hot path on session files that are one JSON document (dp_compact.hot.document): the kept state
of a document rewritten whole after each call plans it as the application does, byte for byte."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import dp_compact.settings  # noqa: F401  the real module: the hot path's stand-in is never installed in this process
from dp_compact.hot import main as hot
from dp_compact.hot.document import DocumentState
from dp_compact.hot.state import state_dir
from tests.conftest import SESSIONS, need, session_files
from tests.hot_helpers import run_client, run_in_process

#: A Cline ``api_conversation_history.json`` is a JSON array of Anthropic messages: built from the shared JSONL one.
CLINE_HISTORY = "anthropic_messages/cline_api_history_cardgame.jsonl"
#: Rewrites compared per growing document in the fast selection (the slow one compares every call).
STEPS = 5


def _documents() -> list[Path]:
    """The shared session files that are one JSON document (the Cline UI log among them: an error)."""
    from dp_compact.sessions.source import read_source

    return [p for p in session_files() if read_source(p).document is not None]


def _document_ids(path: Any) -> str:
    return getattr(path, "name", str(path))


def _parts(source: Path) -> tuple[Any, str | None, list[Any]]:
    """``(document, key of its list of messages or steps (None: the document is the list), that list)``;
    a JSONL file is read as the array of its records (as Cline writes its API history)."""
    data = source.read_bytes()
    if source.suffix == ".jsonl":
        document: Any = [json.loads(line) for line in data.splitlines() if line.strip()]
    else:
        document = json.loads(data)
    if isinstance(document, list):
        return document, None, document
    for key in ("history", "messages", "steps"):  # SWE-agent .traj, {"messages": [...]}, ATIF
        if isinstance(document.get(key), list):
            return document, key, document[key]
    raise AssertionError(f"{source.name}: no list of messages")


def _write(copy: Path, document: Any, key: str | None, items: list[Any], m: int, *, compact: bool = False) -> None:
    """The document with its first ``m`` messages (steps), written whole as an agent rewrites it."""
    value = items[:m] if key is None else {**document, key: items[:m]}
    copy.write_text(json.dumps(value, ensure_ascii=False) if compact else json.dumps(value, indent=2, ensure_ascii=False))


def _calls(items: list[Any]) -> list[int]:
    """The lengths ``m`` at which the ``m``-th item is a call (an assistant message, an ATIF agent step)."""
    return [at + 1 for at, item in enumerate(items)
            if isinstance(item, dict) and (item.get("role") == "assistant" or item.get("source") == "agent")]


def _compared(args: list[str], capsys, monkeypatch, *, stdin: str | None = None) -> tuple[tuple[int, str, str], bool]:
    """The hot path's run of ``args`` (it equals the application's) and whether the kept state answered it
    (the application did not run)."""
    full_runs: list[Any] = []
    real_full = hot._full

    def counted(*a: Any, **k: Any) -> int:
        full_runs.append(a)
        return real_full(*a, **k)

    monkeypatch.setattr(hot, "_full", counted)
    hot_run = run_in_process(args, capsys, monkeypatch, stdin=stdin)
    monkeypatch.setattr(hot, "_full", real_full)
    assert hot_run == run_in_process(args, capsys, monkeypatch, hot_path=False, stdin=stdin)
    return hot_run, not full_runs


def _kept_states() -> list[Path]:
    return sorted(state_dir().glob("*.pickle")) if state_dir().exists() else []


def _grow(source: Path, copy: Path, capsys, monkeypatch, lengths: list[int], *, as_json: bool = True,
          compact: bool = False) -> int:
    """Rewrite ``copy`` with the first ``m`` messages of ``source`` for each of ``lengths``; each plan is the
    application's, and every one after the first is answered from the kept state. Returns the plans compared."""
    document, key, items = _parts(source)
    args = ["plan", str(copy), *(["--json"] if as_json else [])]
    for at, m in enumerate(lengths):
        _write(copy, document, key, items, m, compact=compact)
        (code, _, _), warm = _compared(args, capsys, monkeypatch)
        assert code in (0, 10), f"{source.name}: {m} messages"
        assert warm == (at > 0), f"{source.name}: {m} messages, {'not ' if not warm else ''}answered from the kept state"
    return len(lengths)


def _sample(lengths: list[int], count: int) -> list[int]:
    """``count`` of ``lengths`` spread over them, the last included; consecutive calls at the end
    (a rewrite that adds one call)."""
    if len(lengths) <= count:
        return lengths
    step = max(1, (len(lengths) - 3) // (count - 2))
    return sorted({*lengths[: -3: step][: count - 2], *lengths[-2:]})


def _growing() -> list[Any]:
    files = [p for p in _documents() if p.name != "cline_ui_messages_cardgame.json"]
    if SESSIONS.exists() and (SESSIONS / CLINE_HISTORY).exists():
        files.append(SESSIONS / CLINE_HISTORY)
    return files


@pytest.mark.parametrize("source", _documents(), ids=_document_ids)
def test_plan_of_a_shared_document_is_the_applications_and_its_state_is_kept(source, tmp_path, capsys, monkeypatch):
    copy = tmp_path / source.name
    shutil.copyfile(source, copy)
    for as_json in (True, False):
        args = ["plan", str(copy), *(["--json"] if as_json else [])]
        first, _ = _compared(args, capsys, monkeypatch)
        second, warm = _compared(args, capsys, monkeypatch)
        assert first == second
    error = first[0] not in (0, 10)
    assert warm != error  # a session: the second run is answered from the kept state; an error: the application's
    assert bool(_kept_states()) != error
    if error:  # the Cline UI log: the application's message and status, and nothing kept
        assert first[0] == 2 and "Cline UI log" in first[2]


@pytest.mark.parametrize("source", _growing(), ids=_document_ids)
def test_plan_of_a_growing_document_is_the_applications_after_each_rewrite(source, tmp_path, capsys, monkeypatch):
    _, _, items = _parts(source)
    lengths = _sample(_calls(items), STEPS)
    assert len(lengths) >= 3
    copy = tmp_path / (source.stem + ".json" if source.suffix == ".jsonl" else source.name)
    assert _grow(source, copy, capsys, monkeypatch, lengths) == len(lengths)
    assert len(_kept_states()) == 1
    # also written on one line, as JSON.stringify and json.dump without indent write it
    compact = tmp_path / f"compact-{copy.name}"
    _grow(source, compact, capsys, monkeypatch, lengths[-3:], as_json=False, compact=True)


@pytest.mark.slow
@pytest.mark.parametrize("source", _growing(), ids=_document_ids)
def test_plan_of_a_growing_document_is_the_applications_after_every_call(source, tmp_path, capsys, monkeypatch):
    _, _, items = _parts(source)
    copy = tmp_path / (source.stem + ".json" if source.suffix == ".jsonl" else source.name)
    _grow(source, copy, capsys, monkeypatch, _calls(items))


def test_plan_of_a_document_changed_otherwise_is_the_applications(tmp_path, capsys, monkeypatch):
    """Shorter, edited in the middle, edited to the same size, written as JSONL, broken, a UI log, removed:
    each run prints what the application prints (from the kept state where the file is a session document)."""
    source = need(SESSIONS / "openai_chat" / "miniswe_github_issue.traj.json")
    document, key, items = _parts(source)
    copy = tmp_path / "trajectory.json"
    args = ["plan", str(copy), "--json"]
    _write(copy, document, key, items, len(items))
    _compared(args, capsys, monkeypatch)
    _write(copy, document, key, items, len(items) - 4)  # shorter
    assert _compared(args, capsys, monkeypatch)[1]
    edited = copy.read_text().replace("helpful assistant", "careful assistant", 1)  # same size, other text
    assert len(edited) == len(copy.read_text()) and edited != copy.read_text()
    copy.write_text(edited)
    assert _compared(args, capsys, monkeypatch)[1]
    copy.write_text(edited.replace("careful assistant", "very careful assistant", 1))  # longer, in the middle
    assert _compared(args, capsys, monkeypatch)[1]
    copy.write_text("".join(json.dumps(item) + "\n" for item in items))  # the same messages, as JSONL
    assert not _compared(args, capsys, monkeypatch)[1]  # read whole once (its lines' state kept), then continued
    with open(copy, "a") as handle:
        handle.write(json.dumps({"role": "user", "content": "go on"}) + "\n")
    assert _compared(args, capsys, monkeypatch)[1]
    _write(copy, document, key, items, len(items))  # a document again
    _compared(args, capsys, monkeypatch)
    assert _compared(args, capsys, monkeypatch)[1]
    text = copy.read_text()
    for broken in (text[: len(text) // 2], text[:-2], text.replace('"role"', '"role" "', 1), ""):
        copy.write_text(broken)
        for run_args in (args, args[:-1]):
            code, out, err = _compared(run_args, capsys, monkeypatch)[0]
            assert code != 0 or broken == "", (broken[-40:], out, err)
    ui_log = need(SESSIONS / "other" / "cline_ui_messages_cardgame.json")
    shutil.copyfile(ui_log, copy)
    (code, _, err), warm = _compared(args[:-1], capsys, monkeypatch)
    assert code == 2 and "Cline UI log" in err and not warm
    copy.unlink()
    (code, _, err), _ = _compared(args[:-1], capsys, monkeypatch)
    assert code == 2 and "cannot read the file" in err


def test_plan_of_a_document_with_stats_and_settings_from_the_kept_state(tmp_path, capsys, monkeypatch):
    source = need(SESSIONS / "other" / "atif_terminus_hvac.json")
    document, key, items = _parts(source)
    stats = tmp_path / "stats.json"
    stats.write_text(json.dumps({"current_turn_count": 3, "agent_request_count": 15, "compact_request_count": 0,
                                 "total_input_tokens": 60000, "current_context_tokens": 100000}))
    copy = tmp_path / "trajectory.json"
    args = ["plan", str(copy), "--stats", str(stats), "--json"]
    lengths = _calls(items)[-3:]
    _write(copy, document, key, items, lengths[0])
    _compared(args, capsys, monkeypatch)
    for m in lengths[1:]:
        _write(copy, document, key, items, m)
        assert _compared(args, capsys, monkeypatch)[1]
    monkeypatch.setenv("DP_P_INPUT", "7.5")  # other settings: read whole by the application, then kept again
    (_, out, _), warm = _compared(args, capsys, monkeypatch)
    assert not warm and json.loads(out)["prices"]["p_input"] == 7.5
    _write(copy, document, key, items, len(items))
    assert _compared(args, capsys, monkeypatch)[1]


def _status(path: Path) -> str:
    return json.dumps({"hook_event_name": "Status", "session_id": "s", "transcript_path": str(path), "model": {"id": "claude-sonnet-4-5"}})


def test_hook_status_line_of_a_growing_document_is_the_applications(tmp_path, capsys, monkeypatch):
    source = need(SESSIONS / "openai_chat" / "sweagent_marshmallow_fc.traj")
    document, key, items = _parts(source)
    copy = tmp_path / "trajectory.traj"
    for at, m in enumerate(_calls(items)[-3:]):
        _write(copy, document, key, items, m)
        (code, out, _), warm = _compared(["hook"], capsys, monkeypatch, stdin=_status(copy))
        assert code == 0 and out.startswith("ctx ") and warm == (at > 0)
    assert [p.name.split("-")[0] for p in _kept_states()] == ["hook"]


def test_plan_server_keeps_a_documents_state_in_memory(tmp_path, capsys, monkeypatch):
    """In a long-lived process (the plan server) the document's state is taken from memory, the kept
    file not read again; the answers are still the application's."""
    source = need(SESSIONS / "openai_chat" / "oai_task393c91_converted.json")
    document, key, items = _parts(source)
    monkeypatch.setattr(hot, "keep_live", True)
    monkeypatch.setattr(hot, "_LIVE", {})
    copy = tmp_path / "converted.json"
    args = ["plan", str(copy), "--json"]
    lengths = _calls(items)[-4:]
    _write(copy, document, key, items, lengths[0])
    _compared(args, capsys, monkeypatch)
    kept_state = hot._kept_state
    for at, m in enumerate(lengths[1:]):
        _write(copy, document, key, items, m)
        if at:
            assert [type(v[2]) for v in hot._LIVE.values()] == [DocumentState]
            monkeypatch.setattr(hot, "_kept_state", lambda *a: pytest.fail("loaded the kept file"))
        (_, out, _), warm = _compared(args, capsys, monkeypatch)
        monkeypatch.setattr(hot, "_kept_state", kept_state)
        assert warm and json.loads(out)["N"] > 0


def test_plan_of_a_document_from_the_kept_state_loads_no_typer_pydantic_or_price_data(tmp_path):
    source = need(SESSIONS / "openai_chat" / "miniswe_github_issue.traj.json")
    document, key, items = _parts(source)
    copy = tmp_path / "trajectory.json"
    lengths = _calls(items)
    code = ("import sys\nfrom dp_compact.cli import main\nsys.argv = ['dp-compact', 'plan', sys.argv[1], '--json']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('typer', 'pydantic', 'pydantic_settings', 'genai_prices', 'tiktoken', 'dp_compact.calibration')"
            " if m in sys.modules), file=sys.stderr)")
    _write(copy, document, key, items, lengths[-2])
    first = subprocess.run([sys.executable, "-c", code, str(copy)], capture_output=True, text=True, cwd=tmp_path, check=True)
    _write(copy, document, key, items, lengths[-1])
    second = subprocess.run([sys.executable, "-c", code, str(copy)], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert "typer" in first.stderr  # the first run is the whole command line
    assert second.stderr.strip().splitlines()[-1] == "[]", second.stderr
    full = subprocess.run([sys.executable, "-m", "dp_compact.cli", "plan", str(copy), "--json"], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "NO_DP_COMPACT_HOT": "1"}, check=False)
    assert second.stdout == full.stdout


# --- the plan server, in its own process -------------------------------------------------------

def test_plan_server_answers_a_rewritten_document_as_the_application(server, env, tmp_path):
    source = need(SESSIONS / "other" / "atif_terminus_hvac.json")
    document, key, items = _parts(source)
    copy = tmp_path / "trajectory.json"
    args = ["plan", str(copy), "--json"]
    lengths = _calls(items)[-3:]
    _write(copy, document, key, items, lengths[0])
    assert run_client(args, env, tmp_path)[0][0] in (0, 10)  # no state yet: run here, state kept
    for m in lengths[1:]:
        _write(copy, document, key, items, m)
        served, answered = run_client(args, env, tmp_path)
        assert answered and served == run_client(args, env, tmp_path, hot_path=False)[0]
    copy.write_text(copy.read_text()[:-20])  # broken: the application's message and status
    served, answered = run_client(args, env, tmp_path)
    assert not answered and served[0] == 2 and served == run_client(args, env, tmp_path, hot_path=False)[0]
