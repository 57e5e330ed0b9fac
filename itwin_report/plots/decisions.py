"""The figures of the report's decisions: predictions against the fitted scaling models, and the
time–energy Pareto front. Same conventions as :mod:`itwin_report.plots.figures`.

Light module: matplotlib is imported inside functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from itwin_report.plots.figures import (
    IDEAL_COLOR,
    PALETTE,
    _figure,
    _plain_log_y,
    _worker_ticks,
    label,
    strategy_colors,
)
from itwin_report.plots.fit import legend_beside, point_labels

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from itwin_report.report import Report


def _capped(times: Any, cap: Any) -> Any:
    """``times`` never below an input ceiling's floor (the job-wide input rate bounds every
    count, as the predictions are bounded)."""
    import numpy as np

    return times if cap is None else np.maximum(times, cap.floor_s)


def prediction_figure(report: Report) -> Figure | None:
    """Measured epoch times, the fitted curves, and the predictions with their intervals.

    The extrapolated region (beyond the largest measured worker count) is shaded with the
    prediction interval of each strategy's chosen model. Every measured configuration is
    drawn; those the fit left out as input-bound are hollow. Where an input ceiling bounds a
    strategy, its curve and interval never fall below the ceiling's floor (dotted from the
    worker count where the input was found to bind), as the predictions never do.
    """
    import numpy as np

    analysis = report.analysis
    if analysis is None:
        return None
    predicted = analysis.predictions
    answered = predicted[predicted["avg_epoch_time_s"].notna()] if len(predicted) else predicted
    if answered.empty:
        return None
    colors = strategy_colors(report)
    fig, ax = _figure("Epoch time: measured, fitted and predicted")
    ticks: set[int] = set()
    key = Key()
    for sm in analysis.fits:
        mine = answered[answered["strategy"] == sm.strategy]
        if mine.empty:
            continue
        color = colors.get(sm.strategy, PALETTE[0])
        table = report.epoch_time[report.epoch_time["strategy"] == sm.strategy]
        measured = {int(w): float(t) for w, t in zip(sm.workers, sm.times, strict=True)}
        all_w = sorted(set(measured) | {int(w) for w in table["workers"]})
        last, top = float(max(all_w)), float(mine["workers"].max())
        # each mark keeps its own label (what it is); the legend is the key below
        ax.plot(sm.workers, sm.times, "o", color=color, label=label(f"{sm.strategy} measured"))
        left_out = table[~table["workers"].isin(list(measured))]
        if len(left_out):
            ax.plot(
                left_out["workers"].to_numpy(dtype=float),
                left_out["avg_epoch_time_s"].to_numpy(dtype=float),
                "o",
                mfc="none",
                color=color,
                label=label(f"{sm.strategy} measured, input-bound (not fitted)"),
            )
            key.left_out = True
        cap = analysis.ceilings.get(sm.strategy)

        if sm.chosen is not None:
            fit = sm.fits[sm.chosen]
            grid = np.geomspace(float(sm.workers.min()), max(top, last), 80)
            name = {"amdahl": "Amdahl", "usl": "USL"}[fit.model]
            fitted = label(f"{sm.strategy} {name} fit")
            ax.plot(grid, _capped(fit.predict(grid), cap), "-", color=color, label=fitted)
            key.strategies.append((label(f"{sm.strategy} ({name})"), color))
            beyond = np.geomspace(last, max(top, last), 40)
            bounds = np.array([fit.interval(float(w))[1:] for w in beyond])
            low_b, high_b = _capped(bounds[:, 0], cap), _capped(bounds[:, 1], cap)
            ax.fill_between(beyond, low_b, high_b, color=color, alpha=0.15)
        else:
            key.strategies.append((label(sm.strategy), color))
        if cap is not None:
            ax.hlines(cap.floor_s, float(cap.workers), top, colors=color, linestyles=":")
            key.ceiling = True
        low = mine["low_s"].fillna(mine["avg_epoch_time_s"])
        high = mine["high_s"].fillna(mine["avg_epoch_time_s"])
        ax.errorbar(
            mine["workers"].to_numpy(dtype=float),
            mine["avg_epoch_time_s"].to_numpy(dtype=float),
            yerr=[
                (mine["avg_epoch_time_s"] - low).to_numpy(dtype=float),
                (high - mine["avg_epoch_time_s"]).to_numpy(dtype=float),
            ],
            fmt="s",
            mfc="none",
            color=color,
            capsize=4,
            label=label(f"{sm.strategy} predicted (95 %)"),
        )
        ax.axvspan(last, max(top, last), color="0.9", zorder=0)
        ticks |= set(all_w) | {int(w) for w in mine["workers"]}
    _worker_ticks(ax, sorted(ticks))
    _plain_log_y(ax)
    ax.set_ylabel("Average epoch time (s)")
    handles, texts = key.entries()
    legend = ax.legend(
        handles, texts, fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0)
    )
    legend_beside(fig, ax, legend)
    return fig


@dataclass
class Key:
    """The prediction figure's legend: one entry per strategy (its colour, its model), then
    what each mark means, in black, once."""

    strategies: list[tuple[str, str]] = field(default_factory=list)
    left_out: bool = False
    ceiling: bool = False

    def entries(self) -> tuple[list[Any], list[str]]:
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        ink = "black"
        rows: list[tuple[Any, str]] = [
            (Line2D([], [], color=c, marker="o"), name) for name, c in self.strategies
        ]
        rows.append((Line2D([], [], color=ink, marker="o", ls="none"), "measured"))
        if self.left_out:
            rows.append(
                (
                    Line2D([], [], color=ink, marker="o", mfc="none", ls="none"),
                    "input-bound, not fitted",
                )
            )
        rows.append((Line2D([], [], color=ink), "model fit"))
        rows.append(
            (Line2D([], [], color=ink, marker="s", mfc="none", ls="none"), "predicted (95 %)")
        )
        rows.append((Patch(color=ink, alpha=0.15), "95 % prediction band"))
        rows.append((Patch(color="0.9"), "beyond the measured counts"))
        if self.ceiling:
            rows.append((Line2D([], [], color=ink, ls=":"), "input ceiling"))
        return [h for h, _ in rows], [t for _, t in rows]


class Axes(NamedTuple):
    """What the Pareto plot of one decision basis draws: title, front columns, axis labels."""

    title: str
    columns: tuple[str, str]
    x: str
    y: str


AXES = {
    "epoch": Axes(
        "Epoch time against energy per epoch",
        ("epoch_time_s", "energy_wh_per_epoch"),
        "Epoch time after warm-up (s)",
        "Energy per epoch",
    ),
    "1k samples": Axes(
        "Time against energy per 1k samples",
        ("time_s_per_1k_samples", "energy_wh_per_1k_samples"),
        "Time per 1k samples (s)",
        "Energy per 1k samples",
    ),
    "target": Axes(
        "Time against energy to {target}",
        ("time_to_target_s", "energy_wh_to_target"),
        "Time to target (s)",
        "Energy to target",
    ),
}


def pareto_figure(report: Report) -> Figure | None:
    """Time against energy per unit of work (per epoch, or per 1k samples when samples per
    epoch vary: the decision's own points): one point per configuration, labelled
    strategy×GPUs (``~`` before an estimated energy), in its strategy's colour; the
    time–energy front joined, the knee ringed."""
    decision = getattr(report, "decision", None)
    if decision is None or decision.pareto.empty:
        return None
    pts = [p for p in decision.points if p.energy == p.energy and p.time == p.time]
    axes = AXES.get(decision.basis, AXES["1k samples"])
    colors = strategy_colors(report)
    title = axes.title.format(target=decision.target)
    fig, ax = _figure(f"{title} (front joined)", right=0.97)
    for strategy in sorted({p.strategy for p in pts}):
        mine = [p for p in pts if p.strategy == strategy]
        ax.scatter(
            [p.time for p in mine],
            [p.energy for p in mine],
            color=colors[strategy],
            label=label(strategy),
            zorder=3,
        )
    front = decision.pareto
    x, y = axes.columns
    ax.plot(
        list(front[x]),
        list(front[y]),
        color=IDEAL_COLOR,
        linestyle="--",
        label="time–energy front",
        zorder=2,
    )
    if decision.knee is not None:
        knee = next(p for p in pts if p.key == decision.knee)
        ax.scatter(
            [knee.time],
            [knee.energy],
            s=220,
            facecolors="none",
            edgecolors="black",
            label=label(f"knee: {knee.strategy}×{knee.workers}"),
            zorder=4,
        )
    ax.margins(x=0.15, y=0.1)
    ax.set_xlabel(axes.x)
    estimated = "; ~ estimated" if any(p.coverage < 1 for p in pts) else ""
    ax.set_ylabel(f"{axes.y} (Wh, all GPUs{estimated})")
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    legend_beside(fig, ax, legend)
    point_labels(  # each label beside its own point, clear of the others
        ax,
        [(p.time, p.energy) for p in pts],
        [("~" if p.coverage < 1 else "") + label(f"{p.strategy}×{p.workers}") for p in pts],
    )
    return fig
