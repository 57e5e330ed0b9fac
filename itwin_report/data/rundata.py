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
hostname            str      ``params.hostname``: the node the worker ran on ("" when not logged)
gpu_index           str      ``params.gpu_index``: its GPU's index on that node ("" when not logged)
gpu_uuid            str      ``params.gpu_uuid``: its GPU's UUID ("" when not logged)
samples_per_epoch   float    ``params.samples_per_epoch`` when logged, else NaN
batch_size          float    ``params.batch_size`` (samples per batch per worker), else NaN
global_batch_size   float    ``params.global_batch_size`` (samples per step, all workers), else NaN
gpus_per_node       float    ``params.gpus_per_node`` (GPUs per node: the nodes of a job), else NaN
status              str      MLflow run status of the worker run (FINISHED, KILLED, ...)
start_time          float    the worker run's start, ms since the epoch (NaN when unknown)
end_time            float    the worker run's end, ms since the epoch (NaN while running)
==================  =======  =============================================================

``metrics``: long format, one row per logged point of the keys in :data:`METRIC_KEYS` and of
MLflow's own per-GPU system metrics (keys as logged, e.g. ``system/node_1/gpu_0_power_usage_watts``:
:mod:`~itwin_report.data.system_keys` is the one place that knows their layout).
Columns ``run_id, key, step (int), value (float), timestamp (int, ms)``. ``run_id`` and
``key`` are categoricals (dtype ``category``): their categories are the distinct values present,
as text, sorted, so that millions of points hold integer codes instead of strings and the codes
are in the order of the values. Every reader gives this same frame; a frame handed over with
those columns as text (or as other categoricals) is converted. Code that groups, pivots or
unstacks by them passes ``observed=True`` (pandas before 3.0 would make a group of every
category), and a filtered slice may hold fewer values than its categories.

``profiles``: rows of the ``torch_profiling_averages.csv`` artifacts.
Columns ``run_id, name, self_cuda_time_total (float, microseconds)`` and the CSV's own
``global_rank``, ``num_gpus`` (float, NaN when the CSV lacks them) and ``strategy`` (as
``csv_strategy``, "" when absent), which say which worker wrote the file.

``performance``: one row per ``performance/performance.json`` artifact found.
Columns ``run_id`` plus :data:`PERFORMANCE_FIELDS` and ``records`` (how many workers'
records the file already merges: 1 for a single worker's file).

Columns in :data:`OPTIONAL_COLUMNS` may be absent from a frame handed to :class:`RunData`; they
are then filled with their default. Valid ranges are enforced by ``itwin_report.data.validate``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from itwin_report.data.frames import STR, categorical
from itwin_report.data.system_keys import is_system_gpu_key
from itwin_report.util.notes import Note

# metric keys the report reads
EPOCH_TIME = "epoch_time_s"
GPU_POWER = "gpu_power_W"
GPU_UTIL = "gpu_utilization_percent"
RATE = "local_samples_per_sec"
GLOBAL_RATE = "avg_samples_per_sec"
TRAIN_LOSS_EPOCH = "train_loss_epoch"  # step = cumulative batch count of the rank
GPU_ENERGY = "gpu_energy_J"  # the rank's GPU's cumulative energy counter (NVML), joules
METRIC_KEYS: tuple[str, ...] = (
    EPOCH_TIME,
    GPU_POWER,
    GPU_UTIL,
    RATE,
    GLOBAL_RATE,
    TRAIN_LOSS_EPOCH,
    GPU_ENERGY,
)


def is_report_key(key: str) -> bool:
    """Whether the report reads the points of metric ``key``."""
    return key in METRIC_KEYS or is_system_gpu_key(key)


def metric_keys(extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The keys a loader reads: :data:`METRIC_KEYS` and the ``extra`` keys asked for (such as
    the validation metric of a time-to-target report), each once."""
    return tuple(dict.fromkeys((*METRIC_KEYS, *extra)))


# worker-run params naming the GPU a worker's metrics measure (text as logged, "" when absent)
GPU_IDENTITY: tuple[str, ...] = ("hostname", "gpu_index", "gpu_uuid")

# worker-run params the loader reads
WORKER_PARAMS: tuple[str, ...] = (
    "strategy",
    "global_rank",
    "global_world_size",
    "probing_interval",
    "samples_per_epoch",
    "batch_size",
    "global_batch_size",
    "gpus_per_node",
    *GPU_IDENTITY,
)

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
    "batch_size": "float64",
    "global_batch_size": "float64",
    "gpus_per_node": "float64",
    "status": "str",
    **{name: "str" for name in GPU_IDENTITY},
    "start_time": "float64",
    "end_time": "float64",
}
CATEGORY = "category"  # text held as codes: see the module docs
METRIC_COLUMNS: dict[str, str] = {
    "run_id": CATEGORY,
    "key": CATEGORY,
    "step": "int64",
    "value": "float64",
    "timestamp": "int64",
}
PROFILE_COLUMNS: dict[str, str] = {
    "run_id": "str",
    "name": "str",
    "self_cuda_time_total": "float64",
    "global_rank": "float64",
    "num_gpus": "float64",
    "csv_strategy": "str",
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


# columns a frame may lack (older loaders, hand-built data): filled with these defaults
OPTIONAL_COLUMNS: dict[str, dict[str, Any]] = {
    "runs": {
        "batch_size": float("nan"),
        "global_batch_size": float("nan"),
        "gpus_per_node": float("nan"),
        **{name: "" for name in GPU_IDENTITY},
        "start_time": float("nan"),
        "end_time": float("nan"),
    },
    "profiles": {"global_rank": float("nan"), "num_gpus": float("nan"), "csv_strategy": ""},
}
FRAMES: dict[str, dict[str, str]] = {
    "runs": RUN_COLUMNS,
    "metrics": METRIC_COLUMNS,
    "profiles": PROFILE_COLUMNS,
    "performance": PERFORMANCE_COLUMNS,
}


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """An empty frame with the given columns and dtypes."""
    return pd.DataFrame({name: _empty(dtype) for name, dtype in columns.items()})


def _empty(dtype: str) -> pd.Series:
    if dtype == CATEGORY:  # no categories, of the text dtype the filled column has
        return pd.Series(pd.Categorical([], categories=pd.Index([], dtype=STR)))
    return pd.Series(dtype=dtype)


def conform(frame: pd.DataFrame, columns: dict[str, str], what: str) -> pd.DataFrame:
    """Return ``frame`` with exactly ``columns`` in order and cast to their dtypes.

    Raises ``ValueError`` naming the missing columns: a loader bug, not a user error.
    """
    defaults = OPTIONAL_COLUMNS.get(what, {})
    absent = {c: v for c, v in defaults.items() if c not in frame.columns}
    if absent:
        frame = frame.assign(**absent)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what} frame lacks columns {missing}")
    if frame.empty:
        return empty_frame(columns)
    if _conforms(frame, columns):
        return frame  # frames are never changed in place, so sharing one is safe
    out = {name: _cast(frame[name], dtype) for name, dtype in columns.items()}
    return pd.DataFrame(out, copy=False)  # a column already right is shared, not copied


def _cast(column: pd.Series, dtype: str) -> Any:
    """``column``'s values in ``dtype`` (the column's own array when it is in it already)."""
    if dtype == CATEGORY:
        return categorical(column)
    wanted = pd.Series(dtype=dtype).dtype
    if column.dtype == wanted and (wanted.kind != "O" or _all_text(column)):
        return column.to_numpy(copy=False) if wanted.kind != "O" else column.array
    return column.astype(dtype).array  # type: ignore[call-overload]


def _all_text(column: pd.Series) -> bool:
    return pd.api.types.infer_dtype(column, skipna=False) in ("string", "empty")


def _conforms(frame: pd.DataFrame, columns: dict[str, str]) -> bool:
    """Whether ``frame`` already has exactly ``columns``, their dtypes and a 0..n-1 index."""
    if list(frame.columns) != list(columns):
        return False
    index = frame.index
    if not (isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1):
        return False
    for name, dtype in columns.items():
        column = frame[name]
        if dtype == CATEGORY:
            if not _canonical(column):
                return False
            continue
        wanted = pd.Series(dtype=dtype).dtype
        if column.dtype != wanted:
            return False
        if wanted.kind == "O" and pd.api.types.infer_dtype(column, skipna=False) != "string":
            return False  # pandas 2 keeps str in object columns: every value must be one
    return True


def _canonical(column: pd.Series) -> bool:
    """Whether ``column`` is a categorical as the schema has it: unordered, no missing value,
    text categories, sorted, each one used (one pass over the codes)."""
    values = column.array
    if not isinstance(values, pd.Categorical) or values.ordered:
        return False
    categories = values.categories
    if categories.dtype != STR or not categories.is_monotonic_increasing:
        return False
    if len(categories) and pd.api.types.infer_dtype(categories) != "string":
        return False
    codes = values.codes
    if len(codes) and codes.min() < 0:
        return False
    return bool(np.bincount(codes, minlength=len(categories)).all())


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
    # where each worker run's artifacts are (run id -> artifact URI, as the store gave it): read
    # again only to look for logged profiler traces; empty for data not loaded from a store
    artifact_uris: dict[str, str] = field(default_factory=dict)
    # every metric key the runs logged, when the loader was asked for a key no worker run has
    # (named in the time-to-target warning); empty otherwise
    logged_keys: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name, columns in FRAMES.items():
            setattr(self, name, conform(getattr(self, name), columns, name))

    def save(self, directory: str | Path) -> Path:
        """Write the frames as ``<frame>.csv`` and the rest as ``meta.json`` in ``directory``.

        Floats are written with full precision, so :meth:`load` gives back equal frames.
        """
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        for name in FRAMES:
            getattr(self, name).to_csv(root / f"{name}.csv", index=False)
        meta = {
            "format": SAVE_FORMAT,
            "experiment": self.experiment,
            "tracking_uri": self.tracking_uri,
            "warnings": [w.record() if isinstance(w, Note) else str(w) for w in self.warnings],
            "logged_keys": list(self.logged_keys),
        }
        (root / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        return root

    @classmethod
    def load(cls, directory: str | Path) -> RunData:
        """Read what :meth:`save` wrote; ``ValueError`` when it is not such a directory."""
        root = Path(directory)
        try:
            meta = json.loads((root / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{root}: not saved run data ({exc})") from None
        if not isinstance(meta, dict) or meta.get("format") != SAVE_FORMAT:
            raise ValueError(f"{root}: not saved run data (unknown format)")
        frames = {name: _read_csv(root / f"{name}.csv", cols) for name, cols in FRAMES.items()}
        return cls(
            experiment=str(meta["experiment"]),
            tracking_uri=str(meta["tracking_uri"]),
            warnings=[_note(w) for w in meta.get("warnings", [])],
            runs=frames["runs"],
            metrics=frames["metrics"],
            profiles=frames["profiles"],
            performance=frames["performance"],
            logged_keys=[str(k) for k in meta.get("logged_keys", [])],
        )


SAVE_FORMAT = "itwin-report-run-data/1"


def _note(saved: object) -> str:
    """A saved warning: a record gives back its note, a plain string stays one."""
    if isinstance(saved, dict):
        return Note(
            str(saved.get("text", "")),
            str(saved.get("table", "")),
            str(saved.get("kind", "")),
            int(saved.get("runs", 0) or 0),
        )
    return str(saved)


def _read_csv(path: Path, columns: dict[str, str]) -> pd.DataFrame:
    """One saved frame: text columns read verbatim ("" stays "", "nan" stays "nan"); a
    categorical column is read as text and becomes one again in :class:`RunData`."""
    text = [c for c, t in columns.items() if t in ("str", CATEGORY)]
    numeric = [c for c in columns if c not in text]
    frame = pd.read_csv(
        path,
        dtype={c: "str" for c in text},
        keep_default_na=False,
        na_values={c: [""] for c in numeric},
    )
    for name, dtype in columns.items():
        if dtype == "bool" and name in frame:
            frame[name] = frame[name].map({"True": True, "False": False, True: True, False: False})
    return frame
