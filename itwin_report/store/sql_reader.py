"""Read MLflow's SQL tables directly: a fixed handful of read-only queries per experiment.

SQLite files are opened with ``mode=ro``; other databases go through sqlalchemy and only ever
receive SELECTs. The schema is internal to MLflow, so :func:`open_sql_reader` first checks
``alembic_version`` and every column used, and returns None (the caller falls back to the
public API) when a column is missing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any
from urllib.request import pathname2url

import pandas as pd

from itwin_report.errors import StoreError
from itwin_report.progress import Advance
from itwin_report.schema import METRIC_KEYS
from itwin_report.store.tree import PARENT_TAG, WORKER_PARAMS
from itwin_report.store.uri import SQLITE, mask_uri, require_sqlite_file, store_kind

Query = Callable[[str, dict[str, Any]], pd.DataFrame]

NEEDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "experiments": ("experiment_id", "name", "lifecycle_stage"),
    "runs": ("run_uuid", "name", "status", "lifecycle_stage", "artifact_uri", "experiment_id"),
    "tags": ("key", "value", "run_uuid"),
    "params": ("key", "value", "run_uuid"),
    "metrics": ("key", "value", "timestamp", "step", "run_uuid", "is_nan"),
}
WANTED_TABLE = "itwin_report_wanted"


def _in_list(prefix: str, values: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """``:p0, :p1, ...`` placeholders and their bindings."""
    names = [f"{prefix}{i}" for i in range(len(values))]
    return ", ".join(f":{n}" for n in names), dict(zip(names, values, strict=True))


class SqlReader:
    """Experiments, runs, params and metrics of one MLflow SQL database."""

    def __init__(self, query: Query, uri: str, sqlite: sqlite3.Connection | None = None) -> None:
        self._query = query
        self._sqlite = sqlite
        self.uri = uri

    def close(self) -> None:
        """Release the connection."""
        if self._sqlite is not None:
            self._sqlite.close()

    def experiments(self) -> list[tuple[Any, str, int]]:
        """``(id, name, live run count)`` of the live experiments."""
        frame = self._query(
            "SELECT e.experiment_id AS id, e.name AS name, "
            "(SELECT COUNT(*) FROM runs r WHERE r.experiment_id = e.experiment_id "
            "AND r.lifecycle_stage = 'active') AS n "
            "FROM experiments e WHERE e.lifecycle_stage = 'active' ORDER BY e.experiment_id",
            {},
        )
        return [(i, str(n), int(c)) for i, n, c in frame.itertuples(index=False)]

    def runs(self, experiment_id: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(live runs in the tree's raw layout, their worker params in long format)."""
        live = "r.experiment_id = :exp AND r.lifecycle_stage = 'active'"
        runs = self._query(
            "SELECT r.run_uuid AS run_id, r.name AS name, r.status AS status, "
            "r.artifact_uri AS artifact_uri, t.value AS parent_id FROM runs r "
            f"LEFT JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = :parent WHERE {live}",
            {"exp": experiment_id, "parent": PARENT_TAG},
        )
        keys, bind = _in_list("k", WORKER_PARAMS)
        params = self._query(
            "SELECT p.run_uuid AS run_id, p.key AS key, p.value AS value FROM params p "
            f"JOIN runs r ON r.run_uuid = p.run_uuid WHERE {live} AND p.key IN ({keys})",
            {"exp": experiment_id, **bind},
        )
        with_params = self._query(
            "SELECT DISTINCT p.run_uuid AS run_id FROM params p "
            f"JOIN runs r ON r.run_uuid = p.run_uuid WHERE {live}",
            {"exp": experiment_id},
        )
        runs["parent_id"] = runs["parent_id"].fillna("")
        runs["name"] = runs["name"].fillna("")
        runs["artifact_uri"] = runs["artifact_uri"].fillna("")
        runs["has_params"] = runs["run_id"].isin(set(with_params["run_id"]))
        return runs, params

    def metrics(self, experiment_id: Any, run_ids: Sequence[str], advance: Advance) -> pd.DataFrame:
        """Points of :data:`METRIC_KEYS` logged by ``run_ids``, NaN restored."""
        keys, bind = _in_list("k", METRIC_KEYS)
        columns = "m.run_uuid AS run_id, m.key AS key, m.step AS step, m.value AS value, "
        columns += "m.timestamp AS timestamp, m.is_nan AS is_nan"
        if self._sqlite is not None:
            self._fill_wanted(run_ids)
            frame = self._query(
                f"SELECT {columns} FROM {WANTED_TABLE} w "
                f"JOIN metrics m ON m.run_uuid = w.run_uuid WHERE m.key IN ({keys})",
                bind,
            )
        else:
            frame = self._query(
                f"SELECT {columns} FROM metrics m JOIN runs r ON r.run_uuid = m.run_uuid "
                f"WHERE r.experiment_id = :exp AND m.key IN ({keys})",
                {"exp": experiment_id, **bind},
            )
            frame = frame[frame["run_id"].isin(set(run_ids))]
        frame["value"] = frame["value"].astype("float64").where(frame["is_nan"].astype(int) == 0)
        advance(len(run_ids) * len(METRIC_KEYS))
        return frame.drop(columns="is_nan")

    def _fill_wanted(self, run_ids: Sequence[str]) -> None:
        """A TEMP table of the run ids (a read-only connection may still create those)."""
        assert self._sqlite is not None
        self._sqlite.execute(f"DROP TABLE IF EXISTS temp.{WANTED_TABLE}")
        self._sqlite.execute(f"CREATE TEMP TABLE {WANTED_TABLE} (run_uuid TEXT PRIMARY KEY)")
        self._sqlite.executemany(
            f"INSERT OR IGNORE INTO temp.{WANTED_TABLE} VALUES (?)", [(r,) for r in run_ids]
        )


def _sqlite_query(conn: sqlite3.Connection) -> Query:
    def query(sql: str, params: dict[str, Any]) -> pd.DataFrame:
        return pd.read_sql(sql, conn, params=params)

    return query


def _sqlalchemy_query(uri: str) -> Query:
    import sqlalchemy

    engine = sqlalchemy.create_engine(uri)

    def query(sql: str, params: dict[str, Any]) -> pd.DataFrame:
        with engine.connect() as conn:
            return pd.read_sql(sqlalchemy.text(sql), conn, params=params)

    return query


def _schema_ok(query: Query, uri: str) -> bool:
    """True when every needed column exists; StoreError when this is no MLflow database."""
    try:
        query("SELECT version_num FROM alembic_version", {})
    except Exception as exc:
        raise StoreError(f"{mask_uri(uri)} is not an MLflow tracking database ({exc})") from exc
    for table, columns in NEEDED_COLUMNS.items():
        try:
            query(f"SELECT {', '.join(columns)} FROM {table} WHERE 1 = 0", {})
        except Exception:
            return False
    return True


def open_sql_reader(uri: str) -> SqlReader | None:
    """A reader for a sqlite or other SQL store, or None when its schema is not the expected one."""
    if store_kind(uri) == SQLITE:
        path = require_sqlite_file(uri)
        url = f"file:{pathname2url(str(path.resolve()))}?mode=ro"
        try:
            conn = sqlite3.connect(url, uri=True, check_same_thread=False)
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {path} as a database: {exc}") from exc
        reader = SqlReader(_sqlite_query(conn), uri, sqlite=conn)
    else:
        try:
            reader = SqlReader(_sqlalchemy_query(uri), uri)
            reader._query("SELECT 1 AS one", {})
        except Exception as exc:
            raise StoreError(f"cannot connect to {mask_uri(uri)}: {exc}") from exc
    try:
        ok = _schema_ok(reader._query, uri)
    except StoreError:
        reader.close()
        raise
    if not ok:
        reader.close()
        return None
    return reader
