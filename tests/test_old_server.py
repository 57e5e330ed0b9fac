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
from mlflow.tracking import MlflowClient

from itwin_report.cli import main
from itwin_report.data.rundata import PERFORMANCE_ARTIFACT, PROFILE_ARTIFACT
from itwin_report.store import _load
from itwin_report.store.api_reader import BULK_PATH, ApiReader
from itwin_report.store.rest import ARTIFACTS_PATH

pytestmark = [pytest.mark.old_server, pytest.mark.server]

JOBS = [("torch-ddp", 8)] * 8 + [("deepspeed", 8)] * 8  # 16 jobs x 8 workers = 128 worker runs
GUNICORN_LIMIT = 4094  # gunicorn's default limit_request_line
PROFILED = 8  # worker runs with a profiler CSV: the first job's
PROFILE = "name,self_cuda_time_total\naten::mm,600.0\nnccl:all_reduce,200.0\n"


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
        # the first job's ranks logged a profile, through the server's artifact store
        exp = MlflowClient(url).get_experiment_by_name("old")
        assert exp is not None and exp.artifact_location.startswith("mlflow-artifacts:")
        folder = root / "artifacts" / exp.artifact_location.split(":", 1)[1].strip("/")
        for run in workers[:PROFILED]:
            path = folder / run / "artifacts" / PROFILE_ARTIFACT
            path.parent.mkdir(parents=True)
            path.write_text(PROFILE, encoding="utf-8")
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


def test_each_request_once_through_the_old_server(old_server: Any) -> None:
    """Bulk histories in batches that fit the request line; artifacts asked for once, only of
    the runs whose folder the experiment's folder holds (one listing).

    MLflow 2.x answers a missing artifact with HTTP 500: one listing of its folder tells that
    it is absent, not that the server failed.
    """
    url, _, workers = old_server
    reader = ApiReader(url)
    try:
        data = _load(reader, url, "old", (), False, False)
        sent = reader.requests
    finally:
        reader.close()
    assert len(data.runs) == len(workers) == 128
    # gpu_power_W of 128 runs in 3 requests of at most 47, epoch_time_s of the 16 rank-0 runs
    assert sent[BULK_PATH] == 3 + 1
    downloads = {p: n for p, n in sent.items() if p.startswith(ARTIFACTS_PATH + "/")}
    assert set(downloads.values()) == {1} and len(downloads) == 2 * PROFILED
    for run in workers[:PROFILED]:
        assert sum(p.endswith(f"/{run}/artifacts/{PROFILE_ARTIFACT}") for p in downloads) == 1
        assert sum(p.endswith(f"/{run}/artifacts/{PERFORMANCE_ARTIFACT}") for p in downloads) == 1
    # the experiment's folder, then the folder of each profiled run's missing performance.json
    assert sent[ARTIFACTS_PATH] == 1 + PROFILED
    assert not any("could not read" in str(w) for w in data.warnings)
    # each profiled rank: 600 of 800 us in computation
    assert sorted(data.profiles["run_id"].unique()) == sorted(workers[:PROFILED])
    assert data.profiles["self_cuda_time_total"].sum() == PROFILED * 800.0
    assert PERFORMANCE_ARTIFACT not in " ".join(map(str, data.warnings))
