"""The prompt size of every call per policy (``dp-compact replay --plot``).

Draws only what the :class:`~dp_compact.replay.shell.SessionReplay` holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dp_compact.figures.base import new_figure, thousands

__all__ = ["contexts_figure"]


def contexts_figure(report: Any) -> Any:
    """The prompt size of every call per policy (tokens, one line each, ``gid`` ``context:<policy>``) and the window.

    Parameters
    ----------
    report : SessionReplay
        Its ``results[i].contexts`` are drawn.

    Returns
    -------
    matplotlib.figure.Figure
        Drawn on the Agg canvas (no pyplot state).
    """
    figure = new_figure(10, 5)
    ax = figure.add_subplot()
    for result in report.results:
        label = f"{result.policy} (${result.total_usd:.2f}, {result.compactions} compactions)"
        ax.plot(range(1, result.calls + 1), result.contexts, label=label, lw=1.2, gid=f"context:{result.policy}")
    ax.axhline(report.params.window, color="black", ls="--", lw=0.8, label=f"window {report.params.window:,}", gid="window")
    thousands(ax.yaxis)
    ax.set_xlabel("LLM call")
    ax.set_ylabel("prompt tokens (V included)")
    ax.set_title(f"{Path(report.path).name}: context per call under each policy")
    ax.legend(fontsize="small")
    return figure
