"""Figures: NetBenefit(k) curves, a session's timeline, the calibration (matplotlib, Agg).

matplotlib is imported inside the functions only, so ``import dp_compact`` and the command
line's start stay free of it. Figures are :class:`matplotlib.figure.Figure` objects drawn on the
Agg canvas (no display, no pyplot state); :func:`save_figure` writes PNG or SVG atomically.
Artists that tests and notebooks look up carry a ``gid``: ``net:<label>``,
``term:<name>:<label>``, ``chosen:<label>``, ``min_keep``, ``force_threshold``, ``context``,
``advised:<rule>``, ``compaction``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dp_compact.errors import OutputError
from dp_compact.io import write_atomic
from dp_compact.planner import RULE_BENEFIT, RULE_FORCE, RULE_LOOKAHEAD, Plan

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from dp_compact.calibration import Calibration
    from dp_compact.timeline import Timeline

__all__ = [
    "FORMATS",
    "TERMS",
    "benefit_figure",
    "calibration_figure",
    "curve_plans",
    "plan_label",
    "plan_values",
    "save_figure",
    "timeline_figure",
    "write_curve",
    "write_timeline",
]

#: Output formats, from the file suffix.
FORMATS = {".png": "png", ".svg": "svg"}
#: The five terms of DESIGN §2 in order: (attribute, title, sign in NetBenefit).
TERMS = (
    ("savings", "① savings: cache reads saved", "+"),
    ("cache_miss", "② cache miss after the rewrite", "−"),
    ("compact_cost", "③ summary request", "−"),
    ("info_loss", "④ information loss (+ recall)", "−"),
    ("quality", "⑤ long-context quality", "+"),
)
_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def _figure(width: float, height: float) -> Figure:
    """A Figure on the Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _thousands(axis: Any) -> None:
    """Tick labels with thousands separators."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))


def plan_label(plan: Plan) -> str:
    """``profile · model`` of a plan (its legend entry)."""
    return f"{plan.prices.name} · {plan.settings['model']}"


def curve_plans(
    session: Any, message_tokens: np.ndarray, base: Any, *, providers: Sequence[str | None] = (None,), models: Sequence[str] = ("recall",)
) -> list[Plan]:
    """Plan ``session`` under every provider × cost model (the curves to overlay).

    Parameters
    ----------
    session : Session
    message_tokens : ndarray[int64], shape (N,)
        Tokens per message, counted once for every plan.
    base : Settings
        Settings the others start from; ``providers`` and ``models`` replace its profile and model.
    providers : sequence of str or None
        Profiles (None: the one ``base`` and the session give).
    models : sequence of {"recall", "seed"}

    Returns
    -------
    list of Plan
        One per provider × model; each plan's ``notes`` start with how its prices and window
        were chosen (:func:`~dp_compact.api.choose_prices`).

    Raises
    ------
    UnknownProfileError
        If a provider is unknown.
    """
    from dataclasses import replace

    from dp_compact.api import choose_prices
    from dp_compact.cuts import message_arrays
    from dp_compact.planner import plan
    from dp_compact.settings import load_settings

    arrays = message_arrays(session.messages)
    flags = base.model_dump(exclude_unset=True)
    plans = []
    for provider in providers:
        for model in models:
            settings = load_settings(**{**flags, "model": model, **({"provider": provider} if provider else {})})
            prices, notes = choose_prices(settings, session)
            result = plan(session, message_tokens, settings, prices, arrays=arrays)
            plans.append(replace(result, notes=notes + result.notes))
    return plans


def _draw_net(ax: Axes, plans: Sequence[Plan]) -> None:
    """NetBenefit per plan, feasible cuts as dots, the chosen cut as a star."""
    for p in plans:
        if p.benefit is None or p.benefit.cut.size == 0:
            continue
        label, color = plan_label(p), _color(plans, p)
        k = p.n_messages - p.benefit.cut
        style = "--" if p.settings["model"] == "seed" else "-"
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
    """Index into ``p.benefit`` of the chosen cut (compact) or of the best candidate (keep)."""
    if p.benefit is None:
        return None
    cut = p.cut if p.decision == "compact" else (p.best_candidate or {}).get("cut")
    hits = np.flatnonzero(p.benefit.cut == cut) if cut is not None else np.zeros(0, dtype=np.int64)
    return int(hits[0]) if hits.size else None


def _color(plans: Sequence[Plan], p: Plan) -> str:
    """One colour per pricing profile (models of a profile share it; seed is dashed)."""
    names = list(dict.fromkeys(q.prices.name for q in plans))
    return _COLORS[names.index(p.prices.name) % len(_COLORS)]


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
    _thousands(ax.yaxis)
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
    figure = _figure(15, 9.5)
    grid = figure.add_gridspec(2, len(TERMS), height_ratios=(2.3, 1.0))
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
    for column, (name_, heading, sign) in enumerate(TERMS):
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
        term_ax.set_title(f"{heading} ({sign})", fontsize=9.5)
        term_ax.set_xlabel("k (messages kept)", fontsize=8.5)
        term_ax.tick_params(labelsize=8)
        if column == 0:
            term_ax.set_ylabel("$")
    return figure


def timeline_figure(line: Timeline, *, title: str | None = None) -> Figure:
    """A session's growth call by call and the planner's advice at each call.

    Parameters
    ----------
    line : Timeline
        From :func:`dp_compact.timeline.timeline`.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
        Top: context per call (tokens), the window M, the forced threshold, the compactions
        recorded in the file, markers where the planner advises compacting (by rule), and the
        context had every advice been taken (when the replay matches the file's calls).
        Bottom: messages sent per call and k, the messages the advised compaction keeps.
    """
    figure = _figure(14, 8.5)
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
    _thousands(top.yaxis)
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


def save_figure(figure: Figure, out: Path | str, *, dpi: int = 120) -> Path:
    """Write ``figure`` to ``out`` (PNG or SVG by suffix) atomically: temporary file, then rename.

    Raises
    ------
    ValueError
        If the suffix is neither ``.png`` nor ``.svg``.
    OutputError
        If the file cannot be written (its folder is made when missing).
    """
    path = Path(out)
    kind = FORMATS[_suffix(path)]
    metadata = {"Software": "dp-compact"} if kind == "png" else {"Creator": "dp-compact", "Date": None}
    try:
        write_atomic(path, lambda handle: figure.savefig(handle, format=kind, dpi=dpi, metadata=metadata))
    except OSError as exc:
        raise OutputError(f"{path}: cannot write the figure: {exc.strerror or exc}") from exc
    return path


def calibration_figure(calibration: Calibration) -> Figure:
    """The calibration's figure: recall curves in both age units, token ratios, V and L per session.

    Returns
    -------
    matplotlib.figure.Figure
        Four panels: q(a) per unit (pooled points sized by messages observed, the fitted
        q0·exp(−a/τ) with its 5–95 % bootstrap band, sessions as thin lines); reported prompt
        against the cl100k estimate of the messages sent, per family; V and L per session.
    """
    from dp_compact.plot_calibration import draw_calibration

    figure = _figure(15, 10)
    draw_calibration(figure, calibration)
    return figure



def write_curve(
    session_path: Path | str, out: Path | str, settings: Any, *, providers: Sequence[str] = (), models: Sequence[str] = (),
    lenient: bool = False, use_cache: bool = True,
) -> list[Plan]:
    """Read a session, plan it per provider × model, draw :func:`benefit_figure`, save it to ``out``.

    ``models`` are drawn besides ``settings.model``; with no ``providers``, the profile the
    settings and the session give. Returns the plans drawn.

    Raises
    ------
    SessionError, UnknownProfileError
        Unreadable session or unknown provider.
    ValueError
        If ``out`` is neither ``.png`` nor ``.svg``.
    """
    from dp_compact.api import session_tokens
    from dp_compact.sessions import read_session

    _suffix(out)  # fail before any work on a bad name
    session = read_session(session_path, lenient=lenient)
    tokens = session_tokens(session, settings, use_cache=use_cache)
    every_model = list(dict.fromkeys([settings.model, *models]))
    plans = curve_plans(session, tokens, settings, providers=list(providers) or [None], models=every_model)
    save_figure(benefit_figure(plans), out)
    return plans


def write_timeline(session_path: Path | str, out: Path | str, settings: Any, *, lenient: bool = False, use_cache: bool = True) -> Timeline:
    """Read a session's history, plan it at every call, draw :func:`timeline_figure`, save it to ``out``.

    Raises
    ------
    SessionError, UnknownProfileError
        Unreadable session or unknown provider.
    ValueError
        If ``out`` is neither ``.png`` nor ``.svg``.
    """
    from dp_compact.history import read_history
    from dp_compact.timeline import timeline

    _suffix(out)
    line = timeline(read_history(session_path, lenient=lenient), settings, use_cache=use_cache)
    save_figure(timeline_figure(line), out)
    return line


def _suffix(out: Path | str) -> str:
    """The output's suffix, checked."""
    suffix = Path(out).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{out}: the figure's file must end in .png or .svg")
    return suffix
