"""The calibration's figure (``dp-compact calibrate --figure``): recall curves, token ratios, V and L.

Draws only what the :class:`~dp_compact.calibration.Calibration` holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dp_compact.figures.base import new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from dp_compact.calibration import Calibration

__all__ = ["calibration_figure"]

_FAMILY_COLORS = {"anthropic": "#d97706", "openai": "#10a37f", "google": "#4285f4", "deepseek": "#6b21a8", "unknown": "0.45"}


def calibration_figure(calibration: Calibration) -> Figure:
    """The calibration's figure: recall curves in both age units, token ratios, V and L per session.

    Returns
    -------
    matplotlib.figure.Figure
        Four panels: q(a) per unit (pooled points sized by messages observed, the fitted
        q0·exp(−a/τ) with its 5–95 % bootstrap band, sessions as thin lines); reported prompt
        against the cl100k estimate of the messages sent, per family; V and L per session.
    """
    figure = new_figure(15, 10)
    _draw_calibration(figure, calibration)
    return figure


def _draw_calibration(figure: Figure, calibration: Calibration) -> None:
    """Draw the four panels of :func:`calibration_figure` on ``figure``."""
    grid = figure.add_gridspec(2, 2)
    for column, unit in enumerate(("turns", "rounds")):
        _draw_recall(figure.add_subplot(grid[0, column]), calibration, unit)
    _draw_ratio(figure.add_subplot(grid[1, 0]), calibration)
    _draw_prefix(figure.add_subplot(grid[1, 1]), calibration)
    figure.suptitle(
        f"Calibration from {len(calibration.sessions)} transcripts "
        f"({sum(1 for s in calibration.sessions if s.prompt_tokens.size)} with usage records); "
        f"spreads: bootstrap over sessions ({calibration.bootstrap} resamples)",
        fontsize=13, fontweight="bold",
    )


def _draw_recall(ax: Axes, calibration: Calibration, unit: str) -> None:
    """q(a) per session (thin), pooled (dots sized by messages observed), the fit and its band."""
    fit, q0, tau = calibration.recall_fits[unit]
    for session in calibration.sessions:
        counts = session.recall[unit]
        bins = np.flatnonzero(counts.observed >= 10)
        if bins.size >= 2:
            ax.plot(bins, counts.needed[bins] / counts.observed[bins], color="0.75", lw=0.8, zorder=1)
    pooled = calibration.recall[unit]
    usable = np.flatnonzero(pooled.observed >= calibration.min_bin_messages)
    ax.scatter(usable, pooled.needed[usable] / pooled.observed[usable], s=12 + 120 * pooled.observed[usable] / max(pooled.observed.max(), 1),
               color="#1f77b4", edgecolor="black", linewidth=0.5, zorder=3, label="pooled q(a) (dot area: messages observed)")
    ages = np.linspace(0, max(float(usable.max(initial=1)), 1.0), 200)
    draws = calibration.recall_draws.get(unit, np.zeros((0, 2)))
    draws = draws[np.all(np.isfinite(draws), axis=1)]
    if draws.size:
        curves = draws[:, :1] * np.exp(-ages[None, :] / draws[:, 1:])
        low, high = np.percentile(curves, [5, 95], axis=0)
        ax.fill_between(ages, low, high, color="#d62728", alpha=0.18, lw=0, label="fit, 5–95 % bootstrap band")
    if np.isfinite(fit.q0):
        ax.plot(ages, fit.q0 * np.exp(-ages / fit.tau), color="#d62728", lw=2.2,
                label=f"q0·exp(−a/τ): q0 = {q0.value:.2f} [{q0.p05:.2f}–{q0.p95:.2f}], τ = {tau.value:.2f} [{tau.p05:.2f}–{tau.p95:.2f}]")
    ax.plot([], [], color="0.75", lw=0.8, label="single sessions (bins with ≥ 10 messages)")
    chosen = " — chosen (DP_RECALL_AGE)" if unit == calibration.recall_age else ""
    per = "each session's own L" if calibration.recall_l is None else f"L = {calibration.recall_l:g}"
    scale = "user turns" if unit == "turns" else f"API rounds / L ({per})"
    ax.set_title(f"recall curve, age in {scale}{chosen}\nR² pooled {fit.r_squared:.2f}, on single sessions "
                 f"{calibration.recall_session_r2[unit]:.2f}", fontsize=10)
    ax.set_xlabel(f"age a of the message ({scale})")
    ax.set_ylabel("q(a): share of messages of age a used later")
    highest = max([float(np.nanmax(line.get_ydata(), initial=0.0)) for line in ax.get_lines()] + [0.05])
    ax.set_ylim(0, min(1.0, 1.25 * highest))
    ax.legend(fontsize=8, loc="upper right")


def _draw_ratio(ax: Axes, calibration: Calibration) -> None:
    """Reported prompt tokens against the cl100k estimate of the messages sent, per family."""
    seen: set[str] = set()
    for session in calibration.sessions:
        if not session.prompt_tokens.size:
            continue
        color = _FAMILY_COLORS.get(session.family, "0.45")
        ratio = calibration.token_ratios.get(session.family)
        label = None
        if session.family not in seen:
            seen.add(session.family)
            label = f"{session.family}: ratio {ratio.value:.2f} [{ratio.p05:.2f}–{ratio.p95:.2f}], n = {ratio.n}" if ratio else session.family
        ax.plot(session.estimate_tokens / 1000, session.prompt_tokens / 1000, ".", ms=3, color=color, alpha=0.6, label=label)
        ax.annotate(Path(session.path).stem[:22], (session.estimate_tokens[-1] / 1000, session.prompt_tokens[-1] / 1000), fontsize=7,
                    color=color, xytext=(3, 0), textcoords="offset points")
    limit = max((float(s.estimate_tokens.max()) for s in calibration.sessions if s.estimate_tokens.size), default=1.0) / 1000
    ax.plot([0, limit], [0, limit], color="0.3", lw=0.8, ls=":", label="reported = estimate (ratio 1, V = 0)")
    ax.set_xlabel("cl100k tokens of the messages sent (thousands)")
    ax.set_ylabel("prompt tokens reported by the provider (thousands)")
    ax.set_title("token ratio: reported prompt growth / estimated message growth, per call", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")


def _draw_prefix(ax: Axes, calibration: Calibration) -> None:
    """V per session (bars, thousands of tokens) with L and avg written beside each bar."""
    rows = [s for s in calibration.sessions if s.v_tokens is not None]
    names = [Path(s.path).stem[:28] for s in rows]
    values = [max(s.v_tokens or 0.0, 0.0) / 1000 for s in rows]
    colors = [_FAMILY_COLORS.get(s.family, "0.45") for s in rows]
    positions = np.arange(len(rows))
    ax.barh(positions, values, color=colors, alpha=0.8)
    for y, s in zip(positions, rows, strict=True):
        text = f"L = {s.calls_per_turn:.1f}, avg = {s.avg_tokens / 1000:.0f}k" if s.calls_per_turn and s.avg_tokens else ""
        ax.text(max(s.v_tokens or 0.0, 0.0) / 1000 + 0.4, y, text, va="center", fontsize=8)
    if calibration.v_tokens is not None:
        v = calibration.v_tokens
        ax.axvline(v.value / 1000, color="black", lw=1.5, label=f"median V = {v.value:,.0f} [{v.p05:,.0f}–{v.p95:,.0f}]")
        ax.axvspan(v.p05 / 1000, v.p95 / 1000, color="black", alpha=0.08)
    ax.axvline(5.0, color="#d62728", lw=1.2, ls="--", label="provisional default V = 5,000")
    ax.set_yticks(positions, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(values, default=1.0) * 1.45)
    ax.set_xlabel("V: first call's prompt − its messages (thousands of tokens)")
    l_text = f"; pooled L = {calibration.calls_per_turn.value:.1f} calls per user turn" if calibration.calls_per_turn else ""
    ax.set_title(f"fixed prefix V per session{l_text}", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
