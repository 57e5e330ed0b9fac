"""Emulations written for real (bulk SQLite, file store, server), read back by MLflow."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import cli_runner

from itwin_report.cli.emulate_cmd import emulate_command
from itwin_report.data.rundata import PERFORMANCE_ARTIFACT, PROFILE_ARTIFACT
from itwin_report.emulator import timeline
from itwin_report.emulator.options import EmulationOptions
from itwin_report.emulator.writer import job_rng, run_emulation
from itwin_report.store import mlflow_api
from itwin_report.util.errors import ReportError

SMALL = ("samples_per_epoch=2000", "probing_interval=2")
OPTIONS = EmulationOptions(
    strategies=("deepspeed", "torch-ddp"),
    workers=(2, 3),
    epochs=2,
    repeats=1,
    seed=5,
    overrides=SMALL,
    experiment_name="small",
)


def _uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"


def _runs(uri: str, name: str):
    client = mlflow_api.client(uri)
    exp = client.get_experiment_by_name(name)
    assert exp is not None
    return client, client.search_runs([exp.experiment_id], max_results=1000)


def test_bulk_sqlite_emulation_reads_back_with_mlflow(tmp_path: Path) -> None:
    uri = _uri(tmp_path)
    result = run_emulation(OPTIONS, uri)
    assert (result.jobs, result.worker_runs) == (4, 10)  # 2 strategies x (2 + 3) ranks
    client, runs = _runs(uri, "small")
    top = {r.info.run_id: r for r in runs if "mlflow.parentRunId" not in r.data.tags}
    workers = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.info.run_name for r in top.values()) == [
        "deepspeed-2", "deepspeed-3", "torch-ddp-2", "torch-ddp-3",
    ]  # fmt: skip
    assert len(workers) == 10
    assert {r.info.status for r in runs} == {"FINISHED"}
    points = 0
    for w in workers:
        parent = top[w.data.tags["mlflow.parentRunId"]]
        strategy, n = parent.info.run_name.rsplit("-", 1)
        params = w.data.params
        assert params["strategy"] == strategy
        assert params["global_world_size"] == n
        rank = int(params["global_rank"])
        assert w.info.run_name == ("worker_0 (main)" if rank == 0 else f"worker_{rank}")
        assert params["probing_interval"] == "2.0"
        assert params["samples_per_epoch"] == "2000"
        assert params["batch_size"] == "32"
        assert params["preset"] == "default" and params["seed"] == "5"
        assert w.info.start_time == parent.info.start_time
        assert w.info.end_time == parent.info.end_time
        files = {f.path for f in client.list_artifacts(w.info.run_id, "performance")}
        files |= {f.path for f in client.list_artifacts(w.info.run_id, "torch_profiling_averages")}
        assert files == {PERFORMANCE_ARTIFACT, PROFILE_ARTIFACT}
        # the same job rebuilt from its seed gives the points that must be stored
        ranks = list(range(int(n)))
        job = timeline.build_job(
            OPTIONS.params(), strategy, int(n), 0, 0, job_rng(5, strategy, int(n), 0), ranks
        )
        expected_points = job.ranks[rank].points
        for key in {p[0] for p in expected_points}:
            history = client.get_metric_history(w.info.run_id, key)
            expected = sorted((p[3], p[1]) for p in expected_points if p[0] == key)
            assert sorted((m.step, m.value) for m in history) == expected, key
            points += len(history)
            # MLflow's latest value is the last step's
            assert w.data.metrics[key] == pytest.approx(expected[-1][1])
        assert len(client.get_metric_history(w.info.run_id, "epoch_time_s")) == (
            2 if rank == 0 else 0
        )
    assert points == result.metric_points
    local = client.download_artifacts(workers[0].info.run_id, PERFORMANCE_ARTIFACT, str(tmp_path))
    perf = json.loads(Path(local).read_text())
    assert perf["samples_per_sec"] == pytest.approx(perf["total_samples"] / perf["total_time"])
    # every artifact lies under artifacts/ beside the database
    art = tmp_path / "store" / "artifacts" / "small"
    assert len(list(art.glob("*/artifacts/*/*"))) == 20


def test_cli_refuses_non_empty_experiment(tmp_path: Path) -> None:
    uri = _uri(tmp_path)
    args = [
        "--strategies", "horovod", "--workers", "2", "--epochs", "1", "--repeats", "1",
        "--set", "samples_per_epoch=1000", "--log-on-workers", "0",
        "--experiment-name", "busy", "--tracking-uri", uri,
        "--truth", str(tmp_path / "truth.json"),
    ]  # fmt: skip
    first = cli_runner().invoke(emulate_command, args)
    assert first.exit_code == 0, first.output
    assert "itwin-report generate-scalability-report --experiment-name busy" in first.stdout
    assert "jobs:          1 top-level run, 1 worker run" in first.stdout
    assert f"artifacts:     {(tmp_path / 'store' / 'artifacts' / 'busy').as_uri()}" in first.stdout
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert truth["configurations"][0]["workers"] == 2
    second = cli_runner().invoke(emulate_command, args)
    assert second.exit_code == 1
    assert isinstance(second.exception, ReportError)
    assert "'busy' already holds runs" in str(second.exception)
    assert "--append" in str(second.exception)
    third = cli_runner().invoke(emulate_command, [*args, "--append"])
    assert third.exit_code == 0, third.output
    _, runs = _runs(uri, "busy")
    assert len(runs) == 4  # two jobs, each a top-level run and rank 0's run


def _cut_options() -> EmulationOptions:
    return EmulationOptions(
        strategies=("torch-ddp",), workers=(2, 3), epochs=1, repeats=1,
        overrides=("samples_per_epoch=1000",), experiment_name="cut",
    )  # fmt: skip


def _stopper(error: type):
    def hook(event: str, job: int) -> None:
        if job == 1 and event == "worker-written":
            raise error("stop")

    return hook


@pytest.mark.parametrize(
    ("error", "status"), [(KeyboardInterrupt, "KILLED"), (RuntimeError, "FAILED")]
)
def test_interrupted_client_emulation_marks_open_runs(
    tmp_path: Path, error: type, status: str
) -> None:
    uri = str(tmp_path / "mlruns")  # a file store: written run by run through MLflow's client
    mlflow_api.client(uri).create_experiment("other")  # an existing store: its runs are kept
    with pytest.raises(error):
        run_emulation(_cut_options(), uri, hook=_stopper(error))
    _, runs = _runs(uri, "cut")
    by_name: dict[str, list[str]] = {}
    for r in runs:
        by_name.setdefault(r.info.run_name, []).append(r.info.status)
    assert by_name["torch-ddp-2"] == ["FINISHED"]
    assert by_name["torch-ddp-3"] == [status]
    # job 0's two workers finished; job 1's three workers were all left open -> status
    assert sorted(by_name["worker_1"]) == sorted(["FINISHED", status])
    assert by_name["worker_2"] == [status]
    assert sorted(by_name["worker_0 (main)"]) == sorted(["FINISHED", status])


def test_interrupted_sqlite_emulation_keeps_nothing(tmp_path: Path) -> None:
    uri = _uri(tmp_path)
    run_emulation(EmulationOptions(**{**_cut_options().__dict__, "experiment_name": "a"}), uri)
    db = sqlite3.connect(tmp_path / "store" / "mlflow.db")
    counts = [db.execute(f"SELECT COUNT(*) FROM {t}").fetchone() for t in ("runs", "metrics")]
    with pytest.raises(KeyboardInterrupt):
        run_emulation(_cut_options(), uri, hook=_stopper(KeyboardInterrupt))
    assert [db.execute(f"SELECT COUNT(*) FROM {t}").fetchone() for t in ("runs", "metrics")] == (
        counts
    )
    db.close()
    art = tmp_path / "store" / "artifacts" / "cut"
    assert not art.exists() or list(art.iterdir()) == []
    # the store is still usable: the same emulation then succeeds
    result = run_emulation(_cut_options(), uri)
    assert result.worker_runs == 5


@pytest.mark.parametrize("name", ["../escape", "/abs/path", "a/b/../../c", ".."])
def test_artifacts_stay_under_the_root_whatever_the_name(tmp_path: Path, name: str) -> None:
    uri = _uri(tmp_path / "deep")
    options = EmulationOptions(
        strategies=("horovod",), workers=(2,), epochs=1, repeats=1,
        overrides=("samples_per_epoch=500",), experiment_name=name,
    )  # fmt: skip
    run_emulation(options, uri)
    root = (tmp_path / "deep" / "store" / "artifacts").resolve()
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix in (".csv", ".json")]
    assert len(files) == 4  # 2 workers x (profile CSV + performance.json)
    assert all(root in f.resolve().parents for f in files), files
    _, runs = _runs(uri, name)
    assert len(runs) == 3


def test_http_emulation_uploads_artifacts_through_the_server(
    mlflow_server: tuple[str, str],
) -> None:
    url, _ = mlflow_server
    options = EmulationOptions(
        strategies=("torch-ddp",), workers=(1, 2), epochs=1, repeats=1, itwinai_only=True,
        overrides=("samples_per_epoch=500",), experiment_name="http-artifacts",
    )  # fmt: skip
    result = run_emulation(options, url)
    assert result.worker_runs == 3
    client, runs = _runs(url, "http-artifacts")
    workers = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.data.params["strategy"] for r in workers) == [
        "non-distributed", "torch-ddp", "torch-ddp",
    ]  # fmt: skip
    for w in workers:
        assert [
            f.path for f in client.list_artifacts(w.info.run_id, "torch_profiling_averages")
        ] == [PROFILE_ARTIFACT]
        assert client.list_artifacts(w.info.run_id, "performance") == []
        assert "gpu_power_W" in w.data.metrics
        assert "local_samples_per_sec" not in w.data.metrics
        assert "samples_per_epoch" not in w.data.params


def test_remote_artifact_root_goes_through_the_client(
    tmp_path: Path, mlflow_server: tuple[str, str]
) -> None:
    url, backend = mlflow_server
    uri = _uri(tmp_path)
    options = EmulationOptions(
        strategies=("horovod",), workers=(2,), epochs=1, repeats=1,
        overrides=("samples_per_epoch=500",), experiment_name="remote-artifacts",
    )  # fmt: skip
    root = f"{url}/api/2.0/mlflow-artifacts/artifacts/emulated"
    result = run_emulation(options, uri, artifact_root=root)
    assert result.artifact_location == f"{root}/remote-artifacts"
    served = Path(backend.removeprefix("sqlite:///")).parent / "artifacts" / "emulated"
    assert len(list(served.rglob("*.csv"))) == 2  # uploaded to the server, one per worker
    assert not (tmp_path / "store" / "artifacts").exists()
    client, runs = _runs(uri, "remote-artifacts")
    worker = next(r for r in runs if "mlflow.parentRunId" in r.data.tags)
    local = client.download_artifacts(worker.info.run_id, PROFILE_ARTIFACT, str(tmp_path))
    assert Path(local).read_text().startswith("name,node_id,")


@pytest.mark.parametrize("store", ["sqlite", "file"])
def test_failed_write_into_a_new_store_leaves_nothing(
    tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk halfway: one line, exit 1, and neither the new store, its folder nor its
    artifacts are left behind (nothing else in the folder is touched)."""
    import errno
    import sqlite3 as sqlite

    from itwin_report.emulator import mlflow_writer

    (tmp_path / "mine.txt").write_text("kept")
    if store == "sqlite":
        uri = f"sqlite:///{tmp_path / 'new' / 'deeper' / 'mlflow.db'}"

        def full(self: object, rows: object) -> None:
            raise sqlite.OperationalError("database or disk is full")

        monkeypatch.setattr(mlflow_writer.SqliteBulkWriter, "_insert", full)
    else:
        uri = str(tmp_path / "new" / "mlruns")

        def full(*_args: object, **_kwargs: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(mlflow_writer.ClientWriter, "log_batch", full)
    args = [
        "--strategies", "horovod", "--workers", "2", "--epochs", "1", "--repeats", "1",
        "--set", "samples_per_epoch=1000", "--tracking-uri", uri, "-q",
    ]  # fmt: skip
    result = cli_runner().invoke(emulate_command, args)
    assert result.exit_code == 1, result.output
    message = str(result.exception)
    assert "disk is full" in message or "No space left" in message
    assert "\n" not in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]


def test_emulate_quiet_and_list_params(tmp_path: Path) -> None:
    from dataclasses import fields

    from itwin_report.cli import main
    from itwin_report.emulator.params import ModelParams

    listing = cli_runner().invoke(emulate_command, ["--list-params", "--preset", "mnist"])
    assert listing.exit_code == 0 and listing.stderr == ""
    lines = listing.stdout.splitlines()
    names = [line.split()[0] for line in lines[1:-1]]
    assert names == [f.name for f in fields(ModelParams)]
    assert "  batch_size" in listing.stdout and " 64\n" in listing.stdout  # mnist's batch size
    assert not (tmp_path / "mllogs").exists()
    help_text = cli_runner().invoke(emulate_command, ["--help"]).stdout
    assert "--list-params" in help_text and "-q, --quiet" in help_text
    args = [
        "--strategies", "horovod", "--workers", "2", "--epochs", "1", "--repeats", "1",
        "--set", "samples_per_epoch=1000", "--tracking-uri", _uri(tmp_path), "-q",
    ]  # fmt: skip
    quiet = cli_runner().invoke(emulate_command, args)
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == "" and "jobs:          1 top-level run, 2 worker runs" in quiet.stdout
    bad = cli_runner().invoke(main, ["emulate", *args, "--set", "nonsense=1"])
    assert bad.exit_code == 2 and "--list-params" in bad.stderr
