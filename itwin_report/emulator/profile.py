"""Profiler averages (``torch_profiling_averages.csv``) of one rank, from the step model.

Device times are microseconds over ``profiled_steps`` steps. Computation rows are ATen and
autograd ops; the rest (collective kernels including their time spinning for peers, copies,
synchronisation) must never match the report's regex ``\\b(aten|at|c10|autograd)::``.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from itwin_report.emulator import model
from itwin_report.emulator.params import ModelParams

PROFILER_STEP = "ProfilerStep*"
# share of forward + backward device time per ATen/autograd row
COMPUTE_SHARES: tuple[tuple[str, float, int], ...] = (
    ("aten::convolution_backward", 0.34, 2),
    ("aten::cudnn_convolution", 0.22, 2),
    ("aten::native_batch_norm", 0.12, 2),
    ("aten::addmm", 0.08, 1),
    ("aten::mm", 0.06, 2),
    ("aten::threshold_backward", 0.08, 2),
    ("aten::copy_", 0.06, 3),
    ("autograd::engine::evaluate_function: ConvolutionBackward0", 0.04, 2),
)
OPTIMIZER_ROW = "aten::add_"
ALL_REDUCE_KERNEL = (
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
)
REDUCE_SCATTER_KERNEL = (
    "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
)
ALL_GATHER_KERNEL = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
MEMSET_US = 4.0  # per step


@dataclass(frozen=True)
class Row:
    """One profiler row: self device time, inclusive device time (both us), calls."""

    name: str
    self_us: float
    total_us: float
    calls: int
    computation: bool


def _collective_rows(strategy: str, kernel_us: float, calls: int, steps: int) -> list[Row]:
    if strategy == "deepspeed":
        half = kernel_us / 2
        n = max(calls // 2, 1) * steps
        return [
            Row("nccl:reduce_scatter", 0.0, half, n, False),
            Row(REDUCE_SCATTER_KERNEL, half, half, n, False),
            Row("nccl:all_gather", 0.0, half, n, False),
            Row(ALL_GATHER_KERNEL, half, half, n, False),
        ]
    n = max(calls, 1) * steps
    return [
        Row("nccl:all_reduce", 0.0, kernel_us, n, False),
        Row(ALL_REDUCE_KERNEL, kernel_us, kernel_us, n, False),
    ]


def device_copy_s(p: ModelParams, strategy: str, workers: int) -> float:
    """DtoD copies per step: Horovod's fusion buffer in and out; one bucket/partition copy."""
    if workers <= 1:
        return 0.0
    copies = 2 if strategy == "horovod" else 1
    return copies * p.grad_mb * 1e6 / (p.device_copy_gb_per_s * 1e9)


def host_copy_s(p: ModelParams) -> float:
    """The batch's host-to-device copy per step: b * sample_mb / pcie_gb_per_s."""
    return p.batch_size * p.sample_mb * 1e6 / (p.pcie_gb_per_s * 1e9)


def rows(p: ModelParams, strategy: str, workers: int) -> list[Row]:
    """Noise-free profiler rows of one rank for ``profiled_steps`` steps."""
    st = model.step(p, strategy, workers)
    k = p.profiled_steps
    us = 1e6 * k
    out = [
        Row(name, share * st.forward_backward * us, share * st.forward_backward * us, c * k, True)
        for name, share, c in COMPUTE_SHARES
    ]
    out.append(Row(OPTIMIZER_ROW, st.optimizer * us, st.optimizer * us, 160 * k, True))
    out += _collective_rows(strategy, (st.comm + st.spin) * us, st.collectives, k)
    htod = host_copy_s(p) * us
    dtod = device_copy_s(p, strategy, workers) * us
    half_sync = p.sync_us / 2 * k
    out += [
        Row("Memcpy HtoD (Pageable -> Device)", htod, htod, 2 * k, False),
        Row("Memcpy DtoD (Device -> Device)", dtod, dtod, 2 * k, False),
        Row("Memset (Device)", MEMSET_US * k, MEMSET_US * k, 4 * k, False),
        Row("cudaDeviceSynchronize", half_sync, half_sync, k, False),
        Row("cudaStreamSynchronize", half_sync, half_sync, 4 * k, False),
    ]
    covered = sum(r.self_us for r in out)
    step_self = p.profiler_step_us * k
    out.append(Row(PROFILER_STEP, step_self, covered + step_self, k, False))
    return out


def fractions(table: list[Row]) -> tuple[float, float]:
    """(computation, communication) shares of all rows except ``ProfilerStep*``."""
    body = [r for r in table if r.name != PROFILER_STEP]
    total = sum(r.self_us for r in body)
    compute = sum(r.self_us for r in body if r.computation)
    comm = sum(r.self_us for r in body if r.name.startswith(("nccl", "ncclDevKernel")))
    return compute / total, comm / total


def _fmt_us(value: float) -> str:
    """Format a device time the way the profiler's tables do."""
    if value >= 1e6:
        return f"{value / 1e6:.3f}s"
    if value >= 1e3:
        return f"{value / 1e3:.3f}ms"
    return f"{value:.3f}us"


def to_csv(table: list[Row], strategy: str, workers: int, rank: int, gpus_per_node: int) -> str:
    """The averages CSV as itwinai's profiler writes it."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(
        [
            "name",
            "node_id",
            "self_cuda_time_total",
            "cuda_time_total",
            "cuda_time_total_str",
            "calls",
            "strategy",
            "num_gpus",
            "global_rank",
        ]
    )
    node = rank // gpus_per_node
    for r in table:
        writer.writerow(
            [
                r.name,
                node,
                f"{r.self_us:.3f}",
                f"{r.total_us:.3f}",
                _fmt_us(r.total_us),
                r.calls,
                strategy,
                workers,
                rank,
            ]
        )
    return buf.getvalue()
