"""MLflow's own GPU system metrics in the GPU table: every GPU a job's runs logged, counted once.

``mlflow.enable_system_metrics_logging()`` logs, into the run of each process that enables it,
the power, utilization and memory of every GPU the process sees
(:mod:`itwin_report.data.system_keys`). So one run may hold several GPUs (a job that logs from
rank 0 only: all GPUs of its node), and several runs the same GPU (every rank of a node logs
all of the node's GPUs).

**Which GPU.** A GPU is (job, node, index): the node is the node id of the key; else the run's
``hostname`` param; else, for a run that logged one GPU index only, the run itself (a process
that saw only its own GPU, as with a ``CUDA_VISIBLE_DEVICES`` per rank); else the job's one node
(processes that see several GPUs see all of their node's; without a node id or hostname the
job's runs are taken to share one node). A GPU that several runs of the job logged counts once:
the series of the lowest rank (then run id) is kept, per measure.

**itwinai's keys win.** A run that logged ``gpu_power_W`` or ``gpu_energy_J`` has its system
power left out, one that logged ``gpu_utilization_percent`` its system utilization: those runs
are measured as itwinai measures them (:mod:`itwin_report.report.gpu`).

**Energy** of a GPU is its power integrated over the points' own timestamps: each point stands
for the time since the previous point of its series, the first one for the series' usual
spacing (the median time between its points; MLflow logs the first point one sampling interval
after the run starts). Nothing is guessed from steps, which count points, not seconds. A spacing
of more than :data:`GAP` times the usual one (a pause, a resumed run) or of zero counts as the
usual one, with a warning; a series whose timestamps show no spacing (one point, or all at one
time) has an unknown energy.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from itwin_report.data.frames import isin, present
from itwin_report.data.rundata import GPU_ENERGY, GPU_POWER, GPU_UTIL, RunData
from itwin_report.data.system_keys import system_gpu_key
from itwin_report.util.notes import Note
from itwin_report.util.text import name_list, plural

GAP = 10.0  # a spacing above GAP x the usual one is a pause, not a sample interval
POWER, UTIL, MEMORY_MB, MEMORY_PCT = "power_w", "utilization_pct", "memory_mb", "memory_pct"
# per measure, the itwinai keys whose presence in a run leave its system points of it out
OVERRIDDEN_BY = {POWER: (GPU_POWER, GPU_ENERGY), UTIL: (GPU_UTIL,)}
SAMPLE_COLUMNS = [
    *("run_id", "job_id", "rank", "run_name", "strategy", "workers"),
    *("gpu", "measure", "step", "value", "timestamp"),
]
RUN_INFO = ["run_id", "job_id", "rank", "run_name", "strategy", "workers", "hostname"]


def system_samples(data: RunData) -> pd.DataFrame:
    """The system GPU points the report counts, one series per (job, GPU, measure).

    Columns :data:`SAMPLE_COLUMNS`, text as text; ``gpu`` names the GPU within its job (see
    the module docs), ``measure`` is one of the ``system_keys`` measure names.
    """
    metrics = data.metrics
    keys = {k: p for k in present(metrics["key"]) if (p := system_gpu_key(k)) is not None}
    if not keys:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in SAMPLE_COLUMNS})
    points = metrics[isin(metrics["key"], keys)].astype({"run_id": str, "key": str})
    points = points.merge(data.runs[RUN_INFO].astype({"run_id": str}), on="run_id")
    parsed = pd.DataFrame([(k, *p) for k, p in keys.items()], columns=["key", "node", "i", "m"])
    points = points.merge(parsed, on="key").rename(columns={"m": "measure"})
    points = _without_overridden(points, metrics)
    points["gpu"] = _gpu_names(points)
    return _once_per_gpu(points)[SAMPLE_COLUMNS]


def _without_overridden(points: pd.DataFrame, metrics: pd.DataFrame) -> pd.DataFrame:
    """``points`` less a run's system measure that its itwinai keys measure already."""
    keep = np.ones(len(points), dtype=bool)
    for measure, own_keys in OVERRIDDEN_BY.items():
        runs = set(present(metrics["run_id"], isin(metrics["key"], own_keys)))
        keep &= ~((points["measure"] == measure) & points["run_id"].isin(runs)).to_numpy()
    return points[keep]


def _gpu_names(points: pd.DataFrame) -> pd.Series:
    """Per point: its GPU within the job, ``<node> gpu <index>`` (see the module docs)."""
    node = points["node"].astype(str)
    host = points["hostname"].astype(str)
    unnamed = node == ""
    indices = points[unnamed].groupby("run_id")["i"].nunique()
    alone = points["run_id"].map(indices).fillna(0).eq(1)
    where = np.select(
        [~unnamed, host != "", alone],
        ["node " + node, "node " + host, "run " + points["run_id"]],
        "the job's node",
    )
    return pd.Series(where, index=points.index) + " gpu " + points["i"].astype(str)


def _once_per_gpu(points: pd.DataFrame) -> pd.DataFrame:
    """Per (job, GPU, measure), the points of the lowest rank's run (then the lowest run id)."""
    series = points[["job_id", "gpu", "measure", "rank", "run_id"]].drop_duplicates()
    series = series.sort_values(["rank", "run_id"], kind="stable")
    kept = series.drop_duplicates(["job_id", "gpu", "measure"])
    return points.merge(kept[["job_id", "gpu", "measure", "run_id"]])


def gpu_energy(samples: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Per GPU of a job (rows: ``job_id``, ``gpu``, ``rank``, ``run_name``, ``energy_wh``): its
    power integrated over its points' timestamps (module docs); warnings on gaps and unknowns."""
    power = samples[samples["measure"] == POWER].sort_values(
        ["job_id", "gpu", "timestamp", "step"], kind="stable"
    )
    series = [power["job_id"], power["gpu"]]
    seconds = power["timestamp"].astype("float64").groupby(series).diff() / 1000.0
    usual = seconds.where(seconds > 0).groupby(series).transform("median")
    odd = seconds.notna() & usual.notna() & ((seconds <= 0) | (seconds > GAP * usual))
    counted = seconds.where(seconds.notna() & ~odd, usual)
    power = power.assign(wh=power["value"] * counted / 3600.0, odd=odd, known=usual.notna())
    per_gpu = power.groupby(["job_id", "gpu"], sort=True).agg(
        energy_wh=("wh", "sum"),
        known=("known", "all"),
        odd=("odd", "sum"),
        rank=("rank", "first"),
        run_name=("run_name", "first"),
    )
    per_gpu.loc[~per_gpu["known"], "energy_wh"] = np.nan
    return per_gpu.reset_index(), _energy_notes(per_gpu)


def _energy_notes(per_gpu: pd.DataFrame) -> list[str]:
    """Warnings on pauses counted as one interval and on series without a spacing."""
    out: list[str] = []
    paused = per_gpu[per_gpu["odd"] > 0]
    if not paused.empty:
        n = int(paused["odd"].sum())
        out.append(
            Note(
                f"{plural(n, 'gap')} in the GPU system metrics of "
                f"{name_list(sorted({str(r) for r in paused['run_name']}))}: a time between "
                f"points of zero or over {GAP:g}x the usual one (a pause, a resumed run) counts "
                "as one usual interval",
                "gpu",
                "gap",
                len(paused),
            )
        )
    unknown = per_gpu[~per_gpu["known"]]
    if not unknown.empty:
        out.append(
            Note(
                f"GPU energy of {name_list(sorted({str(r) for r in unknown['run_name']}))} is "
                f"unknown: the system metrics of {plural(len(unknown), 'GPU')} show no time "
                "between their points (one point, or all logged at one time)",
                "gpu",
                "interval",
                len(unknown),
            )
        )
    return out


def peak_memory(samples: pd.DataFrame) -> dict[tuple[str, int], tuple[float, float]]:
    """Per configuration: the highest GPU memory used of any of its GPUs, (MB, % of the GPU's)."""
    memory = samples[samples["measure"].isin([MEMORY_MB, MEMORY_PCT])]
    peaks = memory.pivot_table("value", ["strategy", "workers"], "measure", aggfunc="max")
    peaks = peaks.reindex(columns=[MEMORY_MB, MEMORY_PCT])
    return {
        (str(strategy), int(workers)): (float(mb), float(pct))
        for (strategy, workers), mb, pct in zip(
            peaks.index, peaks[MEMORY_MB], peaks[MEMORY_PCT], strict=True
        )
    }


def of_system(samples: pd.DataFrame, measure: str) -> pd.DataFrame:
    """The points of ``measure`` as the GPU table's per-configuration statistics read them."""
    mine = samples[samples["measure"] == measure]
    return mine[["run_id", "value", "job_id", "strategy", "workers"]]
