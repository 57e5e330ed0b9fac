"""The columnar SQLite reader (ADBC) reads what sqlite3 reads, and steps aside when it can't."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import adbc_driver_sqlite  # noqa: F401  (a dependency of the default install)
import numpy as np
import pandas as pd
import pytest
from conftest import start_from_terminal

from itwin_report.store import load_experiment, sql_reader
from itwin_report.store.columnar import ENV, numeric_columns, read_batches

Store = tuple[str, dict[str, Any]]


def _copy(store: Store, tmp_path: Path) -> Path:
    db = tmp_path / "mlflow.db"
    shutil.copyfile(store[0].removeprefix("sqlite:///"), db)
    return db


def _load_both(db: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, list[bool]]:
    """The experiment read with the driver allowed and with it off; whether it was used."""
    used: list[bool] = []

    def recording(*args: Any, **kwargs: Any) -> Any:
        result = read_batches(*args, **kwargs)
        used.append(result)
        return result

    monkeypatch.setattr(sql_reader, "read_batches", recording)
    monkeypatch.setenv(ENV, "1")
    columnar = load_experiment(f"sqlite:///{db}", "scaling", show_progress=False)
    monkeypatch.setenv(ENV, "0")
    plain = load_experiment(f"sqlite:///{db}", "scaling", show_progress=False)
    return columnar, plain, used


def _assert_same(a: Any, b: Any) -> None:
    for name in ("runs", "metrics", "profiles", "performance"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.warnings == b.warnings


def fetch_numeric(url: str, setup: Any, sql: str) -> np.ndarray | None:
    """All rows of ``sql`` as floats through the driver, None when it steps aside."""
    parts: list[np.ndarray] = []

    def consume(tag: Any, batch: Any) -> None:
        parts.append(numeric_columns(batch, range(batch.num_columns)))

    if not read_batches(url, setup, [(None, sql, [])], consume):
        return None
    return np.concatenate(parts) if parts else np.empty((0, 0))


def test_the_driver_reads_numbers_as_sqlite_does(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (a INTEGER, b REAL)")
        rows = [(i, i / 7 if i % 3 else None) for i in range(300_000)]
        conn.executemany("INSERT INTO t VALUES (?, ?)", rows)
    conn.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    url = f"file:{db}?mode=ro"
    got = fetch_numeric(url, [], "SELECT a, b FROM t ORDER BY a")
    assert got is not None and got.shape == (300_000, 2)  # more than one batch
    assert got[:, 0].tolist() == [float(i) for i in range(300_000)]
    expected = [i / 7 if i % 3 else float("nan") for i in range(300_000)]
    np.testing.assert_array_equal(got[:, 1], np.array(expected))
    # text anywhere, or a type change after the first batch: the driver steps aside
    assert fetch_numeric(url, [], "SELECT 'x' || a FROM t") is None
    mixed = "SELECT CASE WHEN a < 250000 THEN a ELSE 'late' END FROM t ORDER BY a"
    assert fetch_numeric(url, [], mixed) is None
    # read-only: a write through the same URI fails, and the file is untouched
    assert fetch_numeric(url, [("DELETE FROM t", ())], "SELECT 1") is None
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_a_consumer_error_that_is_no_refusal_reaches_the_caller(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (a INTEGER)")
        conn.execute("INSERT INTO t VALUES (1)")
    conn.close()

    def broken(tag: Any, batch: Any) -> None:
        raise ZeroDivisionError("a bug, not the data")

    with pytest.raises(ZeroDivisionError):
        read_batches(f"file:{db}?mode=ro", [], [(None, "SELECT a FROM t", [])], broken)


def test_a_clean_store_is_read_by_the_driver_with_the_same_result(
    scaling_sqlite: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    columnar, plain, used = _load_both(_copy(scaling_sqlite, tmp_path), monkeypatch)
    assert used == [True, False]  # switched off, the second load did not use it
    assert len(columnar.metrics) > 50
    _assert_same(columnar, plain)


def test_without_the_driver_sqlite3_reads_the_same_rows(
    scaling_sqlite: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An environment where the driver cannot be imported falls back to sqlite3, silently."""
    db = _copy(scaling_sqlite, tmp_path)
    monkeypatch.setenv(ENV, "1")
    columnar = load_experiment(f"sqlite:///{db}", "scaling", show_progress=False)
    monkeypatch.setitem(sys.modules, "adbc_driver_sqlite.dbapi", None)  # import fails
    assert fetch_numeric(f"file:{db}?mode=ro", [], "SELECT 1") is None
    plain = load_experiment(f"sqlite:///{db}", "scaling", show_progress=False)
    _assert_same(columnar, plain)


@pytest.mark.parametrize(
    ("change", "driver_used"),
    [
        # text in a value: the column mixes types, the driver refuses it
        (
            "UPDATE metrics SET value = 'fast' WHERE key = 'epoch_time_s' AND step = 0 "
            "AND run_uuid = '{run}'",
            False,
        ),
        # text after the driver's first batch of rows: it fails mid-read and steps aside
        (
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) "
            "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) "
            "SELECT 'gpu_power_W', 200.0 + i % 7, 1700000000000 + i, "
            "'{run}', 1000 + i, 0 FROM n; "
            "UPDATE metrics SET value = 'hot' WHERE rowid = (SELECT max(rowid) FROM metrics)",
            False,
        ),
        # a step of text in the first rows
        (
            "UPDATE metrics SET step = 'one' WHERE rowid = (SELECT min(rowid) FROM metrics "
            "WHERE key = 'gpu_power_W' AND run_uuid = '{run}')",
            False,
        ),
        # NaN logged by MLflow (value 0, is_nan 1) and an infinite value: numbers, read as such
        (
            "UPDATE metrics SET is_nan = 1, value = 0 WHERE key = 'epoch_time_s' AND step = 1; "
            "UPDATE metrics SET value = 9e999 WHERE key = 'gpu_power_W' AND step = 2",
            True,
        ),
        # a duplicated (run, key, step) with a later timestamp
        (
            "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) "
            "SELECT key, value + 1, timestamp + 1, run_uuid, step, is_nan FROM metrics "
            "WHERE key = 'epoch_time_s' AND step = 2",
            True,
        ),
    ],
    ids=["text-value", "text-late", "text-step", "nan-and-inf", "duplicate"],
)
def test_odd_values_give_the_same_data_either_way(
    scaling_sqlite: Store,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    change: str,
    driver_used: bool,
) -> None:
    db = _copy(scaling_sqlite, tmp_path)
    with sqlite3.connect(db) as conn:
        conn.executescript(change.format(run=scaling_sqlite[1]["jobs"][2][2][0]))
    conn.close()
    columnar, plain, used = _load_both(db, monkeypatch)
    assert used == [driver_used, False]
    _assert_same(columnar, plain)
    assert plain.warnings  # each change is reported


# A stand-in for a long query: the driver runs an endless recursive query instead of the
# points query, so that Ctrl-C surely arrives while the driver is reading.
SLOW_DRIVER = """
import os
import pathlib

import adbc_driver_sqlite.dbapi as dbapi

_connect = dbapi.connect
_READY = pathlib.Path(os.environ["ITWIN_TEST_READY"])
_ENDLESS = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
    "SELECT x, x, x, x, x FROM c WHERE x < 0"
)


class _Cursor:
    def __init__(self, cursor):
        self._cursor = cursor

    def __getattr__(self, name):
        return getattr(self._cursor, name)

    def execute(self, sql, params=None):
        if "metrics m" in sql:
            _READY.write_text("reading")
            return self._cursor.execute(_ENDLESS)
        return self._cursor.execute(sql, params)


class _Connection:
    def __init__(self, conn):
        self._conn = conn

    def __getattr__(self, name):
        return getattr(self._conn, name)

    def cursor(self):
        return _Cursor(self._conn.cursor())


def connect(*args, **kwargs):
    return _Connection(_connect(*args, **kwargs))


dbapi.connect = connect
"""


@pytest.mark.parametrize(
    ("sig", "code", "name"), [("SIGINT", 130, "SIGINT"), ("SIGTERM", 143, "SIGTERM")]
)
def test_a_signal_during_the_columnar_read_ends_the_report(
    scaling_sqlite: Store, tmp_path: Path, sig: str, code: int, name: str
) -> None:
    """The driver's read is cancelled, never taken for a refusal that sqlite3 reads again."""
    import os
    import signal
    import sys
    import time

    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SLOW_DRIVER)
    ready = tmp_path / "ready"
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": str(shim),
        "ITWIN_TEST_READY": str(ready),
        ENV: "1",
        "MLFLOW_TRACKING_URI": "",
    }
    cmd = [
        sys.executable, "-m", "itwin_report", "generate-scalability-report", "-e", "scaling",
        "-q", "--tracking-uri", scaling_sqlite[0], "-o", str(out_dir / "report.txt"),
        "--no-plots",
    ]  # fmt: skip
    proc = start_from_terminal(cmd, env)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ready.exists(), proc.communicate(timeout=5)
        time.sleep(0.2)  # well inside the endless query
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert (proc.returncode, err, out) == (code, f"Error: interrupted by {name}\n", "")
    assert list(out_dir.iterdir()) == []  # the report did not run on
