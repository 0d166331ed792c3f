"""Benchmark of `dp-compact plan`: reading + tokenizing apart from planning, against the per-cut reference.

Usage: ``python bench/bench_plan.py [--repeat 7] [--sessions ../shared/sessions]``

Prints one table: session, messages, feasible cuts, read+tokenize ms (cold, no cache), plan ms
(after tokens are known), per-cut reference ms (the plain loop of ``dp_compact.core._reference``,
estimated from a sample of cuts where the full loop would take too long) and the speedup; then
end-to-end command timings on the largest real transcript, cold and warm token cache, and the
number of messages re-tokenized after appending lines to it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from timing import median_ms, machine_line, parse_args

from dp_compact.core import _reference
from dp_compact.measure import tokens
from dp_compact.api import resolve_prices
from dp_compact.core.cuts import feasible_cut_mask, message_arrays
from dp_compact.core.planner import plan
from dp_compact.sessions import read_session
from dp_compact.conversation import Message, Session, ToolCall, ToolResult
from dp_compact.settings import load_settings

REFERENCE_SAMPLE = 200


def _reference_ms(session: Session, message_tokens: np.ndarray, settings, prices, cuts: np.ndarray) -> tuple[float, bool]:
    """Time of the per-cut reference over all cuts (extrapolated from a sample when large)."""
    est = plan(session, message_tokens, settings, prices).estimates
    sample = cuts if cuts.size <= REFERENCE_SAMPLE else np.random.default_rng(0).choice(cuts, REFERENCE_SAMPLE, replace=False)
    ages = list(message_arrays(session.messages).round_index[-1] - message_arrays(session.messages).round_index)
    token_list = message_tokens.tolist()
    start = time.perf_counter_ns()
    for cut in sample:
        _reference.is_feasible_cut(session.messages, int(cut))
        _reference.net_benefit_at(
            token_list, int(cut), prices=prices, v=settings.v, s=settings.s, m=prices.max_context_tokens,
            remaining_calls=est.remaining_calls, avg=est.avg_tokens, c=est.compactions, beta=settings.beta,
            r=settings.r, qp=settings.quality_penalty, recall=(ages, settings.recall_q0, settings.recall_tau),
        )
    elapsed = (time.perf_counter_ns() - start) / 1e6
    return elapsed * max(cuts.size, 1) / max(sample.size, 1), sample.size < cuts.size


def _synthetic(n: int) -> tuple[Session, np.ndarray]:
    """A session of n messages: user turns, tool loops with parallel calls; random token sizes."""
    rng = np.random.default_rng(0)
    messages: list[Message] = []
    call = 0
    while len(messages) < n:
        messages.append(Message("user", "next task", raw={"role": "user", "content": "next task"}))
        for _ in range(int(rng.integers(1, 12))):
            calls = tuple(ToolCall(f"c{call + i}", "bash") for i in range(int(rng.integers(1, 3))))
            call += len(calls)
            messages.append(Message("assistant", tool_calls=calls))
            messages.append(Message("tool", tool_results=tuple(ToolResult(c.id, "out") for c in calls)))
    messages = messages[:n]
    session = Session("<synthetic>", "anthropic", tuple(messages), user_turns=sum(m.role == "user" for m in messages),
                      llm_calls=sum(m.role == "assistant" for m in messages))
    return session, rng.integers(20, 4000, size=n).astype(np.int64)


def _row(name: str, session: Session, message_tokens: np.ndarray, read_ms: float | None, repeat: int) -> str:
    settings = load_settings(planner="lookahead")
    myopic = load_settings(planner="myopic")
    prices = resolve_prices(settings, session.model)
    arrays = message_arrays(session.messages)
    cuts = np.flatnonzero(feasible_cut_mask(arrays))
    ahead_ms = median_ms(lambda: plan(session, message_tokens, settings, prices, arrays=arrays), repeat)
    plan_ms = median_ms(lambda: plan(session, message_tokens, myopic, prices, arrays=arrays), repeat)
    ref_ms, estimated = _reference_ms(session, message_tokens, myopic, prices, cuts)
    read = f"{read_ms:10.1f}" if read_ms is not None else f"{'-':>10}"
    mark = "~" if estimated else " "
    return (f"{name:<38} {len(session.messages):>8} {cuts.size:>8} {read} {ahead_ms:9.2f} {plan_ms:9.2f} "
            f"{mark}{ref_ms:12.1f} {ref_ms / plan_ms:9.0f}x")


def _read_and_tokenize(path: Path) -> tuple[Session, np.ndarray]:
    """What the shell does before planning: read, tokenize (no cache), index the structure."""
    session = read_session(path)
    message_arrays(session.messages)
    return session, tokens.count_message_tokens(session.messages)


def _new_lines(path: Path, count: int) -> list[bytes]:
    """The last ``count`` lines of a JSONL file made new: ids changed, text extended (distinct content)."""
    import json

    lines = []
    for number, raw in enumerate(path.read_bytes().splitlines()[-count:]):
        record = json.loads(raw)
        text = json.dumps(record, ensure_ascii=False)
        for key in ("uuid", "id"):
            if isinstance(record.get(key), str):
                text = text.replace(record[key], f"{record[key]}-appended-{number}")
        text = text.replace('"text": "', f'"text": "appended note {number}: ')
        lines.append(text.encode() + b"\n")
    return lines


def _end_to_end(largest: Path, repeat: int) -> list[str]:
    exe = Path(sys.executable).parent / "dp-compact"
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "XDG_CACHE_HOME": tmp}
        command = [str(exe), "plan", str(largest), "--json"]
        cold = median_ms(lambda: subprocess.run([*command, "--no-cache"], capture_output=True, env=env, check=True), repeat)
        subprocess.run(command, capture_output=True, env=env, check=True)
        warm = median_ms(lambda: subprocess.run(command, capture_output=True, env=env, check=True), repeat)
        lines.append(f"end to end `dp-compact plan` on {largest.name} ({largest.stat().st_size / 1e6:.1f} MB): "
                     f"{cold:.0f} ms without cache, {warm:.0f} ms with a warm token cache")
        grown = Path(tmp) / largest.name
        shutil.copy(largest, grown)
        cache = tokens.TokenCache(Path(tmp) / "bench.sqlite")
        tokens.count_message_tokens(read_session(grown).messages, cache=cache)
        with grown.open("ab") as fh:
            fh.writelines(_new_lines(largest, 6))
        counted = []
        original = tokens.count_text_tokens
        tokens.count_text_tokens = lambda texts: counted.append(len(texts)) or original(texts)  # type: ignore[assignment]
        try:
            grown_session = read_session(grown)
            tokens.count_message_tokens(grown_session.messages, cache=cache)
        finally:
            tokens.count_text_tokens = original  # type: ignore[assignment]
            cache.close()
        lines.append(f"after appending 6 lines: {sum(counted)} of {len(grown_session.messages)} messages re-tokenized")
    return lines


def main() -> None:
    args = parse_args(__doc__, repeat=7)
    print(machine_line())
    print(f"{'session':<38} {'messages':>8} {'cuts':>8} {'read_ms':>10} {'ahead_ms':>9} {'plan_ms':>9} {'per_cut_ref_ms':>13} {'speedup':>10}")
    files = sorted(p for p in args.sessions.rglob("*") if p.suffix in {".json", ".jsonl", ".traj"} and p.name != "manifest.json") if args.sessions.exists() else []
    for path in files:
        try:
            read_ms = median_ms(lambda p=path: _read_and_tokenize(p), max(1, args.repeat // 3))
            session, message_tokens = _read_and_tokenize(path)
        except Exception as exc:  # noqa: BLE001 - a benchmark row, not library code
            print(f"{path.name:<38} skipped: {type(exc).__name__}")
            continue
        print(_row(path.name[:38], session, message_tokens, read_ms, args.repeat))
    for n in (10**2, 10**3, 10**4, 10**5):
        session, message_tokens = _synthetic(n)
        print(_row(f"synthetic {n:,}", session, message_tokens, None, args.repeat))
    print("~ = per-cut reference extrapolated from a sample of 200 cuts")
    if files:
        for line in _end_to_end(max(files, key=lambda p: p.stat().st_size), max(3, args.repeat // 2)):
            print(line)


if __name__ == "__main__":
    main()
