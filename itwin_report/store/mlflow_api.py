"""Thin wrappers over MLflow's client for reading (the emulator's writer lives in emulator/).

Importing mlflow costs ~2.5 s, so everything here is imported lazily by its callers.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# No usage telemetry from a reporting tool, and no "View run at" line on stdout (plus a request)
# for every run written to a server; set before mlflow is imported. A user's own setting wins.
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from itwin_report.store.rest import report_keys
from itwin_report.store.tree import PARENT_TAG
from itwin_report.store.uri import FILE, store_kind
from itwin_report.util.errors import StoreError
from itwin_report.util.masking import mask_text

# MLflow and alembic announce database creation and migrations at INFO on stderr, and MLflow
# warns on stderr before it raises (a Databricks profile it cannot read, each retry of a refused
# database login): the error that follows says it in one line.
logging.getLogger("alembic").setLevel(logging.WARNING)
logging.getLogger("mlflow").setLevel(logging.ERROR)
FILE_STORE_ENV = "MLFLOW_ALLOW_FILE_STORE"


def allow_file_store(uri: str) -> None:
    """MLflow 3 refuses file stores unless told to allow them; do so for this process."""
    if store_kind(uri) == FILE:
        os.environ[FILE_STORE_ENV] = "true"


def client(uri: str) -> MlflowClient:
    """An MlflowClient for ``uri`` (file stores allowed)."""
    allow_file_store(uri)
    return MlflowClient(tracking_uri=uri)


def mlflow_exception() -> type[Exception]:
    """MLflow's base exception class, for callers that translate errors."""
    return MlflowException


# ---------------------------------------------------------------- reading

RUNS_PAGE_SIZE = 1000


def _translate(uri: str, what: str, exc: Exception) -> StoreError:
    from itwin_report.store.uri import mask_uri

    text = str(exc).strip()
    message = text.splitlines()[0] if text else type(exc).__name__
    if re.search(r"<(!doctype|html)", message, re.IGNORECASE):  # a web page, not MLflow's error
        message = message.split("Response body", 1)[0].rstrip(" .:'")
        message = re.sub(r"<[^>]*>", "", message) or "the server answered with a web page"
    return StoreError(mask_text(f"cannot {what} in {mask_uri(uri)}: {message}"))


def list_experiments(uri: str) -> list[tuple[str, str, int]]:
    """``(id, name, 1 if it has a live run else 0)`` of the live experiments."""
    from mlflow.entities import ViewType

    mlc = client(uri)
    try:
        exps: list[Any] = []
        token = None
        while True:
            page = mlc.search_experiments(
                view_type=ViewType.ACTIVE_ONLY, max_results=1000, page_token=token
            )
            exps.extend(page)
            token = page.token
            if not token:
                break
        out = []
        for exp in exps:
            some = mlc.search_runs([exp.experiment_id], max_results=1) if len(exps) > 1 else [1]
            out.append((str(exp.experiment_id), str(exp.name), 1 if some else 0))
        return out
    except (MlflowException, OSError) as exc:
        raise _translate(uri, "list experiments", exc) from exc


def search_all_runs(
    uri: str, experiment_id: str, param_keys: Sequence[str], metric_keys: Sequence[str]
) -> list[dict[str, Any]]:
    """Every live run of the experiment (all pages) as plain dicts.

    Keys: run_id, name, status, artifact_uri, parent_id, has_params, start_time, end_time (ms,
    None when unknown), params (only
    ``param_keys``), metric_keys (those of ``metric_keys`` the run has logged).
    """
    from mlflow.entities import ViewType

    mlc = client(uri)
    rows: list[dict[str, Any]] = []
    token = None
    try:
        while True:
            page = mlc.search_runs(
                [experiment_id],
                run_view_type=ViewType.ACTIVE_ONLY,
                max_results=RUNS_PAGE_SIZE,
                page_token=token,
            )
            rows.extend(_run_dict(run, param_keys, metric_keys) for run in page)
            token = page.token
            if not token:
                return rows
    except (MlflowException, OSError) as exc:
        raise _translate(uri, "search runs", exc) from exc


def _run_dict(run: Any, param_keys: Sequence[str], metric_keys: Sequence[str]) -> dict[str, Any]:
    params = run.data.params
    return {
        "run_id": run.info.run_id,
        "name": run.info.run_name or "",
        "status": run.info.status,
        "artifact_uri": run.info.artifact_uri or "",
        "parent_id": run.data.tags.get(PARENT_TAG, ""),
        "has_params": bool(params),
        "start_time": run.info.start_time,
        "end_time": run.info.end_time,
        "params": {k: params[k] for k in param_keys if k in params},
        "metric_keys": report_keys(run.data.metrics, metric_keys),
        "logged_keys": sorted(run.data.metrics),
    }


def metric_history(uri: str, run_id: str, key: str) -> list[tuple[int, float, int]]:
    """All ``(step, value, timestamp)`` points of one metric (the client pages through them)."""
    try:
        points = client(uri).get_metric_history(run_id, key)
    except (MlflowException, OSError) as exc:
        raise _translate(uri, f"read metric {key} of run {run_id}", exc) from exc
    return [(int(m.step), float(m.value), int(m.timestamp)) for m in points]


def download_artifact(uri: str, artifact_uri: str, path: str, dst: str) -> Path | None:
    """Download ``artifact_uri/path`` into ``dst``; None when the run has no such artifact."""
    from mlflow.artifacts import download_artifacts

    try:
        with _tracking_env(uri):
            local = download_artifacts(
                artifact_uri=f"{artifact_uri.rstrip('/')}/{path}", dst_path=dst, tracking_uri=uri
            )
    except (MlflowException, OSError) as exc:
        if _is_missing(exc) or not _listed(uri, artifact_uri, path):
            return None
        raise _translate(uri, f"download {path}", exc) from exc
    return Path(local)


def _listed(uri: str, artifact_uri: str, path: str) -> bool:
    """True unless listing the artifact's folder shows it absent.

    MLflow 2.x servers answer a download of a missing file with HTTP 500, not 404.
    """
    from mlflow.artifacts import list_artifacts

    folder, _, _name = path.rpartition("/")
    try:
        with _tracking_env(uri):
            listed = list_artifacts(
                artifact_uri=f"{artifact_uri.rstrip('/')}/{folder}".rstrip("/"), tracking_uri=uri
            )
    except (MlflowException, OSError):
        return True  # cannot tell: keep the download's own error
    return any(info.path.endswith(path) or info.path == _name for info in listed)


class _SharedTrackingEnv:
    """``MLFLOW_TRACKING_URI`` set while any thread is inside, restored when the last leaves.

    Clients before MLflow 3 resolve ``mlflow-artifacts:`` locations against the variable, not
    against the ``tracking_uri`` they are given. Downloads run in several threads: each one
    saving and restoring the variable by itself would let one thread restore the old value
    while another is still downloading.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._saved: str | None = None

    @contextmanager
    def __call__(self, uri: str) -> Iterator[None]:
        with self._lock:
            if self._inside == 0:
                self._saved = os.environ.get("MLFLOW_TRACKING_URI")
            os.environ["MLFLOW_TRACKING_URI"] = uri  # one store per command: the same uri
            self._inside += 1
        try:
            yield
        finally:
            with self._lock:
                self._inside -= 1
                if self._inside == 0:
                    if self._saved is None:
                        os.environ.pop("MLFLOW_TRACKING_URI", None)
                    else:
                        os.environ["MLFLOW_TRACKING_URI"] = self._saved


_tracking_env = _SharedTrackingEnv()


def _is_missing(exc: Exception) -> bool:
    """True when the error says the artifact does not exist (not a transport failure)."""
    if isinstance(exc, FileNotFoundError):
        return True
    code = getattr(exc, "error_code", "")
    text = str(exc)
    return code in ("RESOURCE_DOES_NOT_EXIST", "NOT_FOUND") or any(
        hint in text for hint in ("404", "does not exist", "No such file", "not found")
    )


__all__ = [
    "PARENT_TAG",
    "allow_file_store",
    "client",
    "download_artifact",
    "list_experiments",
    "metric_history",
    "mlflow",
    "mlflow_exception",
    "search_all_runs",
]
