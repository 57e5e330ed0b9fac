"""Reading through an MLflow 2.x server: gunicorn with its default 4,094-byte request line.

``make test-old-server`` builds a venv with ``mlflow==2.22.5`` once and points
``ITWIN_OLD_MLFLOW`` at its ``mlflow`` executable. The experiment holds more worker runs than
one bulk-history GET can name within that limit, so every request must be batched to fit.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import bulk_worker_runs, cli_runner, epoch_time, gpu_power, running_mlflow_server

from itwin_report.cli import main

pytestmark = [pytest.mark.old_server, pytest.mark.server]

JOBS = [("torch-ddp", 8)] * 8 + [("deepspeed", 8)] * 8  # 16 jobs x 8 workers = 128 worker runs
GUNICORN_LIMIT = 4094  # gunicorn's default limit_request_line


def old_mlflow() -> Path:
    path = os.environ.get("ITWIN_OLD_MLFLOW", "")
    if not path or not Path(path).is_file():
        pytest.fail("ITWIN_OLD_MLFLOW must name an MLflow 2.x executable: run make test-old-server")
    return Path(path)


def job_runs() -> list[dict[str, Any]]:
    """Top-level runs, each followed by its workers; rank 0 logs epochs, every rank power."""
    runs: list[dict[str, Any]] = []
    t = 1_700_000_000_000
    for j, (strategy, size) in enumerate(JOBS):
        top = len(runs)
        runs.append({"name": f"{strategy}-{size}-{j}", "start": t, "params": {}, "metrics": []})
        for rank in range(size):
            points = [("gpu_power_W", gpu_power(rank, s), t + s * 1000, s) for s in range(3)]
            if rank == 0:
                points += [("epoch_time_s", epoch_time(size, s), t + s * 1000, s) for s in range(3)]
            params = {"strategy": strategy, "global_rank": rank, "global_world_size": size}
            name = "worker_0 (main)" if rank == 0 else f"worker_{rank}"
            runs.append(
                {"name": name, "start": t, "params": params, "metrics": points, "parent": top}
            )
        t += 100_000
    return runs


@pytest.fixture(scope="module")
def old_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(URL, backend URI, worker run ids) of an MLflow 2.x server over a bulk-written store."""
    mlflow_bin = old_mlflow()
    root = tmp_path_factory.mktemp("old-server")
    backend = f"sqlite:///{root / 'backend.db'}"  # created and migrated by the old server itself
    with running_mlflow_server(mlflow_bin, backend, root) as url:
        runs = job_runs()
        ids = bulk_worker_runs(backend, "old", runs, client_uri=url)
        workers = [i for i, run in zip(ids, runs, strict=True) if run.get("parent") is not None]
        yield url, backend, workers


def report(uri: str) -> dict[str, Any]:
    args = ["generate-scalability-report", "-e", "old", "--format", "json", "-q", "--no-plots"]
    result = cli_runner().invoke(main, [*args, "--tracking-uri", uri])
    assert result.exit_code == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_server_is_mlflow_2_behind_gunicorn() -> None:
    answer = subprocess.run(
        [str(old_mlflow()), "--version"], capture_output=True, text=True, check=True
    )
    assert " 2." in answer.stdout


def test_a_naive_bulk_request_would_not_fit(old_server: Any) -> None:
    _, _, workers = old_server
    assert len(workers) == 128
    query = "&".join(f"run_ids={run}" for run in workers[:100])
    line = f"GET /ajax-api/2.0/mlflow/metrics/get-history-bulk-interval?{query} HTTP/1.1"
    assert len(line) > GUNICORN_LIMIT


def test_report_through_the_old_server_matches_the_database(old_server: Any) -> None:
    url, backend, _ = old_server
    over_http = report(url)
    direct = report(backend)
    assert over_http["epoch_time"] == direct["epoch_time"]
    assert over_http["gpu"] == direct["gpu"]
    # epochs 1 and 2 after one warm-up epoch: mean of 100/8 + 1 and 100/8 + 2 = 14.0 s
    rows = {row["strategy"]: row for row in over_http["epoch_time"]}
    assert set(rows) == {"torch-ddp", "deepspeed"}
    for row in rows.values():
        assert row["workers"] == 8 and row["runs"] == 8
        assert row["avg_epoch_time_s"] == pytest.approx(14.0)
