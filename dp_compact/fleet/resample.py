"""A synthetic fleet recombined from real sessions, to measure scale without real data.

How a synthetic session is made (line-based sources only: JSONL files, one record per line;
whole-JSON documents such as SWE-agent trajectories are not recombined):

1. Each source file is cut into a *head* and *call blocks* at the source lines where an LLM
   call starts: the line of each assistant message (as :func:`dp_compact.sessions.read_session`
   reads it) that follows a non-assistant message. A block is that assistant message, its tool
   calls, the tool results and user messages that follow, and every other record up to the
   next call (usage records, Codex ``token_count`` events, Claude Code system records), so a
   tool call and its result normally travel together.
2. A synthetic session takes a *base* source (uniform among the sources), its head and a prefix
   of its blocks (uniform length, at least one), then blocks drawn uniformly, with replacement,
   from every source *of the same format* (the base included) until it has as many blocks as a
   source of that format drawn uniformly (its length distribution), at most ``max_blocks``.
3. In every appended block the identifiers are renamed by a suffix unique to the block
   (``~<index>``): the string values of the keys ``id``, ``uuid``, ``parentUuid``,
   ``logicalParentUuid``, ``leafUuid``, ``sourceToolAssistantUUID``, ``tool_use_id``, ``call_id`` and
   ``tool_call_id``. A call
   and its result in one block keep their pairing and no id is issued twice; a result whose call
   sat in another block stays an orphan, which the readers accept as they do in real files.
   The first record of an appended block that has a ``parentUuid`` gets the ``uuid`` of the
   last record written before it (Claude Code's chain stays in file order), and records with a
   ``sessionId`` take the base's.
4. Everything else is copied unchanged (re-serialized JSON): texts, usage, timestamps (the
   donors': a replay with ``--cache-ttl`` sees their gaps, sometimes negative).

The output is one ``<format>/synthetic_<n>.jsonl`` per session and a ``manifest.json`` naming,
for each, the base, the prefix length and the donor blocks (``path#block``). The same
``sources``, ``sessions``, ``seed`` and ``max_blocks`` give the same files.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from dp_compact.errors import DpCompactError
from dp_compact.io import session_files, write_atomic

__all__ = ["ID_KEYS", "Source", "cut_source", "resample"]

#: Keys whose string values are identifiers renamed in appended blocks.
ID_KEYS = frozenset({"id", "uuid", "parentUuid", "logicalParentUuid", "leafUuid", "sourceToolAssistantUUID", "tool_use_id", "call_id",
                     "tool_call_id"})


@dataclass(frozen=True)
class Source:
    """A real line-based session cut for recombination.

    Attributes
    ----------
    path, format : str
    head : tuple[bytes, ...]
        Source lines before the first call.
    blocks : tuple[tuple[bytes, ...], ...]
        Source lines of each call block, in file order (module docstring).
    session_id : str or None
        The first ``sessionId`` of the file (Claude Code), else None.
    """

    path: str
    format: str
    head: tuple[bytes, ...]
    blocks: tuple[tuple[bytes, ...], ...]
    session_id: str | None


def cut_source(path: Path | str) -> Source | None:
    """Cut one session file into head and call blocks; None when it is not a line-based session
    with at least one call (a JSON document, an unreadable file, no assistant message)."""
    from dp_compact.sessions import read_session

    path = Path(path)
    if path.suffix != ".jsonl":
        return None
    try:
        session = read_session(path)
    except DpCompactError:
        return None
    messages = session.messages
    starts = sorted({m.line for i, m in enumerate(messages)
                     if m.role == "assistant" and m.line > 0 and (i == 0 or messages[i - 1].role != "assistant")})
    if not starts:
        return None
    lines = path.read_bytes().splitlines()
    bounds = [*(s - 1 for s in starts), len(lines)]
    blocks = tuple(tuple(lines[a:b]) for a, b in itertools.pairwise(bounds) if b > a)
    session_id = None
    for line in lines:
        if b'"sessionId"' in line:
            value = orjson.loads(line)
            session_id = value.get("sessionId") if isinstance(value, dict) else None
            break
    return Source(str(path), session.format, tuple(lines[:bounds[0]]), blocks, session_id)


def _renamed(value: Any, suffix: str) -> Any:
    """``value`` with every string under an :data:`ID_KEYS` key suffixed."""
    if isinstance(value, dict):
        return {k: (v + suffix if k in ID_KEYS and isinstance(v, str) else _renamed(v, suffix)) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, suffix) for v in value]
    return value


def _append(out: list[bytes], block: tuple[bytes, ...], index: int, state: dict[str, Any]) -> None:
    """Append a donor block to ``out`` with its ids renamed and Claude Code's chain relinked."""
    first = True
    for line in block:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            out.append(line)
            continue
        if isinstance(record, dict):
            record = _renamed(record, f"~{index}")
            if first and "parentUuid" in record and state.get("uuid"):
                record["parentUuid"] = state["uuid"]
            if "sessionId" in record and state.get("session_id"):
                record["sessionId"] = state["session_id"]
            if isinstance(record.get("uuid"), str):
                state["uuid"] = record["uuid"]
            first = False
        out.append(orjson.dumps(record))


def _last_uuid(lines: Iterable[bytes]) -> str | None:
    """The ``uuid`` of the last record that has one."""
    found = None
    for line in lines:
        if b'"uuid"' in line:
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(record, dict) and isinstance(record.get("uuid"), str):
                found = record["uuid"]
    return found


def resample(
    sources: Path | str | Iterable[Path | str], out_dir: Path | str, *, sessions: int, seed: int = 0,
    max_blocks: int | None = None,
) -> list[Path]:
    """Write ``sessions`` synthetic sessions recombined from the real ones (module docstring).

    Parameters
    ----------
    sources : Path, str or iterable of them
        Session files or folders (:func:`dp_compact.io.session_files`); JSON documents are ignored.
    out_dir : Path or str
        Folder written (``<format>/synthetic_<n>.jsonl`` and ``manifest.json``, each atomically).
    sessions : int
        Synthetic sessions to write (≥ 1).
    seed : int
        Seed of every draw.
    max_blocks : int, optional
        At most this many call blocks per synthetic session (shorter sessions, faster fleets).

    Returns
    -------
    list[Path]
        The session files written, in order.

    Raises
    ------
    ValueError
        ``sessions < 1``, or no line-based session with a call among ``sources``.
    """
    if sessions < 1:
        raise ValueError("sessions must be at least 1")
    cut = [s for s in (cut_source(p) for p in session_files(sources)) if s is not None]
    if not cut:
        raise ValueError("no line-based (JSONL) session with an LLM call among the sources")
    by_format: dict[str, list[int]] = {}
    for index, source in enumerate(cut):
        by_format.setdefault(source.format, []).append(index)
    rng = np.random.default_rng(seed)
    out_dir = Path(out_dir)
    written: list[Path] = []
    manifest: list[dict[str, Any]] = []
    for n in range(sessions):
        base = cut[int(rng.integers(len(cut)))]
        family = by_format[base.format]
        target = len(cut[family[int(rng.integers(len(family)))]].blocks)
        if max_blocks is not None:
            target = min(target, max_blocks)
        keep = int(rng.integers(1, min(len(base.blocks), max(target, 1)) + 1))
        lines = [*base.head, *(line for block in base.blocks[:keep] for line in block)]
        state: dict[str, Any] = {"uuid": _last_uuid(lines), "session_id": base.session_id}
        donors = []
        for index in range(keep, max(target, keep)):
            donor = cut[family[int(rng.integers(len(family)))]]
            b = int(rng.integers(len(donor.blocks)))
            _append(lines, donor.blocks[b], index, state)
            donors.append(f"{donor.path}#{b}")
        path = out_dir / base.format / f"synthetic_{n:05d}.jsonl"
        write_atomic(path, b"\n".join(lines) + b"\n")
        written.append(path)
        manifest.append({"path": str(path.relative_to(out_dir)), "base": base.path, "prefix_blocks": keep, "donors": donors})
    write_atomic(out_dir / "manifest.json", json.dumps({"seed": seed, "max_blocks": max_blocks, "sessions": manifest}, indent=1).encode())
    return written
