"""Throughput table: each source, source choice per strategy, scaling, rates, verdict."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from test_report_builders import make_data, metric, perf, profile, run, smoothed

from itwin_report.report import build_report
from itwin_report.report.rates import excluded_mask, steady_rate
from itwin_report.report.verdict import decide, evidence

R, G, E, U = (
    "local_samples_per_sec",
    "avg_samples_per_sec",
    "epoch_time_s",
    "gpu_utilization_percent",
)

# 20 logging points, local rates: a warm-up outlier (5), then 100, then a checkpoint: the point
# during it sees 40 (a dip), the next one fetches the backlog, 220 (a spike); then 100 again.
LOCAL = [5.0, 100, 100, 100, 100, 100, 100, 100, 40, 220] + [100.0] * 10
SPIKY = smoothed(LOCAL)


def test_spike_handling_on_hand_made_rate() -> None:
    # the smoothed series is still lifted 3 points after the spike (220 -> 148 -> 119 -> 108),
    # which a median band on Rate itself would count; unsmoothing isolates the two bad intervals
    assert SPIKY[9] == pytest.approx(0.6 * 220 + 0.4 * (0.6 * 40 + 0.4 * SPIKY[7]))
    assert SPIKY[10] > 115 and SPIKY[11] > 100
    mask = excluded_mask(np.array(SPIKY))
    # first 2 points are warm-up; local rates 40 and 220 are more than 15 % from the median 100
    assert list(np.flatnonzero(mask)) == [0, 1, 8, 9]
    rate, flags = steady_rate(pd.DataFrame({"step": range(0, 200, 10), "value": SPIKY}))
    assert rate == pytest.approx(100.0)  # the 16 kept intervals all ran at 100
    assert int(flags.sum()) == 4


def test_steady_rate_weights_intervals_by_length() -> None:
    # two kept intervals: 10 steps at 100/s and 30 steps at 110/s (within the 15 % band);
    # samples over time = 40 / (10/100 + 30/110) = 107.3..., not the plain mean 105
    local = [1.0, 1.0, 100.0, 110.0]
    rate, _ = steady_rate(pd.DataFrame({"step": [0, 10, 20, 50], "value": smoothed(local)}))
    assert rate == pytest.approx(40 / (10 / 100 + 30 / 110))


def test_rate_order_does_not_matter_and_short_series_is_nan() -> None:
    frame = pd.DataFrame({"step": range(20), "value": SPIKY}).sample(frac=1, random_state=3)
    assert steady_rate(frame)[0] == pytest.approx(100.0)
    assert math.isnan(steady_rate(pd.DataFrame({"step": [0, 1], "value": [5.0, 9.0]}))[0])


def rate_job():
    # job J (4 workers), ranks 0 and 1 with steady rates 100 and 110 -> 105 * 4 = 420 samples/s
    return [run("j0", "J", "ddp", 4), run("j1", "J", "ddp", 4, rank=1)], metric(
        "j0", R, SPIKY
    ) + metric("j1", R, [x * 1.1 for x in SPIKY]) + metric("j0", G, [50] * 20)


def test_rate_source_and_rate_series() -> None:
    runs, metrics = rate_job()
    report = build_report(make_data(runs, metrics))
    row = report.throughput.iloc[0]
    assert row["source"] == "rate metrics"
    assert row["samples_per_sec"] == pytest.approx(420.0)
    assert row["samples_per_sec_per_gpu"] == pytest.approx(105.0)
    assert math.isnan(row["est_samples_per_sec"]) and math.isnan(row["achieved_fraction"])
    assert row["input_bound"] is None and row["evidence"] == "no evidence"
    assert report.rate_config == ("ddp", 4)
    series = report.rate_series
    rate = series[series["key"] == R]
    assert len(rate) == 20 and len(series) == 40  # rank 0 only: 20 Rate + 20 GlobalRate
    assert list(rate["elapsed_s"])[:3] == [0.0, 1.0, 2.0]
    assert int(rate["excluded"].sum()) == 4 and not series[series["key"] == G]["excluded"].any()


def test_performance_source_scales_missing_records() -> None:
    runs, metrics = rate_job()
    # 2 of 4 workers' records: samples 1000 + 1200 = 2200 over the longest worker's 11 s;
    # scaled by 4/2 -> 4400 / 11 = 400 samples/s; estimate 500 -> achieved 0.8
    data = make_data(
        runs, metrics, performance=[perf("j0", 1000, 10, 500), perf("j1", 1200, 11, 500)]
    )
    report = build_report(data)
    row = report.throughput.iloc[0]
    assert row["source"] == "performance.json"
    assert row["samples_per_sec"] == pytest.approx(400.0)
    assert row["achieved_fraction"] == pytest.approx(0.8)
    assert any("from 2 of 4 workers; samples scaled by 4/2" in w for w in report.warnings)
    # forcing the rate source gives 420 with the estimate still from performance.json
    forced = build_report(data, throughput_source="rates").throughput.iloc[0]
    assert forced["samples_per_sec"] == pytest.approx(420.0)
    assert forced["achieved_fraction"] == pytest.approx(420 / 500)


def test_disagreeing_estimates_warn_and_job_is_ignored() -> None:
    runs, metrics = rate_job()
    data = make_data(
        runs, metrics, performance=[perf("j0", 1000, 10, 500), perf("j1", 1000, 10, 600)]
    )
    report = build_report(data)
    assert report.throughput["source"].iloc[0] == "rate metrics"
    assert any(
        "est_samples_per_sec disagrees" in w and "500" in w and "600" in w for w in report.warnings
    )


def test_epoch_source_and_one_source_per_strategy() -> None:
    # ddp-4 has performance.json and epochs, ddp-8 only epochs -> the whole strategy uses epochs.
    # samples_per_epoch 1200; ddp-4 epochs after warm-up [10, 14] -> 12 s -> 100 samples/s;
    # ddp-8 [6, 6] -> 200 samples/s -> speedup 2, efficiency 2*4/8 = 1
    runs = [
        run("a", "A", "ddp", 4, samples_per_epoch=1200),
        run("b", "B", "ddp", 8, samples_per_epoch=1200),
    ]
    metrics = metric("a", E, [30, 10, 14]) + metric("b", E, [30, 6, 6])
    report = build_report(
        make_data(runs, metrics, performance=[perf("a", 4000, 10, 150, records=4)])
    )
    table = report.throughput
    assert list(table["source"]) == ["epoch time", "epoch time"]
    assert list(table["samples_per_sec"]) == [100.0, 200.0]
    assert list(table["speedup"]) == [1.0, 2.0] and list(table["efficiency"]) == [1.0, 1.0]
    assert table["est_samples_per_sec"].iloc[0] == 150.0 and math.isnan(
        table["est_samples_per_sec"].iloc[1]
    )
    assert any("performance.json covers only 1 of 2" in w for w in report.warnings)
    forced = build_report(
        make_data(runs, metrics, performance=[perf("a", 4000, 10, 150, records=4)]),
        throughput_source="performance",
    )
    assert list(forced.throughput["workers"]) == [4]
    assert "no throughput for ddp with 8 workers: no performance.json" in forced.warnings


def test_throughput_interval_from_the_runs() -> None:
    # three ddp-4 jobs of 1200 samples per epoch, epochs after warm-up of 12, 10 and 15 s:
    # 100, 120 and 80 samples/s, mean 100, s = 20; 95 % interval 100 +- t(0.975, 2) * 20 / sqrt(3)
    runs = [run(j.lower(), j, "ddp", 4, samples_per_epoch=1200) for j in "ABC"]
    runs.append(run("d", "D", "ddp", 8, samples_per_epoch=1200))
    metrics = (
        metric("a", E, [30, 12, 12])
        + metric("b", E, [30, 10, 10])
        + metric("c", E, [30, 15, 15])
        + metric("d", E, [30, 6, 6])
    )
    table = build_report(make_data(runs, metrics)).throughput
    half = 4.302652729911275 * 20 / math.sqrt(3)
    four, eight = table.iloc[0], table.iloc[1]
    assert four["samples_per_sec"] == pytest.approx(100.0)
    assert four["samples_per_sec_ci_low"] == pytest.approx(100 - half)
    assert four["samples_per_sec_ci_high"] == pytest.approx(100 + half)
    assert math.isnan(eight["samples_per_sec_ci_low"]) and math.isnan(
        eight["samples_per_sec_ci_high"]
    )


def test_verdict_rule_cases() -> None:
    nan = math.nan
    # input-bound: 38% of estimate, GPU idle 55% > collectives 9%, flags 8/8
    assert decide(0.38, nan, 0.55, 0.09, 8, 8) is True
    assert evidence(0.38, nan, 0.55, 0.09, 8, 8) == (
        "38% of estimate; GPU idle 55%; collectives 9% of device time; 8/8 workers flag input"
    )
    # comm-bound: 50% of estimate, GPU busy (idle 5%) while collectives take 40%
    assert decide(0.5, nan, 0.05, 0.40, 0, 8) is False
    # comm-bound even with an idle GPU when collectives take longer than the idle time
    assert decide(0.5, nan, 0.3, 0.40, 0, 0) is False
    # healthy: 95% of estimate, whatever the idle share
    assert decide(0.95, nan, 0.6, nan, 8, 8) is False
    # the steady-state share wins over the end-to-end one: 40% end to end (set-up, validation,
    # checkpoints) but 96% in steady state -> not input-bound; 70% steady + idle 44% > comm 24%
    assert decide(0.40, 0.96, 0.35, 0.16, 0, 8) is False
    assert decide(0.26, 0.70, 0.44, 0.24, 8, 8) is True
    assert evidence(0.26, 0.70, 0.44, 0.24, 8, 8) == (
        "26% of estimate; steady state 70%; GPU idle 44%; collectives 24% of device time; "
        "8/8 workers flag input"
    )
    # no profiler data: idle share alone must reach 30%
    assert decide(0.5, nan, 0.35, nan, 0, 0) is True
    assert decide(0.5, nan, 0.25, nan, 0, 0) is False
    # no estimate: flag majority and idle >= 0.3
    assert decide(nan, nan, 0.4, nan, 5, 8) is True
    assert decide(nan, nan, 0.2, nan, 8, 8) is False
    assert decide(nan, nan, 0.4, nan, 4, 8) is False
    assert decide(nan, nan, 0.4, nan, 0, 0) is None
    assert evidence(nan, nan, nan, nan, 0, 0) == "no evidence"


def test_verdict_in_the_table() -> None:
    # 2 workers, 1 run: 400 samples/s measured vs 1000 estimated (40%); util 30% -> idle 70%;
    # collectives 10% of device time (< idle 70%); both workers flag input -> input-bound
    runs = [run("a0", "A", "ddp", 2), run("a1", "A", "ddp", 2, rank=1)]
    perfs = [perf("a0", 2000, 10, 1000, flag=True), perf("a1", 2000, 10, 1000, flag=True)]
    profs = profile("a0", [("aten::mm", 90), ("nccl:all_reduce", 10)])
    report = build_report(make_data(runs, metric("a0", U, [30, 30]), profs, perfs))
    row = report.throughput.iloc[0]
    assert row["samples_per_sec"] == pytest.approx(400.0)
    assert row["input_bound"] is True
    assert row["evidence"] == (
        "40% of estimate; GPU idle 70%; collectives 10% of device time; 2/2 workers flag input"
    )
