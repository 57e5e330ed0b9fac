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

import numpy as np
import pandas as pd

from itwin_report.data.frames import STR, categorical, isin
from itwin_report.data.rundata import GPU_POWER, GPU_UTIL, METRIC_COLUMNS, METRIC_KEYS, conform
from itwin_report.store.points import in_order

SYSTEM_KEYS = {"power_usage_watts": GPU_POWER, "utilization_percentage": GPU_UTIL}
_SYSTEM_PATTERN = r"^system/gpu_(\d+)_(power_usage_watts|utilization_percentage)$"


def system_gpu_points(metrics: pd.DataFrame, ranks: pd.Series) -> pd.DataFrame:
    """Points of MLflow's GPU system metrics as ``gpu_power_W``/``gpu_utilization_percent``.

    ``ranks`` maps run id to rank. Only the rank's own GPU is kept (see the module docs).
    Text (``run_id``, ``key``) comes back as text: these are few points.
    """
    system = metrics[metrics["key"].astype(str).str.startswith("system/")]
    system = system.astype({"run_id": STR, "key": STR})
    parts = system["key"].str.extract(_SYSTEM_PATTERN)
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
    rank = gpus["run_id"].map(ranks).fillna(0).astype("int64")
    chosen = gpus[gpus["position"] == rank % gpus["count"]][["run_id", "kind", "gpu"]]
    kept = system.merge(chosen, on=["run_id", "kind", "gpu"])
    return kept.assign(key=kept["kind"])[list(METRIC_COLUMNS)]


def _with_system_points(metrics: pd.DataFrame, workers: pd.DataFrame) -> pd.DataFrame:
    """The points of the report's keys, and system GPU points standing in for a run's missing
    ``gpu_power_W``/``gpu_utilization_percent``, with ``run_id`` and ``key`` as categoricals."""
    is_report_key = isin(metrics["key"], METRIC_KEYS)
    if is_report_key.all():
        return metrics
    main = metrics[is_report_key]
    ranks = pd.Series(workers["rank"].to_numpy(), index=workers["run_id"].astype(STR))
    system = system_gpu_points(metrics[~is_report_key], ranks)
    run = categorical(main["run_id"])
    key = categorical(main["key"])
    for name in set(system["key"]):
        mine = key.codes == key.categories.get_loc(name) if name in key.categories else None
        if mine is None:
            continue
        logged = set(run.categories.take(pd.unique(run.codes[mine])))  # runs that have it
        system = system[(system["key"] != name) | ~system["run_id"].isin(logged)]
    return pd.DataFrame(
        {
            "run_id": _joined([run, categorical(system["run_id"])]),
            "key": _joined([key, categorical(system["key"])]),
            **{c: np.concatenate([main[c], system[c]]) for c in ("step", "value", "timestamp")},
        },
        copy=False,
    )


def _joined(parts: list[pd.Categorical]) -> pd.Categorical:
    """Categoricals one after the other, on the union of their categories (sorted)."""
    union = pd.Index(sorted({c for part in parts for c in part.categories}), dtype=STR)
    codes = [union.get_indexer(part.categories)[part.codes] for part in parts]
    return pd.Categorical.from_codes(np.concatenate(codes), categories=union)


def tidy_metrics(metrics: pd.DataFrame, workers: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(metrics in the schema's columns, sorted by run, key, step, timestamp, value; warnings).

    System GPU metrics fill in for runs without itwinai's GPU keys. ``run_id`` and ``key``
    stay categoricals (the readers hand them over as such), and order works on their codes,
    never on the strings; a frame that is in order already (as the SQL reader hands it over)
    is checked in one pass, not sorted. Repeated (run, key, step) points are all kept:
    validation drops the invalid ones first, then keeps the latest of each.
    """
    main = _with_system_points(metrics, workers)
    run = categorical(main["run_id"])  # sorted categories: the codes' order is the values'
    key = categorical(main["key"])
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
            "run_id": pd.Categorical.from_codes(run_codes, dtype=run.dtype),
            "key": pd.Categorical.from_codes(key_codes, dtype=key.dtype),
            "step": step,
            "value": value,
            "timestamp": stamp,
        },
        copy=False,
    )
    return conform(tidy, METRIC_COLUMNS, "metrics"), []
