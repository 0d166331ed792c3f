"""Errors raised by dp_compact.

The command line prints one line ``dp-compact: <message>`` and exits 2 for any of them::

    DpCompactError                       base class
    ├── SettingsError(ValueError)        names the DP_ variable, its value and the rule broken
    │   └── EnvFileError                 a .env file that cannot be read (names the file, the line and the rule)
    ├── UnknownProfileError(ValueError)  lists close matches among the known pricing profiles
    ├── SessionError(ValueError)         a session file that cannot be read
    │   ├── UnknownFormatError           lists the supported formats
    │   ├── MalformedLineError           names the file and the 1-based line
    │   └── NotASessionError             a file of a known tool that is not a conversation (UI logs)
    ├── NoFeasibleCutError               no cut satisfies DESIGN §1
    ├── ArchiveError                     an archive:// reference malformed, unknown or unreadable; a failed archive write
    ├── OutputError                      an output file (figure, report) cannot be written
    └── CompactionError                  a compaction aborted; input untouched, no output or temporary file left
        ├── SummaryTooShortError         the summarizer returned an empty or too short summary
        └── CircuitOpenError             3 consecutive summary failures for this session: compaction paused

MissingExtraError(ImportError)       an adapter imported without its framework (names the extra to install)
"""

from __future__ import annotations

import re

from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "ArchiveError",
    "CircuitOpenError",
    "CompactionError",
    "DpCompactError",
    "EnvFileError",
    "MalformedLineError",
    "NoFeasibleCutError",
    "NotASessionError",
    "OutputError",
    "SessionError",
    "SettingsError",
    "SummaryTooShortError",
    "UnknownFormatError",
    "UnknownProfileError",
    "MissingExtraError",
    "install_hint",
    "no_readable_session",
    "skip_reason",
    "skipped_error",
]


class DpCompactError(Exception):
    """Base class of every error dp_compact raises on bad input or settings."""


class SettingsError(DpCompactError, ValueError):
    """A setting has an invalid value.

    Attributes ``variable`` (e.g. ``DP_P_INPUT``), ``value`` and ``rule`` are kept for callers;
    ``where`` (e.g. "from the .env file") follows the value in the message.
    """

    def __init__(self, variable: str, value: object, rule: str, where: str = "") -> None:
        self.variable, self.value, self.rule = variable, value, rule
        super().__init__(f"{variable}={value!r}{f' ({where})' if where else ''}: {rule}")


class EnvFileError(SettingsError):
    """A ``.env`` file that cannot be read as settings (not UTF-8 text): ``path:line: rule``."""

    def __init__(self, path: str, line: int | None, rule: str) -> None:
        self.variable, self.value, self.rule, self.path, self.line = ".env", None, rule, path, line
        DpCompactError.__init__(self, f"{path}{f':{line}' if line else ''}: {rule}")


class UnknownProfileError(DpCompactError, ValueError):
    """A pricing profile or model name that neither the built-in profiles nor genai-prices know.

    ``variable`` names where the name came from when it was not a flag (``DP_PROVIDER``).
    """

    def __init__(self, name: str, close_matches: list[str], *, variable: str | None = None) -> None:
        self.name, self.close_matches, self.variable = name, close_matches, variable
        hint = f"; close matches: {', '.join(close_matches)}" if close_matches else ""
        what = f"{variable}={name!r}: unknown provider/model" if variable else f"unknown provider/model {name!r}"
        super().__init__(f"{what}{hint} (see `dp-compact profiles`)")


class SessionError(DpCompactError, ValueError):
    """A session file that cannot be read; ``path`` and ``line`` (1-based, or None) name the place."""

    def __init__(self, path: Path | str, line: int | None, rule: str) -> None:
        self.path, self.line, self.rule = str(path), line, rule
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {rule}")


class UnknownFormatError(SessionError):
    """The file matches none of the supported session formats (the message lists them)."""

    #: How the message opens, and all :func:`skip_reason` says (a folder run lists many such files).
    OPENING = "not a session format dp-compact reads"


class MalformedLineError(SessionError):
    """A line is not valid JSON or not a valid record of the detected format."""


class NotASessionError(SessionError):
    """A file of a known tool that is not a conversation (for example Cline's ui_messages log)."""


class NoFeasibleCutError(DpCompactError):
    """No cut satisfies the feasible-cut rules of DESIGN §1 for the requested keep count.

    When known, ``path`` and ``line`` name the message that blocks the requested cut (1-based
    source line, None for a JSON document), ``call_id`` the tool call it would separate from
    its result, and ``below`` / ``above`` the nearest keep counts that are feasible (None when
    there is none on that side).
    """

    def __init__(
        self, message: str, *, path: str | None = None, line: int | None = None, call_id: str | None = None,
        below: int | None = None, above: int | None = None,
    ) -> None:
        self.path, self.line, self.call_id, self.below, self.above = path, line, call_id, below, above
        super().__init__(message)


class ArchiveError(DpCompactError):
    """An archive reference that is malformed, unknown or unreadable, or an archive write that failed.

    ``ref`` is the ``archive://<session>/<id>`` concerned, when known. A failed write leaves
    nothing visible to restore or search.
    """

    def __init__(self, message: str, *, ref: str | None = None) -> None:
        self.ref = ref
        super().__init__(message)


class CompactionError(DpCompactError):
    """A compaction was aborted (summarizer failure, invalid output, write failure).

    The input file is never modified and no output or temporary file is left behind.
    """


class SummaryTooShortError(CompactionError):
    """The summarizer returned an empty or too short summary (DESIGN §5.5)."""


class CircuitOpenError(CompactionError):
    """Summaries of this session failed several times in a row; compaction is paused (DESIGN §5.5)."""


class OutputError(DpCompactError):
    """An output file (a figure, a report) cannot be written; nothing is left behind."""


def skip_reason(exc: DpCompactError) -> str:
    """Why a folder or fleet run left a file out, in one line without the file's path (its row names it).

    ``line N: rule`` (the rule alone when it names its line) or the rule of a :class:`SessionError`
    without a line (for :class:`UnknownFormatError` only
    its opening, :attr:`UnknownFormatError.OPENING`, not the list of formats); the message of any
    other error.

    >>> skip_reason(MalformedLineError("s.jsonl", 2, "line 2 is not valid JSON")), skip_reason(SessionError("s.jsonl", 3, "no role"))
    ('line 2 is not valid JSON', 'line 3: no role')
    >>> skip_reason(UnknownFormatError("notes.json", None, "not a session format dp-compact reads. Supported formats: ..."))
    'not a session format dp-compact reads'
    """
    if isinstance(exc, UnknownFormatError):
        return UnknownFormatError.OPENING
    if isinstance(exc, SessionError):
        if exc.line is None or re.match(rf"line {exc.line}\b", exc.rule):
            return exc.rule
        return f"line {exc.line}: {exc.rule}"
    return str(exc)


def skipped_error(path: str, reason: str) -> SessionError:
    """The error a run of one file raises for the file it skipped with ``reason`` (:func:`skip_reason`),
    its line read back from the reason.

    >>> str(skipped_error("s.jsonl", "line 2 is not valid JSON")), str(skipped_error("s.jsonl", "line 3: no role"))
    ('s.jsonl:2: line 2 is not valid JSON', 's.jsonl:3: no role')
    """
    found = re.match(r"line (\d+)(: |\b)", reason)
    if found is None:
        return SessionError(path, None, reason)
    return SessionError(path, int(found.group(1)), reason[found.end():] if found.group(2) == ": " else reason)


def no_session_file(where: Path | str) -> SessionError:
    """The error of a folder holding no file with a session suffix (``.json``, ``.jsonl``, ``.traj``).

    >>> str(no_session_file("dir"))
    'dir: no session file (.json, .jsonl, .traj) under this folder'
    """
    from dp_compact.io import SESSION_SUFFIXES

    return SessionError(where, None, f"no session file ({', '.join(sorted(SESSION_SUFFIXES))}) under this folder")


def no_readable_session(where: str, skipped: Sequence[tuple[str, str]], files: int, shown: int = 3) -> SessionError:
    """The error of a folder or fleet run in which none of its ``files`` is read as a session:
    :func:`no_session_file` when there is no file, the input's own (:func:`skipped_error`) when
    it is the only one, else ``where`` with the count and the first ``shown`` of the
    ``(path, reason)`` entries skipped.

    >>> str(no_readable_session("dir", [("dir/a.json", "not a session format dp-compact reads"), ("dir/b.jsonl", "line 2: no role")], 2, shown=1))
    'dir: no readable session among 2 file(s): dir/a.json: not a session format dp-compact reads; and 1 more'
    >>> str(no_readable_session("dir", [("dir/b.jsonl", "line 2: no role")], 1))
    'dir/b.jsonl:2: no role'
    """
    if files == 0:
        return no_session_file(where)
    if files == 1 and len(skipped) == 1:
        return skipped_error(*skipped[0])
    entries = [f"{path}: {reason}" for path, reason in skipped]
    reasons = "; ".join(entries[:shown]) + (f"; and {len(entries) - shown} more" if len(entries) > shown else "")
    return SessionError(where, None, f"no readable session among {files} file(s)" + (f": {reasons}" if reasons else ""))


def install_hint(extra: str) -> str:
    """How to install the optional ``extra`` of ``pyproject.toml``, as the README installs the
    package: from its source folder (``pip install ".[dask]"``; ``"dp-compact[dask]"`` only
    where a package index holds it).

    >>> install_hint("dask")
    'pip install ".[dask]" in the dp-compact source folder'
    """
    return f'pip install ".[{extra}]" in the dp-compact source folder'


class MissingExtraError(ImportError):
    """An adapter imported without its framework: one line naming the extra to install.

    Parameters
    ----------
    module : str
        The adapter module (``"langchain"``, ``"pydantic_ai"``, ``"mcp_server"``).
    extra : str
        The extra of ``pyproject.toml`` that installs its framework.
    missing : str or None
        The top-level package that could not be imported, when known.

    Examples
    --------
    >>> str(MissingExtraError("langchain", "langchain", "langgraph"))
    'dp_compact.adapters.langchain needs the langchain extra (langgraph is not installed): pip install ".[langchain]" in the dp-compact source folder'
    """

    def __init__(self, module: str, extra: str, missing: str | None = None) -> None:
        why = f" ({missing.split('.')[0]} is not installed)" if missing else ""
        super().__init__(f"dp_compact.adapters.{module} needs the {extra} extra{why}: {install_hint(extra)}",
                         name=missing)
