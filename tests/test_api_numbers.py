"""Every table through the public API (``load`` then ``build``), on a store written by hand.

Plain MLflow runs (no rank param, no parent run: one job each) of a 1-GPU base and ddp on 2 and
4 GPUs, two runs per configuration; one rank logs GPU power; one ddp-4 run has a profile.
Every expected number below is worked out in its comment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import itwin_report as ir

T0 = 1_700_000_000_000
PROFILE = (
    "name,node_id,self_cuda_time_total,cuda_time_total,cuda_time_total_str,calls,strategy,"
    "num_gpus,global_rank\n"
    "aten::mm,0,600.0,600.0,600us,10,ddp,4,0\n"
    "nccl:all_reduce,0,300.0,300.0,300us,10,ddp,4,0\n"
    "Memcpy HtoD,0,100.0,100.0,100us,10,ddp,4,0\n"
    "ProfilerStep*,0,0.0,1000.0,1ms,3,ddp,4,0\n"
)
RUNS = [  # (strategy, workers, epoch times: the first is warm-up)
    ("non-distributed", 1, [50.0, 40.0, 40.0]),
    ("non-distributed", 1, [50.0, 44.0, 44.0]),
    ("ddp", 2, [30.0, 20.0, 20.0]),
    ("ddp", 2, [30.0, 22.0, 22.0]),
    ("ddp", 4, [20.0, 14.0, 14.0]),
    ("ddp", 4, [20.0, 14.0, 14.0]),
]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> ir.Report:
    from mlflow.entities import Metric, Param, RunStatus
    from mlflow.tracking import MlflowClient

    root: Path = tmp_path_factory.mktemp("api-numbers")
    uri = f"sqlite:///{root}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("hand", artifact_location=str(root / "artifacts"))
    for i, (strategy, workers, epochs) in enumerate(RUNS):
        rid = client.create_run(exp, run_name=f"{strategy}-{workers}-{i}").info.run_id
        metrics = [Metric("epoch_time_s", t, T0 + s, s) for s, t in enumerate(epochs)]
        # 9 power samples of 100 * workers W, 1 s apart, on rank 0's GPU only
        metrics += [Metric("gpu_power_W", 100.0 * workers, T0 + s, s) for s in range(9)]
        params = {
            "strategy": strategy,
            "global_world_size": workers,
            "samples_per_epoch": 8400,
            "probing_interval": 1,
        }
        client.log_batch(rid, metrics=metrics, params=[Param(k, str(v)) for k, v in params.items()])
        if strategy == "ddp" and workers == 4 and i == 4:
            client.log_text(rid, PROFILE, "torch_profiling_averages/torch_profiling_averages.csv")
        client.set_terminated(rid, RunStatus.to_string(RunStatus.FINISHED))
    return ir.build(ir.load(uri, "hand"), predict=[8])


def _row(frame, strategy: str, workers: int) -> dict:
    rows = frame[(frame["strategy"] == strategy) & (frame["workers"] == workers)]
    assert len(rows) == 1
    return rows.iloc[0].to_dict()


def test_epoch_time_against_the_one_gpu_base(report: ir.Report) -> None:
    # warm-up 1: base points 40, 40, 44, 44 -> 42 s; ddp-2: 20, 20, 22, 22 -> 21 s; ddp-4: 14 s
    base = _row(report.epoch_time, "non-distributed", 1)
    assert base["avg_epoch_time_s"] == pytest.approx(42.0)
    assert base["std_epoch_time_s"] == pytest.approx(2 * 2**0.5)  # per-run means 40, 44
    two, four = _row(report.epoch_time, "ddp", 2), _row(report.epoch_time, "ddp", 4)
    assert (two["speedup"], two["efficiency"]) == pytest.approx((2.0, 1.0))  # 42/21, 2*1/2
    assert (four["speedup"], four["efficiency"]) == pytest.approx((3.0, 0.75))  # 42/14, 3*1/4
    assert (four["base_strategy"], four["base_workers"]) == ("non-distributed", 1)


def test_gpu_energy_scaled_from_the_one_gpu_measured(report: ir.Report) -> None:
    # 9 samples x 400 W x 1 s / 3600 = 1 Wh on one GPU of 4 -> 4 Wh; over 3 epochs: 4/3 Wh
    four = _row(report.gpu, "ddp", 4)
    assert four["energy_wh"] == pytest.approx(4.0)
    assert four["energy_wh_per_epoch"] == pytest.approx(4.0 / 3)
    assert four["energy_coverage"] == pytest.approx(0.25)
    assert four["avg_power_w"] == pytest.approx(400.0)
    # the 1-GPU job is measured whole: 9 x 100 / 3600 = 0.25 Wh
    assert _row(report.gpu, "non-distributed", 1)["energy_wh"] == pytest.approx(0.25)


def test_computation_from_the_profile(report: ir.Report) -> None:
    # ProfilerStep* left out: 600 + 300 + 100 = 1000 us; 60 % aten, 30 % nccl, 10 % other
    four = _row(report.computation, "ddp", 4)
    assert four["computation_fraction"] == pytest.approx(0.6)
    assert four["communication_fraction"] == pytest.approx(0.3)
    assert four["other_fraction"] == pytest.approx(0.1)


def test_throughput_from_epoch_time_and_samples(report: ir.Report) -> None:
    # 8400 samples per epoch / 14 s = 600 samples/s at 4 GPUs; the base's jobs run at
    # 8400/40 = 210 and 8400/44 = 190.909..., whose mean is 200.4545... (rates are averaged over
    # jobs, never summed): throughput speedup 600 / 200.4545 = 2.9932, efficiency 0.7483
    four = _row(report.throughput, "ddp", 4)
    assert four["samples_per_sec"] == pytest.approx(600.0)
    assert four["samples_per_sec_per_gpu"] == pytest.approx(150.0)
    base = (8400 / 40 + 8400 / 44) / 2
    assert _row(report.throughput, "non-distributed", 1)["samples_per_sec"] == pytest.approx(base)
    assert (four["speedup"], four["efficiency"]) == pytest.approx((600 / base, 600 / base / 4))
    assert (four["base_strategy"], four["base_workers"]) == ("non-distributed", 1)


def test_models_and_karp_flatt_include_the_base(report: ir.Report) -> None:
    assert report.analysis is not None
    kf = report.analysis.karp_flatt.set_index("workers")["karp_flatt"]
    # e = (1/S - 1/n) / (1 - 1/n): at 2, S = 2 -> 0; at 4, S = 3 -> (1/3 - 1/4) / (3/4) = 1/9
    assert kf[2] == pytest.approx(0.0, abs=1e-12)
    assert kf[4] == pytest.approx(1 / 9)
    (model,) = report.analysis.models[report.analysis.models["model"] == "amdahl"].to_dict(
        "records"
    )
    assert model["points"] == 3  # 1, 2 and 4 workers
    # Amdahl through 42, 21, 14: T = c0/p + c1; the least-squares fit on relative residuals of
    # these three points: c1 = 0 and c0 = 42 fit 1 and 2 exactly but 14 != 10.5, so s > 0
    assert 0 < model["serial_fraction"] < 0.2
    (pred,) = report.analysis.predictions.to_dict("records")
    assert pred["workers"] == 8 and (pred["base_strategy"], pred["base_workers"]) == (
        "non-distributed",
        1,
    )
    if pred["avg_epoch_time_s"] == pred["avg_epoch_time_s"]:
        assert pred["speedup"] == pytest.approx(42.0 / pred["avg_epoch_time_s"])
