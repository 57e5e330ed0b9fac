"""Nodes of a job in every table's rows, and the node step of the scaling analysis.

Every store is a real MLflow SQLite store under tmp_path (or written by the emulator); every
expected number is worked out by hand in the comments, or from the emulator's truth.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import T0, bulk_worker_runs, cli_runner, new_sqlite_store

from itwin_report.cli import main
from itwin_report.emulator import EmulationOptions, expected_truth, run_emulation
from itwin_report.report import build_report
from itwin_report.store import load_experiment

REPORT = "generate-scalability-report"
T_975_2 = 4.302652729911275  # Student's t, 97.5 % quantile, 2 degrees of freedom


def _job(
    runs: list[dict[str, Any]],
    name: str,
    strategy: str,
    workers: int,
    epochs: list[float],
    hosts: list[str] | None = None,
    **params: Any,
) -> None:
    """A job: its parent run, then one worker run per rank; rank 0 logs ``epochs``, every rank
    36 power samples; ``hosts``: each rank's hostname param."""
    parent = len(runs)
    runs.append({"name": name, "start": T0, "params": {}, "metrics": []})
    for rank in range(workers):
        points = [("gpu_power_W", 100.0, T0 + 1000 * s, s) for s in range(36)]
        if rank == 0:
            points += [("epoch_time_s", float(t), T0 + 1000 * s, s) for s, t in enumerate(epochs)]
        mine = {"strategy": strategy, "global_rank": rank, "global_world_size": workers}
        mine.update(probing_interval=1, samples_per_epoch=1000, **params)
        if hosts is not None:
            mine["hostname"] = hosts[rank]
        runs.append({"name": f"w{rank}", "start": T0, "params": mine, "metrics": points})
        runs[-1]["parent"] = parent


def _report(uri: str, *args: str) -> dict[str, Any]:
    result = cli_runner().invoke(
        main, [REPORT, "--tracking-uri", uri, "-q", "--no-plots", "--format", "json", *args]
    )
    assert result.exit_code == 0, result.stderr
    return dict(json.loads(result.stdout))


def _nodes_store(template: Path, tmp_path: Path) -> str:
    runs: list[dict[str, Any]] = []
    # hosts: ranks on a, a, b, b: 2 nodes (its gpus_per_node param of 4 would say 1)
    _job(runs, "hosts", "hosted", 4, [9, 8, 8], ["a", "a", "b", "b"], gpus_per_node=4)
    # one rank without a hostname: the param decides, ceil(4 / 4) = 1 node
    _job(runs, "some", "partial", 4, [9, 8, 8], ["a", "b", "c", ""], gpus_per_node=4)
    # no hostname: the param, ceil(6 / 4) = 2 nodes
    _job(runs, "param", "logged", 6, [9, 8, 8], gpus_per_node=4)
    # neither: unknown
    _job(runs, "none", "blind", 6, [9, 8, 8])
    uri = new_sqlite_store(template, tmp_path / "mlflow.db")
    bulk_worker_runs(uri, "nodes", runs)
    return uri


ROW_TABLES = ("epoch_time", "gpu", "throughput", "time_breakdown")


def _nodes_of(doc: dict[str, Any], table: str) -> dict[str, Any]:
    return {row["strategy"]: row["nodes"] for row in doc[table]}


def test_nodes_in_every_row(sqlite_store_template: Path, tmp_path: Path) -> None:
    uri = _nodes_store(sqlite_store_template, tmp_path)
    doc = _report(uri)
    expected = {"hosted": 2, "partial": 1, "logged": 2, "blind": None}
    for table in ROW_TABLES:
        assert _nodes_of(doc, table) == expected, table
    # --gpus-per-node 3 replaces the param; hostnames still win: 4 / 3 -> 2, 6 / 3 -> 2
    doc = _report(uri, "--gpus-per-node", "3")
    expected = {"hosted": 2, "partial": 2, "logged": 2, "blind": 2}
    for table in ROW_TABLES:
        assert _nodes_of(doc, table) == expected, table
    gpu = {row["strategy"]: row for row in doc["gpu"]}
    # node-hours: 2 nodes x 8 s (the epochs after warm-up) / 3600
    assert gpu["blind"]["node_hours_per_epoch"] == pytest.approx(2 * 8 / 3600)
    assert doc["schema_version"] == 4


def test_nodes_column_shown_only_when_known(sqlite_store_template: Path, tmp_path: Path) -> None:
    runs: list[dict[str, Any]] = []
    _job(runs, "none", "blind", 2, [9, 8, 8])
    uri = new_sqlite_store(sqlite_store_template, tmp_path / "mlflow.db")
    bulk_worker_runs(uri, "nodes", runs)
    plain = [REPORT, "--tracking-uri", uri, "-q", "--no-plots"]
    text = cli_runner().invoke(main, plain).stdout
    epoch = text.split("Epoch time\n")[1].split("\n\n")[0]
    assert "Nodes" not in epoch and "Workers" in epoch
    text = cli_runner().invoke(main, [*plain, "--gpus-per-node", "1"]).stdout
    header = text.split("Epoch time\n")[1].splitlines()[1]
    assert header.split()[:4] == ["Strategy", "Workers", "Nodes", "Runs"]


def _step_store(template: Path, tmp_path: Path) -> str:
    runs: list[dict[str, Any]] = []
    # 2 GPUs per node: 2 workers on one node, 4 on two. Per-run means after the warm-up epoch:
    # 2 workers 10 and 12 s (mean 11); 4 workers 6 and 7.2 s (mean 6.6, the same spread
    # relative to the mean); 1 worker is one node too, but not the largest
    for name, workers, t in (("a1", 2, 10), ("a2", 2, 12), ("b1", 4, 6), ("b2", 4, 7.2)):
        _job(runs, name, "ddp", workers, [30, t, t], gpus_per_node=2)
    _job(runs, "one", "ddp", 1, [50, 20, 20], gpus_per_node=2)
    uri = new_sqlite_store(template, tmp_path / "mlflow.db")
    bulk_worker_runs(uri, "steps", runs)
    return uri


def test_node_step_by_hand(sqlite_store_template: Path, tmp_path: Path) -> None:
    uri = _step_store(sqlite_store_template, tmp_path)
    doc = _report(uri)
    (step,) = doc["node_steps"]
    # efficiency 4 workers keep of 2 workers': (2 x 11) / (4 x 6.6) = 0.8333...
    kept = 2 * 11 / (4 * 6.6)
    assert (step["one_node_workers"], step["multi_node_workers"]) == (2, 4)
    assert step["multi_node_nodes"] == 2
    assert step["efficiency_kept"] == pytest.approx(kept, rel=1e-9)
    assert step["efficiency_lost"] == pytest.approx(1 - kept, rel=1e-9)
    # log-ratio interval: each side's squared relative standard error is s^2 / (n m^2) =
    # 2 / (2 x 121) (10, 12) and 0.72 / (2 x 43.56) (6, 7.2): equal, so Welch's df = 2
    half = T_975_2 * math.sqrt(2 * 2 / (2 * 121))
    low, high = step["efficiency_lost_ci"]
    assert low == pytest.approx(1 - kept * math.exp(half), rel=1e-6)
    assert high == pytest.approx(1 - kept * math.exp(-half), rel=1e-6)
    assert "ddp: the step from one node (2 GPUs, 11.00 s per epoch) to 2 nodes" in step["text"]
    assert "loses 16.7 % of the one-node efficiency" in step["text"]
    result = cli_runner().invoke(main, [REPORT, "--tracking-uri", uri, "-q", "--no-plots"])
    assert step["text"] in result.stdout


def test_no_node_step_without_nodes(sqlite_store_template: Path, tmp_path: Path) -> None:
    runs: list[dict[str, Any]] = []
    for name, workers, t in (("a1", 2, 10), ("a2", 2, 12), ("b1", 4, 6), ("b2", 4, 7)):
        _job(runs, name, "ddp", workers, [30, t, t])
    uri = new_sqlite_store(sqlite_store_template, tmp_path / "mlflow.db")
    bulk_worker_runs(uri, "steps", runs)
    assert _report(uri)["node_steps"] == []  # nodes unknown: no step named
    # every configuration on one node: no step either
    assert _report(uri, "--gpus-per-node", "4")["node_steps"] == []
    assert len(_report(uri, "--gpus-per-node", "2")["node_steps"]) == 1


def test_node_step_holds_the_emulators_truth(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = EmulationOptions(strategies=("torch-ddp",), workers=(2, 4, 8), repeats=3)
    run_emulation(options, uri)
    report = build_report(load_experiment(uri, options.experiment_name, show_progress=False))
    assert report.analysis is not None
    (step,) = report.analysis.node_steps
    truth = {
        c["workers"]: (c["mean_epoch_time_after_warmup_s"], c["nodes"])
        for c in expected_truth(options)["configurations"]
    }
    assert truth[4][1] == 1 and truth[8][1] == 2  # the preset's 4 GPUs per node
    assert (step.one_node_workers, step.multi_node_workers) == (4, 8)
    lost = 1 - (4 * truth[4][0]) / (8 * truth[8][0])
    assert step.efficiency_lost_ci_low <= lost <= step.efficiency_lost_ci_high
    assert step.efficiency_lost == pytest.approx(lost, abs=0.05)
    assert list(report.epoch_time["nodes"]) == [1, 1, 2]
