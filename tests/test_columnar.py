"""The columnar SQLite reader (ADBC) reads what sqlite3 reads, and steps aside when it can't."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import adbc_driver_sqlite  # noqa: F401  (the test extra installs the driver)
import numpy as np
import pandas as pd
import pytest

from itwin_report.store import load_experiment, sql_reader
from itwin_report.store.columnar import ENV, fetch_numeric

Store = tuple[str, dict[str, Any]]


def _copy(store: Store, tmp_path: Path) -> Path:
    db = tmp_path / "mlflow.db"
    shutil.copyfile(store[0].removeprefix("sqlite:///"), db)
    return db


def _load_both(db: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, list[bool]]:
    """The experiment read with the driver allowed and with it off; whether it was used."""
    used: list[bool] = []

    def recording(*args: Any, **kwargs: Any) -> Any:
        result = fetch_numeric(*args, **kwargs)
        used.append(result is not None)
        return result

    monkeypatch.setattr(sql_reader, "fetch_numeric", recording)
    monkeypatch.setenv(ENV, "1")
    columnar = load_experiment(f"sqlite:///{db}", "scaling", show_progress=False)
    monkeypatch.setenv(ENV, "0")
    plain = load_experiment(f"sqlite:///{db}", "scaling", show_progress=False)
    return columnar, plain, used


def _assert_same(a: Any, b: Any) -> None:
    for name in ("runs", "metrics", "profiles", "performance"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.warnings == b.warnings


def test_the_driver_reads_numbers_as_sqlite_does(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (a INTEGER, b REAL)")
        rows = [(i, i / 7 if i % 3 else None) for i in range(3000)]
        conn.executemany("INSERT INTO t VALUES (?, ?)", rows)
    conn.close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    got = fetch_numeric(f"file:{db}?mode=ro", [], "SELECT a, b FROM t ORDER BY a", [])
    assert got is not None and got.shape == (3000, 2)
    assert got[:, 0].tolist() == [float(i) for i in range(3000)]
    expected = [i / 7 if i % 3 else float("nan") for i in range(3000)]
    np.testing.assert_array_equal(got[:, 1], np.array(expected))
    # text anywhere, or a type change after the first rows: the driver steps aside
    assert fetch_numeric(f"file:{db}?mode=ro", [], "SELECT 'x' || a FROM t", []) is None
    mixed = "SELECT CASE WHEN a < 2500 THEN a ELSE a + 0.5 END FROM t ORDER BY a"
    assert fetch_numeric(f"file:{db}?mode=ro", [], mixed, []) is None
    # read-only: a write through the same URI fails, and the file is untouched
    assert fetch_numeric(f"file:{db}?mode=ro", [("DELETE FROM t", ())], "SELECT 1", []) is None
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_a_clean_store_is_read_by_the_driver_with_the_same_result(
    scaling_sqlite: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    columnar, plain, used = _load_both(_copy(scaling_sqlite, tmp_path), monkeypatch)
    assert used == [True, False]  # switched off, the second load did not use it
    assert len(columnar.metrics) > 50
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
