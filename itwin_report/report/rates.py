"""Steady-state rate from a worker's smoothed ``local_samples_per_sec`` (Rate) series.

Rate is logged smoothed, ``Rate_k = (1 - a) * r_k + a * Rate_{k-1}`` with ``a = SMOOTHING``, so a
disturbance (a dip during a checkpoint, the backlog spike after it, an epoch boundary) leaks into
the next few points. The method undoes the smoothing first, then judges each interval on its own.
On the points ordered by step:

1. recover the local rates: ``r_0 = Rate_0``, ``r_k = (Rate_k - a * Rate_{k-1}) / (1 - a)``;
2. leave out the first ``WARMUP_POINTS`` intervals (the clock starts before the work does);
3. take the median ``m`` of the other local rates; leave out every interval whose rate is more
   than ``BAND`` away from ``m`` (checkpoint dips and backlog spikes, epoch boundaries);
4. steady rate = samples over time of the intervals kept: with interval lengths ``d_k`` in steps,
   ``sum(d_k) / sum(d_k / r_k)`` (a weighted harmonic mean; NaN when nothing is kept).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SMOOTHING = 0.4
WARMUP_POINTS = 2
BAND = 0.15


def unsmooth(rate: np.ndarray, smoothing: float = SMOOTHING) -> np.ndarray:
    """Local rates ``r_k`` behind a smoothed Rate series (ordered by step)."""
    raw = np.array(rate, dtype=float)
    raw[1:] = (raw[1:] - smoothing * raw[:-1]) / (1.0 - smoothing)
    return raw


def excluded_mask(values: np.ndarray) -> np.ndarray:
    """Boolean mask (True = left out) for Rate ``values`` already ordered by step."""
    raw = unsmooth(values)
    excluded = np.zeros(len(raw), dtype=bool)
    excluded[:WARMUP_POINTS] = True
    rest = raw[~excluded]
    if len(rest) == 0:
        return excluded
    median = float(np.median(rest))
    if median <= 0:
        return np.ones(len(raw), dtype=bool)
    excluded |= np.abs(raw - median) > BAND * median
    return excluded


def steady_rate_of(steps: np.ndarray, values: np.ndarray) -> tuple[float, np.ndarray]:
    """(steady rate, excluded mask) of one run's Rate points, already ordered by step."""
    mask = excluded_mask(values)
    raw = unsmooth(values)
    lengths = np.diff(steps, prepend=steps[0] - 1 if len(steps) else 0.0)
    keep = ~mask & (lengths > 0) & (raw > 0)
    rate = float(lengths[keep].sum() / (lengths[keep] / raw[keep]).sum()) if keep.any() else np.nan
    return rate, mask


def steady_rate(series: pd.DataFrame) -> tuple[float, pd.Series]:
    """(steady rate, excluded flags indexed like ``series``) for columns ``step, value``."""
    ordered = series.sort_values(["step", "value"], kind="stable")
    rate, mask = steady_rate_of(
        ordered["step"].to_numpy(dtype=float), ordered["value"].to_numpy(dtype=float)
    )
    return rate, pd.Series(mask, index=ordered.index).reindex(series.index)
