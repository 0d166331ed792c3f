"""The ``dp-compact`` Typer application, its error boundary and the helpers every command shares.

The boundary is :class:`CommandGroup`: whatever a command raises as a
:class:`~dp_compact.errors.DpCompactError` and every usage error Typer finds (unknown option,
missing argument, bad choice) is printed as one line on stderr, ``dp-compact: <message>`` or
``dp-compact: <command>: <message> (try 'dp-compact <command> --help')``, with exit status 2;
never a traceback, never a box.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

#: Columns of help and usage text when the output is not a terminal (a pipe, a file, a pager): Rich's
#: default of 80 cut the longer option names and their environment variables short.
HELP_COLUMNS = 120
if "COLUMNS" not in os.environ and not sys.stdout.isatty():
    os.environ["COLUMNS"] = str(HELP_COLUMNS)

import typer  # noqa: E402 - after the columns, which Rich reads when Typer's help is first drawn
from typer.core import TyperGroup  # noqa: E402

from dp_compact.errors import DpCompactError

try:  # Typer 0.29+ vendors click privately
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, NoSuchOption, UsageError
except ImportError:  # pragma: no cover - older Typer on click
    from click.exceptions import ClickException, NoArgsIsHelpError, NoSuchOption, UsageError  # type: ignore[no-redef]

if TYPE_CHECKING:
    from dp_compact.settings import Settings

__all__ = [
    "EXIT_COMPACT",
    "EXIT_ERROR",
    "EXIT_INVALID",
    "NAME",
    "CommandError",
    "CommandGroup",
    "app",
    "load_settings",
    "main",
    "note",
]

#: The program's name, first word of every error line.
NAME = "dp-compact"
#: Exit status of `plan --exit-code` when compaction is advised.
EXIT_COMPACT = 10
#: Exit status on bad input, bad settings or a usage error.
EXIT_ERROR = 2
#: Exit status of `validate` when the file breaks a rule of the API.
EXIT_INVALID = 1


class CommandError(DpCompactError):
    """A combination of options a command cannot run with (``compact`` without ``-o``), found at the edge."""


def usage_line(exc: ClickException, args: Sequence[str] = (), commands: Iterable[str] = ()) -> str:
    """One line for a usage error: ``dp-compact: <command>: <message> (try 'dp-compact <command> --help')``.

    The command is the error's own context's; an error the parser raises without a context (an
    option missing its value) belongs to the subcommand of ``args`` when its first word is one
    of ``commands``.
    """
    if isinstance(exc, NoSuchOption) and exc.possibilities:  # the parser compares "--s" and "--bogus" dashes included
        exc.possibilities = _closest_names(exc.option_name, exc.possibilities)
    message = " ".join(exc.format_message().replace("Value error, ", "").split())
    ctx = getattr(exc, "ctx", None)
    first = next((a for a in args if not a.startswith("-")), None)
    words = ctx.command_path.split()[1:] if ctx is not None else ([first] if first in set(commands) else [])
    command = " ".join([NAME, *words])
    where = f"{' '.join(words)}: " if words else ""
    return f"{NAME}: {where}{message} (try '{command} --help')"


def _json_error(args: list[str], message: str, kind: str, path: str | None = None, line: int | None = None) -> None:
    """With ``--json`` among ``args``, the error also as one JSON object on stdout, for an agent that
    reads only stdout: ``{"error": {"type", "message", "path", "line"}}``, the message being the
    stderr line without ``dp-compact:`` (that line and the exit status stay as they are; ``path``
    and ``line`` are null where the error names none)."""
    if "--json" not in args or "--" in args[: args.index("--json")]:
        return
    import json

    text = message.removeprefix(f"{NAME}: ")
    typer.echo(json.dumps({"error": {"type": kind, "message": text, "path": path, "line": line}}, ensure_ascii=False))


#: How much less alike than the closest option another may be and still be suggested.
_SUGGESTION_MARGIN = 0.15


def _closest_names(given: str, options: Iterable[str]) -> list[str]:
    """The likely meanings of the unknown option ``given``, closest first: the options whose names
    without the leading dashes are as close as the parser asks of whole options (``difflib``'s
    0.6), and no more than :data:`_SUGGESTION_MARGIN` less alike than the closest one.

    >>> _closest_names("--provder", ["--model", "--provider"]), _closest_names("--bogus", ["--s"])
    (['--provider'], [])
    >>> _closest_names("--no-cach", ["--p-cache", "--no-cache"])
    ['--no-cache']
    """
    from difflib import SequenceMatcher

    scored = sorted(((SequenceMatcher(None, given.lstrip("-"), o.lstrip("-")).ratio(), o) for o in options), reverse=True)
    best = scored[0][0] if scored else 0.0
    return [o for ratio, o in scored if ratio >= 0.6 and ratio >= best - _SUGGESTION_MARGIN]


def _plain(param: Any) -> Any:
    """``param`` with a plain help name (:func:`plain_metavars`)."""
    if getattr(param, "is_bool_flag", False) and param.metavar is None:
        param.metavar = ""
    elif param.param_type_name == "argument" and param.metavar is None:
        param.metavar = (param.name or "").upper()
        shown = param.metavar if param.required else f"[{param.metavar}]"
        shown += "..." if param.nargs != 1 else ""
        param.get_usage_pieces = lambda ctx, shown=shown: [shown]
    return param


def unwrapped(text: str | None) -> str | None:
    r"""``text`` with each paragraph on one line (paragraphs stay apart): Typer's help joins the
    source's line breaks in the first paragraph only, and prints the rest where the source wraps.

    >>> unwrapped("One line\nwrapped.\n\nSecond\n  paragraph.")
    'One line wrapped.\n\nSecond paragraph.'
    """
    if not text:
        return text
    return "\n\n".join(" ".join(line.strip() for line in paragraph.strip().splitlines()) for paragraph in text.split("\n\n"))


def plain_metavars(command: Any) -> Any:
    """``command`` with the help's names in the usual style: no type for an on/off flag (``--help``
    included), an argument as ``SESSION`` (``[SESSION]`` when optional) rather than Typer's
    ``<bool>`` and ``{session}``, and its help's paragraphs rewrapped to the terminal
    (:func:`unwrapped`). None stays None."""
    if command is None or getattr(command, "_plain_metavars", False):
        return command
    command.help = unwrapped(command.help)
    params = command.get_params

    def get_params(ctx: Any) -> list[Any]:
        return [_plain(p) for p in params(ctx)]

    command.get_params = get_params
    command._plain_metavars = True
    return command


class CommandGroup(TyperGroup):
    """The application's command group: Typer's, with the one-line error boundary (module docstring)
    and plain help names (:func:`plain_metavars`)."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The subcommand ``cmd_name`` (see :func:`plain_metavars`), or None."""
        return plain_metavars(super().get_command(ctx, cmd_name))

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
        standalone_mode: bool = True, **extra: Any,
    ) -> Any:
        """Run the command line; in standalone mode exit with its status (0, 1, 2 or 10)."""
        plain_metavars(self)
        given = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(args, prog_name or NAME, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as exc:  # `dp-compact` alone: the help, status 2
            if not standalone_mode:
                raise
            typer.echo(exc.ctx.get_help())
            code = EXIT_ERROR
        except (UsageError, ClickException) as exc:
            if not standalone_mode:
                raise
            line = usage_line(exc, given, self.commands) if isinstance(exc, UsageError) else f"{NAME}: {exc.format_message()}"
            typer.echo(line, err=True)
            _json_error(given, line, "UsageError")
            code = exc.exit_code
        except DpCompactError as exc:
            if not standalone_mode:
                raise
            text = " ".join(str(exc).splitlines())
            first = next((a for a in given if not a.startswith("-")), None)
            if isinstance(exc, CommandError) and first in self.commands:  # options that cannot go together: as a usage error
                text = f"{first}: {text} (try '{NAME} {first} --help')"
            typer.echo(f"{NAME}: {text}", err=True)
            _json_error(given, f"{NAME}: {text}", type(exc).__name__, getattr(exc, "path", None), getattr(exc, "line", None))
            code = EXIT_ERROR
        except typer.Abort:
            if not standalone_mode:
                raise
            typer.echo("Aborted!", err=True)
            code = 1
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name=NAME,
    cls=CommandGroup,
    help="Decide whether compacting an LLM agent conversation pays now, and how many recent messages to keep.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    """Print the installed version and exit (``--version``)."""
    if value:
        from importlib.metadata import version

        typer.echo(f"{NAME} {version('dp-compact')}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version and exit."),
) -> None:
    """Decide whether compacting an LLM agent conversation pays now, and how many recent messages to keep."""


def note(text: str) -> None:
    """Print ``dp-compact: note: <text>`` on stderr."""
    typer.echo(f"{NAME}: note: {text}", err=True)


def load_settings(flags: dict[str, Any] | None = None, *, providers: Iterable[str] | None = None) -> Settings:
    """Settings from the command's flags and ``DP_*`` (:func:`~dp_compact.settings.load_settings`),
    with the provider resolved now so that an unknown name fails before the session is read: each
    of ``providers`` when given (``curve --provider``, repeatable), else the ``--provider`` /
    ``DP_PROVIDER`` / ``.env`` one when there is one. Notes on ``DP_*`` names go to stderr.

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
    from dp_compact.settings import load_settings as build

    flags = dict(flags or {})
    settings = build(**flags)
    _note_variables()
    listed = tuple(providers) if providers is not None else None
    from_flag = listed is not None or flags.get("provider") is not None
    names = listed if listed is not None else ((settings.provider,) if settings.explicit_provider() else ())
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

    from dp_compact.settings import env_file_values, variable_notes

    for text in variable_notes(os.environ, env_file_values()):
        note(text)


def main() -> None:
    """Console-script entry point (``dp-compact``)."""
    app()
