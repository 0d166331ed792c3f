"""Every option of the command line, built once.

The settings of DESIGN §3 (and ``DP_PLANNER`` of §7) become flags from
:class:`~dp_compact.settings.Settings` itself: ``--<name>`` for each field (``--p-input``,
``--force-ratio``, ``--planner`` ...), a few with a longer spelling too (``--v/--prefix-tokens``),
an on/off one with its ``--no-<name>`` as a flag of its own row (``--no-clear-tool-results``), and
a choice as ``<choice>``, its help naming the choices: the help's Settings panel then keeps its
names and ``[DP_*]`` whole on an 80-column terminal (Rich narrows every wide column alike).
:func:`settings_options` adds all of them to a command, so every command that plans (``plan``,
``compact``, ``replay``, ``curve``, ``timeline``) takes the same ones, and hands them to it as one
``flags`` dict (only the flags given are not None: a flag outranks ``DP_*``, which an absent flag
never does). Choices are ``Literal`` types, checked by Typer.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, TypeVar, Union, get_args, get_origin, get_type_hints

import typer

from dp_compact.settings import Settings

__all__ = [
    "CalibrationJsonOpt",
    "JsonOpt",
    "PipelineJsonOpt",
    "ReplayJsonOpt",
    "TuneJsonOpt",
    "LenientOpt",
    "NoCacheOpt",
    "OutputAliasOpt",
    "SETTING_FLAGS",
    "ToOpt",
    "check_figure",
    "figure_output",
    "settings_options",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Help panel of the settings flags.
SETTINGS_PANEL = "Settings (flag > DP_* variable > .env > profile > default)"
#: Settings fields that are not flags of the planning commands (file locations of the pipeline).
_NOT_FLAGS = ("archive_dir", "breaker_path")
#: Extra spellings of some flags (DESIGN §2 symbols are one letter).
_ALSO = {"v": ("--prefix-tokens",), "s": ("--summary-tokens",), "l": ("--calls-per-turn",), "r": ("--retention",)}
#: Help text where the field's description is not enough.
_HELP = {
    "provider": "Pricing profile or model name (default: the session's model when known, else claude-sonnet-4).",
    "max_context_tokens": "Context window M, tokens (default: the session's evidence, then the profile).",
    "v": (
        "Fixed prefix V, tokens: the system prompt and tool definitions sent with every call. Unset, each "
        "session's own is measured from its usage records, and where they measure none the median measured on "
        "real agents is taken."
    ),
    "s": (
        "Summary size S, tokens; a summary may take up to twice it (default: unset, so that the look-ahead planner and "
        "replay charge the size each tool's summary has, as plan prints S; the single-step terms and the myopic and seed "
        "planners take 500)."
    ),
    "baseline_e": "Expected user turns of a session: E = max(this − user turns so far, half of it).",
    "e_fixed": "A fixed E, user turns, instead of the baseline (0 = off).",
    "min_keep_ratio": (
        "Least share of the messages a cut keeps, for the myopic and seed planners (the look-ahead keeps at least the "
        "last API round instead)."
    ),
    "quality_penalty": "Quality penalty QP of a long context (the long-context quality term).",
    "native": (
        "Price the provider's own action instead of dp's: anthropic-compact (compact_20260112: the whole context"
        " summarized, from 50,000 tokens), openai-compact (/responses/compact: the user messages kept), anthropic-clear"
        " (clear_tool_uses_20250919: billed as dp's clearing), or none."
    ),
    "recall_age": "Age a_j of a message: rounds (API rounds divided by L, calibrated) or turns (user turns).",
    "model": "Cost model: recall (k-aware ④) or seed (the seed's five terms).",
    "planner": "lookahead (compact now or later, looking ahead), myopic (NetBenefit of compacting now) or seed (the same as --model seed, which always decides as myopic).",
    "tokenizer": "tiktoken (bundled cl100k_base) or bytes4 (the reference estimate).",
    "token_ratio": (
        "Provider tokens per cl100k token (default: measured from the session's usage records, else the ratio "
        "recorded in a dp-compact summary, else the calibrated factor of the model's family, else 1)."
    ),
}

#: Settings fields offered as flags, in :class:`Settings` order.
SETTING_FLAGS = tuple(name for name in Settings.model_fields if name not in _NOT_FLAGS)
#: Shown type of a choice setting (a ``Literal``), whose help names the choices: Typer's
#: ``<none|anthropic-clear|...>`` would widen the type column of the help's table.
CHOICE_METAVAR = "<choice>"

def _json_option(document: str) -> Any:
    """The ``--json`` option of a command whose JSON keys ``document`` (a docs/ file) lists."""
    return Annotated[bool, typer.Option("--json", help=f"Print JSON for scripts instead of text (its keys: {document}).")]


JsonOpt = _json_option("docs/plan.md")
PipelineJsonOpt = _json_option("docs/pipeline.md")
ReplayJsonOpt = _json_option("docs/replay.md")
CalibrationJsonOpt = _json_option("docs/calibration.md")
TuneJsonOpt = _json_option("docs/tune.md")
LenientOpt = Annotated[bool, typer.Option("--lenient", help="Skip malformed lines (with a warning naming them).")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Do not use the persistent token cache.")]
ToOpt = Annotated[
    Optional[Literal["anthropic", "openai"]], typer.Option("--to", help="Output API (default: the input's own).")
]
#: The former spelling of ``-o/--output`` on ``curve`` and ``timeline``, accepted one more release.
OutputAliasOpt = Annotated[Optional[Path], typer.Option("--out", hidden=True)]


def figure_output(output: Path | None, alias: Path | None) -> Path:
    """The figure's file from ``-o/--output`` or its hidden alias ``--out``.

    Raises
    ------
    typer.BadParameter
        When neither is given (a usage error: one line, exit 2).
    """
    chosen = output or alias
    if chosen is None:
        raise typer.BadParameter("missing: name the figure's file (.png or .svg)", param_hint="'-o' / '--output'")
    return chosen


def check_figure(path: Path) -> Path:
    """``path`` when it names a .png or .svg file, checked before any work.

    Raises
    ------
    CommandError
        Any other suffix (one line, exit 2).
    """
    from dp_compact.cli.app import CommandError
    from dp_compact.figures.base import figure_format

    try:
        figure_format(path)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    return path


def _value_type(name: str) -> Any:
    """The type of a setting's flag: the field's type without None (``Literal`` choices stay)."""
    annotation = Settings.model_fields[name].annotation
    if get_origin(annotation) in (Union, types.UnionType):
        (annotation,) = [a for a in get_args(annotation) if a is not type(None)]
    return annotation


def _setting_option(name: str, repeat: str | None) -> Any:
    """``Annotated[Optional[T], typer.Option(...)]`` for the setting ``name`` (a list of T when ``repeat``)."""
    field = Settings.model_fields[name]
    value = _value_type(name)
    variable = f"DP_{name.upper()}"
    if repeat is not None:  # Typer takes no list of Literal: the command checks the choices
        value = str if get_origin(value) is Literal else value
        return Annotated[Optional[list[value]], typer.Option(f"--{name.replace('_', '-')}", help=repeat, rich_help_panel=SETTINGS_PANEL)]
    text = _HELP.get(name) or f"{(field.description or name)[:1].upper()}{(field.description or name)[1:]}."
    if field.default is not None and "default:" not in text:  # the ones that default to None say what they do instead
        text += f" Default: {'on' if field.default is True else 'off' if field.default is False else field.default}."
    shown = {"metavar": CHOICE_METAVAR} if get_origin(value) is Literal else {}
    return Annotated[Optional[value], typer.Option(
        f"--{name.replace('_', '-')}", *_ALSO.get(name, ()), help=f"{text} [{variable}]", rich_help_panel=SETTINGS_PANEL, **shown,
    )]


def _off_option(name: str) -> Any:
    """The ``--no-<name>`` flag of the on/off setting ``name``, a row of its own: declared as the
    secondary name of ``--<name>`` it would get a column of its own in the help's table, too wide
    for an 80-column terminal."""
    flag = name.replace("_", "-")
    return Annotated[bool, typer.Option(f"--no-{flag}", help=f"Turn --{flag} off.", rich_help_panel=SETTINGS_PANEL)]


def settings_options(*, repeatable: Mapping[str, str] | None = None) -> Callable[[F], F]:
    """Add a flag for every setting (:data:`SETTING_FLAGS`) to a command.

    The command declares a keyword parameter ``flags``; it receives ``{setting: value}`` for every
    flag (None when not given). ``repeatable`` maps a setting to the help of a repeatable
    version (``curve --provider a --provider b``): its value is then a list or None. An on/off
    setting also has a ``--no-<name>`` flag, which gives it False.

    Raises
    ------
    CommandError
        From the command, when an on/off setting is given both ways.
    """
    repeat = dict(repeatable or {})
    on_off = [name for name in SETTING_FLAGS if name not in repeat and _value_type(name) is bool]

    def decorate(func: F) -> F:
        signature = inspect.signature(func, eval_str=True)
        hints = get_type_hints(func, include_extras=True)
        own = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values() if p.name != "flags"]
        added = []
        for name in SETTING_FLAGS:
            added.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=_setting_option(name, repeat.get(name))))
            if name in on_off:
                added.append(inspect.Parameter(f"no_{name}", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=_off_option(name)))

        @functools.wraps(func)
        def command(*args: Any, **kwargs: Any) -> Any:
            flags = {name: kwargs.pop(name, None) for name in SETTING_FLAGS}
            for name in on_off:
                if kwargs.pop(f"no_{name}", False):
                    if flags[name]:
                        from dp_compact.cli.app import CommandError

                        flag = name.replace("_", "-")
                        raise CommandError(f"--{flag} and --no-{flag} together: give one")
                    flags[name] = False
            return func(*args, flags=flags, **kwargs)

        del command.__wrapped__  # Typer must see the new signature, not the function's own
        command.__signature__ = signature.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in (*own, *added)}
        return command  # type: ignore[return-value]

    return decorate
