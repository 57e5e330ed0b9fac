"""A real emulation into a sqlite MLflow store, read back with MlflowClient."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cli_runner

from itwin_report.emulator import timeline
from itwin_report.emulator.command import emulate_command
from itwin_report.emulator.options import EmulationOptions
from itwin_report.emulator.writer import job_rng, run_emulation
from itwin_report.errors import ReportError
from itwin_report.schema import METRIC_KEYS, PERFORMANCE_ARTIFACT, PROFILE_ARTIFACT
from itwin_report.store import mlflow_api

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


def test_small_emulation_reads_back(tmp_path: Path) -> None:
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
        assert params["preset"] == "default" and params["seed"] == "5"
        assert w.info.start_time == parent.info.start_time
        assert w.info.end_time == parent.info.end_time
        files = {f.path for f in client.list_artifacts(w.info.run_id, "performance")}
        files |= {f.path for f in client.list_artifacts(w.info.run_id, "torch_profiling_averages")}
        assert files == {PERFORMANCE_ARTIFACT, PROFILE_ARTIFACT}
        # the same job rebuilt from its seed gives the counts that must be stored
        ranks = list(range(int(n)))
        job = timeline.build_job(
            OPTIONS.params(), strategy, int(n), 0, 0, job_rng(5, strategy, int(n), 0), ranks
        )
        for key in METRIC_KEYS:
            history = client.get_metric_history(w.info.run_id, key)
            expected = [p for p in job.ranks[rank].points if p[0] == key]
            assert len(history) == len(expected), (key, rank)
            assert [m.value for m in history] == pytest.approx([p[1] for p in expected])
            points += len(history)
        assert len(client.get_metric_history(w.info.run_id, "epoch_time_s")) == (
            2 if rank == 0 else 0
        )
    assert points == result.metric_points
    local = client.download_artifacts(workers[0].info.run_id, PERFORMANCE_ARTIFACT, str(tmp_path))
    perf = json.loads(Path(local).read_text())
    assert perf["samples_per_sec"] == pytest.approx(perf["total_samples"] / perf["total_time"])


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
    assert "jobs:          1 top-level runs, 1 worker runs" in first.stdout
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


def test_cli_rejects_bad_options(tmp_path: Path) -> None:
    uri = _uri(tmp_path)
    for bad, message in (
        (["--workers", "0"], ">= 1"),
        (["--strategies", "mpi"], "unknown strategy"),
        (["--set", "nope=1"], "unknown parameter"),
        (["--set", "epochs=abc"], "not a number"),
    ):
        res = cli_runner().invoke(emulate_command, [*bad, "--tracking-uri", uri])
        assert res.exit_code == 1 and isinstance(res.exception, ReportError), bad
        assert message in str(res.exception)
    assert not (tmp_path / "store").exists()  # nothing touched before the options are valid


@pytest.mark.parametrize(
    ("error", "status"), [(KeyboardInterrupt, "KILLED"), (RuntimeError, "FAILED")]
)
def test_interrupted_emulation_marks_open_runs(tmp_path: Path, error: type, status: str) -> None:
    uri = _uri(tmp_path)
    options = EmulationOptions(
        strategies=("torch-ddp",), workers=(2, 3), epochs=1, repeats=1,
        overrides=("samples_per_epoch=1000",), experiment_name="cut",
    )  # fmt: skip
    seen = []

    def hook(event: str, job: int) -> None:
        seen.append((event, job))
        if job == 1 and event == "worker-written":
            raise error("stop")

    with pytest.raises(error):
        run_emulation(options, uri, hook=hook)
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
