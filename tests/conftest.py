"""Shared fixtures: real MLflow stores written in temporary directories, and a real server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# metric formulas of the sample experiment (tests recompute expected values from them)
T0 = 1_700_000_000_000


def epoch_time(workers: int, step: int) -> float:
    """epoch_time_s logged by rank 0: 100/workers + step seconds."""
    return 100.0 / workers + step


def gpu_power(rank: int, step: int) -> float:
    """gpu_power_W of a rank: 200 + 10*rank + step watts."""
    return 200.0 + 10 * rank + step


PROFILE_CSV = (
    "name,node_id,self_cuda_time_total,cuda_time_total,cuda_time_total_str,calls,strategy,"
    "num_gpus,global_rank\n"
    "aten::mm,0,600.0,600.0,600us,10,torch-ddp,4,0\n"
    "nccl:all_reduce,0,300.5,300.5,300us,10,torch-ddp,4,0\n"
    "ProfilerStep*,0,0.0,1000.0,1ms,3,torch-ddp,4,0\n"
)
PERFORMANCE_ONE = {
    "total_samples": 1000,
    "total_time": 20.0,
    "samples_per_sec": 50.0,
    "compile_time": 3.0,
    "programming_time": 1.5,
    "est_samples_per_sec": 60.0,
    "suspected_input_bottleneck": True,
}
PERFORMANCE_MERGED = {  # no suspected_input_bottleneck: read as False
    "total_samples": 3000,
    "total_time": 30.0,
    "samples_per_sec": 100.0,
    "compile_time": 4.0,
    "programming_time": 2.0,
    "est_samples_per_sec": 120.0,
    "ordinals": [0, 1, 2],
}

# (top-level name, strategy, world size, ranks that log)
JOBS: list[tuple[str, str, int, tuple[int, ...]]] = [
    ("ddp-4", "torch-ddp", 4, (0, 1)),
    ("ddp-4", "torch-ddp", 4, (0,)),  # a repetition of the same job name
    ("ddp-8", "torch-ddp", 8, (0,)),
    ("deepspeed-4", "deepspeed", 4, (0, 1)),
    ("deepspeed-8", "deepspeed", 8, (0,)),
]


def _worker(w: Any, exp: str, parent: str, strategy: str, size: int, rank: int, t: int) -> str:
    name = "worker_0 (main)" if rank == 0 else f"worker_{rank}"
    run = w.create_run(exp, name, t, parent_run_id=parent)
    points = [("gpu_power_W", gpu_power(rank, s), t + s * 1000, s) for s in range(4)]
    points += [("gpu_utilization_percent", 50.0 + s, t + s * 1000, s) for s in range(4)]
    points += [("train_loss", 1.0, t, 0)]  # not a report key: never loaded
    if rank == 0:
        points += [("epoch_time_s", epoch_time(size, s), t + s * 1000, s) for s in range(3)]
    params = {"strategy": strategy, "global_rank": rank, "global_world_size": size}
    params.update({"probing_interval": 1, "distributed_strategy": "X", "lr": 0.1})
    w.log_batch(run, points, params)
    return run


def build_scaling_store(uri: str, experiment: str = "scaling") -> dict[str, Any]:
    """The sample itwinai-like experiment; returns ids of interesting runs.

    Kept worker runs (10): ddp-4 x2 jobs (ranks 0,1 and 0), ddp-8, deepspeed-4 (ranks 0,1),
    deepspeed-8, flat-2 (flat layout), tune-ray (3 levels, ranks 0,1).
    Skipped: bad-job (2 malformed workers), running-job (2 unfinished workers), a deleted job,
    an empty top-level run (silently).
    """
    from itwin_report.emulator import mlflow_writer
    from itwin_report.store import mlflow_api

    w = mlflow_writer.RunWriter(uri)
    exp = w.experiment_id(experiment, mlflow_writer.artifact_location(uri, experiment))
    ids: dict[str, Any] = {"jobs": []}
    t = T0
    for name, strategy, size, ranks in JOBS:
        top = w.create_run(exp, name, t)
        workers = [_worker(w, exp, top, strategy, size, r, t) for r in ranks]
        for run in workers:
            w.end_run(run, t + 60_000)
        w.end_run(top, t + 61_000)
        ids["jobs"].append((name, top, workers))
        t += 100_000
    ddp4, ddp8, ds4, ds8 = (
        ids["jobs"][0][2][0],
        ids["jobs"][2][2][0],
        ids["jobs"][3][2],
        ids["jobs"][4][2][0],
    )
    w.log_text(ddp4, PROFILE_CSV, "torch_profiling_averages/torch_profiling_averages.csv")
    w.log_text(ds4[1], "name;broken\n\x01", "torch_profiling_averages/torch_profiling_averages.csv")
    w.log_text(ddp8, json.dumps(PERFORMANCE_ONE), "performance/performance.json")
    w.log_text(ds8, json.dumps(PERFORMANCE_MERGED), "performance/performance.json")
    w.log_text(ds4[0], "{not json", "performance/performance.json")
    # NaN point: gpu_utilization_percent of ddp-8 at step 1
    w.log_batch(ddp8, [("gpu_utilization_percent", float("nan"), t, 1)])

    flat = w.create_run(exp, "flat-2", t)
    w.log_batch(
        flat,
        [("epoch_time_s", 7.0, t, 0)],
        {"strategy": "horovod", "global_rank": 0, "global_world_size": 2},
    )
    w.end_run(flat, t + 1)
    ids["flat"] = flat

    tune = w.create_run(exp, "tune-ray", t)
    trial = w.create_run(exp, "trial_a", t, parent_run_id=tune)
    ray = [_worker(w, exp, trial, "ray-torch-ddp", 2, r, t) for r in (0, 1)]
    for run in [*ray, trial, tune]:
        w.end_run(run, t + 1)
    ids["ray"] = (tune, trial, ray)

    bad = w.create_run(exp, "bad-job", t)
    b1 = w.create_run(exp, "worker_0 (main)", t, parent_run_id=bad)
    w.log_batch(b1, params={"strategy": "torch-ddp", "global_rank": 0, "global_world_size": "four"})
    b2 = w.create_run(exp, "worker_1", t, parent_run_id=bad)
    w.log_batch(b2, params={"strategy": "torch-ddp", "global_world_size": 2})
    for run in (b1, b2, bad):
        w.end_run(run, t + 1)
    ids["bad"] = (bad, b1, b2)

    running = w.create_run(exp, "running-job", t)
    r1 = _worker(w, exp, running, "torch-ddp", 2, 0, t)
    r2 = _worker(w, exp, running, "torch-ddp", 2, 1, t)
    w.end_run(r2, t + 1, status="KILLED")
    ids["running"] = (running, r1, r2)

    gone = w.create_run(exp, "deleted-job", t)
    g1 = _worker(w, exp, gone, "torch-ddp", 2, 0, t)
    for run in (g1, gone):
        w.end_run(run, t + 1)
        mlflow_api.client(uri).delete_run(run)
    ids["deleted"] = (gone, g1)

    empty = w.create_run(exp, "empty", t)
    w.end_run(empty, t + 1)
    ids["empty"] = empty
    ids["experiment_id"] = exp
    return ids


@pytest.fixture(scope="session")
def scaling_sqlite(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """(sqlite URI, run ids) of the sample experiment; read-only for tests."""
    root = tmp_path_factory.mktemp("scaling-sqlite")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    return uri, build_scaling_store(uri)


@pytest.fixture(scope="session")
def scaling_file_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """(path, run ids) of the sample experiment in an MLflow file store (itwinai's default)."""
    root = tmp_path_factory.mktemp("scaling-file") / "mllogs" / "mlflow"
    return str(root), build_scaling_store(str(root))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A real ``mlflow server`` on 127.0.0.1: yields (base URL, backend sqlite URI)."""
    import urllib.request

    root = tmp_path_factory.mktemp("mlflow-server")
    backend = f"sqlite:///{root / 'backend.db'}"
    port = _free_port()
    mlflow_bin = Path(sys.executable).parent / "mlflow"
    log = (root / "server.log").open("wb")
    cmd = [
        str(mlflow_bin),
        "server",
        "--backend-store-uri",
        backend,
        "--artifacts-destination",
        str(root / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=root,
        env={**os.environ, "MLFLOW_TRACKING_URI": ""},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start; see {root / 'server.log'}")
            time.sleep(0.5)
        yield url, backend
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
