"""The ``dp-compact`` command line: parse, call the library, render (Typer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from dp_compact.errors import DpCompactError
from dp_compact.windows import window_note

if TYPE_CHECKING:
    from dp_compact.settings import Settings

app = typer.Typer(
    name="dp-compact",
    help="Decide whether compacting an LLM agent conversation pays now, and how many recent messages to keep.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

def _version(value: bool) -> None:
    """Print the installed version and exit (``--version``)."""
    if value:
        from importlib.metadata import version

        typer.echo(f"dp-compact {version('dp-compact')}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")] = False,
) -> None:
    """Decide whether compacting an LLM agent conversation pays now, and how many recent messages to keep."""


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


def _settings(*, providers: tuple[str, ...] | None = None, **flags: object) -> Settings:
    """Settings from flags and ``DP_*`` (:func:`~dp_compact.settings.load_settings`), with the
    provider resolved now, so that an unknown name fails before the session is read: each of
    ``providers`` when given (``curve --provider``, repeatable), else the ``--provider`` /
    ``DP_PROVIDER`` / ``.env`` one when there is one.

    Raises
    ------
    SettingsError
        A setting is invalid.
    UnknownProfileError
        A provider name is unknown; the message points at ``dp-compact profiles`` and names
        ``DP_PROVIDER`` when the name came from the environment or ``.env``.
    """
    from dp_compact.errors import UnknownProfileError
    from dp_compact.pricing import get_prices
    from dp_compact.settings import load_settings

    settings = load_settings(**flags)
    _note_variables()
    from_flag = providers is not None or flags.get("provider") is not None
    names = providers if providers is not None else ((settings.provider,) if settings.explicit_provider() else ())
    for name in dict.fromkeys(names):
        try:
            get_prices(name)
        except UnknownProfileError as exc:
            if from_flag:
                raise
            raise UnknownProfileError(name, exc.close_matches, variable="DP_PROVIDER") from None
    return settings


def _note_variables() -> None:
    """Print on stderr the unknown ``DP_*`` names and the settings taken from ``.env``, once per run."""
    import os

    from dotenv import dotenv_values

    from dp_compact.settings import variable_notes

    env_file = dotenv_values(".env") if os.path.isfile(".env") else {}
    for note in variable_notes(os.environ, env_file):
        typer.echo(f"dp-compact: note: {note}", err=True)


def _money(value: float) -> str:
    """A price in $/MTok without losing digits (0.125, not 0.12)."""
    return f"{value:.2f}" if round(value, 2) == value else f"{value:g}"


def render_plan(data: dict) -> str:
    """A plan (``Plan.to_dict()``) as a readable table; formatting only."""
    prices, session = data["prices"], data["session"]
    window = data["max_context_tokens"]
    noun = "message" if data["N"] == 1 else "messages"
    lines = [
        f"session   {session['path']}  ({session['format']}, {data['N']} {noun}, {data['T']:,} tokens)",
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
        lines.append(f"keep      all {data['N']} {noun} (best candidate: k = {best['k']}, NetBenefit ${best['net']:+.4f})")
    lines.append(
        f"context   {data['context_tokens']:,} / {window:,} tokens ({100 * data['context_tokens'] / window:.1f} %,"
        f" from {data['context_source']}); forced above {data['force_threshold_tokens']:,}"
    )
    if data.get("window_source"):
        lines.append(f"window    {window:,} tokens: {data['window_source']}")
    ahead = data.get("lookahead")
    if ahead:
        waits = ahead["next_compaction_calls"]
        when = "never within the horizon" if waits is None else f"in about {waits:.0f} call{'s' if waits != 1 else ''}"
        def usd(value: float | None) -> str:
            return "not allowed" if value is None else f"${value:.4f}"

        saves = "keeping is not allowed" if ahead["saves_usd"] is None else f"compacting now saves ${ahead['saves_usd']:+.4f}"
        lines.append(
            f"ahead     expected cost from now on: keep {usd(ahead['keep_usd'])}, compact at the best cut"
            f" {usd(ahead['compact_usd'])} ({saves}); if it waits, the best schedule compacts {when};"
            f" growth {ahead['growth_tokens']:,.0f} tokens/call, about {ahead['expected_calls']:.0f} calls to come,"
            f" S = {ahead['summary_tokens']:,.0f}"
        )
    if data["decision"] == "compact" or data["best_candidate"]:
        where = "chosen cut" if data["decision"] == "compact" else "best candidate"
        if ahead:
            where += ", the single-step model's terms for reference"
        lines.append(f"terms at the {where} ($):")
        for key, label, sign in _TERM_LABELS:
            lines.append(f"  {label:<32} {sign}{data['terms'][key]:.6f}")
        lines.append(f"  {'NetBenefit':<32} {data['terms']['net']:+.6f}")
    lines.append(
        f"estimates E = {data['E']:g} turns, L = {data['L']:.3g} calls/turn ({data['L_source']}), R = {data['R']:.4g} calls,"
        f" avg = {data['avg']:,.0f} tokens ({data['avg_source']}), c = {data['c']}, t = {data['t']},"
        f" min_keep = {data['min_keep']}, feasible cuts = {data['n_feasible_cuts']}"
    )
    write = f", write {_money(prices['p_cache_write'])}" if prices["p_cache_write"] is not None else ""
    lines.append(
        f"profile   {prices['name']}: input {_money(prices['p_input'])} / cache {_money(prices['p_cache'])} /"
        f" output {_money(prices['p_out'])} $/MTok{write}; window {window:,}; planner {data.get('planner', 'myopic')},"
        f" model {data['settings']['model']}, tokenizer {data['settings']['tokenizer']}"
    )
    shown = window_note(window, data["window_source"]) if data.get("window_source") else None
    lines.extend(f"note      {note}" for note in data["notes"] if note != shown)
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
    calls_per_turn: Annotated[
        Optional[float], typer.Option("--l", "--calls-per-turn", help="LLM calls per user turn (0 = measure).")
    ] = None,
    force_ratio: Annotated[Optional[float], typer.Option("--force-ratio", help="Forced-compaction share of the window.")] = None,
    prefix_tokens: Annotated[Optional[int], typer.Option("--v", "--prefix-tokens", help="Fixed prefix V, tokens.")] = None,
    summary_tokens: Annotated[Optional[int], typer.Option("--s", "--summary-tokens", help="Summary size S, tokens.")] = None,
    min_keep_ratio: Annotated[Optional[float], typer.Option("--min-keep-ratio", help="Least share of messages kept.")] = None,
    max_context_tokens: Annotated[Optional[int], typer.Option("--max-context-tokens", help="Context window M, tokens.")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Cost model: recall or seed.")] = None,
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="tiktoken or bytes4.")] = None,
    planner: Annotated[Optional[str], typer.Option("--planner", help="lookahead (default), myopic or seed.")] = None,
) -> None:
    """Decide whether to compact SESSION now and how many recent messages to keep."""
    from dp_compact.api import plan_file

    try:
        settings = _settings(
            provider=provider, e_fixed=e_fixed, baseline_e=baseline_e, l=calls_per_turn, min_keep_ratio=min_keep_ratio,
            max_context_tokens=max_context_tokens, model=model, tokenizer=tokenizer, force_ratio=force_ratio,
            v=prefix_tokens, s=summary_tokens, planner=planner,
        )
        result = plan_file(session, settings, lenient=lenient, stats=stats, use_cache=not no_cache)
    except DpCompactError as exc:
        raise _fail(exc) from None
    data = {**result.to_dict(), "window_source": result.prices.window_source}
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


ProviderOpt = Annotated[Optional[str], typer.Option("--provider", help="Pricing profile or model name.")]
EFixedOpt = Annotated[Optional[float], typer.Option("--e-fixed", help="Fixed E, expected remaining user turns.")]
BaselineEOpt = Annotated[Optional[int], typer.Option("--baseline-e", help="Baseline user turns.")]
CallsPerTurnOpt = Annotated[Optional[float], typer.Option("--l", "--calls-per-turn", help="LLM calls per user turn (0 = measure).")]
ForceRatioOpt = Annotated[Optional[float], typer.Option("--force-ratio", help="Forced-compaction share of the window.")]
PrefixTokensOpt = Annotated[Optional[int], typer.Option("--v", "--prefix-tokens", help="Fixed prefix V, tokens.")]
SummaryTokensOpt = Annotated[Optional[int], typer.Option("--s", "--summary-tokens", help="Summary size S, tokens (at most 2·S).")]
MinKeepRatioOpt = Annotated[Optional[float], typer.Option("--min-keep-ratio", help="Least share of messages kept.")]
MaxContextOpt = Annotated[Optional[int], typer.Option("--max-context-tokens", help="Context window M, tokens.")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", help="Cost model: recall or seed.")]
TokenizerOpt = Annotated[Optional[str], typer.Option("--tokenizer", help="tiktoken or bytes4.")]
PlannerOpt = Annotated[Optional[str], typer.Option("--planner", help="lookahead (default), myopic or seed.")]
ToOpt = Annotated[Optional[str], typer.Option("--to", help="Output API: anthropic or openai (default: the input's own).")]
LenientOpt = Annotated[bool, typer.Option("--lenient", help="Skip malformed lines (with a warning count).")]
#: Exit status of `validate` when the file breaks a rule of the API.
EXIT_INVALID = 1


def _default_archiver() -> object | None:
    """The archive store of DESIGN §5.6 when its module is installed, else None (head not archived)."""
    try:
        from dp_compact.pipeline.archive import ArchiveStore
    except ImportError:
        return None
    return ArchiveStore()


def render_compaction(data: dict) -> str:
    """A compaction result (``CompactionResult.to_dict()``) as readable lines; formatting only."""
    if data["decision"] != "compact":
        return f"nothing to do for {data['path']}: {data['explanation']} [rule: {data['rule']}]; nothing written"
    head = f"messages 0..{data['cut'] - 1}" if data["cut"] > 1 else "message 0"
    lines = [
        f"{'would compact' if data['dry_run'] else 'compacted'} {data['path']} ({data['format']} -> {data['api']}) [rule: {data['rule']}]",
        f"  {data['explanation']}",
        f"drop      {data['cut']} messages ({head}, {data['head_tokens']:,} tokens) into a {data['summary_tokens']:,}-token summary ({data['summarizer']})",
        f"keep      {data['k']} of {data['n_messages']} messages verbatim (from message {data['cut']}, {data['tail_tokens']:,} tokens)",
    ]
    lines += [f"anchor    #{a['index']} {a['role']}: {a['snippet']}" for a in data["anchors"]]
    if data["dry_run"]:
        lines.append(f"archive   would archive the {data['cut']} dropped messages verbatim (nothing written)")
        lines += ["summary   " + line for line in data["summary"].splitlines()]
    else:
        lines.append(f"archive   {data['archive_ref'] or 'not archived'}")
        lines.append(f"output    {data['output']}")
    return "\n".join(lines)


@app.command()
def compact(
    session: Annotated[Path, typer.Argument(help="Session file (any supported format).")],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Where the compacted conversation is written (JSONL).")] = None,
    keep: Annotated[Optional[int], typer.Option("--keep", min=1, help="Keep at least K recent messages (nearest feasible cut).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Compact even when the planner would not (its forced-rule cut).")] = False,
    to: ToOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be dropped, kept, anchored and archived; write nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")] = False,
    reset_breaker: Annotated[bool, typer.Option("--reset-breaker", help="Close this session's circuit breaker first.")] = False,
    summarizer: Annotated[str, typer.Option("--summarizer", help="extractive (offline, default) or llm.")] = "extractive",
    llm_api: Annotated[str, typer.Option("--llm-api", help="With --summarizer llm: anthropic or openai.")] = "anthropic",
    llm_model: Annotated[Optional[str], typer.Option("--llm-model", help="With --summarizer llm: the model to ask.")] = None,
    llm_base_url: Annotated[Optional[str], typer.Option("--llm-base-url", help="With --summarizer llm: API endpoint.")] = None,
    llm_context_window: Annotated[Optional[int], typer.Option(
        "--llm-context-window", min=1, help="With --summarizer llm: the model's window in tokens (default: the price database's)."
    )] = None,
    lenient: LenientOpt = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not use the persistent token cache.")] = False,
    provider: ProviderOpt = None,
    e_fixed: EFixedOpt = None,
    baseline_e: BaselineEOpt = None,
    calls_per_turn: CallsPerTurnOpt = None,
    force_ratio: ForceRatioOpt = None,
    prefix_tokens: PrefixTokensOpt = None,
    summary_tokens: SummaryTokensOpt = None,
    min_keep_ratio: MinKeepRatioOpt = None,
    max_context_tokens: MaxContextOpt = None,
    model: ModelOpt = None,
    tokenizer: TokenizerOpt = None,
    planner: PlannerOpt = None,
) -> None:
    """Compact SESSION at the planner's cut (or --keep K / --force) and write the result to OUTPUT."""
    from dp_compact.pipeline.breaker import CircuitBreaker
    from dp_compact.pipeline.compact import compact_file

    if output is None and not dry_run:
        raise _fail(ValueError("-o/--output is required (or give --dry-run)"))
    if summarizer not in ("extractive", "llm") or llm_api not in ("anthropic", "openai"):
        raise _fail(ValueError("--summarizer is extractive or llm, --llm-api is anthropic or openai"))
    if summarizer == "llm" and not llm_model:
        raise _fail(ValueError("--summarizer llm needs --llm-model"))
    breaker = CircuitBreaker()
    try:
        settings = _settings(
            provider=provider, e_fixed=e_fixed, baseline_e=baseline_e, l=calls_per_turn, min_keep_ratio=min_keep_ratio,
            max_context_tokens=max_context_tokens, model=model, tokenizer=tokenizer, force_ratio=force_ratio,
            v=prefix_tokens, s=summary_tokens, planner=planner,
        )
        if reset_breaker:
            breaker.reset(session)
        chosen = None
        if summarizer == "llm":
            from dp_compact.pipeline.llm import LLMSummarizer

            chosen = LLMSummarizer(llm_api, llm_model, base_url=llm_base_url, context_window=llm_context_window)
        result = compact_file(
            session, settings, output=output or Path(), keep=keep, force=force, to=to, dry_run=dry_run,
            summarizer=chosen, archiver=None if dry_run else _default_archiver(), breaker=breaker, lenient=lenient,
            use_cache=not no_cache,
        )
    except DpCompactError as exc:
        raise _fail(exc) from None
    notes = list(result.notes)
    if chosen is not None and result.decision == "compact":
        notes.append(f"summary request sized for a {chosen.context_window:,}-token window: {chosen.window_source}")
    for note in notes:
        typer.echo(f"dp-compact: note: {note}", err=True)
    data = result.to_dict()
    typer.echo(json.dumps(data, ensure_ascii=False) if as_json else render_compaction(data))


@app.command()
def shrink(
    session: Annotated[Path, typer.Argument(help="Session file (any supported format).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where the shrunk conversation is written (JSONL).")],
    keep_turns: Annotated[int, typer.Option("--keep-turns", min=0, help="Leave the last N user turns untouched.")] = 3,
    to: ToOpt = None,
    lenient: LenientOpt = False,
) -> None:
    """Micro-compaction: replace old tool results over 800 characters by 400-600 character previews."""
    from dp_compact.pipeline.io import shrink_file

    try:
        result = shrink_file(session, output=output, keep_turns=keep_turns, to=to, lenient=lenient)
    except DpCompactError as exc:
        raise _fail(exc) from None
    if result.output is None:
        typer.echo(f"nothing to shrink in {session}: no tool result over 800 characters before the last {keep_turns} user turns; nothing written")
        return
    typer.echo(
        f"shrunk {result.shrunk_results} tool result(s) of {session} ({result.chars_before:,} -> {result.chars_after:,} characters;"
        f" messages from {result.protected_from} untouched) -> {result.output} ({result.api})"
    )


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="Messages file: JSONL, a JSON array or {\"messages\": [...]}.")],
    api: Annotated[str, typer.Option("--api", help="Rules to check: anthropic or openai.")],
) -> None:
    """Check FILE against the API's structural rules: prints OK (exit 0) or the violations (exit 1)."""
    from dp_compact.pipeline.io import validate_file

    if api not in ("anthropic", "openai"):
        raise _fail(ValueError(f"--api must be 'anthropic' or 'openai', not {api!r}"))
    try:
        violations = validate_file(file, api)  # type: ignore[arg-type]
    except DpCompactError as exc:
        raise _fail(exc) from None
    if not violations:
        typer.echo(f"OK: {file} follows the {api} rules")
        return
    typer.echo(f"{file}: {len(violations)} violation(s) of the {api} rules:")
    for violation in violations:
        typer.echo(f"  {violation}")
    raise typer.Exit(EXIT_INVALID)


def _replay_folder(folder: Path, settings: object, specs: list[str], workers: int | None, **options: object) -> object:
    """Replay every session under FOLDER with a progress bar on stderr (rich)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from dp_compact.replay.shell import replay_directory

    columns = (TextColumn("{task.description:<36}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True, auto_refresh=False) as bar:  # no thread: workers fork
        task = bar.add_task("replaying", total=None)

        def tick(done: int, total: int, path: str) -> None:
            bar.update(task, completed=done, total=total, description=Path(path).name[:36], refresh=True)

        return replay_directory(folder, settings, specs, workers=workers, progress=tick, **options)  # type: ignore[arg-type]


@app.command()
def replay(
    path: Annotated[Path, typer.Argument(help="Session file, or a folder: every session file under it.")],
    policy: Annotated[Optional[list[str]], typer.Option("--policy", help="oracle, dp, seed, never, threshold:F[:keep], claude-code, codex, openhands, langchain (repeat; default: all but threshold).")] = None,
    loss: Annotated[str, typer.Option("--loss", help="Charge lost information: refetch (a dropped message a later call uses is fetched again) or none.")] = "refetch",
    cache_ttl: Annotated[Optional[float], typer.Option("--cache-ttl", min=0.0, help="Cache lifetime after its last use, seconds (where calls have timestamps).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as one JSON object.")] = False,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Draw context size per call per policy to this image (one SESSION).")] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, help="Processes for a folder (default: CPU count).")] = None,
    lenient: LenientOpt = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not use the persistent token cache.")] = False,
    provider: ProviderOpt = None,
    max_context_tokens: MaxContextOpt = None,
    v: Annotated[Optional[int], typer.Option("--v", help="Fixed prefix V, tokens.")] = None,
    s: Annotated[Optional[int], typer.Option("--s", help="Summary S, tokens.")] = None,
    tokenizer: TokenizerOpt = None,
) -> None:
    """Price a recorded SESSION call by call under compaction policies (a folder: every session in it)."""
    from dp_compact.replay.meter import LOSS_MODES
    from dp_compact.replay.policies import DEFAULT_POLICIES
    from dp_compact.replay.render import plot_contexts, render_directory, render_session
    from dp_compact.replay.shell import replay_file

    specs = list(policy or DEFAULT_POLICIES)
    if loss not in LOSS_MODES:
        raise _fail(ValueError(f"--loss {loss!r}: use one of {', '.join(LOSS_MODES)}"))
    options = {"cache_ttl_s": cache_ttl, "lenient": lenient, "use_cache": not no_cache, "loss": loss}
    if plot is not None and path.is_dir():
        raise _fail(ValueError("--plot draws one SESSION file, not a folder"))
    try:
        settings = _settings(provider=provider, max_context_tokens=max_context_tokens, v=v, s=s, tokenizer=tokenizer)
        result = _replay_folder(path, settings, specs, workers, **options) if path.is_dir() else replay_file(path, settings, specs, **options)
    except DpCompactError as exc:
        raise _fail(exc) from None
    if plot is not None:
        try:
            plot_contexts(result, plot)
        except (ModuleNotFoundError, ValueError, OSError) as exc:
            raise _fail(ValueError(f"--plot {plot}: {exc}")) from None
    data = result.to_dict()  # type: ignore[attr-defined]
    if as_json:
        typer.echo(json.dumps(data, ensure_ascii=False))
    else:
        typer.echo(render_directory(data) if path.is_dir() else render_session(data))


@app.command()
def curve(
    session: Annotated[Path, typer.Argument(help="Session file (any supported format).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Figure to write: .png or .svg (written atomically).")],
    provider: Annotated[Optional[list[str]], typer.Option("--provider", help="Pricing profile to overlay (repeatable).")] = None,
    model: Annotated[Optional[list[str]], typer.Option("--model", help="Cost model to overlay besides DP_MODEL: seed or recall (repeatable).")] = None,
    lenient: Annotated[bool, typer.Option("--lenient", help="Skip malformed lines.")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not use the persistent token cache.")] = False,
) -> None:
    """Draw NetBenefit(k) and its five terms for SESSION, per provider and cost model."""
    from dp_compact.plot import write_curve

    try:
        settings = _settings(providers=tuple(provider) if provider else None)
        plans = write_curve(session, out, settings, providers=provider or (), models=model or (), lenient=lenient,
                            use_cache=not no_cache)
    except (DpCompactError, ValueError) as exc:
        raise _fail(exc) from None
    for p in plans:
        typer.echo(f"{p.prices.name} · {p.settings['model']}: {p.decision} (k = {p.k}, rule {p.rule})")
    for note in dict.fromkeys(window_note(p.prices.max_context_tokens, p.prices.window_source) for p in plans if p.prices.window_source):
        typer.echo(note)
    typer.echo(f"wrote {out}")


@app.command()
def timeline(
    session: Annotated[Path, typer.Argument(help="Session file (any supported format).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Figure to write: .png or .svg (written atomically).")],
    provider: Annotated[Optional[str], typer.Option("--provider", help="Pricing profile or model name.")] = None,
    lenient: Annotated[bool, typer.Option("--lenient", help="Skip malformed lines.")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Do not use the persistent token cache.")] = False,
) -> None:
    """Replay SESSION call by call: its context, the window, and where the planner would compact."""
    from dp_compact.plot import write_timeline

    try:
        line = write_timeline(session, out, _settings(provider=provider), lenient=lenient, use_cache=not no_cache)
    except (DpCompactError, ValueError) as exc:
        raise _fail(exc) from None
    advised = int(line.compact.sum())
    if line.window_source:
        typer.echo(window_note(line.prices.max_context_tokens, line.window_source))
    advice = f"compaction advised at {advised} of them" if advised else "compaction never advised"
    typer.echo(f"{len(line.call)} calls, {advice}; wrote {out}")


@app.command()
def calibrate(
    paths: Annotated[list[Path], typer.Argument(help="Session files or directories (searched recursively).")],
    env: Annotated[bool, typer.Option("--env", help="Print export DP_...=... lines only.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the calibration as one JSON object.")] = False,
    figure: Annotated[Optional[Path], typer.Option("--figure", help="Also draw the calibration figure (.png or .svg).")] = None,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=1, help="Resamples over sessions for the spreads.")] = 400,
) -> None:
    """Measure V, L, avg, S, token ratios and the recall curve q(a) from transcripts; fit q0 and tau."""
    from dp_compact.calibration import calibrate as run, env_lines, format_report

    try:
        result = run(paths, bootstrap=bootstrap)
        if figure is not None:
            from dp_compact.plot import calibration_figure, save_figure

            save_figure(calibration_figure(result), figure)
    except (DpCompactError, ValueError) as exc:
        raise _fail(exc) from None
    if env:
        typer.echo("\n".join(env_lines(result)))
    else:
        typer.echo(json.dumps(result.to_dict(), ensure_ascii=False) if as_json else format_report(result))


from dp_compact.adapters.commands import register as _register_adapter_commands  # noqa: E402
_register_adapter_commands(app)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
