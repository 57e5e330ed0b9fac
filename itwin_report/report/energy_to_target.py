"""Energy to target: the GPU energy a job spent until it reached the quality target.

Per run (job) that reached the target, at the timestamp ``T`` of its first point meeting it
(:mod:`itwin_report.report.time_to_target`):

* **power samples**, when the job's ``gpu_power_W`` samples cover the span up to ``T`` (one at
  or before ``T``, and the last no more than one probing interval before it: each sample stands
  for one interval): the job's energy as the GPU table measures it (all
  its GPUs, ``scaled_wh``) times the share of its power samples' sum logged at or before ``T``.
  The samples stand for equal probing intervals, so that share is the share of the energy spent
  by ``T``; for energy measured from power samples the product is exactly their integral up to
  ``T``, scaled to all GPUs as the GPU table scales it;
* else **energy per epoch x epochs to target**: the job's energy per epoch (the GPU table's,
  every epoch counted) times the epochs to target of its first point (set-up and evaluations
  outside the epochs are then left out);
* unknown when the job has no energy.

Per configuration: the mean over its reached runs with an energy, its 95 % interval over them,
and the basis (:data:`SAMPLED`, :data:`PER_EPOCH`, or :data:`MIXED` when its runs differ).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from itwin_report.analysis.intervals import mean_interval
from itwin_report.analysis.pareto import Point
from itwin_report.data.frames import as_text
from itwin_report.data.rundata import GPU_POWER, RunData
from itwin_report.report.decision import ToTarget
from itwin_report.report.gpu import energy_by_job

SAMPLED = "power samples up to the target"
PER_EPOCH = "energy per epoch x epochs to target"
MIXED = "mixed"
JOB_COLUMNS = ["job_id", "energy_wh_to_target", "energy_to_target_basis", "energy_coverage"]
CONFIG_COLUMNS = [
    "strategy",
    "workers",
    "energy_wh_to_target",
    "energy_wh_to_target_ci_low",
    "energy_wh_to_target_ci_high",
    "energy_to_target_basis",
    "energy_coverage",
]


def power_shares(data: RunData, skip: set[str], reached_at: dict[str, float]) -> dict[str, float]:
    """Per job whose ``gpu_power_W`` samples (of runs not in ``skip``) cover its target's
    timestamp ``reached_at[job]`` (ms; the last sample no more than one probing interval before
    it): the share of their sum logged at or before it."""
    mine = (data.metrics["key"] == GPU_POWER).to_numpy(dtype=bool)
    power = as_text(data.metrics.loc[mine, ["run_id", "value", "timestamp"]])
    power = power[~power["run_id"].isin(skip)]
    runs = as_text(data.runs[["run_id", "job_id", "probing_interval"]])
    power = power.merge(runs, on="run_id", how="inner")
    out = {}
    for job, group in power.groupby("job_id", sort=True):
        at = reached_at.get(str(job), math.nan)
        stamps = group["timestamp"].to_numpy(dtype=float)
        watts = group["value"].to_numpy(dtype=float)
        total = float(np.nansum(watts))
        interval = float(np.nan_to_num(group["probing_interval"].max())) * 1000.0
        if not (math.isfinite(at) and stamps.min() <= at <= stamps.max() + interval):
            continue
        if not total > 0:
            continue
        out[str(job)] = float(np.nansum(watts[stamps <= at])) / total
    return out


def job_energies(data: RunData, outcomes: pd.DataFrame) -> pd.DataFrame:
    """One row per reached job of ``outcomes`` (the time-to-target run rows): its energy to
    target, the basis, and its energy coverage (GPUs measured / GPUs)."""
    reached = outcomes[outcomes["reached"].to_numpy(dtype=bool)]
    if reached.empty:
        return pd.DataFrame(columns=JOB_COLUMNS)
    per_job, skip = energy_by_job(data)
    at = {str(j): float(t) for j, t in zip(reached["job_id"], reached["reached_at"], strict=True)}
    shares = power_shares(data, skip, at)
    known = {
        str(j): {str(k): v for k, v in rec.items()}
        for j, rec in per_job[["scaled_wh", "wh_per_epoch", "coverage"]].to_dict("index").items()
    }
    rows: list[dict[str, Any]] = []
    for record in reached.to_dict("records"):
        job = str(record["job_id"])
        energy, basis, coverage = math.nan, "", math.nan
        row = known.get(job)
        if row is not None:
            coverage = float(row["coverage"])
            if job in shares and math.isfinite(float(row["scaled_wh"])):
                energy, basis = float(row["scaled_wh"]) * shares[job], SAMPLED
            else:
                energy = float(row["wh_per_epoch"]) * float(record["epochs_to_target"])
                basis = PER_EPOCH if math.isfinite(energy) else ""
        rows.append(
            {
                "job_id": job,
                "energy_wh_to_target": energy,
                "energy_to_target_basis": basis,
                "energy_coverage": coverage,
            }
        )
    return pd.DataFrame(rows, columns=JOB_COLUMNS)


def energy_to_target(data: RunData, outcomes: pd.DataFrame) -> pd.DataFrame:
    """Per configuration with a reached run: the mean energy to target of its reached runs with
    an energy, its 95 % interval, the basis and the mean energy coverage."""
    jobs = job_energies(data, outcomes)
    both = outcomes.merge(jobs, on="job_id", how="inner")
    rows = []
    for (strategy, workers), group in both.groupby(["strategy", "workers"], sort=True):
        known = group[np.isfinite(group["energy_wh_to_target"].to_numpy(dtype=float))]
        mean, low, high = mean_interval(known["energy_wh_to_target"].to_numpy(dtype=float))
        bases = set(known["energy_to_target_basis"])
        rows.append(
            {
                "strategy": str(strategy),
                "workers": int(str(workers)),
                "energy_wh_to_target": mean,
                "energy_wh_to_target_ci_low": low,
                "energy_wh_to_target_ci_high": high,
                "energy_to_target_basis": bases.pop() if len(bases) == 1 else (MIXED * bool(bases)),
                "energy_coverage": float(known["energy_coverage"].mean()) if len(known) else 1.0,
            }
        )
    return pd.DataFrame(rows, columns=CONFIG_COLUMNS)


def to_target(table: pd.DataFrame, outcomes: pd.DataFrame, data: RunData, target: str) -> ToTarget:
    """What the decision to ``target`` weighs, from the time-to-target ``table`` and its run
    ``outcomes``: a point per configuration whose runs reached it (time and its interval from
    the table, energy to target from :func:`energy_to_target`), and those whose runs did not all
    reach it."""
    energies = {
        (str(r["strategy"]), int(r["workers"])): r
        for r in energy_to_target(data, outcomes).to_dict("records")
    }
    pts, basis, short = [], {}, []
    for record in table.to_dict("records"):
        row = {str(k): v for k, v in record.items()}
        key = (str(row["strategy"]), int(row["workers"]))
        reached, runs = int(row["runs_reached"]), int(row["runs"])
        if reached < runs:
            short.append((key, reached, runs))
        time = float(row["avg_time_to_target_s"])
        if not reached or not math.isfinite(time):
            continue
        energy = energies.get(key, {})
        coverage = float(energy.get("energy_coverage", math.nan))
        pts.append(
            Point(
                key[0],
                key[1],
                time,
                float(energy.get("energy_wh_to_target", math.nan)),
                key[1] * time / 3600.0,
                (float(row["time_to_target_ci_low"]), float(row["time_to_target_ci_high"])),
                (
                    float(energy.get("energy_wh_to_target_ci_low", math.nan)),
                    float(energy.get("energy_wh_to_target_ci_high", math.nan)),
                ),
                coverage if math.isfinite(coverage) else 1.0,
                0.0,  # the time to target counts from the run's start: set-up included
            )
        )
        basis[key] = str(energy.get("energy_to_target_basis", ""))
    return ToTarget(target, pts, basis, short)
