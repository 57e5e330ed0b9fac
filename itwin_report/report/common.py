"""Helpers shared by the table modules: configuration keys, sorting, scaling columns."""

from __future__ import annotations

import numpy as np
import pandas as pd

from itwin_report.schema import RunData
from itwin_report.tables import DTYPES

CONFIG = ["strategy", "workers"]


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
        metrics=data.metrics.sort_values(
            ["run_id", "key", "step", "timestamp", "value"], kind="stable"
        ),
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


def jobs_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per job: job_id, strategy, workers (from its lowest-rank worker run)."""
    ordered = runs.sort_values(["job_id", "rank", "run_id"], kind="stable")
    return ordered.drop_duplicates("job_id")[["job_id", "strategy", "workers"]]


def points(data: RunData, key: str) -> pd.DataFrame:
    """Points of ``key`` joined with their worker run's job, configuration and rank."""
    metric = data.metrics[data.metrics["key"] == key]
    cols = ["run_id", "job_id", "strategy", "workers", "rank", "probing_interval"]
    return metric.merge(data.runs[cols], on="run_id", how="inner")


def lowest_rank_points(frame: pd.DataFrame) -> pd.DataFrame:
    """Keep, per job, only the points of the lowest rank that logged any."""
    if frame.empty:
        return frame
    low = frame.groupby("job_id")["rank"].transform("min")
    return frame[frame["rank"] == low]


def add_scaling(table: pd.DataFrame, value: str, higher_is_better: bool) -> pd.DataFrame:
    """Add ``speedup`` and ``efficiency`` per strategy against its smallest worker count with data.

    speedup = v(base)/v(w) for times, v(w)/v(base) for rates; efficiency = speedup * base / workers.
    """
    out = table.copy()
    strategies = out["strategy"].to_numpy(dtype=object)
    workers = out["workers"].to_numpy(dtype=float)
    values = out[value].to_numpy(dtype=float)
    usable = np.nan_to_num(values, nan=0.0) > 0
    speedup = np.full(len(out), np.nan)
    base = np.full(len(out), np.nan)
    for strategy in set(strategies):
        mine = strategies == strategy
        valid = np.flatnonzero(mine & usable)
        if not len(valid):
            continue
        b = valid[np.argmin(workers[valid])]
        rows = mine & usable
        ratio = values[rows] / values[b] if higher_is_better else values[b] / values[rows]
        speedup[rows] = ratio
        base[rows] = workers[b]
    out["speedup"] = speedup
    out["efficiency"] = speedup * base / workers
    return out
