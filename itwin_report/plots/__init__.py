"""Figures of a report: one definition per figure (:mod:`.figures`), saved as files or inline SVG
(:mod:`.output`).

Light package: matplotlib is imported inside functions.
"""

from __future__ import annotations

from itwin_report.plots.figures import PALETTE, ideal_bases, label, strategy_colors
from itwin_report.plots.output import (
    FIGURES,
    SAVE_FORMATS,
    PlotSet,
    figure_svg,
    make_figures,
    missing_reason,
    plot_report,
    save_figures,
    stale_plots,
)

__all__ = [
    "FIGURES",
    "PALETTE",
    "SAVE_FORMATS",
    "PlotSet",
    "figure_svg",
    "ideal_bases",
    "label",
    "make_figures",
    "missing_reason",
    "plot_report",
    "save_figures",
    "stale_plots",
    "strategy_colors",
]
