"""GPU table: energy per run (mean over runs), per epoch, utilization, interval fallback."""

from __future__ import annotations

import math

import pytest
from test_report_builders import NAN, make_data, metric, run

from itwin_report.render.layout import table_block
from itwin_report.report import build_report
from itwin_report.report import specs as tables

P, U, E = "gpu_power_W", "gpu_utilization_percent", "epoch_time_s"


def test_energy_is_mean_over_runs_not_sum() -> None:
    # job A: 2 ranks x 36 samples x 100 W x 1 s / 3600 = 2 Wh
    # job B: 2 ranks x 36 samples x 200 W x 1 s / 3600 = 4 Wh -> mean 3 Wh (itwinai would say 6)
    data = make_data(
        [
            run("a0", "A", "ddp", 2),
            run("a1", "A", "ddp", 2, rank=1),
            run("b0", "B", "ddp", 2),
            run("b1", "B", "ddp", 2, rank=1),
        ],
        metric("a0", P, [100] * 36)
        + metric("a1", P, [100] * 36)
        + metric("b0", P, [200] * 36)
        + metric("b1", P, [200] * 36)
        + metric("a0", U, [40, 60])
        + metric("b0", U, [80, 100])
        + metric("a0", E, [1, 1, 1, 1])  # A: 4 epochs -> 2/4 = 0.5 Wh/epoch
        + metric("b0", E, [1, 1]),  # B: 2 epochs -> 4/2 = 2 Wh/epoch; mean 1.25
    )
    report = build_report(data)
    row = report.gpu.iloc[0]
    assert row["runs"] == 2
    assert row["energy_wh"] == pytest.approx(3.0)
    assert row["energy_wh_per_epoch"] == pytest.approx(1.25)
    assert row["utilization_pct"] == pytest.approx(70.0)  # (40+60+80+100)/4
    assert row["avg_power_w"] == pytest.approx(150.0)  # 72 samples of 100, 72 of 200
    assert not any("energy covers" in w for w in report.warnings)


def test_missing_interval_uses_step_spacing_and_partial_coverage_warns() -> None:
    # no probing_interval; steps 0, 2, 4, ... (median spacing 2 s); 18 samples of 100 W
    # -> 18 * 100 * 2 / 3600 = 1 Wh measured on one rank of 4 GPUs: 4 Wh estimated, coverage 1/4
    data = make_data(
        [run("a0", "A", "ddp", 4, probing_interval=NAN)],
        metric("a0", P, [100] * 18, steps=range(0, 36, 2)),
    )
    report = build_report(data)
    row = report.gpu.iloc[0]
    assert row["energy_wh"] == pytest.approx(4.0)
    assert row["energy_coverage"] == pytest.approx(0.25)
    assert math.isnan(row["energy_wh_per_epoch"])  # no epoch data
    assert math.isnan(row["utilization_pct"])
    assert any("no probing_interval" in w and "2 s" in w for w in report.warnings)
    assert any(
        "GPU energy of 1 configuration(s) is estimated (ddp with 4 workers)" in w
        for w in report.warnings
    )
    assert table_block(report, tables.GPU).rows[0][3] == "~4.0 Wh"


def test_nominal_interval_is_used_when_present() -> None:
    # interval 0.5 s from the param; 72 samples of 50 W -> 72 * 50 * 0.5 / 3600 = 0.5 Wh
    data = make_data([run("a0", "A", "ddp", 1, probing_interval=0.5)], metric("a0", P, [50] * 72))
    assert build_report(data).gpu["energy_wh"].iloc[0] == pytest.approx(0.5)


def test_no_gpu_data_warns() -> None:
    data = make_data([run("a0", "A", "ddp", 4)], metric("a0", E, [1, 2]))
    report = build_report(data)
    assert report.gpu.empty
    assert "no GPU data for ddp with 4 workers" in report.warnings
