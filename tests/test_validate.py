"""Valid ranges: hostile values through a real SQLite store never reach a table."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import cli_runner
from test_report_builders import make_data, metric, perf, profile, run

from itwin_report.cli import main
from itwin_report.data.rundata import RunData
from itwin_report.data.validate import MAX_NAMED, named, validate
from itwin_report.report import build_report

T0 = 1_700_000_000_000
INF = float("inf")
NAN = float("nan")
PROFILE_HEADER = "name,self_cuda_time_total,strategy,num_gpus,global_rank\n"


def _job(w: Any, exp: str, name: str, strategy: str, size: str, points: list, **params) -> str:
    """A top-level run with one rank-0 worker run; returns the worker's id."""
    top = w.create_run(exp, name, T0)
    worker = w.create_run(exp, "worker_0 (main)", T0, parent_run_id=top)
    values = {"strategy": strategy, "global_rank": 0, "global_world_size": size, **params}
    w.log_batch(worker, [(k, v, T0 + i * 1000, s) for i, (k, v, s) in enumerate(points)], values)
    w.end_run(worker, T0 + 60_000)
    w.end_run(top, T0 + 61_000)
    return str(worker)


def epochs(*values: float) -> list:
    return [("epoch_time_s", v, s) for s, v in enumerate(values)]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store full of impossible values (see each job's comment)."""
    from itwin_report.emulator import mlflow_writer

    uri = f"sqlite:///{tmp_path_factory.mktemp('hostile') / 'mlflow.db'}"
    w = mlflow_writer.RunWriter(uri)
    exp = w.experiment_id("hostile", mlflow_writer.artifact_location(uri, "hostile"))
    # 1 GPU: epoch 2 logged twice (kept once); power -5 and inf, utilization 1e6, interval 0
    power = [("gpu_power_W", v, s) for s, v in enumerate([100.0, -5.0, INF, 120.0])]
    util = [("gpu_utilization_percent", v, s) for s, v in enumerate([50.0, 1e6, 70.0])]
    _job(
        w, exp, "nd-1", "non-distributed", "1",
        [*epochs(99.0, 40.0, 40.0), ("epoch_time_s", 40.0, 2), *power, *util],
        probing_interval="0",
    )  # fmt: skip
    # strategy with a trailing space, and the same strategy without: one row
    _job(w, exp, "ddp-2", "ddp ", "2", epochs(99.0, 20.0, -3.0, INF))
    _job(w, exp, "ddp-2b", "ddp", "2", epochs(99.0, 20.0, 0.0, NAN))
    _job(w, exp, "huge", "ddp", "1e30", epochs(99.0, 1.0))  # impossible world size
    ddp4 = _job(w, exp, "ddp-4", "ddp", "4", epochs(99.0, 10.0, 10.0))
    w.log_text(
        ddp4,
        PROFILE_HEADER + "aten::mm,600,ddp,4,0\nnccl:all_reduce,-300,ddp,4,0\n",
        "torch_profiling_averages/torch_profiling_averages.csv",
    )
    w.log_text(
        ddp4, '{"total_samples": 1000, "total_time": Infinity}', "performance/performance.json"
    )
    return uri


def _report_json(uri: str, *args: str) -> tuple[dict, Any]:
    result = cli_runner().invoke(
        main,
        ["generate-scalability-report", "--tracking-uri", uri, "-e", "hostile", "--format",
         "json", "--no-plots", "-q", *args],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result


def _cells(report: dict) -> list[tuple[str, str, float]]:
    return [
        (table, key, value)
        for table in ("epoch_time", "gpu", "computation", "throughput")
        for row in report[table]
        for key, value in row.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    ]


def test_no_cell_is_negative_infinite_or_impossible(hostile: str) -> None:
    report, _ = _report_json(hostile)
    cells = _cells(report)
    assert cells
    for table, key, value in cells:
        assert math.isfinite(value) and value >= 0, (table, key, value)
    for row in report["gpu"]:
        assert row["utilization_pct"] is None or row["utilization_pct"] <= 100
    rows = {(r["strategy"], r["workers"]): r for r in report["epoch_time"]}
    assert set(rows) == {("non-distributed", 1), ("ddp", 2), ("ddp", 4)}  # one ddp-2 row
    assert rows["non-distributed", 1]["epochs"] == 2  # steps 1, 2: the duplicate counts once
    assert rows["ddp", 2]["runs"] == 2 and rows["ddp", 2]["epochs"] == 2  # 20 and 20
    assert rows["ddp", 2]["avg_epoch_time_s"] == 20.0
    # single-GPU baseline: 40 s on 1 GPU
    assert (
        rows["ddp", 2]["epoch_time_speedup"] == 2.0 and rows["ddp", 4]["epoch_time_speedup"] == 4.0
    )
    assert rows["ddp", 4]["epoch_time_efficiency"] == 1.0
    (gpu,) = report["gpu"]
    assert gpu["utilization_pct"] == 60.0  # (50 + 70) / 2
    assert gpu["avg_power_w"] == 110.0  # (100 + 120) / 2
    # interval 0 is ignored: the step spacing (steps 0 and 3) gives 3 s per sample
    assert gpu["energy_wh"] == pytest.approx((100 + 120) * 3 / 3600)
    (comp,) = report["computation"]
    assert comp["computation_fraction"] == 1.0 and comp["communication_fraction"] == 0.0


def test_each_kind_of_dropped_data_is_one_warning_naming_the_runs(hostile: str) -> None:
    report, _ = _report_json(hostile)
    warnings = report["warnings"]

    def one(fragment: str) -> str:
        found = [w for w in warnings if fragment in w]
        assert len(found) == 1, (fragment, warnings)
        return found[0]

    assert "'ddp-2'" in one("strategy names with surrounding whitespace")
    assert one("worker run(s) of 'huge'") == (
        "skipped 1 worker run(s) of 'huge': global_world_size is outside 1..1,000,000"
    )
    epoch = one("epoch_time_s point(s)")
    assert epoch.startswith("dropped 4 epoch_time_s") and "'ddp-2', 'ddp-2b'" in epoch
    assert one("gpu_power_W point(s)").startswith("dropped 2 gpu_power_W point(s) of 'nd-1'")
    assert "'nd-1'" in one("gpu_utilization_percent point(s)")
    assert one("duplicated point(s)").startswith("dropped 1 duplicated point(s) of 'nd-1'")
    assert "'nd-1'" in one("ignored probing_interval")
    assert "'ddp-4'" in one("profiler row(s)")
    assert "Infinity is not a number" in one("malformed performance/performance.json")
    assert "against the single-GPU run (non-distributed with 1 worker)" in warnings[0]
    assert report["baseline"]["mode"] == "single-gpu"
    assert report["baseline"]["reference"] == {"strategy": "non-distributed", "workers": 1}
    assert {b["base_strategy"] for b in report["baseline"]["bases"]} == {"non-distributed"}


def test_per_strategy_baseline_keeps_each_strategys_own_base(hostile: str) -> None:
    report, _ = _report_json(hostile, "--baseline", "per-strategy")
    rows = {(r["strategy"], r["workers"]): r for r in report["epoch_time"]}
    assert (
        rows["ddp", 2]["epoch_time_speedup"] == 1.0 and rows["ddp", 4]["epoch_time_speedup"] == 2.0
    )  # 20 / 10
    assert rows["ddp", 4]["epoch_time_efficiency"] == 1.0  # 2 * 2 / 4
    assert report["baseline"]["mode"] == "per-strategy" and report["baseline"]["reference"] is None


@pytest.mark.parametrize(
    "option", ["--fail-under-efficiency=nan", "--fail-under-efficiency=inf",
               "--samples-per-epoch=nan", "--samples-per-epoch=0", "--baseline=best"]
)  # fmt: skip
def test_non_finite_options_are_bad_usage(option: str, tmp_path: Path) -> None:
    result = cli_runner().invoke(
        main, ["generate-scalability-report", "--tracking-uri", str(tmp_path / "none"), option]
    )
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr and option.split("=")[0] in result.stderr


def test_validate_ranges_on_hand_built_data() -> None:
    runs = [
        run("a", "A", "ddp", 2, rank=0, probing_interval=-1.0, samples_per_epoch=INF),
        run("b", "A", "ddp", 2, rank=2),  # rank outside 0..1
        run("c", "C", "  ", 2),  # empty strategy
    ]
    data = make_data(
        runs,
        metric("a", "gpu_utilization_percent", [100.0, 100.5, 0.0, -0.1])
        + metric("a", "local_samples_per_sec", [5.0, -1.0, 1e300])
        + metric("a", "train_loss_epoch", [1.0, 1.0], steps=[-64, 64]),
        profile("a", [("aten::mm", 1.0), ("x", NAN), ("y", 1e300)]),
        [perf("a", 100, 10, est=0.0), perf("b", 100, 10), perf("a", -1, 10)],
    )
    out = validate(data)
    assert list(out.runs["run_id"]) == ["a"]
    assert math.isnan(out.runs["probing_interval"][0])
    assert math.isnan(out.runs["samples_per_epoch"][0])
    values = out.metrics.groupby("key")["value"].apply(list).to_dict()
    assert values == {
        "gpu_utilization_percent": [100.0, 0.0],
        "local_samples_per_sec": [5.0],
        "train_loss_epoch": [1.0],
    }
    assert list(out.profiles["name"]) == ["aten::mm"]
    assert len(out.performance) == 1 and math.isnan(out.performance["est_samples_per_sec"][0])
    assert not any("est_samples_per_sec" in w for w in out.warnings)  # 0 means "unset"
    # stripped strategy, 2 runs (one warning per problem), interval, samples/epoch,
    # utilization, rate, loss, profiler, perf
    assert len(out.warnings) == 10, out.warnings
    assert "dropped 1 worker run(s) of 'ddp-2': global_rank is outside 0..global_world_size-1" in (
        out.warnings
    )
    assert "dropped 1 worker run(s) of '  -2': strategy is blank" in out.warnings
    assert data.runs.shape[0] == 3  # the input is not changed


def test_names_are_capped() -> None:
    text = named([f"r{i}" for i in range(MAX_NAMED + 3)] + ["r0"])
    assert text.endswith("and 3 more") and text.count("'") == 2 * MAX_NAMED


def test_nan_epoch_times_at_the_base_are_said(tmp_path: Path) -> None:
    data = make_data(
        [run("a", "A", "ddp", 2), run("b", "B", "ddp", 4), run("c", "C", "ddp", 8)],
        metric("a", "epoch_time_s", [9.0, NAN, NAN])
        + metric("b", "epoch_time_s", [9.0, 10.0, 10.0])
        + metric("c", "epoch_time_s", [9.0, 5.0, 5.0]),
    )
    report = build_report(validate(data))
    assert "ddp: no epoch times at 2 workers; its speedup and efficiency are against 4 " \
        "workers" in report.warnings  # fmt: skip
    table = report.epoch_time.set_index("workers")
    assert list(table.index) == [4, 8] and table.loc[8, "speedup"] == 2.0


def test_saved_run_data_gives_the_same_report(
    scaling_sqlite: tuple[str, Any], tmp_path: Path
) -> None:
    from itwin_report import store
    from itwin_report.render import render

    uri, _ = scaling_sqlite
    data = store.load_experiment(uri, "scaling", show_progress=False)
    data.runs.loc[0, "run_name"] = "nan"  # text that looks like a number stays text
    saved = RunData.load(data.save(tmp_path / "saved"))
    for name in ("runs", "metrics", "profiles", "performance"):
        pd.testing.assert_frame_equal(getattr(saved, name), getattr(data, name))
    assert (saved.experiment, saved.tracking_uri, saved.warnings) == (
        data.experiment, data.tracking_uri, data.warnings,
    )  # fmt: skip
    assert render(build_report(saved), "json") == render(build_report(data), "json")
    with pytest.raises(ValueError, match="not saved run data"):
        RunData.load(tmp_path)
