"""Writing emulated runs: MLflow's client for servers and file stores, bulk SQL for databases.

A new store is created by MLflow itself (so its schema is MLflow's own); the runs are then
inserted in one transaction straight into MLflow's tables, which MLflow's client reads back like
any other run. Servers and file stores (and experiments whose artifacts are not local) go
through ``MlflowClient`` with batched calls.
"""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from itwin_report.store import mlflow_api
from itwin_report.store.uri import SQL, SQLITE, local_artifact_dir, sqlite_path, store_kind
from itwin_report.util.errors import StoreError
from itwin_report.util.masking import mask_text, mask_uri

PARENT_TAG = mlflow_api.PARENT_TAG
RUN_NAME_TAG = "mlflow.runName"
MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limits
MAX_PARAMS_PER_BATCH = 100

Point = tuple[str, float, int, int]  # key, value, timestamp_ms, step
MlflowException = mlflow_api.mlflow_exception()


@dataclass
class RunRecord:
    """One run to write: name, params, metric points and text artifacts (path -> text)."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    points: list[Point] = field(default_factory=list)
    artifacts: dict[str, str] = field(default_factory=dict)


@dataclass
class JobRecord:
    """A top-level run and its worker runs, all with the same start and end."""

    name: str
    start_ms: int
    end_ms: int
    workers: list[RunRecord]


def safe_dir_name(name: str) -> str:
    """A directory name from an experiment name: no separators, no leading dots, never empty."""
    kept = "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".")
    return kept[:100] or "experiment"


def artifact_location(uri: str, experiment_name: str, root: str | None = None) -> str | None:
    """Where a new experiment keeps its artifacts: ``root`` or, for SQLite, beside the database.

    The experiment name never leaves the chosen root (``../x`` or ``/abs`` become plain names).
    None lets MLflow decide (servers, file stores).
    """
    if root is not None:
        if "://" in root and not root.startswith("file:"):
            return f"{root.rstrip('/')}/{safe_dir_name(experiment_name)}"
        base = local_artifact_dir(root) or Path(root)
        return (base.expanduser().resolve() / safe_dir_name(experiment_name)).as_uri()
    if store_kind(uri) == SQLITE:
        base = sqlite_path(uri).expanduser().resolve().parent / "artifacts"
        return (base / safe_dir_name(experiment_name)).as_uri()
    return None


def _error(uri: str, what: str, exc: BaseException) -> StoreError:
    text = str(exc).strip().splitlines()
    message = text[0] if text else type(exc).__name__
    return StoreError(mask_text(f"cannot {what} in {mask_uri(uri)}: {message}"))


class ClientWriter:
    """Writes through ``MlflowClient`` (HTTP servers, file stores, remote artifact stores)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._client = mlflow_api.client(uri)
        self._open: list[str] = []

    def experiment(self, name: str, location: str | None) -> tuple[str, str]:
        """(id, artifact location) of experiment ``name``, created when missing."""
        try:
            exp = self._client.get_experiment_by_name(name)
            if exp is None:
                self._client.create_experiment(name, artifact_location=location)
                exp = self._client.get_experiment_by_name(name)
            if exp is None:
                raise StoreError(f"experiment {name!r} vanished after it was created")
            return str(exp.experiment_id), str(exp.artifact_location or "")
        except MlflowException as exc:
            raise _error(self.uri, f"open experiment {name!r}", exc) from exc

    def experiment_id(self, name: str, location: str | None = None) -> str:
        """Id of experiment ``name``, created (with ``location``) when missing."""
        return self.experiment(name, location)[0]

    def count_runs(self, experiment_id: str) -> int:
        """Live runs in the experiment (up to one page)."""
        return len(self._client.search_runs([experiment_id], max_results=1000))

    def create_run(
        self, experiment_id: str, name: str, start_ms: int, parent_run_id: str | None = None
    ) -> str:
        """A RUNNING run; its id."""
        tags = {PARENT_TAG: parent_run_id} if parent_run_id else None
        run = self._client.create_run(experiment_id, start_time=start_ms, tags=tags, run_name=name)
        return str(run.info.run_id)

    def log_batch(
        self, run_id: str, points: Iterable[Point] = (), params: dict[str, Any] | None = None
    ) -> None:
        """Points and params in MLflow-sized batches (one call for most runs)."""
        from mlflow.entities import Metric, Param

        metrics = [Metric(k, float(v), int(ts), int(step)) for k, v, ts, step in points]
        plist = [Param(k, str(v)) for k, v in (params or {}).items()]
        calls = max(
            -(-len(plist) // MAX_PARAMS_PER_BATCH), -(-len(metrics) // MAX_METRICS_PER_BATCH), 1
        )
        for i in range(calls):
            self._client.log_batch(
                run_id,
                metrics=metrics[i * MAX_METRICS_PER_BATCH : (i + 1) * MAX_METRICS_PER_BATCH],
                params=plist[i * MAX_PARAMS_PER_BATCH : (i + 1) * MAX_PARAMS_PER_BATCH],
            )

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None:
        """Upload ``text`` as ``artifact_file`` through a temporary file.

        ``log_artifact`` works with every client version against ``mlflow-artifacts:`` roots,
        where ``log_text`` needs MLflow 3.7 or newer.
        """
        folder, _, filename = artifact_file.rpartition("/")
        with tempfile.TemporaryDirectory(prefix="itwin-report-") as tmp:
            local = Path(tmp) / filename
            local.write_text(text, encoding="utf-8")
            with writing_environment(self.uri):  # clients before 3 resolve roots against it
                self._client.log_artifact(run_id, str(local), artifact_path=folder or None)

    def end_run(self, run_id: str, end_ms: int, status: str = "FINISHED") -> None:
        """Mark the run ended with ``status``."""
        self._client.set_terminated(run_id, status=status, end_time=end_ms)

    def write_job(self, experiment_id: str, job: JobRecord, on_worker: Any = None) -> str:
        """Write one job; the runs created and not yet ended are tracked for :meth:`abort`."""
        parent = self.create_run(experiment_id, job.name, job.start_ms)
        self._open.append(parent)
        ids = []
        for worker in job.workers:
            ids.append(self.create_run(experiment_id, worker.name, job.start_ms, parent))
            self._open.append(ids[-1])
        for run_id, worker in zip(ids, job.workers, strict=True):
            self.log_batch(run_id, worker.points, worker.params)
            for path, text in worker.artifacts.items():
                self.log_text(run_id, text, path)
            if on_worker:
                on_worker()
            self.end_run(run_id, job.end_ms)
            self._open.remove(run_id)
        self.end_run(parent, job.end_ms)
        self._open.remove(parent)
        return parent

    def commit(self) -> None:
        """Nothing to do: every run is complete once written."""

    def abort(self, end_ms: int, status: str) -> None:
        """Mark the runs left open ``status`` (best effort, children first)."""
        for run_id in reversed(self._open):
            try:
                self.end_run(run_id, end_ms, status)
            except Exception:  # the original error matters more than this one
                continue
        self._open.clear()


RunWriter = ClientWriter  # run by run, with caller-chosen timestamps (test stores, benchmarks)


def upgrade_store(uri: str) -> None:
    """Let MLflow upgrade an older MLflow database to its current schema (``--migrate``)."""
    import sqlalchemy
    from mlflow.store.db.utils import _upgrade_db

    engine = sqlalchemy.create_engine(uri)
    try:
        _upgrade_db(engine)
    except Exception as exc:
        raise _error(uri, "upgrade the store", exc) from None
    finally:
        engine.dispose()


def mlflow_schema_head() -> str:
    """The newest database schema revision this MLflow installation knows."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config

    return str(ScriptDirectory.from_config(_get_alembic_config("sqlite://")).get_current_head())


def _latest(points: list[Point]) -> dict[str, Point]:
    """MLflow's latest value per key: the largest (step, timestamp, value)."""
    out: dict[str, Point] = {}
    for p in points:
        best = out.get(p[0])
        if best is None or (p[3], p[2], p[1]) > (best[3], best[2], best[1]):
            out[p[0]] = p
    return out


def _value(v: float) -> tuple[float, int]:
    """(value, is_nan) as MLflow stores a metric value."""
    return (0.0, 1) if math.isnan(v) else (float(v), 0)


def _unsynced(dbapi_connection: Any, _record: Any) -> None:
    if isinstance(dbapi_connection, sqlite3.Connection):
        dbapi_connection.execute("PRAGMA synchronous=OFF")
        dbapi_connection.execute("PRAGMA journal_mode=MEMORY")


def _create_store(uri: str) -> ClientWriter:
    """Let MLflow create its tables in a new SQLite file, without a disk sync per migration.

    The file is new, so an interrupted creation loses nothing; the runs' transaction syncs
    the whole file to disk when it commits.
    """
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    event.listen(Engine, "connect", _unsynced)
    try:
        writer = ClientWriter(uri)
        writer._client.search_experiments(max_results=1)
        return writer
    finally:
        event.remove(Engine, "connect", _unsynced)


def job_rows(
    experiment_id: str, location: str, job: JobRecord
) -> tuple[str, list[str], dict[str, list[dict[str, Any]]]]:
    """(top-level run id, worker run ids, rows per MLflow table) of one job."""
    parent = uuid.uuid4().hex
    ids = [uuid.uuid4().hex for _ in job.workers]
    rows: dict[str, list[dict[str, Any]]] = {
        t: [] for t in ("runs", "tags", "params", "metrics", "latest_metrics")
    }
    names = [(parent, job.name, None)] + [
        (run_id, w.name, parent) for run_id, w in zip(ids, job.workers, strict=True)
    ]
    for run_id, name, parent_id in names:
        rows["runs"].append(
            {"run_uuid": run_id, "name": name, "source_type": "UNKNOWN", "source_name": "",
             "entry_point_name": "", "user_id": "unknown", "status": "FINISHED",
             "start_time": job.start_ms, "end_time": job.end_ms, "deleted_time": None,
             "source_version": "", "lifecycle_stage": "active",
             "artifact_uri": f"{location.rstrip('/')}/{run_id}/artifacts",
             "experiment_id": int(experiment_id)}
        )  # fmt: skip
        rows["tags"].append({"key": RUN_NAME_TAG, "value": name, "run_uuid": run_id})
        if parent_id:
            rows["tags"].append({"key": PARENT_TAG, "value": parent_id, "run_uuid": run_id})
    for run_id, worker in zip(ids, job.workers, strict=True):
        rows["params"] += [
            {"key": k, "value": str(v), "run_uuid": run_id} for k, v in worker.params.items()
        ]
        for table, points in (("metrics", worker.points), ("latest_metrics",
                              list(_latest(worker.points).values()))):  # fmt: skip
            rows[table] += [
                {"key": k, "value": _value(v)[0], "is_nan": bool(_value(v)[1]), "timestamp": ts,
                 "step": step, "run_uuid": run_id}
                for k, v, ts, step in points
            ]  # fmt: skip
    return parent, ids, rows


class BulkWriter:
    """Inserts runs straight into a current-schema MLflow database, in one transaction.

    MLflow itself creates the store (when new) and the experiment; the rows of every job are
    then inserted into the open transaction, committed once at the end.
    """

    def __init__(self, uri: str, client: ClientWriter) -> None:
        self.uri = uri
        self._client = client
        self._written: list[Path] = []  # artifact folders to remove if the transaction fails
        self._locations: dict[str, str] = {}

    def experiment(self, name: str, location: str | None) -> tuple[str, str]:
        """(id, artifact location) of experiment ``name``, created by MLflow when missing."""
        exp_id, actual = self._client.experiment(name, location)
        self._locations[exp_id] = actual
        return exp_id, actual

    def count_runs(self, experiment_id: str) -> int:
        """Live runs in the experiment (up to one page)."""
        return self._client.count_runs(experiment_id)

    def write_job(self, experiment_id: str, job: JobRecord, on_worker: Any = None) -> str:
        """Insert one job's rows into the open transaction and write its artifact files."""
        location = self._locations[experiment_id]
        base = local_artifact_dir(location)
        if base is None and any(w.artifacts for w in job.workers):
            raise StoreError(
                f"artifact location {mask_uri(location)} is not a local folder; "
                "emulate into a new experiment with --artifact-root DIR"
            )
        parent, ids, rows = job_rows(experiment_id, location, job)
        self._insert(rows)
        for run_id, worker in zip(ids, job.workers, strict=True):
            if base is not None:
                self._write_artifacts(base / run_id, worker.artifacts)
            if on_worker:
                on_worker()
        return parent

    def _write_artifacts(self, run_dir: Path, artifacts: dict[str, str]) -> None:
        if not artifacts:
            return
        self._written.append(run_dir)
        for rel, text in artifacts.items():
            target = run_dir / "artifacts" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")

    def _insert(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        raise NotImplementedError

    def _end(self, commit: bool) -> None:
        raise NotImplementedError

    def commit(self) -> None:
        """Commit every row written so far."""
        self._end(commit=True)
        self._written.clear()

    def abort(self, end_ms: int, status: str) -> None:
        """Roll back: no run of this emulation stays in the store, nor its artifact files."""
        del end_ms, status  # nothing was committed: no run to mark
        try:
            self._end(commit=False)
        finally:
            for folder in self._written:
                shutil.rmtree(folder, ignore_errors=True)
            self._written.clear()


class SqliteBulkWriter(BulkWriter):
    """Bulk rows into an SQLite store through the standard library's sqlite3."""

    def __init__(self, uri: str) -> None:
        path = sqlite_path(uri)
        new = not path.exists() or path.stat().st_size == 0
        super().__init__(uri, _create_store(uri) if new else ClientWriter(uri))
        self.path = path
        self._db: sqlite3.Connection | None = None

    def _insert(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        if self._db is None:
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
            self._db.execute("BEGIN IMMEDIATE")
        for table, items in rows.items():
            if items:
                columns = list(items[0])
                sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
                sql += f"({', '.join(':' + c for c in columns)})"
                self._db.executemany(sql, items)

    def _end(self, commit: bool) -> None:
        if self._db is None:
            return
        try:
            self._db.execute("COMMIT" if commit else "ROLLBACK")
        finally:
            self._db.close()
            self._db = None


class SqlAlchemyBulkWriter(BulkWriter):
    """Bulk rows into a database server's store (PostgreSQL, MySQL) through SQLAlchemy."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri, ClientWriter(uri))  # MLflow creates or verifies the schema
        self._conn: Any = None
        self._trans: Any = None

    def _insert(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        import sqlalchemy

        if self._conn is None:
            self._engine = sqlalchemy.create_engine(self.uri)
            self._conn = self._engine.connect()
            self._trans = self._conn.begin()
        meta = _tables()
        for table, items in rows.items():
            if items:
                self._conn.execute(sqlalchemy.insert(meta[table]), items)

    def _end(self, commit: bool) -> None:
        if self._conn is None:
            return
        try:
            (self._trans.commit if commit else self._trans.rollback)()
        finally:
            self._conn.close()
            self._engine.dispose()
            self._conn = None


def _tables() -> dict[str, Any]:
    """MLflow's own table definitions, by table name."""
    from mlflow.store.tracking.dbmodels import models

    classes = (models.SqlRun, models.SqlTag, models.SqlParam, models.SqlMetric,
               models.SqlLatestMetric)  # fmt: skip
    return {c.__tablename__: c.__table__ for c in classes}


def open_writer(uri: str) -> ClientWriter | BulkWriter:
    """The writer for ``uri``: bulk SQL for databases, MLflow's client for servers and files."""
    try:
        kind = store_kind(uri)
        if kind == SQLITE:
            return SqliteBulkWriter(uri)
        if kind == SQL:
            return SqlAlchemyBulkWriter(uri)
        return ClientWriter(uri)
    except MlflowException as exc:
        raise _error(uri, "open the store", exc) from exc


# a server that stops answering fails the emulation within 30 s; MLflow's own variables win
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "25"}


@contextmanager
def writing_environment(uri: str) -> Iterator[None]:
    """MLflow's HTTP retries and timeout bounded (unless set by the user) while writing.

    ``MLFLOW_TRACKING_URI`` names the target too: clients before MLflow 3 resolve
    ``mlflow-artifacts:`` roots against it, not against the client's own URI.
    """
    settings = {**HTTP_LIMITS, "MLFLOW_TRACKING_URI": uri}
    saved = {name: os.environ.get(name) for name in settings}
    for name, value in settings.items():
        if name == "MLFLOW_TRACKING_URI" or saved[name] is None:
            os.environ[name] = value
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
