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

from itwin_report.data.rundata import METRIC_KEYS
from itwin_report.data.validate import POINT_INTEGER, POINT_INTEGER_TEXT, named
from itwin_report.store.columnar import fetch_numeric
from itwin_report.store.tree import PARENT_TAG
from itwin_report.store.uri import mask_uri
from itwin_report.util.errors import StoreError
from itwin_report.util.masking import mask_text
from itwin_report.util.progress import Advance

Query = Callable[[str, dict[str, Any]], pd.DataFrame]

WANTED_TABLE = "itwin_report_wanted"
SYSTEM_PREFIX = "system/gpu_"  # MLflow's own system metrics, per GPU
# every key starting with SYSTEM_PREFIX, as a range an index on the key can answer ("`" follows
# "_"); unlike LIKE, exact about case and "_"
SYSTEM_RANGE = (SYSTEM_PREFIX, SYSTEM_PREFIX[:-1] + "`")
SYSTEM_PROBE = "SELECT 1 FROM metrics WHERE key >= ? AND key < ? LIMIT 1"
FETCH_ROWS = 200_000  # rows per fetch when reading columns into arrays
KEY_SLOTS = 8  # room for the codes of METRIC_KEYS
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


def _points_sql(columns: str) -> str:
    """The wanted runs' points of :data:`METRIC_KEYS`: ``run position * 8 + key``, ``columns``."""
    keys = "".join(f"WHEN '{k}' THEN {i} " for i, k in enumerate(METRIC_KEYS))
    return (
        f"SELECT w.idx * {KEY_SLOTS} + CASE m.key {keys}END, {columns} FROM {WANTED_TABLE} w "
        "JOIN metrics m ON m.run_uuid = w.run_uuid WHERE m.key IN "
        f"({', '.join('?' * len(METRIC_KEYS))})"
    )


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
    ) -> None:
        self._query = query
        self._sqlite = sqlite
        self._sqlite_url = sqlite_url  # the read-only URI filename, for the columnar reader
        self._close = close
        self.uri = uri
        self.has_is_nan = True
        self.warnings: list[str] = []
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

    def metrics(self, experiment_id: Any, run_ids: Sequence[str], advance: Advance) -> pd.DataFrame:
        """Points of :data:`METRIC_KEYS` (and MLflow's GPU system metrics) of ``run_ids``.

        NaN is restored from ``is_nan`` when the column exists; a point whose value is not a
        number (text in the value column) is left out with a warning naming its run.
        """
        if self._sqlite is not None:
            try:
                frame = self._sqlite_metrics(run_ids)
            except (sqlite3.Error, pd.errors.DatabaseError) as exc:
                raise StoreError(f"cannot read {mask_uri(self.uri)}: {first_line(exc)}") from None
        else:
            frame = self._generic_metrics(experiment_id, run_ids)
        advance(len(run_ids) * len(METRIC_KEYS))
        return frame

    def _sqlite_metrics(self, run_ids: Sequence[str]) -> pd.DataFrame:
        """Four numeric columns per point, fetched into arrays in chunks.

        Run and key travel as one code (``run position * 8 + key position``); a point whose
        value, step or timestamp is not a number comes back with a NULL step.
        """
        assert self._sqlite is not None
        run_ids = sorted(run_ids)
        self._fill_wanted(run_ids)
        numeric = "typeof(m.value) IN ('real', 'integer')"
        numeric += " AND typeof(m.step) = 'integer' AND typeof(m.timestamp) = 'integer'"
        nan = "WHEN m.is_nan THEN NULL " if self.has_is_nan else ""
        value = f"CASE {nan}WHEN {numeric} THEN CAST(m.value AS REAL) END"
        sql = _points_sql(
            f"{value}, CASE WHEN {numeric} THEN m.step END, "
            f"CASE WHEN {numeric} THEN m.timestamp END"
        )
        table = self._fetch_columnar(run_ids)
        if table is None:
            table = self._fetch_array(sql, METRIC_KEYS)
        codes = table[:, 0].astype(np.int64)
        frame = pd.DataFrame(
            {
                "run_id": pd.Categorical.from_codes(
                    codes // KEY_SLOTS, categories=pd.Index(run_ids)
                ),
                "key": pd.Categorical.from_codes(
                    codes % KEY_SLOTS, categories=pd.Index(METRIC_KEYS)
                ),
                "step": table[:, 2],
                "value": table[:, 1],
                "timestamp": table[:, 3],
            }
        )
        bad = np.isnan(table[:, 2])
        del table
        frame = self._drop_bad(frame, bad)
        if not self._sqlite.execute(SYSTEM_PROBE, SYSTEM_RANGE).fetchall():
            return frame  # no system metrics anywhere in the store: no query per run
        system = pd.read_sql(
            f"SELECT m.run_uuid AS run_id, m.key AS key, m.step AS step, {value} AS value, "
            f"m.timestamp AS timestamp, NOT ({numeric}) AS bad FROM {WANTED_TABLE} w "
            "JOIN metrics m ON m.run_uuid = w.run_uuid WHERE m.key >= ? AND m.key < ?",
            self._sqlite,
            params=list(SYSTEM_RANGE),
        )
        if system.empty:
            return frame
        system = self._drop_bad(system.drop(columns="bad"), system["bad"] != 0)
        return pd.concat(
            [frame.astype({"run_id": object, "key": object}), system], ignore_index=True
        )

    def _fetch_columnar(self, run_ids: Sequence[str]) -> np.ndarray | None:
        """The four columns of :meth:`_sqlite_metrics` read by the ADBC driver, or None.

        The raw columns are fetched (no per-row type checks in SQL); the driver refuses a
        column that mixes types, and a NULL marks a point that is not a number, as in SQL.
        """
        if self._sqlite_url is None:
            return None
        nan = "m.is_nan" if self.has_is_nan else "0"
        sql = _points_sql(f"m.value, m.step, m.timestamp, {nan}")
        wanted: list[tuple[Any, ...]] = [(r, i) for i, r in enumerate(run_ids)]
        setup: list[tuple[str, Sequence[tuple[Any, ...]]]] = [(s, ()) for s in WANTED_SETUP]
        setup.append((WANTED_INSERT, wanted))
        raw = fetch_numeric(self._sqlite_url, setup, sql, METRIC_KEYS)
        if raw is None:
            return None
        numeric = ~np.isnan(raw[:, 1:4]).any(axis=1)
        is_nan = np.nan_to_num(raw[:, 4]) != 0
        table = raw[:, :4]
        table[~numeric, 2:4] = np.nan
        table[~numeric | is_nan, 1] = np.nan
        return table

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
