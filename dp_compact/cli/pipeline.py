"""The pipeline's commands (DESIGN §5): ``compact``, ``shrink``, ``validate``, ``restore``, ``recall``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import typer

from dp_compact.cli.app import EXIT_INVALID, CommandError, app, load_settings, note
from dp_compact.cli.options import LenientOpt, NoCacheOpt, PipelineJsonOpt, ToOpt, settings_options

#: ``recall --limit`` bound: :data:`dp_compact.pipeline.archive.MAX_SEARCH_LIMIT` (not imported here:
#: the archive module loads SQLite, which a command line that never searches does not need).
MAX_SEARCH_LIMIT = 10_000

Api = Literal["anthropic", "openai"]
Action = Literal["summarize", "clear"]


@app.command()
@settings_options()
def compact(
    session: Annotated[Path, typer.Argument(help="Session file (any supported format).")],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Where the compacted conversation is written (JSONL).")] = None,
    keep: Annotated[Optional[int], typer.Option("--keep", min=1, help="Keep at least K recent messages (nearest feasible cut).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Compact even when the planner would not (its forced-rule cut).")] = False,
    when_due: Annotated[bool, typer.Option(
        "--when-due", help="Compact only when the plan says to compact now (not when it would wait for a compaction it has scheduled)."
    )] = False,
    to: ToOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be dropped, kept, anchored and archived; write nothing.")] = False,
    as_json: PipelineJsonOpt = False,
    reset_breaker: Annotated[bool, typer.Option("--reset-breaker", help="Close this session's circuit breaker first.")] = False,
    summarizer: Annotated[Literal["extractive", "llm"], typer.Option("--summarizer", help="extractive (offline) or llm.")] = "extractive",
    llm_api: Annotated[Api, typer.Option("--llm-api", help="With --summarizer llm: the API to ask.")] = "anthropic",
    llm_model: Annotated[Optional[str], typer.Option("--llm-model", help="With --summarizer llm: the model to ask.")] = None,
    llm_base_url: Annotated[Optional[str], typer.Option("--llm-base-url", help="With --summarizer llm: API endpoint.")] = None,
    llm_context_window: Annotated[Optional[int], typer.Option(
        "--llm-context-window", min=1, help="With --summarizer llm: the model's window in tokens (default: the price database's)."
    )] = None,
    lenient: LenientOpt = False,
    no_cache: NoCacheOpt = False,
    action: Annotated[Action, typer.Option(
        "--action", help="summarize: summary + kept tail; clear: old tool results become placeholders naming their archive (--keep K: messages left uncleared)."
    )] = "summarize",
    *,
    flags: dict[str, Any],
) -> None:
    """Compact SESSION now at the planner's best cut (or --keep K / --force) and write the result to -o OUTPUT.

    Where the look-ahead planner would wait for a compaction it has scheduled, this compacts now
    at the cut it prices best now (--when-due: only when the plan says compact now); where no
    compaction pays, or nothing was added since dp-compact compacted the file, nothing is written.
    With --action clear, the content of old tool results is archived and replaced by placeholders
    (every message stays); --keep K leaves the last K messages uncleared (default: the last 3 long
    tool results).
    """
    from dp_compact.cli.render import plan_json, render_compaction
    from dp_compact.pipeline.archive import ArchiveStore
    from dp_compact.pipeline.breaker import CircuitBreaker
    from dp_compact.pipeline.compact import compact_file

    if output is None and not dry_run:
        raise CommandError("-o/--output is required (or give --dry-run)")
    if action == "clear":
        if force or when_due or summarizer != "extractive" or reset_breaker:
            raise CommandError("--action clear takes --keep K, --dry-run, --to, --json and --lenient; not --force, --when-due, --summarizer or --reset-breaker")
        _clear(session, output, keep=keep, to=to, dry_run=dry_run, as_json=as_json, lenient=lenient, flags=flags)
        return
    if summarizer == "llm" and not llm_model:
        raise CommandError("--summarizer llm needs --llm-model")
    settings = load_settings(flags)
    if settings.native in ("anthropic-compact", "openai-compact"):  # core.native_costs.NATIVE_COMPACTIONS, without its numpy import
        raise CommandError(f"DP_NATIVE={settings.native}: the provider carries that compaction out (an adapter's native=,"
                           " docs/adapters.md); compact carries out dp's own: set --native none")
    breaker = CircuitBreaker(settings.breaker_path)
    if reset_breaker:
        breaker.reset(session)
    chosen = None
    if summarizer == "llm":
        from dp_compact.pipeline.llm import LLMSummarizer

        chosen = LLMSummarizer(llm_api, llm_model, base_url=llm_base_url, context_window=llm_context_window)
    result = compact_file(
        session, settings, output=output or Path(), keep=keep, force=force, requested=not when_due, to=to, dry_run=dry_run,
        summarizer=chosen, archiver=ArchiveStore(settings.archive_dir), breaker=breaker,  # a dry run writes nothing to it
        lenient=lenient, use_cache=not no_cache,
    )
    if result.__class__.__name__ == "ClearResult":  # the plan's action was clearing old tool results (DESIGN §9)
        for text in result.notes:
            note(text)
        cleared = result.to_dict()
        if as_json:
            typer.echo(json.dumps({**cleared, "plan": plan_json(cleared["plan"]) if cleared["plan"] else None}, ensure_ascii=False))
        else:
            typer.echo(_render_clear(cleared))
        return
    notes = list(result.notes)
    if chosen is not None and result.decision == "compact":
        notes.append(f"summary request sized for a {chosen.context_window:,}-token window: {chosen.window_source}")
    for text in notes:
        note(text)
    data = result.to_dict()
    if as_json:
        typer.echo(json.dumps({**data, "plan": plan_json(data["plan"]) if data["plan"] else None}, ensure_ascii=False))
    else:
        typer.echo(render_compaction(data))


def _clear(session: Path, output: Path | None, *, keep: int | None, to: str | None, dry_run: bool, as_json: bool,
           lenient: bool, flags: dict[str, Any]) -> None:
    """``compact --action clear``: clear, then print the result (JSON or text)."""
    from dp_compact.pipeline.archive import ArchiveStore
    from dp_compact.pipeline.clear import clear_file

    settings = load_settings(flags)
    result = clear_file(session, output=output or Path(), keep=keep, to=to, dry_run=dry_run,
                        archiver=ArchiveStore(settings.archive_dir), lenient=lenient, settings=settings)
    for text in result.notes:
        note(text)
    data = result.to_dict()
    typer.echo(json.dumps(data, ensure_ascii=False) if as_json else _render_clear(data))


def _render_clear(data: dict[str, Any]) -> str:
    """The text report of ``compact --action clear``."""
    if data["decision"] != "clear":
        return f"KEEP  {data['path']}: {data['explanation']}; nothing written"
    where = "dry run: nothing archived, nothing written" if data["dry_run"] else f"written to {data['output']} ({data['api']})"
    return "\n".join([
        f"CLEAR  {data['path']}: {data['explanation']} (the last {data['kept_messages']} of {data['n_messages']} messages untouched)",
        (f"  tokens        {data['tokens_before']:,} -> {data['tokens_after']:,} cl100k tokens: {data['tokens_removed']:,} removed from"
         f" tool results, {data['placeholder_tokens']:,} added by placeholders"
         + (" (the plan's figures above are provider tokens)" if data.get("plan") else "")),
        (f"  cache         rewritten from message {data['first_changed_message']} ({data['rewritten_tokens']:,} cl100k tokens);"
         " the messages before it stay cached"),
        f"  archive       {data['archive_ref'] or 'archive://<session>/<id>'}#msg-N restores message N"
        + ("" if data["dry_run"] else f"; {len(data['cleared_message_indices'])} messages archived"),
        f"  output        {where}",
    ])


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

    result = shrink_file(session, output=output, keep_turns=keep_turns, to=to, lenient=lenient)
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
    api: Annotated[Api, typer.Option("--api", help="Whose rules to check (required): the API the file will be sent to.")],
) -> None:
    """Check FILE against one API's structural rules (--api, required): prints OK (exit 0) or the violations (exit 1)."""
    from dp_compact.pipeline.io import validate_file

    violations = validate_file(file, api)
    if not violations:
        typer.echo(f"OK: {file} follows the {api} rules")
        return
    typer.echo(f"{file}: {len(violations)} violation(s) of the {api} rules:")
    for violation in violations:
        typer.echo(f"  {violation}")
    raise typer.Exit(EXIT_INVALID)


@app.command()
def restore(
    ref: Annotated[str, typer.Argument(help="Archive reference archive://<session>/<id> (#msg-N: only message N, as a clearing's placeholder or a compaction's anchor numbers it).")],
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write the JSONL here (atomically) instead of stdout.")] = None,
) -> None:
    """Print (or write to -o OUTPUT) the original messages archived under REF, as JSONL."""
    from dp_compact.pipeline.archive import PRIVATE_FILE_MODE, ArchiveStore, json_line, write_jsonl_atomic

    messages = ArchiveStore(load_settings().archive_dir).restore(ref)
    if output is None:
        for message in messages:
            typer.echo(json_line(message).decode("utf-8").rstrip("\n"))  # ASCII escapes where text holds lone surrogates
        return
    write_jsonl_atomic(output, messages, mode=PRIVATE_FILE_MODE)  # archived heads are private, as in the archive
    typer.echo(f"restored {len(messages)} message{'' if len(messages) == 1 else 's'} from {ref} to {output}", err=True)


@app.command()
def recall(
    query: Annotated[str, typer.Argument(help="Words, file paths or identifiers (all must match; word* for a prefix).")],
    session: Annotated[Optional[str], typer.Option("--session", help="Only archives of this session.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=MAX_SEARCH_LIMIT, help="Most archives listed.")] = 20,
    as_json: PipelineJsonOpt = False,
) -> None:
    """List archived heads matching QUERY, best first, with their summaries."""
    from dp_compact.cli.render import render_hits
    from dp_compact.pipeline.archive import ArchiveStore

    folder = load_settings().archive_dir
    hits = [hit.to_dict() for hit in ArchiveStore(folder).search(query, session=session, limit=limit)]
    typer.echo(json.dumps(hits, ensure_ascii=False) if as_json else render_hits(hits, folder))
