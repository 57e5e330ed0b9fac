"""What the SQLite reader asks the store: no query for keys the store does not hold, and key
ranges that keep exactly the rows the old LIKE pattern kept."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from itwin_report.store import load_experiment, sql_open


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


def test_no_system_metric_query_without_system_metrics(
    scaling_sqlite: tuple[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    statements = _traced(monkeypatch)
    data = load_experiment(f"sqlite:///{_copy(scaling_sqlite, tmp_path)}", "scaling")
    assert len(data.metrics) > 50
    probes = [s for s in statements if "LIMIT 1" in s and "system/gpu" in s]
    assert len(probes) == 1  # asked once whether the store holds any
    assert not [s for s in statements if "JOIN metrics" in s and "system/gpu" in s]


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
    got = load_experiment(f"sqlite:///{db}", "scaling", show_progress=False)
    assert [s for s in statements if "JOIN metrics" in s and "system/gpu" in s]
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
