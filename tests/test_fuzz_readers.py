"""Every reader, fuzzed: the opening records of each real transcript format in
../shared/sessions, with records dropped, duplicated, cut short, and leaves replaced by huge,
negative, non-finite, wrongly typed or badly encoded values. Reading and planning either succeed
or raise a library error (a one-line message, never a traceback), and the input is never changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dp_compact.errors import DpCompactError
from dp_compact.prepare import plan_prepared, prepare
from dp_compact.sessions import read_session
from dp_compact.settings import default_settings
from tests.conftest import SESSIONS, session_files

#: Records taken from the start of each transcript: enough for calls, results and usage.
OPENING_RECORDS = 40
ODD_VALUES: list[Any] = [2**63, -(2**63), 2**64 + 1, -1, 1e308, 1.5, "12", "", None, True, [], {}, "\ud800", "\x00", "é" * 3,
                         "9" * 400]


def _openings() -> dict[str, tuple[str, list[Any]]]:
    """Per readable shared transcript: ``(shape, records)`` where shape is "lines" (JSON Lines)
    or "document" (one JSON value, its records the top-level list or the messages list)."""
    out: dict[str, tuple[str, list[Any]]] = {}
    for path in session_files():
        try:
            read_session(path)
        except DpCompactError:
            continue  # a file no command reads (the Cline UI log)
        text = path.read_text("utf-8", errors="replace")
        try:
            document = json.loads(text)
        except ValueError:
            records = [json.loads(line) for line in text.splitlines()[:OPENING_RECORDS] if line.strip()]
            out[path.name] = ("lines", records)
            continue
        out[path.name] = ("document", [document])
    return out


OPENINGS = _openings()


class _Cut(str):
    """A record cut short: its text as written, not a JSON value any more."""


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(value, list):
        return [p for i, v in enumerate(value[:OPENING_RECORDS]) for p in _leaves(v, (*path, i))] or [path]
    return [path]


def _set(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, *rest = path
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = _set(copy[head], tuple(rest), new)
    return copy


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, bytes]:
    name = draw(st.sampled_from(sorted(OPENINGS)))
    shape, records = OPENINGS[name]
    records = list(records)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["leaf", "leaf", "leaf", "drop", "duplicate", "truncate"] if shape == "lines" else ["leaf"]))
        at = draw(st.integers(0, len(records) - 1))
        if kind == "leaf" and not isinstance(records[at], _Cut):
            leaves = _leaves(records[at])
            where = leaves[draw(st.integers(0, len(leaves) - 1))]
            records[at] = _set(records[at], where, draw(st.sampled_from(ODD_VALUES)))
        elif kind == "drop" and len(records) > 1:
            del records[at]
        elif kind == "duplicate":
            records.insert(at, records[at])
        elif kind == "truncate":
            records[at] = _Cut((records[at] if isinstance(records[at], _Cut) else json.dumps(records[at]))[: draw(st.integers(0, 60))])
    if shape == "document":
        text = json.dumps(records[0])
    else:
        text = "\n".join(r if isinstance(r, _Cut) else json.dumps(r) for r in records) + "\n"
    return name, text.encode("utf-8", "surrogatepass")


@pytest.mark.skipif(not OPENINGS, reason=f"{SESSIONS} is absent (the fuzz starts from real transcripts)")
@given(mutated())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_every_reader_fuzzed_reads_and_plans_or_refuses_in_one_line(case: tuple[str, bytes]) -> None:
    name, data = case
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        try:
            session = read_session(path, lenient=True)
            plan_prepared(prepare(session, default_settings(), use_cache=False))
        except DpCompactError as exc:
            message = str(exc)
            assert message and "Traceback" not in message and len(message.splitlines()) <= 3, message
        assert path.read_bytes() == data  # the input is never changed
