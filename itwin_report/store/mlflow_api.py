"""The only module that imports mlflow: thin wrappers over its client for reading and writing.

Importing mlflow costs ~2.5 s, so everything here is imported lazily by its callers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Metric, Param, RunStatus, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from itwin_report.errors import StoreError

PARENT_TAG = "mlflow.parentRunId"

# MLflow and alembic announce database creation and migrations at INFO on stderr.
for _name in ("mlflow", "alembic"):
    logging.getLogger(_name).setLevel(logging.WARNING)
MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limits
MAX_PARAMS_PER_BATCH = 100
FILE_STORE_ENV = "MLFLOW_ALLOW_FILE_STORE"


def is_file_store(uri: str) -> bool:
    """True for a plain path or ``file:`` URI (an MLflow file store)."""
    return "://" not in uri or uri.startswith("file:")


def allow_file_store(uri: str) -> None:
    """MLflow 3 refuses file stores unless told to allow them; do so for this process."""
    if is_file_store(uri):
        os.environ[FILE_STORE_ENV] = "true"


def client(uri: str) -> MlflowClient:
    """An MlflowClient for ``uri`` (file stores allowed)."""
    allow_file_store(uri)
    return MlflowClient(tracking_uri=uri)


def mlflow_exception() -> type[Exception]:
    """MLflow's base exception class, for callers that translate errors."""
    return MlflowException


@dataclass
class RunWriter:
    """Logs runs the way a trainer does, with batched writes and caller-chosen timestamps."""

    uri: str

    def __post_init__(self) -> None:
        self._client = client(self.uri)

    def experiment_id(self, name: str, artifact_location: str | None = None) -> str:
        """Id of experiment ``name``, created (with ``artifact_location``) when missing."""
        try:
            exp = self._client.get_experiment_by_name(name)
            if exp is not None:
                return str(exp.experiment_id)
            return str(self._client.create_experiment(name, artifact_location=artifact_location))
        except MlflowException as exc:
            raise StoreError(f"cannot open experiment {name!r} in {self.uri}: {exc}") from exc

    def count_runs(self, experiment_id: str) -> int:
        """Number of live runs in the experiment (1 page is enough to know it is not empty)."""
        runs = self._client.search_runs([experiment_id], max_results=1000)
        return len(runs)

    def create_run(
        self,
        experiment_id: str,
        name: str,
        start_time_ms: int,
        parent_run_id: str | None = None,
    ) -> str:
        """Create a RUNNING run and return its id."""
        tags = {PARENT_TAG: parent_run_id} if parent_run_id else None
        run = self._client.create_run(
            experiment_id, start_time=start_time_ms, tags=tags, run_name=name
        )
        return str(run.info.run_id)

    def log_batch(
        self,
        run_id: str,
        metrics: Iterable[tuple[str, float, int, int]] = (),
        params: dict[str, Any] | None = None,
    ) -> None:
        """Log ``(key, value, timestamp_ms, step)`` points and params, in MLflow-sized batches."""
        points = [Metric(k, float(v), int(ts), int(step)) for k, v, ts, step in metrics]
        plist = [Param(k, str(v)) for k, v in (params or {}).items()]
        for i in range(0, len(plist), MAX_PARAMS_PER_BATCH):
            self._client.log_batch(run_id, params=plist[i : i + MAX_PARAMS_PER_BATCH])
        for i in range(0, len(points), MAX_METRICS_PER_BATCH):
            self._client.log_batch(run_id, metrics=points[i : i + MAX_METRICS_PER_BATCH])

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """Store ``text`` as the artifact ``artifact_file`` of the run."""
        self._client.log_text(run_id, text, artifact_file)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        """Set tags on a run in one batch."""
        self._client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def end_run(self, run_id: str, end_time_ms: int, status: str = "FINISHED") -> None:
        """Mark the run FINISHED, FAILED or KILLED at ``end_time_ms``."""
        self._client.set_terminated(run_id, status=status, end_time=end_time_ms)


def terminal_statuses() -> Sequence[str]:
    """Run statuses that mean the run is over."""
    return [RunStatus.to_string(s) for s in (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.KILLED)]


def default_artifact_location(uri: str, experiment_name: str) -> str | None:
    """For a local sqlite store, keep artifacts beside the database, not in the cwd."""
    if uri.startswith("sqlite:///"):
        db = Path(uri.removeprefix("sqlite:///"))
        root = (db.parent / "artifacts" / experiment_name).resolve()
        return root.as_uri()
    return None


__all__ = [
    "PARENT_TAG",
    "RunWriter",
    "allow_file_store",
    "client",
    "default_artifact_location",
    "is_file_store",
    "mlflow",
    "mlflow_exception",
    "terminal_statuses",
]
