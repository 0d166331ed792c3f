"""Dollars against a tool's setting (``dp-compact tune --plot``), drawn from a :class:`~dp_compact.tune.TuneReport`."""

from __future__ import annotations

from typing import Any

__all__ = ["tune_figure"]


def tune_figure(report: Any) -> Any:
    """Total $ over the transcripts per setting (grid order, ``gid`` ``cost``), the tool's default and
    the best setting marked (``gid`` ``default``, ``best``), dp_compact's planner and the hindsight
    optimum as horizontal lines (``gid`` ``dp``, ``oracle``).

    Parameters
    ----------
    report : TuneReport

    Returns
    -------
    matplotlib.figure.Figure
        Drawn on the Agg canvas (no pyplot state).
    """
    from dp_compact.figures.base import new_figure

    figure = new_figure(10, 5)
    ax = figure.add_subplot()
    totals = report.totals
    x = list(range(len(report.settings)))
    ax.plot(x, totals, marker="o", lw=1.2, label=f"{report.tool} rule", gid="cost")
    ax.plot([report.default], [totals[report.default]], "s", ms=11, mfc="none", color="black", gid="default",
            label=f"{'' if report.settings[report.default].startswith('default') else 'default: '}{report.settings[report.default]}"
                  f" (${totals[report.default]:.2f})")
    ax.plot([report.best], [totals[report.best]], "*", ms=14, color="#d62728", gid="best",
            label=f"best: {report.settings[report.best]} (${totals[report.best]:.2f})")
    ax.axhline(float(report.dp_usd.sum()), color="#2ca02c", ls="--", lw=0.9, gid="dp", label=f"dp_compact (${report.dp_usd.sum():.2f})")
    ax.axhline(float(report.oracle_usd.sum()), color="gray", ls=":", lw=0.9, gid="oracle",
               label=f"hindsight optimum (${report.oracle_usd.sum():.2f})")
    ax.set_xticks(x, report.settings, rotation=45, ha="right", fontsize="small")
    ax.set_xlabel(f"{report.tool} setting")
    ax.set_ylabel(f"$ over {len(report.transcripts)} transcript(s)")
    ax.set_title(f"{report.tool}: cost of each setting on your transcripts")
    ax.legend(fontsize="small")
    return figure
