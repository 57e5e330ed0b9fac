"""The loader on real sqlite and file stores: frames, warnings, readers agreeing, read-only."""

from __future__ import annotations

import hashlib
import math
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import PERFORMANCE_MERGED, PERFORMANCE_ONE, epoch_time, gpu_power

from itwin_report.data.rundata import RunData
from itwin_report.store import _load, load_experiment
from itwin_report.store.api_reader import ApiReader
from itwin_report.store.file_reader import FileStoreReader
from itwin_report.store.sql_open import open_sql_reader
from itwin_report.util.errors import ReportError, StoreError

Store = tuple[str, dict[str, Any]]


def load(uri: str, **kw: Any) -> RunData:
    return load_experiment(uri, kw.pop("experiment", "scaling"), show_progress=False, **kw)


def load_api(uri: str, **kw: Any) -> RunData:
    reader = ApiReader(uri)
    return _load(reader, uri, "scaling", kw.get("run_names", ()), False, False)


def test_worker_runs_and_jobs(scaling_sqlite: Store) -> None:
    uri, ids = scaling_sqlite
    data = load(uri)
    runs = data.runs
    # kept: ddp-4 (2 + 1 workers), ddp-8 1, deepspeed-4 2, deepspeed-8 1, flat-2 1, tune-ray 2
    assert len(runs) == 10
    counts = runs.groupby("run_name").size().to_dict()
    assert counts == {
        "ddp-4": 3,
        "ddp-8": 1,
        "deepspeed-4": 2,
        "deepspeed-8": 1,
        "flat-2": 1,
        "tune-ray": 2,
    }
    # the two ddp-4 repetitions are two jobs, each its top-level run
    ddp4_tops = {top for name, top, _ in ids["jobs"] if name == "ddp-4"}
    assert set(runs.loc[runs["run_name"] == "ddp-4", "job_id"]) == ddp4_tops
    # flat layout: its own job
    flat = runs[runs["run_name"] == "flat-2"].iloc[0]
    assert (flat["run_id"], flat["job_id"], flat["strategy"], flat["workers"]) == (
        ids["flat"],
        ids["flat"],
        "horovod",
        2,
    )
    assert math.isnan(flat["probing_interval"])
    # Ray: job = trial (direct parent), run_name = tune run (top-level ancestor)
    _, trial, ray = ids["ray"]
    ray_rows = runs[runs["run_name"] == "tune-ray"]
    assert set(ray_rows["run_id"]) == set(ray) and set(ray_rows["job_id"]) == {trial}
    assert list(ray_rows["rank"]) == [0, 1]
    assert set(runs["status"]) == {"FINISHED"}
    assert runs["probing_interval"].dropna().eq(1.0).all()
    assert runs["samples_per_epoch"].isna().all()


def test_metrics_values_and_nan(scaling_sqlite: Store) -> None:
    uri, ids = scaling_sqlite
    m = load(uri).metrics
    assert set(m["key"]) == {"epoch_time_s", "gpu_power_W", "gpu_utilization_percent"}
    # epoch_time_s: 3 per job of JOBS (5 jobs), 3 for tune-ray, 1 for flat-2
    assert (m["key"] == "epoch_time_s").sum() == 5 * 3 + 3 + 1
    # gpu_power_W: 4 samples for each logging rank: 7 in JOBS + 2 Ray
    assert (m["key"] == "gpu_power_W").sum() == 9 * 4
    first_ddp4 = ids["jobs"][0][2]
    e = m[(m["run_id"] == first_ddp4[0]) & (m["key"] == "epoch_time_s")]
    assert list(e["value"]) == [epoch_time(4, s) for s in range(3)] == [25.0, 26.0, 27.0]
    assert list(e["step"]) == [0, 1, 2]
    p = m[(m["run_id"] == first_ddp4[1]) & (m["key"] == "gpu_power_W")]
    assert list(p["value"]) == [gpu_power(1, s) for s in range(4)] == [210.0, 211.0, 212.0, 213.0]
    ddp8 = ids["jobs"][2][2][0]
    u = m[(m["run_id"] == ddp8) & (m["key"] == "gpu_utilization_percent")]
    # the NaN point logged later at step 1 is dropped as invalid before repeated points are
    # resolved, so it never hides the valid sample of that step
    assert u["step"].tolist() == [0, 1, 2, 3]
    assert u["value"].tolist() == [50.0, 51.0, 52.0, 53.0]
    # metrics of skipped runs are not there
    skipped = {*ids["running"][1:], *ids["deleted"], *ids["bad"]}
    assert not set(m["run_id"]) & skipped


def test_artifacts(scaling_sqlite: Store) -> None:
    uri, ids = scaling_sqlite
    data = load(uri)
    prof = data.profiles
    assert list(prof["name"]) == ["aten::mm", "nccl:all_reduce", "ProfilerStep*"]
    assert prof["self_cuda_time_total"].sum() == 900.5  # 600 + 300.5 + 0
    assert set(prof["run_id"]) == {ids["jobs"][0][2][0]}
    perf = data.performance.set_index("run_id")
    assert len(perf) == 2
    one = perf.loc[ids["jobs"][2][2][0]]
    assert one["total_samples"] == PERFORMANCE_ONE["total_samples"] == 1000
    assert bool(one["suspected_input_bottleneck"]) is True and one["records"] == 1
    merged = perf.loc[ids["jobs"][4][2][0]]
    assert merged["samples_per_sec"] == PERFORMANCE_MERGED["samples_per_sec"] == 100.0
    assert bool(merged["suspected_input_bottleneck"]) is False and merged["records"] == 3


def test_warnings(scaling_sqlite: Store) -> None:
    uri, ids = scaling_sqlite
    warnings = load(uri).warnings
    ds4 = ids["jobs"][3][2]
    assert warnings == [
        "skipped 1 worker run(s) of 'bad-job': global_world_size is not an integer",
        "skipped 1 worker run(s) of 'bad-job': no global_rank param",
        "skipped 2 unfinished runs of 'running-job' (status KILLED/RUNNING); "
        "use --include-unfinished to keep them",
        f"worker run {ds4[0][:8]} (rank 0) of deepspeed-4: malformed performance/performance.json"
        " (Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); ignored",
        f"worker run {ds4[1][:8]} (rank 1) of deepspeed-4: malformed "
        "torch_profiling_averages/torch_profiling_averages.csv (no column name, "
        "self_cuda_time_total); ignored",
        "dropped 1 gpu_utilization_percent point(s) of 'ddp-8': not >= 0 and <= 100 (1 NaN)",
        # ddp-8's NaN repeats step 1: once it is dropped, no point repeats another
    ]


def test_include_unfinished(scaling_sqlite: Store) -> None:
    uri, _ = scaling_sqlite
    data = load(uri, include_unfinished=True)
    assert len(data.runs) == 12  # the 10 + running-job's two workers
    rows = data.runs[data.runs["run_name"] == "running-job"]
    assert sorted(rows["status"]) == ["KILLED", "RUNNING"]
    assert not any("unfinished" in w for w in data.warnings)


def test_run_name_filter(scaling_sqlite: Store) -> None:
    uri, _ = scaling_sqlite
    data = load(uri, run_names=["ddp-4", "tune-ray"])
    assert sorted(data.runs["run_name"]) == ["ddp-4"] * 3 + ["tune-ray"] * 2
    assert set(data.metrics["run_id"]) == set(data.runs["run_id"])
    assert not data.warnings  # bad-job and running-job were filtered out before checking
    with pytest.raises(ReportError) as err:
        load(uri, run_names=["ddp-4", "nope"])
    assert str(err.value) == (
        "no top-level run named 'nope' in experiment 'scaling'; runs: bad-job, ddp-4, ddp-8, "
        "deepspeed-4, deepspeed-8, empty, flat-2, running-job, tune-ray"
    )


def _sorted(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    return frame.sort_values(by).reset_index(drop=True)


def assert_same(a: RunData, b: RunData, artifacts: bool = True) -> None:
    pd.testing.assert_frame_equal(_sorted(a.runs, ["run_id"]), _sorted(b.runs, ["run_id"]))
    order = ["run_id", "key", "step", "timestamp", "value"]
    pd.testing.assert_frame_equal(_sorted(a.metrics, order), _sorted(b.metrics, order))
    if artifacts:
        pd.testing.assert_frame_equal(a.profiles, b.profiles)
        pd.testing.assert_frame_equal(a.performance, b.performance)
        assert a.warnings == b.warnings


def test_sql_and_api_readers_agree(scaling_sqlite: Store) -> None:
    uri, _ = scaling_sqlite
    assert open_sql_reader(uri) is not None  # the direct path is the one load_experiment takes
    assert_same(load(uri), load_api(uri))


def test_file_store(scaling_file_store: Store, scaling_sqlite: Store) -> None:
    path, _ = scaling_file_store
    direct = load(path)
    assert_same(direct, load_api(path))  # FileStoreReader == MLflow's client on the same store
    # same content as the sqlite store built from the same description (ids differ)
    sql = load(scaling_sqlite[0])
    cols = ["run_name", "strategy", "workers", "rank", "probing_interval", "status"]
    pd.testing.assert_frame_equal(_sorted(direct.runs[cols], cols), _sorted(sql.runs[cols], cols))
    assert len(direct.metrics) == len(sql.metrics)
    assert direct.metrics["value"].sum() == sql.metrics["value"].sum()
    assert len(direct.warnings) == len(sql.warnings)
    uri_form = Path(path).resolve().as_uri()  # file:///... names the same store
    assert len(load(uri_form).runs) == 10


def _fingerprint(path: Path) -> list[tuple[str, int, int, str]]:
    out = []
    for f in sorted(path.rglob("*")):
        digest = hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else ""
        out.append((str(f.relative_to(path)), f.stat().st_mtime_ns, f.stat().st_size, digest))
    return out


def test_sqlite_store_is_not_written(scaling_sqlite: Store, tmp_path: Path) -> None:
    uri, _ = scaling_sqlite
    db = Path(uri.removeprefix("sqlite:///"))
    copy = tmp_path / "copy"
    shutil.copytree(db.parent, copy)  # a private copy: other tests read the original
    before = _fingerprint(copy)
    load(f"sqlite:///{copy / 'mlflow.db'}")
    load(f"sqlite:///{copy / 'mlflow.db'}", run_names=["ddp-8"], include_unfinished=True)
    assert _fingerprint(copy) == before  # no byte, mtime or new file (-journal, -wal) changed


def test_file_store_is_not_written(scaling_file_store: Store, tmp_path: Path) -> None:
    path, _ = scaling_file_store
    copy = tmp_path / "mlflow"
    shutil.copytree(path, copy)
    shutil.rmtree(copy / ".trash")  # MLflow's own FileStore would recreate this
    before = _fingerprint(copy)
    assert len(load(str(copy)).runs) == 10
    assert _fingerprint(copy) == before


def test_experiment_choice(scaling_sqlite: Store, tmp_path: Path) -> None:
    uri, _ = scaling_sqlite
    # "Default" (created by MLflow, no runs) does not count: the one with runs is used
    assert load_experiment(uri, None, show_progress=False).experiment == "scaling"
    with pytest.raises(StoreError) as err:
        load(uri, experiment="nope")
    assert str(err.value) == "no experiment named 'nope'; experiments: Default, scaling"

    from itwin_report.emulator import mlflow_writer

    two = f"sqlite:///{tmp_path / 'two.db'}"
    w = mlflow_writer.RunWriter(two)
    for name in ("a", "b"):
        w.create_run(w.experiment_id(name), "r", 0)
    with pytest.raises(StoreError) as err:
        load_experiment(two, None, show_progress=False)
    assert str(err.value) == (
        "the store holds 3 experiments; choose one with --experiment-name: Default, a, b"
    )
    data = load_experiment(two, "a", show_progress=False)  # a run with no params: ignored
    assert data.runs.empty and data.warnings == []


def test_flat_run_without_params_is_warned(tmp_path: Path) -> None:
    from itwin_report.emulator import mlflow_writer

    uri = f"sqlite:///{tmp_path / 'x.db'}"
    w = mlflow_writer.RunWriter(uri)
    exp = w.experiment_id("x")
    run = w.create_run(exp, "plain", 0)
    w.log_batch(run, params={"lr": 0.1})
    w.end_run(run, 1)
    data = load_experiment(uri, "x", show_progress=False)
    assert data.warnings == [
        "skipped 1 run(s) of 'plain': no strategy/global_world_size/global_rank params"
    ]


def test_progress_on_stderr(scaling_sqlite: Store, capsys: pytest.CaptureFixture[str]) -> None:
    uri, _ = scaling_sqlite
    load_experiment(uri, "scaling", show_progress=True)
    out, err = capsys.readouterr()
    assert out == ""
    assert "Loading metrics (70) ..." in err  # 10 workers x 7 keys
    assert "Reading artifacts: 10/10 done" in err


def test_file_store_reader_skips_deleted(scaling_file_store: Store) -> None:
    path, ids = scaling_file_store
    reader = FileStoreReader(path)
    exp = next(i for i, n, _ in reader.experiments() if n == "scaling")
    runs, _ = reader.runs(exp, ["strategy"])
    assert not set(runs["run_id"]) & set(ids["deleted"])
    # JOBS workers 7 + their tops 5 + flat 1 + ray 4 + bad-job 3 + running-job 3 + empty 1
    assert len(runs) == 7 + 5 + 1 + 4 + 3 + 3 + 1
