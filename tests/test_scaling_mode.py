"""Strong vs weak scaling: the auto decision, weak-scaling efficiency, and the CLI options."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import cli_runner

from itwin_report.analysis.scaling_mode import decide, weak_efficiency
from itwin_report.cli import main

T0 = 1_700_000_000_000


def _runs(samples: dict[int, float | None]) -> pd.DataFrame:
    rows = [
        {"job_id": f"j{w}", "strategy": "ddp", "workers": w, "samples_per_epoch": s}
        for w, s in samples.items()
    ]
    return pd.DataFrame(rows).astype({"samples_per_epoch": "float64"})


def test_auto_decision_and_its_sentence() -> None:
    assert decide(_runs({4: 1000.0, 8: 1000.0}))[0] == "strong"
    mode, why = decide(_runs({4: 400.0, 8: 800.0, 16: 1600.0}))
    assert mode == "weak" and "grows in proportion" in why
    mode, why = decide(_runs({4: None, 8: None}))
    assert mode == "strong" and "no run logged samples_per_epoch" in why
    mode, why = decide(_runs({4: 400.0, 8: 1000.0}))
    assert mode == "strong" and "pass --scaling" in why
    assert decide(_runs({4: 400.0, 8: 800.0}), "strong") == (
        "strong",
        "Strong scaling (chosen with --scaling strong).",
    )


def test_weak_efficiency_is_throughput_per_gpu_against_the_base() -> None:
    table = pd.DataFrame(
        {
            "strategy": ["ddp"] * 3,
            "workers": [4, 8, 16],
            "avg_epoch_time_s": [10.0, 11.0, 12.5],
            "speedup": [1.0, 10 / 11, 0.8],
            "efficiency": [1.0, 10 / 22, 0.2],
            "speedup_ci_low": [1.0, 0.85, np.nan],
            "speedup_ci_high": [1.0, 0.97, np.nan],
        }
    )
    out = weak_efficiency(table, _runs({4: 400.0, 8: 800.0, 16: 1600.0}))
    per_gpu = np.array([400 / 4 / 10.0, 800 / 8 / 11.0, 1600 / 16 / 12.5])  # samples/s per GPU
    assert out["efficiency"].to_numpy() == pytest.approx(per_gpu / per_gpu[0])
    assert out["speedup"].isna().all()
    assert out["speedup_ci_low"].isna().all()
    assert out.loc[1, "efficiency_ci_low"] == pytest.approx(0.85)  # T_b/T_w interval, same work
    # without samples_per_epoch: the per-GPU problem is taken as fixed, efficiency = T_b / T_w
    bare = weak_efficiency(table, _runs({4: None, 8: None, 16: None}))
    assert bare["efficiency"].to_numpy() == pytest.approx([1.0, 10 / 11, 0.8])


def _weak_store(uri: str) -> None:
    """Two jobs per worker count; samples_per_epoch = 250 per GPU; epoch time grows slowly."""
    from itwin_report.emulator import mlflow_writer

    w = mlflow_writer.RunWriter(uri)
    exp = w.experiment_id("weak", mlflow_writer.artifact_location(uri, "weak"))
    t = T0
    for workers, base in ((4, 10.0), (8, 10.5), (16, 11.2)):
        for repeat in range(2):
            top = w.create_run(exp, f"ddp-{workers}", t)
            run = w.create_run(exp, "worker_0 (main)", t, parent_run_id=top)
            points = [
                ("epoch_time_s", base + 0.1 * repeat + 0.05 * s, t + s * 1000, s) for s in range(3)
            ]
            params = {
                "strategy": "torch-ddp",
                "global_rank": 0,
                "global_world_size": workers,
                "samples_per_epoch": 250 * workers,
            }
            w.log_batch(run, points, params)
            w.end_run(run, t + 10_000)
            w.end_run(top, t + 11_000)
            t += 100_000


def _report(uri: str, *extra: str) -> Any:
    args = ["generate-scalability-report", "-e", "weak", "--tracking-uri", uri]
    result = cli_runner().invoke(main, [*args, "--format", "json", "--no-plots", "-q", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_weak_scaling_through_the_command(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _weak_store(uri)
    report = _report(uri, "--predict", "64")
    assert report["scaling"] == "weak"
    assert report["scaling_note"].startswith("Weak scaling (auto)")
    # mean epoch time after warm-up (steps 1, 2) of both jobs: base + 0.05 + 0.075
    times = {4: 10.125, 8: 10.625, 16: 11.325}
    for row in report["epoch_time"]:
        assert row["epoch_time_speedup"] is None
        assert row["epoch_time_efficiency"] == pytest.approx(times[4] / times[row["workers"]])
    assert report["predictions"] == [] and report["scaling_models"] == []
    assert report["prediction_notes"][0].startswith("no predictions under weak scaling")
    forced = _report(uri, "--scaling", "strong", "--predict", "64")
    assert forced["scaling"] == "strong"
    assert forced["epoch_time"][1]["epoch_time_speedup"] == pytest.approx(times[4] / times[8])
    # epoch times that grow with the workers: Amdahl is a poor fit; the refusal says why
    [refusal] = forced["predictions"]
    assert (refusal["strategy"], refusal["workers"], refusal["avg_epoch_time_s"]) == (
        "torch-ddp",
        64,
        None,
    )
    assert refusal["note"].startswith("no scaling model: best fit (amdahl) is too poor")


def test_predict_option_validation() -> None:
    result = cli_runner().invoke(main, ["generate-scalability-report", "--predict", "64,x"])
    assert result.exit_code == 2
    assert "expected worker counts from 1 to" in result.stderr


def test_emulated_weak_scaling_is_detected_and_matches_the_truth(tmp_path: Path) -> None:
    """``emulate --scaling weak`` (noise-free): auto finds weak scaling; efficiency = truth's."""
    from itwin_report.emulator import EmulationOptions, expected_truth, run_emulation
    from itwin_report.report import build_report
    from itwin_report.store import load_experiment

    options = EmulationOptions(
        strategies=("torch-ddp",),
        workers=(2, 4, 8),
        epochs=3,
        repeats=1,
        scaling="weak",
        overrides=("noise=0",),
        log_on_workers="0",
        experiment_name="weak-emulated",
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_emulation(options, uri)
    truth = {c["workers"]: c for c in expected_truth(options)["configurations"]}
    report = build_report(load_experiment(uri, "weak-emulated", show_progress=False))
    assert report.analysis is not None and report.analysis.scaling == "weak"

    def per_gpu(w: int) -> float:
        c = truth[w]
        return c["samples_per_epoch"] / (w * c["mean_epoch_time_after_warmup_s"])

    for row in report.epoch_time.to_dict("records"):
        assert row["efficiency"] == pytest.approx(per_gpu(row["workers"]) / per_gpu(2), rel=1e-6)
