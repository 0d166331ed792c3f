"""Real sessions of ../shared/sessions through the pipeline (DESIGN §5).

Every session compacts at the planner's cut (with --force where it would keep everything) and
at several --keep cuts, in its own API and in the other one, and every output passes our
validator and the SDKs' request types. The summary keeps the head's file paths and user
instructions: the shares measured here have floors set from measurement (see the report in
``test_summary_keeps_paths_and_instructions_of_real_sessions``).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

from dp_compact.api import plan_session
from dp_compact.errors import NoFeasibleCutError, NotASessionError
from dp_compact.pipeline.compact import compact_session
from dp_compact.pipeline.io import validate_file, write_messages
from dp_compact.pipeline.split import split_system
from dp_compact.sessions import read_session
from dp_compact.conversation import Message, Session
from dp_compact.settings import load_settings
from tests.conftest import SESSIONS, need, session_files
from tests.pipeline_helpers import FakeArchiver, read_jsonl, sdk_errors

#: --keep values tried on every session (those >= N are skipped: nothing to drop).
KEEPS = (1, 3, 10, 40)
#: Floors from measurement (2026-11-30, S = 500, forced/planned cut of each session): path share
#: 0.65 on average over the 13 sessions whose head names a path, 62/158 = 0.39 pooled (heads naming
#: 20-80 files do not fit 2·S tokens); standing instructions 1.0 in every session (by design).
MEAN_PATH_SHARE_FLOOR = 0.55
POOLED_PATH_SHARE_FLOOR = 0.33
INSTRUCTION_SHARE_FLOOR = 1.0
_PATH = re.compile(r"(?<![\w:/.-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w.-]+\.[A-Za-z]\w{0,5}\b")
_STANDING = re.compile(r"\b(always|never|from now on|don't|do not)\b", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_TAGS = re.compile(r"<([\w-]+)>.*?</\1>", re.S)
#: Where Claude Code's summary turns from the conversation to its note to the model about the
#: hand-over ("Resume directly — do not acknowledge the summary"): no instruction of the user's.
_HANDOVER_NOTE = re.compile(r"If you need specific details from before compaction|Continue the conversation from where it left off", re.I)


@cache
def _session(path: Path) -> Session:
    return read_session(path)


def _sessions() -> list[Path]:
    return session_files() or [SESSIONS / "absent"]


def _read(path: Path) -> Session:
    need(path)
    try:
        return _session(path)
    except NotASessionError as exc:
        pytest.skip(f"not a session (NotASessionError): {exc}")


def _check_output(result, tmp_path: Path, name: str) -> None:
    out = tmp_path / f"{name}.jsonl"
    write_messages(out, list(result.messages), result.api, source=result.path)
    assert validate_file(out, result.api) == ()
    assert sdk_errors(read_jsonl(out), result.api) == []


@pytest.mark.parametrize("path", _sessions(), ids=lambda p: p.name)
@pytest.mark.slow
def test_real_session_compacts_and_validates_at_planned_and_forced_cuts(path: Path, tmp_path: Path) -> None:
    session = _read(path)
    settings = load_settings()
    archive = FakeArchiver()
    planned = compact_session(session, settings, force=True, archiver=archive, use_cache=False)
    assert planned.decision == "compact", planned.explanation
    _check_output(planned, tmp_path, "planned")
    markers = list(split_system(session.system_messages)[1])  # earlier compactions' markers go with the head
    assert archive.restore(planned.archive_ref) == [*markers, *(m.raw for m in session.messages[: planned.cut])]
    for keep in [k for k in KEEPS if k < len(session.messages)]:
        for to in ("anthropic", "openai"):
            try:
                result = compact_session(session, settings, keep=keep, to=to, use_cache=False)
            except NoFeasibleCutError:
                continue
            assert result.k >= keep
            _check_output(result, tmp_path, f"keep{keep}-{to}")


@pytest.mark.parametrize("path", _sessions(), ids=lambda p: p.name)
@pytest.mark.slow
def test_compaction_is_a_fixed_point_of_the_planner(path: Path, tmp_path: Path) -> None:
    """Planning the file a planned compaction wrote, with nothing new, keeps it; c and N carry over."""
    session = _read(path)
    settings = load_settings()
    result = compact_session(session, settings, archiver=FakeArchiver(), use_cache=False)
    if result.decision != "compact":
        pytest.skip(f"the planner does not compact {path.name} ({result.rule}: {result.decision})")
    out = tmp_path / "compacted.jsonl"
    write_messages(out, list(result.messages), result.api, source=result.path)
    again = read_session(out)
    replanned = plan_session(again, settings, use_cache=False)
    assert replanned.decision == "keep", replanned.explanation
    assert again.compactions == session.compactions + 1
    assert again.earlier_messages == result.cut


def test_cline_ui_log_is_not_a_session() -> None:
    path = SESSIONS / "other" / "cline_ui_messages_cardgame.json"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    with pytest.raises(NotASessionError):
        read_session(path)


def _head_facts(head: tuple[Message, ...]) -> tuple[set[str], set[str]]:
    """File paths (user text and path arguments of tool calls) and standing instructions of user turns."""
    paths: set[str] = set()
    instructions: set[str] = set()
    for message in head:
        if message.role == "user" and not message.text.startswith("[summary]"):
            text = _HANDOVER_NOTE.split(_TAGS.sub("", message.text))[0]
            # a Markdown block quote wrapped over lines is one paragraph: its lines joined, its markers dropped
            text = re.sub(r"^[ \t]*>[ \t]?", "", re.sub(r"(?<![.!?:;])\n[ \t]*>[ \t]?(?=\S)", " ", text), flags=re.M)
            paths |= set(_PATH.findall(text))
            instructions |= {s.strip() for s in _SENTENCE.split(text) if _STANDING.search(s) and 12 <= len(s.strip()) <= 300}
        for call in message.tool_calls:
            try:
                arguments = json.loads(call.arguments)
            except ValueError:
                continue
            if isinstance(arguments, dict):
                values = [v for k, v in arguments.items() if k in ("file_path", "path", "notebook_path") and isinstance(v, str)]
                paths |= {p for v in values for p in _PATH.findall(v)}
    return paths, instructions


@pytest.mark.slow
def test_summary_keeps_paths_and_instructions_of_real_sessions(capsys: pytest.CaptureFixture[str]) -> None:
    files = [p for p in session_files() if p.name != "cline_ui_messages_cardgame.json"]
    if not files:
        pytest.skip(f"{SESSIONS} is absent")
    # The summarizer's quality on the heads the §2 planner cuts (25 % kept): the look-ahead keeps
    # less, and what its longer heads lose is priced by its recall term, not by this floor.
    settings = load_settings(planner="myopic")
    path_shares, rows, pooled = [], [], [0, 0]
    for path in files:
        session = _session(path)
        result = compact_session(session, settings, force=True, dry_run=True, use_cache=False)
        paths, instructions = _head_facts(session.messages[: result.cut])
        kept_paths = sum(p in result.summary for p in paths)
        kept_instructions = sum(i in result.summary for i in instructions)
        if paths:
            path_shares.append(kept_paths / len(paths))
            pooled[0], pooled[1] = pooled[0] + kept_paths, pooled[1] + len(paths)
        if instructions:
            assert kept_instructions / len(instructions) >= INSTRUCTION_SHARE_FLOOR, path.name
        rows.append(f"{path.name:40} paths {kept_paths}/{len(paths)}  instructions {kept_instructions}/{len(instructions)}")
    mean = sum(path_shares) / len(path_shares)
    with capsys.disabled():
        print(
            "\nsummary quality (summary + anchors):\n  " + "\n  ".join(rows)
            + f"\n  mean path share {mean:.2f}, pooled {pooled[0]}/{pooled[1]} = {pooled[0] / pooled[1]:.2f}"
        )
    assert mean >= MEAN_PATH_SHARE_FLOOR
    assert pooled[0] / pooled[1] >= POOLED_PATH_SHARE_FLOOR


def test_compacted_output_keeps_the_model_window_t_and_l_it_ran_with(tmp_path: Path) -> None:
    """The compacted file is priced and windowed as the conversation was (issue record: re-planning a
    Codex compaction fell back to the default model and a 200k window)."""
    path = SESSIONS / "codex" / "codex_pharma_2compactions.jsonl"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    session = _read(path)
    settings = load_settings()
    before = plan_session(session, settings, use_cache=False)
    result = compact_session(session, settings, force=True, archiver=FakeArchiver(), use_cache=False)
    out = tmp_path / "compacted.jsonl"
    write_messages(out, list(result.messages), result.api, source=result.path)
    again = read_session(out)
    assert again.model == session.model and again.context_window == before.prices.max_context_tokens
    assert again.window_source == "the summary of an earlier dp-compact compaction"  # said in the plan's window note
    after = plan_session(again, settings, use_cache=False)
    assert after.prices.name == before.prices.name and after.prices.max_context_tokens == before.prices.max_context_tokens
    # t and L as the reader counted them (its user turns leave injected context out; calls from usage records)
    assert after.estimates.user_turns == before.estimates.user_turns
    assert after.estimates.calls_per_turn == pytest.approx(before.estimates.calls_per_turn)


@pytest.mark.slow
def test_the_summary_size_the_planner_expects_is_what_the_extractive_summarizer_writes() -> None:
    """``EXTRACTIVE_SUMMARY_TOKENS`` (S when ``DP_S`` is not given) is the median summary of the shared sessions,
    compacted at the forced cut as ``compact --force --dry-run`` does: the planner prices the summary it will get."""
    import statistics

    from dp_compact.core.planner_lookahead import EXTRACTIVE_SUMMARY_TOKENS

    files = [p for p in session_files() if p.name != "cline_ui_messages_cardgame.json"]
    if len(files) < 5:
        pytest.skip(f"{SESSIONS} is absent or holds too few sessions")
    sizes = [compact_session(_session(p), load_settings(), force=True, dry_run=True, archiver=FakeArchiver(), use_cache=False).summary_tokens
             for p in files]
    assert abs(statistics.median(sizes) - EXTRACTIVE_SUMMARY_TOKENS) <= 0.05 * EXTRACTIVE_SUMMARY_TOKENS, sorted(sizes)
