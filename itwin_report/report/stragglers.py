"""Stragglers from metrics: per job whose ranks all log, the rank (or node) whose per-rank
measures lag the others (:func:`itwin_report.analysis.outliers.lagging` decides).

Measures, each a per-rank mean over the run: GPU utilization and the rank's own samples per
second (``local_samples_per_sec``; lower is slower), epoch time (higher is slower). Power is
left out: a rank waiting in a collective draws less, the slow one more, so its direction says
nothing alone. Nodes come from the ``hostname`` param.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from itwin_report.analysis.outliers import MIN_RANKS, lagging
from itwin_report.data.frames import code_sums, coded, isin
from itwin_report.data.rundata import EPOCH_TIME, GPU_UTIL, RATE, RunData

# (metric key, words, unit, lower is slower)
MEASURES = (
    (GPU_UTIL, "GPU utilization", " %", True),
    (RATE, "samples per second of the rank", "", True),
    (EPOCH_TIME, "epoch time", " s", False),
)
COLUMNS = ["strategy", "workers", "job_id", "scope", "ranks", "node", "measure", "ratio", "text"]


def metric_stragglers(data: RunData) -> pd.DataFrame:
    """One row per straggling rank or node per job and measure (empty when none lags)."""
    runs = data.runs[["run_id", "job_id", "strategy", "workers", "rank", "hostname"]]
    keys = [key for key, *_ in MEASURES]
    by_job = _rank_means(data, runs, keys)
    rows = []
    for (job, strategy, workers), ranks in runs.groupby(
        ["job_id", "strategy", "workers"], sort=True
    ):
        if ranks["rank"].nunique() < MIN_RANKS or str(job) not in by_job:
            continue
        nodes = {int(r): str(h) for r, h in zip(ranks["rank"], ranks["hostname"], strict=True)}
        mine = by_job[str(job)]
        for key, words, unit, lower in MEASURES:
            values = mine.get(key, {})
            if len(values) < MIN_RANKS:
                continue
            rows += [
                found.job_row(str(strategy), int(str(workers)), str(job), unit)
                for found in lagging(values, words, nodes, lower_is_slower=lower)
            ]
    return pd.DataFrame(rows, columns=COLUMNS)


def _rank_means(
    data: RunData, runs: pd.DataFrame, keys: list[str]
) -> dict[str, dict[str, dict[int, float]]]:
    """Per job, key and rank (in rank order): the mean of the worker runs' points, NaN where
    none is a number. Summed per run and key on codes (never a copy of the points joined to
    their runs), then per job and rank."""
    metrics = data.metrics
    wanted = isin(metrics["key"], keys)
    (run, run_ids), (key, key_names) = (coded(metrics[c]) for c in ("run_id", "key"))
    run = np.where(wanted, run, -1)
    found, _, sums, counts = code_sums(
        [(run, len(run_ids)), (key, len(key_names))], metrics["value"].to_numpy(dtype="float64")
    )
    of_run = {  # a run without a job or rank is left out, as a group-by leaves it
        str(r): (str(j), int(k))
        for r, j, k in zip(runs["run_id"], runs["job_id"], runs["rank"], strict=True)
        if pd.notna(j) and pd.notna(k)
    }
    totals: dict[tuple[str, str, int], list[float]] = {}
    for r, k, total, count in zip(*found, sums, counts, strict=True):
        job_rank = of_run.get(str(run_ids[r]))
        if job_rank is not None:
            entry = totals.setdefault((job_rank[0], str(key_names[k]), job_rank[1]), [0.0, 0])
            entry[0] += total
            entry[1] += count
    by_job: dict[str, dict[str, dict[int, float]]] = {}
    for (job, name, rank), (total, count) in sorted(totals.items()):
        mean = float(total / count) if count else float("nan")
        by_job.setdefault(job, {}).setdefault(name, {})[rank] = mean
    return by_job
