"""Profiler traces matched to the MLflow worker runs they were recorded in: by run name, rank and
time, in real SQLite MLflow stores with traces written in itwinai's layout (and as artifacts).

Every store here is written run by run with chosen times; each trace's ``baseTimeNanoseconds``
puts its first profiler step a chosen number of seconds after its job's start.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_runner

from itwin_report.cli import main
from itwin_report.emulator import kineto
from itwin_report.traces.match import (
    TOLERANCE_NS,
    TraceFacts,
    layout_run_name,
    match_traces,
    name_time_ns,
    wall_clock_ns,
)

T0 = 1_700_000_000_000  # ms: the first job's start
S = 1_000  # ms per second
NS = 1_000_000  # ns per ms
EXPERIMENT = "traces"


@dataclass
class Job:
    """One job as written: a top-level run and worker runs of ``logged`` ranks."""

    name: str
    workers: int
    start_ms: int
    end_ms: int
    strategy: str = "torch-ddp"
    logged: tuple[int, ...] = (0,)
    top: str = ""
    runs: dict[int, str] | None = None  # rank -> worker run id, once written


def write_store(uri: str, jobs: list[Job], epochs: tuple[float, ...] = (12.0, 10.0, 10.0)) -> Any:
    """Write ``jobs`` (rank 0 logs epoch times; every worker logs its node) into ``uri``."""
    from itwin_report.emulator import mlflow_writer

    w = mlflow_writer.RunWriter(uri)
    exp = w.experiment_id(EXPERIMENT, mlflow_writer.artifact_location(uri, EXPERIMENT))
    for job in jobs:
        job.top = w.create_run(exp, job.name, job.start_ms)
        job.runs = {}
        for rank in job.logged:
            name = "worker_0 (main)" if rank == 0 else f"worker_{rank}"
            run = w.create_run(exp, name, job.start_ms, parent_run_id=job.top)
            params = {
                "strategy": job.strategy,
                "global_rank": rank,
                "global_world_size": job.workers,
                "hostname": f"node{rank // 4}",
            }
            points = [("epoch_time_s", t, job.start_ms + i * S, i) for i, t in enumerate(epochs)]
            w.log_batch(run, points if rank == 0 else [], params)
            job.runs[rank] = run
        for run in job.runs.values():
            w.end_run(run, job.end_ms)
        w.end_run(job.top, job.start_ms + 50)  # itwinai ends the top-level run at once
    return w


def base_ns(start_ms: int, after_s: float) -> int:
    """``baseTimeNanoseconds`` putting a trace's first step ``after_s`` after ``start_ms``."""
    return start_ms * NS + round(after_s * 1e9) - round(kineto.BASE_US * 1000)


def write_traces(
    root: Path,
    job: Job,
    specs: list[kineto.RankSpec] | None = None,
    after_s: float = 10.0,
    gz: bool = False,
) -> list[Path]:
    """One trace per rank of ``job`` in ``root/<run name>/torch-traces``, its first step
    ``after_s`` after the job's start; the name's time is the trace's end (PyTorch's stamp)."""
    specs = specs or kineto.job(job.workers)
    folder = root / job.name / "torch-traces"
    out = []
    for spec in specs:
        placed = replace(spec, base_ns=base_ns(job.start_ms, after_s))
        end_ns = placed.base_ns + round((kineto.BASE_US + spec.steps * spec.step_us) * 1000)
        out.append(kineto.write(placed, folder, gz=gz, stamp=end_ns))
    return out


def read(uri: str, paths: list[Path]) -> Any:
    from itwin_report.api import load, read_traces

    data = load(uri, EXPERIMENT)
    return data, read_traces(data, paths)


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


# ---------------------------------------------------------------- in real stores


def test_repeated_jobs_with_one_run_name_are_told_apart_by_time(tmp_path: Path, uri: str) -> None:
    # two jobs named ddp-4, 100 s apart, each running 60 s; only rank 0 logs (itwinai's default)
    first = Job("ddp-4", 4, T0, T0 + 60 * S)
    second = Job("ddp-4", 4, T0 + 100 * S, T0 + 160 * S)
    write_store(uri, [first, second])
    root = tmp_path / "traces"
    write_traces(root, first, after_s=10)
    # the second job computes 3 ms per step instead of 6 ms: its rows must say 4 x 3 ms
    write_traces(root, second, kineto.job(4, compute_us=3_000.0), after_s=10, gz=True)
    # a third set, 500 s after the first start: inside no run of ddp-4
    stray = Job("ddp-4", 4, T0 + 500 * S, T0 + 560 * S)
    (orphan,) = write_traces(root, stray, [kineto.RankSpec(rank=2, world_size=4)], after_s=1)
    _, found = read(uri, [root])
    assert first.runs is not None and second.runs is not None
    rows = {(r["job_id"], r["rank"]): r for r in found.ranks}
    assert sorted(rows) == sorted((j.top, r) for j in (first, second) for r in range(4))
    for rank in range(4):
        assert rows[(first.top, rank)]["compute_s"] == pytest.approx(4 * 6_000e-6)
        assert rows[(second.top, rank)]["compute_s"] == pytest.approx(4 * 3_000e-6)
    # rank 0 has a worker run in each job; ranks 1-3 belong to the job without one
    assert rows[(first.top, 0)]["run_id"] == first.runs[0]
    assert rows[(second.top, 0)]["run_id"] == second.runs[0]
    assert rows[(first.top, 3)]["run_id"] == ""
    (warning,) = found.warnings  # its first event: 500 s + 1 s - 40 µs after T0 (22:13:20)
    assert warning == (
        f"{orphan}: its time (2023-11-14 22:21:40 UTC) lies outside every worker run of run 'ddp-4'"
    )
    assert warning.table == "time_breakdown" and warning.kind == "unmatched"


def test_a_rank_twice_same_window_once_and_two_windows_summed(tmp_path: Path, uri: str) -> None:
    job = Job("ddp-4", 4, T0, T0 + 60 * S, logged=(0, 1, 2, 3))
    write_store(uri, [job])
    root = tmp_path / "traces"
    write_traces(root, job, after_s=10)
    folder = root / "ddp-4" / "torch-traces"
    # rank 1 again: the same window copied under another name (same start)
    copy = folder / "worker_1.9.pt.trace.json"
    copy.write_bytes(next(folder.glob("worker_1.*.pt.trace.json")).read_bytes())
    # rank 2: a second profiling window 30 s later
    write_traces(root, job, [kineto.RankSpec(rank=2, world_size=4)], after_s=40)
    _, found = read(uri, [root])
    rows = {r["rank"]: r for r in found.ranks}
    assert [rows[r]["windows"] for r in range(4)] == [1, 1, 2, 1]
    # two windows of 4 analysed steps: 8 steps, 8 x 6 ms of compute, spans added (each 4 x 10
    # ms and the last step's 0.5 ms copy, launched before its device-side annotation starts)
    assert rows[2]["steps"] == 8 and rows[2]["compute_s"] == pytest.approx(8 * 6_000e-6)
    assert rows[2]["span_s"] == pytest.approx(2 * 40_500e-6)
    assert rows[2]["compute_pct"] == 59.26  # 48 / 81
    assert rows[2]["compute_per_step_s"] == pytest.approx(6e-3)
    assert rows[1]["files"] == [str(p) for p in sorted(folder.glob("worker_1.*"))][:1]
    (warning,) = found.warnings
    assert warning.startswith(f"{copy}: the same profiling window of rank 1 as ")
    assert warning.endswith("counted once") and warning.kind == "duplicate"
    assert found.stragglers == []


def test_traces_logged_as_artifacts_are_found_without_traces(tmp_path: Path, uri: str) -> None:
    job = Job("ddp-4", 4, T0, T0 + 60 * S, logged=(0, 1, 2, 3))
    w = write_store(uri, [job])
    staged = write_traces(tmp_path / "staged", job, kineto.job(4, slow_rank=2), after_s=5)
    assert job.runs is not None
    for rank, path in enumerate(staged):
        w.log_text(job.runs[rank], path.read_text(), f"profiler/traces/{path.name}")
    result = cli_runner().invoke(
        main,
        [
            *("generate-scalability-report", "--tracking-uri", uri, "-e", EXPERIMENT),
            *("--format", "json", "--no-plots", "-q"),
        ],
    )
    assert result.exit_code == 0, result.stderr
    import json

    body = json.loads(result.stdout)
    ranks = body["trace_ranks"]
    assert [(r["rank"], r["run_id"]) for r in ranks] == [(r, job.runs[r]) for r in range(4)]
    assert all(r["files"][0].endswith(f"/profiler/traces/{staged[r['rank']].name}") for r in ranks)
    (slow,) = body["stragglers"]
    assert slow["ranks"] == [2] and slow["source"] == "traces"
    assert slow["text"].startswith("rank 2 (node0): compute per step 1.20× the median of 4 ranks")
    assert body["time_breakdown"][0]["bound_by"] == "a straggler"


def test_logged_traces_are_found_from_the_loaded_locations(tmp_path: Path, uri: str) -> None:
    """A SQLite store is read once: the traces lookup uses the artifact folders kept at load,
    so it still finds the traces after the store file is gone."""
    from itwin_report import api

    job = Job("ddp-2", 2, T0, T0 + 60 * S, logged=(0, 1))
    w = write_store(uri, [job])
    staged = write_traces(tmp_path / "staged", job, kineto.job(2), after_s=5)
    assert job.runs is not None
    for rank, path in enumerate(staged):
        w.log_text(job.runs[rank], path.read_text(), f"profiler/traces/{path.name}")
    data = api.load(uri, EXPERIMENT)
    assert set(data.artifact_uris) == set(job.runs.values())
    db = Path(uri.removeprefix("sqlite:///"))
    db.rename(db.with_suffix(".moved"))
    found = api.read_traces(data, tracking_uri=uri)
    assert sorted(r["rank"] for r in found.ranks) == [0, 1]


def write_server_job(url: str, experiment: str, job: Job) -> Any:
    """``job`` as runs of a server's ``experiment`` (rank 0 logs an epoch time), left running;
    the writer, to upload artifacts and end the runs with."""
    from itwin_report.emulator import mlflow_writer

    w = mlflow_writer.RunWriter(url)
    exp = w.experiment_id(experiment)
    job.top = w.create_run(exp, job.name, job.start_ms)
    job.runs = {}
    for rank in range(job.workers):
        run = w.create_run(exp, f"worker_{rank}", job.start_ms, parent_run_id=job.top)
        params = {"strategy": job.strategy, "global_rank": rank, "global_world_size": job.workers}
        w.log_batch(run, [("epoch_time_s", 10.0, job.start_ms, 0)] if rank == 0 else [], params)
        job.runs[rank] = run
    return w


@pytest.mark.server
def test_trace_artifacts_on_a_server_are_downloaded(
    tmp_path: Path, mlflow_server: tuple[str, str]
) -> None:
    from itwin_report.api import load, read_traces
    from itwin_report.emulator import mlflow_writer
    from itwin_report.store import mlflow_api

    url, backend = mlflow_server
    job = Job("remote-4", 4, T0, T0 + 60 * S, logged=(0, 1, 2, 3))
    w = write_server_job(url, "remote-traces", job)
    staged = write_traces(tmp_path, job, after_s=5, gz=True)
    client = mlflow_api.client(url)
    for rank, path in enumerate(staged):  # gzipped: binary, uploaded as a file
        with mlflow_writer.writing_environment(url):
            client.log_artifact(job.runs[rank], str(path), artifact_path="deep/er/traces")
    for run in [*job.runs.values(), job.top]:
        w.end_run(run, job.end_ms)
    data = load(url, "remote-traces")
    log = Path(backend.removeprefix("sqlite:///")).parent / "server.log"
    before = log.read_text(encoding="utf-8", errors="replace").count("/runs/search")
    found = read_traces(data, tracking_uri=url)
    assert [(r["rank"], r["run_id"]) for r in found.ranks] == [(r, job.runs[r]) for r in range(4)]
    if before:  # the server logs its requests (MLflow 3; 2.x's gunicorn keeps no access log)
        time.sleep(0.5)  # the access log is written as the server answers
        after = log.read_text(encoding="utf-8", errors="replace").count("/runs/search")
        assert after == before, "the lookup asked the server for the runs it had loaded"
    assert found.ranks[0]["compute_s"] == pytest.approx(4 * 6_000e-6)
    # named by their address on the server, not by the temporary download
    assert found.ranks[0]["files"][0].endswith(f"/deep/er/traces/{staged[0].name}")
    assert "itwin-report-traces-" not in found.ranks[0]["files"][0]
    assert found.warnings == []


@pytest.mark.server
def test_a_server_is_asked_only_about_runs_that_logged_artifacts(
    tmp_path: Path, mlflow_server: tuple[str, str]
) -> None:
    """Of 4 workers only rank 0 logged a trace: the experiment's artifact folder is listed once
    and the 3 others' folders, which do not exist, are never asked for."""
    from itwin_report.api import load, read_traces
    from itwin_report.emulator import mlflow_writer
    from itwin_report.store import mlflow_api

    url, backend = mlflow_server
    job = Job("sparse-4", 4, T0, T0 + 60 * S, logged=(0, 1, 2, 3))
    w = write_server_job(url, "sparse-traces", job)
    staged = write_traces(tmp_path, job, after_s=5, gz=True)
    with mlflow_writer.writing_environment(url):
        mlflow_api.client(url).log_artifact(job.runs[0], str(staged[0]), "deep/er/traces")
    for run in [*job.runs.values(), job.top]:
        w.end_run(run, job.end_ms)
    data = load(url, "sparse-traces")
    log = Path(backend.removeprefix("sqlite:///")).parent / "server.log"
    start = len(log.read_bytes())
    found = read_traces(data, tracking_uri=url)
    assert [(r["rank"], r["run_id"]) for r in found.ranks] == [(0, job.runs[0])]
    time.sleep(0.5)  # the access log is written as the server answers
    asked = log.read_bytes()[start:].decode("utf-8", errors="replace")
    if "HTTP/1.1" in asked:  # the server logs its requests (MLflow 3; 2.x keeps no access log)
        assert "mlflow-artifacts/artifacts" in asked
        for rank in (1, 2, 3):
            assert job.runs[rank] not in asked, f"rank {rank}'s missing folder was asked for"


def test_traces_of_runs_left_out_are_not_read(tmp_path: Path, uri: str) -> None:
    ddp4, ddp8 = Job("ddp-4", 4, T0, T0 + 60 * S), Job("ddp-8", 8, T0 + 100 * S, T0 + 160 * S)
    write_store(uri, [ddp4, ddp8])
    root = tmp_path / "traces"
    write_traces(root, ddp4)
    write_traces(root, ddp8)
    from itwin_report.api import load, read_traces

    data = load(uri, EXPERIMENT, run_names=["ddp-4"])
    found = read_traces(data, root)
    assert {r["rank"] for r in found.ranks} == {0, 1, 2, 3}
    assert found.warnings == ["8 trace files of runs not in the report left out: ddp-8"]


def test_traces_on_a_missing_folder_is_one_line_and_exit_1(tmp_path: Path, uri: str) -> None:
    write_store(uri, [Job("ddp-4", 4, T0, T0 + 60 * S)])
    missing = tmp_path / "no-such-folder"
    args = ["generate-scalability-report", "--tracking-uri", uri, "-e", EXPERIMENT, "--no-plots"]
    result = cli_runner().invoke(main, [*args, "--traces", str(missing)])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"Error: no such file or folder: {missing}\n"


def test_an_empty_traces_folder_is_a_warning(tmp_path: Path, uri: str) -> None:
    write_store(uri, [Job("ddp-4", 4, T0, T0 + 60 * S)])
    (tmp_path / "empty").mkdir()
    _, found = read(uri, [tmp_path / "empty"])
    assert found.ranks == []
    assert found.warnings == [f"no trace files (*.pt.trace.json[.gz]) found in {tmp_path}/empty"]


# ---------------------------------------------------------------- the matching rules alone


def _runs(*jobs: tuple[str, str, int, list[tuple[int, float, float]]]) -> list[dict[str, Any]]:
    """Run records: (job id, run name, workers, [(rank, start ms, end ms)])."""
    return [
        {
            "run_id": f"{job}-{rank}",
            "job_id": job,
            "run_name": name,
            "strategy": "ddp",
            "workers": workers,
            "rank": rank,
            "start_time": start,
            "end_time": end,
        }
        for job, name, workers, ranks in jobs
        for rank, start, end in ranks
    ]


def _trace(rank: int | None, at_ms: float, name: str | None = "x", **kw: Any) -> TraceFacts:
    return TraceFacts(f"t{rank}@{at_ms}", rank, kw.get("world_size"), at_ms * NS, name, None)


def test_time_windows_tolerance_open_ends_and_ambiguity() -> None:
    runs = _runs(
        ("a", "x", 4, [(0, 1_000, 2_000)]),
        ("b", "x", 4, [(0, 10_000, math.nan)]),  # never ended: open until c starts
        ("c", "x", 4, [(0, 20_000, 21_000)]),
    )
    late = 2_000 + TOLERANCE_NS / NS / 4  # just after a's end: within the tolerance
    found = match_traces(
        runs,
        [
            _trace(0, 1_500),  # inside a
            _trace(3, 1_500),  # rank 3 has no worker run: the job's window, run id ""
            _trace(1, late),
            _trace(2, 15_000),  # inside b's open window
            _trace(0, 20_500),  # inside c (b's open end closes at c's start)
            _trace(0, 6_000),  # between a and b, beyond the tolerance of both
        ],
    )
    got = [(m.file, m.job_id, m.run_id) for m in found.matched]
    assert sorted(got) == sorted(
        [
            ("t0@1500", "a", "a-0"),
            ("t3@1500", "a", ""),
            (f"t1@{late}", "a", ""),
            ("t2@15000", "b", ""),
            ("t0@20500", "c", "c-0"),
        ]
    )
    (warning,) = found.warnings
    assert warning == (
        "t0@6000: its time (1970-01-01 00:00:06 UTC) lies outside every worker run of run 'x'"
    )
    # a rank with a worker run of its own is held by that run's window, not the job's
    own = _runs(
        ("a", "x", 4, [(0, 1_000, 2_000), (1, 3_000, 4_000)]), ("b", "x", 4, [(0, 3_000, 4_000)])
    )
    assert [m.job_id for m in match_traces(own, [_trace(0, 3_500)]).matched] == ["b"]
    both = _runs(("a", "x", 4, [(0, 1_000, 5_000)]), ("b", "x", 4, [(0, 2_000, 6_000)]))
    (warning,) = match_traces(both, [_trace(0, 3_000)]).warnings
    assert warning == "t0@3000: its time lies in 2 jobs of run 'x' (a; b): ambiguous"


def test_rank_world_size_name_and_unknown_time() -> None:
    runs = _runs(("a", "x", 4, [(0, 1_000, 2_000)]), ("b", "y", 8, [(0, 1_000, 2_000)]))
    found = match_traces(
        runs,
        [
            _trace(5, 1_500),  # rank 5 of run x (4 workers): none
            _trace(5, 1_500, name="y"),  # run y has 8 workers: b
            _trace(1, 1_500, name="y", world_size=4),  # says 4 workers: not b
            _trace(None, 1_500),  # no rank
            _trace(2, math.nan, name="y"),  # no time, one job of that name: b
            _trace(2, 1_500, name=None),  # no run name: any job; both hold the time
        ],
    )
    assert sorted((m.file, m.job_id) for m in found.matched) == [("t2@nan", "b"), ("t5@1500", "b")]
    assert found.warnings == [
        "t5@1500: no job of run 'x' has rank 5",
        "t1@1500: no job of run 'y' has rank 1 of 4",
        "tNone@1500: rank unknown (no distributedInfo, no worker_<rank> in the name): not matched",
        "t2@1500: its time lies in 2 jobs of any run (a; b): ambiguous",
    ]


def test_what_a_path_and_a_clock_say() -> None:
    path = Path("/logs/ddp-4/torch-traces/worker_3.1700000012345678901.pt.trace.json.gz")
    assert layout_run_name(path) == "ddp-4"
    assert layout_run_name(Path("/logs/worker_3.1.pt.trace.json")) is None
    assert name_time_ns(path) == pytest.approx(1_700_000_012_345_678_901, abs=1e3)  # a float
    assert math.isnan(name_time_ns(Path("worker_3.1.pt.trace.json")))
    assert wall_clock_ns(1e18, 2.5) == 1e18 + 2_500
    assert wall_clock_ns(math.nan, 1.7e15) == 1.7e18  # older PyTorch: µs since the epoch
    assert math.isnan(wall_clock_ns(math.nan, 2.5e6))  # profiler clock, no base: unknown
