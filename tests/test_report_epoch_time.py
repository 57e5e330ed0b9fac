"""Epoch-time table: warm-up, pooled mean, per-run std, speedup, efficiency, warnings."""

from __future__ import annotations

import math

import pytest
from test_report_builders import make_data, metric, run

from itwin_report.report import build_report
from itwin_report.report.gate import evaluate
from itwin_report.util.errors import ReportError

E = "epoch_time_s"


def two_configs():
    # ddp-4: job A epochs [10, 4, 6] and job B epochs [12, 8]; ddp-8: job C [9, 3, 3]
    # rank 1 of job A also logs (ignored: only the lowest rank counts)
    return make_data(
        [
            run("a0", "A", "ddp", 4),
            run("a1", "A", "ddp", 4, rank=1),
            run("b0", "B", "ddp", 4),
            run("c0", "C", "ddp", 8),
        ],
        metric("a0", E, [10, 4, 6])
        + metric("a1", E, [99, 99, 99])
        + metric("b0", E, [12, 8])
        + metric("c0", E, [9, 3, 3]),
    )


def test_pooled_mean_per_run_std_and_scaling() -> None:
    table = build_report(two_configs(), warmup_epochs=1).epoch_time
    row4, row8 = table.iloc[0], table.iloc[1]
    # ddp-4 after warm-up: A [4, 6], B [8] -> pooled mean (4+6+8)/3 = 6, 3 points, 2 runs
    assert (row4["runs"], row4["epochs"], row4["avg_epoch_time_s"]) == (2, 3, 6.0)
    # run means 5 and 8 -> sample std = |8-5|/sqrt(2) = 2.1213...
    assert row4["std_epoch_time_s"] == pytest.approx(3 / math.sqrt(2))
    # ddp-8: [3, 3] -> 3; one run -> std NaN; speedup 6/3 = 2; efficiency 2*4/8 = 1
    assert row8["avg_epoch_time_s"] == 3.0 and math.isnan(row8["std_epoch_time_s"])
    assert row4["speedup"] == 1.0 and row8["speedup"] == 2.0
    assert row8["efficiency"] == 1.0
    assert table["workers"].dtype == "int64"


def test_warmup_zero_equals_plain_mean() -> None:
    table = build_report(two_configs(), warmup_epochs=0).epoch_time
    # ddp-4: (10+4+6+12+8)/5 = 8; ddp-8: (9+3+3)/3 = 5 -> speedup 1.6, efficiency 0.8
    assert list(table["avg_epoch_time_s"]) == [8.0, 5.0]
    assert list(table["epochs"]) == [5, 3]
    assert table["speedup"].iloc[1] == pytest.approx(1.6)
    assert table["efficiency"].iloc[1] == pytest.approx(0.8)


def test_run_with_only_warmup_epochs_warns_and_is_left_out() -> None:
    report = build_report(two_configs(), warmup_epochs=2)
    # warm-up 2: A [6], B [] (all warm-up), C [3]
    row4 = report.epoch_time.iloc[0]
    assert (row4["runs"], row4["epochs"], row4["avg_epoch_time_s"]) == (1, 1, 6.0)
    assert any(
        w.startswith("1 run(s) have all their epochs within the 2 warm-up") and "B (" in w
        for w in report.warnings
    )


def test_missing_epoch_data_warns_and_base_is_smallest_with_data() -> None:
    data = make_data(
        [run("x", "X", "hvd", 4), run("y", "Y", "hvd", 8), run("z", "Z", "hvd", 16)],
        metric("y", E, [0, 10, 10]) + metric("z", E, [0, 4, 6]),
    )
    report = build_report(data)
    assert "no epoch times for hvd with 4 workers" in report.warnings
    # base is 8 workers (10 s); 16 workers: 5 s -> speedup 2, efficiency 2*8/16 = 1
    assert list(report.epoch_time["workers"]) == [8, 16]
    assert list(report.epoch_time["speedup"]) == [1.0, 2.0]
    assert list(report.epoch_time["efficiency"]) == [1.0, 1.0]


def test_the_efficiency_gate_and_bad_warmup() -> None:
    report = build_report(two_configs(), warmup_epochs=0)
    # efficiencies 1.0 and 0.8: below 0.9 is ddp-8; 0.8 itself is not below 0.8
    assert evaluate(report, 0.9).below == ["ddp-8 (0.80)"]
    assert evaluate(report, 0.8).passed
    report.epoch_time.loc[report.epoch_time["workers"] == 8, "efficiency"] = float("nan")
    unknown = evaluate(report, 0.5)  # no efficiency is never a pass
    assert unknown.unknown == ["ddp-8"] and not unknown.passed
    with pytest.raises(ReportError):
        build_report(two_configs(), warmup_epochs=-1)


def test_loader_warnings_come_first_and_empty_tables_have_columns() -> None:
    data = make_data([run("r", "J", "ddp", 4)], warnings=["loader said so"])
    report = build_report(data)
    assert report.warnings[0] == "loader said so"
    assert report.epoch_time.empty
    assert list(report.epoch_time.columns) == [
        "strategy", "workers", "nodes", "runs", "epochs", "avg_epoch_time_s",
        "std_epoch_time_s", "speedup", "efficiency", "base_strategy", "base_workers",
        "speedup_ci_low", "speedup_ci_high", "efficiency_ci_low", "efficiency_ci_high",
    ]  # fmt: skip
    assert report.throughput.empty and "evidence" in report.throughput.columns
    for kind in ("epoch times", "GPU data", "profiler data"):
        assert f"no {kind} for ddp with 4 workers" in report.warnings
    assert (
        "no throughput for ddp with 4 workers: no performance.json, no local_samples_per_sec "
        "metric, no epoch times" in report.warnings
    )


def _one_gpu_and_two_models(batch: float = 64.0):
    # non-distributed-1: 100 s epochs, batch 32; ddp 4/8 trains the same model (batch 32);
    # ds 4/8 logs batch_size `batch`
    def runs(job: str, strategy: str, workers: int, size: float) -> dict:
        return {**run(job, job, strategy, workers, samples_per_epoch=25000.0), "batch_size": size}

    return make_data(
        [
            runs("n", "non-distributed", 1, 32.0),
            runs("d4", "ddp", 4, 32.0),
            runs("d8", "ddp", 8, 32.0),
            runs("s4", "ds", 4, batch),
            runs("s8", "ds", 8, batch),
        ],
        metric("n", E, [0, 100, 100])
        + metric("d4", E, [0, 30, 30])
        + metric("d8", E, [0, 20, 20])
        + metric("s4", E, [0, 40, 40])
        + metric("s8", E, [0, 25, 25]),
    )


def test_auto_never_shares_a_base_across_runs_that_train_different_models() -> None:
    report = build_report(_one_gpu_and_two_models())
    rows = report.epoch_time.set_index(["strategy", "workers"])
    # ddp: against the single-GPU run, 100 / 30 = 3.33x; ds (batch 64 vs 32): its own 4
    # workers, 40 / 25 = 1.6x at 8, efficiency 1.6 x 4 / 8 = 0.8
    assert rows.loc[("ddp", 4), "speedup"] == pytest.approx(100 / 30)
    assert rows.loc[("ddp", 4), ["base_strategy", "base_workers"]].tolist() == [
        "non-distributed",
        1,
    ]
    assert rows.loc[("ds", 8), ["base_strategy", "base_workers"]].tolist() == ["ds", 4]
    assert rows.loc[("ds", 8), "speedup"] == pytest.approx(1.6)
    assert rows.loc[("ds", 8), "efficiency"] == pytest.approx(0.8)
    assert (
        "ds: its params differ from the single-GPU run's (non-distributed with 1 worker: "
        "batch_size 64 vs 32): no shared base; its speedup and efficiency are against its own "
        "4 workers"
    ) in report.warnings
    assert any("every strategy but ds are against the single-GPU run" in w for w in report.warnings)
    # the same params: one shared base, no such warning
    same = build_report(_one_gpu_and_two_models(batch=32.0))
    assert set(same.epoch_time["base_strategy"]) == {"non-distributed"}
    assert not any("params differ" in w for w in same.warnings)
    # --baseline single-gpu shares it as asked, and says the params differ
    forced = build_report(_one_gpu_and_two_models(), baseline="single-gpu")
    assert set(forced.epoch_time["base_strategy"]) == {"non-distributed"}
    assert any(
        "yet --baseline single-gpu measures it against that run" in w for w in forced.warnings
    )
