"""Computation table: share of device time in ATen/c10/autograd ops and in communication."""

from __future__ import annotations

import pandas as pd

from itwin_report import tables
from itwin_report.report.common import configurations, finish, label
from itwin_report.schema import RunData

COLUMNS = tables.COMPUTATION.names

COMPUTATION_PATTERN = r"\b(?:aten|at|c10|autograd)::"
COMMUNICATION_PATTERN = r"(?i)nccl|c10d::|all_?reduce|all_?gather|reduce_?scatter|broadcast"
STEP_PREFIX = "ProfilerStep"


def classify(profiles: pd.DataFrame) -> pd.DataFrame:
    """Profiler rows without ``ProfilerStep*``, with boolean ``computation``/``communication``."""
    names = profiles["name"].astype("str")
    rows = profiles[~names.str.startswith(STEP_PREFIX)].copy()
    names = rows["name"].astype("str")
    rows["computation"] = names.str.contains(COMPUTATION_PATTERN, regex=True)
    rows["communication"] = (
        names.str.contains(COMMUNICATION_PATTERN, regex=True) & ~rows["computation"]
    )
    return rows


def fractions(rows: pd.DataFrame) -> tuple[float, float]:
    """(computation, communication) shares of the summed ``self_cuda_time_total``."""
    total = float(rows["self_cuda_time_total"].sum())
    if total <= 0:
        return float("nan"), float("nan")
    comp = float(rows.loc[rows["computation"], "self_cuda_time_total"].sum())
    comm = float(rows.loc[rows["communication"], "self_cuda_time_total"].sum())
    return comp / total, comm / total


def computation_table(data: RunData) -> tuple[pd.DataFrame, list[str]]:
    """The computation table (rows pooled over ranks and runs) and missing-data warnings."""
    cols = ["run_id", "job_id", "strategy", "workers"]
    joined = data.profiles.merge(data.runs[cols], on="run_id", how="inner")
    rows_out, warnings = [], []
    classified = classify(joined)
    for strategy, workers in configurations(data.runs):
        mask = (joined["strategy"] == strategy) & (joined["workers"] == workers)
        if not mask.any():
            warnings.append(f"no profiler data for {label(strategy, workers)}")
            continue
        rows = classified[(classified["strategy"] == strategy) & (classified["workers"] == workers)]
        comp, comm = fractions(rows)
        rows_out.append(
            {
                "strategy": strategy,
                "workers": workers,
                "runs": joined.loc[mask, "job_id"].nunique(),
                "computation_fraction": comp,
                "communication_fraction": comm,
            }
        )
    return finish(rows_out, COLUMNS), warnings
