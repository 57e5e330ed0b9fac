"""Any MLflow experiment: MLflow's own GPU system metrics, and params chosen by name."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest
from conftest import cli_runner

from itwin_report.cli import main
from itwin_report.emulator import mlflow_writer
from itwin_report.store import load_experiment


def system_power(gpu: int, step: int) -> float:
    """Watts MLflow's monitor logs for GPU ``gpu`` at ``step`` in this sample."""
    return 100.0 + 50 * gpu + step


def _system_points(gpus: int, t: int) -> list[tuple[str, float, int, int]]:
    points = []
    for gpu in range(gpus):
        for step in range(3):
            points.append((f"system/gpu_{gpu}_power_usage_watts", system_power(gpu, step), t, step))
            points.append((f"system/gpu_{gpu}_utilization_percentage", 10.0 * gpu, t, step))
        points.append((f"system/gpu_{gpu}_memory_usage_megabytes", 1.0, t, 0))
        points.append((f"system/gpu_{gpu}_power_usage_percentage", 1.0, t, 0))  # never read
    points.append(("system/cpu_utilization_percentage", 1.0, t, 0))  # never read
    return points


def build_plain_store(uri: str) -> dict[str, str]:
    """Runs of a plain training loop: ``backend``/``world_size`` params, system metrics."""
    w = mlflow_writer.RunWriter(uri)
    exp = w.experiment_id("plain", mlflow_writer.artifact_location(uri, "plain"))
    ids = {}

    def run(name: str, params: dict[str, Any], points: list[Any], parent: str = "") -> str:
        run_id = w.create_run(exp, name, 0, parent_run_id=parent or None)
        w.log_batch(run_id, [("epoch_time_s", 9.0, 0, 0), *points], params)
        w.end_run(run_id, 1)
        return run_id

    ids["plain-1"] = run("plain-1", {"backend": "gloo", "world_size": 1}, _system_points(1, 0))
    ids["plain-2"] = run("plain-2", {"backend": "nccl", "world_size": 2}, _system_points(2, 0))
    top = w.create_run(exp, "ddp-2", 0)
    for rank in (0, 1):
        params = {"backend": "nccl", "world_size": 2, "global_rank": rank}
        ids[f"ddp-2/{rank}"] = run(f"worker_{rank}", params, _system_points(2, 0), top)
    w.end_run(top, 1)
    own = [("gpu_power_W", 7.0, 0, s) for s in range(3)]
    own += [("system/node 1/gpu_3_utilization_percentage", 60.0, 0, s) for s in range(3)]
    ids["own"] = run("own", {"backend": "gloo", "world_size": 1}, own + _system_points(1, 0))
    return ids


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict[str, str]]:
    root = tmp_path_factory.mktemp("plain")
    sql = f"sqlite:///{root / 'mlflow.db'}"
    files = str(root / "mlruns")
    return sql, files, {"sql": build_plain_store(sql), "file": build_plain_store(files)}


def _load(uri: str) -> Any:
    return load_experiment(
        uri, "plain", show_progress=False, strategy_param="backend", workers_param="world_size"
    )


@pytest.mark.parametrize("kind", ["sql", "file"])
def test_params_chosen_by_name(plain: tuple[str, str, Any], kind: str) -> None:
    uri = plain[0] if kind == "sql" else plain[1]
    ids = plain[2][kind]
    runs = _load(uri).runs.set_index("run_id")
    assert len(runs) == 5
    assert runs.loc[ids["plain-1"], ["strategy", "workers", "rank"]].tolist() == ["gloo", 1, 0]
    assert runs.loc[ids["plain-2"], ["strategy", "workers", "rank"]].tolist() == ["nccl", 2, 0]
    assert runs.loc[ids["ddp-2/1"], ["strategy", "workers", "rank"]].tolist() == ["nccl", 2, 1]
    # itwinai's names find nothing in these runs
    default = load_experiment(uri, "plain", show_progress=False)
    assert default.runs.empty


@pytest.mark.parametrize("kind", ["sql", "file"])
def test_system_gpu_metrics_are_loaded_as_logged(plain: tuple[str, str, Any], kind: str) -> None:
    uri = plain[0] if kind == "sql" else plain[1]
    ids = plain[2][kind]
    m = _load(uri).metrics
    measures = ("power_usage_watts", "utilization_percentage", "memory_usage_megabytes")
    system = {f"system/gpu_{i}_{what}" for i in (0, 1) for what in measures}
    node = "system/node 1/gpu_3_utilization_percentage"  # a node id: a folder of the file store
    assert set(m["key"]) == {"epoch_time_s", "gpu_power_W", node, *system}

    def series(run: str, key: str) -> list[float]:
        part = m[(m["run_id"] == ids[run]) & (m["key"] == key)]
        return part.sort_values("step")["value"].tolist()

    # every GPU of every run, as logged (the GPU table decides what counts)
    assert series("plain-2", "system/gpu_1_power_usage_watts") == [150.0, 151.0, 152.0]
    assert series("ddp-2/1", "system/gpu_0_power_usage_watts") == [100.0, 101.0, 102.0]
    assert series("ddp-2/1", "system/gpu_1_utilization_percentage") == [10.0, 10.0, 10.0]
    assert series("own", "gpu_power_W") == [7.0, 7.0, 7.0]
    assert series("own", node) == [60.0, 60.0, 60.0]


def test_sql_and_file_agree(plain: tuple[str, str, Any]) -> None:
    a, b = _load(plain[0]), _load(plain[1])
    cols = ["run_name", "strategy", "workers", "rank"]
    key = ["run_name", "rank"]
    pd.testing.assert_frame_equal(
        a.runs[cols].sort_values(key).reset_index(drop=True),
        b.runs[cols].sort_values(key).reset_index(drop=True),
    )
    assert sorted(a.metrics["value"]) == sorted(b.metrics["value"])


def test_cli_options(plain: tuple[str, str, Any]) -> None:
    args = ["generate-scalability-report", "--tracking-uri", plain[0], "-e", "plain"]
    args += ["--strategy-param", "backend", "--workers-param", "world_size"]
    args += ["--warmup-epochs", "0", "--format", "json", "--no-plots", "-q"]
    result = cli_runner().invoke(main, args)
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["epoch_time"]
    assert sorted((r["strategy"], r["workers"]) for r in rows) == [
        ("gloo", 1),
        ("nccl", 2),
    ]
