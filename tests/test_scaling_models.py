"""Scaling models: exact recovery of known laws, Karp–Flatt, refusals, emulator truth at 64/128."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import cli_runner

from itwin_report.analysis.scaling_models import (
    Ceiling,
    describe,
    fit,
    fit_all,
    fit_strategy,
    karp_flatt,
    karp_flatt_interval,
    karp_flatt_trend,
    predict,
)
from itwin_report.cli import main
from itwin_report.emulator import model
from itwin_report.emulator.params import PRESETS, STRATEGIES

NAMES = {"amdahl": "Amdahl", "usl": "USL"}
WORKERS = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])


def test_amdahl_recovers_its_serial_fraction() -> None:
    s, t1 = 0.04, 200.0
    times = t1 * (s + (1 - s) / WORKERS)
    f = fit(WORKERS, times, "amdahl")
    assert f.serial_fraction == pytest.approx(s, rel=1e-9)
    assert f.t1 == pytest.approx(t1)
    assert f.r2 == pytest.approx(1.0)
    assert f.loo_error < 1e-9


def test_usl_recovers_contention_coherency_and_peak() -> None:
    sigma, kappa, t1 = 0.05, 0.0005, 100.0
    times = t1 * (1 + sigma * (WORKERS - 1) + kappa * WORKERS * (WORKERS - 1)) / WORKERS
    f = fit(WORKERS, times, "usl")
    assert f.contention == pytest.approx(sigma, rel=1e-6)
    assert f.coherency == pytest.approx(kappa, rel=1e-6)
    # the peak, found by brute force on the true curve
    grid = np.arange(1, 2000)
    curve = (1 + sigma * (grid - 1) + kappa * grid * (grid - 1)) / grid
    assert f.peak_workers == pytest.approx(grid[np.argmin(curve)], abs=1.0)
    assert f.peak_workers == pytest.approx(math.sqrt((1 - sigma) / kappa))
    sm = fit_strategy("x", WORKERS, times)
    assert sm.chosen == "usl"
    assert "Universal Scalability Law" in describe(sm)
    assert f"near {f.peak_workers:.0f} workers" in describe(sm)


def test_karp_flatt_by_hand() -> None:
    e = karp_flatt(np.array([1.0, 2.0, 4.0]), np.array([10.0, 6.0, 4.0]))
    # S(2) = 10/6: (0.6 - 0.5)/0.5 = 0.2; S(4) = 2.5: (0.4 - 0.25)/0.75 = 0.2
    assert math.isnan(e[0])
    assert e[1:] == pytest.approx([0.2, 0.2])
    # the interval from the speedup's: S(4) in [2, 3] -> e in [(1/3 - 1/4)/0.75, (1/2 - 1/4)/0.75]
    low, high = karp_flatt_interval(np.array([1.0, 4.0]), np.array([1.0, 2.0]), [1.0, 3.0])
    assert math.isnan(low[0]) and (low[1], high[1]) == pytest.approx((1 / 9, 1 / 3))


NAN = np.nan


def test_karp_flatt_trends_are_called_only_beyond_their_noise() -> None:
    e = np.array([NAN, 0.04, 0.06, 0.08])
    # each interval ±0.005: the steps (0.02) exceed the noise -> rising
    assert karp_flatt_trend(e, e - 0.005, e + 0.005) == "rising"
    assert karp_flatt_trend(e[::-1], e[::-1] - 0.005, e[::-1] + 0.005) == "falling"
    # ±0.015: consecutive intervals overlap, but the first and last do not (0.065 > 0.055)
    assert karp_flatt_trend(e, e - 0.015, e + 0.015) == "rising"
    # ±0.03: every pair overlaps -> flat within noise
    assert karp_flatt_trend(e, e - 0.03, e + 0.03) == "flat"
    # down then up, each beyond the noise
    zigzag = np.array([NAN, 0.199, 0.157, 0.216])
    assert karp_flatt_trend(zigzag, zigzag - 0.01, zigzag + 0.01) == "mixed"
    # one run somewhere: no interval, no trend called
    assert karp_flatt_trend(e, e - 0.005, np.array([NAN, 0.045, NAN, 0.085])) == "untested"


def test_the_sentence_names_the_bases_and_the_noise() -> None:
    p, t = np.array([4.0, 8.0, 16.0, 32.0]), np.array([40.0, 21.0, 12.0, 8.0])
    # e(8) = (21/40 - 1/2)/(1/2) = 0.05, e(16) = (0.3 - 0.25)/0.75 = 0.0667,
    # e(32) = (0.2 - 0.125)/0.875 = 0.0857
    sm = fit_strategy("ddp", p, t)
    sm.speedup_low, sm.speedup_high = 40 / t * 0.99, 40 / t * 1.01  # ±1 %: beyond the noise
    text = describe(sm)
    assert "The Karp–Flatt serial fraction against ddp-4 rises beyond its noise" in text
    assert "(0.050 → 0.067 → 0.086)" in text
    amdahl = fit_strategy("ddp", p, 100 * (0.05 + 0.95 / p))
    assert amdahl.chosen == "amdahl"
    assert "serial fraction 0.0500 of the one-GPU epoch time (extrapolated from 4 GPUs)" in (
        describe(amdahl)
    )
    sm.speedup_low, sm.speedup_high = 40 / t * 0.8, 40 / t * 1.25  # ±25 %: overlapping
    assert "against ddp-4 is flat within noise (0.050 → 0.067 → 0.086" in describe(sm)
    sm.speedup_low = sm.speedup_high = None
    assert "its noise is unknown, so no trend is called" in describe(sm)
    # a 1-GPU base of another strategy is named as measured
    q = np.array([1.0, 4.0, 8.0, 16.0])
    one = fit_strategy("ddp", q, 100 * (0.05 + 0.95 / q), ("nd", 1))
    assert "of the one-GPU epoch time (measured as nd-1)" in describe(one)
    assert "against nd-1" in describe(one)


def test_refuses_with_too_few_counts_or_a_poor_fit() -> None:
    two = fit_strategy("a", np.array([4.0, 8.0]), np.array([10.0, 6.0]))
    assert two.chosen is None and two.why == "2 worker counts measured (4, 8); needs 3"
    zigzag = fit_strategy("b", np.array([4.0, 8.0, 16.0, 32.0]), np.array([10.0, 4.0, 9.0, 3.0]))
    assert zigzag.chosen is None and "too poor to extrapolate" in zigzag.why
    # a close fit that still mispredicts a left-out count: only what it misses is named
    close = fit_strategy(
        "c", np.array([4.0, 8.0, 16.0, 32.0]), np.array([31.81, 17.86, 11.34, 10.09])
    )
    assert close.chosen is None and "leave-one-out error" in close.why and "R²" not in close.why
    rows = predict([two, zigzag], [64])
    assert list(rows["strategy"]) == ["a", "b"] and rows["avg_epoch_time_s"].isna().all()
    assert list(rows["note"]) == [f"no scaling model: {two.why}", f"no scaling model: {zigzag.why}"]


def test_prediction_rows() -> None:
    s, t1 = 0.02, 400.0
    p = np.array([4.0, 8.0, 16.0, 32.0])
    table = pd.DataFrame(
        {"strategy": "ddp", "workers": p.astype(int), "avg_epoch_time_s": t1 * (s + (1 - s) / p)}
    )
    rows = predict(fit_all(table), [64, 128])
    assert list(rows["note"]) == ["", ""]
    assert list(rows["workers"]) == [64, 128]
    truth = t1 * (s + (1 - s) / np.array([64.0, 128.0]))
    assert rows["avg_epoch_time_s"].to_numpy() == pytest.approx(truth)
    assert (rows["low_s"] <= rows["avg_epoch_time_s"]).all()
    assert (rows["avg_epoch_time_s"] <= rows["high_s"]).all()
    base = t1 * (s + (1 - s) / 4)
    assert rows["speedup"].to_numpy() == pytest.approx(base / truth)
    assert rows["efficiency"].to_numpy() == pytest.approx(base / truth * 4 / np.array([64, 128]))


def _truth(preset: str, strategy: str, workers: int) -> float:
    """Noise-free mean epoch time after the first epoch, from the emulator's model."""
    return float(np.mean(model.epoch_times(PRESETS[preset], strategy, workers)[1:]))


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_emulator_truth_at_64_and_128(preset: str) -> None:
    """Fit on 4-32 workers; at 64 and 128 the truth lies in the interval, or the fit refuses."""
    fitted = 0
    for strategy in STRATEGIES:
        p = np.array([4.0, 8.0, 16.0, 32.0])
        times = np.array([_truth(preset, strategy, int(w)) for w in p])
        sm = fit_strategy(strategy, p, times)
        if sm.chosen is None:
            assert "too poor to extrapolate" in sm.why
            continue
        fitted += 1
        for w in (64, 128):
            t, low, high = sm.fits[sm.chosen].interval(w)
            truth = _truth(preset, strategy, w)
            assert low <= truth <= high, (strategy, w, t, truth)
            assert abs(t / truth - 1) < 0.05
    if preset in ("mnist", "virgo"):
        assert fitted == len(STRATEGIES)


def test_noisy_predictions_cover_the_truth() -> None:
    """Configuration means with 2 % noise: predictions at 64/128 mostly inside the intervals."""
    rng = np.random.default_rng(11)
    p = np.array([4.0, 8.0, 16.0, 32.0])
    inside = total = 0
    for strategy in STRATEGIES:
        times = np.array([_truth("virgo", strategy, int(w)) for w in p])
        truth = {w: _truth("virgo", strategy, w) for w in (64, 128)}
        for _ in range(100):
            sm = fit_strategy(strategy, p, times * (1 + 0.02 * rng.standard_normal(len(p))))
            if sm.chosen is None:
                continue
            for w in (64, 128):
                _, low, high = sm.fits[sm.chosen].interval(w)
                inside += low <= truth[w] <= high
                total += 1
    assert total > 400
    assert inside / total >= 0.85


def test_predict_through_the_command(analysis_store: tuple[str, Path], tmp_path: Path) -> None:
    """Emulated virgo runs on 4-32 workers: predictions at 64 and 128 cover the model's truth."""
    uri, _ = analysis_store
    plots = tmp_path / "plots"
    args = ["generate-scalability-report", "-e", "base", "--tracking-uri", uri, "-q"]
    result = cli_runner().invoke(
        main, [*args, "--format", "json", "--predict", "128,64", "--plot-dir", str(plots)]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = report["predictions"]
    assert [(r["strategy"], r["workers"]) for r in rows] == [("torch-ddp", 64), ("torch-ddp", 128)]
    assert set(rows[0]) == {
        "strategy", "workers", "model", "avg_epoch_time_s", "low_s", "high_s", "speedup",
        "efficiency", "base_strategy", "base_workers", "note", "compute_s_per_step",
        "comm_s_per_step",
    }  # fmt: skip
    assert rows[0]["comm_s_per_step"] is None  # no traces: no communication model
    assert {(r["base_strategy"], r["base_workers"], r["note"]) for r in rows} == {
        ("torch-ddp", 4, "")
    }
    base = next(r for r in report["epoch_time"] if r["workers"] == 4)["avg_epoch_time_s"]
    for row in rows:
        truth = _truth("virgo", "torch-ddp", row["workers"])
        assert row["low_s"] <= truth <= row["high_s"]
        assert row["speedup"] == pytest.approx(base / row["avg_epoch_time_s"])
        assert row["efficiency"] == pytest.approx(row["speedup"] * 4 / row["workers"])
    chosen = [m for m in report["scaling_models"] if m["chosen"]]
    assert len(chosen) == 1 and chosen[0]["model"] == rows[0]["model"]
    assert any("fits best" in line for line in report["model_summary"])
    assert [k["workers"] for k in report["karp_flatt"]] == [8, 16, 32]
    assert (plots / "prediction.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_prediction_figure_content(analysis_store: tuple[str, Path]) -> None:
    from itwin_report.plots.decisions import prediction_figure
    from itwin_report.plots.figures import speedup_figure
    from itwin_report.report import build_report
    from itwin_report.store import load_experiment

    uri, _ = analysis_store
    data = load_experiment(uri, "base", show_progress=False)
    report = build_report(data, predict_workers=[64, 128])
    fig = prediction_figure(report)
    assert fig is not None
    ax = fig.axes[0]
    assert ax.get_ylabel() == "Average epoch time (s)"
    labels = ax.get_legend_handles_labels()[1]
    assert labels[:2] == [
        "torch-ddp measured",
        f"torch-ddp {NAMES[report.analysis.predictions['model'][0]]} fit",
    ]
    measured = ax.lines[0]
    assert list(measured.get_xdata()) == [4, 8, 16, 32]
    assert list(measured.get_ydata()) == pytest.approx(list(report.epoch_time["avg_epoch_time_s"]))
    assert len(ax.collections) >= 2  # the shaded interval and the error bars
    assert build_report(data).analysis.predictions.empty
    assert prediction_figure(build_report(data)) is None
    # speedup error bars: one bar per configuration with an interval
    speed = speedup_figure(report)
    bars = [c for c in speed.axes[0].collections if c.get_segments()]
    assert sum(len(c.get_segments()) for c in bars) == 4


def test_analysis_in_the_text_report(analysis_store: tuple[str, Path]) -> None:
    from itwin_report.render import render
    from itwin_report.report import build_report
    from itwin_report.store import load_experiment

    uri, _ = analysis_store
    report = build_report(load_experiment(uri, "base", show_progress=False), predict_workers=[64])
    assert report.analysis is not None
    text = render(report, "table")
    assert "Speedup and efficiency, 95 % intervals" in text
    row = report.analysis.predictions.iloc[0]
    line = next(x for x in text.splitlines() if x.startswith("torch-ddp") and " 64 " in x)
    assert f"{row['avg_epoch_time_s']:.2f} s" in line
    assert f"{row['low_s']:.2f}–{row['high_s']:.2f} s" in line
    for sentence in report.analysis.model_lines:
        assert f"- {sentence}" in text
    md = render(report, "markdown")
    assert "## Scaling models" in md and "## Predictions" in md


def test_predictions_never_fall_below_a_measured_input_ceiling() -> None:
    """T(p) = 400 (0.02 + 0.98/p) fitted on 4..32; from 32 workers on, epochs cannot be faster
    than 30 s: at 64 the model's 14.125 s is capped to 30 s; at 16 (below the ceiling's count
    and above its floor) the model's 32.5 s stands."""
    p = np.array([4.0, 8.0, 16.0, 32.0])
    table = pd.DataFrame(
        {"strategy": "ddp", "workers": p.astype(int), "avg_epoch_time_s": 400 * (0.02 + 0.98 / p)}
    )
    # the floor measured at 32 workers, its mean's 95 % interval ±4 % over its runs
    ceiling = {"ddp": Ceiling(32, 30.0, 1000.0, floor_workers=32, rel_half=0.04)}
    rows = predict(fit_all(table), [16, 32, 64, 128], ceiling).set_index("workers")
    assert rows.loc[16, "avg_epoch_time_s"] == pytest.approx(32.5)
    assert rows.loc[16, "note"] == "" and rows.loc[16, "model"] == "amdahl"
    assert rows.loc[64, "avg_epoch_time_s"] == pytest.approx(30.0)
    assert rows.loc[64, "note"].startswith("capped by the input pipeline: input-bound from 32")
    # the cap decides: named so, with the floor's own interval widened by the reach (64 / 32,
    # 128 / 32): 30 exp(±0.04), 30 exp(±0.08), 30 exp(±0.16)
    assert set(rows.loc[[32, 64, 128], "model"]) == {"input ceiling"}
    for w, half in ((32, 0.04), (64, 0.08), (128, 0.16)):
        assert rows.loc[w, "low_s"] == pytest.approx(30.0 * math.exp(-half))
        assert rows.loc[w, "high_s"] == pytest.approx(30.0 * math.exp(half))
    # one run at the floor: no interval to give
    one = {"ddp": Ceiling(32, 30.0, 1000.0, floor_workers=32)}
    row = predict(fit_all(table), [64], one).iloc[0]
    assert row["model"] == "input ceiling" and math.isnan(row["low_s"])
    assert rows.loc[64, "speedup"] == pytest.approx(400 * (0.02 + 0.98 / 4) / 30.0)
