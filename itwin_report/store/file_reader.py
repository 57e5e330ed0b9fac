"""Read an MLflow *file store* (itwinai's default ``mllogs/mlflow``) straight from disk.

Layout: ``<root>/<experiment_id>/meta.yaml`` and ``<root>/<experiment_id>/<run_id>/`` with
``meta.yaml``, ``params/<key>``, ``tags/<key>`` and ``metrics/<key>`` (one
``timestamp value [step]`` line per point). Deleted experiments live in ``<root>/.trash``.
Reading the files directly (instead of through MLflow's FileStore, which creates ``.trash``
and a default experiment when they are missing) guarantees nothing is written.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from itwin_report.errors import StoreError
from itwin_report.progress import Advance
from itwin_report.schema import METRIC_KEYS
from itwin_report.store.tree import PARENT_TAG, WORKER_PARAMS
from itwin_report.store.uri import require_file_store

# RunStatus values as the file store persists them
_STATUS = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}
_RUN_NAME_TAG = "mlflow.runName"


def _meta(path: Path) -> dict[str, Any]:
    """A parsed ``meta.yaml``, or {} when missing or unreadable."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
    except (OSError, yaml.YAMLError, AttributeError):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            return {}
    return data if isinstance(data, dict) else {}


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


class FileStoreReader:
    """Experiments, runs, params and metrics of one MLflow file store directory."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.root = require_file_store(uri)
        self._run_dirs: dict[str, list[Path]] = {}

    def close(self) -> None:
        """Nothing to release."""

    def _experiment_dirs(self) -> list[tuple[str, str, Path]]:
        """``(id, name, dir)`` of the live experiments."""
        out = []
        for child in sorted(self.root.iterdir()):
            if not child.is_dir() or child.name.startswith("."):
                continue
            meta = _meta(child / "meta.yaml")
            if "name" not in meta or meta.get("lifecycle_stage", "active") != "active":
                continue
            out.append((str(meta.get("experiment_id", child.name)), str(meta["name"]), child))
        return out

    def _live_runs(self, exp_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
        """Run directories of an experiment with their meta, deleted runs left out."""
        runs = []
        for child in sorted(exp_dir.iterdir()):
            if not child.is_dir():
                continue
            meta = _meta(child / "meta.yaml")
            run_id = meta.get("run_id") or meta.get("run_uuid")
            if not run_id or meta.get("lifecycle_stage", "active") != "active":
                continue
            runs.append((child, meta))
        return runs

    def experiments(self) -> list[tuple[Any, str, int]]:
        """``(id, name, live run count)`` of the live experiments."""
        try:
            return [(i, n, len(self._live_runs(d))) for i, n, d in self._experiment_dirs()]
        except OSError as exc:
            raise StoreError(f"cannot read the file store at {self.root}: {exc}") from exc

    def runs(self, experiment_id: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(live runs in the tree's raw layout, their worker params in long format)."""
        exp_dir = next(d for i, _, d in self._experiment_dirs() if i == experiment_id)
        rows, params = [], []
        self._run_dirs = {}
        for run_dir, meta in self._live_runs(exp_dir):
            run_id = str(meta.get("run_id") or meta.get("run_uuid"))
            self._run_dirs[run_id] = [run_dir]
            name = meta.get("run_name") or _read(run_dir / "tags" / _RUN_NAME_TAG) or ""
            status = meta.get("status", 1)
            param_dir = run_dir / "params"
            has_params = param_dir.is_dir() and any(param_dir.iterdir())
            rows.append(
                {
                    "run_id": run_id,
                    "name": str(name),
                    "status": _STATUS.get(status, str(status)),
                    "parent_id": (_read(run_dir / "tags" / PARENT_TAG) or "").strip(),
                    "artifact_uri": str(meta.get("artifact_uri") or ""),
                    "has_params": has_params,
                }
            )
            for key in WORKER_PARAMS:
                value = _read(param_dir / key)
                if value is not None:
                    params.append({"run_id": run_id, "key": key, "value": value})
        runs = pd.DataFrame(
            rows, columns=["run_id", "name", "status", "parent_id", "artifact_uri", "has_params"]
        )
        return runs, pd.DataFrame(params, columns=["run_id", "key", "value"])

    def metrics(self, experiment_id: Any, run_ids: Sequence[str], advance: Advance) -> pd.DataFrame:
        """Points of :data:`METRIC_KEYS` logged by ``run_ids``, parsed in one pass."""
        del experiment_id
        lines: list[str] = []
        owners: list[tuple[str, str]] = []
        counts: list[int] = []
        for run_id in run_ids:
            for run_dir in self._run_dirs.get(run_id, []):
                for key in METRIC_KEYS:
                    text = _read(run_dir / "metrics" / key)
                    if not text:
                        continue
                    points = [line for line in text.splitlines() if line.strip()]
                    lines.extend(points)
                    owners.append((run_id, key))
                    counts.append(len(points))
            advance(len(METRIC_KEYS))
        if not lines:
            return pd.DataFrame(columns=["run_id", "key", "step", "value", "timestamp"])
        table = pd.read_csv(
            io.StringIO("\n".join(lines)),
            sep=" ",
            header=None,
            names=["timestamp", "value", "step", "dataset", "digest"],
            dtype={"timestamp": "int64", "value": "float64", "step": "float64"},
        ).drop(columns=["dataset", "digest"])
        repeat = np.asarray(counts)
        table["run_id"] = np.repeat([o[0] for o in owners], repeat)
        table["key"] = np.repeat([o[1] for o in owners], repeat)
        table["step"] = table["step"].fillna(0).astype("int64")
        return table
