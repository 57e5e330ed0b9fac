"""Profiler traces of the emulated jobs (``emulate --traces DIR``), one small trace per rank.

Each rank's profiler steps (:class:`~itwin_report.emulator.kineto.RankSpec`, whole
microseconds) come from the performance model of its configuration:

* compute: the step's forward, backward and optimizer (``t_compute``);
* memory: the batch's host-to-device copy and the device-to-device copies of the profiler rows;
* communication: one collective kernel per step lasting ``comm`` plus the time it spins for
  its peers (``spin``, as much of it as fits under the compute), starting ``hidden + spin``
  before the compute ends, so ``comm - hidden`` of it is exposed;
* the collective kernels' args, as PyTorch 2.x writes them: the fp32 gradient (``grad_mb``)
  all-reduced in the model's buckets (DDP's ``ddp_bucket_mb``, Horovod's fusion buffers),
  or DeepSpeed's reduce-scatter then all-gather of it, each kernel a share of ``comm``;
* a straggler (:func:`~itwin_report.emulator.model.slow_ranks`): its compute is
  ``straggler_factor`` times longer and every other rank's collective waits that much longer;
* the step: the model's step time plus the copies the model leaves out of it (all but
  Horovod's fusion-buffer copies, which it counts); what the kernels leave of it is idle (the
  loader's wait, Horovod's negotiation, DeepSpeed's partitioning on the host).

Traces are noise-free: every repeat of a configuration has the same steps. A job's traces are
placed at the start of its second epoch's training steps (the first epoch's for one epoch) on
the job's own clock, so each lies inside its worker runs' start and end; the file's time stamp
is the trace's end plus :data:`EXPORT_DELAY_NS`, as PyTorch stamps the file when it writes it.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from itwin_report.emulator import kineto, model, profile
from itwin_report.emulator.kineto import BASE_US, COMPUTE_KERNELS, RankSpec
from itwin_report.emulator.params import ModelParams
from itwin_report.util.errors import ReportError

TRACE_FOLDER = "torch-traces"  # itwinai's folder under each run name
PROFILED_EPOCH = 1  # the epoch whose first steps are traced (the last when there are fewer)
EXPORT_DELAY_NS = 2_000_000  # the file is written 2 ms after the last traced step


def _us(seconds: float) -> int:
    return round(seconds * 1e6)


def _kernels_us(seconds: float) -> int:
    """Compute time in whole microseconds that split evenly into the step's compute kernels."""
    return COMPUTE_KERNELS * max(1, round(seconds * 1e6 / COMPUTE_KERNELS))


def rank_specs(p: ModelParams, strategy: str, workers: int) -> list[RankSpec]:
    """The profiler steps of every rank of ``strategy`` on ``workers`` GPUs (noise-free)."""
    st = model.step(p, strategy, workers)
    compute = _kernels_us(st.compute)
    host = profile.host_copy_s(p)
    device = profile.device_copy_s(p, strategy, workers)
    copy = _us(host + device)
    left_out = host + (0.0 if strategy == "horovod" else device)  # the model counts Horovod's
    comm, hidden = _us(st.comm), _us(st.hidden)
    spin = min(_us(st.spin), compute - hidden) if comm else 0
    slow = model.slow_ranks(p, workers)
    slow_compute = _kernels_us(st.compute * p.straggler_factor) if slow else compute
    wait = slow_compute - compute
    busy = copy + slow_compute + comm - hidden
    step = max(_us(st.time + left_out), busy)
    large = messages(p, strategy, workers, st.collectives)
    out = []
    for rank in range(workers):
        mine = rank in slow
        comm_us = float(comm + spin + (0 if mine or not comm else wait))
        sent, kernel_us = kernel_durations(p, strategy, workers, comm_us, large)
        out.append(
            RankSpec(
                rank=rank,
                world_size=workers,
                steps=p.traced_steps,
                step_us=float(step),
                copy_us=float(copy),
                compute_us=float(slow_compute if mine else compute),
                comm_us=comm_us,
                overlap_us=float(hidden + spin if comm else 0),
                hostname=f"node{rank // p.gpus_per_node:04d}",
                messages=sent,
                kernel_us=kernel_us,
            )
        )
    return out


# the step's small, latency-bound collectives after the gradient's (fp32 elements): the loss
# and a few metrics all-reduced, as a training loop logs them
SMALL_MESSAGES = (("allreduce", 1, 1), ("allreduce", 1024, 1024))


def bus_factor(collective: str, n: int) -> float:
    """The share of a message each link carries (nccl-tests' factor): a ring all-reduce
    2(n-1)/n, a reduce-scatter or all-gather (n-1)/n."""
    return 2 * (n - 1) / n if collective == "allreduce" else (n - 1) / n


def kernel_alpha_s(p: ModelParams, strategy: str, workers: int) -> float:
    """The fixed time of each of the step's collective kernels, as the model counts it: a ring
    all-reduce's 2(n-1) latencies of the link (and DDP's launch per bucket); a reduce-scatter's
    or all-gather's n-1 (DeepSpeed's step is one of each)."""
    _, alpha = model.link(p, workers)
    steps = workers - 1 if strategy == "deepspeed" else 2 * (workers - 1)
    launch = p.ddp_launch_us * 1e-6 if strategy == "torch-ddp" else 0.0
    return steps * alpha + launch


def kernel_durations(
    p: ModelParams,
    strategy: str,
    workers: int,
    comm_us: float,
    large: tuple[tuple[str, int, int], ...],
) -> tuple[tuple[tuple[str, int, int], ...], tuple[float, ...]]:
    """The step's messages (``large``, then as many of :data:`SMALL_MESSAGES` as fit) and
    each kernel's duration in whole µs: alpha + bus bytes / beta of the link the job uses
    (:func:`~itwin_report.emulator.model.link`), alpha the kernel's fixed time
    (:func:`kernel_alpha_s`), summing to the model's time for the gradient; what ``comm_us``
    holds beyond (the spin and the wait for peers, which the model counts apart) is spread
    evenly over the kernels, the rest of its µs on the first ones."""
    if not large or comm_us <= 0:
        return large, ()
    bandwidth, _ = model.link(p, workers)
    alpha_us = kernel_alpha_s(p, strategy, workers) * 1e6

    def link_us(collective: str, elems_in: int, elems_out: int) -> int:
        size = 4 * max(elems_in, elems_out)
        return round(alpha_us + bus_factor(collective, workers) * size / bandwidth * 1e6)

    sent, base = list(large), [link_us(*m) for m in large]
    for small in SMALL_MESSAGES:
        if sum(base) + link_us(*small) <= comm_us:
            sent.append(small)
            base.append(link_us(*small))
    left = int(comm_us) - sum(base)
    if left < 0:  # rounding: the model's time for the gradient is longer than comm_us
        base[-1] += left
        left = 0
    each, rest = divmod(left, len(base))
    return tuple(sent), tuple(float(b + each + (i < rest)) for i, b in enumerate(base))


def messages(
    p: ModelParams, strategy: str, workers: int, calls: int
) -> tuple[tuple[str, int, int], ...]:
    """The step's gradient collectives (collective, input and output fp32 elements): the
    gradient all-reduced in ``calls`` buckets of DDP's ``ddp_bucket_mb`` (Horovod's
    ``hvd_fusion_mb``), the rest in the last, or DeepSpeed's reduce-scatter of it then
    all-gather back (none with one worker)."""
    elems = round(p.grad_mb * 1e6 / 4)
    if workers <= 1 or calls <= 0:
        return ()
    if strategy == "deepspeed":
        shard = elems // workers
        return (("reduce_scatter", shard * workers, shard), ("allgather", shard, shard * workers))
    bucket_mb = p.hvd_fusion_mb if strategy == "horovod" else p.ddp_bucket_mb
    each = min(elems, round(bucket_mb * 1e6 / 4))
    sizes = [each] * (calls - 1) + [elems - each * (calls - 1)]
    return tuple(("allreduce", n, n) for n in sizes)


def placed(specs: list[RankSpec], start_ms: int, end_ms: int, at_s: float) -> list[RankSpec]:
    """``specs`` with ``base_ns`` putting the first step ``at_s`` seconds after ``start_ms``,
    moved earlier (never before the start) when the trace would end after ``end_ms``."""
    length = max(s.steps * s.step_us for s in specs) * 1000 + EXPORT_DELAY_NS
    first = start_ms * 1_000_000 + round(at_s * 1e9)
    first = max(min(first, end_ms * 1_000_000 - round(length)), start_ms * 1_000_000)
    base = first - round(BASE_US * 1000)
    return [replace(s, base_ns=base) for s in specs]


def stamp(spec: RankSpec) -> int:
    """The file name's time (ns): the trace's end on the wall clock plus the export delay."""
    return spec.base_ns + round((BASE_US + spec.steps * spec.step_us) * 1000) + EXPORT_DELAY_NS


def profiled_start_s(train_starts: Any) -> float:
    """Seconds from the job's start to the first traced step."""
    starts = list(train_starts)
    return float(starts[min(PROFILED_EPOCH, len(starts) - 1)]) if starts else 0.0


def trace_folder(root: Path, run_name: str) -> Path:
    """``root/<run name>/torch-traces``, as itwinai lays traces out."""
    return root / run_name / TRACE_FOLDER


def write_job(folder: Path, specs: list[RankSpec], gz: bool) -> list[Path]:
    """Write one job's traces into ``folder``; ReportError naming the file when one fails."""
    out = []
    for spec in specs:
        try:
            out.append(kineto.write(spec, folder, gz=gz, stamp=stamp(spec)))
        except OSError as exc:
            name = folder / f"worker_{spec.rank}.{stamp(spec)}.pt.trace.json{'.gz' if gz else ''}"
            raise ReportError(f"cannot write trace {name}: {exc.strerror or exc}") from None
    return out


def communication_truth(p: ModelParams, strategy: str, workers: int) -> dict[str, Any]:
    """What the traces of ``strategy`` on ``workers`` GPUs say of its collectives, by plain
    arithmetic on the kernels written: per step, the collectives and their bytes (max(in, out)
    fp32 elements × 4); ``busbw_gbps``, the median over every rank's kernels of 1 MiB or more
    of bus bytes / duration (None without one); the link (``intra`` or ``inter`` node, its
    latency per ring step and bus bandwidth); and the fixed time of each kernel of rank 0
    (``kernel_alpha_s``, the link's part) and with its share of the wait for peers
    (``fit_alpha_s``: what a fit of time = alpha + bus bytes / beta over rank 0's kernels
    finds, with ``link_beta_gbps`` as beta)."""
    specs = rank_specs(p, strategy, workers)
    first = specs[0]
    busbw = [
        bus_factor(c, workers) * 4 * max(i, o) / (d * 1e-6) / 1e9
        for s in specs
        for (c, i, o), d in zip(s.messages, s.kernel_us, strict=True)
        if 4 * max(i, o) >= 1 << 20
    ]
    bandwidth, alpha = model.link(p, workers)
    one_node = model.nodes(workers, p.gpus_per_node) == 1
    fixed = kernel_alpha_s(p, strategy, workers)
    wait_us = [
        d - round(fixed * 1e6 + bus_factor(c, workers) * 4 * max(i, o) / bandwidth * 1e6)
        for (c, i, o), d in zip(first.messages, first.kernel_us, strict=True)
    ]
    traced = bool(first.kernel_us)
    return {
        "collectives_per_step": len(first.kernel_us),
        "bytes_per_step": sum(4 * max(i, o) for _, i, o in first.messages) if traced else 0,
        "busbw_gbps": float(np.median(busbw)) if busbw else None,
        "link": ("intra" if one_node else "inter") if traced else None,
        "link_alpha_s": alpha if traced else None,
        "link_beta_gbps": bandwidth / 1e9 if traced else None,
        "kernel_alpha_s": fixed if traced else None,
        "fit_alpha_s": fixed + float(np.mean(wait_us)) * 1e-6 if traced else None,
    }


def rank_truth(specs: list[RankSpec]) -> list[dict[str, Any]]:
    """What ``analyze-traces`` must find for each rank (see :func:`kineto.truth`)."""
    return [{"rank": s.rank, **kineto.truth(s)} for s in specs]


def remove(paths: list[Path]) -> None:
    """Remove trace files written by a failed emulation."""
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            continue
