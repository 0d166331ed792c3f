"""Text tables and the context plot of ``dp-compact replay``: formatting only, no cost arithmetic.

The tables read the JSON-ready dicts of :class:`~dp_compact.replay.shell.SessionReplay` and
:class:`~dp_compact.replay.shell.DirectoryReplay`; :func:`contexts_figure` imports matplotlib
inside the function, so importing this module stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["contexts_figure", "plot_contexts", "render_directory", "render_policy_table", "render_session"]

_HEADER = (
    f"{'policy':<20} {'total $':>10} {'reads $':>9} {'input $':>9} {'writes $':>9} {'output $':>9} {'compact $':>9}"
    f" {'loss $':>9} {'S':>6} {'compactions':>11} {'refetches':>9} {'overflows':>9} {'peak ctx':>9} {'mean ctx':>9}"
    f" {'vs best fixed':>13} {'vs oracle':>9}"
)


def _ratio(value: float | None) -> str:
    """``0.62x`` or ``-``."""
    return f"{value:.2f}x" if value is not None else "-"


def render_policy_table(rows: list[dict[str, Any]]) -> str:
    """One line per policy: $ per term, S, counts, peak and mean context (tokens), ratios to the best fixed rule and the oracle."""
    lines = [_HEADER]
    for r in rows:
        lines.append(
            f"{r['policy']:<20} {r['total_usd']:>10.4f} {r['cache_read_usd']:>9.4f} {r['input_usd']:>9.4f}"
            f" {r['write_usd']:>9.4f} {r['output_usd']:>9.4f} {r['compaction_usd']:>9.4f} {r['loss_usd']:>9.4f}"
            f" {r['summary_tokens']:>6,} {r['compactions']:>11} {r['refetches']:>9}"
            f" {r['overflows']:>9} {r['peak_context_tokens']:>9,} {r['mean_context_tokens']:>9,.0f}"
            f" {_ratio(r['vs_best_fixed']):>13} {_ratio(r['vs_oracle']):>9}"
        )
    return "\n".join(lines)


def _prices_line(data: dict[str, Any]) -> str:
    """The prices, window, V, S and TTL of a session report."""
    p = data["prices"]
    write = f" / write {p['p_cache_write']:.2f}" if p["p_cache_write"] is not None else ""
    ttl = f"{data['cache_ttl_s']:g} s" if data["cache_ttl_s"] is not None else "none"
    return (
        f"prices    {p['name']}: input {p['p_input']:.2f} / cache {p['p_cache']:.2f}{write} / output {p['p_out']:.2f} $/MTok;"
        f" window {data['max_context_tokens']:,}; V {data['v_tokens']:,} tokens; cache TTL {ttl}; lost information: {data['loss']}"
    )


def render_session(data: dict[str, Any]) -> str:
    """A session report (``SessionReplay.to_dict()``) as a header and the policy table."""
    s = data["session"]
    source = "output tokens from usage records" if s["call_source"] == "usage" else "output tokens counted from messages"
    timed = f", {s['timed_calls']} timed" if data["cache_ttl_s"] is not None else ""
    best = data["best_fixed_usd"]
    lines = [
        f"session   {s['path']}  ({s['format']}; {s['messages']} messages, {s['calls']} calls{timed}; {source};"
        f" {s['uses']} uses of earlier messages)",
        _prices_line(data),
        f"assumes   {data['assumption']}",
        f"floor     ${data['prefix_floor_usd']:.4f} (every call reads only V from cache, plus its recorded output)",
        render_policy_table(data["policies"]),
    ]
    if best is not None:
        lines.append(f"best fixed policy: ${best:.4f}")
    lines += [f"note      {note}" for note in data["notes"]]
    return "\n".join(lines)


def render_directory(data: dict[str, Any]) -> str:
    """A directory report: total $ per session and policy, the totals table, the files skipped."""
    names = data["policies"]
    width = max([12, *(len(n) + 1 for n in names)])
    lines = [f"{'session':<36} {'calls':>6}" + "".join(f"{n:>{width}}" for n in names)]
    for report in data["sessions"]:
        s = report["session"]
        totals = "".join(f"{p['total_usd']:>{width}.4f}" for p in report["policies"])
        lines.append(f"{Path(s['path']).name[:36]:<36} {s['calls']:>6}{totals}")
    rows = data["totals"]
    calls = rows[0]["calls"] if rows else 0
    lines.append(f"{'total':<36} {calls:>6}" + "".join(f"{r['total_usd']:>{width}.4f}" for r in rows))
    lines.append(f"{'vs best fixed':<36} {'':>6}" + "".join(f"{_ratio(r['vs_best_fixed']):>{width}}" for r in rows))
    if any(r["vs_oracle"] is not None for r in rows):
        lines.append(f"{'vs oracle':<36} {'':>6}" + "".join(f"{_ratio(r['vs_oracle']):>{width}}" for r in rows))
    lines += ["", f"totals over {len(data['sessions'])} sessions ($, tokens; lost information: {data['loss']}):",
              render_policy_table(rows), f"assumes   {data['assumption']}"]
    lines += [f"skipped   {path}: {reason}" for path, reason in ((k["path"], k["reason"]) for k in data["skipped"])]
    return "\n".join(lines)


def contexts_figure(report: Any) -> Any:
    """The prompt size of every call per policy (tokens, one line each, ``gid`` ``context:<policy>``) and the window.

    Parameters
    ----------
    report : SessionReplay
        Its ``results[i].contexts`` are drawn.

    Returns
    -------
    matplotlib.figure.Figure
        Drawn on the Agg canvas (no pyplot state), as the figures of :mod:`dp_compact.plot`.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    figure = Figure(figsize=(10, 5), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    for result in report.results:
        label = f"{result.policy} (${result.total_usd:.2f}, {result.compactions} compactions)"
        ax.plot(range(1, result.calls + 1), result.contexts, label=label, lw=1.2, gid=f"context:{result.policy}")
    ax.axhline(report.params.window, color="black", ls="--", lw=0.8, label=f"window {report.params.window:,}", gid="window")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    ax.set_xlabel("LLM call")
    ax.set_ylabel("prompt tokens (V included)")
    ax.set_title(f"{Path(report.path).name}: context per call under each policy")
    ax.legend(fontsize="small")
    return figure


def plot_contexts(report: Any, out: Path | str) -> Path:
    """Write :func:`contexts_figure` of ``report`` to ``out`` (PNG or SVG), atomically.

    Raises
    ------
    ValueError
        If the suffix of ``out`` is neither ``.png`` nor ``.svg`` (:func:`dp_compact.plot.save_figure`).
    ModuleNotFoundError
        When matplotlib is not installed.
    """
    from dp_compact.plot import save_figure

    return save_figure(contexts_figure(report), out)
