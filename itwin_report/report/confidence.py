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

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

LEVEL = 0.95
CI_COLUMNS = ["speedup_ci_low", "speedup_ci_high", "efficiency_ci_low", "efficiency_ci_high"]

# two-sided 95 % Student-t quantiles t(0.975, df); between rows, linear in 1/df
_T_DF = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
_T_DF += (21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 40, 60, 120)
_T_VALUE = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
_T_VALUE += (2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086)
_T_VALUE += (2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
_T_VALUE += (2.021, 2.000, 1.980)
_Z = 1.960


def t_quantile(df: float) -> float:
    """t(0.975, df) for ``df >= 1`` (table for 1..30, 40, 60, 120; linear in 1/df between)."""
    if not df >= 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if math.isinf(df):
        return _Z
    inv = 1.0 / df
    xs = [1.0 / d for d in _T_DF] + [0.0]
    ys = [*_T_VALUE, _Z]
    # xs is decreasing; np.interp needs increasing
    return float(np.interp(inv, xs[::-1], ys[::-1]))


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
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


def ratio_interval(
    numerator: Sequence[float], denominator: Sequence[float]
) -> tuple[float, float, float]:
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


def welch_test(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, bool]:
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
    from :func:`ratio_interval` of the base's and the row's run means, moved on the log scale
    so that it surrounds the table's own speedup; NaN unless both hold two runs or more. The
    base configuration's interval is [1, 1].
    """
    out = table.copy()
    cols = {c: np.full(len(out), np.nan) for c in CI_COLUMNS}
    groups = {
        (str(s), int(w)): g["avg_epoch_time_s"].to_numpy(dtype=float)
        for (s, w), g in run_means.groupby(["strategy", "workers"])
    }
    for i, rec in enumerate(out.to_dict("records")):
        speedup = rec["speedup"]
        if not speedup > 0:
            continue
        mine = groups.get((str(rec["strategy"]), int(rec["workers"])), np.array([]))
        base_w = rec["workers"] * rec["efficiency"] / speedup
        base = groups.get((str(rec["strategy"]), round(base_w)), np.array([]))
        if len(mine) < 2 or len(base) < 2:
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


def fastest_lines(run_means: pd.DataFrame) -> list[str]:
    """Per worker count run by two strategies or more: the fastest, or "within noise".

    A strategy is named fastest only when the 95 % interval of its mean epoch time lies
    entirely below every other strategy's interval at that worker count.
    """
    lines = []
    for workers, group in run_means.groupby("workers", sort=True):
        by = {
            str(s): mean_interval(g["avg_epoch_time_s"].to_numpy(dtype=float))
            for s, g in group.groupby("strategy", sort=True)
        }
        if len(by) < 2:
            continue
        best = min(by, key=lambda s: by[s][0])
        others = [s for s in by if s != best]
        if any(math.isnan(by[s][1]) for s in by):
            lines.append(
                f"Fastest strategy at {workers} GPUs: cannot tell (a strategy has a single run; "
                f"{best} has the lowest mean)"
            )
        elif all(by[best][2] < by[s][1] for s in others):
            lines.append(f"Fastest strategy at {workers} GPUs: {best}")
        else:
            lines.append(
                f"Fastest strategy at {workers} GPUs: within noise ({best} has the lowest "
                "mean, but the 95 % intervals overlap)"
            )
    return lines
