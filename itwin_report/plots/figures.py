"""One definition per figure of a report (matplotlib object API, Agg canvas; no pyplot state).

Figures are laid out once with fixed margins (no layout engine, no tight bounding box), so
saving draws each figure a single time; where a legend, a title or group labels need more room,
:mod:`.fit` measures them once and moves the margins before the figure is saved. Store values
(strategy names) reach matplotlib only through :func:`label`, which keeps ``$`` from starting
mathtext and caps their length.

Light module: matplotlib is imported inside functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from itwin_report.plots import fit
from itwin_report.util.text import plural

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from itwin_report.report import Report

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
IDEAL_COLOR = "0.4"
FIGSIZE = (7.5, 4.8)
DPI = 120  # of the files, and of the figures as they are laid out: texts measure as drawn
# fixed margins (fractions of the figure): room for a two-line title, tick labels, and a
# legend outside the axes on the right for bar charts
MARGINS = {"left": 0.1, "right": 0.97, "bottom": 0.11, "top": 0.86}
OUTSIDE_LEGEND_RIGHT = 0.8
GROUP_LABEL_BELOW = 19.0  # points from the x axis down to the strategy names under bar groups


def label(text: object) -> str:
    """Any text with a store value in it as matplotlib text: masked, then
    :func:`~itwin_report.util.escape.plot_text` (shortened, controls escaped, never mathtext).

    Every title, legend entry, tick label and annotation built from store values goes here.
    """
    from itwin_report.util.escape import plot_text
    from itwin_report.util.masking import mask_text

    return plot_text(mask_text(str(text)))


def strategy_colors(report: Report) -> dict[str, str]:
    """One colour per strategy of the report (:func:`colors_for` its strategies)."""
    names: set[str] = set()
    for frame in (report.epoch_time, report.gpu, report.computation, report.throughput):
        names |= {str(s) for s in frame["strategy"]}
    return colors_for(names)


# itwinai's strategies keep their colour in every report, whichever others are beside them
KNOWN_COLORS = {
    "deepspeed": PALETTE[0],
    "horovod": PALETTE[1],
    "torch-ddp": PALETTE[3],
    "non-distributed": PALETTE[7],
}


def colors_for(names: Iterable[str]) -> dict[str, str]:
    """A colour per strategy name, decided by the set of names alone (never by the order they
    come in): itwinai's strategies have their own (:data:`KNOWN_COLORS`); the others, sorted,
    take the palette's other colours in turn."""
    names = set(names)
    known = {n: KNOWN_COLORS[n] for n in names if n in KNOWN_COLORS}
    free = [c for c in PALETTE if c not in known.values()]
    others = sorted(names - set(known))
    return {**known, **{n: free[i % len(free)] for i, n in enumerate(others)}}


def _figure(title: str, **margins: float) -> tuple[Figure, Axes]:
    """A figure with one axes, laid out once with fixed margins (``margins`` override them)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(**{**MARGINS, **margins})
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    return fig, ax


def _worker_ticks(ax: Axes, workers: list[int], log: bool = True) -> None:
    """Label the x axis with the actual worker counts."""
    from matplotlib.ticker import NullFormatter, NullLocator

    if log:
        ax.set_xscale("log", base=2)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(workers, [str(w) for w in workers])
    ax.set_xlabel("Workers (GPUs)")


def _warmup_caption(ax: Axes, report: Report) -> None:
    """Add the warm-up choice under the title."""
    n = report.warmup_epochs
    text = f"first {n} epoch(s) of every run left out" if n > 0 else "all epochs included"
    ax.set_title(f"{ax.get_title()}\n({text})")


def _plain_log_y(ax: Axes, base: int = 10) -> None:
    """Log y axis labelled with plain round numbers (12, 20, 30, 50), not powers, with ticks
    across the whole range however narrow (:func:`~itwin_report.plots.fit.log_ticks`)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter, NullLocator

    ax.set_yscale("log", base=base)
    ax.yaxis.set_major_locator(fit.log_locator(base))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_minor_formatter(NullFormatter())


def _by_strategy(frame: pd.DataFrame, column: str) -> list[tuple[str, list[int], list[float]]]:
    out = []
    for strategy, group in frame.groupby("strategy", sort=True):
        group = group[group[column].notna()].sort_values("workers")
        if len(group):
            out.append((str(strategy), [int(w) for w in group["workers"]], list(group[column])))
    return out


def _lines(
    report: Report, frame: pd.DataFrame, column: str, title: str, ylabel: str
) -> tuple[Figure, Axes] | None:
    series = _by_strategy(frame, column)
    if not series:
        return None
    colors = strategy_colors(report)
    fig, ax = _figure(title)
    for strategy, workers, values in series:
        ax.plot(workers, values, marker="o", color=colors[strategy], label=label(strategy))
    _worker_ticks(ax, sorted({w for _, ws, _ in series for w in ws}))
    ax.set_ylabel(ylabel)
    return fig, ax


def epoch_time_figure(report: Report) -> Figure | None:
    made = _lines(
        report,
        report.epoch_time,
        "avg_epoch_time_s",
        "Average epoch time vs workers",
        "Average epoch time (s)",
    )
    if made is None:
        return None
    fig, ax = made
    _plain_log_y(ax)
    ax.legend(title="Strategy")
    _warmup_caption(ax, report)
    return fig


def speedup_figure(report: Report) -> Figure | None:
    made = _lines(
        report, report.epoch_time, "speedup", "Relative speedup (epoch time)", "Speedup (x)"
    )
    if made is None:
        return None
    fig, ax = made
    _plain_log_y(ax, base=2)
    _ideal_speedup(ax, report.epoch_time)
    interval_bars(ax, report, "speedup")
    ax.legend(title="Strategy")
    _warmup_caption(ax, report)
    return fig


def ideal_bases(table: pd.DataFrame) -> dict[float, list[int]]:
    """Ideal-scaling base (workers at speedup 1) -> the worker counts it covers.

    Read from the rows' ``base_workers`` column, so a row at 100 % efficiency lies on the
    ideal line of its own base.
    """
    known = table[table["speedup"].notna() & table["base_workers"].notna()]
    bases: dict[float, set[int]] = {}
    for w, b in zip(known["workers"], known["base_workers"], strict=True):
        bases.setdefault(float(b), set()).add(int(w))
    return {b: sorted(ws) for b, ws in sorted(bases.items())}


def _ideal_speedup(ax: Axes, table: pd.DataFrame) -> None:
    """Dashed ideal lines, speedup = workers / base: one per distinct base in the table."""
    bases = ideal_bases(table)
    for base, workers in bases.items():
        low, top = min(workers), max(workers)
        name = "ideal (linear)" if len(bases) == 1 else f"ideal from {plural(base, 'worker')}"
        ax.plot([low, top], [low / base, top / base], label=name, color=IDEAL_COLOR, ls="--")


def efficiency_figure(report: Report) -> Figure | None:
    made = _lines(
        report,
        report.epoch_time,
        "efficiency",
        "Parallel efficiency (epoch time)",
        "Efficiency (speedup / scale)",
    )
    if made is None:
        return None
    fig, ax = made
    ax.axhline(1.0, label="ideal", color=IDEAL_COLOR, linestyle="--")
    interval_bars(ax, report, "efficiency")
    top = max(1.1, float(report.epoch_time["efficiency"].max()) * 1.05)
    ax.set_ylim(0, top)
    ax.legend(title="Strategy")
    _warmup_caption(ax, report)
    return fig


def throughput_figure(report: Report) -> Figure | None:
    made = _lines(
        report,
        report.throughput,
        "samples_per_sec",
        "Throughput vs workers",
        "Throughput (samples/s, whole job)",
    )
    if made is None:
        return None
    fig, ax = made
    _plain_log_y(ax)
    colors = strategy_colors(report)
    for strategy, workers, ideal in _ideal_throughput(report.throughput):
        ax.plot(
            [workers[0], workers[-1]],
            [ideal[0], ideal[-1]],
            color=colors[strategy],
            linestyle="--",
            alpha=0.6,
            label=label(f"{strategy} ideal"),
        )
    sources = sorted({str(s) for s in report.throughput["source"]})
    ax.legend(title="Strategy")
    ax.set_title(f"{ax.get_title()}\n(source: {', '.join(sources)}; dashed: linear from the base)")
    return fig


def _ideal_throughput(table: pd.DataFrame) -> list[tuple[str, list[int], list[float]]]:
    """Per strategy: linear throughput from its base, rate(base) * workers / base workers.

    The base is the row's ``base_strategy``/``base_workers``; its rate is read from the table.
    Without a base in the table, linear from the strategy's first point.
    """
    rates = {
        (str(s), int(w)): float(v)
        for s, w, v in zip(
            table["strategy"], table["workers"], table["samples_per_sec"], strict=True
        )
        if v == v
    }
    out = []
    for strategy, workers, values in _by_strategy(table, "samples_per_sec"):
        mine = table[(table["strategy"].astype(str) == strategy) & table["samples_per_sec"].notna()]
        first = mine.sort_values("workers").iloc[0]
        base = (str(first["base_strategy"]), first["base_workers"])
        if base[1] == base[1] and (base[0], int(base[1])) in rates:
            rate, base_w = rates[(base[0], int(base[1]))], float(base[1])
        else:
            rate, base_w = values[0], float(workers[0])
        out.append((strategy, workers, [rate * w / base_w for w in workers]))
    return out


def _grouped_bars(
    report: Report,
    frame: pd.DataFrame,
    column: str,
    title: str,
    ylabel: str,
    estimated: str | None = None,
) -> Figure | None:
    """Bars grouped by worker count, one bar per strategy, in the strategy's colour.

    ``estimated``: a coverage column; bars whose coverage is below 1 are hatched.
    """
    known = frame[frame[column].notna()]
    if known.empty:
        return None
    colors = strategy_colors(report)
    workers = sorted({int(w) for w in known["workers"]})
    strategies = sorted({str(s) for s in known["strategy"]})
    width = 0.8 / len(strategies)
    fig, ax = _figure(title, right=OUTSIDE_LEGEND_RIGHT)
    ax.grid(False, axis="x")
    for i, strategy in enumerate(strategies):
        mine = known[known["strategy"] == strategy]
        xs = [
            workers.index(int(w)) + (i - (len(strategies) - 1) / 2) * width for w in mine["workers"]
        ]
        bars = ax.bar(
            xs, list(mine[column]), width=width, color=colors[strategy], label=label(strategy)
        )
        if estimated is not None:
            for bar, cov in zip(bars, mine[estimated], strict=True):
                if cov < 1:
                    bar.set_hatch("//")
    ax.set_xticks(range(len(workers)), [str(w) for w in workers])
    ax.set_xlabel("Workers (GPUs)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, float(known[column].max()) * 1.2)
    legend = ax.legend(title="Strategy", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fit.legend_beside(fig, ax, legend)
    return fig


def gpu_energy_figure(report: Report) -> Figure | None:
    partial = bool((report.gpu["energy_coverage"] < 1).any())
    title = "GPU energy per run (all GPUs" + (
        "; hatched: estimated from the GPUs that logged metrics)" if partial else ")"
    )
    return _grouped_bars(
        report, report.gpu, "energy_wh", title, "Energy per run (Wh)", "energy_coverage"
    )


def gpu_utilization_figure(report: Report) -> Figure | None:
    fig = _grouped_bars(report, report.gpu, "utilization_pct", "GPU utilization", "Utilization (%)")
    if fig is not None:
        fig.axes[0].set_ylim(0, 100)
    return fig


def _group_positions(strategies: list[str]) -> list[float]:
    """Bar positions with a one-bar gap between consecutive strategies."""
    xs: list[float] = []
    for i, strategy in enumerate(strategies):
        gap = 1.0 if i and strategy != strategies[i - 1] else 0.0
        xs.append(xs[-1] + 1.0 + gap if xs else 0.0)
    return xs


def _strategy_labels(ax: Axes, xs: list[float], strategies: list[str]) -> None:
    """Each strategy's name in bold under its group of bars, fitted side by side, and the axis
    label saying so."""
    ax.set_xlabel("Workers (GPUs), grouped by strategy", labelpad=2)
    texts = []
    for strategy in dict.fromkeys(strategies):
        group = [x for x, s in zip(xs, strategies, strict=True) if s == strategy]
        texts.append(
            ax.annotate(
                label(strategy),
                (sum(group) / len(group), 0),
                xycoords=ax.get_xaxis_transform(),
                xytext=(0, -GROUP_LABEL_BELOW),
                textcoords="offset points",
                ha="center",
                va="top",
                fontweight="bold",
            )
        )
    fit.group_labels(ax.figure, ax, texts, GROUP_LABEL_BELOW)  # type: ignore[arg-type]


def computation_figure(report: Report) -> Figure | None:
    """Stacked bars per configuration: computation, communication, other (hatched)."""
    table = report.computation[report.computation["computation_fraction"].notna()]
    if table.empty:
        return None
    colors = strategy_colors(report)
    fig, ax = _figure("Computation vs other (share of GPU time)", right=0.74, bottom=0.17)
    ax.grid(False, axis="x")
    comp = [float(v) for v in table["computation_fraction"]]
    comm = [float(v) if v == v else 0.0 for v in table["communication_fraction"]]
    other = [max(0.0, 1.0 - a - b) for a, b in zip(comp, comm, strict=True)]
    strategies = [str(s) for s in table["strategy"]]
    xs = _group_positions(strategies)
    bar_colors = [colors[s] for s in strategies]
    ax.bar(xs, comp, color=bar_colors, edgecolor="black", label="computation")
    ax.bar(
        xs,
        comm,
        bottom=comp,
        color=bar_colors,
        edgecolor="black",
        hatch="xx",
        alpha=0.6,
        label="communication",
    )
    bottoms = [a + b for a, b in zip(comp, comm, strict=True)]
    ax.bar(xs, other, bottom=bottoms, color="white", edgecolor="black", hatch="//", label="other")
    ax.set_xticks(xs, [str(int(w)) for w in table["workers"]])
    ax.set_ylabel("Fraction of GPU time")
    ax.set_ylim(0, 1)
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fit.legend_beside(fig, ax, legend)
    _strategy_labels(ax, xs, strategies)
    return fig


def rates_figure(report: Report) -> Figure | None:
    """Rate and GlobalRate over elapsed time; points left out of the steady estimate marked."""
    from itwin_report.data.rundata import GLOBAL_RATE, RATE

    series = report.rate_series
    if series.empty or report.rate_config is None:
        return None
    strategy, workers = report.rate_config
    color = strategy_colors(report).get(strategy, PALETTE[0])
    fig, ax = _figure(label(f"Per-worker rates: {strategy}, {plural(workers, 'worker')}"))
    rate = series[series["key"] == RATE]
    glob = series[series["key"] == GLOBAL_RATE]
    if len(rate):
        ax.plot(rate["elapsed_s"], rate["value"], marker=".", color=color, label="Rate (smoothed)")
        out = rate[rate["excluded"]]
        ax.plot(
            out["elapsed_s"],
            out["value"],
            linestyle="none",
            marker="x",
            color="#d62728",
            markersize=8,
            label="left out of steady rate",
        )
    if len(glob):
        ax.plot(glob["elapsed_s"], glob["value"], color="0.3", linestyle="--", label="GlobalRate")
    ax.set_xlabel("Elapsed time (s)")
    ax.set_ylabel("Samples/s per worker")
    ax.set_ylim(bottom=0)
    ax.legend()
    return fig


def interval_bars(ax: Axes, report: Report, column: str) -> None:
    """95 % error bars on ``column`` (speedup or efficiency) where the table has an interval."""
    low, high = f"{column}_ci_low", f"{column}_ci_high"
    table = report.epoch_time
    if low not in table.columns:
        return
    colors = strategy_colors(report)
    known = table[table[low].notna() & table[high].notna() & table[column].notna()]
    for strategy, group in known.groupby("strategy", sort=True):
        values = group[column].to_numpy(dtype=float)
        below = values - group[low].to_numpy(dtype=float)
        above = group[high].to_numpy(dtype=float) - values
        ax.errorbar(
            group["workers"].to_numpy(dtype=float),
            values,
            yerr=[below.clip(min=0), above.clip(min=0)],
            fmt="none",
            ecolor=colors[str(strategy)],
            capsize=3,
        )
