"""Calibration: recovers planted V, L, avg, token ratio and recall curve; runs on real sessions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dp_compact.api import session_tokens
from dp_compact.measure.estimation import DEFAULT_CALLS_PER_TURN
from dp_compact.calibration import AGE_UNITS, calibrate, env_lines, judged_messages, session_paths
from dp_compact.cli import app
from dp_compact.cli.render import render_calibration as format_report
from dp_compact.core.cuts import message_ages, message_arrays
from dp_compact.calibration.fit import fit_survival, survival_estimates
from dp_compact.calibration.recall import MAX_AGE_BINS, RecallCounts, fit_exponential, recall_counts
from dp_compact.measure.reuse import Uses
from dp_compact.sessions import Message, read_session
from dp_compact.settings import load_settings
from dp_compact.measure.tokens import TOKEN_RATIOS, count_message_tokens, provider_family, token_ratio
from tests.conftest import REPO, SESSIONS, need
from tests.strategies import conversations

V_TOKENS, CALLS_PER_TURN, RATIO, Q0, TAU = 7_000, 6, 1.25, 0.6, 2.5


def _unique_text(key: tuple[int, ...]) -> str:
    """220 random letters, different for every key: no 200-character run recurs by chance."""
    rng = np.random.default_rng(key)
    return "".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=220))


def _turn(t: int, calls: int, rng: np.random.Generator, repeats: dict[tuple[int, int], list[str]]) -> list[dict]:
    """One user turn: a prompt, then ``calls`` assistant messages (all but the last call a tool).

    Every message carries its own unique text; ``repeats[(t, index)]`` are earlier texts the
    message at ``index`` of turn ``t`` repeats verbatim (a use, DESIGN §6).
    """
    def text(index: int) -> str:
        words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "omega"], size=12))
        return "\n".join([words, _unique_text((t, index)), *repeats.get((t, index), [])])

    rows: list[dict] = [{"role": "user", "content": text(0)}]
    for call in range(calls):
        index = len(rows)
        if call < calls - 1:
            tool_id = f"toolu_{t}_{call}"
            rows.append({"role": "assistant", "content": [{"type": "text", "text": text(index)},
                                                          {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {}}]})
            rows.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": text(index + 1)}]})
        else:
            rows.append({"role": "assistant", "content": [{"type": "text", "text": text(index)}]})
    return rows


def write_synthetic_session(path: Path, *, turns: int = 80, seed: int = 0) -> float:
    """A session with known V, L, token ratio and a planted recall curve q(a) = Q0 · exp(−a / TAU).

    Each message is last used A user turns after its own, by the last assistant message of that
    turn repeating its unique text, with P(A ≥ a) = Q0 · exp(−a / TAU) (else never): a call that
    sees the message at age a (turns) is then followed by a use with probability q(a). Each
    assistant message carries usage: prompt = V + RATIO × cl100k tokens of the messages before
    it. Returns the mean prompt per call (avg).
    """
    rng = np.random.default_rng(seed)
    calls = [CALLS_PER_TURN + (3 if t % 2 else -3) for t in range(turns)]  # 3 and 9: L = 6, rounds blur the turns
    repeats: dict[tuple[int, int], list[str]] = {}
    for t in range(turns):
        per_turn = 2 * calls[t]
        last = per_turn - 1  # the turn's last assistant message: the one that repeats
        for index in range(per_turn):
            u = rng.random()
            if u >= Q0:
                continue
            age = int(np.floor(-TAU * np.log(u / Q0)))  # P(age >= a) = Q0 · exp(-a / TAU)
            if t + age < turns and not (age == 0 and index == last):
                repeats.setdefault((t + age, 2 * calls[t + age] - 1), []).append(_unique_text((t, index)))
    rows = [row for t in range(turns) for row in _turn(t, calls[t], np.random.default_rng(t), repeats)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    counts = count_message_tokens(read_session(path).messages)
    before = np.concatenate(([0], np.cumsum(counts)))
    prompts = []
    for index, row in enumerate(rows):
        if row["role"] == "assistant":
            prompt = int(round(V_TOKENS + RATIO * before[index]))
            row["usage"] = {"input_tokens": prompt, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 50}
            prompts.append(prompt)
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return float(np.mean(prompts))


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[float]]:
    """Three synthetic sessions and the mean prompt per call each was written with."""
    folder = tmp_path_factory.mktemp("synthetic")
    avgs = [write_synthetic_session(folder / f"session_{seed}.jsonl", seed=seed) for seed in range(3)]
    return folder, avgs


def test_calibrate_synthetic_sessions_recover_planted_values_within_10_percent(synthetic):
    folder, planted_avgs = synthetic
    result = calibrate([folder], bootstrap=30, recall_l=CALLS_PER_TURN)
    assert len(result.sessions) == 3
    assert result.v_tokens.value == pytest.approx(V_TOKENS, rel=0.10)
    assert result.calls_per_turn.value == pytest.approx(CALLS_PER_TURN, rel=0.10)
    assert result.token_ratios["unknown"].value == pytest.approx(RATIO, rel=0.10)
    # avg: the median over sessions of the mean prompt each session was written with (planted)
    assert result.avg_tokens.value == pytest.approx(np.median(planted_avgs), rel=1e-9)
    fit, q0, tau = result.recall_fits["turns"]
    assert q0.value == pytest.approx(Q0, rel=0.10)
    assert tau.value == pytest.approx(TAU, rel=0.10)
    assert fit.r_squared > 0.9
    assert result.recall_age == max(AGE_UNITS, key=lambda unit: result.recall_session_r2[unit])


def test_calibrate_exports_the_planted_q0_without_conversion(synthetic):
    """q(a) counts the judge's uses, so the exported DP_RECALL_Q0 is the chance at age 0 as planted.

    The sessions plant q(a) = 0.6 · exp(−a / 2.5) in user turns; API rounds / L with the planted
    L = 6 are nearly user turns, so the value exported for the planner, in either unit, is 0.6
    (no rescaling by L, no per-call rate), and JSON carries the same number.
    """
    folder, _ = synthetic
    result = calibrate([folder], bootstrap=10, recall_l=CALLS_PER_TURN)
    exported = dict(line.removeprefix("export ").split("=", 1) for line in env_lines(result) if line.startswith("export "))
    assert exported["DP_RECALL_AGE"] == result.recall_age
    assert float(exported["DP_RECALL_Q0"]) == pytest.approx(Q0, rel=0.10)
    assert float(exported["DP_RECALL_TAU"]) == pytest.approx(TAU, rel=0.15)
    recall = result.to_dict()["recall"][result.recall_age]
    assert recall["q0"]["value"] == pytest.approx(Q0, rel=0.10) == float(exported["DP_RECALL_Q0"])
    assert load_settings(recall_q0=float(exported["DP_RECALL_Q0"])).recall_q0 == pytest.approx(Q0, rel=0.10)


def test_synthetic_session_avg_is_mean_prompt(synthetic):
    folder, avgs = synthetic
    avg = avgs[2]
    session = read_session(folder / "session_2.jsonl")
    assert np.mean([u.prompt_tokens for u in session.usage]) == pytest.approx(avg)
    assert session.llm_calls / session.user_turns == CALLS_PER_TURN


def test_fit_exponential_exact_curve_recovers_parameters():
    ages = np.arange(12)
    observed = np.full(12, 10_000)
    needed = np.rint(0.4 * np.exp(-ages / 3.0) * observed).astype(np.int64)
    fit = fit_exponential(RecallCounts(needed, observed))
    assert fit.q0 == pytest.approx(0.4, rel=0.01) and fit.tau == pytest.approx(3.0, rel=0.01)
    assert fit.r_squared > 0.999 and fit.bins == 12


def test_fit_exponential_too_few_bins_is_nan():
    fit = fit_exponential(RecallCounts(np.array([5, 0]), np.array([30, 3])))
    assert np.isnan(fit.q0) and fit.bins == 1


def _uses(pairs: list[tuple[int, int]]) -> Uses:
    message, at = (np.array(column, dtype=np.int64) for column in zip(*pairs, strict=True)) if pairs else (np.zeros(0, np.int64),) * 2
    return Uses(message, at, np.zeros(message.size, dtype=np.int8))


def test_recall_counts_share_of_calls_in_the_bin_followed_by_a_use():
    messages = [
        Message("user", "task"),            # 0  turn 1
        Message("assistant", "call a"),     # 1  call: sees message 0 at age 0
        Message("tool"),                    # 2
        Message("assistant", "call b"),     # 3  call
        Message("tool"),                    # 4
        Message("assistant", "call c"),     # 5  call
        Message("user", "next"),            # 6  turn 2
        Message("assistant", "call d"),     # 7  call: sees message 0 at age 1
    ]
    arrays = message_arrays(messages)
    counts = recall_counts(_uses([(0, 3)]), arrays, message_ages(arrays, "turns", 1.0))
    # bin 0: message 0 is seen by calls 1, 3, 5 and used at 3: used after calls 1 and 3 -> 2/3;
    # messages 1-4 are seen by later calls of turn 1, message 6 by call 7; none is used.
    assert counts.observed[:2].tolist() == [6, 6]
    assert counts.needed[0] == pytest.approx(2 / 3) and counts.needed[1] == 0.0
    assert counts.curve[0] == pytest.approx(2 / 3 / 6)


def test_recall_counts_no_use_no_need_and_no_call_no_observation():
    messages = [Message("user", "a"), Message("tool"), Message("user", "b")]
    arrays = message_arrays(messages)
    counts = recall_counts(_uses([]), arrays, message_ages(arrays, "turns", 1.0))
    assert counts.observed.sum() == 0 and counts.needed.sum() == 0.0


@settings(max_examples=150, deadline=None)
@given(conversations(max_turns=5), st.data(), st.sampled_from(["turns", "rounds"]))
def test_recall_counts_equal_a_loop_over_messages_and_calls(messages, data, unit):
    n = len(messages)
    assistants = [i for i, m in enumerate(messages) if m.role == "assistant"]
    pairs = sorted({(data.draw(st.integers(0, at - 1)), at) for at in assistants if at > 0 and data.draw(st.booleans())})
    arrays = message_arrays(messages)
    ages = message_ages(arrays, unit, 3.0)
    counts = recall_counts(_uses(pairs), arrays, ages)
    last = {m: at for m, at in pairs}
    needed, observed = np.zeros(MAX_AGE_BINS), np.zeros(MAX_AGE_BINS, dtype=np.int64)
    for j in range(n):
        by_bin: dict[int, list[bool]] = {}
        for p in (p for p in assistants if p > j):
            b = int(np.floor(ages[p - 1] - ages[j] + 1e-9))
            if b < MAX_AGE_BINS:
                by_bin.setdefault(b, []).append(last.get(j, -1) >= p)
        for b, used in by_bin.items():
            observed[b] += 1
            needed[b] += sum(used) / len(used)
    assert counts.observed.tolist() == observed.tolist()
    np.testing.assert_allclose(counts.needed, needed, atol=1e-12)


def test_message_ages_rounds_divide_by_l_and_reject_unknown_unit():
    messages = [Message("user", "a"), Message("assistant", "b"), Message("assistant", "c")]
    arrays = message_arrays(messages)
    assert message_ages(arrays, "rounds", 2.0).tolist() == [0.0, 0.5, 1.0]
    with pytest.raises(ValueError):
        message_ages(arrays, "calls", 2.0)


def test_provider_family_from_model_then_format():
    assert provider_family("claude-sonnet-4-5") == "anthropic"
    assert provider_family("openai/gpt-4o") == "openai"
    assert provider_family(None, "claude_code") == "anthropic"
    assert provider_family("mystery", "openai_chat") == "unknown"
    assert token_ratio("unknown") == 1.0


def test_session_tokens_scale_by_family_ratio_and_setting(tmp_path: Path):
    messages = [Message("user", "hello world " * 50), Message("assistant", "fine " * 30)]
    from dp_compact.conversation import Session

    raw = count_message_tokens(messages)
    claude = Session(path="x", format="anthropic", messages=tuple(messages), model="claude-opus-4-6")
    unknown = Session(path="x", format="openai_chat", messages=tuple(messages))
    scaled = session_tokens(claude, load_settings(), use_cache=False)
    assert scaled.tolist() == np.rint(raw * TOKEN_RATIOS["anthropic"]).astype(int).tolist()
    assert session_tokens(unknown, load_settings(), use_cache=False).tolist() == raw.tolist()
    assert session_tokens(claude, load_settings(token_ratio=1.0), use_cache=False).tolist() == raw.tolist()
    assert session_tokens(claude, load_settings(tokenizer="bytes4"), use_cache=False).tolist() == \
        count_message_tokens(messages, tokenizer="bytes4").tolist()


def test_session_paths_expand_directories_and_skip_manifests(tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "s.jsonl").write_text("")
    (tmp_path / "a" / "manifest.json").write_text("{}")
    (tmp_path / "notes.md").write_text("")
    assert [p.name for p in session_paths([tmp_path])] == ["s.jsonl"]


def test_calibrate_without_sessions_raises(tmp_path: Path):
    with pytest.raises(ValueError, match="no session file"):
        calibrate([tmp_path])


def _with_bad_files(tmp_path: Path) -> Path:
    """Two real sessions, a file cut mid-record and a JSON file of no session format."""
    import shutil

    folder = tmp_path / "fleet"
    folder.mkdir()
    for name in ("claude_code/cc_raze_hooks.jsonl", "codex/codex_raze.jsonl"):
        shutil.copy(need(SESSIONS / name), folder)
    (folder / "broken.jsonl").write_text('{"role": "user", "content": "hi"}\n{"role": \n')
    (folder / "notes.json").write_text('{"a": 1}')
    return folder


def test_a_file_that_cannot_be_read_is_skipped_with_its_reason_and_the_rest_calibrated(tmp_path: Path):
    folder = _with_bad_files(tmp_path)
    result = calibrate([folder], bootstrap=20)
    broken, notes = result.skipped
    assert broken.startswith(f"{folder / 'broken.jsonl'}: line 2 is not valid JSON (")
    assert notes == f"{folder / 'notes.json'}: not a session format dp-compact reads"
    alone = calibrate([folder / "cc_raze_hooks.jsonl", folder / "codex_raze.jsonl"], bootstrap=20).to_dict()
    data = result.to_dict()
    data.pop("skipped"), alone.pop("skipped")
    assert data == alone  # the files skipped change no number
    report = format_report(result)
    assert report.splitlines()[-2:] == [f"skipped   {entry}" for entry in result.skipped]


def test_one_file_that_cannot_be_read_is_an_error_and_none_readable_gives_the_reasons(tmp_path: Path):
    from dp_compact.errors import MalformedLineError

    folder = _with_bad_files(tmp_path)
    with pytest.raises(MalformedLineError) as info:
        calibrate([folder / "broken.jsonl"])
    assert info.value.line == 2
    with pytest.raises(ValueError, match=r"no readable session among 2 file\(s\): .*broken.jsonl: line 2 is not valid JSON.*"
                                         r"notes.json: not a session format dp-compact reads"):
        calibrate([folder / "broken.jsonl", folder / "notes.json"])


def test_local_and_fleet_calibration_skip_the_same_files_for_the_same_reasons(tmp_path: Path):
    from dp_compact.fleet.jobs import calibrate_fleet

    folder = _with_bad_files(tmp_path)
    fleet, failures = calibrate_fleet(folder, bootstrap=20, workers=1)
    local = calibrate([folder], bootstrap=20)
    assert fleet.to_dict() == local.to_dict()
    assert [f"{path}: {reason}" for path, reason in failures] == list(local.skipped)


@pytest.mark.slow
def test_calibrate_real_sessions_runs_and_reports():
    result = calibrate([need(SESSIONS)], bootstrap=20)
    assert len(result.sessions) >= 10
    assert result.v_tokens is not None and result.v_tokens.value > 0
    assert result.calls_per_turn is not None and result.calls_per_turn.value >= 1
    for unit in ("turns", "rounds"):
        fit, q0, tau = result.recall_fits[unit]
        assert 0 < q0.value <= 1 and tau.value > 0 and q0.p05 <= q0.p95
    assert set(result.token_ratios) >= {"anthropic", "openai"}
    text = format_report(result)
    assert "recall" in text and "<- chosen" in text
    assert all(line.startswith("export DP_") for line in env_lines(result))
    json.dumps(result.to_dict())  # JSON-ready
    # the recorded compaction summaries: one Claude Code session, one converted one, two Codex summaries
    assert len(result.recorded_summaries["claude-code"]) == 3 and len(result.recorded_summaries["codex"]) == 2
    assert all(1_000 < n < 20_000 for tokens in result.recorded_summaries.values() for n in tokens)
    assert "summary   claude-code" in text


def test_replay_charges_the_mean_recorded_summary_of_each_tool():
    """SUMMARY_TOKENS (what the replay charges each preset) are the means calibrate measures."""
    from dp_compact.replay.policies import SUMMARY_TOKENS

    results = json.loads((Path(__file__).parents[1] / "calibration" / "results.json").read_text())
    for tool in ("claude-code", "codex"):
        assert SUMMARY_TOKENS[tool] == round(results["recorded_summaries"][tool]["mean"])


def test_shipped_defaults_match_committed_calibration_results():
    results = json.loads((REPO / "calibration" / "results.json").read_text(encoding="utf-8"))
    settings = load_settings()
    unit = results["recall_age"]
    assert settings.recall_age == unit
    # q(a) counts the judge's own uses (DESIGN §6), so its q0 is the planner's q_j at age 0 as it is
    assert results["recall_detector"]["min_chars"] == 200 and results["recall_detector"]["boilerplate_share"] == 0.2
    assert settings.recall_q0 == pytest.approx(results["recall"][unit]["q0"]["value"], rel=0.02)
    assert settings.recall_tau == pytest.approx(results["recall"][unit]["tau"]["value"], rel=0.02)
    assert results["recall_l"] is None  # rounds / each session's own L, as the planner does with DP_L = 0
    assert settings.v == pytest.approx(results["V"]["value"], abs=100)
    assert settings.l == 0  # measured per session; the pooled value is the fallback
    assert DEFAULT_CALLS_PER_TURN == round(results["L"]["value"])
    for family, ratio in TOKEN_RATIOS.items():
        assert ratio == pytest.approx(results["token_ratio"][family]["value"], abs=0.005)


@pytest.mark.slow
def test_cli_calibrate_env_json_and_figure(synthetic, tmp_path: Path):
    folder, _ = synthetic
    runner = CliRunner()
    env = runner.invoke(app, ["calibrate", str(folder), "--env", "--bootstrap", "10"])
    assert env.exit_code == 0, env.output
    lines = env.output.strip().splitlines()
    assert any(line in ("export DP_RECALL_AGE=turns", "export DP_RECALL_AGE=rounds") for line in lines)
    assert any(line.startswith("export DP_RECALL_TAU=") for line in lines) and "export DP_L=0" in lines
    figure = tmp_path / "calibration.png"
    out = runner.invoke(app, ["calibrate", str(folder), "--json", "--bootstrap", "10", "--figure", str(figure)])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert {"V", "L", "avg", "S", "token_ratio", "recall", "recall_age", "sessions"} <= set(data)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_calibrate_empty_folder_fails_with_one_line(tmp_path: Path):
    result = CliRunner().invoke(app, ["calibrate", str(tmp_path)])
    assert result.exit_code == 2 and "no session file (.json, .jsonl, .traj) under this folder" in result.output


def test_judged_messages_drop_recorded_compaction_insertions():
    from dp_compact.sessions.common import is_summary_text

    session = read_session(need(SESSIONS / "codex" / "codex_pharma_2compactions.jsonl"))
    judged = judged_messages(session)
    assert session.compactions >= 1 and len(judged) < len(session.history)
    assert not any(m.role == "user" and is_summary_text(m.text) for m in judged)
    assert judged[-1] == session.history[-1]
    plain = read_session(need(SESSIONS / "claude_code" / "cc_task43_develop.jsonl"))
    assert judged_messages(plain) == plain.messages


def test_calibrate_one_session_never_prints_nan(tmp_path: Path):
    """A single short session has no recall fit: text says so, --env keeps the shipped values, JSON has null."""
    path = need(SESSIONS / "codex" / "codex_raze.jsonl")
    result = calibrate([path], bootstrap=20)
    assert "nan" not in format_report(result).lower() and "weak estimate" in format_report(result)
    env = env_lines(result)
    assert not any("nan" in line.lower() for line in env) and env[0].startswith("# one session") and env[1].startswith("# DP_RECALL_AGE")
    text = json.dumps(result.to_dict(), allow_nan=False)  # raises on NaN
    assert json.loads(text)["recall"]["turns"]["q0"]["value"] is None


@pytest.mark.parametrize(("name", "fitted"), [("codex/codex_raze.jsonl", False), ("claude_code/cc_task43_develop.jsonl", True)])
@pytest.mark.slow
def test_cli_calibrate_one_real_session_is_weak_and_never_nan(name: str, fitted: bool):
    """One real session, through the command: text, JSON and --env say the values are weak and print no NaN.

    codex_raze (18 calls) observes too few ages for a recall fit; cc_task43 (325 calls) has one.
    """
    path = str(need(SESSIONS / name))
    runner = CliRunner()
    text = runner.invoke(app, ["calibrate", path, "--bootstrap", "20"])
    assert text.exit_code == 0, text.output
    assert "nan" not in text.output.lower()
    for label in ("V ", "L ", "avg ", "ratio "):  # every measured pooled value is marked weak
        (line,) = [row for row in text.output.splitlines() if row.startswith(label)]
        assert "one session, no spread; a weak estimate" in line, line
    assert ("q0 = not measured" in text.output) is not fitted
    data = runner.invoke(app, ["calibrate", path, "--bootstrap", "20", "--json"])
    assert data.exit_code == 0, data.output
    parsed = json.loads(data.output, parse_constant=lambda c: pytest.fail(f"JSON holds {c}"))
    for key in ("V", "L", "avg"):  # n = 1: a value, no spread (null), never NaN or a rounding-error std
        assert parsed[key]["n"] == 1 and parsed[key]["value"] > 0
        assert parsed[key]["std"] is None and parsed[key]["p05"] is None and parsed[key]["p95"] is None
    assert (parsed["recall"]["rounds"]["q0"]["value"] is not None) is fitted
    env = runner.invoke(app, ["calibrate", path, "--bootstrap", "20", "--env"])
    assert env.exit_code == 0, env.output
    lines = env.output.strip().splitlines()
    assert "nan" not in env.output.lower() and lines[0].startswith("# one session") and "weak" in lines[0]
    assert all(line.startswith(("export DP_", "# ")) for line in lines)
    assert any(line.startswith("export DP_RECALL_Q0=") for line in lines) is fitted


@pytest.mark.slow
def test_cli_calibrate_real_folder_never_prints_nan():
    """The shared sessions as a folder: no NaN in text, JSON (strict) or --env; no weak-estimate note."""
    folder = str(need(SESSIONS))
    runner = CliRunner()
    text = runner.invoke(app, ["calibrate", folder, "--bootstrap", "20"])
    assert text.exit_code == 0 and "nan" not in text.output.lower() and "weak estimate" not in text.output
    data = runner.invoke(app, ["calibrate", folder, "--bootstrap", "20", "--json"])
    parsed = json.loads(data.output, parse_constant=lambda c: pytest.fail(f"JSON holds {c}"))
    assert parsed["V"]["n"] >= 2 and parsed["V"]["std"] > 0
    env = runner.invoke(app, ["calibrate", folder, "--bootstrap", "20", "--env"])
    assert env.exit_code == 0 and "nan" not in env.output.lower() and "weak" not in env.output
    assert all(line.startswith("export DP_") for line in env.output.strip().splitlines())


# --- the survival of session lengths -------------------------------------------------------------

def test_the_survival_fit_recovers_a_lomax_curve_from_its_lengths():
    rng = np.random.default_rng(7)
    alpha, scale = 1.5, 70.0
    lengths = scale * (rng.uniform(size=4000) ** (-1 / alpha) - 1)  # inverse of P(X > x) = (1 + x / scale) ** -alpha
    fitted_alpha, fitted_scale = fit_survival(lengths)
    assert fitted_alpha == pytest.approx(alpha, rel=0.15) and fitted_scale == pytest.approx(scale, rel=0.2)


def test_two_sessions_give_the_survival_fit_no_spread_rather_than_zero():
    alpha, scale = survival_estimates([71.0, 325.0], 200, np.random.default_rng(0))
    assert np.isnan(alpha.std) and np.isnan(scale.std) and alpha.n == scale.n == 2
    heavy = survival_estimates([47, 71, 184, 34, 3, 325, 4, 77, 349, 18, 10, 353, 13, 30, 21, 28], 200, np.random.default_rng(0))
    assert all(e.std > 0 and e.p05 <= e.p95 for e in heavy)


def test_a_survival_fit_at_its_limit_says_it_is_an_exponential():
    two = [SESSIONS / "claude_code" / "cc_fundwise.jsonl", SESSIONS / "claude_code" / "cc_task43_develop.jsonl"]
    two = [need(path) for path in two]
    report = format_report(calibrate(two, bootstrap=50))
    survival = [line for line in report.splitlines() if line.startswith("survival")]
    assert survival and "too few sessions for a spread" in survival[0] and "± 0.00" not in survival[0]
    mean = (read_session(two[0]).llm_calls + read_session(two[1]).llm_calls) / 2
    assert f"the fit is its limit, mean {mean:,.0f} calls" in report


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 400), st.floats(0.0, 1.0)), min_size=2, max_size=MAX_AGE_BINS))
def test_the_recall_fit_grid_at_once_equals_one_tau_at_a_time(bins):
    from dp_compact.calibration.recall import _TAU_GRID, _grid_errors, _q0_for

    ages = np.arange(len(bins), dtype=np.float64)
    w = np.array([n for n, _ in bins], dtype=np.float64)
    q = np.array([share for _, share in bins], dtype=np.float64)
    assert _grid_errors(_TAU_GRID, ages, q, w).tolist() == [_q0_for(float(t), ages, q, w)[1] for t in _TAU_GRID]
