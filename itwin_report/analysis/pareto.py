"""Time against cost: the Pareto front of configurations, its knee, and a deadline's pick.

Pure functions on :class:`Point` lists (no pandas). A configuration is on the time–energy front
when no other is at least as fast and at least as frugal while better in one of the two. The
front is listed fastest first, so energy falls along it.

The knee walks the front from its most frugal point towards the fastest and takes each step
while its marginal energy is worth its marginal speed: a step from ``a`` to the faster ``b``
gains ``t_a / t_b - 1`` speed for ``E_b / E_a - 1`` more energy, and is taken when
``(E_b / E_a - 1) / (t_a / t_b - 1) <= max_energy_per_speedup`` (default 1: each 1 % of speed
may cost up to 1 % more energy). A step between two points whose 95 % intervals overlap in both
time and energy (:func:`itwin_report.analysis.intervals.overlap`, the report's one rule) is
within noise: it is taken whatever its ratio (noise decides nothing). The knee is the last point
reached.

A point's time and energy are per unit of work: per epoch when every epoch holds the same
samples, per 1,000 samples when they grow with the workers (weak scaling); the caller decides.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from itwin_report.analysis.intervals import overlap

DEFAULT_MAX_ENERGY_PER_SPEEDUP = 1.0
NAN_PAIR = (math.nan, math.nan)


@dataclass(frozen=True)
class Point:
    """One configuration: time (s), energy (Wh) and GPU-hours per unit of work, the 95 %
    intervals (low, high) of the first two (NaN when unknown), the energy's coverage (below 1:
    an estimate), and the set-up (s) a job pays once (NaN when unknown)."""

    strategy: str
    workers: int
    time: float
    energy: float
    gpu_hours: float = math.nan
    time_ci: tuple[float, float] = NAN_PAIR
    energy_ci: tuple[float, float] = NAN_PAIR
    coverage: float = 1.0  # share of the job's GPUs whose energy was measured; < 1: estimated
    setup_s: float = math.nan

    @property
    def key(self) -> tuple[str, int]:
        return self.strategy, self.workers


@dataclass(frozen=True)
class Step:
    """One step along the front towards speed: relative speed gained, energy added, taken."""

    start: Point
    end: Point
    speed_gain: float  # t_start / t_end - 1
    energy_added: float  # E_end / E_start - 1
    taken: bool
    noise: bool = False  # both intervals overlap: taken whatever the ratio

    @property
    def ratio(self) -> float:
        """Relative energy added per relative speed gained."""
        return self.energy_added / self.speed_gain if self.speed_gain > 0 else math.inf


def _known(p: Point, cost: Callable[[Point], float]) -> bool:
    return all(math.isfinite(v) and v >= 0 for v in (p.time, cost(p))) and p.time > 0


def front(
    points: Sequence[Point], cost: Callable[[Point], float] = lambda p: p.energy
) -> list[Point]:
    """The points no other point dominates in (time, ``cost``), fastest first.

    Points with an unknown time or cost are left out. Of two points equal in both, the one with
    fewer workers (then the strategy name first) stands for both.
    """
    known = sorted(
        (p for p in points if _known(p, cost)),
        key=lambda p: (p.time, cost(p), p.workers, p.strategy),
    )
    out: list[Point] = []
    for p in known:
        if not out or cost(p) < cost(out[-1]):
            out.append(p)
    return out


def walk(points: Sequence[Point], max_ratio: float = DEFAULT_MAX_ENERGY_PER_SPEEDUP) -> list[Step]:
    """The steps along the time–energy front from its most frugal point to its fastest.

    Each step is ``taken`` while every step before it was and its ratio is at most ``max_ratio``.
    """
    line = list(reversed(front(points)))
    steps: list[Step] = []
    going = True
    for a, b in itertools.pairwise(line):
        gain = a.time / b.time - 1.0
        added = b.energy / a.energy - 1.0 if a.energy > 0 else math.inf
        noise = overlap(a.time_ci, b.time_ci) and overlap(a.energy_ci, b.energy_ci)
        step = Step(a, b, gain, added, False, noise)
        going = going and (noise or step.ratio <= max_ratio)
        steps.append(Step(a, b, gain, added, going, noise))
    return steps


def knee(
    points: Sequence[Point], max_ratio: float = DEFAULT_MAX_ENERGY_PER_SPEEDUP
) -> Point | None:
    """The last point the walk from the most frugal point reaches (None without points)."""
    line = front(points)
    if not line:
        return None
    reached = line[-1]
    for step in walk(points, max_ratio):
        if not step.taken:
            break
        reached = step.end
    return reached


def needed_s(p: Point, units: float) -> float:
    """Wall time (s) a job of ``units`` units of work takes: its set-up (0 when unknown) plus
    ``units`` x its time per unit."""
    return (p.setup_s if math.isfinite(p.setup_s) else 0.0) + p.time * units


def within_deadline(points: Sequence[Point], seconds: float, units: float) -> Point | None:
    """The configuration with the fewest GPU-hours among those whose job of ``units`` units of
    work, set-up included (:func:`needed_s`), ends within ``seconds`` (ties: less energy, then
    fewer workers); None when none does."""
    fits = [
        p for p in points if math.isfinite(p.time) and p.time > 0 and needed_s(p, units) <= seconds
    ]
    if not fits:
        return None
    return min(
        fits,
        key=lambda p: (needed_s(p, units) * p.workers, _or_inf(p.energy), p.workers, p.strategy),
    )


def _or_inf(value: float) -> float:
    return value if math.isfinite(value) else math.inf
