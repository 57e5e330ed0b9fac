"""What the SQLite reader asks the store: which keys it holds, once; then no query for a key
it does not hold, and system keys that are exactly the ones the old LIKE pattern kept."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from itwin_report.data.rundata import METRIC_KEYS
from itwin_report.store import load_experiment, sql_open, sql_reader
from itwin_report.store.columnar import ENV


def _traced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement the SQLite reader's connection runs, from now on."""
    statements: list[str] = []
    connect = sql_open._connect

    def connecting(path: Path, mode: str) -> tuple[sqlite3.Connection, str]:
        conn, url = connect(path, mode)
        conn.set_trace_callback(statements.append)
        return conn, url

    monkeypatch.setattr(sql_open, "_connect", connecting)
    return statements


def _copy(store: tuple[str, Any], tmp_path: Path) -> Path:
    db = tmp_path / "mlflow.db"
    shutil.copyfile(store[0].removeprefix("sqlite:///"), db)
    return db


def _asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The metric keys the columnar reader queries, from now on."""
    keys: list[str] = []
    real = sql_reader.read_batches

    def recording(url: str, setup: Any, queries: Any, *args: Any, **kwargs: Any) -> bool:
        keys.extend(params[0] for _, _, params in queries)
        return real(url, setup, queries, *args, **kwargs)

    monkeypatch.setattr(sql_reader, "read_batches", recording)
    return keys


def _held(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {k for (k,) in conn.execute("SELECT DISTINCT key FROM metrics")}


@pytest.mark.parametrize("columnar", ["1", "0"], ids=["columnar", "sqlite3"])
def test_no_query_for_a_key_the_store_does_not_hold(
    scaling_sqlite: tuple[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    columnar: str,
) -> None:
    db = _copy(scaling_sqlite, tmp_path)
    monkeypatch.setenv(ENV, columnar)
    statements = _traced(monkeypatch)
    asked = _asked(monkeypatch)
    data = load_experiment(f"sqlite:///{db}", "scaling")
    assert len(data.metrics) > 50
    held = sorted(set(METRIC_KEYS) & _held(db))
    assert 0 < len(held) < len(METRIC_KEYS)  # the store lacks some of the report's keys
    assert len([s for s in statements if "WITH RECURSIVE" in s]) == 1  # asked once
    assert not [s for s in statements if "system/gpu" in s]
    per_key = [s for s in statements if "JOIN metrics" in s]
    if columnar == "1":
        assert asked == held and not per_key
    else:  # sqlite3 names each key in a statement of its own
        assert [next(k for k in held if f"'{k}'" in s) for s in per_key] == held


def test_system_keys_read_by_range_are_the_keys_the_pattern_read(
    scaling_sqlite: tuple[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys that only LIKE matched (another case, any character for '_') are not system GPU
    metrics: the report's rows are the same whichever way they are selected."""
    db = _copy(scaling_sqlite, tmp_path)
    run = scaling_sqlite[1]["jobs"][2][2][0]
    with sqlite3.connect(db) as conn:
        rows = [
            (key, 150.0 + step, 1_700_000_000_000 + step, run, step)
            for step in range(3)
            for key in (
                "system/gpu_0_power_usage_watts",
                "system/gpu_1_power_usage_watts",
                "SYSTEM/GPU_0_utilization_percentage",
                "system/gpuX0_power_usage_watts",
            )
        ]
        conn.executemany(
            "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) "
            "VALUES (?, ?, ?, ?, ?, 0)",
            rows,
        )
    conn.close()
    statements = _traced(monkeypatch)
    asked = _asked(monkeypatch)
    got = load_experiment(f"sqlite:///{db}", "scaling", show_progress=False)
    system = [k for k in asked if k.lower().startswith("system/")]
    assert system == ["system/gpu_0_power_usage_watts", "system/gpu_1_power_usage_watts"]
    # the generic SQL path (the one PostgreSQL takes) still selects with LIKE
    from itwin_report.store.sql_reader import SqlReader

    original = SqlReader.metrics

    def generic(self: SqlReader, exp: Any, ids: Any, advance: Any) -> pd.DataFrame:
        conn, self._sqlite = self._sqlite, None
        try:
            return original(self, exp, ids, advance)
        finally:
            self._sqlite = conn

    monkeypatch.setattr(SqlReader, "metrics", generic)
    like = load_experiment(f"sqlite:///{db}", "scaling", show_progress=False)
    assert any("LIKE" in s for s in statements)
    pd.testing.assert_frame_equal(got.metrics, like.metrics, check_exact=True)
    assert got.warnings == like.warnings
