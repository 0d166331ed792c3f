"""The ``dp-compact`` entry point: ``plan FILE [--json] [--stats STATS]`` and ``hook`` from a transcript's kept state.

A running agent asks these before every call, so a run's cost is what its user feels. When the
state of a Claude Code, Codex, Anthropic messages, OpenAI chat or Gemini CLI stream-json JSONL
file is kept (:mod:`dp_compact.hot.state`)
under the same code and settings, the run reads only what was appended
(:func:`dp_compact.hot.lines.read_grown_any`),
plans with the kept settings and prices, and imports only the planner's modules: no Typer, no
pydantic, no price database (:func:`_plan_warm`). A file that is one JSON document (rewritten
whole after each call) is kept too, and read whole by the application's reader on such a run
(:mod:`dp_compact.hot.document`). The ``PreCompact`` hook reads the transcript
whole, as the application does (the archive holds each message's source, which the kept reader
state does not), and archives with the kept settings and prices (:func:`_pre_compact_warm`); a
plan server prepares it once it has answered the transcript's status line, and flushes and
indexes its archive once it has answered it (:func:`dp_compact.hot.precompact.after_reply`).
Any other run is the Typer application (:func:`_full`), after which the transcript's state is
kept for the next one (:func:`_remember`). The output is the application's, byte for byte, and
an archive the same but for its id and time (``tests/test_incremental.py``).

``NO_DP_COMPACT_HOT=1`` in the environment turns the hot path off (every run is the
application's; not a ``DP_*`` name, so never taken for a setting).
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["archives", "hot_form", "main", "state_kept", "warm"]

#: ``hook_event_name`` of Claude Code's PreCompact hook (:data:`dp_compact.adapters.claude_code_hook.PRE_COMPACT`).
_PRE_COMPACT = "PreCompact"
#: Set when this process's run left a current kept state (ran from one, or kept one): then a plan
#: server can answer the next run (:func:`state_kept`, :func:`dp_compact.hot.client.run`).
_kept_now = False
#: True in a long-lived process (the plan server sets it): the reader states that
#: :func:`dp_compact.hot.lines.read_grown_any` brings up to date in place (:data:`~dp_compact.hot.lines.IN_PLACE_STATES`)
#: are also kept unpickled in :data:`_LIVE` between runs.
keep_live = False
#: State file -> ((size, mtime in ns) of the file as this process left it, its Kept, the reader
#: state it holds, unpickled): at most :data:`~dp_compact.hot.state.LIVE_STATES`, the most recently used last.
_LIVE: dict[Path, tuple[tuple[int, int] | None, Any, Any]] = {}
def state_kept() -> bool:
    """True when a run of this process ran from, or kept, a transcript's current state."""
    return _kept_now


def archives(args: list[str], stdin: str | None) -> bool:
    """True when ``dp-compact ARGS`` with ``stdin`` is the ``PreCompact`` hook (a run that writes an archive)."""
    payload = _payload(stdin or "") if args == ["hook"] else None
    return payload is not None and payload.get("hook_event_name") == _PRE_COMPACT


def hot_form(args: list[str]) -> tuple[str, str | None, bool, str | None] | None:
    """``("plan", FILE, as_json, STATS)`` (``plan FILE [--json] [--stats STATS]``, STATS None
    without it) or ``("hook", None, False, None)`` when ``args`` is a form the hot path runs (no
    option it does not know), else None."""
    if args == ["hook"]:
        return "hook", None, False, None
    if not args or args[0] != "plan":
        return None
    rest, stats = list(args[1:]), None
    for at, arg in enumerate(rest):
        if arg == "--stats" and at + 1 < len(rest) and rest[at + 1] and not rest[at + 1].startswith("-"):
            stats = rest[at + 1]
            del rest[at: at + 2]
            break
        if arg.startswith("--stats="):
            stats = arg.removeprefix("--stats=")
            del rest[at]
            break
    as_json = "--json" in rest
    files = [a for a in rest if a != "--json"]
    if len(files) == 1 and len(rest) == 1 + as_json and not files[0].startswith("-") and files[0] and stats != "":
        return "plan", files[0], as_json, stats
    return None


def main(argv: list[str] | None = None) -> None:
    """Run ``dp-compact`` with ``argv`` (default ``sys.argv[1:]``) and exit with its status."""
    args = list(sys.argv[1:] if argv is None else argv)
    form = None if os.environ.get("NO_DP_COMPACT_HOT") else hot_form(args)
    if form is None:
        sys.exit(_full(args))
    command, file, as_json, stats = form
    if command == "plan":
        assert file is not None
        code = _plan_warm(file, as_json, stats)
        if code is None:
            code = _full(args)
            if code in (0, 10):
                _remember_quietly("plan", Path(file), str(Path(file)), lenient=False)
        sys.exit(code)
    text = sys.stdin.read()
    code = _hook_warm(text)
    if code is None:
        code = _full(args, stdin=text)
        path = _transcript_of(text)
        if code == 0 and path is not None:  # the status line's state, which the PreCompact hook's run takes too
            _remember_quietly("hook", path, str(path), lenient=True)
    sys.exit(code)


def warm(args: list[str], stdin: str | None = None) -> int | None:
    """Run ``dp-compact ARGS`` from the kept state (``stdin``: the text ``hook`` reads) and return its
    exit status, its output written; None, nothing written, when the application must run it. The
    in-process run's first step and the plan server's whole run (:mod:`dp_compact.hot.server`)."""
    form = hot_form(args)
    if form is None:
        return None
    command, file, as_json, stats = form
    if command == "plan":
        assert file is not None
        return _plan_warm(file, as_json, stats)
    return _hook_warm(stdin or "")


def _remember_quietly(command: str, path: Path, name: str, *, lenient: bool) -> None:
    """:func:`_remember`, whose failure leaves the command's output and status as they are: a state
    not kept only makes the next run read the whole file."""
    import pickle

    try:
        _remember(command, path, name, lenient=lenient)
    except (OSError, ValueError, TypeError, AttributeError, ImportError, RecursionError, pickle.PicklingError):
        return


def _full(args: list[str], stdin: str | None = None) -> int:
    """Run the Typer application on ``args`` (``stdin``: the text its standard input gives); its exit status."""
    from dp_compact.hot.settings import remove_lean_settings_module

    remove_lean_settings_module()
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    from dp_compact.cli.registry import application

    try:
        application().app(args=args, prog_name="dp-compact")
    except SystemExit as done:
        code = done.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0


def _payload(text: str) -> dict[str, Any] | None:
    """The hook's JSON ``text`` when it is an object, else None."""
    try:
        payload = json.loads(text or "null")
    except ValueError:
        return None
    return payload if isinstance(payload, dict) else None


def _transcript_of(text: str) -> Path | None:
    """The transcript named by the hook's JSON ``text`` (the status line's or PreCompact's); None for input without one."""
    payload = _payload(text)
    path = None if payload is None else payload.get("transcript_path")
    return Path(path).expanduser() if isinstance(path, str) and path else None


def _kept_state(command: str, path: Path) -> tuple[Any, Any] | None:
    """The kept state of ``path`` for ``command`` and its file, when current (:func:`dp_compact.hot.state.load`)."""
    from dp_compact.hot.settings import settings_key
    from dp_compact.hot.state import load, state_path

    file = state_path(path, command)
    kept = load(file, settings_key())
    return None if kept is None else (kept, file)


def _grown_session(path: Path, name: str, kept: Any, state: Any = None) -> tuple[Any, bytes, Any] | None:
    """The session of ``path`` read from the kept state (named ``name``; ``state``: that state
    already unpickled, else ``kept.transcript`` is), its new state pickled, and the reader state
    used; None when it cannot be read that way."""
    import pickle

    from dp_compact.hot.lines import read_grown_any
    from dp_compact.hot.transcript import NotIncremental

    try:
        with open(path, "rb") as handle:
            data = handle.read()
        if state is None:
            state = pickle.loads(kept.transcript)
        return (*read_grown_any(name, data, state), state)
    except (OSError, NotIncremental, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        return None


def _live_state(file: Path) -> tuple[Any, Any] | None:
    """``(kept, reader state)`` of ``file`` from :data:`_LIVE`, when the file is as this process left
    it and the kept code and settings are current (taken out: a failed read must not leave it half
    brought up to date); else None."""
    from dp_compact.hot.state import file_signature

    live = _LIVE.pop(file, None)
    if live is None or live[0] is None or live[0] != file_signature(file):
        return None
    from dp_compact.hot.settings import settings_key
    from dp_compact.hot.state import same_code

    kept = live[1]
    return (kept, live[2]) if kept.settings_key == settings_key() and same_code(kept.code) else None


def _planned(session: Any, settings: Any, memo: dict[Any, Any], now: float | None, now_source: str) -> Any:
    """The plan of ``session`` as :func:`dp_compact.api.plan_file` makes it (``now`` None: the file's
    last record), ``get_prices`` answering from the kept lookups ``memo`` first (:func:`dp_compact.pricing.seed_price_lookups`)."""
    from dp_compact import prepare as preparation
    from dp_compact.io import bulk_allocation
    from dp_compact.pricing import seed_price_lookups

    seed_price_lookups(memo)
    with bulk_allocation():
        if now is None:
            now, now_source = preparation.last_record_seconds(session.path), preparation.TRANSCRIPT_NOW
        prepared = preparation.prepare(session, settings, use_cache=True)
        timing = preparation.plan_timing(prepared.session, now, now_source, hazard=None)
        return preparation.plan_prepared(prepared, timing=timing)


def _warm_session(command: str, path: Path) -> tuple[Any, Path, Any, Any, Any] | None:
    """The kept state of ``command`` for ``path`` and the session grown from it by what was appended:
    ``(kept, state file, session, transcript, reader state)``, or None when the application must read it whole."""
    live = None
    if keep_live:
        from dp_compact.hot.state import state_path

        state_file = state_path(path, command)
        live = _live_state(state_file)
    if live is not None:
        kept, state = live
    else:
        found = _kept_state(command, path)
        if found is None:
            return None
        (kept, state_file), state = found, None
    grown = _grown_session(path, str(path), kept, state)
    if grown is None:
        return None
    session, transcript, state = grown
    return kept, state_file, session, transcript, state


def _plan_warm(file: str, as_json: bool, stats: str | None = None) -> int | None:
    """``dp-compact plan FILE [--json] [--stats STATS]`` from the kept state; its exit status, or
    None when the application must run it (no current state, a change other than an append, an
    error to report)."""
    path = Path(file)
    warm = _warm_session("plan", path)
    if warm is None:
        return None
    kept, state_file, session, transcript, state = warm
    if stats is not None:  # the seed agent's counters, attached as read_session attaches them
        from dataclasses import replace

        from dp_compact.errors import DpCompactError
        from dp_compact.sessions import read_seed_stats

        try:
            session = replace(session, stats=read_seed_stats(stats))
        except DpCompactError:
            return None
    result = _in_lean_process(lambda: _planned(session, kept.settings, kept.prices, None, ""))
    if result is None:
        return None
    from dp_compact.cli.render import plan_json, render_plan

    data = {**result.to_dict(), "window_source": result.prices.window_source}
    for note in kept.notes:
        sys.stderr.write(note + "\n")
    sys.stdout.write((json.dumps(plan_json(data), ensure_ascii=False) if as_json else render_plan(data)) + "\n")
    sys.stdout.flush()
    _keep(state_file, kept, transcript, state)
    return 0


def _hook_warm(text: str) -> int | None:
    """``dp-compact hook`` from the kept state (the status line's, or PreCompact's: :func:`_pre_compact_warm`);
    its exit status, or None when the application must run it (bad input, no current state, an error to report)."""
    import time

    path = _transcript_of(text)
    if path is None:
        return None
    payload = _payload(text)
    if payload is not None and payload.get("hook_event_name") == _PRE_COMPACT:
        return _pre_compact_warm(payload, path)
    warm = _warm_session("hook", path)
    if warm is None:
        return None
    kept, state_file, session, transcript, state = warm
    from dp_compact.adapters.claude_code_hook import hook_settings, status_text, with_payload_context
    from dp_compact.errors import DpCompactError

    try:
        session = with_payload_context(session, json.loads(text))
    except DpCompactError:
        return None
    result = _in_lean_process(lambda: _planned(session, hook_settings(kept.settings), kept.prices, time.time(), "wall clock"))
    if result is None:
        return None
    sys.stdout.write(status_text(result) + "\n")
    sys.stdout.flush()
    _keep(state_file, kept, transcript, state)
    if keep_live:
        from dp_compact.hot.precompact import _nearly_full, _prepare_pre_compact

        _prepare_pre_compact(path, session.messages, full=_nearly_full(result))
    return 0


def _pre_compact_warm(payload: dict[str, Any], path: Path) -> int | None:
    """The ``PreCompact`` hook with the settings and prices kept with the transcript's status-line
    state: the transcript read whole and archived as the application does
    (:func:`dp_compact.adapters.claude_code_hook.archive_before_compaction`); its exit status, or
    None when the application must run it (no current state, an error to report: nothing archived).

    In a long-lived process (:data:`keep_live`, the plan server) the archive is placed, and its
    reference printed, before it is flushed and indexed: that commit is left for once the answer
    is sent (:func:`dp_compact.hot.precompact.after_reply`, :class:`~dp_compact.pipeline.archive.DeferredArchiver`), which
    spares the run the disk flushes and the index update; the archive's files and index row are the
    same. A server that dies before it commits leaves an archive the next write indexes; a power
    loss in that moment may lose it (the transcript keeps every message it holds)."""
    global _kept_now

    found = _kept_state("hook", path)
    if found is None:
        return None
    kept = found[0]
    deferred: list[Any] = []

    def archived() -> Any:
        from dp_compact.adapters.claude_code_hook import archive_before_compaction
        from dp_compact.hot.precompact import _TOKEN_COUNTS, _encodings, _read_whole
        from dp_compact.pipeline.archive import ArchiveStore, DeferredArchiver
        from dp_compact.pricing import seed_price_lookups

        seed_price_lookups(kept.prices)
        store = ArchiveStore(kept.settings.archive_dir)
        session = _read_whole(path, start=False) if keep_live else None  # None: the hook reads it
        # a server commits once it has answered
        archiver = DeferredArchiver(store, _encodings(path, session) if session is not None else None) if keep_live else store
        try:
            outcome = archive_before_compaction(payload, kept.settings, archiver, token_cache=_TOKEN_COUNTS if keep_live else None,
                                                session=session)
        except BaseException:
            for staged in getattr(archiver, "staged", ()):
                staged.discard()  # the application runs it again: no second archive
            raise
        if keep_live:
            deferred.append((archiver.commit, True, 0))
        return outcome

    outcome = _in_lean_process(archived)
    if outcome is None:
        return None
    if deferred:
        from dp_compact.hot.precompact import _AFTER_REPLY

        _AFTER_REPLY.extend(deferred)
    _kept_now = True
    sys.stdout.write(outcome.text + "\n")
    sys.stdout.flush()
    return 0


def _in_lean_process(run: Any) -> Any:
    """``run()`` with the stand-in settings module (:func:`dp_compact.hot.settings.install_lean_settings_module`);
    None when it raises a dp_compact error (the application reports it: :func:`_full` takes the
    stand-in out first; a plan server keeps its modules) or the stand-in falls short (taken out here)."""
    from dp_compact.errors import DpCompactError
    from dp_compact.hot.settings import install_lean_settings_module, remove_lean_settings_module

    install_lean_settings_module()
    try:
        return run()
    except DpCompactError:
        return None
    except (ImportError, AttributeError):
        remove_lean_settings_module()
        return None


def _keep(state_file: Path, kept: Any, transcript: bytes, state: Any = None) -> None:
    """Write ``kept`` back with the transcript's new state and the price lookups made
    (:func:`dp_compact.pricing.price_lookups`); with :data:`keep_live`, also keep it and the reader
    ``state`` (which ``transcript`` pickles) in :data:`_LIVE` when the reader brings it up to date in place."""
    from dataclasses import replace

    from dp_compact.hot.lines import IN_PLACE_STATES
    from dp_compact.hot.state import LIVE_STATES, file_signature, save
    from dp_compact._fast import keep_newest
    from dp_compact.pricing import price_lookups

    global _kept_now
    prices = price_lookups()
    if transcript == kept.transcript and all(prices.get(key) == answer for key, answer in kept.prices.items()):
        # nothing appended and the kept lookups still answer: the kept file stands (a lookup it lacks is made again next run)
        _kept_now = True
    else:
        kept = replace(kept, transcript=transcript, prices=prices)
        _kept_now = save(state_file, kept) or _kept_now
    if keep_live and type(state) in IN_PLACE_STATES:
        _LIVE[state_file] = (file_signature(state_file), kept, state)
        keep_newest(_LIVE, LIVE_STATES)


def _remember(command: str, path: Path, name: str, *, lenient: bool) -> None:
    """After the application ran ``command`` on ``path``: keep the transcript's state for the next
    run, when the reader's state gives the session the application read (a JSONL file of Claude
    Code, Codex, Anthropic messages, OpenAI chat or Gemini CLI stream-json), or when the file is
    one JSON document (:class:`~dp_compact.hot.document.DocumentState`: read whole each run)."""
    global _kept_now
    from dp_compact.errors import DpCompactError
    from dp_compact.hot.document import document_state
    from dp_compact.hot.settings import KeptSettings, settings_key
    from dp_compact.hot.state import Kept, code_key, save, state_path
    from dp_compact.hot.lines import INCREMENTAL_FORMATS, read_grown_any
    from dp_compact.hot.transcript import NotIncremental

    grown: tuple[Any, bytes] | None
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return
    try:
        grown = read_grown_any(name, data, None)
    except NotIncremental:
        grown = None
    document = document_state(name, data, lenient) if grown is None else None
    if grown is None and document is None:
        return
    from dp_compact.sessions import read_session
    from dp_compact.settings import env_file_values, load_settings, variable_notes

    try:
        whole = read_session(name, lenient=lenient, raw_json=True)
        if grown is not None and (grown[0] != whole or whole.format not in INCREMENTAL_FORMATS):
            document, grown = document_state(name, data, lenient), None
        if grown is not None:
            session, transcript = grown
        elif document is not None:  # one JSON document: read whole each run (dp_compact.hot.document)
            session, transcript = whole, document
        else:
            return
        key = settings_key()
        settings = load_settings()
        notes = tuple(f"dp-compact: note: {t}" for t in variable_notes(os.environ, env_file_values())) if command == "plan" else ()
        _planned(session, settings, {}, 0.0, "")  # the price lookups a plan of this session makes
    except DpCompactError:
        return
    from dp_compact.pricing import price_lookups

    memo = price_lookups()
    _kept_now = save(state_path(path, command), Kept(code_key(), key, KeptSettings.of(settings), notes, memo, transcript)) or _kept_now
