"""95 % intervals from per-run means: Student-t quantiles, ratio intervals, Welch's t-test.

Numpy only. The method is documented in ``docs/analysis.md``:

* a configuration's runs are its jobs; each run contributes one value, its mean epoch time
  after warm-up, so the epochs inside a run (which are correlated) never count as samples;
* the interval of a mean is ``mean ± t(0.975, n-1) · s / sqrt(n)``;
* the interval of a ratio of two means (speedup) is built on the log scale with the delta
  method, ``log r ± t(0.975, df) · sqrt(s_a²/(n_a m_a²) + s_b²/(n_b m_b²))``, the degrees of
  freedom from the Welch–Satterthwaite formula; efficiency scales the speedup interval;
* two sets of runs differ beyond noise when Welch's ``|t|`` exceeds ``t(0.975, df)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from itwin_report.util.text import joined

LEVEL = 0.95
CI_COLUMNS = ["speedup_ci_low", "speedup_ci_high", "efficiency_ci_low", "efficiency_ci_high"]

_GRID = 4001  # Simpson points for the t distribution's central probability


def _central_probability(q: float, df: float) -> float:
    """P(|T| <= q) for Student's t with ``df`` degrees of freedom (Simpson's rule on [0, q])."""
    x = np.linspace(0.0, q, _GRID)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    f = np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))
    h = q / (_GRID - 1)
    simpson = h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    return 2.0 * float(simpson)


@functools.lru_cache(maxsize=256)
def _t_quantile(df: float, level: float) -> float:
    low, high = 0.0, 2.0
    while _central_probability(high, df) < level:
        low, high = high, high * 2
    for _ in range(45):
        mid = (low + high) / 2
        if _central_probability(mid, df) < level:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def t_quantile(df: float, level: float = LEVEL) -> float:
    """The two-sided Student-t quantile q: P(|T| <= q) = ``level``, ``df`` >= 1 (fractional ok).

    Computed by bisection on the t density integrated with Simpson's rule; beyond 10^6 degrees
    of freedom the value at 10^6 is used (the normal limit to 6 digits). Fractional df are
    rounded to 0.01 (above 100: to integers), which moves the quantile by less than 0.1 %.
    """
    if not df >= 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    df = min(float(df), 1e6)
    return _t_quantile(round(df, 2) if df < 100 else float(round(df)), level)


def mean_interval(values: ArrayLike) -> tuple[float, float, float]:
    """(mean, low, high) of the mean of ``values``; low/high NaN with fewer than two values."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = t_quantile(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return mean, mean - half, mean + half


def _rel_var(x: np.ndarray) -> float:
    """Squared relative standard error of the mean of ``x``."""
    m = float(x.mean())
    return float(x.var(ddof=1)) / (len(x) * m * m)


def welch_df(var_a: float, n_a: int, var_b: float, n_b: int) -> float:
    """Welch–Satterthwaite degrees of freedom of two squared standard errors (var/n given)."""
    num = (var_a + var_b) ** 2
    den = var_a**2 / (n_a - 1) + var_b**2 / (n_b - 1)
    if den <= 0:
        return math.inf
    return max(1.0, num / den)


def ratio_interval(numerator: ArrayLike, denominator: ArrayLike) -> tuple[float, float, float]:
    """(r, low, high) for r = mean(numerator) / mean(denominator), both positive.

    Low/high are NaN unless both sides hold at least two values.
    """
    a = np.asarray(numerator, dtype=float)
    b = np.asarray(denominator, dtype=float)
    if len(a) == 0 or len(b) == 0 or a.mean() <= 0 or b.mean() <= 0:
        return math.nan, math.nan, math.nan
    r = float(a.mean() / b.mean())
    if len(a) < 2 or len(b) < 2:
        return r, math.nan, math.nan
    va, vb = _rel_var(a), _rel_var(b)
    half = t_quantile(welch_df(va, len(a), vb, len(b))) * math.sqrt(va + vb)
    return r, r * math.exp(-half), r * math.exp(half)


def welch_test(a: ArrayLike, b: ArrayLike) -> tuple[float, float, bool]:
    """(t, df, differ): Welch's t statistic of mean(b) - mean(a), its df, and |t| > t(0.975, df).

    With fewer than two values on a side, (NaN, NaN, True): no evidence of noise to weigh.
    Identical constant samples give (0, inf, False) unless their means differ.
    """
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if len(x) < 2 or len(y) < 2:
        return math.nan, math.nan, True
    va = float(x.var(ddof=1)) / len(x)
    vb = float(y.var(ddof=1)) / len(y)
    diff = float(y.mean() - x.mean())
    if va + vb == 0:
        return (0.0 if diff == 0 else math.copysign(math.inf, diff)), math.inf, diff != 0
    t = diff / math.sqrt(va + vb)
    df = welch_df(va, len(x), vb, len(y))
    return t, df, abs(t) > t_quantile(df)


def separate(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals (low, high) are disjoint (NaN bounds never are)."""
    lo_a, hi_a = a
    lo_b, hi_b = b
    if any(math.isnan(v) for v in (lo_a, hi_a, lo_b, hi_b)):
        return False
    return hi_a < lo_b or hi_b < lo_a


def add_intervals(table: pd.DataFrame, run_means: pd.DataFrame) -> pd.DataFrame:
    """Add ``speedup_ci_low/high`` and ``efficiency_ci_low/high`` to the epoch-time table.

    ``run_means`` has one row per run: strategy, workers, avg_epoch_time_s. Each interval comes
    from :func:`ratio_interval` of the runs of the row's base configuration (its
    ``base_strategy``/``base_workers``, another strategy's single-GPU run included: the two
    means are still independent) and of the row's own runs, moved on the log scale so that it
    surrounds the table's own speedup; NaN unless both hold two runs or more. The base
    configuration's own interval is [1, 1].
    """
    out = table.copy()
    cols = {c: np.full(len(out), np.nan) for c in CI_COLUMNS}
    groups = run_groups(run_means)
    for i, rec in enumerate(out.to_dict("records")):
        speedup = rec["speedup"]
        base_w = rec["base_workers"]
        if not speedup > 0 or not isinstance(rec["base_strategy"], str) or base_w != base_w:
            continue
        key = (str(rec["strategy"]), int(rec["workers"]))
        base_key = (rec["base_strategy"], int(base_w))
        mine = groups.get(key, np.array([]))
        base = groups.get(base_key, np.array([]))
        if len(mine) < 2 or len(base) < 2:
            continue
        if base_key == key:
            for name in CI_COLUMNS:
                cols[name][i] = 1.0
            continue
        r, low, high = ratio_interval(base, mine)
        shift = speedup / r
        scale = base_w / rec["workers"]
        cols["speedup_ci_low"][i], cols["speedup_ci_high"][i] = low * shift, high * shift
        cols["efficiency_ci_low"][i] = low * shift * scale
        cols["efficiency_ci_high"][i] = high * shift * scale
    for name, values in cols.items():
        out[name] = values
    return out


@dataclass(frozen=True)
class Verdict:
    """Which candidate has the lowest mean and which others noise cannot tell from it.

    ``within_noise``: every other candidate whose 95 % interval overlaps the best's (lowest
    mean first); ``untested``: those whose interval is unknown (a single run), or every other
    one when the best's is; ``decided`` only when neither holds a candidate.
    """

    best: Any
    within_noise: tuple[Any, ...] = ()
    untested: tuple[Any, ...] = ()

    @property
    def decided(self) -> bool:
        return not self.within_noise and not self.untested


def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two known intervals (low, high) share a point; False when a bound is unknown.

    With :func:`separate`, the one comparison of intervals every "within noise" reads.
    """
    if any(math.isnan(v) for v in (*a, *b)):
        return False
    return not separate(a, b)


def best_of(candidates: Mapping[Any, tuple[float, float, float]]) -> Verdict | None:
    """The one "within noise" rule: the candidate with the lowest mean (ties: the first given)
    and every other whose interval overlaps its own. ``candidates``: key -> (mean, low, high);
    NaN means are left out; None when none is known."""
    known = {k: v for k, v in candidates.items() if not math.isnan(v[0])}
    if not known:
        return None
    order = sorted(known, key=lambda k: known[k][0])  # stable: the first given wins a tie
    best, others = order[0], order[1:]
    mine = known[best][1:]
    if any(math.isnan(v) for v in mine):
        return Verdict(best, (), tuple(others))
    unknown = tuple(k for k in others if any(math.isnan(v) for v in known[k][1:]))
    within = [k for k in others if k not in unknown and overlap(mine, known[k][1:])]
    return Verdict(best, tuple(within), unknown)


def fastest_by_workers(run_means: pd.DataFrame) -> list[tuple[int, Verdict]]:
    """Per worker count run by two strategies or more: :func:`best_of` over the 95 % intervals
    of the strategies' per-run mean epoch times."""
    out = []
    for workers, group in run_means.groupby("workers", sort=True):
        by = {
            str(s): mean_interval(g["avg_epoch_time_s"].to_numpy(dtype=float))
            for s, g in group.groupby("strategy", sort=True)
        }
        verdict = best_of(by) if len(by) >= 2 else None
        if verdict is not None:
            out.append((int(str(workers)), verdict))
    return out


def fastest_lines(run_means: pd.DataFrame) -> list[str]:
    """Per worker count run by two strategies or more: the fastest, or "within noise" naming
    every strategy whose interval overlaps the fastest's, or "cannot tell" with single runs."""
    lines = []
    for workers, v in fastest_by_workers(run_means):
        head = f"Fastest strategy at {workers} GPUs:"
        if v.untested:
            lines.append(
                f"{head} cannot tell (a strategy has a single run; {v.best} has the lowest mean)"
            )
        elif v.within_noise:
            lines.append(
                f"{head} within noise ({v.best} has the lowest mean; the 95 % intervals of "
                f"{joined(list(v.within_noise))} overlap its own)"
            )
        else:
            lines.append(f"{head} {v.best}")
    return lines


def run_groups(run_means: pd.DataFrame) -> dict[tuple[str, int], np.ndarray]:
    """Per (strategy, workers): the runs' mean epoch times."""
    out: dict[tuple[str, int], list[float]] = {}
    for s, w, t in zip(
        run_means["strategy"], run_means["workers"], run_means["avg_epoch_time_s"], strict=True
    ):
        out.setdefault((str(s), int(w)), []).append(float(t))
    return {k: np.array(v) for k, v in out.items()}
