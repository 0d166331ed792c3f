"""NetBenefit(k) and its five terms against k, for plans of one session (``dp-compact curve``).

Draws only what the plans hold; the plans are made by :func:`dp_compact.api.curve_plans`.
Artists that tests and notebooks look up carry a ``gid``: ``net:<label>``,
``term:<name>:<label>``, ``chosen:<label>``, ``min_keep``, ``force_threshold``
(``window_exceeded:<profile>`` when the context is over that profile's window), ``context``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dp_compact.core.benefit import TERM_LABELS
from dp_compact.figures.base import COLORS, new_figure, thousands
from dp_compact.core.planner import Plan

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["benefit_figure", "plan_label", "plan_values"]

#: The signs of TERM_LABELS as a figure prints them.
_SIGNS = {"+": "+", "-": "−"}


def plan_label(plan: Plan) -> str:
    """``profile · model`` of a plan (its legend entry)."""
    return f"{plan.prices.name} · {plan.settings['model']}"


def _draw_net(ax: Axes, plans: Sequence[Plan]) -> None:
    """NetBenefit per plan, feasible cuts as dots, the chosen cut as a star."""
    for p in plans:
        if p.benefit is None or p.benefit.cut.size == 0:
            continue
        label, color = plan_label(p), _color(plans, p)
        k = p.n_messages - p.benefit.cut
        style = "--" if p.settings["model"] == "seed" else "-"
        if p.decision == "clear" and p.clearing is not None:
            verdict = f"clear old tool results before message {p.clearing['depth']} ({p.rule})"
        else:
            verdict = f"compact, keep k = {p.k} ({p.rule})" if p.decision == "compact" else f"keep all ({p.rule})"
        values = plan_values(p)
        what = "saving over the best schedule that waits" if p.lookahead_usd is not None else "NetBenefit"
        (line,) = ax.plot(k, values, style, color=color, lw=1.8, marker=".", ms=3.5, label=f"{label} ({what}): {verdict}")
        line.set_gid(f"net:{label}")
        at = _chosen_index(p)
        if at is not None and np.isfinite(values[at]):
            filled = p.decision == "compact"
            marker = "D" if p.settings["model"] == "seed" else "*"
            (star,) = ax.plot(k[at], values[at], marker, ms=17 if marker == "*" else 10, color=color if filled else "white",
                              mec="black", mew=1.2, zorder=5)
            star.set_gid(f"chosen:{label}")
    ax.axhline(0.0, color="0.35", lw=0.9)


def plan_values(p: Plan) -> npt.NDArray[np.float64]:
    """What the plan compared per feasible cut, $: for the look-ahead (DESIGN §7), what compacting
    now at each cut saves over the best schedule that waits (against the best cut when keeping is
    not allowed; −inf where the cut keeps less than one API round); else NetBenefit (DESIGN §2)."""
    assert p.benefit is not None
    if p.lookahead_usd is None:
        return np.asarray(p.benefit.net, dtype=np.float64)
    keep = p.lookahead["keep_usd"]  # None when keeping is not allowed
    finite = p.lookahead_usd[np.isfinite(p.lookahead_usd)]
    base = keep if keep is not None else (finite.min() if finite.size else 0.0)
    return np.where(np.isfinite(p.lookahead_usd), base - p.lookahead_usd, -np.inf)


def _chosen_index(p: Plan) -> int | None:
    """Index into ``p.benefit`` of the chosen cut (compact) or of the best candidate (keep, or clear:
    the cut it preferred clearing to; hollow)."""
    if p.benefit is None:
        return None
    cut = p.cut if p.decision == "compact" else (p.best_candidate or {}).get("cut")
    hits = np.flatnonzero(p.benefit.cut == cut) if cut is not None else np.zeros(0, dtype=np.int64)
    return int(hits[0]) if hits.size else None


def _color(plans: Sequence[Plan], p: Plan) -> str:
    """One colour per pricing profile (models of a profile share it; seed is dashed)."""
    names = list(dict.fromkeys(q.prices.name for q in plans))
    return COLORS[names.index(p.prices.name) % len(COLORS)]


def _draw_tokens(ax: Axes, plans: Sequence[Plan]) -> list[Any]:
    """Kept tokens K per feasible cut, the forced threshold per profile and the current context (right axis)."""
    p = plans[0]
    assert p.benefit is not None
    k = p.n_messages - p.benefit.cut
    (kept,) = ax.plot(k, p.benefit.tail_tokens, color="0.55", lw=1.2, ls=":", label="kept tokens K (right axis)")
    handles = [kept]
    for q in {q.prices.name: q for q in plans}.values():
        window = q.prices.max_context_tokens
        over = q.estimates.context_tokens > window
        label = f"forced threshold of {q.prices.name}: {q.settings['force_ratio']:g}·M = {q.force_threshold_tokens:,.0f} tokens"
        if over:
            label += f"; the context already exceeds its window M = {window:,}"
        force = ax.axhline(q.force_threshold_tokens, color=_color(plans, q), lw=2.2 if over else 1.0, ls=(0, (6, 3)), alpha=0.8,
                           label=label)
        force.set_gid(f"window_exceeded:{q.prices.name}" if over else "force_threshold")
        handles.append(force)
    now = ax.axhline(p.estimates.context_tokens, color="0.3", lw=0.9, ls="-.", label=f"context now: {p.estimates.context_tokens:,} tokens")
    now.set_gid("context")
    ax.set_ylabel("tokens (kept K, thresholds, context)")
    top = max([q.force_threshold_tokens for q in plans] + [p.estimates.context_tokens, p.total_tokens])
    ax.set_ylim(0, top * 1.08)
    thousands(ax.yaxis)
    return [*handles, now]


def benefit_figure(plans: Sequence[Plan], *, title: str | None = None) -> Figure:
    """NetBenefit(k) and its five terms against k, for one or more plans of one session.

    Parameters
    ----------
    plans : sequence of Plan
        Plans of the same session (profiles and models to overlay), each with ``benefit``.
    title : str, optional
        Defaults to the session's name, N, T and context.

    Returns
    -------
    matplotlib.figure.Figure
        Top: NetBenefit ($) per plan with its feasible cuts (dots) and chosen cut (star; hollow
        when the plan keeps everything), ``min_keep`` (the shaded area is not allowed), and on
        the right axis the kept tokens K, the forced threshold and the current context.
        Bottom: one panel per term ①–⑤ ($), lines per plan, stars at the chosen cuts.

    Raises
    ------
    ValueError
        If ``plans`` is empty.
    """
    if not plans:
        raise ValueError("benefit_figure needs at least one plan")
    first = plans[0]
    figure = new_figure(15, 9.5)
    grid = figure.add_gridspec(2, len(TERM_LABELS), height_ratios=(2.3, 1.0))
    ax = figure.add_subplot(grid[0, :])
    _draw_net(ax, plans)
    least = first.min_keep
    ax.axvspan(0, least, color="0.9", zorder=0)
    ax.axvline(least, color="0.4", lw=1.0, ls="--").set_gid("min_keep")
    ax.text(least, 1.0, f" min_keep = {least}", transform=ax.get_xaxis_transform(), va="top", ha="left", fontsize=9, color="0.3")
    ax.set_xlim(0, first.n_messages + 1)
    ax.set_xlabel("k: messages kept (the tail); the head of N − k messages is summarized")
    ax.set_ylabel("NetBenefit, or look-ahead saving ($)")
    handles, _ = ax.get_legend_handles_labels()
    if first.benefit is not None and first.benefit.cut.size:
        handles += _draw_tokens(ax.twinx(), plans)
    ax.legend(handles=handles, loc="best", fontsize=8.5, framealpha=0.92)
    e = first.estimates
    name = Path(first.path).name or "session"
    what = "what compacting at each cut saves over waiting" if first.lookahead_usd is not None else "NetBenefit(k)"
    figure.suptitle(title or f"Compact {name} now? {what}, over the feasible cuts", fontsize=14, fontweight="bold")
    ax.set_title(f"N = {first.n_messages} messages, T = {first.total_tokens:,} tokens, context {e.context_tokens:,} / "
                 f"{first.prices.max_context_tokens:,}; E = {e.expected_turns:g} turns, L = {e.calls_per_turn:.3g}, "
                 f"R = {e.remaining_calls:.4g} calls, avg = {e.avg_tokens:,.0f} tokens", fontsize=10)
    for column, (name_, heading, sign) in enumerate(TERM_LABELS):
        term_ax = figure.add_subplot(grid[1, column], sharex=ax)
        for p in plans:
            if p.benefit is None or p.benefit.cut.size == 0:
                continue
            k, values = p.n_messages - p.benefit.cut, getattr(p.benefit, name_)
            seed = p.settings["model"] == "seed"
            (line,) = term_ax.plot(k, values, "--" if seed else "-", color=_color(plans, p), lw=1.4)
            line.set_gid(f"term:{name_}:{plan_label(p)}")
            if (at := _chosen_index(p)) is not None:
                term_ax.plot(k[at], values[at], "D" if seed else "*", ms=6 if seed else 10, color=_color(plans, p), mec="black", mew=0.8)
        term_ax.axvline(least, color="0.4", lw=0.8, ls="--")
        term_ax.set_title(f"{heading} ({_SIGNS[sign]})", fontsize=9.5)
        term_ax.set_xlabel("k (messages kept)", fontsize=8.5)
        term_ax.tick_params(labelsize=8)
        if column == 0:
            term_ax.set_ylabel("$")
    return figure
