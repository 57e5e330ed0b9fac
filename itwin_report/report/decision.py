"""The decision: the time–energy Pareto front over all configurations, and in sentences the
fastest configuration, the most frugal one, the knee and, with a deadline, the cheapest
configuration that meets it (the rules are in :mod:`itwin_report.analysis.pareto`).

Time is the epoch-time table's (after warm-up), energy and GPU-hours the GPU table's, per unit
of work: per epoch when every epoch holds the same samples, per 1,000 samples when samples per
epoch grow with the workers (:func:`itwin_report.analysis.scaling_mode.per_sample`), so that
configurations doing different work per epoch are compared on the same work. Candidates within
noise of the fastest or the most frugal are every configuration whose 95 % interval overlaps
its own (:func:`itwin_report.analysis.intervals.best_of`, the report's one rule). A deadline
counts each job's set-up (the time breakdown's wall time outside the epochs) with its epochs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from itwin_report.analysis import pareto
from itwin_report.analysis.intervals import best_of, mean_interval, run_groups
from itwin_report.analysis.pareto import DEFAULT_MAX_ENERGY_PER_SPEEDUP, Point
from itwin_report.report.specs import SPECS
from itwin_report.util.text import joined, plural

EPOCH, PER_1K = "epoch", "1k samples"  # the two bases of a decision without a target
TARGET = "target"  # with a target: time and energy to reach it
PARETO_COLUMNS = [
    "strategy",
    "workers",
    "epoch_time_s",
    "energy_wh_per_epoch",
    "gpu_hours_per_epoch",
    "time_s_per_1k_samples",
    "energy_wh_per_1k_samples",
    "gpu_hours_per_1k_samples",
    "energy_coverage",
]
# with a target, the front's rows also hold what it was decided on
TARGET_COLUMNS = [
    "time_to_target_s",
    "energy_wh_to_target",
    "gpu_hours_to_target",
    "energy_to_target_basis",
]
Key = tuple[str, int]


@dataclass(frozen=True)
class ToTarget:
    """What a decision to a target weighs: one point per configuration that reached it (time
    and energy to target, GPU-hours = workers x time), each one's energy basis, and the
    configurations whose runs did not all reach it, as (configuration, reached, runs)."""

    target: str
    points: list[Point]
    basis: dict[Key, str]
    short: list[tuple[Key, int, int]] = field(default_factory=list)


@dataclass
class Decision:
    """The fronts (fastest first), the picks ((strategy, workers) or None) and the sentences;
    ``basis``: what the times and energies are per (:data:`EPOCH` or :data:`PER_1K`)."""

    pareto: pd.DataFrame
    pareto_gpu_hours: pd.DataFrame
    basis: str = EPOCH
    points: list[Point] = field(default_factory=list)
    fastest: Key | None = None
    most_frugal: Key | None = None
    knee: Key | None = None
    fastest_ties: list[Key] = field(default_factory=list)  # within noise of the fastest
    frugal_ties: list[Key] = field(default_factory=list)  # within noise of the most frugal
    max_energy_per_speedup: float = DEFAULT_MAX_ENERGY_PER_SPEEDUP
    deadline_hours: float | None = None
    epochs: int | None = None
    deadline_samples: float | None = None  # samples per epoch of the deadline's epochs
    deadline_choice: Key | None = None
    sentences: list[str] = field(default_factory=list)
    target: str | None = None  # with TARGET: the quality target
    # per configuration, per epoch (or per 1k samples): what a later decision to a target reuses
    per_epoch: dict[Key, Point] = field(default_factory=dict, repr=False)
    work: Work | None = field(default=None, repr=False)

    def recommendation(self) -> dict[str, Any]:
        """The JSON report's ``recommendation``."""
        deadline = None
        if self.deadline_hours is not None:
            deadline = {
                "hours": self.deadline_hours,
                "epochs": self.epochs,
                "samples_per_epoch": self.deadline_samples,
                "choice": _named(self.deadline_choice),
            }
        target = {} if self.target is None else {"target": self.target}
        return {
            "basis": self.basis,
            **target,
            "fastest": _named(self.fastest),
            "most_frugal": _named(self.most_frugal),
            "knee": _named(self.knee),
            "fastest_within_noise_of": [_named(k) for k in self.fastest_ties],
            "most_frugal_within_noise_of": [_named(k) for k in self.frugal_ties],
            "max_energy_per_speedup": self.max_energy_per_speedup,
            "deadline": deadline,
            "sentences": list(self.sentences),
        }

    @property
    def unit(self) -> str:
        """``per epoch``, ``per 1k samples`` or ``to val_accuracy>=0.76``."""
        return f"to {self.target}" if self.basis == TARGET else f"per {self.basis}"


def _named(key: Key | None) -> dict[str, Any] | None:
    return None if key is None else {"strategy": key[0], "workers": int(key[1])}


@dataclass(frozen=True)
class Work:
    """Per configuration: samples per epoch and set-up seconds (from the time breakdown), and
    whether to decide per 1,000 samples; empty: per epoch, set-up unknown."""

    samples: dict[Key, float] = field(default_factory=dict)
    setup_s: dict[Key, float] = field(default_factory=dict)
    per_sample: bool = False


def points(
    epoch: pd.DataFrame, gpu: pd.DataFrame, run_means: pd.DataFrame, work: Work | None = None
) -> list[Point]:
    """One point per configuration with an epoch time and a GPU row, per epoch (or per 1,000
    samples with ``work.per_sample``: NaN where the samples per epoch are unknown)."""
    work = work or Work()
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
        k = 1000.0 / work.samples.get(key, math.nan) if work.per_sample else 1.0
        low, high = spread.get(key, pareto.NAN_PAIR)
        coverage = r.get("energy_coverage", 1.0)
        out.append(
            Point(
                key[0],
                key[1],
                times[key] * k,
                float(r["energy_wh_per_epoch"]) * k,
                float(r["gpu_hours_per_epoch"]) * k,
                (low * k, high * k),
                (
                    float(r["energy_wh_per_epoch_ci_low"]) * k,
                    float(r["energy_wh_per_epoch_ci_high"]) * k,
                ),
                float(coverage) if coverage == coverage and coverage is not None else 1.0,
                work.setup_s.get(key, math.nan),
            )
        )
    return out


def _frame(
    line: list[Point], per_epoch: dict[Key, Point], work: Work, to: ToTarget | None = None
) -> pd.DataFrame:
    """The front's rows with both bases: per epoch, and per 1,000 samples where known; with a
    target, also the time, energy and GPU-hours to it and the energy's basis."""
    rows = []
    unknown = Point("", 0, math.nan, math.nan)
    for p in line:
        e = per_epoch.get(p.key, unknown)
        k = 1000.0 / work.samples.get(p.key, math.nan)
        per_1k = [e.time * k, e.energy * k, e.gpu_hours * k]
        row = [p.strategy, p.workers, e.time, e.energy, e.gpu_hours, *per_1k, p.coverage]
        if to is not None:
            row += [p.time, p.energy, p.gpu_hours, to.basis.get(p.key, "")]
        rows.append(row)
    columns = PARETO_COLUMNS + (TARGET_COLUMNS if to is not None else [])
    return pd.DataFrame(rows, columns=columns).astype(
        {"strategy": "str", "workers": "int64", "epoch_time_s": "float64"}
    )


def decide_costs(
    epoch: pd.DataFrame,
    gpu: pd.DataFrame,
    run_means: pd.DataFrame,
    max_ratio: float | None = None,
    deadline_hours: float | None = None,
    epochs: int | None = None,
    work: Work | None = None,
) -> Decision:
    """The decision over every configuration with a known time and energy per unit of work."""
    work = work or Work()
    ratio = DEFAULT_MAX_ENERGY_PER_SPEEDUP if max_ratio is None else float(max_ratio)
    pts = points(epoch, gpu, run_means, work)
    per_epoch = {p.key: p for p in points(epoch, gpu, run_means, Work(work.samples))}
    return _decide(pts, per_epoch, work, ratio, deadline_hours, epochs)


def decide_to_target(before: Decision, to: ToTarget) -> Decision:
    """The decision made again on time and energy to target (``to``), with the settings and
    per-epoch values of the one made ``before`` on epochs."""
    work = before.work or Work()
    ratio = before.max_energy_per_speedup
    return _decide(
        to.points, before.per_epoch, work, ratio, before.deadline_hours, before.epochs, to
    )


def _decide(
    pts: list[Point],
    per_epoch: dict[Key, Point],
    work: Work,
    ratio: float,
    deadline_hours: float | None,
    epochs: int | None,
    to: ToTarget | None = None,
) -> Decision:
    line = pareto.front(pts)
    out = Decision(
        pareto=_frame(line, per_epoch, work, to),
        pareto_gpu_hours=_frame(pareto.front(pts, lambda p: p.gpu_hours), per_epoch, work, to),
        basis=TARGET if to is not None else PER_1K if work.per_sample else EPOCH,
        points=pts,
        max_energy_per_speedup=ratio,
        deadline_hours=deadline_hours,
        epochs=epochs,
        target=None if to is None else to.target,
        per_epoch=per_epoch,
        work=work,
    )
    if to is not None:
        out.sentences = target_sentences(to)
    if line:
        known = [p for p in pts if pareto.front([p])]  # a known time and energy
        fastest = _pick(line[0], known, lambda p: (p.time, *p.time_ci))
        frugal = _pick(line[-1], known, lambda p: (p.energy, *p.energy_ci), fewest=True)
        knee = pareto.knee(pts, ratio)
        out.fastest, out.most_frugal = fastest.key, frugal.key
        out.knee = None if knee is None else knee.key
        out.fastest_ties, out.frugal_ties = list(fastest.within_noise), list(frugal.within_noise)
        out.sentences += _pick_sentences(out, {p.key: p for p in pts}, pts, fastest, frugal)
    elif pts:
        why = " (no samples per epoch to compare them per sample)" if work.per_sample else ""
        out.sentences += [f"No configuration has both a time and an energy {out.unit}{why}."]
    if deadline_hours is not None and epochs is not None:
        out.sentences.append(_deadline(out, pts, work, deadline_hours, epochs))
    return out


@dataclass(frozen=True)
class Pick:
    """A named pick: the configuration with the lowest mean, or for the most frugal, of it and
    those within noise of its energy (:func:`best_of`), the one with the fewest GPUs (noise
    cannot rank their energy; the smaller booking is the more frugal); the others within
    noise, and those noise cannot judge (single runs)."""

    key: Key
    lowest: Key
    within_noise: tuple[Key, ...]
    untested: tuple[Key, ...]


def _pick(best: Point, pts: list[Point], interval: Any, fewest: bool = False) -> Pick:
    """The :class:`Pick` around ``best`` (the front's end: first among equal means);
    ``fewest``: name the fewest GPUs among those within noise."""
    ordered = [best, *(p for p in pts if p.key != best.key)]
    verdict = best_of({p.key: interval(p) for p in ordered})
    if verdict is None or verdict.best != best.key:  # cannot happen for a front's end
        return Pick(best.key, best.key, (), ())
    group = [verdict.best, *verdict.within_noise]
    named = min(group, key=lambda k: (k[1], group.index(k))) if fewest else verdict.best
    others = tuple(k for k in group if k != named)
    return Pick(named, verdict.best, others, verdict.untested)


def name(p: Point) -> str:
    """``torch-ddp on 16 GPUs``."""
    return f"{p.strategy} on {plural(p.workers, 'GPU')}"


def _time(p: Point) -> str:
    return SPECS["epoch_time"].column("avg_epoch_time_s").fmt(p.time)


def _energy(p: Point, basis: str) -> str:
    """The energy as the tables show it, ``~`` marking an estimate (the columns' one rule)."""
    column = "energy_wh_per_1k_samples" if basis == PER_1K else "energy_wh_per_epoch"
    return SPECS["gpu"].column(column).cell({column: p.energy, "energy_coverage": p.coverage})


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _names(keys: list[Key] | tuple[Key, ...], by_key: dict[Key, Point]) -> str:
    return joined([name(by_key[k]) for k in keys])


def _pick_sentences(
    d: Decision, by_key: dict[Key, Point], pts: list[Point], fast: Pick, frugal_pick: Pick
) -> list[str]:
    fastest, frugal = by_key[fast.key], by_key[frugal_pick.key]
    unit = d.unit
    out = []
    if d.basis == PER_1K:
        out.append(
            "Epochs hold different numbers of samples (they grow with the workers), so "
            "configurations are compared per 1k samples: time per 1k samples = epoch time / "
            "samples per epoch x 1000 (the lowest is the highest throughput), energy likewise."
        )
    if fastest.key == frugal.key:
        out.append(
            f"{name(fastest)} is both the fastest and the most frugal configuration: "
            f"{_time(fastest)} and {_energy(fastest, d.basis)} {unit}."
        )
    else:
        out.append(
            f"Fastest: {name(fastest)}, {_time(fastest)} {unit} for "
            f"{_energy(fastest, d.basis)}{_rate(fastest, d.basis)}."
        )
        out.append(
            f"Most frugal: {name(frugal)}, {_energy(frugal, d.basis)} {unit} in {_time(frugal)}."
        )
    out += _tie_sentences(fast, by_key, f"time {unit}", _time)
    if frugal_pick != fast:
        out += _tie_sentences(frugal_pick, by_key, f"energy {unit}", lambda p: _energy(p, d.basis))
    if d.knee is not None and fast.lowest != frugal_pick.lowest:
        lowest = by_key[frugal_pick.lowest]
        out.append(_knee_sentence(by_key[d.knee], lowest, pts, d.max_energy_per_speedup))
    return out


def _key_name(key: Key) -> str:
    return f"{key[0]} on {plural(key[1], 'GPU')}"


def target_sentences(to: ToTarget) -> list[str]:
    """How a decision to a target is made: on what, each energy's basis, and the configurations
    whose runs did not all reach it (never: not recommended)."""
    from itwin_report.report.energy_to_target import MIXED, PER_EPOCH, SAMPLED

    out = [
        f"Decided on reaching {to.target}: time to target (from each run's start to its first "
        "point that meets it, as in the Time to target table), GPU-hours = GPUs x that time, "
        "and energy to target."
    ]
    groups: dict[str, list[str]] = {}
    for p in to.points:
        groups.setdefault(to.basis.get(p.key, ""), []).append(name(p))
    words = {
        SAMPLED: "the GPU power samples up to the timestamp where the target was reached",
        PER_EPOCH: "energy per epoch x epochs to target (no power samples cover the span; "
        "energy outside the epochs is left out)",
        MIXED: "power samples for some runs, energy per epoch x epochs to target for others",
        "": "unknown (no GPU energy)",
    }
    parts = [f"{words[b]} for {joined(groups[b])}" for b in words if b in groups]
    if parts:
        out.append(f"Energy to target: {'; '.join(parts)}.")
    never = [f"{_key_name(k)} (0 of {n} runs)" for k, reached, n in to.short if reached == 0]
    some = [f"{_key_name(k)} ({r} of {n})" for k, r, n in to.short if r > 0]
    if never:
        out.append(f"Not recommended: {joined(never)} never reached {to.target}.")
    if some:
        out.append(
            f"Only some runs reached it for {joined(some)}: their times and energies are the "
            "means of those runs."
        )
    return out


def _rate(p: Point, basis: str) -> str:
    """`` (3,300 samples/s)`` per 1k samples; empty per epoch."""
    return f" ({1000.0 / p.time:,.0f} samples/s)" if basis == PER_1K and p.time > 0 else ""


def _tie_sentences(v: Pick, by_key: dict[Key, Point], what: str, shown: Any) -> list[str]:
    """Every configuration within noise of the pick named, and those noise cannot judge."""
    best = by_key[v.key]
    out = []
    if v.within_noise:
        others = [f"{name(by_key[k])} ({shown(by_key[k])})" for k in v.within_noise]
        why = "" if v.key == v.lowest else "; the one with the fewest GPUs is named"
        out.append(
            f"{name(best)} and {joined(others)} are within noise on {what}: their 95 % "
            f"intervals overlap{why}."
        )
    if v.untested:
        out.append(
            f"Noise cannot be ruled out between {name(by_key[v.lowest])} and "
            f"{_names(v.untested, by_key)} on {what}: single runs have no interval."
        )
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


def _deadline(d: Decision, pts: list[Point], work: Work, hours: float, epochs: int) -> str:
    """Pick the cheapest configuration for the deadline (on ``d``) and say it in a sentence.

    Per 1k samples, the job's epochs hold the samples of the smallest configuration's epoch
    (the problem the smaller runs train); its set-up is added to every job's time. To a
    target, the work is reaching it: the time to target, set-up included."""
    units, what = float(epochs), f"{plural(epochs, 'epoch')} within {hours:g} h"
    verb, verbs = "finish", "finishes"
    if d.basis == TARGET:
        units, what, verb, verbs = 1.0, f"{d.target} within {hours:g} h", "reach", "reaches"
    elif d.basis == PER_1K:
        sized = [p for p in pts if p.key in work.samples]
        if not sized:
            return f"No configuration can be checked against {what}: no samples per epoch."
        first = min(sized, key=lambda p: (p.workers, p.strategy))
        d.deadline_samples = work.samples[first.key]
        units = epochs * d.deadline_samples / 1000.0
        what = (
            f"{plural(epochs, 'epoch')} of {d.deadline_samples:,.0f} samples (the epoch of "
            f"{name(first)}) within {hours:g} h"
        )
    choice = pareto.within_deadline(pts, hours * 3600.0, units)
    d.deadline_choice = None if choice is None else choice.key
    if choice is not None:
        needed = pareto.needed_s(choice, units)
        return (
            f"Cheapest to {verb} {what}: {name(choice)}, {choice.workers * needed / 3600:.2f} "
            f"GPU-hours in {needed / 3600:.2f} h{_setup(choice, d)}."
        )
    timed = [p for p in pts if math.isfinite(p.time) and p.time > 0]
    if not timed:
        missing = "times to target" if d.basis == TARGET else "epoch times"
        return f"No configuration can be checked against {what}: no {missing}."
    best = min(timed, key=lambda p: pareto.needed_s(p, units))
    return (
        f"No configuration {verbs} {what}; the fastest, {name(best)}, needs "
        f"{pareto.needed_s(best, units) / 3600:.2f} h{_setup(best, d)}."
    )


def _setup(p: Point, d: Decision) -> str:
    if d.basis == TARGET:
        return (
            f" (from the runs' start, set-up included; --epochs {d.epochs} is not used: the "
            "target sets the work)"
        )
    if math.isfinite(p.setup_s):
        return f" (set-up {p.setup_s:.0f} s included)"
    return " (set-up not measured, not included)"
