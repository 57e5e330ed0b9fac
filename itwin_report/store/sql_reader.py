"""Read MLflow's SQL tables directly: a fixed handful of read-only queries per experiment.

Nothing is ever written, migrated or created. SQLite files are opened read-only (``mode=ro``,
or ``immutable=1`` where even a read-only connection would leave ``-wal``/``-shm`` files or
cannot create them); other databases go through sqlalchemy in a read-only transaction and only
ever receive SELECTs. The schema is internal to MLflow, so :func:`open_sql_reader` first checks
``alembic_version`` and every column used: a database of an older schema is read as it is when
only optional columns are missing, and refused (naming its schema revision) otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import sqlite3
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.request import pathname2url

import numpy as np
import pandas as pd

from itwin_report.errors import StoreError
from itwin_report.masking import mask_text
from itwin_report.progress import Advance
from itwin_report.schema import METRIC_KEYS
from itwin_report.store.tree import PARENT_TAG
from itwin_report.store.uri import SQLITE, mask_uri, require_sqlite_file, store_kind

Query = Callable[[str, dict[str, Any]], pd.DataFrame]

NEEDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "experiments": ("experiment_id", "name", "lifecycle_stage"),
    "runs": ("run_uuid", "name", "status", "lifecycle_stage", "artifact_uri", "experiment_id"),
    "tags": ("key", "value", "run_uuid"),
    "params": ("key", "value", "run_uuid"),
    "metrics": ("key", "value", "timestamp", "step", "run_uuid"),
}
OPTIONAL_COLUMNS: dict[str, tuple[str, ...]] = {"metrics": ("is_nan",)}
WANTED_TABLE = "itwin_report_wanted"
SYSTEM_PREFIX = "system/gpu_"  # MLflow's own system metrics, per GPU
FETCH_ROWS = 200_000  # rows per fetch when reading columns into arrays
CONNECT_TIMEOUT_S = 10
POSTGRES_EXTRA = "pip install 'itwin-report[postgres]'"
METRIC_FRAME = ["run_id", "key", "step", "value", "timestamp"]


def _in_list(prefix: str, values: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """``:p0, :p1, ...`` placeholders and their bindings."""
    names = [f"{prefix}{i}" for i in range(len(values))]
    return ", ".join(f":{n}" for n in names), dict(zip(names, values, strict=True))


def _first_line(exc: BaseException) -> str:
    """The first line of an error, secrets masked."""
    text = str(exc).strip()
    return mask_text(text.splitlines()[0] if text else type(exc).__name__)


class SqlReader:
    """Experiments, runs, params and metrics of one MLflow SQL database."""

    def __init__(
        self,
        query: Query,
        uri: str,
        sqlite: sqlite3.Connection | None = None,
        close: Callable[[], None] | None = None,
    ) -> None:
        self._query = query
        self._sqlite = sqlite
        self._close = close
        self.uri = uri
        self.has_is_nan = True
        self.warnings: list[str] = []

    def close(self) -> None:
        """Release the connection."""
        if self._sqlite is not None:
            self._sqlite.close()
        if self._close is not None:
            self._close()

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

    def artifact_roots(self) -> list[str]:
        """Artifact locations of the experiments."""
        frame = self._query("SELECT artifact_location AS root FROM experiments", {})
        return [str(r) for r in frame["root"].dropna()]

    def runs(
        self, experiment_id: Any, param_keys: Sequence[str]
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(live runs in the tree's raw layout, their ``param_keys`` params in long format)."""
        live = "r.experiment_id = :exp AND r.lifecycle_stage = 'active'"
        runs = self._query(
            "SELECT r.run_uuid AS run_id, r.name AS name, r.status AS status, "
            "r.artifact_uri AS artifact_uri, t.value AS parent_id FROM runs r "
            f"LEFT JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = :parent WHERE {live}",
            {"exp": experiment_id, "parent": PARENT_TAG},
        )
        keys, bind = _in_list("k", param_keys)
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
        for column in ("parent_id", "name", "artifact_uri", "status"):
            runs[column] = runs[column].fillna("").astype(str)
        runs["has_params"] = runs["run_id"].isin(set(with_params["run_id"]))
        return runs, params

    def metrics(self, experiment_id: Any, run_ids: Sequence[str], advance: Advance) -> pd.DataFrame:
        """Points of :data:`METRIC_KEYS` (and MLflow's GPU system metrics) of ``run_ids``.

        NaN is restored from ``is_nan`` when the column exists; a point whose value is not a
        number (text in the value column) is left out with a warning naming its run.
        """
        if self._sqlite is not None:
            frame = self._sqlite_metrics(run_ids)
        else:
            frame = self._generic_metrics(experiment_id, run_ids)
        advance(len(run_ids) * len(METRIC_KEYS))
        return frame

    def _sqlite_metrics(self, run_ids: Sequence[str]) -> pd.DataFrame:
        """Numeric columns only (run and key as codes), fetched into arrays in chunks."""
        assert self._sqlite is not None
        run_ids = sorted(run_ids)
        self._fill_wanted(run_ids)
        numeric = "typeof(m.value) IN ('real', 'integer')"
        nan = "WHEN m.is_nan THEN NULL " if self.has_is_nan else ""
        value = f"CASE {nan}WHEN {numeric} THEN m.value END"
        steps = "typeof(m.step) = 'integer' AND typeof(m.timestamp) = 'integer'"
        keys = "".join(f"WHEN '{k}' THEN {i} " for i, k in enumerate(METRIC_KEYS))
        sql = (
            f"SELECT w.idx, CASE m.key {keys}END, {value}, "
            f"CASE WHEN {steps} THEN m.step END, CASE WHEN {steps} THEN m.timestamp END, "
            f"NOT ({numeric} AND {steps}) FROM {WANTED_TABLE} w "
            "JOIN metrics m ON m.run_uuid = w.run_uuid WHERE m.key IN "
            f"({', '.join('?' * len(METRIC_KEYS))})"
        )
        table = self._fetch_array(sql, METRIC_KEYS)
        codes = table[:, 0].astype(np.int64)
        frame = pd.DataFrame(
            {
                "run_id": pd.Categorical.from_codes(codes, categories=pd.Index(run_ids)),
                "key": pd.Categorical.from_codes(
                    table[:, 1].astype(np.int64), categories=pd.Index(METRIC_KEYS)
                ),
                "step": table[:, 3],
                "value": table[:, 2],
                "timestamp": table[:, 4],
            }
        )
        frame = self._drop_bad(frame, table[:, 5] != 0)
        system = pd.read_sql(
            f"SELECT m.run_uuid AS run_id, m.key AS key, m.step AS step, {value} AS value, "
            f"m.timestamp AS timestamp, NOT {numeric} AS bad FROM {WANTED_TABLE} w "
            "JOIN metrics m ON m.run_uuid = w.run_uuid WHERE m.key LIKE ?",
            self._sqlite,
            params=[f"{SYSTEM_PREFIX}%"],
        )
        if system.empty:
            return frame
        system = self._drop_bad(system.drop(columns="bad"), system["bad"] != 0)
        return pd.concat(
            [frame.astype({"run_id": object, "key": object}), system], ignore_index=True
        )

    def _fetch_array(self, sql: str, params: Sequence[Any]) -> np.ndarray:
        """All rows of a numeric query as one float64 array (NULL -> NaN), fetched in chunks."""
        assert self._sqlite is not None
        cursor = self._sqlite.execute(sql, list(params))
        width = len(cursor.description)
        parts = [np.empty((0, width))]
        while rows := cursor.fetchmany(FETCH_ROWS):
            parts.append(np.array(rows, dtype=np.float64))
        return np.concatenate(parts)

    def _generic_metrics(self, experiment_id: Any, run_ids: Sequence[str]) -> pd.DataFrame:
        keys, bind = _in_list("k", METRIC_KEYS)
        nan = ", m.is_nan AS is_nan" if self.has_is_nan else ""
        frame = self._query(
            "SELECT m.run_uuid AS run_id, m.key AS key, m.step AS step, m.value AS value, "
            f"m.timestamp AS timestamp{nan} FROM metrics m "
            "JOIN runs r ON r.run_uuid = m.run_uuid "
            f"WHERE r.experiment_id = :exp AND (m.key IN ({keys}) OR m.key LIKE :system)",
            {"exp": experiment_id, "system": f"{SYSTEM_PREFIX}%", **bind},
        )
        frame = frame[frame["run_id"].isin(set(run_ids))]
        values = pd.to_numeric(frame["value"], errors="coerce")
        bad = values.isna() & frame["value"].notna()
        if self.has_is_nan:
            values = values.where(frame["is_nan"].fillna(0).astype(int) == 0)
            frame = frame.drop(columns="is_nan")
        frame = frame.assign(value=values.astype("float64"))
        return self._drop_bad(frame, bad.to_numpy())

    def _drop_bad(self, frame: pd.DataFrame, bad: Any) -> pd.DataFrame:
        """``frame`` without the rows flagged in ``bad``, with one warning naming their runs."""
        bad = np.asarray(bad, dtype=bool)
        if bad.any():
            from itwin_report.store.tree import listed_names

            runs = [str(r)[:8] for r in frame.loc[bad, "run_id"]]
            self.warnings.append(
                f"{int(bad.sum())} metric points whose value, step or timestamp is not a number "
                f"were left out (runs {listed_names(runs)})"
            )
            frame = frame[~bad]
        return frame.astype({"step": "int64", "timestamp": "int64"}).reset_index(drop=True)

    def _fill_wanted(self, run_ids: Sequence[str]) -> None:
        """A TEMP table of the run ids and their positions (kept in memory, never on disk)."""
        assert self._sqlite is not None
        self._sqlite.execute("PRAGMA temp_store = MEMORY")
        self._sqlite.execute(f"DROP TABLE IF EXISTS temp.{WANTED_TABLE}")
        self._sqlite.execute(
            f"CREATE TEMP TABLE {WANTED_TABLE} (run_uuid TEXT PRIMARY KEY, idx INTEGER)"
        )
        self._sqlite.executemany(
            f"INSERT OR IGNORE INTO temp.{WANTED_TABLE} VALUES (?, ?)",
            [(r, i) for i, r in enumerate(run_ids)],
        )


# ---------------------------------------------------------------- opening


def _sqlite_query(conn: sqlite3.Connection) -> Query:
    def query(sql: str, params: dict[str, Any]) -> pd.DataFrame:
        return pd.read_sql(sql, conn, params=params)

    return query


def _writable(path: Path) -> bool:
    """False on read-only media, or where no one may write (permission bits)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return os.access(path, os.W_OK) and bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _is_wal(path: Path) -> bool:
    """True when the database header says WAL journal mode (file format bytes 18 and 19 = 2)."""
    try:
        with path.open("rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[18] == 2 and header[19] == 2


def sqlite_open_mode(path: Path) -> str:
    """``ro`` or ``immutable``: how to open ``path`` without leaving or needing any file beside it.

    A WAL database needs a ``-shm`` file even to be read; unless a writer already keeps both
    ``-wal`` and ``-shm`` there (then reading through them gives the latest data) it is read as
    immutable, which is exact when no ``-wal`` file holds uncheckpointed pages. A database in a
    directory that cannot be written is read as immutable too.
    """
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    if not _writable(path.parent):
        return "immutable"
    if _is_wal(path) and not (wal.exists() and shm.exists()):
        return "immutable"
    return "ro"


def _open_sqlite(uri: str) -> SqlReader:
    path = require_sqlite_file(uri)
    mode = sqlite_open_mode(path)
    option = "immutable=1" if mode == "immutable" else "mode=ro"
    url = f"file:{pathname2url(str(path.resolve()))}?{option}"
    try:
        conn = sqlite3.connect(url, uri=True, check_same_thread=False)
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {path} as a database: {exc}") from exc
    return SqlReader(_sqlite_query(conn), uri, sqlite=conn)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def engine_url(uri: str, installed: Callable[[str], bool] = _installed) -> str:
    """``uri`` with the PostgreSQL driver that is ``installed`` (psycopg 3, else psycopg2).

    ``postgresql://`` names no driver; an explicit ``postgresql+driver://`` is kept. Without any
    driver, a StoreError says how to install one.
    """
    scheme, sep, rest = uri.partition("://")
    if scheme.lower() not in ("postgresql", "postgres"):
        return uri
    for module, dialect in (("psycopg", "postgresql+psycopg"), ("psycopg2", "postgresql+psycopg2")):
        if installed(module):
            return f"{dialect}{sep}{rest}"
    raise StoreError(f"reading PostgreSQL needs a database driver: {POSTGRES_EXTRA}")


def _open_sqlalchemy(uri: str) -> SqlReader:
    import sqlalchemy

    where = mask_uri(uri)
    url = engine_url(uri)
    postgres = url.lower().startswith("postgresql")
    connect_args = {"connect_timeout": CONNECT_TIMEOUT_S} if postgres else {}
    try:
        engine = sqlalchemy.create_engine(url, connect_args=connect_args)
        conn = engine.connect()
    except ImportError as exc:
        hint = POSTGRES_EXTRA if postgres else f"pip install {exc.name or 'the driver'}"
        raise StoreError(f"the database driver for {where} is not installed: {hint}") from None
    except Exception as exc:  # sqlalchemy's and the driver's errors alike
        raise StoreError(f"cannot connect to {where}: {_first_line(exc)}") from None
    if postgres:
        conn.execute(sqlalchemy.text("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"))

    def query(sql: str, params: dict[str, Any]) -> pd.DataFrame:
        try:
            return pd.read_sql(sqlalchemy.text(sql), conn, params=params)
        except Exception:
            conn.rollback()  # a failed statement aborts the transaction in PostgreSQL
            raise

    def close() -> None:
        conn.close()
        engine.dispose()

    return SqlReader(query, uri, close=close)


def _version(query: Query) -> str | None:
    """The alembic revision of the database, None when it has no ``alembic_version`` table."""
    try:
        frame = query("SELECT version_num FROM alembic_version", {})
    except Exception:
        return None
    return str(frame["version_num"].iloc[0]) if len(frame) else "unknown"


def _check_schema(reader: SqlReader, uri: str) -> None:
    """Raise StoreError unless this is an MLflow database whose needed columns all exist."""
    query = reader._query
    version = _version(query)
    where = mask_uri(uri)
    if version is None:
        raise StoreError(f"{where} is not an MLflow tracking database (no alembic_version table)")
    missing_tables, missing_columns = [], []
    for table, columns in {**NEEDED_COLUMNS, **OPTIONAL_COLUMNS}.items():
        try:
            query(f"SELECT * FROM {table} WHERE 1 = 0", {})
        except Exception:
            missing_tables.append(table)
            continue
        for column in dict.fromkeys(columns):
            try:
                query(f"SELECT {column} FROM {table} WHERE 1 = 0", {})
            except Exception:
                missing_columns.append(f"{table}.{column}")
    if missing_tables:
        raise StoreError(
            f"{where} is not an MLflow tracking database (no table "
            f"{', '.join(dict.fromkeys(missing_tables))}; alembic revision {version})"
        )
    optional = {f"{t}.{c}" for t, cs in OPTIONAL_COLUMNS.items() for c in cs}
    reader.has_is_nan = "metrics.is_nan" not in missing_columns
    needed = [c for c in missing_columns if c not in optional]
    if needed:
        raise StoreError(
            f"{where} is an MLflow database of a schema this tool cannot read (alembic revision "
            f"{version}, no column {', '.join(needed)}); it was left as it is: read it through "
            "`mlflow server --backend-store-uri <this URI>` run with the MLflow version that wrote "
            "it, and pass that server's http:// address as --tracking-uri"
        )


def open_sql_reader(uri: str) -> SqlReader:
    """A read-only reader for a sqlite or other SQL store; StoreError when it cannot be read."""
    reader = _open_sqlite(uri) if store_kind(uri) == SQLITE else _open_sqlalchemy(uri)
    try:
        _check_schema(reader, uri)
    except BaseException:
        reader.close()
        raise
    return reader
