"""The decision: the time–energy Pareto front over all configurations, and in sentences the
fastest configuration, the most frugal one, the knee and, with a deadline, the cheapest
configuration that meets it (the rules are in :mod:`itwin_report.analysis.pareto`).

Epoch time is the epoch-time table's (after warm-up), energy per epoch and GPU-hours per epoch
the GPU table's; two candidates are "within noise" when their 95 % intervals overlap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from itwin_report.analysis import pareto
from itwin_report.analysis.intervals import mean_interval, run_groups
from itwin_report.analysis.pareto import DEFAULT_MAX_ENERGY_PER_SPEEDUP, Point
from itwin_report.report.specs import SPECS
from itwin_report.util.text import plural

PARETO_COLUMNS = [
    "strategy",
    "workers",
    "epoch_time_s",
    "energy_wh_per_epoch",
    "gpu_hours_per_epoch",
]


@dataclass
class Decision:
    """The fronts (fastest first), the picks ((strategy, workers) or None) and the sentences."""

    pareto: pd.DataFrame
    pareto_gpu_hours: pd.DataFrame
    fastest: tuple[str, int] | None = None
    most_frugal: tuple[str, int] | None = None
    knee: tuple[str, int] | None = None
    fastest_tie: tuple[str, int] | None = None  # within noise of the fastest
    frugal_tie: tuple[str, int] | None = None  # within noise of the most frugal
    max_energy_per_speedup: float = DEFAULT_MAX_ENERGY_PER_SPEEDUP
    deadline_hours: float | None = None
    epochs: int | None = None
    deadline_choice: tuple[str, int] | None = None
    sentences: list[str] = field(default_factory=list)

    def recommendation(self) -> dict[str, Any]:
        """The JSON report's ``recommendation``."""
        deadline = None
        if self.deadline_hours is not None:
            deadline = {
                "hours": self.deadline_hours,
                "epochs": self.epochs,
                "choice": _named(self.deadline_choice),
            }
        return {
            "fastest": _named(self.fastest),
            "most_frugal": _named(self.most_frugal),
            "knee": _named(self.knee),
            "fastest_within_noise_of": _named(self.fastest_tie),
            "most_frugal_within_noise_of": _named(self.frugal_tie),
            "max_energy_per_speedup": self.max_energy_per_speedup,
            "deadline": deadline,
            "sentences": list(self.sentences),
        }


def _named(key: tuple[str, int] | None) -> dict[str, Any] | None:
    return None if key is None else {"strategy": key[0], "workers": int(key[1])}


def points(epoch: pd.DataFrame, gpu: pd.DataFrame, run_means: pd.DataFrame) -> list[Point]:
    """One point per configuration with an epoch time and a GPU row."""
    times = {
        (str(r["strategy"]), int(r["workers"])): float(r["avg_epoch_time_s"])
        for r in epoch.to_dict("records")
    }
    spread = {key: mean_interval(values)[1:] for key, values in run_groups(run_means).items()}
    out = []
    for r in gpu.to_dict("records"):
        key = (str(r["strategy"]), int(r["workers"]))
        if key not in times:
            continue
        out.append(
            Point(
                key[0],
                key[1],
                times[key],
                float(r["energy_wh_per_epoch"]),
                float(r["gpu_hours_per_epoch"]),
                spread.get(key, pareto.NAN_PAIR),
                (float(r["energy_wh_per_epoch_ci_low"]), float(r["energy_wh_per_epoch_ci_high"])),
            )
        )
    return out


def _frame(line: list[Point]) -> pd.DataFrame:
    rows = [[p.strategy, p.workers, p.time, p.energy, p.gpu_hours] for p in line]
    return pd.DataFrame(rows, columns=PARETO_COLUMNS).astype(
        {"strategy": "str", "workers": "int64", "epoch_time_s": "float64"}
    )


def decide_costs(
    epoch: pd.DataFrame,
    gpu: pd.DataFrame,
    run_means: pd.DataFrame,
    max_ratio: float | None = None,
    deadline_hours: float | None = None,
    epochs: int | None = None,
) -> Decision:
    """The decision over every configuration with a known epoch time and energy per epoch."""
    ratio = DEFAULT_MAX_ENERGY_PER_SPEEDUP if max_ratio is None else float(max_ratio)
    pts = points(epoch, gpu, run_means)
    line = pareto.front(pts)
    out = Decision(
        pareto=_frame(line),
        pareto_gpu_hours=_frame(pareto.front(pts, lambda p: p.gpu_hours)),
        max_energy_per_speedup=ratio,
        deadline_hours=deadline_hours,
        epochs=epochs,
    )
    if line:
        fastest, frugal = line[0], line[-1]
        knee = pareto.knee(pts, ratio)
        out.fastest, out.most_frugal = fastest.key, frugal.key
        out.knee = None if knee is None else knee.key
        out.fastest_tie = _tie(fastest, pts, lambda p: p.time, lambda p: p.time_ci)
        out.frugal_tie = _tie(frugal, pts, lambda p: p.energy, lambda p: p.energy_ci)
        out.sentences = _pick_sentences(out, {p.key: p for p in pts}, pts)
    elif pts:
        out.sentences = ["No configuration has both an epoch time and an energy per epoch."]
    if deadline_hours is not None and epochs is not None:
        choice = pareto.within_deadline(pts, deadline_hours * 3600.0, epochs)
        out.deadline_choice = None if choice is None else choice.key
        out.sentences.append(_deadline_sentence(choice, pts, deadline_hours, epochs))
    return out


def _tie(best: Point, pts: list[Point], value: Any, interval: Any) -> tuple[str, int] | None:
    """The runner-up by ``value`` when its 95 % interval overlaps ``best``'s, else None."""
    others = [p for p in pts if p.key != best.key and math.isfinite(value(p))]
    if not others:
        return None
    second = min(others, key=lambda p: (value(p), p.workers, p.strategy))
    return second.key if pareto.overlap(interval(best), interval(second)) else None


def name(p: Point) -> str:
    """``torch-ddp on 16 GPUs``."""
    return f"{p.strategy} on {plural(p.workers, 'GPU')}"


def _time(p: Point) -> str:
    return SPECS["epoch_time"].column("avg_epoch_time_s").fmt(p.time)


def _energy(p: Point) -> str:
    return SPECS["gpu"].column("energy_wh_per_epoch").fmt(p.energy)


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _pick_sentences(
    d: Decision, by_key: dict[tuple[str, int], Point], pts: list[Point]
) -> list[str]:
    fastest, frugal = by_key[d.fastest], by_key[d.most_frugal]  # type: ignore[index]
    out = []
    if fastest.key == frugal.key:
        out.append(
            f"{name(fastest)} is both the fastest and the most frugal configuration: "
            f"{_time(fastest)} and {_energy(fastest)} per epoch."
        )
    else:
        out.append(f"Fastest: {name(fastest)}, {_time(fastest)} per epoch for {_energy(fastest)}.")
        out.append(f"Most frugal: {name(frugal)}, {_energy(frugal)} per epoch in {_time(frugal)}.")
    if d.fastest_tie is not None:
        other = by_key[d.fastest_tie]
        out.append(
            f"{name(fastest)} and {name(other)} ({_time(other)}) are within noise on epoch "
            "time: their 95 % intervals overlap."
        )
    if d.frugal_tie is not None and d.frugal_tie != d.fastest_tie:
        other = by_key[d.frugal_tie]
        out.append(
            f"{name(frugal)} and {name(other)} ({_energy(other)}) are within noise on energy "
            "per epoch: their 95 % intervals overlap."
        )
    if d.knee is not None and fastest.key != frugal.key:
        out.append(_knee_sentence(by_key[d.knee], frugal, pts, d.max_energy_per_speedup))
    return out


def _knee_sentence(knee: Point, frugal: Point, pts: list[Point], ratio: float) -> str:
    steps = pareto.walk(pts, ratio)
    refused = next((s for s in steps if not s.taken), None)
    into = next((s for s in steps if s.end.key == knee.key), None)
    tie = f" (within noise of {name(into.start)})" if into is not None and into.noise else ""
    if knee.key == frugal.key:
        head = f"Knee: {name(knee)}, the most frugal"
    else:
        head = (
            f"Knee: {name(knee)}{tie}: {frugal.time / knee.time:.1f}x faster than "
            f"{name(frugal)} for {knee.energy / frugal.energy:.1f}x the energy"
        )
    if refused is None:
        return f"{head}; it is also the fastest (every step along the front is worth its energy)."
    return (
        f"{head}; going to {name(refused.end)} adds {_pct(refused.speed_gain)} speed for "
        f"{_pct(refused.energy_added)} more energy (over --max-energy-per-speedup {ratio:g}: "
        f"{ratio:g} % more energy per 1 % more speed)."
    )


def _deadline_sentence(choice: Point | None, pts: list[Point], hours: float, epochs: int) -> str:
    what = f"{plural(epochs, 'epoch')} within {hours:g} h"
    if choice is not None:
        return (
            f"Cheapest to finish {what}: {name(choice)}, {choice.gpu_hours * epochs:.2f} "
            f"GPU-hours in {choice.time * epochs / 3600:.2f} h."
        )
    timed = [p for p in pts if math.isfinite(p.time)]
    if not timed:
        return f"No configuration can be checked against {what}: no epoch times."
    best = min(timed, key=lambda p: p.time)
    return (
        f"No configuration finishes {what}; the fastest, {name(best)}, needs "
        f"{best.time * epochs / 3600:.2f} h."
    )
