"""Figures: `dp-compact curve` / `timeline` write valid PNG and SVG; the figures hold the expected artists."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dp_compact.api import curve_plans, session_tokens
from dp_compact.core.benefit import TERM_LABELS as TERMS
from dp_compact.cli import app
from dp_compact.figures import benefit_figure, plan_label, plan_values, save_figure, timeline_figure
from dp_compact.calibration.history import read_history
from dp_compact.sessions import read_session
from dp_compact.settings import load_settings
from dp_compact.replay.timeline import timeline
from tests.conftest import REPO, SESSIONS, need

EXAMPLE = REPO / "dp_compact" / "examples" / "session.jsonl"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _gids(figure) -> dict[str, list]:
    """Artists by gid over every axes of ``figure``."""
    found: dict[str, list] = {}
    for ax in figure.axes:
        for artist in [*ax.lines, *ax.collections]:
            if artist.get_gid():
                found.setdefault(artist.get_gid(), []).append(artist)
    return found


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 20_000


def _assert_svg(path: Path) -> None:
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg") and len(path.read_bytes()) > 20_000


@pytest.fixture(scope="module")
def example_plans():
    session = read_session(EXAMPLE)
    settings = load_settings()
    tokens = session_tokens(session, settings, use_cache=False)
    return curve_plans(session, tokens, settings, providers=["claude-sonnet-4", "gpt-4o"], models=["recall", "seed"])


def test_benefit_figure_has_net_and_term_lines_per_plan_and_chosen_markers(example_plans):
    figure = benefit_figure(example_plans)
    gids = _gids(figure)
    assert len(example_plans) == 4
    for p in example_plans:
        label = plan_label(p)
        chosen_k = p.k if p.decision == "compact" else p.best_candidate["k"]
        (net,) = gids[f"net:{label}"]
        k = p.n_messages - p.benefit.cut
        np.testing.assert_array_equal(net.get_xdata(), k)
        np.testing.assert_allclose(net.get_ydata(), plan_values(p))
        if p.lookahead_usd is None:  # DESIGN §2: the line is NetBenefit
            np.testing.assert_allclose(net.get_ydata(), p.benefit.net)
        else:  # DESIGN §7: what compacting now at each cut saves over the best schedule that waits
            finite = np.isfinite(p.lookahead_usd)
            keep = p.lookahead["keep_usd"]  # None above the forced threshold: then against the best cut
            base = keep if keep is not None else p.lookahead_usd[finite].min()
            np.testing.assert_allclose(net.get_ydata()[finite], base - p.lookahead_usd[finite])
            assert p.decision != "compact" or k[np.nanargmax(np.where(finite, net.get_ydata(), np.nan))] == p.k
        for name, _, _ in TERMS:
            (line,) = gids[f"term:{name}:{label}"]
            np.testing.assert_allclose(line.get_ydata(), getattr(p.benefit, name))
        (star,) = gids[f"chosen:{label}"]
        assert p.decision in ("compact", "clear")  # clearing (DESIGN §9): the star marks the best cut it beat, hollow
        assert star.get_xdata()[0] == chosen_k
        assert (star.get_markerfacecolor() == "white") == (p.decision != "compact")
        expected = p.terms["net"] if p.lookahead is None else plan_values(p)[np.flatnonzero(k == chosen_k)[0]]
        assert star.get_ydata()[0] == pytest.approx(expected)
    assert "min_keep" in gids and "context" in gids
    assert len(gids["force_threshold"]) == 2  # one per profile (windows differ)
    # gpt-4o's 128,000 cannot hold the example's accepted 152,557-token prompt: rounded up to 153,000 (DESIGN §6)
    assert {round(line.get_ydata()[0]) for line in gids["force_threshold"]} == {180_000, 137_700}


def test_benefit_figure_keep_plan_marks_best_candidate_hollow():
    session = read_session(EXAMPLE)
    settings = load_settings(e_fixed=0.1)  # almost no remaining calls: compaction does not pay
    tokens = session_tokens(session, settings, use_cache=False)
    (p,) = curve_plans(session, tokens, settings)
    assert p.decision == "keep"
    (star,) = _gids(benefit_figure([p]))[f"chosen:{plan_label(p)}"]
    assert star.get_xdata()[0] == p.best_candidate["k"] and star.get_markerfacecolor() == "white"


def test_benefit_figure_without_plans_raises():
    with pytest.raises(ValueError):
        benefit_figure([])


@pytest.mark.parametrize("suffix, check", [(".png", _assert_png), (".svg", _assert_svg)])
def test_cli_curve_writes_valid_figure(tmp_path: Path, suffix, check):
    out = tmp_path / f"curve{suffix}"
    result = CliRunner().invoke(app, ["curve", str(EXAMPLE), "--out", str(out), "--provider", "claude-sonnet-4",
                                      "--provider", "gpt-4o", "--model", "seed", "--no-cache"])
    assert result.exit_code == 0, result.output
    check(out)
    assert "gpt-4o · seed" in result.output
    assert not list(tmp_path.glob(".curve*"))  # no temporary file left


@pytest.mark.parametrize("suffix, check", [(".png", _assert_png), (".svg", _assert_svg)])
def test_cli_timeline_writes_valid_figure(tmp_path: Path, suffix, check):
    out = tmp_path / f"timeline{suffix}"
    result = CliRunner().invoke(app, ["timeline", str(EXAMPLE), "--out", str(out), "--no-cache"])
    assert result.exit_code == 0, result.output
    check(out)


@pytest.mark.parametrize("command", ["curve", "timeline"])
def test_cli_figure_bad_suffix_or_provider_fails_with_one_line(tmp_path: Path, command):
    runner = CliRunner()
    bad = runner.invoke(app, [command, str(EXAMPLE), "--out", str(tmp_path / "x.jpg")])
    assert bad.exit_code == 2 and ".png or .svg" in bad.output
    unknown = runner.invoke(app, [command, str(EXAMPLE), "--out", str(tmp_path / "x.png"), "--provider", "no-such-model-xyz"])
    assert unknown.exit_code == 2 and "unknown provider" in unknown.output
    assert not (tmp_path / "x.png").exists()


def test_timeline_plans_every_call_of_the_example():
    session = read_session(EXAMPLE)
    line = timeline(read_history(EXAMPLE), load_settings(), use_cache=False)
    assert line.call.size == len(session.usage)
    np.testing.assert_array_equal(line.context_tokens, [u.prompt_tokens for u in session.usage])
    assert np.all(np.diff(line.n_messages) > 0) and line.context_source == "usage"
    assert np.all(line.k[~line.compact] == line.n_messages[~line.compact])
    assert np.all(line.k[line.compact] < line.n_messages[line.compact])
    # The last call's advice is the plan of the whole session minus the last response.
    assert line.n_messages[-1] == len(session.messages) - 1


def test_timeline_figure_has_context_window_threshold_and_advice_markers():
    line = timeline(read_history(EXAMPLE), load_settings(), use_cache=False)
    gids = _gids(timeline_figure(line))
    (context,) = gids["context"]
    np.testing.assert_array_equal(context.get_ydata(), line.context_tokens)
    assert gids["window"][0].get_ydata()[0] == line.prices.max_context_tokens
    assert gids["force_threshold"][0].get_ydata()[0] == pytest.approx(line.force_threshold_tokens)
    rules = {r for r, c in zip(line.rule, line.compact, strict=True) if c}
    assert rules  # the example session is advised to compact somewhere
    for rule in rules:
        advised = line.compact & np.array([r == rule for r in line.rule])
        (markers,) = gids[f"advised:{rule}"]
        np.testing.assert_array_equal(markers.get_xdata(), line.call[advised])
    (followed,) = gids["followed"]  # the context had every advice been taken
    assert line.followed_context_tokens is not None and line.followed_note == ""
    np.testing.assert_array_equal(followed.get_ydata(), line.followed_context_tokens)
    assert followed.get_ydata().max() < line.context_tokens.max()  # following the advice keeps the context smaller


def test_timeline_figure_window_label_says_where_the_window_came_from():
    line = timeline(read_history(EXAMPLE), load_settings(), use_cache=False)
    assert line.window_source == "the price database's window for claude-sonnet-4"
    (window,) = _gids(timeline_figure(line))["window"]
    assert window.get_label() == "window M = 200,000 tokens: the price database's window for claude-sonnet-4"


def test_cli_curve_and_timeline_print_the_window_note(tmp_path: Path):
    for command in ("curve", "timeline"):
        result = CliRunner().invoke(app, [command, str(EXAMPLE), "--out", str(tmp_path / f"{command}.png"), "--no-cache"])
        assert result.exit_code == 0, result.output
        assert "context window 200,000 tokens: the price database's window for claude-sonnet-4" in result.stdout


def test_timeline_of_a_file_without_usage_says_what_its_calls_are_when_the_replay_differs(tmp_path):
    """A converted file with recorded summaries and no usage: the timeline plans its live segment's
    assistant messages, the replay the whole history's; the note says so, not that usage records were placed."""
    path = need(SESSIONS / "openai_chat" / "oai_task393c91_converted.json")
    result = CliRunner().invoke(app, ["timeline", str(path), "-o", str(tmp_path / "t.png"), "--no-cache"])
    assert result.exit_code == 0, result.output
    assert "the file recording no usage" in result.output and "usage record placed" not in result.output


def test_timeline_without_usage_estimates_context_from_messages():
    path = need(SESSIONS / "openai_chat" / "taubench_gpt4o_airline_task46.jsonl")
    settings = load_settings()
    line = timeline(read_history(path), settings, use_cache=False)
    session = read_session(path)
    tokens = session_tokens(session, settings, use_cache=False)
    assert line.context_source == "estimate"
    assert line.context_tokens[0] == settings.v + tokens[: line.n_messages[0]].sum()


@pytest.mark.slow
def test_timeline_real_session_marks_recorded_compactions(tmp_path: Path):
    path = need(SESSIONS / "codex" / "codex_pharma_2compactions.jsonl")
    line = timeline(read_history(path), load_settings(), use_cache=False)
    assert len(line.compactions) == 2 and line.first_call_after.size == 2
    assert np.all(line.segment[line.first_call_after] == [1, 2])
    gids = _gids(timeline_figure(line))
    assert len(gids["compaction"]) == 2
    _assert_png(save_figure(timeline_figure(line), tmp_path / "t.png"))
    # Replay calls (assistant messages) and the file's calls (placed usage records) differ here: no
    # line of the advice taken, and the command says why instead of leaving it out silently.
    assert line.followed_context_tokens is None and "followed" not in gids
    result = CliRunner().invoke(app, ["timeline", str(path), "-o", str(tmp_path / "t2.png"), "--no-cache"])
    assert result.exit_code == 0 and f"where the timeline plans {line.call.size:,} (one per usage record" in result.output


def test_save_figure_rejects_other_formats(tmp_path: Path, example_plans):
    with pytest.raises(ValueError):
        save_figure(benefit_figure(example_plans[:1]), tmp_path / "f.pdf")


def test_cli_start_and_library_import_load_no_matplotlib():
    code = "import sys, dp_compact.cli, dp_compact.figures, dp_compact.replay.timeline; print('matplotlib' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_benefit_figure_marks_a_provider_whose_window_the_context_exceeds():
    session = read_session(EXAMPLE)
    settings = load_settings(max_context_tokens=100_000)  # the example's context is about 152,000 tokens
    tokens = session_tokens(session, settings, use_cache=False)
    (p,) = curve_plans(session, tokens, settings)
    gids = _gids(benefit_figure([p]))
    (line,) = gids[f"window_exceeded:{p.prices.name}"]
    assert "already exceeds its window M = 100,000" in line.get_label()
    assert "force_threshold" not in gids
