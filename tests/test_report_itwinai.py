"""Runs as itwinai 0.4.2 logs them: a non-distributed 1-worker job, batch_size and
train_loss_epoch only (no samples_per_epoch, Rate or performance.json), CPU profiles."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from conftest import cli_runner
from test_report_builders import make_data, metric, profile, run

from itwin_report.cli import main
from itwin_report.data.validate import validate
from itwin_report.report import build_report
from itwin_report.report.computation import NO_GPU_REASON, classify

T0 = 1_700_000_000_000
PROFILE = "torch_profiling_averages/torch_profiling_averages.csv"
HEADER = (
    "name,node_id,self_cuda_time_total,cuda_time_total,cuda_time_total_str,calls,strategy,"
    "num_gpus,global_rank\n"
)

# (run name, strategy, world size, batches per epoch per rank, epoch time after warm-up)
JOBS = [
    ("nd-1", "non-distributed", 1, 128, 10.0),
    ("ddp-2", "torch-ddp", 2, 64, 5.5),
    ("ddp-4", "torch-ddp", 4, 32, 3.0),
]


def cpu_profile(strategy: str, gpus: int, rank: int) -> str:
    """A profiler table of a run without a GPU: zero device time in every row."""
    names = ["aten::mm", "gloo:all_reduce", "c10d::allreduce_", "ProfilerStep*"]
    return HEADER + "".join(f"{n},0,0.0,0.0,0us,3,{strategy},{gpus},{rank}\n" for n in names)


@pytest.fixture(scope="module")
def itwinai_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    from itwin_report.emulator import mlflow_writer

    uri = f"sqlite:///{tmp_path_factory.mktemp('itwinai') / 'mlflow.db'}"
    w = mlflow_writer.RunWriter(uri)
    exp = w.experiment_id("itwinai", mlflow_writer.artifact_location(uri, "itwinai"))
    for name, strategy, size, batches, seconds in JOBS:
        top = w.create_run(exp, name, T0)
        ranks = []
        for rank in range(min(size, 2)):
            worker = w.create_run(exp, f"worker_{rank}", T0, parent_run_id=top)
            points: list[Any] = [
                ("train_loss_epoch", 0.5, T0 + e, batches * (e + 1)) for e in range(3)
            ]
            if rank == 0:
                points += [
                    ("epoch_time_s", t, T0 + e, e) for e, t in enumerate([99.0, seconds, seconds])
                ]
            params = {"strategy": strategy, "global_rank": rank, "global_world_size": size}
            w.log_batch(worker, points, {**params, "batch_size": 64, "probing_interval": 1})
            ranks.append(worker)
        if name == "ddp-2":  # each rank's own CSV
            w.log_text(ranks[0], cpu_profile(strategy, size, 0), PROFILE)
            w.log_text(ranks[1], cpu_profile(strategy, size, 1), PROFILE)
        if name == "ddp-4":  # rank 0's CSV landed in rank 1's run only
            w.log_text(ranks[1], cpu_profile(strategy, size, 0), PROFILE)
        for run_id in [*ranks, top]:
            w.end_run(run_id, T0 + 60_000)
    return uri


def _report(uri: str, *args: str) -> dict:
    result = cli_runner().invoke(
        main,
        ["generate-scalability-report", "--tracking-uri", uri, "-e", "itwinai", "--format",
         "json", "--no-plots", "-q", *args],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_single_gpu_run_is_every_strategys_baseline(itwinai_store: str) -> None:
    report = _report(itwinai_store)
    rows = {(r["strategy"], r["workers"]): r for r in report["epoch_time"]}
    assert rows["non-distributed", 1]["epoch_time_speedup"] == 1.0
    assert rows["torch-ddp", 2]["epoch_time_speedup"] == pytest.approx(10.0 / 5.5)
    assert rows["torch-ddp", 4]["epoch_time_efficiency"] == pytest.approx(10.0 / 3.0 / 4)
    assert report["baseline"]["reference"] == {"strategy": "non-distributed", "workers": 1}
    per = _report(itwinai_store, "--baseline", "per-strategy")
    rows = {(r["strategy"], r["workers"]): r for r in per["epoch_time"]}
    assert rows["torch-ddp", 2]["epoch_time_speedup"] == 1.0
    assert rows["torch-ddp", 4]["epoch_time_speedup"] == pytest.approx(5.5 / 3.0)
    assert not any("single-GPU" in w for w in per["warnings"])


def test_samples_per_epoch_derived_from_batch_size_and_loss_steps(itwinai_store: str) -> None:
    report = _report(itwinai_store)
    rows = {(r["strategy"], r["workers"]): r for r in report["throughput"]}
    # 64 samples x batches per epoch x workers = 8,192 samples per epoch everywhere
    assert rows["non-distributed", 1]["samples_per_sec"] == pytest.approx(64 * 128 * 1 / 10.0)
    assert rows["torch-ddp", 2]["samples_per_sec"] == pytest.approx(64 * 64 * 2 / 5.5)
    assert rows["torch-ddp", 4]["samples_per_sec"] == pytest.approx(64 * 32 * 4 / 3.0)
    assert {r["source"] for r in report["throughput"]} == {"epoch time, derived samples/epoch"}
    stated = _report(itwinai_store, "--samples-per-epoch", "1000")
    rows = {(r["strategy"], r["workers"]): r for r in stated["throughput"]}
    assert rows["non-distributed", 1]["samples_per_sec"] == pytest.approx(100.0)
    assert rows["torch-ddp", 2]["source"] == "epoch time, --samples-per-epoch"


def test_cpu_profiles_say_why_and_misplaced_csvs_count_once(itwinai_store: str) -> None:
    from itwin_report import store

    data = store.load_experiment(itwinai_store, "itwinai", show_progress=False)
    # ddp-2: each rank's run holds its own CSV, nothing dropped there;
    # ddp-4: rank 0's CSV in rank 1's run is kept once and flagged
    assert sorted(data.profiles["global_rank"].unique()) == [0.0, 1.0]
    assert len(data.profiles) == 3 * 4
    flagged = [w for w in data.warnings if "written by another rank" in w]
    assert flagged == [
        "1 profiler CSV(s) of 'ddp-4' were written by another rank (their global_rank differs "
        "from the worker run's)"
    ]
    report = build_report(data)
    assert report.computation["computation_fraction"].isna().all()
    assert report.reasons == {"computation": NO_GPU_REASON}
    (why,) = [w for w in report.warnings if NO_GPU_REASON in w]
    assert "torch-ddp with 2 workers; torch-ddp with 4 workers" in why


def test_a_csv_counted_twice_is_dropped() -> None:
    rows = [("aten::mm", 10.0), ("nccl:all_reduce", 10.0)]

    def csv_of(run_id: str, rank: int) -> list[dict]:
        out = profile(run_id, rows)
        return [r | {"global_rank": rank, "num_gpus": 2, "csv_strategy": "ddp"} for r in out]

    data = make_data(
        [run("a", "J", "ddp", 2, rank=0), run("b", "J", "ddp", 2, rank=1),
         run("c", "K", "ddp", 4, rank=0)],
        profiles=csv_of("a", 0) + csv_of("b", 0) + csv_of("c", 0),  # c: num_gpus 2, not 4
    )  # fmt: skip
    out = validate(data)
    assert sorted(out.profiles["run_id"].unique()) == ["a"]
    assert any("would count a rank twice" in w and "'ddp-2'" in w for w in out.warnings)
    assert any("num_gpus differs" in w and "'ddp-4'" in w for w in out.warnings)


# names as the PyTorch profiler reports them on CPU (gloo), NVIDIA (NCCL) and AMD (RCCL) runs
COMMUNICATION = [
    "gloo:all_reduce", "gloo:gather", "gloo:broadcast", "c10d::allreduce_",
    "c10d::allgather_", "record_param_comms", "nccl:all_reduce", "nccl:_all_gather_base",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
    "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "rcclGenericKernel",
    "void ncclKernel_ReduceScatter_RING_LL_Sum_half(ncclWorkElem)",
]  # fmt: skip
COMPUTATION = [
    "aten::mm", "aten::addmm", "aten::convolution_backward", "autograd::engine::evaluate_"
    "function: AddmmBackward0", "c10::Half", "at::native::vectorized_elementwise_kernel",
]  # fmt: skip
OTHER = [
    "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)",
    "cudaStreamSynchronize", "cudaLaunchKernel", "hipMemcpyWithStream",
    "Optimizer.step#SGD.step", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
    "void at_cuda_detail::cub::DeviceRadixSortOnesweepKernel",
]  # fmt: skip


def test_classification_of_real_profiler_names() -> None:
    names = COMMUNICATION + COMPUTATION + OTHER
    data = make_data([run("r", "J", "ddp", 2)], profiles=profile("r", [(n, 1.0) for n in names]))
    rows = classify(data.profiles).set_index("name")
    for name in COMMUNICATION:
        assert rows.loc[name, "communication"] and not rows.loc[name, "computation"], name
    for name in COMPUTATION:
        assert rows.loc[name, "computation"] and not rows.loc[name, "communication"], name
    for name in OTHER:
        assert not rows.loc[name, "computation"] and not rows.loc[name, "communication"], name


def test_uneven_batches_are_not_derived_and_the_warning_says_what_is_missing() -> None:
    runs = [run("a", "A", "ddp", 2) | {"batch_size": 64.0}, run("b", "B", "ddp", 4)]
    data = make_data(
        runs,
        metric("a", "epoch_time_s", [9.0, 5.0])
        + metric("a", "train_loss_epoch", [1.0, 1.0, 1.0], steps=[64, 128, 200])
        + metric("b", "epoch_time_s", [9.0, 3.0]),
    )
    report = build_report(validate(data))
    assert report.throughput.empty
    assert (
        "no throughput for ddp with 2 workers: no performance.json, no local_samples_per_sec "
        "metric, no samples_per_epoch param, and the train_loss_epoch steps give different "
        "batch counts per epoch; --samples-per-epoch N states it" in report.warnings
    )
    assert any(
        w.startswith("no throughput for ddp with 4 workers")
        and "no samples_per_epoch or batch_size param" in w
        for w in report.warnings
    )
    stated = build_report(validate(data), samples_per_epoch=600.0)
    assert stated.throughput["samples_per_sec"].tolist() == [120.0, 200.0]  # 600/5, 600/3
    assert math.isclose(stated.throughput["speedup"].iloc[1], 200.0 / 120.0)
