"""Plain sentences computed from a report's tables: the summary and the methods of a page.

The summary answers first: at most five lines, each a decision with its number and the table it
comes from (the configuration to use, how far its strategy scales and at what efficiency, what
stops it, what to book, what the gate said), read from the tables' and the recommendation's own
columns, never worked out again. Then the details, grouped by table, each said once: the lines
under the epoch-time and GPU tables (:func:`details`); every other table carries its own notes.
Every writer shows them in the same order, JSON as records (:func:`summary_records`).

Numbers are formatted with the tables' own formatters, so a sentence shows the same digits as
the table it comes from. Light module: pandas is only touched through the report's frames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from itwin_report.render.layout import shown, warmup_line
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


def _n(name: Any) -> str:
    """A strategy's name in a sentence: as every writer shows a store value (masked, cut)."""
    return shown(str(name))


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


def _weak(report: Report) -> bool:
    return report.analysis is not None and report.analysis.scaling == "weak"


def efficiency_sentences(report: Report, skip: str | None = None) -> list[str]:
    """Each strategy's efficiency (epoch time, or weak-scaling) and end-to-end throughput
    efficiency at its largest count; ``skip``: a strategy the summary's top lines already give."""
    out = []
    kind = "weak-scaling efficiency" if _weak(report) else "epoch-time efficiency"
    thr = {(r["strategy"], r["workers"]): r for r in _records(report.throughput)}
    for rec in _largest(report.epoch_time, "efficiency"):
        if rec["strategy"] == skip:
            continue
        parts = []
        base = base_of(rec)
        if _known(rec["speedup"]):
            over = f" over {_config(rec['strategy'], base)}" if base is not None else ""
            parts.append(f"speedup {_fmt('epoch_time', 'speedup', rec['speedup'])}{over}")
        other = thr.get((rec["strategy"], rec["workers"]))
        if other is not None and _known(other["efficiency"]):
            value = _fmt("throughput", "efficiency", other["efficiency"])
            parts.append(f"end-to-end throughput efficiency {value}")
        more = f" ({'; '.join(parts)})" if parts else ""
        out.append(
            f"{_n(rec['strategy'])} reaches {_fmt('epoch_time', 'efficiency', rec['efficiency'])} "
            f"{kind} at {int(rec['workers'])} workers{more}."
        )
    return out


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
                f"Energy per epoch for {_n(strategy)}: {e_low} at {int(low['workers'])} workers "
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
            f"Energy per epoch for {_n(strategy)} goes from {e_low} at "
            f"{int(low['workers'])} workers to {e_high} at {int(high['workers'])} workers{ratio}."
        )
    return out


@dataclass(frozen=True)
class Line:
    """One line of the summary: what it answers (``strategy``, ``scaling``, ``limit``,
    ``booking``, ``gate``; ``detail`` below them), the table it comes from, its text."""

    kind: str
    table: str
    text: str


# where a line's number is shown: the layout's table (or notes) names and their headings
SOURCES = {
    "pareto": "Time–energy Pareto front",
    "epoch_time": "Epoch time",
    "time_breakdown": "Where the time goes",
    "cost": "Cost per configuration",
    "gate": "Efficiency gate",
    "throughput": "Throughput",
    "gpu": "GPU energy and utilization",
}


def _line(kind: str, table: str, text: str) -> Line:
    return Line(kind, table, f"{text} (see {SOURCES[table]})")


def _row(frame: pd.DataFrame, key: tuple[str, int]) -> dict[str, Any] | None:
    for rec in _records(frame):
        if (str(rec["strategy"]), int(rec["workers"])) == key:
            return rec
    return None


def _choice(report: Report) -> tuple[Line, tuple[str, int]] | None:
    """The configuration to use: the recommendation's knee; without energy, the fastest
    measured (the lowest epoch time, or under weak scaling the highest throughput)."""
    decision = getattr(report, "decision", None)
    if decision is not None and decision.knee is not None:
        knee = decision.knee
        p = next(p for p in decision.points if p.key == knee)
        per_1k = decision.basis == "1k samples"
        column = "energy_wh_per_1k_samples" if per_1k else "energy_wh_per_epoch"
        energy = SPECS["gpu"].column(column).cell({column: p.energy, "energy_coverage": p.coverage})
        time = _fmt("epoch_time", "avg_epoch_time_s", p.time)
        text = (
            f"Use {_n(p.strategy)} on {int(p.workers)} GPUs: {time} and {energy} {decision.unit}, "
            "the knee of the time–energy front"
        )
        return _line("strategy", "pareto", text), p.key
    weak = _weak(report)
    table, column = (
        ("throughput", "samples_per_sec") if weak else ("epoch_time", "avg_epoch_time_s")
    )
    rows = [r for r in _records(getattr(report, table)) if _known(r[column])]
    if not rows:
        return None
    best = (max if weak else min)(rows, key=lambda r: r[column])
    text = (
        f"Fastest measured: {_n(best['strategy'])} on {int(best['workers'])} GPUs, "
        f"{_fmt(table, column, best[column])}{'' if weak else ' per epoch'}; no energy to weigh"
    )
    return _line("strategy", table, text), (str(best["strategy"]), int(best["workers"]))


def _scaling(report: Report, key: tuple[str, int]) -> Line | None:
    """How far the chosen strategy scales: its efficiency at its largest measured count (and
    at the chosen count when that is smaller)."""
    mine = [r for r in _largest(report.epoch_time, "efficiency") if r["strategy"] == key[0]]
    if not mine:
        return None
    top = mine[0]
    eff = _fmt("epoch_time", "efficiency", top["efficiency"])
    weak = _weak(report)
    kind = "weak-scaling efficiency" if weak else "epoch-time efficiency"
    base = base_of(top)
    over = (
        ""
        if base is None or weak
        else (
            f", speedup {_fmt('epoch_time', 'speedup', top['speedup'])} over "
            f"{_config(top['strategy'], base)}"
        )
    )
    text = f"{_n(key[0])} scales to {int(top['workers'])} GPUs at {eff} {kind}{over}"
    here = _row(report.epoch_time, key)
    if int(top["workers"]) != key[1] and here is not None and _known(here["efficiency"]):
        text += f"; {_fmt('epoch_time', 'efficiency', here['efficiency'])} at {key[1]} GPUs"
    return _line("scaling", "epoch_time", text)


def _limit(report: Report, key: tuple[str, int]) -> Line | None:
    """What stops the chosen strategy: the time breakdown's own verdict at its largest count."""
    rows = [r for r in _records(report.time_breakdown) if r["strategy"] == key[0]]
    if not rows:
        return None
    top = max(rows, key=lambda r: int(r["workers"]))
    return _line(
        "limit",
        "time_breakdown",
        f"What stops {_n(key[0])} at {int(top['workers'])} GPUs: {top['bound_by']}",
    )


def _booking(report: Report, key: tuple[str, int]) -> Line | None:
    """What to book: the deadline's pick when a deadline was given, else the chosen
    configuration's GPU-hours (and cost) per run, set-up included."""
    decision = getattr(report, "decision", None)
    if decision is not None and decision.deadline_hours is not None:
        said = next((t for t in decision.sentences if t.startswith(("Cheapest", "No config"))), "")
        if said:
            return _line("booking", "pareto", f"Book: {said.rstrip('.')}")
    row = _row(report.gpu, key)
    if row is None or not _known(row.get("gpu_hours_per_run")):
        return None
    hours = _fmt("gpu", "gpu_hours_per_run", row["gpu_hours_per_run"])
    walls = _row(report.time_breakdown, key)
    billed = (
        "set-up included"
        if walls is not None and _known(walls["wall_s"])
        else "its epochs only (no wall time logged)"
    )
    text = f"Book {_n(key[0])} on {key[1]} GPUs: {hours} GPU-hours per run, {billed}"
    if _known(row.get("cost_per_run")):
        costs = getattr(report, "costs", None)
        unit = f" {costs.currency}" if costs is not None and costs.currency else ""
        text += f" ({_fmt('gpu', 'cost_per_run', row['cost_per_run'])}{unit} per run)"
    return _line("booking", "cost", text)


def summary_lines(report: Report) -> list[Line]:
    """At most five lines: the configuration to use, how far it scales, what stops it, what to
    book, what the gate said (each only when the report holds its number)."""
    out: list[Line | None] = []
    choice = _choice(report)
    if choice is not None:
        line, key = choice
        out += [line, _scaling(report, key), _limit(report, key), _booking(report, key)]
    gate = getattr(report, "gate", None)
    if gate is not None:
        out.append(_line("gate", "gate", gate.line.rstrip(".")))
    lines = [line for line in out if line is not None]
    if not lines:
        return [
            Line(
                "strategy", "epoch_time", "No epoch times were found, so no scaling can be stated."
            )
        ]
    return lines


def details(report: Report, table: str) -> list[str]:
    """The summary's details under ``table``: efficiency per strategy under the epoch-time
    table (but the chosen one's, which the top lines give), energy per strategy under the GPU
    table; none elsewhere."""
    if table == "epoch_time":
        choice = _choice(report)
        return efficiency_sentences(report, None if choice is None else choice[1][0])
    if table == "gpu":
        return energy_sentences(report)
    return []


def summary_records(report: Report) -> list[dict[str, str]]:
    """The summary as the JSON report's records, in the order every writer shows them: the
    top lines, then the details of each table in the tables' order."""
    from itwin_report.report.specs import TABLES

    out = [{"kind": x.kind, "table": x.table, "text": x.text} for x in summary_lines(report)]
    for spec in TABLES:
        out += [
            {"kind": "detail", "table": spec.name, "text": t} for t in details(report, spec.name)
        ]
    return out


def _config(strategy: str, base: tuple[str, int]) -> str:
    """``4 workers``, or for another strategy's run ``non-distributed at 1 worker``."""
    name, workers = base
    count = f"{workers} worker{'' if workers == 1 else 's'}"
    return count if name == strategy else f"{_n(name)} at {count}"


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
        "per-run mean epoch times, shown as n/a when a configuration has a single run. A "
        "strategy is fastest only when the 95 % interval of its per-run mean epoch times lies "
        "below every other's (Student's t on each configuration's runs); every configuration "
        "whose interval overlaps it is within noise, in every table, sentence and plot. "
        "Speedup and efficiency intervals are described in docs/analysis.md.",
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
