"""GPU table: energy per run (never summed across runs), per epoch, utilization, power.

A job whose ranks did not all log GPU metrics (itwinai logs them on rank 0 by default) has its
measured energy scaled to all its GPUs, ``energy * GPUs / GPUs measured``; the row's
``energy_coverage`` (GPUs measured / GPUs) says so and the renderers mark the cell ``~``.
Energy per epoch is the run's energy over all its epochs, warm-up included.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from itwin_report.data.rundata import GPU_POWER, GPU_UTIL, RunData
from itwin_report.report import specs as tables
from itwin_report.report.common import configurations, finish, label, points
from itwin_report.report.epoch_time import epoch_points
from itwin_report.util.text import name_list

COLUMNS = tables.GPU.names


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
    per_run = power.groupby("run_id", sort=True).agg(
        job_id=("job_id", "first"),
        rank=("rank", "first"),
        interval=("probing_interval", "first"),
        watts=("value", "sum"),
    )
    for run_id in per_run.index[per_run["interval"].isna()]:
        interval = sample_interval(power[power["run_id"] == run_id])
        how = f"{interval:g} s from the sample steps" if interval == interval else "unknown"
        warnings.append(f"worker run {run_id}: no probing_interval param; using {how}")
        per_run.loc[run_id, "interval"] = interval
    per_run["energy_wh"] = per_run["watts"] * per_run["interval"] / 3600.0
    grouped = per_run.groupby("job_id")
    per_job = grouped.agg(energy_wh=("energy_wh", "sum"), ranks=("rank", "nunique"))
    unknown = grouped["energy_wh"].count() < grouped["energy_wh"].size()
    per_job.loc[unknown, "energy_wh"] = np.nan  # a rank without an interval: energy unknown
    return per_job, warnings


def _config_stats(frame: pd.DataFrame) -> dict[tuple[str, int], tuple[float, set[str]]]:
    """Per configuration: (mean sample value, the jobs that have samples)."""
    stats = frame.groupby(["strategy", "workers"]).agg(
        mean=("value", "mean"), jobs=("job_id", "unique")
    )
    return {
        (str(s), int(w)): (float(m), {str(j) for j in jobs})
        for (s, w), m, jobs in zip(stats.index, stats["mean"], stats["jobs"], strict=True)
    }


def gpu_table(data: RunData) -> tuple[pd.DataFrame, list[str]]:
    """The GPU table and warnings (fallback intervals, partial coverage, missing data)."""
    power = points(data, GPU_POWER)  # the largest frames: one at a time
    per_job, warnings = job_energy(power)
    power_stats = _config_stats(power)
    del power
    util_stats = _config_stats(points(data, GPU_UTIL))
    epochs_per_job = epoch_points(data).groupby("job_id").size()
    per_job["epochs"] = epochs_per_job.reindex(per_job.index).astype("float64")
    per_job["wh_per_epoch"] = per_job["energy_wh"] / per_job["epochs"]
    nan = float("nan")
    rows = []
    partial: list[tuple[str, int]] = []
    no_data: list[str] = []
    for strategy, workers in configurations(data.runs):
        key = (strategy, workers)
        if key not in power_stats and key not in util_stats:
            no_data.append(label(strategy, workers))
            continue
        avg_power, power_jobs = power_stats.get(key, (nan, set()))
        utilization, util_jobs = util_stats.get(key, (nan, set()))
        energy = per_job.reindex(sorted(power_jobs))
        coverage = (energy["ranks"] / workers).clip(upper=1.0)
        if (coverage < 1).any():
            partial.append((strategy, workers))
        rows.append(
            {
                "strategy": strategy,
                "workers": workers,
                "runs": len(power_jobs | util_jobs),
                "energy_wh": _mean(energy["energy_wh"] / coverage),
                "energy_wh_per_epoch": _mean(energy["wh_per_epoch"] / coverage),
                "energy_coverage": _mean(coverage),
                "utilization_pct": utilization,
                "avg_power_w": avg_power,
            }
        )
    if no_data:
        warnings.append(f"no GPU data for {name_list(no_data)}")
    if partial:
        names = name_list([label(s, w) for s, w in partial])
        warnings.append(
            f"GPU energy of {len(partial)} configuration(s) is estimated ({names}): fewer "
            "ranks logged GPU metrics than the job has GPUs, so the measured GPUs' energy is "
            "scaled to all of them (marked ~; energy_coverage in JSON is GPUs measured / GPUs)"
        )
    return finish(rows, COLUMNS), warnings


def _mean(values: pd.Series) -> float:
    """Mean of the known values, NaN when there are none."""
    known = values.dropna()
    return float(known.mean()) if len(known) else float("nan")
