"""Compaction policies for the replay (:mod:`dp_compact.replay`): dp_compact's planner and fixed rules.

Policies (``--policy``; the numbers of the presets, with their sources, are in docs/replay.md, "Policies"):

``dp``           the planner (DESIGN §2) with the current settings, consulted before every call
``seed``         the same with ``DP_MODEL=seed``
``never``        never compacts (an overflow forces a summary-only compaction, DESIGN §8)
``threshold:F[:x]``  compact when the prompt reaches F·M; keep a share x ≤ 1 of the live tokens or
                 a budget of x > 1 tokens (largest feasible tail within it); no x: summary only
``claude-code``  compact at M − min(max output, 20,000) − 13,000 tokens; summary only
``codex``        compact at 90 % of M; keep the most recent user messages up to 20,000 tokens
``openhands``    condense above 120 messages; keep the first 4, the summary and the last 55
``langchain``    summarize at 80 % of M; keep the last 20 messages
``clear:F[:K]``  when the prompt reaches F·M, clear every long tool result (DESIGN §9) but those of
                 the last K messages (default 3); on an overflow, a summary-only compaction
``anthropic-clear``  Anthropic context editing ``clear_tool_uses_20250919`` with its defaults (clear
                 at 100,000 input tokens, keep the last 3 tool uses) inside Claude Code (its
                 auto-compaction, summary only, at its own trigger)
``oracle``       the hindsight-optimal schedule (:mod:`dp_compact.replay.oracle`), computed per recording
``recorded``     what the recorded tool really did: its prompts and compactions as recorded
                 (:mod:`dp_compact.replay.recorded`; not among the defaults: the bill check runs it
                 on every session with usage records anyway)

``dp``, ``seed`` and ``oracle`` are :mod:`dp_compact.replay.planned`; the fixed rules are here.

Every fixed rule cuts only at feasible cuts (DESIGN §1); "summary only" drops every message but
the last API round (a tail is never empty, as for every feasible cut).

Each policy names the ``tool`` whose summarizer it stands for; the replay charges each
compaction that tool's summary size (:data:`SUMMARY_TOKENS`, DESIGN §6), unless ``DP_S`` / ``--s``
is given, which then applies to every policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dp_compact.core.cuts import ROLE_USER
from dp_compact.errors import SettingsError
from dp_compact.core.planner import EXTRACTIVE_SUMMARY_TOKENS
from dp_compact.measure.clearing import CLEAR_KEEP_TOOL_RESULTS
from dp_compact.replay.meter import CallContext, Clearing, Compaction, Policy, tail_cut_mask, tail_tokens
from dp_compact.replay.planned import ORACLE, Oracle, PlannerPolicy, Schedule
from dp_compact.replay.recorded import RECORDED, Recorded
from dp_compact.settings import Settings
from dp_compact.measure.windows import CLAUDE_CODE_BUFFER_TOKENS, CLAUDE_CODE_OUTPUT_RESERVE_TOKENS, CODEX_AUTO_COMPACT_RATIO

__all__ = [
    "ALL_POLICIES",
    "ANTHROPIC_CLEAR_KEEP_TOOL_USES",
    "ANTHROPIC_CLEAR_TRIGGER_TOKENS",
    "ClearOld",
    "CLAUDE_CODE_BUFFER_TOKENS",
    "CLAUDE_CODE_OUTPUT_RESERVE_TOKENS",
    "CODEX_AUTO_COMPACT_RATIO",
    "CODEX_USER_MESSAGE_MAX_TOKENS",
    "DEFAULT_POLICIES",
    "LANGCHAIN_MESSAGES_TO_KEEP",
    "LANGCHAIN_TRIGGER_RATIO",
    "OPENHANDS_KEEP_FIRST",
    "OPENHANDS_MAX_SIZE",
    "Codex",
    "LangChain",
    "Never",
    "OpenHands",
    "ORACLE",
    "Oracle",
    "PlannerPolicy",
    "RECORDED",
    "Recorded",
    "SUMMARY_TOKENS",
    "Schedule",
    "Threshold",
    "parse_policy",
]

# Claude Code's and Codex's triggers live with the window rules that read them (dp_compact.measure.windows).
#: Codex ``COMPACT_USER_MESSAGE_MAX_TOKENS`` (codex-rs/core/src/compact.rs).
CODEX_USER_MESSAGE_MAX_TOKENS = 20_000
#: OpenHands ``LLMSummarizingCondenser`` defaults ``max_size`` and ``keep_first`` (events).
OPENHANDS_MAX_SIZE = 120
OPENHANDS_KEEP_FIRST = 4
#: LangChain ``SummarizationMiddleware``: ``_DEFAULT_MESSAGES_TO_KEEP``; it has no default trigger,
#: so the preset takes its docstring's example ``("fraction", 0.8)``.
LANGCHAIN_MESSAGES_TO_KEEP = 20
LANGCHAIN_TRIGGER_RATIO = 0.8

#: Anthropic context editing, ``clear_tool_uses_20250919`` defaults: ``trigger`` 100,000 input
#: tokens, ``keep`` 3 tool uses (Anthropic docs, "Context editing"; typed in the anthropic SDK's
#: ``BetaClearToolUses20250919EditParam``).
ANTHROPIC_CLEAR_TRIGGER_TOKENS = 100_000
ANTHROPIC_CLEAR_KEEP_TOOL_USES = CLEAR_KEEP_TOOL_RESULTS

#: What ``dp-compact replay`` runs when no ``--policy`` is given.
DEFAULT_POLICIES = ("oracle", "dp", "seed", "never", "claude-code", "codex", "openhands", "langchain", "anthropic-clear")
#: Every policy name ``--policy`` takes (``threshold:F[:keep]`` apart).
ALL_POLICIES = (*DEFAULT_POLICIES, RECORDED)

#: Summary tokens each tool writes (DESIGN §6 "Summary size per policy, from evidence").
#: ``dp_compact``: the extractive summarizer's output measured with ``dp-compact compact --force
#: --dry-run --json`` on the 16 shared sessions (531-2,243 tokens, median 908: EXTRACTIVE_SUMMARY_TOKENS); an LLM summarizer
#: writes ``DP_S``. ``claude-code`` and ``codex``: the mean of the compaction summaries recorded in
#: real transcripts, counted as ``plan`` counts tokens and reported by ``dp-compact calibrate``
#: (calibration/results.json ``recorded_summaries``): Claude Code 5,870, 5,772 and 5,675 tokens (the
#: first in a Claude Code transcript, the others in a session converted from Claude Code to OpenAI chat)
#: (the first session's own ``compactMetadata`` says 6,977 tokens for the whole context after
#: the compaction); Codex 1,750 and 1,985. Tools without a recorded compaction (OpenHands,
#: LangChain, a generic threshold rule) are charged ``DP_S``.
SUMMARY_TOKENS: dict[str, int] = {"dp_compact": EXTRACTIVE_SUMMARY_TOKENS, "claude-code": 5_772, "codex": 1_868}


#: A recorded compaction below this share of the window is not taken as the tool's automatic
#: trigger (a Codex ``/compact`` typed by hand is not marked as such in the rollout).
OBSERVED_TRIGGER_MIN_SHARE = 0.5


def observed_trigger(ctx: CallContext, tool: str, rule: float) -> float:
    """A tool's trigger, tokens as its provider counts them: its documented ``rule``, or lower
    where the recording shows the tool firing earlier (DESIGN §6 "the presets act where the real
    tools acted").

    The real limit can differ from the documented default (Codex sets
    ``model_auto_compact_token_limit`` per model and per configuration): the smallest context
    at which the file records ``tool`` compacting automatically, when it is at least
    :data:`OBSERVED_TRIGGER_MIN_SHARE` of the window, caps the rule.
    """
    floor = OBSERVED_TRIGGER_MIN_SHARE * ctx.params.window
    seen = [x for name, x in ctx.rec.tool_compactions if name == tool and floor <= x]
    return min([rule, *seen])


def _summary_only(ctx: CallContext, carry: int | None = None, kept: frozenset[int] = frozenset()) -> Compaction | None:
    """Drop every live message but the last API round into one block (S tokens unless ``carry`` is given).

    None when the tail has no feasible cut (nothing can be dropped).
    """
    cut = _keep_at_least(ctx, 1)
    if cut is None:
        return None
    return Compaction(cut=cut, carry_tokens=ctx.params.s_tokens if carry is None else carry, kept=kept)


def _keep_at_least(ctx: CallContext, keep_messages: int) -> int | None:
    """The deepest feasible cut keeping at least ``keep_messages`` tail messages, or None."""
    live = ctx.live
    mask = tail_cut_mask(ctx.rec, live.start, live.end)
    cuts = live.start + np.flatnonzero(mask[: max(live.end - live.start - keep_messages + 1, 0)])
    return int(cuts[-1]) if cuts.size else None


@dataclass(frozen=True)
class Never:
    """Never compact; no fallback of its own: an overflow gets the meter's forced summary-only
    compaction (:func:`dp_compact.replay.context.forced_summary`)."""

    name: str = "never"
    fixed: bool = True
    tool: str = ""

    def before_call(self, ctx: CallContext) -> Compaction | None:
        return None

    def on_overflow(self, ctx: CallContext) -> Compaction | None:
        return None


@dataclass(frozen=True)
class Threshold:
    """Compact when the prompt reaches ``ratio`` · M (or M − ``reserve_tokens``); keep a share or budget.

    ``keep``: None = summary only; ≤ 1 = share of the live tokens; > 1 = tokens. The tail kept is
    the largest feasible one within the budget, else the smallest feasible one. ``counted``: the
    trigger reads the prompt as the provider counted it (:attr:`CallContext.counted_tokens`), as a
    tool that triggers on the provider's usage does (Claude Code); else the replayed prompt.
    """

    name: str
    ratio: float = 1.0
    keep: float | None = None
    reserve_tokens: int | None = None
    fixed: bool = True
    tool: str = ""
    counted: bool = False

    def threshold(self, ctx: CallContext) -> float:
        """The trigger, tokens (a tool's preset: no later than where the recording shows it fired)."""
        window = ctx.params.window
        rule = window - self.reserve_tokens if self.reserve_tokens is not None else self.ratio * window
        return observed_trigger(ctx, self.tool, rule) if self.counted else rule

    def before_call(self, ctx: CallContext) -> Compaction | None:
        size = ctx.counted_tokens if self.counted else ctx.prompt_tokens
        return self.compaction(ctx) if size >= self.threshold(ctx) else None

    def on_overflow(self, ctx: CallContext) -> Compaction | None:
        return self.compaction(ctx)

    def compaction(self, ctx: CallContext) -> Compaction | None:
        """Summary of the head, keeping the tail the ``keep`` rule allows (None: nothing to drop)."""
        live, rec = ctx.live, ctx.rec
        if live.end == live.start:
            return None
        cuts = live.start + np.flatnonzero(tail_cut_mask(rec, live.start, live.end))
        if self.keep is None or cuts.size == 0:
            return _summary_only(ctx)
        budget = self.keep * live.tokens(rec) if self.keep <= 1 else self.keep
        within = np.flatnonzero(tail_tokens(ctx, cuts) <= budget)
        cut = int(cuts[within[0]] if within.size else cuts[-1])
        return Compaction(cut=cut, carry_tokens=ctx.params.s_tokens)


def _claude_code() -> Threshold:
    """Claude Code's auto-compact: at M − min(max output, 20k) − 13k tokens of the context as the
    provider's usage counts it (its ``tokenCountWithEstimation``: the last usage plus estimates), summary only."""
    return Threshold(name="claude-code", reserve_tokens=CLAUDE_CODE_OUTPUT_RESERVE_TOKENS + CLAUDE_CODE_BUFFER_TOKENS,
                     tool="claude-code", counted=True)


@dataclass(frozen=True)
class Codex:
    """Codex: compact at 90 % of M into the summary plus the latest user messages (≤ 20,000 tokens).

    The trigger reads the context as the provider counted it (Codex compares the last
    ``token_count`` with its limit): :attr:`CallContext.counted_tokens`."""

    name: str = "codex"
    fixed: bool = True
    tool: str = "codex"

    def before_call(self, ctx: CallContext) -> Compaction | None:
        if ctx.counted_tokens >= observed_trigger(ctx, self.tool, CODEX_AUTO_COMPACT_RATIO * ctx.params.window):
            return self.on_overflow(ctx)
        return None

    def on_overflow(self, ctx: CallContext) -> Compaction | None:
        users = int(ctx.rec.user_prefix_tokens[ctx.live.end])  # every user message so far, newest kept first
        return _summary_only(ctx, ctx.params.s_tokens + min(users, CODEX_USER_MESSAGE_MAX_TOKENS), _kept_users(ctx))


def _kept_users(ctx: CallContext) -> frozenset[int]:
    """The user messages Codex keeps verbatim: the newest first, while they fit in its 20,000-token budget."""
    rec, end = ctx.rec, ctx.live.end
    users = np.flatnonzero(rec.arrays.roles[:end] == ROLE_USER)[::-1]
    within = np.cumsum(rec.message_tokens[users]) <= CODEX_USER_MESSAGE_MAX_TOKENS
    return frozenset(int(m) for m in users[within])


@dataclass(frozen=True)
class OpenHands:
    """OpenHands ``LLMSummarizingCondenser``: above ``max_size`` events keep the first ``keep_first``,
    the summary and ``max_size // 2 − keep_first − 1`` recent events (one event = one message here);
    on a context-window error, the same with ``len(view) // 2`` for ``max_size // 2``."""

    name: str = "openhands"
    max_size: int = OPENHANDS_MAX_SIZE
    keep_first: int = OPENHANDS_KEEP_FIRST
    fixed: bool = True
    tool: str = "openhands"

    def view_size(self, ctx: CallContext) -> int:
        """Events in the view: pinned, the summary, the tail."""
        live = ctx.live
        return live.pinned + (live.carry_tokens > 0) + live.end - live.start

    def before_call(self, ctx: CallContext) -> Compaction | None:
        return self.condense(ctx, self.max_size // 2) if self.view_size(ctx) > self.max_size else None

    def on_overflow(self, ctx: CallContext) -> Compaction | None:
        return self.condense(ctx, self.view_size(ctx) // 2)

    def condense(self, ctx: CallContext, target: int) -> Compaction | None:
        """Keep the first messages, a summary and ``target − keep_first − 1`` recent messages."""
        live = ctx.live
        pinned = min(self.keep_first, live.end) if live.start == 0 else live.pinned
        cut = _keep_at_least(ctx, max(target - self.keep_first - 1, 1))
        if cut is None or cut <= pinned:
            return None
        return Compaction(cut=cut, carry_tokens=ctx.params.s_tokens, pinned=pinned)


@dataclass(frozen=True)
class LangChain:
    """LangChain ``SummarizationMiddleware``: at ``trigger_ratio`` · M summarize all but the last ``keep_messages``."""

    name: str = "langchain"
    trigger_ratio: float = LANGCHAIN_TRIGGER_RATIO
    keep_messages: int = LANGCHAIN_MESSAGES_TO_KEEP
    fixed: bool = True
    tool: str = "langchain"

    def before_call(self, ctx: CallContext) -> Compaction | None:
        if ctx.prompt_tokens < self.trigger_ratio * ctx.params.window:
            return None
        cut = _keep_at_least(ctx, self.keep_messages)
        return None if cut is None else Compaction(cut=cut, carry_tokens=ctx.params.s_tokens)

    def on_overflow(self, ctx: CallContext) -> Compaction | None:
        return None  # the middleware does not react to a context-window error


@dataclass(frozen=True)
class ClearOld:
    """Clear old tool results (DESIGN §9) when the prompt reaches a trigger; summarize when it must.

    Trigger: ``ratio`` · M of the replayed prompt, or ``trigger_tokens`` of the prompt as the
    provider counted it (:attr:`CallContext.counted_tokens`; Anthropic's trigger counts input
    tokens). Depth: every long tool result but those of the last ``keep_messages`` messages, or
    (``keep_tool_uses``) but the last that many tool results of any size, as Anthropic's ``keep``
    counts tool uses. Nothing is done when the depth clears no new result. ``compact_reserve``:
    also compact, summary only, where Claude Code's auto-compaction fires (M − that many tokens,
    counted); on an overflow, a summary-only compaction (the tool's own summarization).
    """

    name: str
    ratio: float = 1.0
    keep_messages: int = CLEAR_KEEP_TOOL_RESULTS
    trigger_tokens: int | None = None
    keep_tool_uses: int | None = None
    compact_reserve: int | None = None
    fixed: bool = True
    tool: str = ""

    def depth(self, ctx: CallContext) -> int:
        """History index before which long tool results are cleared."""
        end = ctx.live.end
        if self.keep_tool_uses is None:
            return max(end - self.keep_messages, 0)
        if self.keep_tool_uses <= 0:
            return end
        holders = [i for i in range(end - 1, ctx.live.start - 1, -1) for _ in ctx.rec.messages[i].tool_results]
        return holders[self.keep_tool_uses - 1] if len(holders) >= self.keep_tool_uses else ctx.live.start

    def before_call(self, ctx: CallContext) -> Compaction | Clearing | None:
        if self.compact_reserve is not None:
            trigger = observed_trigger(ctx, self.tool, ctx.params.window - self.compact_reserve)
            if ctx.counted_tokens >= trigger:
                return _summary_only(ctx)
        if self.trigger_tokens is not None:
            fires = ctx.counted_tokens >= self.trigger_tokens
        else:
            fires = ctx.prompt_tokens >= self.ratio * ctx.params.window
        if not fires:
            return None
        depth = self.depth(ctx)
        return Clearing(depth) if depth > ctx.live.cleared_depth else None

    def on_overflow(self, ctx: CallContext) -> Compaction | None:
        return _summary_only(ctx)


def _anthropic_clear() -> ClearOld:
    """Anthropic's ``clear_tool_uses_20250919`` defaults inside Claude Code (its auto-compaction and summary size)."""
    return ClearOld(name="anthropic-clear", trigger_tokens=ANTHROPIC_CLEAR_TRIGGER_TOKENS,
                    keep_tool_uses=ANTHROPIC_CLEAR_KEEP_TOOL_USES,
                    compact_reserve=CLAUDE_CODE_OUTPUT_RESERVE_TOKENS + CLAUDE_CODE_BUFFER_TOKENS, tool="claude-code")


def _number(spec: str, text: str, rule: str) -> float:
    """A positive number from a policy spec, or SettingsError naming the spec."""
    try:
        value = float(text)
    except ValueError:
        raise SettingsError("--policy", spec, rule) from None
    if not value > 0:
        raise SettingsError("--policy", spec, rule)
    return value


def parse_policy(spec: str, settings: Settings) -> Policy:
    """The policy named by ``spec`` (see the module docstring).

    Raises
    ------
    SettingsError
        Unknown name, or a threshold spec whose numbers break ``0 < F ≤ 1``, ``x > 0``.
    """
    name, _, rest = spec.strip().partition(":")
    if name == ORACLE and not rest:
        return Oracle()
    if name == RECORDED and not rest:
        return Recorded()
    presets = {"never": Never, "claude-code": _claude_code, "codex": Codex, "openhands": OpenHands, "langchain": LangChain,
               "anthropic-clear": _anthropic_clear}
    if name in presets and not rest:
        return presets[name]()
    if name in ("dp", "seed") and not rest:
        return PlannerPolicy(settings if name == "dp" else settings.model_copy(update={"model": "seed"}), name=name)
    if name == "threshold" and rest:
        fraction, _, keep = rest.partition(":")
        ratio = _number(spec, fraction, "threshold:F[:keep] needs 0 < F <= 1")
        if ratio > 1:
            raise SettingsError("--policy", spec, "threshold:F[:keep] needs 0 < F <= 1")
        kept = _number(spec, keep, "keep must be a share 0 < x <= 1 or a token budget x > 1") if keep else None
        return Threshold(name=spec.strip(), ratio=ratio, keep=kept)
    if name == "clear" and rest:
        fraction, _, keep = rest.partition(":")
        ratio = _number(spec, fraction, "clear:F[:K] needs 0 < F <= 1")
        if ratio > 1:
            raise SettingsError("--policy", spec, "clear:F[:K] needs 0 < F <= 1")
        if keep and not keep.isdigit():
            raise SettingsError("--policy", spec, "clear:F[:K] needs K, the messages kept uncleared, a whole number >= 0")
        return ClearOld(name=spec.strip(), ratio=ratio, keep_messages=int(keep) if keep else CLEAR_KEEP_TOOL_RESULTS)
    known = ("oracle, dp, seed, never, threshold:F[:keep], clear:F[:K], claude-code, codex, openhands, langchain, "
             "anthropic-clear, recorded")
    raise SettingsError("--policy", spec, f"unknown policy; use one of {known}")

