"""The logging example of docs/logging-your-runs.md, run as written against a real SQLite store."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_runner, new_sqlite_store

from itwin_report.cli import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "logging-your-runs.md"
SAMPLES = 1200
EPOCH_S = {2: 6.0, 4: 4.0}  # seconds each epoch takes, by GPU count


def example_code() -> str:
    """The first python block of the page: the logging function users copy."""
    match = re.search(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert match is not None
    return match.group(1)


def test_the_documented_logging_is_reported(
    sqlite_store_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow

    uri = new_sqlite_store(sqlite_store_template, tmp_path / "store" / "mlflow.db")
    clock = [1000.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    namespace: dict[str, Any] = {}
    exec(compile(example_code(), str(DOC), "exec"), namespace)
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("plain-loop")
    try:
        for world, seconds in EPOCH_S.items():

            def train_one_epoch(_epoch: int, seconds: float = seconds) -> None:
                clock[0] += seconds  # a training epoch, on a clock the test controls

            namespace["log_job"](f"ddp-{world}", "ddp", world, train_one_epoch, 3, SAMPLES)
    finally:
        mlflow.set_tracking_uri(None)  # type: ignore[arg-type]

    args = ["generate-scalability-report", "-e", "plain-loop", "--tracking-uri", uri]
    result = cli_runner().invoke(main, [*args, "--format", "json", "--no-plots", "-q"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    rows = {row["workers"]: row for row in doc["epoch_time"]}
    assert sorted(rows) == [2, 4]
    # warm-up epoch 0 left out: 2 epochs each; 6 s and 4 s per epoch -> speedup 1.5, eff. 0.75
    assert rows[2]["avg_epoch_time_s"] == pytest.approx(6.0)
    assert rows[4]["avg_epoch_time_s"] == pytest.approx(4.0)
    assert rows[4]["epoch_time_speedup"] == pytest.approx(1.5)
    assert rows[4]["epoch_time_efficiency"] == pytest.approx(0.75)
    rates = {row["workers"]: row["samples_per_sec"] for row in doc["throughput"]}
    assert rates[2] == pytest.approx(SAMPLES / 6.0)
    assert rates[4] == pytest.approx(SAMPLES / 4.0)
