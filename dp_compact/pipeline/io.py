"""The pipeline's file shell: target API of a session, validated atomic output, ``shrink``, ``validate``.

Every output goes through :func:`write_messages`: it is checked with
:func:`~dp_compact.pipeline.validate.validate_messages` first, never written over the input,
and written atomically (a temporary file in the output's directory, fsync, ``os.replace``;
the temporary file is removed on any failure), so a failed run leaves neither a partial output
nor a temporary file behind. An output is no more readable than its input (its permission
bits, less the umask).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dp_compact.errors import ArchiveError, CompactionError, SessionError
from dp_compact.io import private_mode_of, write_atomic
from dp_compact.pipeline.convert import raw_shape, system_messages_for, to_api
from dp_compact.pipeline.shrink import SHRINK_KEEP_TURNS, shrink_session
from dp_compact.pipeline.types import API_ANTHROPIC, API_OPENAI, Api, Violation
from dp_compact.pipeline.validate import validate_messages
from dp_compact.sessions import read_session
from dp_compact.conversation import Session
from dp_compact.sessions.source import read_source
from dp_compact.settings import Settings, load_settings

__all__ = ["NATIVE_API", "ShrinkFileResult", "read_messages", "shrink_file", "target_api", "validate_file", "write_messages"]

#: The API each session format is written in by default (Claude Code as Anthropic
#: messages, Codex as OpenAI chat).
NATIVE_API: dict[str, Api] = {"anthropic": API_ANTHROPIC, "claude_code": API_ANTHROPIC, "openai_chat": API_OPENAI, "codex": API_OPENAI}
_MAX_SHOWN_VIOLATIONS = 5


def target_api(session: Session, to: str | None = None) -> Api:
    """The API to write ``session`` in: ``to`` when given, else its format's, else its messages' shape.

    Raises
    ------
    CompactionError
        If ``to`` is not ``anthropic`` or ``openai``.
    """
    if to is not None:
        if to not in (API_ANTHROPIC, API_OPENAI):
            raise CompactionError(f"--to must be 'anthropic' or 'openai', not {to!r}")
        return to  # type: ignore[return-value]
    if session.format in NATIVE_API:
        return NATIVE_API[session.format]
    shapes = [raw_shape(m.raw) for m in session.messages]
    return API_OPENAI if shapes.count(API_OPENAI) > shapes.count(API_ANTHROPIC) else API_ANTHROPIC


def _same_file(a: Path, b: Path) -> bool:
    """True when ``a`` and ``b`` name the same existing file."""
    try:
        return a.exists() and b.exists() and a.samefile(b)
    except OSError:
        return False


def check_output(output: Path | str, *, source: Path | str) -> None:
    """Fail early, before anything is archived, when ``output`` cannot be written.

    Creates and removes an empty temporary file in the output's folder (made if missing).

    Raises
    ------
    CompactionError
        If ``output`` is the input file, a folder, or its folder cannot be written.
    """
    target = Path(output)
    if _same_file(target, Path(source)) or target.resolve() == Path(source).resolve():
        raise CompactionError(f"{target}: refusing to overwrite the input; give another -o/--output")
    if target.is_dir():
        raise CompactionError(f"{target}: is a folder; give a file name to -o/--output")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target.parent / f".{target.name}.probe", b"", make_parents=False, mode=0o600).unlink()
    except OSError as exc:
        raise CompactionError(f"{target}: cannot write the output: {exc.strerror or exc}") from exc


def write_messages(output: Path | str, messages: Sequence[dict[str, Any]], api: Api, *, source: Path | str) -> None:
    """Validate ``messages`` for ``api`` and write them to ``output`` as JSONL, atomically.

    Raises
    ------
    CompactionError
        If the messages break a rule of ``api`` (the first violations are named), ``output`` is
        the input file ``source``, or the file cannot be written. Nothing is written then.
    """
    from dp_compact.pipeline.archive import write_jsonl_atomic

    target = Path(output)
    if _same_file(target, Path(source)) or target.resolve() == Path(source).resolve():
        raise CompactionError(f"{target}: refusing to overwrite the input; give another -o/--output")
    violations = validate_messages(messages, api)
    if violations:
        shown = "; ".join(map(str, violations[:_MAX_SHOWN_VIOLATIONS]))
        raise CompactionError(f"{target}: output would break {len(violations)} {api} rule(s), nothing written: {shown}")
    try:
        write_jsonl_atomic(target, messages, mode=private_mode_of(source))  # no more readable than the input
    except ArchiveError as exc:
        raise CompactionError(f"{target}: cannot write the output: {exc.__cause__ or exc}") from exc


def read_messages(path: Path | str) -> list[Any]:
    """The messages of a JSONL file (one per line), a JSON array, or a ``{"messages": [...]}`` document.

    Raises
    ------
    SessionError
        If the file cannot be read or holds something else; ``MalformedLineError`` for a bad line.
    """
    source = read_source(path, partial_last_line=False)  # a file to check must be complete
    if source.records is not None:
        return [r.value for r in source.records]
    document = source.document
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        return list(document["messages"])
    if isinstance(document, list):
        return list(document)
    raise SessionError(path, None, "not a list of messages (JSONL, a JSON array or {\"messages\": [...]})")


def validate_file(path: Path | str, api: Api) -> tuple[Violation, ...]:
    """:func:`~dp_compact.pipeline.validate.validate_messages` over the messages of ``path``.

    Raises
    ------
    SessionError
        If the file is unreadable (see :func:`read_messages`).
    """
    return validate_messages(read_messages(path), api)


@dataclass(frozen=True, slots=True)
class ShrinkFileResult:
    """Outcome of ``dp-compact shrink``: counts, characters before/after and where it was written."""

    path: str
    output: str | None
    api: Api
    shrunk_results: int
    chars_before: int
    chars_after: int
    protected_from: int
    n_messages: int


def shrink_file(
    path: Path | str,
    *,
    output: Path | str,
    keep_turns: int = SHRINK_KEEP_TURNS,
    to: str | None = None,
    lenient: bool = False,
    settings: Settings | None = None,
) -> ShrinkFileResult:
    """Micro-compaction of a session file: old, long tool results become previews (DESIGN §5.3).

    Parameters
    ----------
    path : Path or str
        The session (any supported format); never modified.
    output : Path or str
        Where the shrunk conversation is written (in the target API's shape). Nothing is
        written when no tool result is old and long enough.
    keep_turns : int
        The last ``keep_turns`` user turns are left untouched (:func:`~.shrink.shrink_session`).
    to : {"anthropic", "openai"}, optional
        Target API; default: the format's own (:func:`target_api`).
    lenient : bool
        Skip malformed lines.
    settings : Settings, optional
        For the statement of what the conversation ran with (model, window, context after
        shrinking, avg, token ratio) in the first preview (:func:`~.shrink.statement_for`);
        default: :func:`~dp_compact.settings.load_settings`.

    Returns
    -------
    ShrinkFileResult

    Raises
    ------
    SessionError
        Unreadable input.
    CompactionError
        Invalid output or write failure (nothing written).
    """
    session = read_session(path, lenient=lenient)
    api = target_api(session, to)
    result = shrink_session(session, keep_turns=keep_turns, settings=settings if settings is not None else load_settings())
    written = None
    if result.shrunk_results:
        messages = [*system_messages_for(session.system_messages, session.system_text, api), *to_api(result.messages, api)]
        write_messages(output, messages, api, source=path)
        written = str(output)
    return ShrinkFileResult(
        str(path), written, api, result.shrunk_results, result.chars_before, result.chars_after,
        result.protected_from, len(session.messages),
    )
