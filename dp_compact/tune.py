"""``dp-compact tune``: the best compaction setting for the agent tool a user already runs, from
their own transcripts, with the saving measured on transcripts it was not chosen on.

Each supported tool has a compaction rule with one or two settings a user can change
(:data:`TOOLS`). :func:`tune` replays every transcript under the tool's rule at each setting of a
grid (the replay's accounting: cache reads and writes at the session's write lifetimes, idle
gaps, price tiers, lost information; :mod:`dp_compact.replay`), and reports dollars and
lost-information events per setting, the tool's default, the best setting, dp_compact's planner
and the hindsight optimum for scale, and the configuration lines that set the best one.

The saving is reported honestly: with three transcripts or more, each transcript's saving is
measured with the setting chosen on the *other* transcripts (leave-one-out), so the printed saving
is not tuned to the data it is measured on; with fewer, it says the evidence is thin and reports
the in-sample figure only.

The tools' rules and defaults (their sources):

- Claude Code: auto-compacts when the context reaches the window less its output reserve and a
  13,000-token buffer; ``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`` (percent of the window, 1-100) can
  only bring it earlier (``min(pct · window, default)``), as can ``CLAUDE_CODE_AUTO_COMPACT_WINDOW``
  (the window it compacts against; the lines to paste give both); summary only. Claude Code has
  no setting to compact when idle (an open request, anthropics/claude-code#66115), so none is tuned.
- Codex: ``model_auto_compact_token_limit`` (``~/.codex/config.toml``, or a ``[profiles.<name>]``
  table for one profile); default 90 % of the window; keeps the newest user messages up to
  20,000 tokens (codex-rs ``compact.rs``).
- Gemini CLI: ``model.compressionThreshold`` (``~/.gemini/settings.json``), share of the window,
  default 0.5 (``DEFAULT_COMPRESSION_TOKEN_THRESHOLD`` in ``chatCompressionService.ts``); keeps
  the newest 30 % of the history (``COMPRESSION_PRESERVE_THRESHOLD``).
- Kilo Code / Roo Code: ``autoCondenseContextPercent`` (settings, Context: "auto-condense
  threshold"), default 100; keeps the first message and the last 3 (``N_MESSAGES_TO_KEEP``).
- LangChain ``SummarizationMiddleware``: ``trigger=("fraction", F)`` and ``keep=("messages", n)``;
  no default trigger: the documentation's example (0.8, 20) stands for it.
- OpenHands ``LLMSummarizingCondenser``: ``max_size`` events and ``keep_first``; defaults 120 and 4.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dp_compact.errors import SettingsError
from dp_compact.measure.windows import CLAUDE_CODE_BUFFER_TOKENS, CLAUDE_CODE_OUTPUT_RESERVE_TOKENS
from dp_compact.replay.context import CallContext, Compaction
from dp_compact.replay.policies import (
    LANGCHAIN_MESSAGES_TO_KEEP,
    LANGCHAIN_TRIGGER_RATIO,
    OPENHANDS_KEEP_FIRST,
    OPENHANDS_MAX_SIZE,
    Codex,
    LangChain,
    OpenHands,
    Threshold,
    observed_trigger,
)
from dp_compact.replay.shell import DirectoryReplay
from dp_compact.settings import Settings

__all__ = ["MIN_TRANSCRIPTS", "TOOLS", "ToolRule", "TuneReport", "tune", "tune_report"]

#: Below this many transcripts, a held-back saving cannot be measured: the report says the evidence is thin.
MIN_TRANSCRIPTS = 3

#: Gemini CLI keeps the newest 30 % of the history (``COMPRESSION_PRESERVE_THRESHOLD``).
GEMINI_PRESERVE_SHARE = 0.3
#: Gemini CLI's default ``compressionThreshold`` (``DEFAULT_COMPRESSION_TOKEN_THRESHOLD``).
GEMINI_DEFAULT_THRESHOLD = 0.5
#: Roo Code / Kilo Code keep the last 3 messages besides the first (``N_MESSAGES_TO_KEEP``).
ROO_MESSAGES_TO_KEEP = 3


@dataclass(frozen=True)
class ClaudeCodeAt(Threshold):
    """Claude Code's auto-compact with ``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`` = ``percent`` (None: unset).

    The trigger is ``min(percent / 100 · (M − output reserve), M − output reserve − buffer)``
    tokens of the context as the provider counted it; summary only.
    """

    percent: float | None = None

    def threshold(self, ctx: CallContext) -> float:
        effective = ctx.params.window - CLAUDE_CODE_OUTPUT_RESERVE_TOKENS
        default = effective - CLAUDE_CODE_BUFFER_TOKENS
        if self.percent is None:  # unset: the replay's claude-code preset (where the recording shows it firing earlier, there)
            return observed_trigger(ctx, "claude-code", default)
        return min(self.percent / 100 * effective, default)


@dataclass(frozen=True)
class CodexAt(Codex):
    """Codex with ``model_auto_compact_token_limit`` at ``share`` of the window (None: its default, 90 %)."""

    share: float | None = None

    def before_call(self, ctx: CallContext) -> Compaction | None:
        if self.share is None:  # its default: the replay's codex preset, as the recording shows it firing
            return Codex.before_call(self, ctx)
        return self.on_overflow(ctx) if ctx.counted_tokens >= self.share * ctx.params.window else None


@dataclass(frozen=True)
class KeepLast(LangChain):
    """Summarize all but the last ``keep_messages`` at ``trigger_ratio`` · M; on a context-window
    error the same (Roo Code / Kilo Code condense, then retry)."""

    def on_overflow(self, ctx: CallContext) -> Compaction | None:
        return LangChain.before_call(self, ctx) or _any_cut(self, ctx)


def _any_cut(policy: LangChain, ctx: CallContext) -> Compaction | None:
    """The same rule keeping a single message when the context is over the window whatever the trigger."""
    return LangChain(name=policy.name, trigger_ratio=0.0, keep_messages=1, tool=policy.tool).before_call(ctx)


@dataclass(frozen=True)
class ToolRule:
    """One agent tool's compaction rule, its settings grid and where the user sets them.

    Attributes
    ----------
    name : str
        ``--tool`` value.
    setting : str
        What the user changes (a key or an environment variable).
    grid : tuple
        Settings tried; each is a value or a tuple of values (two settings).
    default : object
        The tool's own default, one of ``grid``.
    policy : callable
        ``policy(value) -> Policy`` for the replay.
    label : callable
        ``label(value) -> str`` as printed.
    config : callable
        ``config(value, window) -> list[str]``: the lines to paste (file and key, or the
        variable); ``window`` is the transcripts' median context window, tokens.
    transcripts : str
        Where the tool keeps its transcripts ("" when it keeps none by default).
    """

    name: str
    setting: str
    grid: tuple[Any, ...]
    default: Any
    policy: Callable[[Any], Any]
    label: Callable[[Any], str]
    config: Callable[[Any, int], list[str]]
    transcripts: str = ""


def _percent(value: float | None) -> str:
    return "unset" if value is None else f"{value:g} %"


TOOLS: dict[str, ToolRule] = {
    rule.name: rule
    for rule in (
        ToolRule(
            "claude-code", "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE", (None, 95, 90, 85, 80, 75, 70, 65, 60, 55, 50, 45, 40, 35, 30, 25, 20, 15, 10), None,
            lambda v: ClaudeCodeAt(name=f"claude-code@{_percent(v)}", tool="claude-code", counted=True, percent=v),
            _percent,
            lambda v, window: ["unset CLAUDE_AUTOCOMPACT_PCT_OVERRIDE (or remove it from ~/.claude/settings.json \"env\")"] if v is None else [
                f"export CLAUDE_AUTOCOMPACT_PCT_OVERRIDE={v:g}",
                f"or in ~/.claude/settings.json: {{\"env\": {{\"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE\": \"{v:g}\"}}}}",
                f"(the same trigger on a {window:,}-token window: CLAUDE_CODE_AUTO_COMPACT_WINDOW="
                f"{round(v / 100 * (window - CLAUDE_CODE_OUTPUT_RESERVE_TOKENS) + CLAUDE_CODE_OUTPUT_RESERVE_TOKENS + CLAUDE_CODE_BUFFER_TOKENS, -3):.0f})",
            ],
            "~/.claude/projects/<project>/*.jsonl",
        ),
        ToolRule(
            "codex", "model_auto_compact_token_limit", (None, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.25, 0.2, 0.15, 0.1), None,
            lambda v: CodexAt(name=f"codex@{'default' if v is None else f'{v:.0%}'}", share=v),
            lambda v: "default (90 % of the window)" if v is None else f"{v:.0%} of the window",
            lambda v, window: ["remove model_auto_compact_token_limit from ~/.codex/config.toml"] if v is None else [
                f"~/.codex/config.toml: model_auto_compact_token_limit = {round(v * window, -3):.0f}"
                f"  ({v:.0%} of the {window:,}-token window; scale it to your model's)",
                "(or in a [profiles.<name>] table to set it for one profile only)",
            ],
            "~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl",
        ),
        ToolRule(
            "gemini-cli", "model.compressionThreshold", (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.15, 0.1), GEMINI_DEFAULT_THRESHOLD,
            lambda v: Threshold(name=f"gemini-cli@{v:g}", ratio=v, keep=GEMINI_PRESERVE_SHARE, tool="gemini-cli"),
            lambda v: f"{v:g}",
            lambda v, _: [f"~/.gemini/settings.json: {{\"model\": {{\"compressionThreshold\": {v:g}}}}}"],
            "~/.gemini/tmp/<project hash>/chats/*.json",
        ),
        ToolRule(
            "kilo", "autoCondenseContextPercent", (100, 90, 80, 70, 60, 50, 40, 30, 20, 10), 100,
            lambda v: KeepLast(name=f"kilo@{v:g}%", trigger_ratio=v / 100, keep_messages=ROO_MESSAGES_TO_KEEP, tool="kilo"),
            lambda v: f"{v:g} %",
            lambda v, _: [f"Settings > Context > auto-condense threshold: {v:g} % (autoCondenseContextPercent = {v:g})"],
        ),
        ToolRule(
            "langchain", "SummarizationMiddleware trigger, keep",
            tuple((f, k) for f in (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1) for k in (5, 10, 20, 40)),
            (LANGCHAIN_TRIGGER_RATIO, LANGCHAIN_MESSAGES_TO_KEEP),
            lambda v: LangChain(name=f"langchain@{v[0]:g}/{v[1]}", trigger_ratio=v[0], keep_messages=v[1]),
            lambda v: f"fraction {v[0]:g}, keep {v[1]} messages",
            lambda v, _: [f"SummarizationMiddleware(model=..., trigger=(\"fraction\", {v[0]:g}), keep=(\"messages\", {v[1]}))"],
        ),
        ToolRule(
            "openhands", "condenser max_size, keep_first",
            tuple((m, k) for m in (240, 160, 120, 80, 60, 40) for k in (1, 4)), (OPENHANDS_MAX_SIZE, OPENHANDS_KEEP_FIRST),
            lambda v: OpenHands(name=f"openhands@{v[0]}/{v[1]}", max_size=v[0], keep_first=v[1]),
            lambda v: f"max_size {v[0]}, keep_first {v[1]}",
            lambda v, _: ["config.toml:", "[condenser]", "type = \"llm\"", f"max_size = {v[0]}", f"keep_first = {v[1]}"],
        ),
    )
}
TOOLS["roo"] = TOOLS["kilo"]


@dataclass(frozen=True)
class TuneReport:
    """What :func:`tune` found.

    Attributes
    ----------
    tool : str
    settings : tuple[str, ...]
        Labels of the settings tried, grid order.
    usd : ndarray[float64], shape (S, T)
        Total $ of each setting (rows) on each transcript (columns).
    refetches : ndarray[int64], shape (S, T)
        Lost-information events (dropped messages a later call used again).
    compactions : ndarray[int64], shape (S, T)
    default, best : int
        Row of the tool's default and of the cheapest setting over all transcripts.
    dp_usd, oracle_usd : ndarray[float64], shape (T,)
        dp_compact's planner and the hindsight optimum on each transcript, for scale.
    transcripts : tuple[str, ...]
    held_back_usd : float or None
        Sum over transcripts of (default $ − $ of the setting chosen on the other transcripts):
        the saving measured on data it was not chosen on; None with fewer than :data:`MIN_TRANSCRIPTS`.
    held_back_choices : tuple[int, ...]
        Row chosen for each transcript when it was held back (empty when not measured).
    recommended : int
        Row to use: the best when its saving held up on held-back transcripts (or, with thin
        evidence, when it is cheapest in sample), else the default.
    config : tuple[str, ...]
        Lines that set the recommended setting (empty when it is the default).
    skipped : tuple[tuple[str, str], ...]
        ``(path, reason)`` of transcripts that could not be read.
    """

    tool: str
    settings: tuple[str, ...]
    usd: np.ndarray
    refetches: np.ndarray
    compactions: np.ndarray
    default: int
    best: int
    dp_usd: np.ndarray
    oracle_usd: np.ndarray
    transcripts: tuple[str, ...]
    held_back_usd: float | None
    held_back_choices: tuple[int, ...] = ()
    recommended: int = 0
    config: tuple[str, ...] = ()
    skipped: tuple[tuple[str, str], ...] = field(default=())

    @property
    def totals(self) -> np.ndarray:
        """$ per setting over all transcripts, shape (S,)."""
        return self.usd.sum(axis=1)

    @property
    def verdict(self) -> str:
        """One sentence: what to do."""
        if self.held_back_usd is None:
            thin = (f"the evidence is thin: {len(self.transcripts)} transcript(s), fewer than {MIN_TRANSCRIPTS}, so no saving"
                    " could be measured on transcripts the setting was not chosen on")
            if self.best == self.default:
                return f"the default is already the cheapest setting here; {thin}"
            return f"{self.settings[self.best]} is cheapest on these transcripts; {thin}"
        if self.best == self.default or self.held_back_usd < 0.005:
            if self.held_back_usd > -0.005:
                return "the default is already best: no setting chosen on the other transcripts did better on the ones held back"
            return (f"the default is already best: the settings chosen on the other transcripts cost ${-self.held_back_usd:.2f}"
                    " more than the default on the transcripts held back (keep the default)")
        share = self.held_back_usd / float(self.usd[self.default].sum())
        text = (f"set {self.settings[self.best]}: chosen on the other transcripts each time, it saved ${self.held_back_usd:.2f}"
                f" ({share:.1%}) against the default on the transcripts held back")
        per = [float(self.usd[self.default, t] - self.usd[c, t]) for t, c in enumerate(self.held_back_choices)]
        top = int(np.argmax(per))
        if per[top] > 0.5 * self.held_back_usd:
            text += f"; {per[top] / self.held_back_usd:.0%} of it on one transcript ({Path(self.transcripts[top]).name}): check it is typical of yours"
        return text

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready report ($, counts; see docs/tune.md)."""
        return {
            "tool": self.tool,
            "transcripts": list(self.transcripts),
            "settings": [
                {"setting": label, "usd": float(self.usd[i].sum()), "usd_per_transcript": self.usd[i].tolist(),
                 "refetches": int(self.refetches[i].sum()), "compactions": int(self.compactions[i].sum()),
                 "default": i == self.default, "best": i == self.best}
                for i, label in enumerate(self.settings)
            ],
            "default": self.settings[self.default],
            "best": self.settings[self.best],
            "recommended": self.settings[self.recommended],
            "dp_usd": float(self.dp_usd.sum()),
            "oracle_usd": float(self.oracle_usd.sum()),
            "split": "leave-one-out: each transcript's saving uses the setting chosen on the others",
            "held_back_saving_usd": self.held_back_usd,
            "held_back_choices": [self.settings[i] for i in self.held_back_choices],
            "verdict": self.verdict,
            "config": list(self.config),
            "skipped": [{"path": p, "reason": r} for p, r in self.skipped],
        }


def held_back_saving(usd: np.ndarray, default: int) -> tuple[float | None, tuple[int, ...]]:
    """Leave-one-out saving against the default, $, and the row chosen for each held-back column.

    For each transcript ``t`` (column of ``usd``, shape (S, T)), the setting is the cheapest over
    the other transcripts (ties: the earlier row, the grid's order); its saving on ``t`` is
    ``usd[default, t] − usd[chosen, t]``. None when T < :data:`MIN_TRANSCRIPTS`.
    """
    n = usd.shape[1]
    if n < MIN_TRANSCRIPTS:
        return None, ()
    total = usd.sum(axis=1)
    choices = tuple(int(np.argmin(total - usd[:, t])) for t in range(n))
    return float(sum(usd[default, t] - usd[c, t] for t, c in enumerate(choices))), choices


def tune_report(tool: ToolRule, replayed: DirectoryReplay) -> TuneReport:
    """The :class:`TuneReport` of a folder replayed under ``tool``'s grid, then ``dp`` and ``oracle``
    (the order :func:`tune` replays them in)."""
    n_settings = len(tool.grid)
    usd = np.array([[r.total_usd for r in s.results[:n_settings]] for s in replayed.sessions]).T
    refetches = np.array([[r.refetches for r in s.results[:n_settings]] for s in replayed.sessions], dtype=np.int64).T
    compactions = np.array([[r.compactions for r in s.results[:n_settings]] for s in replayed.sessions], dtype=np.int64).T
    default = tool.grid.index(tool.default)
    best = int(np.argmin(usd.sum(axis=1)))
    held, choices = held_back_saving(usd, default)
    window = int(np.median([s.params.window for s in replayed.sessions]))
    recommended = best if (held is None or held >= 0.005) else default
    return TuneReport(
        tool=tool.name, settings=tuple(map(tool.label, tool.grid)), usd=usd, refetches=refetches, compactions=compactions,
        default=default, best=best, recommended=recommended,
        dp_usd=np.array([s.results[n_settings].total_usd for s in replayed.sessions]),
        oracle_usd=np.array([s.results[n_settings + 1].total_usd for s in replayed.sessions]),
        transcripts=tuple(s.path for s in replayed.sessions), held_back_usd=held, held_back_choices=choices,
        config=tuple(tool.config(tool.grid[recommended], window)) if recommended != default else (),
        skipped=tuple(replayed.skipped),
    )


def tune(
    paths: str | Path | Sequence[str | Path], tool: str, settings: Settings, *, workers: int | None = None,
    progress: Callable[[int, int, str], None] | None = None, use_cache: bool = True,
) -> TuneReport:
    """Replay the transcripts under ``paths`` with ``tool``'s rule at every setting of its grid.

    Parameters
    ----------
    paths : str, Path or sequence of them
        A folder (every session file under it), files, or fsspec URLs.
    tool : str
        A key of :data:`TOOLS`.
    settings : Settings
        Prices, window and the replay's options (``DP_*``).
    workers, progress
        As :func:`dp_compact.fleet.jobs.replay_fleet` (``progress(done, total, path)`` per transcript).

    Returns
    -------
    TuneReport

    Raises
    ------
    SettingsError
        An unknown tool.
    SessionError
        No readable transcript under ``paths``.
    """
    from dp_compact.fleet.jobs import replay_fleet
    from dp_compact.replay.planned import Oracle, PlannerPolicy

    if tool not in TOOLS:
        raise SettingsError("--tool", tool, f"unknown tool; use one of {', '.join(sorted(TOOLS))}")
    rule = TOOLS[tool]
    policies = (*map(rule.policy, rule.grid), PlannerPolicy(settings, name="dp"), Oracle())
    replayed = replay_fleet(paths, settings, policies, workers=workers, progress=progress, use_cache=use_cache)  # type: ignore[arg-type]
    return tune_report(rule, replayed)
