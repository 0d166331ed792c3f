"""Figures: NetBenefit(k) curves, a session's timeline, the calibration, a replay's contexts, a tool's settings.

Every figure is drawn only from data handed to it (plans, a timeline, a calibration, a replay
report): nothing here reads files, builds settings or counts tokens. Figures are
:class:`matplotlib.figure.Figure` objects on the Agg canvas (no display, no pyplot state);
:func:`save_figure` writes PNG or SVG atomically. matplotlib is imported inside the functions,
so importing this package (and ``import dp_compact``) does not load it.
"""

from __future__ import annotations

from dp_compact.figures.base import FORMATS, figure_format, save_figure
from dp_compact.figures.calibration import calibration_figure
from dp_compact.figures.curve import benefit_figure, plan_label, plan_values
from dp_compact.figures.replay import contexts_figure
from dp_compact.figures.timeline import timeline_figure
from dp_compact.figures.tune import tune_figure

__all__ = [
    "FORMATS",
    "benefit_figure",
    "calibration_figure",
    "contexts_figure",
    "figure_format",
    "plan_label",
    "plan_values",
    "save_figure",
    "timeline_figure",
    "tune_figure",
]
