"""GPU table: energy per run (never summed across runs), per epoch, utilization, power."""

from __future__ import annotations

import numpy as np
import pandas as pd

from itwin_report.report.common import configurations, finish, label, points
from itwin_report.report.epoch_time import epoch_points
from itwin_report.schema import GPU_POWER, GPU_UTIL, RunData

COLUMNS = [
    "strategy",
    "workers",
    "runs",
    "energy_wh",
    "energy_wh_per_epoch",
    "utilization_pct",
    "avg_power_w",
]


def sample_interval(power: pd.DataFrame) -> float:
    """Seconds between one worker run's samples: its param, else the median step spacing."""
    nominal = power["probing_interval"].iloc[0]
    if pd.notna(nominal) and nominal > 0:
        return float(nominal)
    steps = np.sort(power["step"].unique())
    if len(steps) < 2:
        return float("nan")
    return float(np.median(np.diff(steps)))


def job_energy(power: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Energy (Wh) per job: sum over its ranks of sum(power) * interval / 3600."""
    warnings: list[str] = []
    rows = []
    for run_id, samples in power.groupby("run_id", sort=True):
        interval = sample_interval(samples)
        if pd.isna(samples["probing_interval"].iloc[0]):
            how = f"{interval:g} s from the sample steps" if interval == interval else "unknown"
            warnings.append(f"worker run {run_id}: no probing_interval param; using {how}")
        rows.append(
            {
                "job_id": samples["job_id"].iloc[0],
                "rank": int(samples["rank"].iloc[0]),
                "energy_wh": float(samples["value"].sum()) * interval / 3600.0,
            }
        )
    per_run = pd.DataFrame(rows, columns=["job_id", "rank", "energy_wh"])
    per_job = per_run.groupby("job_id").agg(
        energy_wh=("energy_wh", lambda s: s.sum() if s.notna().all() else np.nan),
        ranks=("rank", "nunique"),
    )
    return per_job, warnings


def gpu_table(data: RunData) -> tuple[pd.DataFrame, list[str]]:
    """The GPU table and warnings (fallback intervals, partial coverage, missing data)."""
    power = points(data, GPU_POWER)
    util = points(data, GPU_UTIL)
    per_job, warnings = job_energy(power)
    epochs_per_job = epoch_points(data).groupby("job_id").size()
    per_job["epochs"] = epochs_per_job.reindex(per_job.index).astype("float64")
    per_job["wh_per_epoch"] = per_job["energy_wh"] / per_job["epochs"]
    rows = []
    for strategy, workers in configurations(data.runs):
        p = power[(power["strategy"] == strategy) & (power["workers"] == workers)]
        u = util[(util["strategy"] == strategy) & (util["workers"] == workers)]
        if p.empty and u.empty:
            warnings.append(f"no GPU data for {label(strategy, workers)}")
            continue
        job_ids = sorted(set(p["job_id"]) | set(u["job_id"]))
        energy = per_job.reindex(sorted(set(p["job_id"])))
        for job, row in energy.iterrows():
            if int(row["ranks"]) < workers:
                warnings.append(
                    f"run {job} ({label(strategy, workers)}): energy covers "
                    f"{int(row['ranks'])} of {workers} GPUs"
                )
        rows.append(
            {
                "strategy": strategy,
                "workers": workers,
                "runs": len(job_ids),
                "energy_wh": _mean(energy["energy_wh"]),
                "energy_wh_per_epoch": _mean(energy["wh_per_epoch"]),
                "utilization_pct": _mean(u["value"]),
                "avg_power_w": _mean(p["value"]),
            }
        )
    return finish(rows, COLUMNS), warnings


def _mean(values: pd.Series) -> float:
    """Mean of the known values, NaN when there are none."""
    known = values.dropna()
    return float(known.mean()) if len(known) else float("nan")
