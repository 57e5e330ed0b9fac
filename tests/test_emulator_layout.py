"""What the emulator logs (itwinai's layout, weak scaling), checked against hand-worked values."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from itwin_report.data.rundata import PROFILE_ARTIFACT
from itwin_report.emulator.options import EmulationOptions
from itwin_report.emulator.truth import expected_truth
from itwin_report.emulator.writer import run_emulation
from itwin_report.store import mlflow_api

# One GPU, one epoch: 100 steps of 32 samples at 320 samples/s = 10 s fully busy, then 2 s of
# per-epoch overhead at 50 % busy; no warm-up, checkpoint, optimizer time or noise.
HAND = (
    "noise=0", "epochs=1", "samples_per_epoch=3200", "batch_size=32", "gpu_samples_per_sec=320",
    "optimizer_s=0", "warmup_s=0", "epoch_overhead_s=2", "overhead_busy=0.5", "checkpoint_every=0",
    "probing_interval=1", "idle_w=60", "board_w=400", "setup_s=5",
    "loader_samples_per_sec_per_node=1e9", "storage_samples_per_sec=1e9",
)  # fmt: skip


def _hand_options(**kw) -> EmulationOptions:
    base = dict(strategies=("torch-ddp",), workers=(1,), repeats=1, overrides=HAND,
                log_on_workers="0", experiment_name="hand")  # fmt: skip
    return EmulationOptions(**{**base, **kw})


def test_power_and_utilization_truth_worked_out_by_hand() -> None:
    (config,) = expected_truth(_hand_options())["configurations"]
    # 12 samples: 10 at 100 %, 2 at 50 % -> mean (1000 + 100) / 12
    assert config["utilization_pct"] == pytest.approx(1100 / 12, rel=1e-12)
    # power 60 + 340 * u: 400 W x 10, 230 W x 2 -> 4460 W over 12 samples
    assert config["avg_power_w"] == pytest.approx(4460 / 12, rel=1e-12)
    assert config["energy_wh"] == pytest.approx(4460 / 3600, rel=1e-12)  # 1 s each
    assert config["mean_epoch_time_s"] == pytest.approx(12.0, rel=1e-12)
    assert config["strategy"] == "non-distributed"
    assert config["steady_samples_per_sec_per_gpu"] == pytest.approx(320.0)


def test_written_gpu_series_match_the_hand_values(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_emulation(_hand_options(itwinai_only=True), uri)
    client = mlflow_api.client(uri)
    exp = client.get_experiment_by_name("hand")
    (worker,) = [r for r in client.search_runs([exp.experiment_id])
                 if "mlflow.parentRunId" in r.data.tags]  # fmt: skip
    history = client.get_metric_history(worker.info.run_id, "gpu_power_W")
    power = sorted((m.step, m.value) for m in history)
    assert power == [(k, pytest.approx(400.0 if k <= 10 else 230.0)) for k in range(1, 13)]
    util = [
        m.value for m in client.get_metric_history(worker.info.run_id, "gpu_utilization_percent")
    ]
    assert sorted(util) == pytest.approx([50.0, 50.0] + [100.0] * 10)
    # itwinai's own layout: 1 GPU is "non-distributed", loss steps count batches
    params = worker.data.params
    assert params["strategy"] == "non-distributed"
    assert params["batch_size"] == "32" and params["global_world_size"] == "1"
    assert "samples_per_epoch" not in params and "gpu_samples_per_sec" not in params
    loss = client.get_metric_history(worker.info.run_id, "train_loss_epoch")
    assert [m.step for m in loss] == [100]  # 3200 / 32 batches in epoch 0
    assert set(worker.data.metrics) == {
        "gpu_power_W", "gpu_utilization_percent", "epoch_time_s", "train_loss_epoch",
        "validation_loss_epoch", "global_validation_loss_epoch", "val_accuracy",
    }  # fmt: skip
    local = client.download_artifacts(worker.info.run_id, PROFILE_ARTIFACT, str(tmp_path))
    rows = list(csv.DictReader(io.StringIO(Path(local).read_text())))
    assert {(r["strategy"], r["num_gpus"], r["global_rank"]) for r in rows} == {
        ("non-distributed", "1", "0")
    }
    assert client.list_artifacts(worker.info.run_id, "performance") == []


def test_one_gpu_is_one_non_distributed_job_per_repeat() -> None:
    options = EmulationOptions(strategies=("deepspeed", "horovod"), workers=(1, 2), repeats=3)
    configs = [(c.strategy, c.workers) for c in options.configs()]
    assert configs == [("non-distributed", 1), ("deepspeed", 2), ("horovod", 2)]
    assert len(options.jobs()) == 9


def test_weak_scaling_grows_the_epoch_with_the_gpus() -> None:
    common = dict(strategies=("torch-ddp",), workers=(2, 4, 8), epochs=2, overrides=("noise=0",))
    strong = expected_truth(EmulationOptions(**common))
    weak = expected_truth(EmulationOptions(scaling="weak", **common))
    assert (strong["scaling"], weak["scaling"]) == ("strong", "weak")
    assert [c["samples_per_epoch"] for c in strong["configurations"]] == [25_000] * 3
    # the smallest count keeps the preset's 25,000 samples: 4 GPUs do 50,000, 8 do 100,000
    assert [c["samples_per_epoch"] for c in weak["configurations"]] == [25_000, 50_000, 100_000]
    for c in weak["configurations"]:
        # steps per epoch stay ceil(25000 / (2 * 32)) = 391 at every count
        per_gpu = c["samples_per_sec_per_gpu"]
        assert per_gpu * c["workers"] == pytest.approx(c["samples_per_sec"])
    s2, s8 = strong["configurations"][0], strong["configurations"][2]
    w2, w8 = weak["configurations"][0], weak["configurations"][2]
    assert w2["mean_epoch_time_s"] == pytest.approx(s2["mean_epoch_time_s"])
    assert w8["mean_epoch_time_s"] > 2 * s8["mean_epoch_time_s"]  # 4x the training steps
