"""The noise test behind every compared row of ``compare``, the test of each metric's mean
change over the configurations, and the family they form (pure functions).

Per row (one metric of one configuration):

* epoch time: the per-run mean epoch times of both sides (``welch``);
* time to target: the times to target of the runs that reached it, on both sides (``welch``);
  without them, the mean time's 95 % interval over those runs (``welch-intervals``);
* epoch-time efficiency: the per-run epoch times of the configuration and of the base its
  efficiency is measured against, on both sides (``welch``): log efficiency is log base time
  minus log own time; without those runs, the efficiency's 95 % interval (``welch-intervals``);
* throughput and energy per epoch: their 95 % intervals, which the report computes from the
  runs' own values, give each side's standard error and runs (``welch-intervals``);
* with fewer than two runs on a side there is no test (``none``): the threshold alone decides;
  the base's own efficiency is 1 on both sides by definition (``base``): nothing to test.

Per metric, when two configurations or more have a test, one more test (``welch-mean``) weighs
the mean of their log changes: a change shared by every configuration (a model slower per GPU)
stands out there long before any single configuration's two runs can show it. Holm–Bonferroni
over every test of the comparison holds the chance of any false alarm at
:data:`~itwin_report.analysis.significance.FAMILY_ALPHA`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from itwin_report.analysis.significance import (
    FAMILY_ALPHA,
    Cell,
    Test,
    cell_from_interval,
    cell_from_runs,
    combined,
    contrast_test,
    holm,
)

if TYPE_CHECKING:
    from itwin_report.analysis.comparison import Config, Side

RUNS, INTERVALS, MEAN, NONE = "welch", "welch-intervals", "welch-mean", "none"
BASE = "base"  # the base's own efficiency: 1 on both sides by definition, nothing to test
Terms = list[tuple[float, Hashable, Cell]]
PerRun = dict[tuple[str, int], list[float]]  # configuration -> per-run values


@dataclass
class RowTest:
    """A row's test: its kind, its terms, then the test and the family's verdict on it."""

    kind: str
    estimate: float  # log change, positive = worse
    terms: Terms
    test: Test | None = None
    holm_alpha: float = math.nan
    rejected: bool | None = None  # None: no test


def row_test(metric: str, key: Config, baseline: Side, current: Side, estimate: float) -> RowTest:
    """The noise test of one metric of one configuration (terms only; see :func:`family`)."""
    terms: Terms | None = None
    kind = RUNS
    if metric == "epoch_time":
        terms = _runs_terms(key, baseline.runs, current.runs)
    elif metric == "time_to_target":
        terms = _runs_terms(key, baseline.target_runs, current.target_runs)
    elif metric == "epoch_time_efficiency":
        terms = _efficiency_terms(key, baseline, current)
    if terms is None and metric != "epoch_time":
        kind, terms = INTERVALS, _interval_terms(metric, key, baseline, current)
    if terms is None or not math.isfinite(estimate):
        return RowTest(NONE, estimate, [])
    return RowTest(kind, estimate, terms)


def _cell(side: Side, key: Config) -> Cell | None:
    return cell_from_runs(side.runs.get(key, []))


def _runs_terms(key: Config, baseline: PerRun, current: PerRun) -> Terms | None:
    """The per-run values of ``key`` on both sides (each side's mean epoch times, or its
    reached runs' times to target); None unless both sides have two runs or more."""
    a, b = cell_from_runs(baseline.get(key, [])), cell_from_runs(current.get(key, []))
    if a is None or b is None:
        return None
    return [(-1.0, (0, key), a), (1.0, (1, key), b)]


def _efficiency_terms(key: Config, baseline: Side, current: Side) -> Terms | None:
    """log E = log T(base) - log T(own), on each side; None when a side lacks runs."""
    terms: Terms = []
    for index, side, sign in ((0, baseline, -1.0), (1, current, 1.0)):
        base = side.bases.get(key)
        if base is None:
            return None
        own, of_base = _cell(side, key), _cell(side, base)
        if own is None or of_base is None:
            return None
        terms += [(sign, (index, base), of_base), (-sign, (index, key), own)]
    return terms


def _interval_terms(metric: str, key: Config, baseline: Side, current: Side) -> Terms | None:
    log_scale = metric == "epoch_time_efficiency"  # a ratio's interval is symmetric in log
    cells = []
    for side in (baseline, current):
        found = side.intervals.get(metric, {}).get(key)
        value = side.values.get(metric, {}).get(key, math.nan)
        if found is None or not value > 0:
            return None
        cell = cell_from_interval(value, *found, log_scale=log_scale)
        if cell is None:
            return None
        cells.append(cell)
    return [(-1.0, (0, metric, key), cells[0]), (1.0, (1, metric, key), cells[1])]


@dataclass
class MeanTest:
    """A metric's test of its mean log change over the configurations that have a test."""

    metric: str
    configurations: int
    row: RowTest


def family(rows: dict[str, list[RowTest]], alpha: float = FAMILY_ALPHA) -> list[MeanTest]:
    """Run every row's test and each metric's mean test, then Holm–Bonferroni over all of them.

    ``rows``: metric -> its rows' tests (updated in place). Returns the mean tests, one per
    metric with two tested configurations or more."""
    for tests in rows.values():
        for r in tests:
            r.test = contrast_test(r.estimate, combined(r.terms)) if r.kind != NONE else None
            if r.test is None and r.kind != NONE:  # every term cancelled: the base itself
                r.kind = BASE
    means = []
    for metric, tests in rows.items():
        tested = [r for r in tests if r.test is not None]
        if len(tested) < 2:
            continue
        k = len(tested)
        mean = RowTest(MEAN, sum(r.estimate for r in tested) / k, [])
        mean.terms = [(c / k, key, cell) for r in tested for c, key, cell in r.terms]
        mean.test = contrast_test(mean.estimate, combined(mean.terms))
        means.append(MeanTest(metric, k, mean))
    decided = [r for tests in rows.values() for r in tests if r.test is not None]
    decided += [m.row for m in means if m.row.test is not None]
    verdicts = holm([r.test.p for r in decided if r.test is not None], alpha)
    for r, (threshold, rejected) in zip(decided, verdicts, strict=True):
        r.holm_alpha, r.rejected = threshold, rejected
    return means


def family_size(rows: dict[str, list[RowTest]], means: list[MeanTest]) -> int:
    """How many tests Holm–Bonferroni weighed together."""
    return sum(r.rejected is not None for tests in rows.values() for r in tests) + len(means)
