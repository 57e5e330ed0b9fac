"""`--predict 64,128` on the default preset with the emulator's default noise and rank 0
logging (`emulate --log-on-workers 0`), against the truth the emulator works out for 64 and 128
GPUs from its noise-free model: every prediction within 15 % and inside its 95 % interval,
the capped ones with the floor's own interval (worked out here from the logged epoch times)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from itwin_report.emulator import EmulationOptions, expected_truth, run_emulation
from itwin_report.report import build_report
from itwin_report.store import load_experiment

T_975_1 = 12.7062047  # Student's t, 97.5 % quantile, 1 degree of freedom (two runs)


def test_default_preset_predictions_hold_the_truth(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = EmulationOptions(log_on_workers="0")  # 4-32 GPUs, 2 runs each, seed 0
    run_emulation(options, uri)
    data = load_experiment(uri, options.experiment_name, show_progress=False)
    report = build_report(data, predict_workers=[64, 128])
    assert report.analysis is not None
    rows = report.analysis.predictions.to_dict("records")
    truth = {
        (c["strategy"], c["workers"]): c["mean_epoch_time_after_warmup_s"]
        for c in expected_truth(EmulationOptions(workers=(64, 128)))["configurations"]
    }
    assert len(rows) == 6
    # the floor by hand: each run's mean epoch time after the first epoch at 32 GPUs (where
    # the emulated input pipeline caps every strategy), their mean and t-interval over 2 runs
    runs = data.runs.drop_duplicates("run_id").set_index("run_id")
    points = data.metrics[(data.metrics["key"] == "epoch_time_s") & (data.metrics["step"] >= 1)]
    for row in rows:
        strategy, w = row["strategy"], int(row["workers"])
        true = truth[strategy, w]
        t, low, high = row["avg_epoch_time_s"], row["low_s"], row["high_s"]
        assert abs(t / true - 1) < 0.15, (strategy, w, t, true)
        assert low <= true <= high, (strategy, w, low, true, high)
        assert row["model"] == "input ceiling" and high > low
        mine = points[points["run_id"].map(runs["strategy"]) == strategy]
        mine = mine[mine["run_id"].map(runs["workers"]) == 32]
        per_run = mine.groupby("run_id", observed=True)["value"].mean().to_numpy()
        assert len(per_run) == 2
        floor = float(per_run.mean())
        half = T_975_1 * float(np.std(per_run, ddof=1)) / math.sqrt(2) / floor
        assert t == pytest.approx(floor, rel=1e-9)
        assert low == pytest.approx(floor * math.exp(-half * w / 32), rel=1e-6)
        assert high == pytest.approx(floor * math.exp(half * w / 32), rel=1e-6)
