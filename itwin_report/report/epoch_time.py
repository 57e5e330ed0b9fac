"""Epoch-time table: pooled mean after warm-up, spread between runs, speedup and efficiency."""

from __future__ import annotations

import numpy as np
import pandas as pd

from itwin_report.analysis.intervals import add_intervals
from itwin_report.data.frames import as_text
from itwin_report.data.rundata import EPOCH_TIME, RunData
from itwin_report.report import baseline as base_rule
from itwin_report.report import specs as tables
from itwin_report.report.baseline import AUTO, Baseline
from itwin_report.report.common import (
    configurations,
    finish,
    label,
    lowest_rank_points,
    points,
)
from itwin_report.util.text import name_list

COLUMNS = tables.EPOCH_TIME.names


def epoch_points(data: RunData) -> pd.DataFrame:
    """All ``epoch_time_s`` points, one rank per job (the lowest that logged them)."""
    return lowest_rank_points(points(data, EPOCH_TIME))


def after_warmup(epochs: pd.DataFrame, warmup_epochs: int) -> pd.DataFrame:
    """Epoch points with ``step >= warmup_epochs``."""
    return epochs[epochs["step"] >= warmup_epochs]


def epoch_time_table(
    data: RunData, warmup_epochs: int = 1, baseline: str = AUTO
) -> tuple[pd.DataFrame, list[str], Baseline]:
    """The epoch-time table, warnings (missing epoch times, moved bases), the baseline used."""
    epochs = epoch_points(data)
    kept = after_warmup(epochs, warmup_epochs)
    warnings = _warmup_warnings(epochs, kept, warmup_epochs)
    rows = []
    for (strategy, _), group in kept.groupby(["strategy", "workers"], sort=True, observed=True):
        run_means = group.groupby("job_id", observed=True)["value"].mean()
        std = float(np.std(run_means.to_numpy(), ddof=1)) if len(run_means) > 1 else np.nan
        rows.append(
            {
                "strategy": strategy,
                "workers": int(group["workers"].iloc[0]),
                "runs": len(run_means),
                "epochs": len(group),
                "avg_epoch_time_s": float(group["value"].mean()),
                "std_epoch_time_s": std,
            }
        )
    table = finish(rows, COLUMNS[:7])  # up to the std between runs
    configs = configurations(data.runs)
    used, notes = base_rule.decide(
        table,
        "avg_epoch_time_s",
        baseline,
        configs,
        "epoch times",
        base_rule.model_params(data.runs),
    )
    table, more = base_rule.apply(table, "avg_epoch_time_s", False, used)
    warnings.extend(notes + more)
    table = add_intervals(table, run_means_table(data, warmup_epochs))
    have = set(zip(table["strategy"], table["workers"], strict=True))
    lacking = [label(s, w) for s, w in configs if (s, w) not in have]
    if lacking:
        warnings.append(f"no epoch times for {name_list(lacking)}")
    return table[COLUMNS], warnings, used


def _warmup_warnings(epochs: pd.DataFrame, kept: pd.DataFrame, warmup: int) -> list[str]:
    """One warning naming the jobs whose epochs are all warm-up; one if no epoch has a step."""
    out = []
    gone = sorted(set(epochs["job_id"]) - set(kept["job_id"]))
    if gone:
        first = epochs.drop_duplicates("job_id")
        configs = {
            str(j): label(str(s), int(w))
            for j, s, w in zip(first["job_id"], first["strategy"], first["workers"], strict=True)
        }
        names = [f"{job} ({configs[str(job)]})" for job in gone]
        out.append(
            f"{len(gone)} run(s) have all their epochs within the {warmup} warm-up epoch(s) and "
            f"are left out of epoch times: {name_list(names)}"
        )
    if len(epochs) > len(set(epochs["job_id"])) and (epochs["step"] == 0).all():
        out.append(
            f"every {EPOCH_TIME} point has step 0: log it with step=epoch so that the warm-up "
            "epochs can be told apart"
        )
    return out


RUN_COLUMNS = ["strategy", "workers", "job_id", "avg_epoch_time_s"]


def run_means_table(data: RunData, warmup_epochs: int = 1) -> pd.DataFrame:
    """One row per run (job): its mean epoch time after warm-up; sorted by configuration, job."""
    kept = after_warmup(epoch_points(data), warmup_epochs)
    if kept.empty:
        return finish([], RUN_COLUMNS).astype({"job_id": "str"})
    means = kept.groupby(["strategy", "workers", "job_id"], as_index=False, observed=True).agg(
        avg_epoch_time_s=("value", "mean")
    )
    means = as_text(means)  # one row per job: its text as text again
    means["workers"] = means["workers"].astype("int64")
    return means.sort_values(["strategy", "workers", "job_id"], kind="stable").reset_index(
        drop=True
    )[RUN_COLUMNS]
