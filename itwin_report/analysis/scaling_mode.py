"""Strong or weak scaling: deciding which one an experiment ran, and the weak-scaling measures.

Strong scaling keeps the global problem fixed (the same samples per epoch at every worker
count): epoch-time speedup and efficiency apply. Weak scaling keeps the problem per GPU fixed
(samples per epoch grow with the workers): an epoch-time speedup means nothing there, and the
efficiency is the throughput per GPU relative to the base worker count,
``(S_w / (w T_w)) / (S_b / (b T_b))``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

MODES = ("auto", "strong", "weak")
TOLERANCE = 0.01  # relative spread of samples per epoch (or per GPU) still called constant


def constant(values: ArrayLike) -> bool:
    """The one rule for "samples per epoch are the same": their spread (max - min) is at most
    :data:`TOLERANCE` of their mean (NaN left out; False without a value)."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    return bool(len(x)) and float(x.max() - x.min()) <= TOLERANCE * float(x.mean())


def per_sample(mode: str, samples: Iterable[float]) -> bool:
    """Whether configurations must be compared per sample, not per epoch: under weak scaling,
    or when the samples per epoch of the configurations (NaN: unknown) are not :func:`constant`.
    """
    known = [v for v in samples if v == v]
    return mode == "weak" or (len(known) > 1 and not constant(known))


def decide(runs: pd.DataFrame, mode: str = "auto") -> tuple[str, str]:
    """("strong" | "weak", the sentence saying how it was decided) from the worker runs."""
    if mode != "auto":
        return mode, f"{mode.capitalize()} scaling (chosen with --scaling {mode})."
    jobs = runs.drop_duplicates("job_id")
    known = jobs.dropna(subset=["samples_per_epoch"])
    if known.empty:
        return "strong", "Strong scaling assumed: no run logged samples_per_epoch."
    strong = weak = True
    for _, group in known.groupby("strategy"):
        per_workers = group.groupby("workers")["samples_per_epoch"].mean()
        if len(per_workers) < 2:
            continue
        total = per_workers.to_numpy(dtype=float)
        per_gpu = total / per_workers.index.to_numpy(dtype=float)
        strong &= constant(total)
        weak &= constant(per_gpu)
    if strong:
        return "strong", (
            "Strong scaling (auto): samples_per_epoch is the same at every worker count."
        )
    if weak:
        return "weak", (
            "Weak scaling (auto): samples_per_epoch grows in proportion to the worker count."
        )
    return "strong", (
        "Strong scaling assumed (auto): samples_per_epoch neither stays fixed nor grows in "
        "proportion to the worker count; pass --scaling to choose."
    )


def weak_efficiency(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The epoch-time table under weak scaling: speedup NaN, efficiency from throughput per GPU.

    Samples per epoch come from the runs; where a configuration did not log them, the
    per-GPU problem is taken as fixed, so the efficiency is ``T_b / T_w``. Interval columns,
    when present, follow: the speedup's become NaN, the efficiency's are rescaled from the
    ``T_b / T_w`` ratio interval.
    """
    out = table.copy()
    spe = (
        runs.drop_duplicates("job_id").groupby(["strategy", "workers"])["samples_per_epoch"].mean()
    )
    strategies = out["strategy"].astype(str).to_numpy()
    workers = out["workers"].to_numpy(dtype=float)
    times = out["avg_epoch_time_s"].to_numpy(dtype=float)
    speedup = out["speedup"].to_numpy(dtype=float)
    usable = np.nan_to_num(times, nan=0.0) > 0
    eff = np.full(len(out), np.nan)
    ratio = np.full(len(out), np.nan)
    for strategy in set(strategies):
        rows = np.flatnonzero((strategies == strategy) & usable)
        if not len(rows):
            continue
        b = rows[np.argmin(workers[rows])]
        sb = spe.get((strategy, int(workers[b])), np.nan)
        for i in rows:
            sw = spe.get((strategy, int(workers[i])), np.nan)
            work = (sw / workers[i]) / (sb / workers[b]) if sw > 0 and sb > 0 else 1.0
            eff[i] = work * times[b] / times[i]
            ratio[i] = eff[i] / speedup[i] if speedup[i] > 0 else np.nan
    if "speedup_ci_low" in out.columns:
        out["efficiency_ci_low"] = out["speedup_ci_low"].to_numpy(dtype=float) * ratio
        out["efficiency_ci_high"] = out["speedup_ci_high"].to_numpy(dtype=float) * ratio
        out["speedup_ci_low"] = np.nan
        out["speedup_ci_high"] = np.nan
    out["speedup"] = np.nan
    out["efficiency"] = eff
    return out
