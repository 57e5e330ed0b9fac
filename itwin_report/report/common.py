"""Helpers shared by the table modules: configuration keys, sorting, scaling columns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from itwin_report.errors import ReportError
from itwin_report.frames import METRIC_ORDER, join_runs, sort_rows
from itwin_report.schema import RunData
from itwin_report.tables import DTYPES

CONFIG = ["strategy", "workers"]
NON_DISTRIBUTED = "non-distributed"  # how itwinai names a 1-worker job's strategy
AUTO, SINGLE_GPU, PER_STRATEGY = "auto", "single-gpu", "per-strategy"
BASELINES = (AUTO, SINGLE_GPU, PER_STRATEGY)


def empty_table(columns: list[str]) -> pd.DataFrame:
    """An empty table with ``columns``, each of the dtype its table spec gives."""
    return pd.DataFrame({c: pd.Series(dtype=DTYPES.get(c, "float64")) for c in columns})


def finish(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    """Build a table from row dicts: right columns, int workers, sorted by strategy then workers."""
    if not rows:
        return empty_table(columns)
    frame = pd.DataFrame(rows, columns=columns)
    frame["workers"] = frame["workers"].astype("int64")
    frame["strategy"] = frame["strategy"].astype("str")
    return frame.sort_values(CONFIG, kind="stable").reset_index(drop=True)


def label(strategy: str, workers: int) -> str:
    """How a configuration is named in warnings."""
    return f"{strategy} with {int(workers)} workers"


def normalized(data: RunData) -> RunData:
    """A copy of ``data`` with every frame in a canonical row order (results never depend on it)."""
    return RunData(
        experiment=data.experiment,
        tracking_uri=data.tracking_uri,
        runs=data.runs.sort_values(["job_id", "rank", "run_id"], kind="stable"),
        metrics=sort_rows(data.metrics, METRIC_ORDER),
        profiles=data.profiles.sort_values(
            ["run_id", "name", "self_cuda_time_total"], kind="stable"
        ),
        performance=data.performance.sort_values(
            ["run_id", "total_samples", "total_time"], kind="stable"
        ),
        warnings=list(data.warnings),
    )


def configurations(runs: pd.DataFrame) -> list[tuple[str, int]]:
    """All (strategy, workers) pairs of the worker runs, sorted."""
    pairs = {(str(s), int(w)) for s, w in zip(runs["strategy"], runs["workers"], strict=True)}
    return sorted(pairs)


def points(data: RunData, key: str) -> pd.DataFrame:
    """Points (run, step, value) of ``key`` with their worker run's job, configuration, rank."""
    metric = data.metrics.loc[data.metrics["key"] == key, ["run_id", "step", "value"]]
    cols = ["run_id", "job_id", "strategy", "workers", "rank", "probing_interval"]
    return join_runs(metric, data.runs, cols)


def lowest_rank_points(frame: pd.DataFrame) -> pd.DataFrame:
    """Keep, per job, only the points of the lowest rank that logged any."""
    if frame.empty:
        return frame
    low = frame.groupby("job_id")["rank"].transform("min")
    return frame[frame["rank"] == low]


@dataclass(frozen=True)
class Baseline:
    """What speedup is measured against: one single-GPU configuration, or each strategy's own."""

    mode: str  # SINGLE_GPU or PER_STRATEGY
    reference: tuple[str, int] | None = None  # the single-GPU configuration (SINGLE_GPU only)

    def describe(self) -> str:
        if self.reference is None:
            return "each strategy's smallest worker count with data"
        return f"the single-GPU run ({label(*self.reference)})"


def _single_gpu_reference(strategies: np.ndarray, workers: np.ndarray, usable: np.ndarray) -> int:
    """Row index of the single-GPU reference (``non-distributed`` first), -1 when none."""
    ones = np.flatnonzero(usable & (workers == 1))
    if not len(ones):
        return -1
    preferred = [i for i in ones if strategies[i] == NON_DISTRIBUTED]
    return int(preferred[0] if preferred else min(ones, key=lambda i: str(strategies[i])))


def add_scaling(
    table: pd.DataFrame,
    value: str,
    higher_is_better: bool,
    baseline: str = AUTO,
    all_configs: list[tuple[str, int]] | None = None,
    what: str = "",
) -> tuple[pd.DataFrame, Baseline, list[str]]:
    """Add ``speedup`` and ``efficiency``; return the table, the baseline used and notes.

    ``auto`` and ``single-gpu``: when a 1-worker configuration has data, every strategy is
    measured against it (a strategy's own 1-worker row first, else the ``non-distributed`` one);
    ``per-strategy`` (and ``auto`` without a single-GPU run): against the strategy's smallest
    worker count with data. speedup = v(base)/v(w) for times, v(w)/v(base) for rates;
    efficiency = speedup * base workers / workers. A strategy whose smallest configuration in
    ``all_configs`` has no usable value is named in a note (its base moved up).
    """
    if baseline not in BASELINES:
        raise ReportError(f"unknown baseline {baseline!r}; use one of {', '.join(BASELINES)}")
    out = table.copy()
    strategies = out["strategy"].to_numpy(dtype=object)
    workers = out["workers"].to_numpy(dtype=float)
    values = out[value].to_numpy(dtype=float)
    usable = np.isfinite(values) & (np.nan_to_num(values, nan=0.0) > 0)
    speedup = np.full(len(out), np.nan)
    base = np.full(len(out), np.nan)
    notes: list[str] = []
    what = what or value
    ref = _single_gpu_reference(strategies, workers, usable) if baseline != PER_STRATEGY else -1
    if baseline == SINGLE_GPU and ref < 0:
        notes.append(
            f"no single-GPU run with {what}; their speedup is against each strategy's "
            "smallest worker count"
        )
    chosen = Baseline(SINGLE_GPU, (str(strategies[ref]), 1)) if ref >= 0 else Baseline(PER_STRATEGY)
    for strategy in sorted({str(s) for s in strategies}):
        mine = strategies == strategy
        valid = np.flatnonzero(mine & usable)
        if not len(valid):
            continue
        b = valid[np.argmin(workers[valid])]
        if ref >= 0 and workers[b] != 1:
            b = ref
        elif all_configs is not None:
            smallest = min(w for s, w in all_configs if s == strategy)
            if smallest < workers[b]:
                notes.append(
                    f"{strategy}: no {what} at {smallest} workers; its speedup and "
                    f"efficiency are against {int(workers[b])} workers"
                )
        rows = mine & usable
        ratio = values[rows] / values[b] if higher_is_better else values[b] / values[rows]
        speedup[rows] = ratio
        base[rows] = workers[b]
    out["speedup"] = speedup
    out["efficiency"] = speedup * base / workers
    return out, chosen, notes
