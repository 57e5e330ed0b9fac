"""Plain sentences computed from a report's tables: the summary and the methods of a page.

Numbers are formatted with the tables' own formatters, so a sentence shows the same digits as
the table it comes from. Light module: pandas is only touched through the report's frames.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from itwin_report.render.layout import VERDICT_WORDS, straggler_lines, warmup_line
from itwin_report.report.columns import base_of
from itwin_report.report.specs import SPECS

if TYPE_CHECKING:
    import pandas as pd

    from itwin_report.report import Report


def _cell(table: str, column: str, row: dict[str, Any]) -> str:
    """``row[column]`` as the table shows it, ``~`` marking an estimate."""
    return SPECS[table].column(column).cell(row)


def _fmt(table: str, column: str, value: Any) -> str:
    """``value`` as the table shows it in ``column``."""
    return SPECS[table].column(column).fmt(value)


def _known(value: Any) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in rec.items()} for rec in frame.to_dict("records")]


def _largest(frame: pd.DataFrame, column: str) -> list[dict[str, Any]]:
    """Per strategy, its row with the most workers among rows where ``column`` is known."""
    best: dict[str, dict[str, Any]] = {}
    for rec in _records(frame):
        if _known(rec[column]) and (
            rec["strategy"] not in best or rec["workers"] > best[rec["strategy"]]["workers"]
        ):
            best[rec["strategy"]] = rec
    return [best[s] for s in sorted(best, key=str)]


def _noise(report: Report, workers: int) -> str | None:
    """How the 95 % intervals of the per-run means compare at ``workers``.

    "separate" when the fastest strategy's interval lies below every other's, "overlap" when not,
    "single" when a strategy has one run; None without per-run means (then the spreads decide).
    """
    analysis = getattr(report, "analysis", None)
    if analysis is None or analysis.run_means.empty:
        return None
    from itwin_report.analysis.intervals import mean_interval

    here = analysis.run_means[analysis.run_means["workers"] == workers]
    bounds = {
        str(s): mean_interval(g["avg_epoch_time_s"].to_numpy(dtype=float))
        for s, g in here.groupby("strategy", sort=True)
    }
    if len(bounds) < 2:
        return None
    if any(math.isnan(low) for _, low, _ in bounds.values()):
        return "single"
    best = min(bounds, key=lambda name: bounds[name][0])
    others = [bounds[name][1] for name in bounds if name != best]
    return "separate" if all(bounds[best][2] < low for low in others) else "overlap"


def fastest_sentences(report: Report) -> list[str]:
    """The fastest strategy at each worker count measured by two strategies or more.

    A strategy is called fastest only when the 95 % intervals of the per-run mean epoch times
    separate (the rule of the JSON report's ``fastest``); otherwise the sentence says "within
    noise", or that single runs cannot tell.
    """
    rows = [r for r in _records(report.epoch_time) if _known(r["avg_epoch_time_s"])]
    out = []
    for workers in sorted({int(r["workers"]) for r in rows}):
        here = sorted(
            (r for r in rows if int(r["workers"]) == workers), key=lambda r: r["avg_epoch_time_s"]
        )
        if len(here) < 2:
            continue
        first, second = here[0], here[1]
        t1, t2 = (
            _fmt("epoch_time", "avg_epoch_time_s", first["avg_epoch_time_s"]),
            _fmt("epoch_time", "avg_epoch_time_s", second["avg_epoch_time_s"]),
        )
        ratio = second["avg_epoch_time_s"] / first["avg_epoch_time_s"]
        noise = _noise(report, workers)
        if noise is None:
            s1, s2 = first["std_epoch_time_s"], second["std_epoch_time_s"]
            gap = second["avg_epoch_time_s"] - first["avg_epoch_time_s"]
            if not (_known(s1) and _known(s2)):
                noise = "single"
            else:
                noise = "overlap" if gap <= s1 + s2 else "separate"
        if noise == "overlap":
            out.append(
                f"At {workers} workers, {first['strategy']} ({t1}) and {second['strategy']} ({t2})"
                " are within noise: their 95 % intervals overlap."
            )
        elif noise == "single":
            out.append(
                f"At {workers} workers, {first['strategy']} has the lowest epoch time ({t1}; next "
                f"is {second['strategy']} with {t2}, {ratio:.2f}x slower), but with single runs "
                "noise cannot be ruled out."
            )
        else:
            out.append(
                f"At {workers} workers, {first['strategy']} is fastest with {t1} per epoch; "
                f"next is {second['strategy']} with {t2} ({ratio:.2f}x slower)."
            )
    return out


def efficiency_sentences(report: Report) -> list[str]:
    """Each strategy's epoch-time (and end-to-end throughput) efficiency at its largest count."""
    out = []
    thr = {(r["strategy"], r["workers"]): r for r in _records(report.throughput)}
    for rec in _largest(report.epoch_time, "efficiency"):
        base = base_of(rec)
        base_txt = f" over {_config(rec['strategy'], base)}" if base is not None else ""
        other = thr.get((rec["strategy"], rec["workers"]))
        thr_txt = ""
        if other is not None and _known(other["efficiency"]):
            thr_txt = (
                f"; end-to-end throughput efficiency "
                f"{_fmt('throughput', 'efficiency', other['efficiency'])}"
            )
        out.append(
            f"{rec['strategy']} reaches "
            f"{_fmt('epoch_time', 'efficiency', rec['efficiency'])} epoch-time efficiency at "
            f"{int(rec['workers'])} workers (speedup "
            f"{_fmt('epoch_time', 'speedup', rec['speedup'])}{base_txt}{thr_txt})."
        )
    if report.analysis is not None and report.analysis.efficiency_note:
        out.append(report.analysis.efficiency_note)
    return out


def time_sentences(report: Report) -> list[str]:
    """Where GPU time goes at each strategy's largest profiled worker count: from traces where
    the configuration has them (overlap counted once), else from the profiler averages."""
    out = []
    breakdown = {(r["strategy"], r["workers"]): r for r in _records(report.time_breakdown)}
    traced = (
        _largest(report.computation, "trace_compute_fraction")
        if "trace_compute_fraction" in report.computation
        else []
    )
    for rec in traced:
        row = breakdown.get((rec["strategy"], rec["workers"]), {})
        shares = ""
        if _known(row.get("exposed_communication_pct")):
            exposed = _cell("time_breakdown", "exposed_communication_pct", row)
            idle = _cell("time_breakdown", "idle_pct", row)
            shares = f"; exposed communication {exposed}, idle {idle}"
        out.append(
            f"At {int(rec['workers'])} workers, {rec['strategy']} computes during "
            f"{_fmt('computation', 'trace_compute_fraction', rec['trace_compute_fraction'])} of "
            f"the device time (from traces{shares})."
        )
    done = {r["strategy"] for r in traced}
    for rec in _largest(report.computation, "computation_fraction"):
        if rec["strategy"] in done:
            continue
        comm = rec["communication_fraction"]
        other = 1.0 - rec["computation_fraction"] - (comm if _known(comm) else 0.0)
        out.append(
            f"At {int(rec['workers'])} workers, {rec['strategy']} spends "
            f"{_fmt('computation', 'computation_fraction', rec['computation_fraction'])} of GPU "
            f"time in computation, {_fmt('computation', 'communication_fraction', comm)} in "
            f"communication and {_fmt('computation', 'computation_fraction', max(0.0, other))}"
            " elsewhere. These are profiler averages, which count communication that overlaps"
            " computation twice."
        )
    return out


def bound_sentences(report: Report) -> list[str]:
    """What bounds the configurations (the time breakdown's verdicts), grouped by verdict, and
    the stragglers named."""
    groups: dict[str, list[str]] = {}
    for rec in _records(report.time_breakdown):
        groups.setdefault(str(rec["bound_by"]), []).append(
            f"{rec['strategy']}-{int(rec['workers'])}"
        )
    if not groups:
        return []
    undecided = groups.pop("undecided", [])
    parts = [f"by {verdict}: {', '.join(names)}" for verdict, names in groups.items()]
    out = [f"Bound {'; '.join(parts)}."] if parts else []
    if undecided:
        out.append(f"Undecided what bounds {', '.join(undecided)}: the data cannot tell.")
    named = straggler_lines(report)
    if named:
        out.append(f"Stragglers: {'; '.join(named)}.")
    return out


def verdict_sentences(report: Report) -> list[str]:
    """The input-bottleneck verdict over all throughput rows."""
    groups: dict[str, list[str]] = {}
    for rec in _records(report.throughput):
        bound = rec["input_bound"]
        word = VERDICT_WORDS[bool(bound) if _known(bound) else None]
        groups.setdefault(word, []).append(f"{rec['strategy']}-{int(rec['workers'])}")
    if not groups:
        return []
    total = sum(len(v) for v in groups.values())
    if set(groups) == {"not input-bound"}:
        return [f"No configuration is input-bound ({total} checked)."]
    out = []
    for word in ("input-bound", "not input-bound", "undecided"):
        if word in groups:
            names = ", ".join(groups[word])
            out.append(f"{word.capitalize()}: {names}.")
    return [" ".join(out)]


def energy_sentences(report: Report) -> list[str]:
    """Energy per epoch from each strategy's smallest to its largest worker count."""
    out = []
    by_strategy: dict[str, list[dict[str, Any]]] = {}
    for rec in _records(report.gpu):
        if _known(rec["energy_wh_per_epoch"]):
            by_strategy.setdefault(rec["strategy"], []).append(rec)
    for strategy in sorted(by_strategy, key=str):
        recs = sorted(by_strategy[strategy], key=lambda r: r["workers"])
        low, high = recs[0], recs[-1]
        e_low = _cell("gpu", "energy_wh_per_epoch", low)
        if low is high:
            out.append(
                f"Energy per epoch for {strategy}: {e_low} at {int(low['workers'])} workers "
                "(one size measured)."
            )
            continue
        e_high = _cell("gpu", "energy_wh_per_epoch", high)
        ratio = (
            f" ({high['energy_wh_per_epoch'] / low['energy_wh_per_epoch']:.2f}x)"
            if low["energy_wh_per_epoch"] > 0
            else ""
        )
        out.append(
            f"Energy per epoch for {strategy} goes from {e_low} at {int(low['workers'])} workers "
            f"to {e_high} at {int(high['workers'])} workers{ratio}."
        )
    return out


def summary_sentences(report: Report) -> list[str]:
    """The page's summary: fastest strategy per size, efficiency, time, verdict, energy."""
    if report.epoch_time.empty:
        lines = ["No epoch times were found, so no scaling can be stated."]
    else:
        lines = fastest_sentences(report) + efficiency_sentences(report)
    lines += time_sentences(report) + bound_sentences(report)
    lines += verdict_sentences(report) + energy_sentences(report)
    decision = getattr(report, "decision", None)
    if decision is not None:
        lines += decision.sentences
    return lines


def _config(strategy: str, base: tuple[str, int]) -> str:
    """``4 workers``, or for another strategy's run ``non-distributed at 1 worker``."""
    name, workers = base
    count = f"{workers} worker{'' if workers == 1 else 's'}"
    return count if name == strategy else f"{name} at {count}"


def base_sentence(report: Report) -> str:
    """Which base each strategy's speedup is measured against, read back from the table."""
    bases: dict[str, tuple[str, int]] = {}
    for rec in _records(report.epoch_time):
        base = base_of(rec)
        if base is not None:
            bases.setdefault(rec["strategy"], base)
    if not bases:
        return "No speedup could be computed: no strategy has a base configuration."
    listed = ", ".join(f"{s} {_config(s, b)}" for s, b in sorted(bases.items(), key=str))
    return (
        "Speedup and efficiency are measured against a base configuration, where the speedup is 1: "
        "speedup = epoch time at the base / epoch time, efficiency = speedup x base workers / "
        f"workers. Bases in this report: {listed}. The dashed ideal lines of the plots start from "
        "the same bases, so a row at 100 % efficiency lies on its line."
    )


def methods_paragraphs(report: Report, warmup: str = "") -> list[str]:
    """How the numbers were computed, in plain sentences (``warmup``: the report's own line)."""
    return [
        (warmup or warmup_line(report))
        + " Warm-up epochs are slower (data loading, compilation, cache warm-up); leaving them out"
        " measures the steady state. Energy per epoch divides by all epochs, warm-up included.",
        base_sentence(report),
        "Intervals: the spread between runs is the sample standard deviation (ddof = 1) of the "
        "per-run mean epoch times, shown as n/a when a configuration has a single run. In the "
        "summary, a strategy is fastest only when the 95 % intervals of the per-run mean epoch "
        "times separate (Student's t on each configuration's runs); otherwise the strategies "
        "are within noise. Speedup and efficiency intervals are described in docs/analysis.md.",
        "Energy is read from each GPU's cumulative energy counter when the runs log it "
        "(gpu_energy_J: last reading minus first, resets handled), else it sums the GPU's power "
        "samples times the probing interval; a GPU that several ranks report counts once; it "
        "is averaged over runs, never summed across them. The recommendation walks the "
        "time–energy Pareto front from its most frugal configuration towards the fastest while "
        "each step's extra energy is worth its extra speed (docs/energy.md). Utilization is "
        "the share of time a kernel ran, so communication kernels count as busy.",
        "Throughput comes, per strategy, from the most preferred source that covers all its "
        "configurations: performance.json, then the logged rate metrics, then epoch time and "
        "samples per epoch. The input-bottleneck verdict compares achieved with estimated "
        "throughput, GPU idle time and the collectives' share of device time; the evidence line "
        "of each configuration lists what it saw.",
    ]
