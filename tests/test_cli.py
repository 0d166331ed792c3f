"""`dp-compact plan` and `dp-compact profiles` through Typer's CliRunner."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dp_compact.cli import EXIT_COMPACT, app

EXAMPLE = Path(__file__).resolve().parents[1] / "dp_compact" / "examples" / "session.jsonl"
runner = CliRunner()
DESIGN_KEYS = {"decision", "rule", "k", "cut", "N", "T", "K", "H", "terms", "E", "L", "R", "avg", "c", "context_tokens"}


def test_plan_example_prints_table_with_decision_and_terms():
    result = runner.invoke(app, ["plan", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    for label in ("decision", "① savings", "② cache miss", "③ summary request", "④ information loss", "⑤ long-context", "NetBenefit"):
        assert label in result.output


def test_plan_json_has_stable_design_keys():
    result = runner.invoke(app, ["plan", str(EXAMPLE), "--json"])
    data = json.loads(result.stdout)
    assert DESIGN_KEYS <= data.keys()
    assert set(data["terms"]) == {"savings", "cache_miss", "compact_cost", "info_loss", "quality", "net"}
    assert data["decision"] in {"compact", "keep"}
    assert data["k"] + data["cut"] == data["N"] or data["decision"] == "keep"
    assert data["K"] + data["H"] == data["T"]
    assert data["window_source"] == "the price database's window for claude-sonnet-4"  # DESIGN §6: where M came from


def test_plan_exit_code_is_10_when_compaction_advised():
    data = json.loads(runner.invoke(app, ["plan", str(EXAMPLE), "--json"]).stdout)
    result = runner.invoke(app, ["plan", str(EXAMPLE), "--exit-code"])
    assert result.exit_code == (EXIT_COMPACT if data["decision"] in ("compact", "clear") else 0)
    assert data["decision"] == "compact"  # the example is built to need it


def test_plan_flags_reach_settings():
    data = json.loads(runner.invoke(app, ["plan", str(EXAMPLE), "--json", "--provider", "gpt-4o", "--e-fixed", "3",
                                          "--l", "2", "--min-keep-ratio", "0.5", "--max-context-tokens", "300000",
                                          "--model", "seed", "--tokenizer", "bytes4", "--baseline-e", "4"]).stdout)
    assert (data["E"], data["L"], data["R"]) == (3.0, 2.0, 6.0)
    assert data["prices"]["name"] == "gpt-4o" and data["max_context_tokens"] == 300_000
    assert "DP_MAX_CONTEXT_TOKENS" in data["window_source"]
    assert data["settings"]["model"] == "seed" and data["settings"]["tokenizer"] == "bytes4"
    assert data["settings"]["min_keep_ratio"] == 0.5 and data["settings"]["baseline_e"] == 4


def test_plan_malformed_line_names_file_and_line(tmp_path):
    bad = tmp_path / "s.jsonl"
    bad.write_text('{"role":"user","content":"hi"}\n{"role":"assistant","content":"ok"}\n{"role": "user", "cont\n')
    result = runner.invoke(app, ["plan", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:3:" in result.stderr and "Traceback" not in result.output


def test_plan_lenient_skips_bad_line_with_warning(tmp_path):
    bad = tmp_path / "s.jsonl"
    bad.write_text('{"role":"user","content":"hi"}\n{oops\n{"role":"assistant","content":"ok"}\n')
    result = runner.invoke(app, ["plan", str(bad), "--lenient", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["N"] == 2
    assert "skipped 1 malformed line" in result.stderr


def test_lenient_names_the_lines_it_skipped_not_json_and_breaking_the_format(tmp_path):
    bad = tmp_path / "s.jsonl"
    def record(n: int, kind: str, content: object) -> str:
        return json.dumps({"type": kind, "uuid": f"u{n}", "parentUuid": f"u{n - 1}" if n else None, "sessionId": "s",
                           "message": {"role": kind, "content": content}})

    lines = [record(0, "user", "hi"), "{oops", record(1, "assistant", [{"type": "text", "text": "ok"}]), "",
             record(2, "user", 7), record(3, "user", "again")]  # line 5: content neither a string nor blocks
    bad.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["plan", str(bad), "--lenient", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["session"]["skipped_line_numbers"] == [2, 5]  # line 4 is blank, not malformed
    assert f"{bad}: skipped 2 malformed line(s) (--lenient): lines 2, 5" in result.stderr
    replayed = runner.invoke(app, ["replay", str(bad), "--lenient"])
    assert "skipped 2 malformed line(s) (--lenient): lines 2, 5" in replayed.stdout


def test_lenient_on_a_json_document_counts_the_entries_it_skipped_without_lines(tmp_path):
    from dp_compact.sessions import read_session

    document = tmp_path / "s.json"
    from dp_compact.sessions.source import SNIFF_RECORDS

    good = [{"role": ("user", "assistant")[i % 2], "content": "hi"} for i in range(SNIFF_RECORDS + 1)]
    document.write_text(json.dumps([*good, {"role": "user", "content": 7}]))  # past the records the format is told by
    session = read_session(document, lenient=True)
    assert (session.skipped_lines, session.skipped_line_numbers) == (1, ())


def test_plan_empty_file_keeps_and_says_why(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    data = json.loads(runner.invoke(app, ["plan", str(empty), "--json"]).stdout)
    assert (data["decision"], data["rule"]) == ("keep", "empty")
    assert "no messages" in data["explanation"]


def test_plan_unknown_format_lists_formats(tmp_path):
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"seq": 1, "kind": "x"}\n{"seq": 2, "kind": "y"}\n')
    result = runner.invoke(app, ["plan", str(odd)])
    assert result.exit_code == 2
    assert str(odd) in result.stderr and "anthropic" in result.stderr and "openai" in result.stderr


def test_plan_invalid_dp_variable_is_one_line_error(monkeypatch):
    monkeypatch.setenv("DP_MIN_KEEP_RATIO", "2")
    result = runner.invoke(app, ["plan", str(EXAMPLE)])
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0 and "DP_MIN_KEEP_RATIO" in result.stderr and "'2'" in result.stderr


def test_plan_missing_file_is_error():
    result = runner.invoke(app, ["plan", "no-such-file.jsonl"])
    assert result.exit_code == 2 and "no-such-file.jsonl" in result.stderr


def test_plan_does_not_modify_input(tmp_path):
    copy = tmp_path / "session.jsonl"
    shutil.copy(EXAMPLE, copy)
    before = copy.read_bytes()
    runner.invoke(app, ["plan", str(copy)])
    assert copy.read_bytes() == before


def test_profiles_lists_design_profiles():
    result = runner.invoke(app, ["profiles"])
    for name in ("claude-sonnet-4", "gpt-4o", "deepseek-v4-flash", "gemini-2.5-pro"):
        assert name in result.output
    data = json.loads(runner.invoke(app, ["profiles", "--json"]).stdout)
    assert {"name", "p_input", "p_cache", "p_out", "p_cache_write", "max_context_tokens"} <= data[0].keys()


def test_console_script_runs_installed_command():
    exe = Path(sys.executable).parent / "dp-compact"
    if not exe.exists():
        pytest.skip("dp-compact console script is not installed in this environment")
    done = subprocess.run([str(exe), "plan", str(EXAMPLE), "--json", "--no-cache"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and json.loads(done.stdout)["N"] > 0


UNKNOWN_PROVIDER_COMMANDS = [
    ["plan"], ["compact", "--dry-run"], ["replay"], ["curve", "-o", "c.png"], ["timeline", "-o", "t.png"],
]


@pytest.mark.parametrize("command", UNKNOWN_PROVIDER_COMMANDS, ids=lambda c: c[0])
def test_unknown_provider_flag_fails_before_the_session_is_read(tmp_path, command):
    absent = tmp_path / "absent.jsonl"  # reading it would fail with "cannot read the file"
    result = runner.invoke(app, [command[0], str(absent), *command[1:], "--provider", "no-such-model"])
    assert result.exit_code == 2
    assert result.stderr == "dp-compact: unknown provider/model 'no-such-model' (see `dp-compact profiles`)\n"


@pytest.mark.parametrize("command", UNKNOWN_PROVIDER_COMMANDS, ids=lambda c: c[0])
def test_unknown_dp_provider_fails_before_the_session_is_read_and_names_the_variable(tmp_path, monkeypatch, command):
    monkeypatch.setenv("DP_PROVIDER", "claude-sonet-4")
    result = runner.invoke(app, [command[0], str(tmp_path / "absent.jsonl"), *command[1:]])
    assert result.exit_code == 2
    assert result.stderr.startswith("dp-compact: DP_PROVIDER='claude-sonet-4': unknown provider/model; close matches: ")
    assert "claude-sonnet-4" in result.stderr
    assert result.stderr.endswith("(see `dp-compact profiles`)\n") and result.stderr.count("\n") == 1


def test_curve_checks_every_provider_flag_before_reading(tmp_path):
    result = runner.invoke(app, ["curve", str(tmp_path / "absent.jsonl"), "-o", "c.png", "--provider", "gpt-5", "--provider", "nope-9"])
    assert result.exit_code == 2 and result.stderr == "dp-compact: unknown provider/model 'nope-9' (see `dp-compact profiles`)\n"


def test_known_provider_still_reads_the_session(tmp_path):
    result = runner.invoke(app, ["plan", str(tmp_path / "absent.jsonl"), "--provider", "gpt-4o"])
    assert result.exit_code == 2 and "cannot read the file" in result.stderr


def test_an_unknown_option_suggests_only_options_whose_names_are_close(tmp_path):
    session = tmp_path / "s.jsonl"
    session.write_text('{"role":"user","content":"hi"}\n')
    bogus = runner.invoke(app, ["plan", str(session), "--bogus"])
    assert bogus.exit_code == 2 and "No such option: --bogus" in bogus.stderr and "Possible options" not in bogus.stderr
    typo = runner.invoke(app, ["plan", str(session), "--provder", "x"])
    assert "(Possible options: --provider)" in typo.stderr
    near = runner.invoke(app, ["plan", str(session), "--no-cach"])  # --p-cache is close too, but much less
    assert "(Possible options: --no-cache)" in near.stderr


def test_a_kept_plan_says_its_candidates_net_benefit_is_against_never_compacting():
    data = json.loads(runner.invoke(app, ["plan", str(EXAMPLE), "--json"]).stdout)
    from dp_compact.cli.render import render_plan

    waiting = {**data, "decision": "keep", "rule": "wait", "best_candidate": {**data["best_candidate"], "net": 4.86}}
    line = next(x for x in render_plan(waiting).splitlines() if x.startswith("keep "))
    assert "NetBenefit $+4.8600 against never compacting; waiting is cheaper still, see ahead below" in line
    losing = {**waiting, "best_candidate": {**data["best_candidate"], "net": -0.5}}
    assert "against" not in next(x for x in render_plan(losing).splitlines() if x.startswith("keep "))


def test_a_replay_table_says_what_its_policies_are():
    from dp_compact.cli.render import policy_legend

    legend = policy_legend(["oracle", "dp", "seed", "claude-code", "codex"])
    assert legend.startswith("policies  oracle: the cheapest schedule in hindsight; dp: dp-compact; seed: ")
    assert legend.endswith("claude-code, codex: those tools' fixed rules")
    assert policy_legend(["recorded", "codex"]).endswith("codex: that tool's fixed rule")
    assert policy_legend(["claude-code", "codex"]) is None  # fixed rules alone: their names say it


def test_a_replay_table_shows_no_summary_size_for_a_policy_that_never_compacted():
    """S is the size of the summaries a policy wrote: a dash where it wrote none, the number where it did."""
    out = runner.invoke(app, ["replay", str(EXAMPLE)]).stdout
    header = next(x for x in out.splitlines() if x.startswith("policy "))
    rows = {x.split()[0]: x for x in out.splitlines() if x.split() and x.split()[0] in ("never", "dp")}
    s_end = header.index(" S ") + 1  # the S column is right-aligned: its last character
    assert rows["never"][s_end] == "-" and rows["never"][s_end - 1] == " "
    assert rows["dp"][s_end - 2:s_end + 1].strip().isdigit()


def test_the_ahead_line_says_what_compacting_now_saves_or_costs_without_a_signed_saving():
    data = json.loads(runner.invoke(app, ["plan", str(EXAMPLE), "--json"]).stdout)
    from dp_compact.cli.render import render_plan

    ahead = next(x for x in render_plan(data).splitlines() if x.startswith("ahead "))
    assert f"(compacting now saves ${data['lookahead']['saves_usd']:.4f})" in ahead
    worse = {**data, "lookahead": {**data["lookahead"], "saves_usd": -0.0219}}
    ahead = next(x for x in render_plan(worse).splitlines() if x.startswith("ahead "))
    assert "(compacting now costs $0.0219 more)" in ahead and "$-" not in ahead and "$+" not in ahead
