"""GPU table: energy per run (never summed across runs), per epoch, utilization, power.

Energy comes from the best source a worker run logged: its GPU's cumulative energy counter
(``gpu_energy_J``, NVML's ``nvmlDeviceGetTotalEnergyConsumption`` in joules), as the last
reading minus the first; else its power samples, ``sum(gpu_power_W) * probing interval``. A
counter reading below the one before it is a reset (the driver restarted the count from zero):
the energy of that interval is the reading after the reset. The row's ``source`` names what
was used.

A GPU reported by several ranks of one job (same ``gpu_uuid``, or same ``hostname`` and
``gpu_index``) counts once: the lowest rank's metrics are kept, the others left out.

MLflow's own system metrics add every GPU a run logged, each GPU of a job once, its power
integrated over the points' timestamps (:mod:`itwin_report.report.system_gpus`); they also give
the peak GPU memory.

A job whose GPUs were not all measured (itwinai logs them on rank 0 by default) has its
measured energy scaled to all its GPUs, ``energy * GPUs / GPUs measured``; the row's
``energy_coverage`` (GPUs measured / GPUs) says so and the renderers mark the cell ``~``.
Energy per epoch is the run's energy over all its epochs, warm-up included; its 95 % interval
comes from the per-run values, as epoch time's does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from itwin_report.analysis.intervals import mean_interval
from itwin_report.data.frames import code_sums, coded, isin, present, rows_where, text_index
from itwin_report.data.rundata import GPU_ENERGY, GPU_POWER, GPU_UTIL, RunData
from itwin_report.report import specs as tables
from itwin_report.report.common import configurations, finish, label, points
from itwin_report.report.epoch_time import epoch_points
from itwin_report.report.system_gpus import (
    POWER,
    UTIL,
    gpu_energy,
    of_system,
    peak_memory,
    system_samples,
)
from itwin_report.util.notes import Note
from itwin_report.util.text import name_list, plural

COLUMNS = tables.GPU.names
COUNTER, SAMPLES = "energy counter", "power samples"
SOURCES = (COUNTER, SAMPLES)
MIXED = "counter and samples"
# what each use of a key's points reads of them (each column is one number per point)
SAMPLE_COLUMNS = ["run_id", "step", "value", "probing_interval"]
CONFIG_COLUMNS = ["run_id", "value", "job_id", "strategy", "workers"]


def sample_interval(power: pd.DataFrame) -> float:
    """Seconds between one worker run's samples: its param, else the median step spacing."""
    nominal = power["probing_interval"].iloc[0]
    if pd.notna(nominal) and nominal > 0:
        return float(nominal)
    steps = np.sort(power["step"].unique())
    if len(steps) < 2:
        return float("nan")
    return float(np.median(np.diff(steps)))


def sampled_energy(power: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Energy (Wh) per worker run from its power samples: sum(power) * interval / 3600."""
    warnings: list[str] = []
    per_run = power.groupby("run_id", sort=True, observed=True).agg(
        interval=("probing_interval", "first"), watts=("value", "sum")
    )
    per_run = text_index(per_run)
    for run_id in per_run.index[per_run["interval"].isna()]:
        interval = sample_interval(power[power["run_id"] == run_id])
        how = f"{interval:g} s from the sample steps" if interval == interval else "unknown"
        warnings.append(f"worker run {run_id}: no probing_interval param; using {how}")
        per_run.loc[run_id, "interval"] = interval
    per_run["energy_wh"] = per_run["watts"] * per_run["interval"] / 3600.0
    return per_run[["energy_wh"]], warnings


def counter_energy(counter: pd.DataFrame) -> pd.DataFrame:
    """Energy (Wh) and resets per worker run with two counter readings or more.

    ``counter``: the runs' ``gpu_energy_J`` points in step order. Each interval adds the
    difference of its readings; after a reset (a lower reading) it adds the new reading.
    """
    by_run = counter.groupby("run_id", sort=True, observed=True)["value"]
    step = by_run.diff()
    reset = step < 0
    # the sum of the non-negative steps and of the readings after resets, written as
    # last - first plus what each reset adds, so that a run without resets is exactly last - first
    extra = (counter["value"] - step).where(reset, 0.0)
    run = counter["run_id"]
    joules = by_run.last() - by_run.first() + extra.groupby(run, sort=True, observed=True).sum()
    out = pd.DataFrame(
        {
            "energy_wh": joules / 3600.0,
            "resets": reset.groupby(run, sort=True, observed=True).sum(),
            "readings": by_run.size(),
        }
    )
    return text_index(out[out["readings"] >= 2])


def gpu_keys(runs: pd.DataFrame) -> pd.Series:
    """Per worker run (indexed by run id): the GPU it measures, as far as the params tell.

    ``gpu_uuid`` when logged, else ``hostname`` and ``gpu_index`` when both are, else the run
    itself (a GPU no other run can be shown to share).
    """
    uuid = runs["gpu_uuid"].astype(str)
    host, index = runs["hostname"].astype(str), runs["gpu_index"].astype(str)
    keys = np.where(
        uuid != "",
        "uuid\0" + uuid,
        np.where(
            (host != "") & (index != ""), "host\0" + host + "\0" + index, "run\0" + runs["run_id"]
        ),
    )
    return pd.Series(keys, index=runs["run_id"].to_numpy())


def repeated_gpus(runs: pd.DataFrame, measured: set[str]) -> tuple[set[str], list[str]]:
    """Worker runs whose GPU a lower rank of the same job already reports, and one warning."""
    mine = runs[runs["run_id"].isin(measured)].sort_values(["job_id", "rank", "run_id"])
    keys = gpu_keys(mine).to_numpy()
    twice = pd.DataFrame({"job": mine["job_id"].to_numpy(), "gpu": keys}).duplicated()
    left_out = mine[twice.to_numpy()]
    if left_out.empty:
        return set(), []
    jobs = sorted({str(n) for n in left_out["run_name"]})
    n = len(left_out)
    note = Note(
        f"GPU metrics of {plural(n, 'worker run')} of {name_list(jobs)} left out: "
        "another rank of the same job reports the same GPU (same gpu_uuid, or same hostname "
        "and gpu_index), and each GPU counts once",
        "gpu",
        "duplicate",
        n,
    )
    return set(left_out["run_id"]), [note]


def run_energy(data: RunData, skip: set[str]) -> tuple[pd.DataFrame, list[str]]:
    """Per worker run with GPU energy: job, rank, energy_wh and its source; warnings."""
    power = _without(points(data, GPU_POWER, SAMPLE_COLUMNS), skip)
    sampled, warnings = sampled_energy(power)
    del power
    counter = _without(points(data, GPU_ENERGY, ["run_id", "step", "value"]), skip)
    counted = counter_energy(counter)
    both = sampled.index.intersection(counted.index)
    energy = pd.concat(
        [
            counted[["energy_wh"]].assign(source=COUNTER),
            sampled.drop(index=counted.index, errors="ignore").assign(source=SAMPLES),
        ]
    )
    info = data.runs.set_index("run_id")[["job_id", "rank", "run_name"]]
    energy = energy.join(info, how="inner")
    energy["gpu"] = "rank " + energy["rank"].astype(str)
    warnings += _counter_notes(counted, info, len(both))
    return energy, warnings


def _counter_notes(counted: pd.DataFrame, info: pd.DataFrame, both: int) -> list[str]:
    """Warnings on counter resets, and on runs that logged both sources."""
    out: list[str] = []
    reset = counted[counted["resets"] > 0]
    if not reset.empty:
        names = sorted({str(n) for n in info.reindex(reset.index)["run_name"].dropna()})
        out.append(
            Note(
                f"{GPU_ENERGY} went down {plural(int(reset['resets'].sum()), 'time')} in "
                f"{plural(len(reset), 'worker run')} of {name_list(names)}: a counter reset "
                "(e.g. a driver reload); the reading after each reset counts as the energy "
                "since it",
                "gpu",
                "reset",
                len(reset),
            )
        )
    if both:
        out.append(
            Note(
                f"GPU energy of {plural(both, 'worker run')} that logged both {GPU_ENERGY} and "
                f"{GPU_POWER} comes from the energy counter (exact); their power samples give "
                "the average power only",
                "gpu",
                "source",
                both,
            )
        )
    return out


def job_energy(energy: pd.DataFrame) -> pd.DataFrame:
    """Energy (Wh) per job: the sum over its measured GPUs (rows named by ``gpu``: a rank, or
    a GPU of MLflow's system metrics); NaN when one of them is unknown."""
    grouped = energy.groupby("job_id")
    per_job = grouped.agg(energy_wh=("energy_wh", "sum"), gpus=("gpu", "nunique"))
    unknown = grouped["energy_wh"].count() < grouped["energy_wh"].size()
    per_job.loc[unknown, "energy_wh"] = np.nan  # a rank without an interval: energy unknown
    per_job["source"] = grouped["source"].agg(lambda s: "+".join(sorted(set(s))))
    return per_job


def _config_stats(*parts: pd.DataFrame) -> dict[tuple[str, int], tuple[float, set[str]]]:
    """Per configuration, over the points of every part: (mean sample value, the jobs that
    have samples; the mean skips NaN, the jobs count those points too), summed on codes
    (:func:`~itwin_report.data.frames.code_sums`), part by part."""
    totals: dict[tuple[str, int], list[Any]] = {}  # configuration -> [sum, count, jobs]
    for frame in parts:
        coded_columns = [coded(frame[c]) for c in ("strategy", "workers", "job_id")]
        levels = [(codes, len(values)) for codes, values in coded_columns]
        found, _, sums, counts = code_sums(levels, frame["value"].to_numpy(dtype="float64"))
        (_, strategies), (_, workers), (_, jobs) = coded_columns
        for s, w, j, total, count in zip(*found, sums, counts, strict=True):
            entry = totals.setdefault((str(strategies[s]), int(workers[w])), [0.0, 0, set()])
            entry[0] += total
            entry[1] += count
            entry[2].add(str(jobs[j]))
    return {
        key: (float(total / count) if count else float("nan"), jobs)
        for key, (total, count, jobs) in totals.items()
    }


def _without(points: pd.DataFrame, runs: set[str]) -> pd.DataFrame:
    """``points`` less those of ``runs`` (the frame itself when none is theirs)."""
    return rows_where(points, ~isin(points["run_id"], runs))


def _measured_runs(data: RunData) -> set[str]:
    wanted = isin(data.metrics["key"], [GPU_POWER, GPU_UTIL, GPU_ENERGY])
    return set(present(data.metrics["run_id"], wanted))


def _source(sources: pd.Series) -> str:
    """The Source cell of a configuration from its jobs' sources."""
    used = {part for text in sources.dropna() for part in str(text).split("+")}
    if used == {COUNTER}:
        return COUNTER
    if used == {SAMPLES}:
        return SAMPLES
    return MIXED if used else ""


def gpu_table(data: RunData) -> tuple[pd.DataFrame, list[str]]:
    """The GPU table and warnings (sources, resets, repeated GPUs, coverage, missing data)."""
    skip, warnings = repeated_gpus(data.runs, _measured_runs(data))
    samples = system_samples(data)
    per_job, more = _per_job(data, skip, samples)
    warnings += more
    stats = {
        name: _config_stats(
            _without(points(data, key, CONFIG_COLUMNS), skip), of_system(samples, name)
        )
        for name, key in ((POWER, GPU_POWER), (UTIL, GPU_UTIL))
    }
    peaks = peak_memory(samples)
    nan = float("nan")
    rows = []
    partial: list[tuple[str, int]] = []
    no_data: list[str] = []
    for strategy, workers in configurations(data.runs):
        key = (strategy, workers)
        mine = per_job[(per_job["strategy"] == strategy) & (per_job["workers"] == workers)]
        if key not in stats[POWER] and key not in stats[UTIL] and mine.empty:
            no_data.append(label(strategy, workers))
            continue
        avg_power, power_jobs = stats[POWER].get(key, (nan, set()))
        utilization, util_jobs = stats[UTIL].get(key, (nan, set()))
        if (mine["coverage"] < 1).any():
            partial.append(key)
        per_epoch = mine["wh_per_epoch"].dropna().to_numpy(dtype=float)
        _, low, high = mean_interval(per_epoch)
        peak_mb, peak_pct = peaks.get(key, (nan, nan))
        rows.append(
            {
                "strategy": strategy,
                "workers": workers,
                "runs": len(set(mine.index) | power_jobs | util_jobs),
                "energy_wh": _mean(mine["scaled_wh"]),
                "energy_wh_per_epoch": _mean(mine["wh_per_epoch"]),
                "energy_wh_per_epoch_ci_low": low,
                "energy_wh_per_epoch_ci_high": high,
                "energy_coverage": _mean(mine["coverage"]),
                "energy_source": _source(mine["source"]),
                "utilization_pct": utilization,
                "avg_power_w": avg_power,
                "peak_gpu_memory_mb": peak_mb,
                "peak_gpu_memory_pct": peak_pct,
            }
        )
    if no_data:
        warnings.append(f"no GPU data for {name_list(no_data)}")
    if partial:
        names = name_list([label(s, w) for s, w in partial])
        warnings.append(
            f"GPU energy of {len(partial)} configuration(s) is estimated ({names}): fewer "
            "GPUs logged metrics than the job has, so the measured GPUs' energy is "
            "scaled to all of them (marked ~; energy_coverage in JSON is GPUs measured / GPUs)"
        )
    return finish(rows, COLUMNS), warnings


def _per_job(
    data: RunData, skip: set[str], samples: pd.DataFrame
) -> tuple[pd.DataFrame, list[str]]:
    """Per job with GPU energy: energy, GPUs measured, coverage, energy scaled to all GPUs and
    per epoch, source; warnings. Each rank's itwinai keys and each GPU of MLflow's system
    metrics is one measured GPU."""
    energy, warnings = run_energy(data, skip)
    system, more = gpu_energy(samples)
    energy = pd.concat([energy, system.assign(source=SAMPLES)], ignore_index=True)
    per_job = job_energy(energy)
    jobs_of = data.runs.drop_duplicates("job_id").set_index("job_id")
    per_job = per_job.join(jobs_of[["strategy", "workers"]])
    epochs_per_job = text_index(epoch_points(data).groupby("job_id", observed=True).size())
    per_job["epochs"] = epochs_per_job.reindex(per_job.index).astype("float64")
    per_job["coverage"] = (per_job["gpus"] / per_job["workers"]).clip(upper=1.0)
    per_job["scaled_wh"] = per_job["energy_wh"] / per_job["coverage"]
    per_job["wh_per_epoch"] = per_job["scaled_wh"] / per_job["epochs"]
    return per_job, warnings + more


def energy_by_job(data: RunData) -> tuple[pd.DataFrame, set[str]]:
    """Per job (indexed by job id), as the GPU table measures it: ``scaled_wh`` (all its GPUs),
    ``wh_per_epoch``, ``coverage``; and the worker runs whose GPU metrics are left out as
    repeats of a GPU another rank reports."""
    skip, _ = repeated_gpus(data.runs, _measured_runs(data))
    per_job, _ = _per_job(data, skip, system_samples(data))
    return per_job, skip


def _mean(values: pd.Series) -> float:
    """Mean of the known values, NaN when there are none."""
    known = values.dropna()
    return float(known.mean()) if len(known) else float("nan")
