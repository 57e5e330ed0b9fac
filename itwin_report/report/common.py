"""Helpers shared by the table modules: configuration keys, sorting, labels."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from itwin_report.data.frames import METRIC_ORDER, categorical, join_runs, sort_rows
from itwin_report.data.rundata import RunData
from itwin_report.report.specs import DTYPES

CONFIG = ["strategy", "workers"]
# the runs' text columns that :func:`points` joins to every point, as categoricals
TEXT_OF_POINTS = ("job_id", "strategy")


def empty_table(columns: list[str]) -> pd.DataFrame:
    """An empty table with ``columns``, each of the dtype its table spec gives."""
    return pd.DataFrame({c: pd.Series(dtype=DTYPES.get(c, "float64")) for c in columns})


def finish(rows: list[dict], columns: list[str]) -> pd.DataFrame:
    """Build a table from row dicts: right columns, int workers, sorted by strategy then workers."""
    if not rows:
        return empty_table(columns)
    frame = pd.DataFrame(rows, columns=columns)
    frame["workers"] = frame["workers"].astype("int64")
    frame["strategy"] = frame["strategy"].astype("str")
    return frame.sort_values(CONFIG, kind="stable").reset_index(drop=True)


def label(strategy: str, workers: int) -> str:
    """How a configuration is named in warnings."""
    n = int(workers)
    return f"{strategy} with {n} worker{'' if n == 1 else 's'}"


def normalized(data: RunData) -> RunData:
    """A copy of ``data`` with every frame in a canonical row order (results never depend on it)."""
    return RunData(
        experiment=data.experiment,
        tracking_uri=data.tracking_uri,
        runs=data.runs.sort_values(["job_id", "rank", "run_id"], kind="stable"),
        metrics=sort_rows(data.metrics, METRIC_ORDER),
        profiles=data.profiles.sort_values(
            ["run_id", "name", "self_cuda_time_total"], kind="stable"
        ),
        performance=data.performance.sort_values(
            ["run_id", "total_samples", "total_time"], kind="stable"
        ),
        warnings=list(data.warnings),
        logged_keys=list(data.logged_keys),
    )


def configurations(runs: pd.DataFrame) -> list[tuple[str, int]]:
    """All (strategy, workers) pairs of the worker runs, sorted."""
    pairs = {(str(s), int(w)) for s, w in zip(runs["strategy"], runs["workers"], strict=True)}
    return sorted(pairs)


def coded_runs(runs: pd.DataFrame, columns: tuple[str, ...] = TEXT_OF_POINTS) -> pd.DataFrame:
    """``runs`` with ``columns`` as categoricals: joined to points, they hold codes, not text."""
    return runs.assign(**{c: categorical(runs[c]) for c in columns})


POINT_COLUMNS = (
    *("run_id", "step", "value"),
    *("job_id", "strategy", "workers", "rank", "probing_interval"),
)


def points(data: RunData, key: str, columns: Sequence[str] = POINT_COLUMNS) -> pd.DataFrame:
    """Points (run, step, value) of ``key`` with their worker run's job, configuration, rank
    and probing interval; only ``columns`` of them (a table asks for what it reads: each
    column is one number per point). Points of runs that are not worker runs are left out.

    ``run_id``, ``job_id`` and ``strategy`` are categoricals (codes, not one string per
    point), whose categories may include runs and jobs without a point of ``key``: group
    by them with ``observed=True``.
    """
    own = [c for c in ("run_id", "step", "value") if c in columns or c == "run_id"]
    metric = data.metrics.loc[(data.metrics["key"] == key).to_numpy(dtype=bool), own]
    of_run = ["run_id", *(c for c in columns if c not in own)]
    text = tuple(c for c in TEXT_OF_POINTS if c in of_run)
    out = join_runs(metric, coded_runs(data.runs[of_run], text), of_run)
    return out if "run_id" in columns else out.drop(columns="run_id")


def lowest_rank_points(frame: pd.DataFrame) -> pd.DataFrame:
    """Keep, per job, only the points of the lowest rank that logged any."""
    if frame.empty:
        return frame
    low = frame.groupby("job_id", observed=True)["rank"].transform("min")
    return frame[frame["rank"] == low]
