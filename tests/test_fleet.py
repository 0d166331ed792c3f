"""Fleet runs (dp_compact.fleet): Dask and the local pool agree, fsspec inputs, Parquet rows, failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import SESSIONS, need

distributed = pytest.importorskip("distributed")
fsspec = pytest.importorskip("fsspec")
pq = pytest.importorskip("pyarrow.parquet")

from dp_compact.calibration import calibrate  # noqa: E402
from dp_compact.fleet.jobs import calibrate_fleet, replay_fleet  # noqa: E402
from dp_compact.fleet.parquet import REPLAY_COLUMNS, replay_table, write_parquet  # noqa: E402
from dp_compact.fleet.jobs import replay_directory  # noqa: E402
from dp_compact.settings import Settings  # noqa: E402

POLICIES = ["dp", "never", "claude-code", "threshold:0.8"]
SMALL = ["claude_code/cc_raze_hooks.jsonl", "codex/codex_fundwise_tui.jsonl", "openai_chat/miniswe_github_issue.traj.json",
         "openai_chat/taubench_gpt4o_airline_task46.jsonl"]


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes on 127.0.0.1, no dashboard: the equality crosses process boundaries (pickling)."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address="127.0.0.1:0", silence_logs=50) as running:
        yield running.scheduler_address


@pytest.mark.slow
def test_calibration_on_a_two_worker_cluster_equals_the_local_engine(cluster):
    need(SESSIONS)
    local = calibrate([SESSIONS], bootstrap=60, seed=3).to_dict()
    fleet, failures = calibrate_fleet(SESSIONS, bootstrap=60, seed=3, engine="dask", scheduler=cluster)
    assert fleet.to_dict() == local  # every estimate, spread, fit and per-session row
    assert [Path(p).name for p, _ in failures] == ["cline_ui_messages_cardgame.json"]


@pytest.mark.slow
def test_replay_on_a_two_worker_cluster_equals_the_local_pool(cluster):
    need(SESSIONS)
    settings = Settings()
    local = replay_directory(SESSIONS, settings, POLICIES, workers=2)
    seen: list[int] = []
    fleet = replay_fleet(SESSIONS, settings, POLICIES, engine="dask", scheduler=cluster,
                         progress=lambda done, total, item: seen.append(done))
    assert fleet.to_dict() == local.to_dict()
    assert seen == list(range(1, len(seen) + 1)) and len(seen) == len(local.sessions) + len(local.skipped)


def _memory_fleet(root: str) -> list[str]:
    """Copy a few small shared sessions and one broken file into fsspec's memory filesystem."""
    fs = fsspec.filesystem("memory")
    names = []
    for name in SMALL:
        fs.pipe(f"{root}/{name}", need(SESSIONS / name).read_bytes())
        names.append(name)
    fs.pipe(f"{root}/broken/bad.jsonl", b'{"type": "user"\n')
    fs.pipe(f"{root}/notes.txt", b"not a session")
    return names


@pytest.mark.parametrize("engine", ["local", pytest.param("dask", marks=pytest.mark.slow)])
def test_memory_urls_replay_like_local_files_and_a_broken_file_is_a_row(engine):
    root = f"memory://fleet-{engine}"
    names = _memory_fleet(root)
    settings = Settings()
    options = {"engine": engine, "workers": 2}
    if engine == "dask":
        options["processes"] = False  # memory:// lives in this process: the workers are threads here
    fleet = replay_fleet(root, settings, POLICIES, **options)
    assert [s.path for s in fleet.sessions] == [f"{root}/{n}" for n in sorted(names)]
    ((bad, reason),) = fleet.skipped
    assert bad == f"{root}/broken/bad.jsonl" and reason and "/tmp" not in reason
    for session in fleet.sessions:
        local = replay_directory(SESSIONS / session.path.removeprefix(f"{root}/"), settings, POLICIES, workers=1).sessions[0]
        assert [r.total_usd for r in session.results] == [r.total_usd for r in local.results]


def test_memory_urls_calibrate_like_local_files():
    root = "memory://fleet-calibrate"
    names = _memory_fleet(root)
    fleet, failures = calibrate_fleet(root, bootstrap=30, workers=1)
    local = calibrate([SESSIONS / n for n in sorted(names)], bootstrap=30).to_dict()
    data = fleet.to_dict()
    assert [s["path"] for s in data.pop("sessions")] == [f"{root}/{n}" for n in sorted(names)]
    local.pop("sessions")
    assert data["skipped"] == [f"{root}/broken/bad.jsonl: {failures[0][1]}"]
    data.pop("skipped"), local.pop("skipped")
    assert data == local


def test_parquet_has_one_row_per_session_and_policy_and_sums_to_the_totals(tmp_path):
    root = "memory://fleet-parquet"
    _memory_fleet(root)
    fleet = replay_fleet(root, Settings(), POLICIES, workers=1)
    out = write_parquet(replay_table(fleet), tmp_path / "r.parquet")
    table = pq.read_table(out)
    assert table.column_names == [name for name, _ in REPLAY_COLUMNS]
    rows = table.to_pylist()
    assert len(rows) == len(fleet.sessions) * len(POLICIES) + 1
    failed = [r for r in rows if r["error"] is not None]
    assert [r["path"] for r in failed] == [f"{root}/broken/bad.jsonl"] and failed[0]["policy"] is None
    for total in fleet.totals():
        mine = [r for r in rows if r["policy"] == total["policy"]]
        assert sum(r["total_usd"] for r in mine) == pytest.approx(total["total_usd"])
        assert sum(r["compactions"] for r in mine) == total["compactions"]
        parts = sum(r["cache_read_usd"] + r["input_usd"] + r["write_usd"] + r["output_usd"] + r["compaction_usd"] + r["loss_usd"]
                    for r in mine)
        assert parts == pytest.approx(total["total_usd"])
    params = {s.path: s.params for s in fleet.sessions}
    for row in rows:
        if row["error"] is None:
            assert (row["v_tokens"], row["v_source"]) == (params[row["path"]].v_tokens, params[row["path"]].v_source)
    sources = {Path(r["path"]).name: r["v_source"] for r in rows if r["error"] is None}
    assert sources["cc_raze_hooks.jsonl"] == "measured" and sources["miniswe_github_issue.traj.json"] == "default"


@pytest.mark.slow
def test_a_given_v_reaches_the_cluster_workers_and_wins_for_every_session(cluster):
    """Settings cross to the workers with what the user set: DP_V given is charged to every session."""
    paths = [need(SESSIONS / name) for name in SMALL]
    fleet = replay_fleet(paths, Settings(v=5_000), ["never"], engine="dask", scheduler=cluster)
    assert {(s.params.v_tokens, s.params.v_source) for s in fleet.sessions} == {(5_000, "setting")}
    own = replay_fleet(paths, Settings(), ["never"], engine="dask", scheduler=cluster)
    assert {Path(s.path).name: s.params.v_source for s in own.sessions}["codex_fundwise_tui.jsonl"] == "measured"


def test_cli_replay_and_calibrate_write_parquet_and_print_the_usual_report(tmp_path):
    from typer.testing import CliRunner

    from dp_compact.cli import app

    root = "memory://fleet-cli"
    names = _memory_fleet(root)
    runner = CliRunner()
    result = runner.invoke(app, ["replay", root, "--policy", "dp", "--policy", "never", "--workers", "1", "--json",
                                 "--out", str(tmp_path / "r.parquet")])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["sessions"]) == len(names) and [t["policy"] for t in data["totals"]] == ["dp", "never"]
    assert pq.read_table(tmp_path / "r.parquet").num_rows == 2 * len(names) + 1
    result = runner.invoke(app, ["calibrate", root, "--bootstrap", "20", "--workers", "1", "--out", str(tmp_path / "c.parquet")])
    assert result.exit_code == 0, result.output
    calibrated = pq.read_table(tmp_path / "c.parquet")
    assert calibrated.column("error").to_pylist().count(None) == len(names)
    models = [m for m, error in zip(calibrated.column("model").to_pylist(), calibrated.column("error").to_pylist(), strict=True) if error is None]
    assert "" not in models and None in models and "claude-opus-4-6" in models  # no model recorded: null, not ""
    bad = runner.invoke(app, ["replay", root, "--scheduler", "tcp://127.0.0.1:1"])
    assert bad.exit_code == 2 and "--engine dask" in bad.output


@pytest.mark.slow
def test_import_and_help_load_no_fleet_extra():
    import subprocess
    import sys

    code = ("import sys, dp_compact, dp_compact.fleet, dp_compact.fleet.jobs\n"
            "from typer.testing import CliRunner\nfrom dp_compact.cli import app\n"
            "assert CliRunner().invoke(app, ['replay', '--help']).exit_code == 0\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'dask', 'distributed', 'pyarrow', 'fsspec'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_resampled_sessions_are_read_back_with_unique_ids_and_their_base_format(tmp_path):
    from dp_compact.fleet.resample import resample
    from dp_compact.sessions import read_session

    written = resample(need(SESSIONS), tmp_path / "fleet", sessions=12, seed=5, max_blocks=8)
    manifest = json.loads((tmp_path / "fleet" / "manifest.json").read_text())
    assert len(written) == 12 and len(manifest["sessions"]) == 12
    for path, entry in zip(written, manifest["sessions"], strict=True):
        session = read_session(path)  # strict: every line is a valid record of its format
        assert path.parent.name == session.format == read_session(entry["base"]).format
        ids = [call.id for m in session.messages for call in m.tool_calls]
        assert len(ids) == len(set(ids))  # renamed per block: no id issued twice
        assert sum(m.role == "assistant" for m in session.messages) >= 1
        assert all(d.split("#")[0].endswith(".jsonl") for d in entry["donors"])
    again = resample(SESSIONS, tmp_path / "again", sessions=12, seed=5, max_blocks=8)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in written]  # same seed, same files


def test_resampled_blocks_keep_tool_pairing():
    from dp_compact.fleet.resample import _append

    block = (b'{"type":"assistant","uuid":"u2","parentUuid":"u1","message":{"id":"m1","content":[{"type":"tool_use","id":"t1"}]}}',
             b'{"type":"user","uuid":"u3","parentUuid":"u2","message":{"content":[{"type":"tool_result","tool_use_id":"t1"}]}}')
    out: list[bytes] = []
    _append(out, block, 7, {"uuid": "last", "session_id": "s"})
    first, second = (json.loads(line) for line in out)
    assert first["message"]["content"][0]["id"] == second["message"]["content"][0]["tool_use_id"] == "t1~7"
    assert first["parentUuid"] == "last" and second["parentUuid"] == first["uuid"] == "u2~7"


@pytest.mark.slow
def test_one_session_file_on_the_fleet_engines_reads_as_on_the_local_engine():
    """A lone file (a path on Dask, or one fsspec URL) gets its own report, the same as the local
    engine's, not a folder table of one row."""
    from typer.testing import CliRunner

    from dp_compact.cli import app

    runner = CliRunner()
    path = need(SESSIONS / "claude_code" / "cc_raze_hooks.jsonl")
    local = runner.invoke(app, ["replay", str(path)])
    on_dask = runner.invoke(app, ["replay", str(path), "--engine", "dask", "--workers", "1"])
    assert local.exit_code == on_dask.exit_code == 0, on_dask.output
    assert on_dask.stdout == local.stdout and local.stdout.startswith(f"session   {path}")
    url = "memory://lone/cc_raze_hooks.jsonl"
    fsspec.filesystem("memory").pipe(url, path.read_bytes())
    by_url = runner.invoke(app, ["replay", url, "--workers", "1", "--json"])
    assert by_url.exit_code == 0, by_url.output
    data = json.loads(by_url.stdout)
    assert "sessions" not in data and data["session"]["path"] == url
