"""The ``dp-compact`` entry point: ``plan FILE [--json]`` and ``hook`` from a transcript's kept state.

A running agent asks these before every call, so a run's cost is what its user feels. When a
Claude Code transcript's state is kept (:mod:`dp_compact.hot.state`) under the same code and
settings, the run reads only what was appended (:func:`dp_compact.hot.transcript.read_grown`),
plans with the kept settings and prices, and imports only the planner's modules: no Typer, no
pydantic, no price database (:func:`_plan_warm`). Any other run is the Typer application
(:func:`_full`), after which the transcript's state is kept for the next one (:func:`_remember`).
The output is the application's, byte for byte (``tests/test_incremental.py``).

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

__all__ = ["hot_form", "main", "warm"]

#: ``hook_event_name`` of Claude Code's PreCompact hook (:data:`dp_compact.adapters.claude_code_hook.PRE_COMPACT`).
_PRE_COMPACT = "PreCompact"


def hot_form(args: list[str]) -> tuple[str, str | None, bool] | None:
    """``("plan", FILE, as_json)`` or ``("hook", None, False)`` when ``args`` is a form the hot path
    runs (no option it does not know), else None."""
    if args == ["hook"]:
        return "hook", None, False
    if len(args) in (2, 3) and args[0] == "plan":
        rest = args[1:]
        as_json = "--json" in rest
        files = [a for a in rest if a != "--json"]
        if len(files) == 1 and len(rest) == 1 + as_json and not files[0].startswith("-") and files[0]:
            return "plan", files[0], as_json
    return None


def main(argv: list[str] | None = None) -> None:
    """Run ``dp-compact`` with ``argv`` (default ``sys.argv[1:]``) and exit with its status."""
    args = list(sys.argv[1:] if argv is None else argv)
    form = None if os.environ.get("NO_DP_COMPACT_HOT") else hot_form(args)
    if form is None:
        sys.exit(_full(args))
    command, file, as_json = form
    if command == "plan":
        assert file is not None
        code = _plan_warm(file, as_json)
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
        if code == 0 and path is not None:
            _remember_quietly("hook", path, str(path), lenient=True)
    sys.exit(code)


def warm(args: list[str], stdin: str | None = None) -> int | None:
    """Run ``dp-compact ARGS`` from the kept state (``stdin``: the text ``hook`` reads) and return its
    exit status, its output written; None, nothing written, when the application must run it. The
    in-process run's first step and the plan server's whole run (:mod:`dp_compact.hot.server`)."""
    form = hot_form(args)
    if form is None:
        return None
    command, file, as_json = form
    if command == "plan":
        assert file is not None
        return _plan_warm(file, as_json)
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


def _transcript_of(text: str) -> Path | None:
    """The status line's transcript named by the hook's JSON ``text``; None for PreCompact or input without one."""
    try:
        payload = json.loads(text or "null")
    except ValueError:
        return None
    if not isinstance(payload, dict) or payload.get("hook_event_name") == _PRE_COMPACT:
        return None
    path = payload.get("transcript_path")
    return Path(path).expanduser() if isinstance(path, str) and path else None


def _kept_state(command: str, path: Path) -> tuple[Any, Any] | None:
    """The kept state of ``path`` for ``command`` and its file, when current (:func:`dp_compact.hot.state.load`)."""
    from dp_compact.hot.settings import settings_key
    from dp_compact.hot.state import load, state_path

    file = state_path(path, command)
    kept = load(file, settings_key())
    return None if kept is None else (kept, file)


def _grown_session(path: Path, name: str, kept: Any) -> tuple[Any, bytes] | None:
    """The session of ``path`` read from the kept state (named ``name``), and its new state; None
    when it cannot be read that way."""
    import pickle

    from dp_compact.hot.transcript import NotIncremental, read_grown

    try:
        with open(path, "rb") as handle:
            data = handle.read()
        return read_grown(name, data, pickle.loads(kept.transcript))
    except (OSError, NotIncremental, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        return None


class _Prices:
    """``get_prices`` answered from the kept lookups first (``memo``: (name, ISO day, or "today" and
    today's date when no day is given) -> Prices or ("unknown", close matches)); a lookup not kept
    is made and kept."""

    def __init__(self, memo: dict[Any, Any], lookup: Any) -> None:
        self.memo, self.lookup = memo, lookup

    def __call__(self, name: str, on: Any = None) -> Any:
        from dp_compact.errors import UnknownProfileError

        if on is None:  # genai-prices gives today's prices (UTC): kept for today only
            from datetime import UTC, datetime

            key = (name, "today " + datetime.now(UTC).date().isoformat())
        else:
            key = (name, on.isoformat())
        if key not in self.memo:
            try:
                self.memo[key] = self.lookup(name, on)
            except UnknownProfileError as exc:
                self.memo[key] = ("unknown", list(exc.close_matches))
        answer = self.memo[key]
        if isinstance(answer, tuple):
            raise UnknownProfileError(name, list(answer[1]))
        return answer


def _planned(session: Any, settings: Any, memo: dict[Any, Any], now: float | None, now_source: str) -> Any:
    """The plan of ``session`` as :func:`dp_compact.api.plan_file` makes it (``now`` None: the file's
    last record), with ``get_prices`` answered by :class:`_Prices`."""
    from dp_compact import prepare as preparation
    from dp_compact.io import bulk_allocation

    lookup = preparation.get_prices
    preparation.get_prices = _Prices(memo, lookup)  # type: ignore[assignment]
    try:
        with bulk_allocation():
            if now is None:
                now, now_source = preparation.last_record_seconds(session.path), preparation.TRANSCRIPT_NOW
            prepared = preparation.prepare(session, settings, use_cache=True)
            timing = preparation.plan_timing(prepared.session, now, now_source, hazard=None)
            return preparation.plan_prepared(prepared, timing=timing)
    finally:
        preparation.get_prices = lookup


def _warm_session(command: str, path: Path) -> tuple[Any, Path, Any, Any] | None:
    """The kept state of ``command`` for ``path`` and the session grown from it by what was appended:
    ``(kept, state file, session, transcript)``, or None when the application must read it whole."""
    found = _kept_state(command, path)
    if found is None:
        return None
    kept, state_file = found
    grown = _grown_session(path, str(path), kept)
    if grown is None:
        return None
    session, transcript = grown
    return kept, state_file, session, transcript


def _plan_warm(file: str, as_json: bool) -> int | None:
    """``dp-compact plan FILE [--json]`` from the kept state; its exit status, or None when the
    application must run it (no current state, a change other than an append, an error to report)."""
    path = Path(file)
    warm = _warm_session("plan", path)
    if warm is None:
        return None
    kept, state_file, session, transcript = warm
    result = _in_lean_process(lambda: _planned(session, kept.settings, kept.prices, None, ""))
    if result is None:
        return None
    from dp_compact.cli.render import plan_json, render_plan

    data = {**result.to_dict(), "window_source": result.prices.window_source}
    for note in kept.notes:
        sys.stderr.write(note + "\n")
    sys.stdout.write((json.dumps(plan_json(data), ensure_ascii=False) if as_json else render_plan(data)) + "\n")
    sys.stdout.flush()
    _keep(state_file, kept, transcript)
    return 0


def _hook_warm(text: str) -> int | None:
    """``dp-compact hook`` as the status line, from the kept state; its exit status, or None when
    the application must run it (PreCompact, bad input, no current state, an error to report)."""
    import time

    path = _transcript_of(text)
    if path is None:
        return None
    warm = _warm_session("hook", path)
    if warm is None:
        return None
    kept, state_file, session, transcript = warm
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
    _keep(state_file, kept, transcript)
    return 0


def _in_lean_process(run: Any) -> Any:
    """``run()`` with the stand-in settings module (:func:`dp_compact.hot.settings.install_lean_settings_module`);
    None when it raises a dp_compact error (the application reports it) or the stand-in falls short."""
    from dp_compact.errors import DpCompactError
    from dp_compact.hot.settings import install_lean_settings_module, remove_lean_settings_module

    install_lean_settings_module()
    try:
        return run()
    except (DpCompactError, ImportError, AttributeError):
        remove_lean_settings_module()
        return None


def _keep(state_file: Path, kept: Any, transcript: bytes) -> None:
    """Write ``kept`` back with the transcript's new state."""
    from dataclasses import replace

    from dp_compact.hot.state import save

    save(state_file, replace(kept, transcript=transcript))


def _remember(command: str, path: Path, name: str, *, lenient: bool) -> None:
    """After the application ran ``command`` on ``path``: keep the transcript's state for the next
    run, when the reader's state gives the session the application read (a Claude Code transcript)."""
    from dp_compact.errors import DpCompactError
    from dp_compact.hot.settings import KeptSettings, settings_key
    from dp_compact.hot.state import Kept, code_key, save, state_path
    from dp_compact.hot.transcript import NotIncremental, read_grown

    try:
        with open(path, "rb") as handle:
            data = handle.read()
        session, transcript = read_grown(name, data, None)
    except (OSError, NotIncremental):
        return
    from dp_compact.sessions import read_session
    from dp_compact.settings import env_file_values, load_settings, variable_notes

    try:
        if session != read_session(name, lenient=lenient, raw_json=True) or session.format != "claude_code":
            return
        key = settings_key()
        settings = load_settings()
        notes = tuple(f"dp-compact: note: {t}" for t in variable_notes(os.environ, env_file_values())) if command == "plan" else ()
        memo: dict[Any, Any] = {}
        _planned(session, settings, memo, 0.0, "")  # the price lookups a plan of this session makes
    except DpCompactError:
        return
    save(state_path(path, command), Kept(code_key(), key, KeptSettings.of(settings), notes, memo, transcript))
