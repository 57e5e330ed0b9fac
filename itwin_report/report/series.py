"""The Rate/GlobalRate series of one configuration, for the rates plot."""

from __future__ import annotations

import pandas as pd

from itwin_report.data.frames import isin, present, text_index
from itwin_report.data.rundata import GLOBAL_RATE, RATE, RunData
from itwin_report.report.common import label
from itwin_report.report.rates import steady_rate

SERIES_COLUMNS = {
    "key": "str",
    "step": "int64",
    "elapsed_s": "float64",
    "value": "float64",
    "excluded": "bool",
}


def empty_series() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in SERIES_COLUMNS.items()})


def _runs_with(data: RunData, key: str) -> list[str]:
    """The distinct run ids that logged ``key`` (found on the codes, then a short list)."""
    return present(data.metrics["run_id"], (data.metrics["key"] == key).to_numpy(dtype=bool))


def default_config(data: RunData) -> tuple[str, int] | None:
    """The first strategy's smallest worker count with rate metrics (the most logging points)."""
    with_rate = data.runs[data.runs["run_id"].isin(_runs_with(data, RATE))]
    if with_rate.empty:
        return None
    strategy = sorted(with_rate["strategy"].astype(str))[0]
    workers = int(with_rate.loc[with_rate["strategy"] == strategy, "workers"].min())
    return strategy, workers


def rate_series(
    data: RunData, config: tuple[str, int] | None
) -> tuple[pd.DataFrame, tuple[str, int] | None, list[str]]:
    """(series, the configuration used, warnings) for ``config`` or the default one."""
    chosen = config if config is not None else default_config(data)
    if chosen is None:
        return empty_series(), None, []
    strategy, workers = chosen
    runs = data.runs[
        (data.runs["strategy"] == strategy)
        & (data.runs["workers"] == workers)
        & data.runs["run_id"].isin(_runs_with(data, RATE))
    ]
    if runs.empty:
        return empty_series(), chosen, [f"no rate metrics for {label(strategy, workers)}"]
    run_id = _first_run_lowest_rank(data, runs)
    mine = data.metrics[
        (data.metrics["run_id"] == run_id) & data.metrics["key"].isin([RATE, GLOBAL_RATE])
    ]
    start = int(mine["timestamp"].min())
    frames = []
    for key in (RATE, GLOBAL_RATE):
        part = mine[mine["key"] == key].sort_values(["step", "timestamp"], kind="stable")
        if part.empty:
            continue
        if key == RATE:
            _, excluded = steady_rate(part[["step", "value"]])
        else:
            excluded = pd.Series(False, index=part.index)
        frames.append(
            pd.DataFrame(
                {
                    "key": key,
                    "step": part["step"].astype("int64"),
                    "elapsed_s": (part["timestamp"] - start) / 1000.0,
                    "value": part["value"],
                    "excluded": excluded.astype(bool),
                }
            )
        )
    out = pd.concat(frames, ignore_index=True).astype(SERIES_COLUMNS)
    return out, chosen, []


def _first_run_lowest_rank(data: RunData, runs: pd.DataFrame) -> str:
    """The lowest-rank worker (with rate points) of the job whose points start first."""
    metrics = data.metrics
    mine = metrics.loc[isin(metrics["run_id"], runs["run_id"])]
    starts = text_index(mine.groupby("run_id", observed=True)["timestamp"].min())
    jobs = runs.assign(start=runs["run_id"].map(starts))
    job_start = jobs.groupby("job_id")["start"].min().reset_index().sort_values(["start", "job_id"])
    first_job = job_start["job_id"].iloc[0]
    chosen = jobs[jobs["job_id"] == first_job].sort_values(["rank", "run_id"]).iloc[0]
    return str(chosen["run_id"])
