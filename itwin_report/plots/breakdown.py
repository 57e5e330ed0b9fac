"""The "Where the time goes" figure: one stacked bar per configuration, labelled with what
bounds it. Same conventions as :mod:`itwin_report.plots.figures`.

Each bar is a run's mean wall time split as the time breakdown table splits it (its columns are
read, never worked out again): outside the epochs (set-up, teardown), the steady-state steps,
and the rest of the epochs (validation, checkpoints, the warm-up's excess). Where the table
has trace shares, the steady part is split by them into compute, exposed communication, idle
and the rest of the device span (memory copies, anything neither compute, exposed communication
nor idle).

Light module: matplotlib is imported inside functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from itwin_report.plots import fit
from itwin_report.plots.figures import _figure, _group_positions, _strategy_labels, label

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from itwin_report.report import Report

# segment -> (legend text, colour, hatch), bottom to top
SEGMENTS: dict[str, tuple[str, str, str]] = {
    "outside": ("outside the epochs\n(set-up, teardown)", "#c7c7c7", ""),
    "steady": ("steady-state steps", "#6baed6", ""),
    "compute": ("steady steps:\ncompute", "#1f77b4", ""),
    "exposed": ("steady steps:\nexposed communication", "#d62728", ""),
    "idle": ("steady steps:\nidle (input wait)", "#ffbb78", ""),
    "device_other": ("steady steps:\nother device time", "#aec7e8", ""),
    "epochs": ("in the epochs (no steady\nrate to split them)", "#9edae5", "//"),
    "rest": ("rest of the epochs\n(validation, checkpoints,\nwarm-up)", "#ff7f0e", ""),
}
TITLE = "Where the wall time goes (mean per run)\n(above each bar: what bounds it)"
LEGEND_RIGHT = 0.7  # the axes' right edge: the legend sits beside them


def _known(value: Any) -> bool:
    try:
        return value == value and value is not None and float(value) >= 0
    except (TypeError, ValueError):
        return False


def drawable(table: pd.DataFrame) -> pd.DataFrame:
    """The rows a bar can be drawn for: a known wall time and time in epochs."""
    if table.empty:
        return table
    pairs = zip(table["wall_s"], table["epochs_s"], strict=True)
    return table[[_known(w) and _known(e) for w, e in pairs]]


def segments(row: Mapping[Any, Any]) -> dict[str, float]:
    """One row's bar, bottom to top (seconds): the table's columns, negative parts as 0; the
    steady part split by the trace shares when the row has them."""
    wall, epochs = float(row["wall_s"]), float(row["epochs_s"])
    out = {"outside": max(wall - epochs, 0.0)}
    steady = row["steady_s"]
    if not _known(steady):
        out["epochs"] = epochs
        return out
    steady = min(float(steady), epochs)
    shares = [row.get(k) for k in ("compute_pct", "exposed_communication_pct", "idle_pct")]
    if all(_known(s) for s in shares):
        compute, exposed, idle = (steady * float(s) / 100 for s in shares)  # type: ignore[arg-type]
        out.update(compute=compute, exposed=exposed, idle=idle)
        out["device_other"] = max(steady - compute - exposed - idle, 0.0)
    else:
        out["steady"] = steady
    out["rest"] = epochs - steady
    return out


def breakdown_figure(report: Report) -> Figure | None:
    """Stacked bars per configuration (grouped by strategy), each labelled with its verdict."""
    table = drawable(report.time_breakdown)
    if table.empty:
        return None
    rows = table.to_dict("records")
    bars = [segments(row) for row in rows]
    strategies = [str(row["strategy"]) for row in rows]
    xs = _group_positions(strategies)
    fig, ax = _figure(TITLE, right=LEGEND_RIGHT, bottom=0.17)
    ax.grid(False, axis="x")
    bottoms = [0.0] * len(rows)
    for name, (text, color, hatch) in SEGMENTS.items():
        heights = [bar.get(name, 0.0) for bar in bars]
        if not any(name in bar for bar in bars):
            continue
        ax.bar(xs, heights, bottom=bottoms, color=color, hatch=hatch, edgecolor="white", label=text)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    _verdicts(ax, xs, bottoms, [row["bound_by"] for row in rows])
    ax.set_xticks(xs, [str(int(row["workers"])) for row in rows])
    ax.set_ylabel("Seconds per run")
    ax.set_ylim(0, max(bottoms) * 1.6 if max(bottoms) > 0 else 1.0)
    handles, texts = ax.get_legend_handles_labels()  # listed top to bottom, as stacked
    legend = ax.legend(
        handles[::-1], texts[::-1], loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small"
    )
    fit.legend_beside(fig, ax, legend)
    _strategy_labels(ax, xs, strategies)
    return fig


def _verdicts(ax: Axes, xs: list[float], tops: list[float], verdicts: list[Any]) -> None:
    """Each bar's verdict, written upwards just above it."""
    for x, top, verdict in zip(xs, tops, verdicts, strict=True):
        if isinstance(verdict, str) and verdict:
            ax.annotate(
                label(verdict),
                (x, top),
                xytext=(0, 3),
                textcoords="offset points",
                rotation=90,
                ha="center",
                va="bottom",
                fontsize=7,
            )


def missing_reason(report: Report) -> str:
    """Why the figure is not drawn: no configuration, or none with a wall time or epoch times."""
    table = report.time_breakdown
    if table.empty:
        return "no configuration has epoch times"
    if not any(_known(v) for v in table["epochs_s"]):
        return "no epoch times"
    return "no run's wall time (total_time of performance.json)"
