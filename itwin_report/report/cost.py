"""The GPU table's cost columns: GPU-hours, node-hours, energy per samples, and, when asked,
facility energy (``--pue``), CO2e (``--carbon-intensity``) and money (``--gpu-hour-price``).

Nothing is assumed: a factor not given leaves its columns empty, and node-hours are unknown
unless the runs log their ``hostname`` or ``gpus_per_node`` or ``--gpus-per-node`` is given.

* GPU-hours per epoch = GPUs x mean epoch time after warm-up / 3600 (its 95 % interval from
  the per-run mean epoch times); per run = GPUs x the wall time a job is billed for (the time
  breakdown's, set-up and teardown included) / 3600, averaged over runs; where no wall time is
  known, the run's training time (the sum of all its epoch times) stands for it.
* Nodes of a job as :mod:`itwin_report.report.nodes` decides them. Node-hours per epoch =
  nodes (the configuration's jobs' mean) x epoch time / 3600.
* Energy per 1,000 samples = energy per epoch / samples per epoch x 1000 (samples per epoch as
  the throughput table reads them: ``--samples-per-epoch``, the param, or batches x batch size).
* Facility energy = energy x PUE; CO2e (g) = (facility) energy in kWh x g CO2e per kWh;
  money = GPU-hours x price per GPU-hour.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from itwin_report.analysis.intervals import mean_interval, run_groups
from itwin_report.data.frames import text_index
from itwin_report.data.rundata import RunData
from itwin_report.report.epoch_time import epoch_points
from itwin_report.report.nodes import job_nodes
from itwin_report.report.throughput import samples_per_epoch


@dataclass(frozen=True)
class CostFactors:
    """The factors a report's costs are computed with; None: not given (nothing assumed)."""

    pue: float | None = None
    carbon_intensity: float | None = None  # g CO2e per kWh
    gpu_hour_price: float | None = None
    currency: str = ""
    gpus_per_node: int | None = None

    def to_dict(self) -> dict[str, object]:
        """The factors as the JSON report's ``cost_factors``."""
        return asdict(self)


def _job_frame(data: RunData, given_spe: float | None, per_node: int | None) -> pd.DataFrame:
    """Per job: configuration, training time (sum of all epoch times), samples per epoch,
    nodes (:mod:`itwin_report.report.nodes`)."""
    jobs = data.runs.drop_duplicates("job_id").set_index("job_id")[["strategy", "workers"]]
    times = text_index(epoch_points(data).groupby("job_id", observed=True)["value"].sum())
    jobs = jobs.assign(train_s=times.reindex(jobs.index))
    spe, _ = samples_per_epoch(data, given_spe)
    jobs["spe"] = spe.set_index("job_id")["samples_per_epoch"].reindex(jobs.index)
    jobs["nodes"] = job_nodes(data.runs, per_node).reindex(jobs.index)
    return jobs


def add_costs(
    gpu: pd.DataFrame,
    epoch: pd.DataFrame,
    run_means: pd.DataFrame,
    data: RunData,
    factors: CostFactors,
    given_spe: float | None = None,
    wall_s: dict[tuple[str, int], float] | None = None,
) -> pd.DataFrame:
    """The GPU table with its cost columns filled (rows of configurations it has); ``wall_s``:
    per configuration, its jobs' mean wall time (the time breakdown's ``wall_s``)."""
    if gpu.empty:
        return gpu
    jobs = _job_frame(data, given_spe, factors.gpus_per_node)
    times = {
        (str(s), int(w)): float(t)
        for s, w, t in zip(
            epoch["strategy"], epoch["workers"], epoch["avg_epoch_time_s"], strict=True
        )
    }
    per_run = run_groups(run_means)
    out = gpu.copy()
    for i, row in out.iterrows():
        key = (str(row["strategy"]), int(row["workers"]))
        workers = key[1]
        mine = jobs[(jobs["strategy"] == key[0]) & (jobs["workers"] == workers)]
        t = times.get(key, math.nan)
        _, low, high = mean_interval(per_run.get(key, np.array([])))
        spe = _mean(mine["spe"])
        billed = (wall_s or {}).get(key, math.nan)
        billed = billed if billed == billed else _mean(mine["train_s"])
        values = {
            "gpu_hours_per_epoch": workers * t / 3600.0,
            "gpu_hours_per_epoch_ci_low": workers * low / 3600.0,
            "gpu_hours_per_epoch_ci_high": workers * high / 3600.0,
            "gpu_hours_per_run": workers * billed / 3600.0,
            "node_hours_per_epoch": _mean(mine["nodes"]) * t / 3600.0,
            "energy_wh_per_1k_samples": 1000.0 * row["energy_wh_per_epoch"] / spe,
        }
        values.update(_factored(row, values, factors))
        for column, value in values.items():
            out.at[i, column] = value
    return out


def _factored(row: pd.Series, values: dict[str, float], f: CostFactors) -> dict[str, float]:
    """Facility energy, CO2e and money of one row; only those whose factor is given."""
    out: dict[str, float] = {}
    scale = 1.0 if f.pue is None else f.pue
    epoch_wh, run_wh = row["energy_wh_per_epoch"] * scale, row["energy_wh"] * scale
    if f.pue is not None:
        out["facility_wh_per_epoch"], out["facility_wh_per_run"] = epoch_wh, run_wh
    if f.carbon_intensity is not None:
        out["co2e_g_per_epoch"] = epoch_wh / 1000.0 * f.carbon_intensity
        out["co2e_g_per_run"] = run_wh / 1000.0 * f.carbon_intensity
    if f.gpu_hour_price is not None:
        out["cost_per_epoch"] = values["gpu_hours_per_epoch"] * f.gpu_hour_price
        out["cost_per_run"] = values["gpu_hours_per_run"] * f.gpu_hour_price
    return out


def config_samples(data: RunData, given_spe: float | None = None) -> dict[tuple[str, int], float]:
    """Per configuration: its jobs' mean samples per epoch, where known (as the costs read it)."""
    spe, _ = samples_per_epoch(data, given_spe)
    jobs = data.runs.drop_duplicates("job_id")[["job_id", "strategy", "workers"]]
    known = jobs.merge(spe.dropna(subset=["samples_per_epoch"]), on="job_id")
    means = known.groupby(["strategy", "workers"], observed=True)["samples_per_epoch"].mean()
    return {
        (str(s), int(w)): float(v)
        for s, w, v in zip(
            means.index.get_level_values(0), means.index.get_level_values(1), means, strict=True
        )
    }


def _mean(values: pd.Series) -> float:
    known = values.dropna()
    return float(known.mean()) if len(known) else math.nan
