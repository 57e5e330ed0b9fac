"""The loader's tidy step for metric points: system metrics mapped, sorted.

Points out of range and repeated (run, key, step) points are dropped where the loaded data is
validated (:mod:`itwin_report.data.validate`), in that order, so that an invalid repetition never
hides a valid point.

MLflow's own system metrics (``mlflow.enable_system_metrics_logging()``) log
``system/gpu_<i>_power_usage_watts`` and ``system/gpu_<i>_utilization_percentage`` for every
GPU the process sees. They stand in for itwinai's ``gpu_power_W`` and
``gpu_utilization_percent`` in a run that lacks those: a rank's own GPU is taken to be the
``rank % n``-th of the ``n`` GPUs its run logged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from itwin_report.data.rundata import GPU_POWER, GPU_UTIL, METRIC_COLUMNS, METRIC_KEYS, conform
from itwin_report.store.points import in_order

SYSTEM_KEYS = {"power_usage_watts": GPU_POWER, "utilization_percentage": GPU_UTIL}
_SYSTEM_PATTERN = r"^system/gpu_(\d+)_(power_usage_watts|utilization_percentage)$"


def system_gpu_points(metrics: pd.DataFrame, ranks: pd.Series) -> pd.DataFrame:
    """Points of MLflow's GPU system metrics as ``gpu_power_W``/``gpu_utilization_percent``.

    ``ranks`` maps run id to rank. Only the rank's own GPU is kept (see the module docs).
    """
    system = metrics[metrics["key"].astype(str).str.startswith("system/")]
    parts = system["key"].astype(str).str.extract(_SYSTEM_PATTERN)
    system = system[parts[0].notna()].assign(
        gpu=parts[0].dropna().astype("int64"), kind=parts[1].dropna().map(SYSTEM_KEYS)
    )
    if system.empty:
        return system.iloc[:0][list(METRIC_COLUMNS)]
    columns = ["run_id", "kind", "gpu"]
    gpus = system[columns].drop_duplicates().sort_values(columns)
    by = gpus.groupby(["run_id", "kind"], sort=False, observed=True)
    gpus["position"] = by.cumcount()
    gpus["count"] = by["gpu"].transform("size")
    rank = gpus["run_id"].astype(str).map(ranks).fillna(0).astype("int64")
    chosen = gpus[gpus["position"] == rank % gpus["count"]][["run_id", "kind", "gpu"]]
    kept = system.merge(chosen, on=["run_id", "kind", "gpu"])
    return kept.assign(key=kept["kind"])[list(METRIC_COLUMNS)]


def _strings(codes: np.ndarray, categories: pd.Index) -> pd.Series:
    """``categories[codes]`` as the schema's ``str`` column (taken, not converted per row)."""
    return pd.Series(categories.astype("str").take(codes), copy=False)


def tidy_metrics(metrics: pd.DataFrame, workers: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(metrics in the schema's columns, sorted by run, key, step, timestamp, value; warnings).

    System GPU metrics fill in for runs without itwinai's GPU keys. Order works on integer
    codes, never on the strings, and a frame that is in order already (as the SQL reader
    hands it over) is checked in one pass, not sorted. Repeated (run, key, step) points are
    all kept: validation drops the invalid ones first, then keeps the latest of each.
    """
    is_report_key = metrics["key"].isin(list(METRIC_KEYS)).to_numpy()
    main = metrics if is_report_key.all() else metrics[is_report_key]
    if not is_report_key.all():
        ranks = pd.Series(workers["rank"].to_numpy(), index=workers["run_id"].astype(str))
        system = system_gpu_points(metrics[~is_report_key], ranks)
        have = set(zip(main["run_id"].astype(str), main["key"].astype(str), strict=True))
        pairs = zip(system["run_id"].astype(str), system["key"].astype(str), strict=True)
        system = system[[pair not in have for pair in pairs]]
        main = pd.concat([main.astype({"run_id": object, "key": object}), system])
    run = _categorical(main["run_id"])
    key = _categorical(main["key"])
    value = main["value"].to_numpy(dtype="float64")
    stamp = main["timestamp"].to_numpy(dtype="int64")
    step = main["step"].to_numpy(dtype="int64")
    del main
    columns = [run.codes, key.codes, step, stamp, value]
    if not in_order(columns):
        order = np.lexsort(columns[::-1])
        columns = [c[order] for c in columns]
        del order
    run_codes, key_codes, step, stamp, value = columns
    tidy = pd.DataFrame(
        {
            "run_id": _strings(run_codes, run.categories),
            "key": _strings(key_codes, key.categories),
            "step": step,
            "value": value,
            "timestamp": stamp,
        },
        copy=False,
    )
    return conform(tidy, METRIC_COLUMNS, "metrics"), []


def _categorical(column: pd.Series) -> Any:
    """``column`` as a Categorical with sorted categories (reused when it already is one)."""
    dtype = column.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        categories = dtype.categories
        if categories.is_monotonic_increasing:
            return pd.Categorical(column)
        return pd.Categorical(column).reorder_categories(categories.sort_values())
    return pd.Categorical(column.astype(str))
