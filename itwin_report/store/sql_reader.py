"""Read MLflow's SQL tables directly: a fixed handful of read-only queries per experiment.

The reader only ever sends SELECTs; :mod:`itwin_report.store.sql_open` opens the database
read-only and checks its schema first (:func:`~itwin_report.store.sql_open.open_sql_reader`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from itwin_report.data.rundata import is_report_key, metric_keys
from itwin_report.data.system_keys import SYSTEM_PREFIX
from itwin_report.data.validate import POINT_INTEGER, POINT_INTEGER_TEXT, named
from itwin_report.store.columnar import (
    Refused,
    enabled,
    integer_column,
    numeric_columns,
    read_batches,
)
from itwin_report.store.points import PointParts
from itwin_report.store.tree import PARENT_TAG
from itwin_report.store.uri import mask_uri
from itwin_report.util.errors import StoreError
from itwin_report.util.masking import mask_text
from itwin_report.util.progress import Advance

Query = Callable[[str, dict[str, Any]], pd.DataFrame]

WANTED_TABLE = "itwin_report_wanted"
# every key of the store, one probe of the index on the key per key (no scan of the points)
STORE_KEYS = (
    "WITH RECURSIVE k(key) AS (SELECT min(key) FROM metrics UNION ALL "
    "SELECT (SELECT min(m.key) FROM metrics m WHERE m.key > k.key) FROM k "
    "WHERE k.key IS NOT NULL) SELECT key FROM k WHERE key IS NOT NULL"
)
FETCH_ROWS = 200_000  # rows per fetch when sqlite3 reads columns into arrays
# read every point of a key, not each wanted run's, when the wanted runs are at least
# 1 / SCAN_SHARE of the store's
SCAN_SHARE = 2
WANTED_SETUP = (
    "PRAGMA temp_store = MEMORY",
    f"DROP TABLE IF EXISTS temp.{WANTED_TABLE}",
    f"CREATE TEMP TABLE {WANTED_TABLE} (run_uuid TEXT PRIMARY KEY, idx INTEGER)",
)
WANTED_INSERT = f"INSERT OR IGNORE INTO temp.{WANTED_TABLE} VALUES (?, ?)"


def _in_list(prefix: str, values: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """``:p0, :p1, ...`` placeholders and their bindings."""
    names = [f"{prefix}{i}" for i in range(len(values))]
    return ", ".join(f":{n}" for n in names), dict(zip(names, values, strict=True))


def _integers(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(64-bit integers, which were None) of one column of sqlite3's rows (None -> 0)."""
    missing = np.array([v is None for v in values], dtype=bool)
    return np.array([0 if v is None else v for v in values], dtype=np.int64), missing


def first_line(exc: BaseException) -> str:
    """The first line of an error, secrets masked."""
    text = str(exc).strip()
    return mask_text(text.splitlines()[0] if text else type(exc).__name__)


class LenientText:
    """sqlite3's ``text_factory``: UTF-8 text, bytes that are not UTF-8 replaced and counted.

    SQLite stores whatever bytes a writer gave it; sqlite3's own decoding refuses the whole
    query for one value that is not UTF-8.
    """

    def __init__(self) -> None:
        self.replaced = 0

    def __call__(self, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            self.replaced += 1
            return data.decode("utf-8", errors="replace")


class SqlReader:
    """Experiments, runs, params and metrics of one MLflow SQL database."""

    def __init__(
        self,
        query: Query,
        uri: str,
        sqlite: sqlite3.Connection | None = None,
        close: Callable[[], None] | None = None,
        sqlite_url: str | None = None,
        postgres_uri: str | None = None,
        postgres_connection: Any = None,
    ) -> None:
        self._query = query
        self._sqlite = sqlite
        self._sqlite_url = sqlite_url  # the read-only URI filename, for the columnar reader
        self._postgres_uri = postgres_uri  # libpq's URI, for the columnar PostgreSQL read
        self._postgres_connection = postgres_connection  # the reader's ADBC one, if any
        self._close = close
        self.uri = uri
        self.extra_keys: tuple[str, ...] = ()  # keys to read besides the report's own
        self.has_is_nan = True
        self.warnings: list[str] = []
        self._keys: set[str] | None = None
        self._text = LenientText()
        if sqlite is not None:
            sqlite.text_factory = self._text

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
            "r.artifact_uri AS artifact_uri, r.start_time AS start_time, r.end_time AS end_time, "
            "t.value AS parent_id FROM runs r "
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
        for column in ("start_time", "end_time"):
            runs[column] = pd.to_numeric(runs[column], errors="coerce").astype("float64")
        if self._text.replaced:
            self._warn_not_utf8(runs, params)
        return runs, params

    def _warn_not_utf8(self, runs: pd.DataFrame, params: pd.DataFrame) -> None:
        """One warning naming the runs whose name or params were not UTF-8 text."""
        odd = runs["name"].str.contains("\ufffd", regex=False)
        ids = set(runs.loc[odd, "run_id"])
        ids |= set(
            params.loc[params["value"].astype(str).str.contains("\ufffd", regex=False), "run_id"]
        )
        names = runs.set_index("run_id")["name"]
        shown = [f"{names.get(r, '')} ({str(r)[:8]})" for r in ids]
        if shown:
            self.warnings.append(
                f"text that is not UTF-8 in the name or params of {len(shown)} run(s) "
                f"({named(shown)}) was read with replacement characters"
            )

    def store_keys(self) -> set[str]:
        """Every metric key the store holds, asked once (a walk along the index on the key:
        one probe per key, never a scan of the points)."""
        if self._keys is None:
            frame = self._query(STORE_KEYS, {})
            self._keys = {k for k in frame["key"] if isinstance(k, str)}
        return self._keys

    def metrics(self, experiment_id: Any, run_ids: Sequence[str], advance: Advance) -> pd.DataFrame:
        """Points of :attr:`keys` (and MLflow's GPU system metrics) of ``run_ids``.

        NaN is restored from ``is_nan`` when the column exists; a point whose value is not a
        number (text in the value column) is left out with a warning naming its run. Only keys
        the store holds are asked for.
        """
        frame: pd.DataFrame | None
        if self._sqlite is not None:
            try:
                frame = self._sqlite_metrics(run_ids)
            except (sqlite3.Error, pd.errors.DatabaseError) as exc:
                raise StoreError(f"cannot read {mask_uri(self.uri)}: {first_line(exc)}") from None
        else:
            frame = self._postgres_metrics(experiment_id, run_ids)
            if frame is None:
                frame = self._generic_metrics(experiment_id, run_ids)
        advance(len(run_ids) * len(self.keys))
        return frame

    @property
    def keys(self) -> tuple[str, ...]:
        """The metric keys the report reads, the extra keys asked for included."""
        return metric_keys(self.extra_keys)

    def logged_keys(self, experiment_id: Any, run_ids: Sequence[str]) -> list[str]:
        """Every metric key the experiment's runs logged (their latest values' keys), sorted."""
        del run_ids  # the experiment's keys: one query, no list of ids bound
        frame = self._query(
            "SELECT DISTINCT lm.key AS key FROM latest_metrics lm "
            "JOIN runs r ON r.run_uuid = lm.run_uuid WHERE r.experiment_id = :exp",
            {"exp": experiment_id},
        )
        return sorted({k for k in frame["key"] if isinstance(k, str)})

    def _wanted_keys(self) -> list[str]:
        """The keys to read, sorted: those of :data:`METRIC_KEYS` and of MLflow's per-GPU system
        metrics (:func:`~itwin_report.data.rundata.is_report_key`), and the extra keys asked
        for, that the store holds."""
        extra = set(self.extra_keys)
        return sorted(k for k in self.store_keys() if is_report_key(k) or k in extra)

    def _sqlite_metrics(self, run_ids: Sequence[str]) -> pd.DataFrame:
        """The points of the wanted keys, one query per key, in columns of numbers.

        Read by the ADBC driver in batches when it can (:mod:`~itwin_report.store.columnar`),
        else by sqlite3; a point whose value, step or timestamp is not a number comes back
        flagged, and is left out with a warning.
        """
        assert self._sqlite is not None
        run_ids = sorted(run_ids)
        keys = self._wanted_keys()
        parts = PointParts(run_ids, keys)
        if keys and not self._columnar_points(parts):
            parts = PointParts(run_ids, keys)
            self._sqlite3_points(parts)
        frame, bad = parts.frame()
        return self._drop_bad(frame, bad)

    def _scan_whole_keys(self, wanted: int) -> bool:
        """Whether the wanted runs are so large a share of the store's runs that reading every
        point of a key (along the index on the key) costs less than finding each run's."""
        assert self._sqlite is not None
        (total,) = self._sqlite.execute("SELECT count(*) FROM runs").fetchone()
        return wanted * SCAN_SHARE >= int(total)

    def _columnar_points(self, parts: PointParts) -> bool:
        """The points read by the ADBC driver into ``parts``; False when it steps aside.

        The raw columns are fetched (no per-row type checks in SQL): the driver refuses a
        column that mixes types, a step or timestamp that is not an integer column is left to
        sqlite3's checks, and a NULL marks a point that is not a number, as in SQL.
        """
        if self._sqlite_url is None:
            return False
        import pyarrow as pa
        import pyarrow.compute as pc

        nan = "m.is_nan" if self.has_is_nan else "0"
        columns = f"m.value, m.step, m.timestamp, {nan}"
        scan = self._scan_whole_keys(len(parts.run_ids))
        setup: list[tuple[str, Sequence[tuple[Any, ...]]]] = []
        if scan:
            sql = f"SELECT m.run_uuid, {columns} FROM metrics m WHERE m.key = ?"
            ids = pa.array(list(parts.run_ids), type=pa.string())
        else:
            sql = (
                f"SELECT w.idx, {columns} FROM {WANTED_TABLE} w "
                "JOIN metrics m ON m.run_uuid = w.run_uuid WHERE m.key = ?"
            )
            setup = [(s, ()) for s in WANTED_SETUP]
            setup.append((WANTED_INSERT, [(r, i) for i, r in enumerate(parts.run_ids)]))

        def consume(key: int, batch: Any) -> None:
            first = batch.column(0)
            if scan:
                if not pa.types.is_string(first.type):
                    raise Refused("a run id that is not text")
                codes = pc.fill_null(pc.index_in(first, value_set=ids), -1)
            elif not pa.types.is_integer(first.type):
                raise Refused("a position that is not an integer")
            else:
                codes = first
            step, no_step = integer_column(batch.column(2))
            stamp, no_stamp = integer_column(batch.column(3))
            value, is_nan = numeric_columns(batch, (1, 4)).T
            runs = codes.to_numpy(zero_copy_only=False)
            self._add_rows(parts, runs, key, value, step, stamp, no_step | no_stamp, is_nan)

        queries = [(i, sql, [k]) for i, k in enumerate(parts.keys)]
        return read_batches(self._sqlite_url, setup, queries, consume)

    @staticmethod
    def _add_rows(
        parts: PointParts,
        runs: np.ndarray,
        key: int,
        value: np.ndarray,
        step: np.ndarray,
        stamp: np.ndarray,
        missing: np.ndarray,
        is_nan: np.ndarray,
    ) -> None:
        """Rows into ``parts``: NaN where ``is_nan`` is set; a row whose value (NaN: NULL),
        step or timestamp (``missing``) is not a number is flagged."""
        numeric = ~(np.isnan(value) | missing)
        value = np.where(numeric & (np.nan_to_num(is_nan) == 0), value, np.nan)
        parts.add(runs.astype(np.int64), key, value, step, stamp, ~numeric)

    def _sqlite3_points(self, parts: PointParts) -> None:
        """The points read by sqlite3 into ``parts``: each value's type checked in SQL."""
        assert self._sqlite is not None
        self._fill_wanted(parts.run_ids)
        numeric = "typeof(m.value) IN ('real', 'integer')"
        numeric += " AND typeof(m.step) = 'integer' AND typeof(m.timestamp) = 'integer'"
        nan = "CASE WHEN m.is_nan THEN 1 ELSE 0 END" if self.has_is_nan else "0"
        sql = (
            f"SELECT w.idx, CASE WHEN {numeric} THEN CAST(m.value AS REAL) END, "
            f"CASE WHEN {numeric} THEN m.step END, CASE WHEN {numeric} THEN m.timestamp END, "
            f"{nan} FROM {WANTED_TABLE} w JOIN metrics m ON m.run_uuid = w.run_uuid "
            "WHERE m.key = ?"
        )
        for key, name in enumerate(parts.keys):
            cursor = self._sqlite.execute(sql, [name])
            while rows := cursor.fetchmany(FETCH_ROWS):
                idx, value, step, stamp, is_nan = zip(*rows, strict=True)
                steps, no_step = _integers(step)
                stamps, no_stamp = _integers(stamp)
                self._add_rows(
                    parts,
                    np.array(idx, dtype=np.int64),
                    key,
                    np.array(value, dtype=np.float64),
                    steps,
                    stamps,
                    no_step | no_stamp,
                    np.array(is_nan, dtype=np.float64),
                )

    def _postgres_metrics(self, experiment_id: Any, run_ids: Sequence[str]) -> pd.DataFrame | None:
        """The generic path's points, read column-wise (:mod:`~itwin_report.store.postgres`);
        None when that read steps aside. The keys are those the generic path keeps."""
        if self._postgres_uri is None or not enabled():
            return None
        from itwin_report.store.postgres import read_points

        keys = self._wanted_keys()
        parts = PointParts(sorted(run_ids), keys)
        conn = self._postgres_connection
        if keys and not read_points(
            self._postgres_uri, experiment_id, parts, self.has_is_nan, connection=conn
        ):
            if conn is not None:  # a refused query left the transaction aborted
                conn.rollback()
            return None
        frame, bad = parts.frame()
        return self._drop_bad(frame, bad)

    def _generic_metrics(self, experiment_id: Any, run_ids: Sequence[str]) -> pd.DataFrame:
        keys, bind = _in_list("k", self.keys)
        nan = ", m.is_nan AS is_nan" if self.has_is_nan else ""
        frame = self._query(
            "SELECT m.run_uuid AS run_id, m.key AS key, m.step AS step, m.value AS value, "
            f"m.timestamp AS timestamp{nan} FROM metrics m "
            "JOIN runs r ON r.run_uuid = m.run_uuid "
            f"WHERE r.experiment_id = :exp AND (m.key IN ({keys}) OR m.key LIKE :system)",
            {"exp": experiment_id, "system": f"{SYSTEM_PREFIX}%", **bind},
        )
        extra = set(self.extra_keys)
        wanted = {
            k
            for k in frame["key"].unique()
            if isinstance(k, str) and (is_report_key(k) or k in extra)
        }
        frame = frame[frame["run_id"].isin(set(run_ids)) & frame["key"].isin(wanted)]
        values = pd.to_numeric(frame["value"], errors="coerce")
        bad = values.isna() & frame["value"].notna()
        if self.has_is_nan:
            values = values.where(frame["is_nan"].fillna(0).astype(int) == 0)
            frame = frame.drop(columns="is_nan")
        frame = frame.assign(value=values.astype("float64"))
        return self._drop_bad(frame, bad.to_numpy())

    def _drop_bad(self, frame: pd.DataFrame, bad: Any) -> pd.DataFrame:
        """``frame`` without the rows flagged in ``bad``, with one warning naming their runs.

        Steps and timestamps arrive as floats here: those beyond
        :data:`~itwin_report.data.validate.POINT_INTEGER` are no exact integer, and are left out
        too (with a warning of their own) before the columns become integers.
        """
        bad = np.asarray(bad, dtype=bool)
        if bad.any():
            runs = [str(r)[:8] for r in frame.loc[bad, "run_id"]]
            self.warnings.append(
                f"{int(bad.sum())} metric points whose value, step or timestamp is not a number "
                f"were left out (runs {named(runs)})"
            )
            frame = frame[~bad]
        huge = ~(POINT_INTEGER.ok(frame["step"]) & POINT_INTEGER.ok(frame["timestamp"]))
        if huge.any():
            runs = [str(r)[:8] for r in frame.loc[huge, "run_id"]]
            self.warnings.append(
                f"{int(huge.sum())} metric points whose step or timestamp is not "
                f"{POINT_INTEGER_TEXT} were left out (runs {named(runs)})"
            )
            frame = frame[~huge]
        return frame.astype({"step": "int64", "timestamp": "int64"}).reset_index(drop=True)

    def _fill_wanted(self, run_ids: Sequence[str]) -> None:
        """A TEMP table of the run ids and their positions (kept in memory, never on disk)."""
        assert self._sqlite is not None
        for statement in WANTED_SETUP:
            self._sqlite.execute(statement)
        self._sqlite.executemany(WANTED_INSERT, [(r, i) for i, r in enumerate(run_ids)])
