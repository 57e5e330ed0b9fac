"""The frames passed from the loader to the aggregation stage, named once and validated once.

The loader (``itwin_report.store``) translates MLflow's layout (``params.*``, string params,
parent tags, artifacts) into a :class:`RunData`; nothing downstream knows about MLflow.

``runs``: one row per *worker run* (a leaf run that carries the training params).

==================  =======  =============================================================
column              dtype    meaning
==================  =======  =============================================================
run_id              str      the worker run's id
job_id              str      id of the job the worker belongs to (its parent run; a flat run
                             is its own job). Repeated jobs of one configuration are "runs".
run_name            str      name of the top-level run (what ``--run-names`` filters on)
strategy            str      ``params.strategy`` (e.g. ``torch-ddp``, ``deepspeed``)
workers             int      ``params.global_world_size``
rank                int      ``params.global_rank``
probing_interval    float    seconds between GPU samples (NaN when not logged)
samples_per_epoch   float    ``params.samples_per_epoch`` when logged, else NaN
status              str      MLflow run status of the worker run (FINISHED, KILLED, ...)
==================  =======  =============================================================

``metrics``: long format, one row per logged point of the keys in :data:`METRIC_KEYS`.
Columns ``run_id, key, step (int), value (float), timestamp (int, ms)``.

``profiles``: rows of the ``torch_profiling_averages.csv`` artifacts.
Columns ``run_id, name, self_cuda_time_total (float, microseconds)``.

``performance``: one row per ``performance/performance.json`` artifact found.
Columns ``run_id`` plus :data:`PERFORMANCE_FIELDS` and ``records`` (how many workers'
records the file already merges: 1 for a single worker's file).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd

# metric keys the report reads
EPOCH_TIME = "epoch_time_s"
GPU_POWER = "gpu_power_W"
GPU_UTIL = "gpu_utilization_percent"
RATE = "local_samples_per_sec"
GLOBAL_RATE = "avg_samples_per_sec"
METRIC_KEYS: tuple[str, ...] = (EPOCH_TIME, GPU_POWER, GPU_UTIL, RATE, GLOBAL_RATE)

# artifacts the report reads, relative to a worker run's artifact root
PROFILE_ARTIFACT = "torch_profiling_averages/torch_profiling_averages.csv"
PERFORMANCE_ARTIFACT = "performance/performance.json"

RUN_COLUMNS: dict[str, str] = {
    "run_id": "str",
    "job_id": "str",
    "run_name": "str",
    "strategy": "str",
    "workers": "int64",
    "rank": "int64",
    "probing_interval": "float64",
    "samples_per_epoch": "float64",
    "status": "str",
}
METRIC_COLUMNS: dict[str, str] = {
    "run_id": "str",
    "key": "str",
    "step": "int64",
    "value": "float64",
    "timestamp": "int64",
}
PROFILE_COLUMNS: dict[str, str] = {
    "run_id": "str",
    "name": "str",
    "self_cuda_time_total": "float64",
}
PERFORMANCE_FIELDS: tuple[str, ...] = (
    "total_samples",
    "total_time",
    "samples_per_sec",
    "compile_time",
    "programming_time",
    "est_samples_per_sec",
    "suspected_input_bottleneck",
)
PERFORMANCE_COLUMNS: dict[str, str] = {
    "run_id": "str",
    "total_samples": "float64",
    "total_time": "float64",
    "samples_per_sec": "float64",
    "compile_time": "float64",
    "programming_time": "float64",
    "est_samples_per_sec": "float64",
    "suspected_input_bottleneck": "bool",
    "records": "int64",
}


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """An empty frame with the given columns and dtypes."""
    return pd.DataFrame({name: pd.Series(dtype=dtype) for name, dtype in columns.items()})


def conform(frame: pd.DataFrame, columns: dict[str, str], what: str) -> pd.DataFrame:
    """Return ``frame`` with exactly ``columns`` in order and cast to their dtypes.

    Raises ``ValueError`` naming the missing columns: a loader bug, not a user error.
    """
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} frame lacks columns {missing}")
    if frame.empty:
        return empty_frame(columns)
    out = frame.loc[:, list(columns)].copy()
    for name, dtype in columns.items():
        out[name] = out[name].astype(dtype)  # type: ignore[call-overload]
    return out.reset_index(drop=True)


@dataclass
class RunData:
    """Everything the report needs from one experiment, in the documented frames."""

    experiment: str
    tracking_uri: str  # credentials already masked
    runs: pd.DataFrame = field(default_factory=lambda: empty_frame(RUN_COLUMNS))
    metrics: pd.DataFrame = field(default_factory=lambda: empty_frame(METRIC_COLUMNS))
    profiles: pd.DataFrame = field(default_factory=lambda: empty_frame(PROFILE_COLUMNS))
    performance: pd.DataFrame = field(default_factory=lambda: empty_frame(PERFORMANCE_COLUMNS))
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.runs = conform(self.runs, RUN_COLUMNS, "runs")
        self.metrics = conform(self.metrics, METRIC_COLUMNS, "metrics")
        self.profiles = conform(self.profiles, PROFILE_COLUMNS, "profiles")
        self.performance = conform(self.performance, PERFORMANCE_COLUMNS, "performance")


def keys_present(metrics: pd.DataFrame, keys: Iterable[str]) -> set[str]:
    """The subset of ``keys`` that has at least one point in ``metrics``."""
    return set(metrics["key"].unique()) & set(keys)
