"""Epoch-time table: pooled mean after warm-up, spread between runs, speedup and efficiency."""

from __future__ import annotations

import numpy as np
import pandas as pd

from itwin_report import tables
from itwin_report.report.common import (
    add_scaling,
    configurations,
    finish,
    label,
    lowest_rank_points,
    points,
)
from itwin_report.schema import EPOCH_TIME, RunData

COLUMNS = tables.EPOCH_TIME.names


def epoch_points(data: RunData) -> pd.DataFrame:
    """All ``epoch_time_s`` points, one rank per job (the lowest that logged them)."""
    return lowest_rank_points(points(data, EPOCH_TIME))


def after_warmup(epochs: pd.DataFrame, warmup_epochs: int) -> pd.DataFrame:
    """Epoch points with ``step >= warmup_epochs``."""
    return epochs[epochs["step"] >= warmup_epochs]


def epoch_time_table(data: RunData, warmup_epochs: int = 1) -> tuple[pd.DataFrame, list[str]]:
    """The epoch-time table and the warnings about runs/configurations without epoch times."""
    epochs = epoch_points(data)
    kept = after_warmup(epochs, warmup_epochs)
    warnings = _warmup_warnings(epochs, kept, warmup_epochs)
    rows = []
    for (strategy, _), group in kept.groupby(["strategy", "workers"], sort=True):
        run_means = group.groupby("job_id")["value"].mean()
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
    table = finish(rows, COLUMNS[:6])
    table = add_scaling(table, "avg_epoch_time_s", higher_is_better=False)
    have = set(zip(table["strategy"], table["workers"], strict=True))
    for strategy, workers in configurations(data.runs):
        if (strategy, workers) not in have:
            warnings.append(f"no epoch times for {label(strategy, workers)}")
    return table[COLUMNS], warnings


def _warmup_warnings(epochs: pd.DataFrame, kept: pd.DataFrame, warmup: int) -> list[str]:
    """One warning per job whose epochs are all warm-up."""
    out = []
    gone = sorted(set(epochs["job_id"]) - set(kept["job_id"]))
    for job in gone:
        rows = epochs[epochs["job_id"] == job]
        first = rows.iloc[0]
        out.append(
            f"run {job} ({label(first['strategy'], first['workers'])}): all {len(rows)} "
            f"epoch(s) are within the {warmup} warm-up epoch(s); left out of epoch times"
        )
    return out
