"""A session's growth call by call and the planner's advice at each call (``dp-compact timeline``).

Draws only what the :class:`~dp_compact.replay.timeline.Timeline` holds (made by
:func:`dp_compact.api.timeline_file` or :func:`dp_compact.replay.timeline.timeline`). Artists carry a
``gid``: ``context``, ``window``, ``force_threshold``, ``followed``, ``advised:<rule>``, ``compaction``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dp_compact.figures.base import new_figure, thousands
from dp_compact.core.planner import RULE_BENEFIT, RULE_FORCE, RULE_LOOKAHEAD

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from dp_compact.replay.timeline import Timeline

__all__ = ["timeline_figure"]


def timeline_figure(line: Timeline, *, title: str | None = None) -> Figure:
    """A session's growth call by call and the planner's advice at each call.

    Parameters
    ----------
    line : Timeline
        From :func:`dp_compact.replay.timeline.timeline`.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
        Top: context per call (tokens), the window M, the forced threshold, the compactions
        recorded in the file, markers where the planner advises compacting (by rule), and the
        context had every advice been taken (when the replay matches the file's calls).
        Bottom: messages sent per call and k, the messages the advised compaction keeps.
    """
    figure = new_figure(14, 8.5)
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=(2.2, 1.0))
    calls = line.call
    source = "reported by usage" if line.context_source == "usage" else "estimated: V + T of the messages sent"
    top.plot(calls, line.context_tokens, color="#1f77b4", lw=1.8, label=f"context of each call ({source})")[0].set_gid("context")
    m = line.prices.max_context_tokens
    peak = int(line.context_tokens.max(initial=0))
    fits = line.force_threshold_tokens <= 1.6 * peak  # else the window would squash the curve: drawn above the chart
    off = "" if fits else " (above the chart)"
    why = textwrap.fill(line.window_source, 110, subsequent_indent="  ") if line.window_source else line.prices.name
    top.axhline(m, color="black", lw=1.2, label=f"window M = {m:,} tokens{off}: {why}").set_gid("window")
    top.axhline(line.force_threshold_tokens, color="#d62728", lw=1.1, ls="--",
                label=f"forced threshold = {line.force_threshold_tokens:,.0f} tokens{off}").set_gid("force_threshold")
    if line.followed_context_tokens is not None:
        top.plot(calls, line.followed_context_tokens, color="#2ca02c", lw=1.3, ls="-",
                 label="context had every advice been taken (replay of the planner)")[0].set_gid("followed")
    for rule, marker, color in ((RULE_LOOKAHEAD, "v", "#2ca02c"), (RULE_BENEFIT, "v", "#2ca02c"), (RULE_FORCE, "X", "#d62728")):
        where = np.array([r == rule for r in line.rule], dtype=bool) & line.compact
        if where.any():
            top.plot(calls[where], line.context_tokens[where], marker, ls="none", ms=6, color=color, mec="black", mew=0.4,
                     label=f"planner advises compacting ({rule}): {int(where.sum())} calls")[0].set_gid(f"advised:{rule}")
            bottom.plot(calls[where], line.k[where], marker, ls="none", ms=5, color=color, mec="black", mew=0.3,
                        label=f"k kept by the advised compaction ({rule})")
    for index, compaction in zip(line.first_call_after.tolist(), line.compactions, strict=True):
        x = calls[index] - 0.5 if index < calls.size else calls[-1] + 0.5
        sizes = f": {compaction.pre_tokens:,} → {compaction.post_tokens:,} tokens" if compaction.pre_tokens and compaction.post_tokens else ""
        top.axvline(x, color="#9467bd", lw=2.0, alpha=0.8, label=f"compaction recorded in the file{sizes}").set_gid("compaction")
        bottom.axvline(x, color="#9467bd", lw=2.0, alpha=0.8)
    _annotate_first(top, line)
    top.set_ylabel("tokens in the prompt")
    top.set_ylim(0, (max(m, peak) if fits else peak * 1.25) * 1.1 or 1.0)
    thousands(top.yaxis)
    handles, labels = top.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    top.legend(unique.values(), unique.keys(), loc="upper left", fontsize=8.5, framealpha=0.92)
    bottom.step(calls, line.n_messages, where="mid", color="0.45", lw=1.2, label="messages sent N")
    bottom.set_ylabel("messages")
    bottom.set_xlabel("LLM call (in file order)")
    bottom.legend(loc="upper left", fontsize=8.5)
    name = Path(line.path).name
    figure.suptitle(title or f"{name}: context per call and where dp-compact would compact", fontsize=14, fontweight="bold")
    return figure


def _annotate_first(ax: Axes, line: Timeline) -> None:
    """Mark the first advised call: a label pointing at it, and a drop from its context to what the compaction leaves."""
    advised = np.flatnonzero(line.compact)
    if advised.size == 0:
        return
    i = int(advised[0])
    x, before = float(line.call[i]), int(line.context_tokens[i])
    after = max(before - int(line.head_tokens[i]) + int(line.s_tokens), 0)
    ax.annotate("", xy=(x, after), xytext=(x, before),
                arrowprops={"arrowstyle": "-|>", "color": "#2ca02c", "lw": 1.5, "ls": "--"})
    ax.annotate(f"first advice: call {int(line.call[i])}, keep {int(line.k[i])} of {int(line.n_messages[i])} messages\n"
                f"(context {before:,} → about {after:,} tokens)",
                xy=(x, before), xytext=(12, 28), textcoords="offset points", fontsize=9, va="bottom", ha="left",
                bbox={"boxstyle": "round", "fc": "white", "ec": "#2ca02c", "alpha": 0.95},
                arrowprops={"arrowstyle": "->", "color": "#2ca02c", "lw": 1.2})
