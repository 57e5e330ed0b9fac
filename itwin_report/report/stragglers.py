"""Stragglers from metrics: per job whose ranks all log, the rank (or node) whose per-rank
measures lag the others (:func:`itwin_report.analysis.outliers.lagging` decides).

Measures, each a per-rank mean over the run: GPU utilization and the rank's own samples per
second (``local_samples_per_sec``; lower is slower), epoch time (higher is slower). Power is
left out: a rank waiting in a collective draws less, the slow one more, so its direction says
nothing alone. Nodes come from the ``hostname`` param.
"""

from __future__ import annotations

import pandas as pd

from itwin_report.analysis.outliers import MIN_RANKS, lagging
from itwin_report.data.frames import isin, join_runs
from itwin_report.data.rundata import EPOCH_TIME, GPU_UTIL, RATE, RunData
from itwin_report.report.common import coded_runs

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
    metrics = data.metrics
    wanted = metrics.loc[isin(metrics["key"], keys), ["run_id", "key", "value"]]
    # one mean per (job, key, rank), computed in one grouping (never a scan per job), on codes
    columns = ["run_id", "job_id", "rank"]
    joined = join_runs(wanted, coded_runs(runs[columns], ("job_id",)), columns)
    del wanted
    means_all = joined.groupby(["job_id", "key", "rank"], observed=True)["value"].mean()
    del joined
    # per job, key and rank (in rank order): the mean, as plain dicts read once
    by_job: dict[str, dict[str, dict[int, float]]] = {}
    levels = [means_all.index.get_level_values(i) for i in range(3)]
    for job, key, rank, mean in zip(*levels, means_all.to_numpy(), strict=True):
        by_job.setdefault(str(job), {}).setdefault(str(key), {})[int(rank)] = float(mean)
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
