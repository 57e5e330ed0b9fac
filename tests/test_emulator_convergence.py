"""The emulator's convergence model: the large-batch formula by hand, the truth file, and the
report's time-to-target table read back from emulated runs against that truth."""

from __future__ import annotations

import math
from typing import Any

import pytest

from itwin_report.emulator import EmulationOptions, run_emulation
from itwin_report.emulator.truth import expected_truth

WORKERS = (4, 8, 16, 32)
REPEATS = 3


def _options(name: str, *overrides: str) -> EmulationOptions:
    return EmulationOptions(
        strategies=("torch-ddp",),
        workers=WORKERS,
        repeats=REPEATS,
        seed=3,
        log_on_workers="0",
        experiment_name=name,
        overrides=overrides,
    )


def test_epochs_to_target_grow_past_the_critical_batch() -> None:
    """E(B) = 1.9 (1 + B / 347) epochs at B = 32 x workers; the first whole epoch at or past
    it meets the target, within the 5 epochs run (else never)."""
    truth = {c["workers"]: c for c in expected_truth(_options("x"))["configurations"]}
    for workers, epochs in ((4, 3), (8, 4), (16, 5)):
        row = truth[workers]
        assert row["global_batch_size"] == 32 * workers
        assert row["epochs_needed"] == pytest.approx(1.9 * (1 + 32 * workers / 347))
        assert row["reaches_target"] and row["epochs_to_target"] == epochs
        expected = 12.0 + sum(row["epoch_times_s"][:epochs])  # set-up, then those epochs
        assert row["time_to_target_s"] == pytest.approx(expected)
    assert truth[32]["epochs_needed"] == pytest.approx(1.9 * (1 + 1024 / 347))  # 7.5 > 5
    assert not truth[32]["reaches_target"] and truth[32]["time_to_target_s"] is None
    assert expected_truth(_options("x"))["target"] == "val_accuracy>=0.76"


def test_default_demo_has_epochs_that_scale_and_a_target_that_does_not() -> None:
    """In the default emulation, 16 GPUs keep most of their epoch-time efficiency but need
    5 epochs where 4 GPUs need 3: the time-to-target efficiency falls well below."""
    truth = expected_truth(EmulationOptions())
    rows = {(c["strategy"], c["workers"]): c for c in truth["configurations"]}
    base, big = rows[("torch-ddp", 4)], rows[("torch-ddp", 16)]
    epoch_eff = base["mean_epoch_time_after_warmup_s"] / big["mean_epoch_time_after_warmup_s"] / 4
    target_eff = base["time_to_target_s"] / big["time_to_target_s"] / 4
    assert (base["epochs_to_target"], big["epochs_to_target"]) == (3, 5)
    assert epoch_eff > 0.6 and target_eff < epoch_eff - 0.25


def _report(uri: str, name: str) -> Any:
    import itwin_report as ir

    data = ir.load(uri, name, metrics=["val_accuracy"])
    return ir.build(data, target="val_accuracy>=0.76")


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = f"sqlite:///{tmp_path_factory.mktemp('conv') / 'mlflow.db'}"
    run_emulation(_options("exact", "noise=0"), uri)
    run_emulation(_options("noisy"), uri)
    return uri


def test_report_reads_back_the_noise_free_truth(emulated: str) -> None:
    truth = {
        c["workers"]: c for c in expected_truth(_options("exact", "noise=0"))["configurations"]
    }
    table = _report(emulated, "exact").time_to_target.set_index("workers")
    base_time = truth[4]["time_to_target_s"]
    for workers in WORKERS:
        row, expected = table.loc[workers], truth[workers]
        assert row["runs"] == REPEATS
        if not expected["reaches_target"]:
            assert row["runs_reached"] == 0 and math.isnan(row["avg_time_to_target_s"])
            continue
        assert row["runs_reached"] == REPEATS
        assert row["epochs_to_target"] == expected["epochs_to_target"]
        # timestamps are whole milliseconds
        assert row["avg_time_to_target_s"] == pytest.approx(expected["time_to_target_s"], abs=2e-3)
        efficiency = base_time / expected["time_to_target_s"] * 4 / workers
        assert row["efficiency"] == pytest.approx(efficiency, rel=1e-4)
        assert row["global_batch_size"] == 32 * workers


def test_noisy_repeats_reach_as_the_truth_says(emulated: str) -> None:
    """Noise moves the curve (2 %) and the epochs' times, never across an epoch here: the
    reached counts and epochs to target are the truth's, the times within 5 % of it."""
    truth = {c["workers"]: c for c in expected_truth(_options("noisy"))["configurations"]}
    report = _report(emulated, "noisy")
    table = report.time_to_target.set_index("workers")
    for workers in WORKERS:
        row, expected = table.loc[workers], truth[workers]
        assert row["runs_reached"] == (REPEATS if expected["reaches_target"] else 0)
        if expected["reaches_target"]:
            assert row["epochs_to_target"] == expected["epochs_to_target"]
            assert row["avg_time_to_target_s"] == pytest.approx(
                expected["time_to_target_s"], rel=0.05
            )
    spread = report.time_to_target_runs.dropna(subset=["time_to_target_s"])
    assert spread.groupby("workers")["time_to_target_s"].std().gt(0).all()  # repeats differ
