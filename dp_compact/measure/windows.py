"""The context window M of a session, from evidence (DESIGN §6 "Window per session, from evidence").

One function, :func:`context_window`, gives the window that plan, curve, timeline and replay use
(through :func:`dp_compact.prepare.choose_prices`), with one sentence saying where it came from.
Precedence, first that applies:

1. the explicit setting (``DP_MAX_CONTEXT_TOKENS`` / ``--max-context-tokens``);
2. the window the session records (Codex ``model_context_window``);
3. a recorded auto-compaction at X tokens: among the known windows of the model that hold X,
   the one for which the tool's own rule fires nearest X (Claude Code compacts at
   M - min(max output, 20,000) - 13,000, Codex at 90 % of M);
4. the tool's default: Claude Code runs Claude models at 200,000 tokens;
5. the price database's window for the model (or the pricing profile's).

Except for 1., the largest prompt the provider accepted (max ``Usage.prompt_tokens``) bounds the
window from below: a smaller window is impossible, so the next known window of the model that
holds the prompt is taken instead, or the prompt itself rounded up to ``WINDOW_ROUNDING_TOKENS``
when none does. A Claude Code session on a 1M-token window therefore shows it by its prompts.
A prompt that no known window of the model holds is believed only when it is plausible: at most
:data:`MAX_PLAUSIBLE_WINDOW_TOKENS`, and either at most :data:`PLAUSIBLE_JUMP` times the window
the evidence gave, or not one record alone (at least :data:`CORROBORATING_PROMPTS` prompts above
every known window, within a factor :data:`CORROBORATION_RATIO` of it): a single corrupted usage
record (a cache write of 5,000,000 in a 31-token conversation) no longer sets the window; the
sentence says it was not believed.

Trade-offs: a tool's rule is matched to the nearest known window rather than solved for M, since
the recorded size overshoots the trigger by whatever the last call added (Claude Code's posthog
session fired at 167,766 tokens, 766 above its 200,000-token trigger). A manual compaction says
nothing about the window (only about a lower bound, which the accepted prompts already give).
A window rounded up from a prompt is only a lower bound: for a model no price list has,
:func:`dp_compact.prepare.choose_prices` asks for the window instead of planning on it (shared case 25).

Pure: values in, values out; no files, settings or printing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache

from dp_compact.conversation import RecordedCompaction, Session
from dp_compact.measure.columns import usage_columns

__all__ = [
    "CLAUDE_CODE_BUFFER_TOKENS",
    "CLAUDE_CODE_DEFAULT_WINDOW_TOKENS",
    "CLAUDE_CODE_OUTPUT_RESERVE_TOKENS",
    "CLAUDE_WINDOWS",
    "CODEX_AUTO_COMPACT_RATIO",
    "CORROBORATING_PROMPTS",
    "CORROBORATION_RATIO",
    "MAX_PLAUSIBLE_WINDOW_TOKENS",
    "PLAUSIBLE_JUMP",
    "WINDOW_NOTE_PREFIX",
    "WINDOW_ROUNDING_TOKENS",
    "claude_code_trigger_tokens",
    "codex_trigger_tokens",
    "context_window",
    "known_windows",
    "largest_accepted_prompt",
    "window_note",
]

#: Claude Code ``AUTOCOMPACT_BUFFER_TOKENS`` (src/services/compact/autoCompact.ts): the auto-compact
#: threshold lies this far below the effective window.
CLAUDE_CODE_BUFFER_TOKENS = 13_000
#: Claude Code ``MAX_OUTPUT_TOKENS_FOR_SUMMARY`` (autoCompact.ts): the effective window is the
#: window minus min(the model's max output tokens, this).
CLAUDE_CODE_OUTPUT_RESERVE_TOKENS = 20_000
#: Codex ``auto_compact_token_limit`` default: context window · 9 / 10 (codex-rs/protocol/src/openai_models.rs).
CODEX_AUTO_COMPACT_RATIO = 0.9
#: Claude Code's window for Claude models unless the session shows more (the 1M window is opt-in).
CLAUDE_CODE_DEFAULT_WINDOW_TOKENS = 200_000
#: Windows Claude models are offered with, tokens: 200K standard, 1M (Sonnet 4 and later, Opus 4.6
#: and later) on request (Anthropic, "Context windows").
CLAUDE_WINDOWS = (200_000, 1_000_000)
#: A window inferred from a prompt no known window holds is that prompt rounded up to this, tokens.
WINDOW_ROUNDING_TOKENS = 1_000
#: The largest window believed from evidence or accepted as a setting: 100M tokens, the per-call
#: bound of :data:`dp_compact.sessions.usage.MAX_TOKENS_PER_CALL` (ten times the largest window a
#: model is served with, Llama 4 Scout's 10M; the largest ever announced, Magic's LTM-2-mini).
MAX_PLAUSIBLE_WINDOW_TOKENS = 100_000_000
#: A prompt up to this multiple of the evidenced window is believed on its own (a model served with
#: a larger window than listed: gpt-4o prompts of 152k on a listed 128k); beyond it, one record may be corrupt.
PLAUSIBLE_JUMP = 2.0
#: Prompts above every known window needed before a far larger one sets the window.
CORROBORATING_PROMPTS = 2
#: A corroborating prompt is at least this share of the largest one (a session grows gradually:
#: two prompts of 210k and 5M say nothing about a 5M window).
CORROBORATION_RATIO = 0.5
#: Every note :func:`window_note` writes starts so.
WINDOW_NOTE_PREFIX = "context window "

#: Max output tokens of Claude models under CLAUDE_CODE_OUTPUT_RESERVE_TOKENS (Anthropic models
#: overview); every Claude 3.7 and 4.x model allows at least 32,000, so the reserve is 20,000.
_CLAUDE_MAX_OUTPUT_TOKENS = (("claude-3-5", 8_192), ("claude-3-opus", 4_096), ("claude-3-sonnet", 4_096), ("claude-3-haiku", 4_096))
#: Other windows a model family is offered with besides the price database's, tokens, by name prefix:
#: GPT-5 models take 400,000 tokens of which 272,000 input (OpenAI model pages); Gemini 1M, and
#: 2,097,152 for Gemini 1.5 Pro (Google model pages).
_OTHER_WINDOWS = (("gpt-5", (272_000, 400_000)), ("gemini", (1_048_576, 2_097_152)))
_TOOL_NAMES = {"claude-code": "Claude Code", "codex": "Codex"}


def _bare(model: str | None) -> str:
    """Model name in lower case without a provider prefix (``anthropic/``, ``us.anthropic.``)."""
    name = (model or "").strip().lower().rsplit("/", 1)[-1]
    return name[name.index("claude"):] if "claude" in name else name


def _is_claude(model: str | None) -> bool:
    """True for a Claude model name."""
    return _bare(model).startswith("claude")


def claude_code_trigger_tokens(window: int, model: str | None = None) -> int:
    """Prompt size at which Claude Code auto-compacts in ``window`` tokens (autoCompact.ts).

    ``window - min(max output of the model, 20,000) - 13,000``, in tokens.

    >>> claude_code_trigger_tokens(200_000, "claude-opus-4-7")
    167000
    """
    name = _bare(model)
    max_output = next((n for prefix, n in _CLAUDE_MAX_OUTPUT_TOKENS if name.startswith(prefix)), CLAUDE_CODE_OUTPUT_RESERVE_TOKENS)
    return window - min(max_output, CLAUDE_CODE_OUTPUT_RESERVE_TOKENS) - CLAUDE_CODE_BUFFER_TOKENS


def codex_trigger_tokens(window: int) -> int:
    """Prompt size at which Codex auto-compacts in ``window`` tokens: 90 % of it, rounded down.

    >>> codex_trigger_tokens(258_400)
    232560
    """
    return math.floor(CODEX_AUTO_COMPACT_RATIO * window)


@lru_cache(maxsize=64, typed=True)
def known_windows(model: str | None, database_window: int) -> tuple[int, ...]:
    """The windows ``model`` is known to run with, ascending, tokens (made once per model and window
    of each type: a plan of every call asks for its model's).

    Claude: :data:`CLAUDE_WINDOWS`. Others: ``database_window`` and the family's alternatives
    (GPT-5: 272,000 and 400,000; Gemini: 1,048,576 and 2,097,152).

    >>> known_windows("claude-opus-4-7", 1_000_000), known_windows("gpt-4o", 128_000)
    ((200000, 1000000), (128000,))
    """
    if _is_claude(model):
        return CLAUDE_WINDOWS
    name = _bare(model)
    others = next((sizes for prefix, sizes in _OTHER_WINDOWS if name.startswith(prefix)), ())
    return tuple(sorted({database_window, *others}))


def largest_accepted_prompt(session: Session | None) -> int | None:
    """The largest prompt the provider accepted, tokens (max ``Usage.prompt_tokens``); None without usage."""
    if session is None or not session.usage:
        return None
    columns = usage_columns(session.usage)
    if columns is None:
        return max(u.prompt_tokens for u in session.usage)
    prompts = columns.prompt_tokens  # int64, one per record: its largest entry by argmax, as max gives it
    return int(prompts[prompts.argmax()])


def _is_claude_code(session: Session) -> bool:
    """A Claude Code transcript, or a conversion of one (it records Claude Code compactions)."""
    return session.format == "claude_code" or any(r.tool == "claude-code" for r in session.compaction_records)


def _tool_trigger(record: RecordedCompaction, window: int, model: str | None) -> int | None:
    """Where ``record``'s tool auto-compacts in ``window`` tokens (None for a tool without a known rule)."""
    if record.tool == "claude-code":
        return claude_code_trigger_tokens(window, model)
    if record.tool == "codex":
        return codex_trigger_tokens(window)
    return None


def _rule_text(record: RecordedCompaction, window: int, trigger: int, model: str | None) -> str:
    """The tool's rule written out for ``window``."""
    if record.tool == "codex":
        return f"{CODEX_AUTO_COMPACT_RATIO:.0%} of {window:,} = {trigger:,}"
    reserve = window - trigger - CLAUDE_CODE_BUFFER_TOKENS
    return f"{window:,} - {reserve:,} - {CLAUDE_CODE_BUFFER_TOKENS:,} = {trigger:,}"


def _from_auto_compaction(records: Iterable[RecordedCompaction], model: str | None, sizes: tuple[int, ...]) -> tuple[int, str] | None:
    """The window the last recorded auto-compaction of a known tool implies, if any (module rule 3)."""
    usable = [r for r in records if r.trigger == "auto" and r.pre_tokens and r.tool in _TOOL_NAMES]
    if not usable:
        return None
    record = usable[-1]
    x = int(record.pre_tokens or 0)
    fitting = [(abs(t - x), m, t) for m in sizes if m >= x and (t := _tool_trigger(record, m, model)) is not None]
    if not fitting:
        return None
    _, window, trigger = min(fitting)
    where = f" on line {record.line}" if record.line else ""
    return window, (
        f"the known window whose {_TOOL_NAMES[record.tool]} trigger is nearest its auto-compaction at {x:,} tokens{where}:"
        f" {_rule_text(record, window, trigger, model)}"
    )


def _evidence(
    session: Session | None, database_window: int, database_name: str | None, sizes: tuple[int, ...], database_source: str | None = None
) -> tuple[int, str]:
    """Window and source by module rules 2-5, before the accepted-prompt bound."""
    model = session.model if session is not None else None
    if session is not None and session.context_window:
        return session.context_window, f"the window recorded in the session ({session.window_source or 'the file states it'})"
    if session is not None and (found := _from_auto_compaction(session.compaction_records, model, sizes)) is not None:
        return found
    if session is not None and _is_claude_code(session) and (model is None or _is_claude(model)):
        converted = "" if session.format == "claude_code" else " (the file records Claude Code's compactions: a converted Claude Code session)"
        return CLAUDE_CODE_DEFAULT_WINDOW_TOKENS, f"Claude Code's default window for {model or 'Claude models'}{converted}"
    if database_source:
        return database_window, database_source
    return database_window, f"the price database's window for {database_name}" if database_name else "the price database's window"


def context_window(
    session: Session | None, database_window: int, *, explicit: int | None = None, database_name: str | None = None,
    database_source: str | None = None,
) -> tuple[int, str]:
    """The context window M of ``session`` and where it comes from (module docstring, DESIGN §6).

    Parameters
    ----------
    session : Session or None
        Its ``context_window``, ``compaction_records``, ``usage``, ``model`` and ``format`` are
        the evidence; None gives the database window (or ``explicit``).
    database_window : int
        The window of the pricing profile or price-database model in force, tokens.
    explicit : int, optional
        ``DP_MAX_CONTEXT_TOKENS`` / ``--max-context-tokens``, tokens: wins over everything.
    database_name : str, optional
        The profile or model ``database_window`` belongs to, named in the sentence.
    database_source : str, optional
        Where ``database_window`` comes from when the price database does not list it (an
        assumed window, :attr:`~dp_compact.pricing.Prices.window_source`): the sentence then.

    Returns
    -------
    (int, str)
        The window in tokens, and one sentence saying where it came from.

    Raises
    ------
    ValueError
        If ``database_window`` or ``explicit`` is not a positive number of tokens.

    Examples
    --------
    >>> context_window(None, 128_000, database_name="gpt-4o")
    (128000, "the price database's window for gpt-4o")
    """
    if database_window <= 0 or (explicit is not None and explicit <= 0):
        raise ValueError(f"a window must be > 0 tokens, not {explicit if explicit is not None else database_window!r}")
    if explicit is not None:
        return explicit, "set by DP_MAX_CONTEXT_TOKENS / --max-context-tokens"
    model = session.model if session is not None else None
    sizes = known_windows(model, database_window)
    window, source = _evidence(session, database_window, database_name, sizes, database_source)
    prompt = largest_accepted_prompt(session)
    if prompt is None or prompt <= window:
        return window, source
    below = f"{source} ({window:,}) is below a prompt the provider accepted ({prompt:,} tokens)"
    larger = [m for m in sizes if m >= prompt]
    if larger:
        return larger[0], f"{below}: the next known window of {model or 'the model'}"
    assert session is not None  # a prompt was found in its usage
    largest = max(session.usage, key=lambda u: u.prompt_tokens)
    close = sum(1 for u in session.usage if u.prompt_tokens >= max(CORROBORATION_RATIO * prompt, window + 1))
    if prompt > MAX_PLAUSIBLE_WINDOW_TOKENS or (prompt > PLAUSIBLE_JUMP * window and close < CORROBORATING_PROMPTS):
        where = f" on line {largest.line}" if largest.line else ""
        why = f"above {MAX_PLAUSIBLE_WINDOW_TOKENS:,}, the most any model accepts" if prompt > MAX_PLAUSIBLE_WINDOW_TOKENS else (
            f"more than {PLAUSIBLE_JUMP:g} times that window on one usage record alone, which no other prompt comes near")
        return window, f"{source}; a prompt of {prompt:,} tokens{where} above every known window of {model or 'the model'} is not believed ({why})"
    rounded = -(-prompt // WINDOW_ROUNDING_TOKENS) * WINDOW_ROUNDING_TOKENS
    return rounded, f"{below} and no known window of {model or 'the model'} holds it: that prompt rounded up"


def window_note(window: int, source: str) -> str:
    """The note every planning command shows: ``"context window N tokens: <source>"``.

    >>> window_note(200_000, "Claude Code's default window for claude-opus-4-7")
    "context window 200,000 tokens: Claude Code's default window for claude-opus-4-7"
    """
    return f"{WINDOW_NOTE_PREFIX}{window:,} tokens: {source}"


