"""Benchmark of `dp-compact replay`: the largest real session under every policy, and the whole folder.

Usage: ``python bench/bench_replay.py [--repeat 5] [--sessions ../shared/sessions] [--evidence] [--detectors]``
(``--evidence``: section 5 alone, no timings; ``--detectors``: section 6 alone).

Prints, with the default settings and every policy (the defaults and ``threshold:0.8:0.3``):

1. the largest real session (bytes): reading, tokenizing and building the recording (no token
   cache), then the replay time per policy (median of ``--repeat`` runs, tokens known) and its $;
   the oracle's time includes solving its schedule;
2. the whole folder: :func:`replay_directory` wall time in 2 worker processes and in one
   process, without and with a warm token cache (a temporary one), and the command end to end
   (medians of ``max(3, repeat // 2)`` runs);
3. the report of the folder (the table ``dp-compact replay DIR`` prints), under ``--loss refetch``
   (the default) and ``--loss none``, with each policy's ratio to the oracle;
4. recorded cost vs the replay of ``never``, for the sessions with usage records: how close the
   replay model comes to the bill the provider sent (same prices), with the V charged (each
   session's own prefix, measured from its usage records) and the part of it the first call found
   cached (``warm``, from its usage record);
5. the evidence of DESIGN §8, per shared session with usage records: the bill of its
   usage records, the ``recorded`` replay and their ratio (also with every cached token read,
   ``hits 1``, to show what the measured cache-hit share does), the TTL applied, and the oracle,
   ``dp`` and the presets under the new accounting (dated prices and tiers per request, the
   session's write mix, the TTL by default, no free overflow); then the same totals with every
   cache write a 5-minute entry and with every one a 1-hour entry (``Prices.with_write_share``);
6. the two loss detectors (DESIGN §9, ``--detector both``): the time to find the uses of the
   largest session under each (:func:`dp_compact.measure.reuse.find_uses`), the folder replayed
   under both (wall time, 2 workers) and the ranking of the policies under each, side by side;
   then the receipts of ``dp`` on the largest session (time, and their sums).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


from timing import runs_ms, machine_line, parse_args

from dp_compact.errors import DpCompactError
from dp_compact.replay.meter import replay
from dp_compact.replay.policies import DEFAULT_POLICIES, parse_policy
from dp_compact.cli.render import render_directory
from dp_compact.fleet.jobs import replay_directory
from dp_compact.prepare import prepare
from dp_compact.replay.shell import prepared_recording, replay_file, replay_params, session_files
from dp_compact.sessions import read_session
from dp_compact.settings import load_settings

POLICIES = (*DEFAULT_POLICIES, "threshold:0.8:0.3")


def _once_ms(fn: Callable[[], object]) -> tuple[float, object]:
    """Wall time of one run (no warm-up), ms, and its result."""
    start = time.perf_counter_ns()
    result = fn()
    return (time.perf_counter_ns() - start) / 1e6, result


def largest_session(path: Path, repeat: int) -> list[str]:
    """Reading, tokenizing, and each policy's replay time on one session."""
    settings = load_settings()
    read_ms, session = runs_ms(lambda: read_session(path), repeat)
    def load() -> tuple[object, tuple[object, str]]:  # preparation (tokens, V, placement) and the recording
        prepared = prepare(session, settings, use_cache=False, history=True)
        return prepared, prepared_recording(prepared)

    tokens_ms, (prepared, (recording, _)) = runs_ms(load, max(1, repeat // 2))
    params, _ = replay_params(prepared)
    lines = [
        f"largest session {path.name} ({path.stat().st_size / 1e6:.1f} MB): {len(recording.messages)} messages, "
        f"{recording.n_calls} calls; read {read_ms:.0f} ms, tokenize + recording {tokens_ms:.0f} ms (no token cache)",
        f"{'policy':<20} {'replay_ms':>10} {'ms/call':>8} {'total $':>10} {'compactions':>11}",
    ]
    for spec in POLICIES:
        policy = parse_policy(spec, settings)
        ms, result = runs_ms(lambda p=policy: replay(recording, p, params), repeat)
        lines.append(f"{spec:<20} {ms:10.1f} {ms / max(recording.n_calls, 1):8.3f} {result.total_usd:10.4f} {result.compactions:>11}")
    return lines


def whole_folder(folder: Path, repeat: int) -> tuple[list[str], object]:
    """Directory replay timings (2 processes / 1 process, cold / warm token cache) and the command's; medians."""
    settings = load_settings()
    lines = [f"whole folder {folder} ({len(session_files(folder))} files), every policy, median of {repeat} runs:"]
    report = None
    for workers in (2, 1):
        cold = statistics.median(
            _once_ms(lambda w=workers: replay_directory(folder, settings, POLICIES, workers=w, use_cache=False))[0] for _ in range(repeat)
        )
        warm, report = runs_ms(lambda w=workers: replay_directory(folder, settings, POLICIES, workers=w, use_cache=True), repeat)
        lines.append(f"  replay_directory, {workers} process(es): {cold / 1000:.2f} s without token cache, {warm / 1000:.2f} s warm")
    command = [str(Path(sys.executable).parent / "dp-compact"), "replay", str(folder), *(f"--policy={p}" for p in POLICIES)]
    cold = statistics.median(_once_ms(lambda: subprocess.run([*command, "--no-cache"], capture_output=True, check=True))[0] for _ in range(repeat))
    warm, _ = runs_ms(lambda: subprocess.run(command, capture_output=True, check=True), repeat)
    lines.append(f"  `dp-compact replay DIR` end to end (2 processes): {cold / 1000:.2f} s without token cache, {warm / 1000:.2f} s warm")
    return lines, report


def recorded_vs_never(folder: Path) -> list[str]:
    """The provider's bill from usage records vs the replay of ``never``, same prices, $."""
    settings = load_settings()
    lines = [f"{'session with usage':<36} {'recorded $':>10} {'never $':>9} {'ratio':>6}"
             f" {'recorded mean prompt':>21} {'replayed':>9} {'V':>7} {'warm':>7}"]
    for path in session_files(folder):
        try:
            session = read_session(path)
        except DpCompactError:
            continue
        if not session.usage:
            continue
        report = replay_file(path, settings, ["never"])
        never = report.results[0]
        bill = report.bill.bill_usd if report.bill is not None else float("nan")  # each record at its day's prices and tier
        mean = sum(u.prompt_tokens for u in session.usage) / len(session.usage)
        lines.append(f"{path.name[:36]:<36} {bill:10.3f} {never.total_usd:9.3f} {never.total_usd / bill:6.2f}"
                     f" {mean:21,.0f} {never.mean_context_tokens:9,.0f} {report.params.v_tokens:7,} {report.params.warm_tokens:7,}")
    return lines


EVIDENCE_POLICIES = ("recorded", "oracle", "dp", "never", "claude-code", "codex", "openhands", "langchain")


def evidence(folder: Path) -> list[str]:
    """Section 5: the bill check and every policy's total per session with usage records, at the
    session's recorded write mix, then at all 5-minute and all 1-hour writes, $."""
    from dataclasses import replace

    from dp_compact.replay.recorded import recorded_costs

    settings = load_settings()
    names = EVIDENCE_POLICIES[1:]
    head = f"{'session':<34}" + "".join(f"{n:>12}" for n in names)
    lines = ["bill check at the session's recorded write mix ($; ratio = recorded / bill; hits: measured cache-hit share):",
             f"{'session':<34} {'bill $':>9} {'recorded $':>10} {'ratio':>6} {'hits 1':>7} {'hits':>6} {'1h share':>8} {'TTL s':>6}"]
    tables: dict[str, list[str]] = {"mix": [], "5m": [], "1h": []}
    for path in session_files(folder):
        try:
            session = read_session(path, raw_json=True)
        except DpCompactError:
            continue
        if not session.usage:
            continue
        prepared = prepare(session, settings, history=True)
        recording, _ = prepared_recording(prepared)
        for key, share in (("mix", None), ("5m", 0.0), ("1h", 1.0)):
            report = replay_file(path, settings, EVIDENCE_POLICIES, write_share=share)
            totals = {r.policy: r.total_usd for r in report.results}
            tables[key].append(f"{path.name[:34]:<34}" + "".join(f"{totals[n]:>12.4f}" for n in names)
                               + f"{totals['recorded']:>12.4f}")
            if key == "mix":
                bill, params = report.bill, report.params
                full = recorded_costs(recording, replace(params, cache_hit_share=1.0)).result.total_usd
                ttl = f"{params.cache_ttl_s:g}" if params.cache_ttl_s is not None else "none"
                lines.append(f"{path.name[:34]:<34} {bill.bill_usd:9.4f} {bill.recorded_usd:10.4f} {bill.ratio:6.3f}"
                             f" {full / bill.bill_usd:7.3f} {params.cache_hit_share:6.3f} {params.prices.write_1h_share:8.2f} {ttl:>6}")
    for key, title in (("mix", "at the recorded write mix"), ("5m", "with every cache write a 5-minute entry"),
                       ("1h", "with every cache write a 1-hour entry")):
        lines += ["", f"totals $ {title} (last column: recorded):", head + f"{'recorded':>12}", *tables[key]]
    return lines


def detectors(folder: Path, repeat: int) -> list[str]:
    """Section 6 of the module docstring."""
    from dp_compact.cli.render import render_detectors, render_receipts
    from dp_compact.measure.reuse import find_uses

    files = [p for p in session_files(folder) if not p.name.startswith("cline_ui_messages")]
    largest = max(files, key=lambda p: p.stat().st_size)
    messages = read_session(largest, raw_json=True).messages
    lines = [f"uses of earlier messages in {largest.name} ({len(messages)} messages):"]
    for name in ("verbatim", "strict"):
        found = find_uses(messages, detector=name)
        median_ms, _ = runs_ms(lambda: find_uses(messages, detector=name), repeat)  # noqa: B023 - called here
        lines.append(f"  {name:<9} {found.at.size:>6} uses  {median_ms:>8.1f} ms")
    elapsed, report = _once_ms(lambda: replay_directory(folder, load_settings(), DEFAULT_POLICIES, workers=2, detector="both"))
    lines += ["", f"folder under both detectors: {elapsed / 1000:.1f} s (2 workers)", render_detectors(report.totals_by_detector())]
    elapsed, one = _once_ms(lambda: replay_file(largest, load_settings(), ("dp",), with_receipts=True))
    receipts = one.to_dict()["receipts"]  # type: ignore[attr-defined]
    lines += ["", f"receipts of dp on {largest.name}: {elapsed:.0f} ms with the replay", render_receipts(receipts).splitlines()[0]]
    return lines


def main() -> None:
    only_evidence = "--evidence" in sys.argv
    if only_evidence:
        sys.argv.remove("--evidence")
    only_detectors = "--detectors" in sys.argv
    if only_detectors:
        sys.argv.remove("--detectors")
    args = parse_args(__doc__, repeat=5)
    if only_evidence:
        print(machine_line())
        print("\n".join(evidence(args.sessions)))
        return
    if only_detectors:
        print(machine_line())
        print("\n".join(detectors(args.sessions, args.repeat)))
        return
    if not args.sessions.exists():
        sys.exit(f"{args.sessions} is absent: the benchmark replays the shared real sessions")
    print(machine_line())
    with tempfile.TemporaryDirectory() as cache_home:
        os.environ["XDG_CACHE_HOME"] = cache_home  # a fresh token cache, inherited by the worker processes
        files = [p for p in session_files(args.sessions) if not p.name.startswith("cline_ui_messages")]
        for line in largest_session(max(files, key=lambda p: p.stat().st_size), args.repeat):
            print(line)
        print()
        lines, report = whole_folder(args.sessions, max(3, args.repeat // 2))
        print("\n".join(lines))
        print()
        print(render_directory(report.to_dict()))  # type: ignore[attr-defined]
        print()
        print("--loss none:")
        print(render_directory(replay_directory(args.sessions, load_settings(), POLICIES, workers=2, loss="none").to_dict()))
        print()
        print("\n".join(recorded_vs_never(args.sessions)))
        print()
        print("\n".join(evidence(args.sessions)))
        print()
        print("\n".join(detectors(args.sessions, args.repeat)))


if __name__ == "__main__":
    main()
