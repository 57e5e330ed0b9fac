"""The time-to-target figures (only with a target): the validation metric against wall-clock
time per configuration, and time-to-target speedup beside epoch-time speedup.

Light module: matplotlib is imported inside functions.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from itwin_report.plots.figures import (
    FIGSIZE,
    _figure,
    _ideal_speedup,
    _plain_log_y,
    _worker_ticks,
    label,
    strategy_colors,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from itwin_report.report import Report

TARGET_COLOR = "#d62728"
COLUMNS = 4  # panels per row of the convergence figure


def convergence_figure(report: Report) -> Figure | None:
    """One panel per configuration: each run's metric against seconds since its start (one
    line per run), the target as a dashed line; the panel title says how many reached it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series = getattr(report, "convergence", None)
    target = getattr(report, "target", None)
    if target is None or series is None or series.empty:
        return None
    pairs = zip(series["strategy"], series["workers"], strict=True)
    configs = sorted({(str(s), int(w)) for s, w in pairs})
    cols = min(COLUMNS, len(configs))
    rows = math.ceil(len(configs) / cols)
    fig = Figure(figsize=(max(FIGSIZE[0], 3.2 * cols), 0.6 + 2.6 * rows))
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.1, top=1 - 0.5 / (0.6 + 2.6 * rows))
    fig.suptitle(label(f"{target.metric} against wall-clock time (target {target})"))
    reached = _reached(report)
    colors = strategy_colors(report)
    for i, (strategy, workers) in enumerate(configs):
        ax = fig.add_subplot(rows, cols, i + 1)
        mine = series[(series["strategy"] == strategy) & (series["workers"] == workers)]
        for _job, run in mine.groupby("job_id", sort=True):
            ax.plot(run["seconds"], run["value"], marker=".", color=colors.get(strategy, "C0"))
        ax.axhline(target.value, color=TARGET_COLOR, linestyle="--", label="target")
        got, runs = reached.get((strategy, workers), (0, mine["job_id"].nunique()))
        ax.set_title(label(f"{strategy}-{workers} ({got} of {runs} reached)"), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=8)
        if i % cols == 0:
            ax.set_ylabel(label(target.metric), fontsize=8)
        if i >= len(configs) - cols:
            ax.set_xlabel("Seconds since the run's start", fontsize=8)
    return fig


def _reached(report: Report) -> dict[tuple[str, int], tuple[int, int]]:
    table = report.time_to_target
    return {
        (str(s), int(w)): (int(r), int(n))
        for s, w, r, n in zip(
            table["strategy"], table["workers"], table["runs_reached"], table["runs"], strict=True
        )
    }


def target_speedup_figure(report: Report) -> Figure | None:
    """Per strategy: time-to-target speedup (solid) beside epoch-time speedup (dashed, same
    colour) against workers, with the ideal line from the base."""
    table = report.time_to_target
    if getattr(report, "target", None) is None or table["speedup"].notna().sum() == 0:
        return None
    colors = strategy_colors(report)
    fig, ax = _figure("Speedup: time to target (solid) vs epoch time (dashed)")
    epoch = report.epoch_time
    workers: set[int] = set()
    for strategy, group in table[table["speedup"].notna()].groupby("strategy", sort=True):
        group = group.sort_values("workers")
        color = colors.get(str(strategy), "C0")
        xs = [int(w) for w in group["workers"]]
        ax.plot(xs, group["speedup"], marker="o", color=color, label=label(f"{strategy}: target"))
        mine = epoch[(epoch["strategy"] == strategy) & epoch["speedup"].notna()]
        mine = mine.sort_values("workers")
        ax.plot(
            [int(w) for w in mine["workers"]],
            mine["speedup"],
            marker="s",
            linestyle="--",
            color=color,
            label=label(f"{strategy}: epoch time"),
        )
        workers |= set(xs) | {int(w) for w in mine["workers"]}
    _ideal_speedup(ax, table)
    _worker_ticks(ax, sorted(workers))
    _plain_log_y(ax, base=2)
    ax.set_ylabel("Speedup (x)")
    ax.legend(fontsize=8)
    return fig
