"""The ``dp-compact`` command line: parse, call the library, render (Typer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from dp_compact.errors import DpCompactError

app = typer.Typer(
    name="dp-compact",
    help="Decide whether compacting an LLM agent conversation pays now, and how many recent messages to keep.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

#: Exit status of `plan --exit-code` when compaction is advised.
EXIT_COMPACT = 10
#: Exit status on bad input or settings.
EXIT_ERROR = 2

_TERM_LABELS = (
    ("savings", "① savings (cache reads saved)", "+"),
    ("cache_miss", "② cache miss after rewrite", "-"),
    ("compact_cost", "③ summary request", "-"),
    ("info_loss", "④ information loss", "-"),
    ("quality", "⑤ long-context quality", "+"),
)


def _fail(exc: Exception) -> typer.Exit:
    """Print one error line and return the exit to raise."""
    typer.echo(f"dp-compact: {exc}", err=True)
    return typer.Exit(EXIT_ERROR)


def render_plan(data: dict) -> str:
    """A plan (``Plan.to_dict()``) as a readable table; formatting only."""
    prices, session = data["prices"], data["session"]
    window = data["max_context_tokens"]
    lines = [
        f"session   {session['path']}  ({session['format']}, {data['N']} messages, {data['T']:,} tokens)",
        f"decision  {data['decision'].upper()}  [rule: {data['rule']}]",
        f"          {data['explanation']}",
    ]
    if data["decision"] == "compact":
        lines.append(
            f"keep      k = {data['k']} of {data['N']} messages (cut at message {data['cut']}): "
            f"kept {data['K']:,} tokens, dropped {data['H']:,} tokens"
        )
    elif data["best_candidate"]:
        best = data["best_candidate"]
        lines.append(f"keep      all {data['N']} messages (best candidate: k = {best['k']}, NetBenefit ${best['net']:+.4f})")
    lines.append(
        f"context   {data['context_tokens']:,} / {window:,} tokens ({100 * data['context_tokens'] / window:.1f} %,"
        f" from {data['context_source']}); forced above {data['force_threshold_tokens']:,.0f}"
    )
    where = "chosen cut" if data["decision"] == "compact" else "best candidate"
    lines.append(f"terms at the {where} ($):")
    for key, label, sign in _TERM_LABELS:
        value = data["terms"][key]
        lines.append(f"  {label:<32} {sign}{value:.6f}")
    lines.append(f"  {'NetBenefit':<32} {data['terms']['net']:+.6f}")
    lines.append(
        f"estimates E = {data['E']:g} turns, L = {data['L']:g} calls/turn, R = {data['R']:g} calls,"
        f" avg = {data['avg']:,.0f} tokens, c = {data['c']}, t = {data['t']}, min_keep = {data['min_keep']},"
        f" feasible cuts = {data['n_feasible_cuts']}"
    )
    write = f", write {prices['p_cache_write']:.2f}" if prices["p_cache_write"] is not None else ""
    lines.append(
        f"profile   {prices['name']}: input {prices['p_input']:.2f} / cache {prices['p_cache']:.2f} /"
        f" output {prices['p_out']:.2f} $/MTok{write}; window {window:,}; model {data['settings']['model']},"
        f" tokenizer {data['settings']['tokenizer']}"
    )
    return "\n".join(lines)


@app.command()
def plan(
    session: Annotated[Path, typer.Argument(help="Session file (any supported format; JSONL or one JSON document).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as one JSON object.")] = False,
    exit_code: Annotated[bool, typer.Option("--exit-code", help=f"Exit {EXIT_COMPACT} when compaction is advised.")] = False,
    stats: Annotated[Optional[Path], typer.Option("--stats", help="Seed agent stats.json.")] = None,
    lenient: Annotated[bool, typer.Option("--lenient", help="Skip malformed lines (with a warning count).")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not use the persistent token cache.")] = False,
    provider: Annotated[Optional[str], typer.Option("--provider", help="Pricing profile or model name.")] = None,
    e_fixed: Annotated[Optional[float], typer.Option("--e-fixed", help="Fixed E, expected remaining user turns.")] = None,
    baseline_e: Annotated[Optional[int], typer.Option("--baseline-e", help="Baseline user turns.")] = None,
    calls_per_turn: Annotated[Optional[float], typer.Option("--l", help="LLM calls per user turn (0 = measure).")] = None,
    min_keep_ratio: Annotated[Optional[float], typer.Option("--min-keep-ratio", help="Least share of messages kept.")] = None,
    max_context_tokens: Annotated[Optional[int], typer.Option("--max-context-tokens", help="Context window M, tokens.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Cost model: recall or seed.")] = None,
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="tiktoken or bytes4.")] = None,
) -> None:
    """Decide whether to compact SESSION now and how many recent messages to keep."""
    from dp_compact.api import plan_file
    from dp_compact.settings import load_settings

    try:
        settings = load_settings(
            provider=provider, e_fixed=e_fixed, baseline_e=baseline_e, l=calls_per_turn, min_keep_ratio=min_keep_ratio,
            max_context_tokens=max_context_tokens, model=model, tokenizer=tokenizer,
        )
        result = plan_file(session, settings, lenient=lenient, stats=stats, use_cache=not no_cache)
    except DpCompactError as exc:
        raise _fail(exc) from None
    data = result.to_dict()
    skipped = data["session"]["skipped_lines"]
    if skipped:
        typer.echo(f"dp-compact: warning: skipped {skipped} malformed line(s) in {session}", err=True)
    typer.echo(json.dumps(data, ensure_ascii=False) if as_json else render_plan(data))
    if exit_code and result.decision == "compact":
        raise typer.Exit(EXIT_COMPACT)


@app.command()
def profiles(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """List the built-in pricing profiles ($/MTok and context window)."""
    from dataclasses import asdict

    from dp_compact.pricing import list_profiles

    rows = list_profiles()
    if as_json:
        typer.echo(json.dumps([asdict(p) for p in rows]))
        return
    typer.echo(f"{'profile':<20} {'input':>7} {'cache':>7} {'write':>7} {'output':>7} {'window':>10}  ($/MTok, tokens)")
    for p in rows:
        write = f"{p.p_cache_write:7.3f}" if p.p_cache_write is not None else f"{'-':>7}"
        typer.echo(f"{p.name:<20} {p.p_input:7.3f} {p.p_cache:7.3f} {write} {p.p_out:7.3f} {p.max_context_tokens:>10,}")
    typer.echo("Any other model name is looked up in genai-prices' bundled price data (offline).")


@app.command()
def restore(
    ref: Annotated[str, typer.Argument(help="Archive reference archive://<session>/<id>.")],
    out: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the JSONL here (atomically) instead of stdout.")] = None,
) -> None:
    """Print (or write to OUT) the original messages archived under REF, as JSONL."""
    from dp_compact.pipeline.archive import ArchiveStore, write_jsonl_atomic

    try:
        messages = ArchiveStore().restore(ref)
        if out is not None:
            write_jsonl_atomic(out, messages)
    except DpCompactError as exc:
        raise _fail(exc) from None
    if out is None:
        for message in messages:
            typer.echo(json.dumps(message, ensure_ascii=False))
    else:
        typer.echo(f"restored {len(messages)} messages from {ref} to {out}", err=True)


def render_hits(hits: list[dict]) -> str:
    """Archive search hits (``ArchiveHit.to_dict()``) as readable lines; formatting only."""
    if not hits:
        return "no matching archive"
    lines = []
    for hit in hits:
        lines.append(f"{hit['ref']}  {hit['created']}  {hit['message_count']} messages  score {hit['score']:.3g}")
        lines.append(f"  {' '.join(hit['summary'].split()) or '(no summary)'}")
        if hit["snippet"]:
            lines.append(f"  match: {' '.join(hit['snippet'].split())}")
    return "\n".join(lines)


@app.command()
def recall(
    query: Annotated[str, typer.Argument(help="Words, file paths or identifiers (all must match; word* for a prefix).")],
    session: Annotated[Optional[str], typer.Option("--session", help="Only archives of this session.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="Most archives listed.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print the hits as a JSON list.")] = False,
) -> None:
    """List archived heads matching QUERY, best first, with their summaries."""
    from dp_compact.pipeline.archive import ArchiveStore

    try:
        hits = [hit.to_dict() for hit in ArchiveStore().search(query, session=session, limit=limit)]
    except DpCompactError as exc:
        raise _fail(exc) from None
    typer.echo(json.dumps(hits, ensure_ascii=False) if as_json else render_hits(hits))


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
