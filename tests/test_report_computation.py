"""Computation table: regexes, ProfilerStep exclusion, pooling over ranks and runs."""

from __future__ import annotations

import math

import pytest
from test_report_builders import make_data, profile, run

from itwin_report.report import build_report
from itwin_report.report.computation import classify


def test_classification_of_names() -> None:
    import pandas as pd

    names = [
        "aten::mm",
        "at::native::vectorized_elementwise_kernel",
        "c10::cuda::copy",
        "autograd::engine::evaluate_function",
        "c10d::allreduce_",
        "ncclKernel_AllReduce_RING_LL_Sum_float",
        "ProfilerStep#3",
        "cudaMemcpyAsync",
        "broadcast_coalesced",
        "flat::aten",  # no "aten::" prefix -> neither
    ]
    frame = pd.DataFrame({"name": names, "self_cuda_time_total": [1.0] * len(names)})
    rows = classify(frame).set_index("name")
    assert "ProfilerStep#3" not in rows.index
    comp = {n for n in rows.index if rows.at[n, "computation"]}
    comm = {n for n in rows.index if rows.at[n, "communication"]}
    assert comp == {
        "aten::mm",
        "at::native::vectorized_elementwise_kernel",
        "c10::cuda::copy",
        "autograd::engine::evaluate_function",
    }
    assert comm == {
        "c10d::allreduce_",
        "ncclKernel_AllReduce_RING_LL_Sum_float",
        "broadcast_coalesced",
    }


def test_fractions_pool_ranks_and_runs() -> None:
    # rank 0 of job A: aten 300, nccl 100, other 100, ProfilerStep 5000 (left out)
    # rank 1 of job A: aten 100, c10d 100; job B rank 0: at::native 200, memcpy 100
    # denominator 300+100+100+100+100+200+100 = 1000
    # computation (300+100+200)/1000 = 0.6; communication (100+100)/1000 = 0.2
    data = make_data(
        [run("a0", "A", "ddp", 2), run("a1", "A", "ddp", 2, rank=1), run("b0", "B", "ddp", 2)],
        profiles=profile(
            "a0",
            [("aten::mm", 300), ("ncclKernel_x", 100), ("Memcpy", 100), ("ProfilerStep*", 5000)],
        )
        + profile("a1", [("aten::add", 100), ("c10d::allreduce_", 100)])
        + profile("b0", [("at::native::kernel", 200), ("Memcpy", 100)]),
    )
    row = build_report(data).computation.iloc[0]
    assert row["runs"] == 2
    assert row["computation_fraction"] == pytest.approx(0.6)
    assert row["communication_fraction"] == pytest.approx(0.2)


def test_only_profiler_steps_gives_nan() -> None:
    data = make_data([run("a0", "A", "ddp", 2)], profiles=profile("a0", [("ProfilerStep#1", 9)]))
    row = build_report(data).computation.iloc[0]
    assert math.isnan(row["computation_fraction"]) and math.isnan(row["communication_fraction"])
