"""Read an MLflow *file store* (itwinai's default ``mllogs/mlflow``) straight from disk.

Layout: ``<root>/<experiment_id>/meta.yaml`` and ``<root>/<experiment_id>/<run_id>/`` with
``meta.yaml``, ``params/<key>``, ``tags/<key>`` and ``metrics/<key>`` (one
``timestamp value [step]`` line per point). Deleted experiments live in ``<root>/.trash``.
Reading the files directly (instead of through MLflow's FileStore, which creates ``.trash``
and a default experiment when they are missing) guarantees nothing is written. Text that is not
UTF-8 is read with replacement characters; a metric line that does not parse is left out with a
warning naming the run.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from itwin_report.data.frames import STR
from itwin_report.data.rundata import is_report_key, metric_keys
from itwin_report.store.tree import PARENT_TAG, RAW_RUN_COLUMNS, listed_names
from itwin_report.store.uri import require_file_store
from itwin_report.util.errors import StoreError
from itwin_report.util.progress import Advance

# RunStatus values as the file store persists them
_STATUS = {1: "RUNNING", 2: "SCHEDULED", 3: "FINISHED", 4: "FAILED", 5: "KILLED"}
_RUN_NAME_TAG = "mlflow.runName"


def _meta(path: Path) -> dict[str, Any]:
    """A parsed ``meta.yaml``, or {} when missing or unreadable."""
    text = _read(path)
    if text is None:
        return {}
    try:
        data = yaml.load(text, Loader=yaml.CSafeLoader)
    except (yaml.YAMLError, AttributeError, ValueError):
        try:
            data = yaml.safe_load(text)
        except (yaml.YAMLError, ValueError):
            return {}
    return data if isinstance(data, dict) else {}


def _read(path: Path, not_utf8: list[str] | None = None) -> str | None:
    """A small text file, None when missing or unreadable.

    Bytes that are not UTF-8 are replaced; the file's path is then added to ``not_utf8``.
    """
    from itwin_report.store.artifacts import SkippedArtifact, read_capped

    try:
        data = read_capped(path)
    except (OSError, SkippedArtifact):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        if not_utf8 is not None:
            not_utf8.append(f"{path.parent.name}/{path.name}")
        return data.decode("utf-8", errors="replace")


class FileStoreReader:
    """Experiments, runs, params and metrics of one MLflow file store directory."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.root = require_file_store(uri)
        self._run_dirs: dict[str, list[Path]] = {}
        self.warnings: list[str] = []
        self.extra_keys: tuple[str, ...] = ()  # keys to read besides the report's own

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

    def artifact_roots(self) -> list[str]:
        """Artifact locations of the live experiments."""
        return [
            str(_meta(d / "meta.yaml").get("artifact_location") or "")
            for _, _, d in self._experiment_dirs()
        ]

    def runs(
        self, experiment_id: Any, param_keys: Sequence[str]
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(live runs in the tree's raw layout, their ``param_keys`` params in long format)."""
        exp_dir = next(d for i, _, d in self._experiment_dirs() if i == experiment_id)
        rows, params = [], []
        self._run_dirs = {}
        for run_dir, meta in self._live_runs(exp_dir):
            run_id = str(meta.get("run_id") or meta.get("run_uuid"))
            self._run_dirs[run_id] = [run_dir]
            odd: list[str] = []
            name = meta.get("run_name") or _read(run_dir / "tags" / _RUN_NAME_TAG, odd) or ""
            status = meta.get("status", 1)
            param_dir = run_dir / "params"
            has_params = param_dir.is_dir() and any(param_dir.iterdir())
            rows.append(
                {
                    "run_id": run_id,
                    "name": str(name),
                    "status": _STATUS.get(status, str(status)),
                    "parent_id": (_read(run_dir / "tags" / PARENT_TAG, odd) or "").strip(),
                    "artifact_uri": str(meta.get("artifact_uri") or ""),
                    "has_params": has_params,
                    "start_time": _ms(meta.get("start_time")),
                    "end_time": _ms(meta.get("end_time")),
                }
            )
            for key in param_keys:
                value = _read(param_dir / key, odd)
                if value is not None:
                    params.append({"run_id": run_id, "key": key, "value": value})
            if odd:
                self.warnings.append(
                    f"run {str(name)!r} ({run_id[:8]}): {', '.join(odd)} not UTF-8 text; "
                    "read with replacement characters"
                )
        runs = pd.DataFrame(rows, columns=list(RAW_RUN_COLUMNS))
        return runs, pd.DataFrame(params, columns=["run_id", "key", "value"])

    def metrics(self, experiment_id: Any, run_ids: Sequence[str], advance: Advance) -> pd.DataFrame:
        """Points of the report's keys, the extra keys and GPU system metrics of ``run_ids``,
        in one pass."""
        del experiment_id
        wanted = metric_keys(self.extra_keys)
        lines: list[str] = []
        owners: list[tuple[str, str]] = []
        counts: list[int] = []
        for run_id in run_ids:
            for run_dir in self._run_dirs.get(run_id, []):
                for key in [*wanted, *_system_keys(run_dir / "metrics")]:
                    text = _read(run_dir / "metrics" / key, [])
                    if not text:
                        continue
                    points = [line for line in text.splitlines() if line.strip()]
                    lines.extend(points)
                    owners.append((run_id, key))
                    counts.append(len(points))
            advance(len(wanted))
        if not lines:
            return pd.DataFrame(columns=["run_id", "key", "step", "value", "timestamp"])
        table = _parse_points(lines)
        repeat = np.asarray(counts)
        for at, column in enumerate(("run_id", "key")):  # as the schema's categoricals
            names = pd.Index(sorted({o[at] for o in owners}), dtype=STR)
            codes = names.get_indexer(pd.Index([o[at] for o in owners]))
            table[column] = pd.Categorical.from_codes(np.repeat(codes, repeat), categories=names)
        bad = table["timestamp"].isna() | table["step"].isna()
        if bad.any():
            runs = [str(r)[:8] for r in table.loc[bad, "run_id"]]
            self.warnings.append(
                f"{int(bad.sum())} metric lines of the file store that do not read as "
                f"'timestamp value step' were left out (runs {listed_names(runs)})"
            )
            table = table[~bad]
        return table.astype({"timestamp": "int64", "step": "int64"})

    def logged_keys(self, experiment_id: Any, run_ids: Sequence[str]) -> list[str]:
        """Every metric key ``run_ids`` logged (files under their ``metrics`` folders), sorted."""
        del experiment_id
        found: set[str] = set()
        for run_id in run_ids:
            for run_dir in self._run_dirs.get(run_id, []):
                folder = run_dir / "metrics"
                try:
                    files = [p for p in folder.rglob("*") if p.is_file()]
                    found.update(p.relative_to(folder).as_posix() for p in files)
                except OSError:
                    continue
        return sorted(found)


def _system_keys(metrics_dir: Path) -> list[str]:
    """MLflow's GPU system metric keys a run logged (they live in a subdirectory, a node id's
    under a folder of its own)."""
    try:
        files = sorted((metrics_dir / "system").rglob("gpu_*"))
    except OSError:
        return []
    keys = (p.relative_to(metrics_dir).as_posix() for p in files)
    return [k for k in keys if is_report_key(k)]


def _parse_points(lines: list[str]) -> pd.DataFrame:
    """``timestamp value [step]`` lines as columns; a line that does not parse gets NaNs."""
    names = ["timestamp", "value", "step", "dataset", "digest"]
    try:
        table = pd.read_csv(
            io.StringIO("\n".join(lines)),
            sep=" ",
            header=None,
            names=names,
            dtype={"timestamp": "int64", "value": "float64", "step": "float64"},
        )
        table["step"] = table["step"].fillna(0)
        return table[["timestamp", "value", "step"]]
    except (ValueError, pd.errors.ParserError):
        pass  # a malformed line somewhere: parse each line on its own
    rows: list[tuple[str | None, str | None, str | None]] = []
    for line in lines:
        fields = line.split(" ")
        if not 2 <= len(fields) <= len(names):
            rows.append((None, None, None))
            continue
        rows.append((fields[0], fields[1], fields[2] if len(fields) > 2 else "0"))
    table = pd.DataFrame(rows, columns=["timestamp", "value", "step"])
    for column in table.columns:
        table[column] = pd.to_numeric(table[column], errors="coerce")
    whole = table["timestamp"].notna() & table["step"].notna()
    whole &= (table["timestamp"] % 1 == 0) & (table["step"] % 1 == 0)
    text_value = table["value"].isna() & pd.Series([r[1] for r in rows]).ne("nan").to_numpy()
    table.loc[~whole | text_value, ["timestamp", "step"]] = np.nan
    return table


def _ms(value: Any) -> float:
    """A run's start or end time from ``meta.yaml`` (ms since the epoch), NaN when absent."""
    try:
        return float(value) if value is not None else float("nan")
    except (TypeError, ValueError):
        return float("nan")
