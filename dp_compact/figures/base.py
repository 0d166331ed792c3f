"""What every figure shares: an Agg-canvas :class:`~matplotlib.figure.Figure`, thousands ticks,
the output formats and :func:`save_figure`, the one way a figure reaches a file (atomically).

matplotlib is imported inside the functions only, so importing this package stays light.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dp_compact.errors import OutputError
from dp_compact.io import write_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["COLORS", "FORMATS", "figure_format", "new_figure", "save_figure", "thousands"]

#: Output formats, from the file suffix.
FORMATS = {".png": "png", ".svg": "svg"}
#: Line colours, one per series.
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def new_figure(width: float, height: float) -> Figure:
    """A Figure of ``width`` × ``height`` inches on the Agg canvas (no display, no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def thousands(axis: Any) -> None:
    """Tick labels with thousands separators."""
    from matplotlib.ticker import FuncFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))


def figure_format(out: Path | str) -> str:
    """The format of the figure file ``out`` (``png`` or ``svg``), from its suffix.

    Raises
    ------
    ValueError
        If the suffix is neither ``.png`` nor ``.svg``.

    >>> figure_format("a/b.SVG")
    'svg'
    """
    suffix = Path(out).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{out}: the figure's file must end in .png or .svg")
    return FORMATS[suffix]


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
    kind = figure_format(path)
    metadata = {"Software": "dp-compact"} if kind == "png" else {"Creator": "dp-compact", "Date": None}
    try:
        write_atomic(path, lambda handle: figure.savefig(handle, format=kind, dpi=dpi, metadata=metadata))
    except OSError as exc:
        raise OutputError(f"{path}: cannot write the figure: {exc.strerror or exc}") from exc
    return path
