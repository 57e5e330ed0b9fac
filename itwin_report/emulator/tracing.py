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
    out = []
    for rank in range(workers):
        mine = rank in slow
        out.append(
            RankSpec(
                rank=rank,
                world_size=workers,
                steps=p.traced_steps,
                step_us=float(step),
                copy_us=float(copy),
                compute_us=float(slow_compute if mine else compute),
                comm_us=float(comm + spin + (0 if mine or not comm else wait)),
                overlap_us=float(hidden + spin if comm else 0),
                hostname=f"node{rank // p.gpus_per_node:04d}",
                messages=messages(p, strategy, workers, st.collectives),
            )
        )
    return out


def messages(
    p: ModelParams, strategy: str, workers: int, calls: int
) -> tuple[tuple[str, int, int], ...]:
    """The step's collectives (collective, input and output fp32 elements): the gradient
    split evenly into ``calls`` all-reduce buckets (the rest in the last), or DeepSpeed's
    reduce-scatter of it then all-gather back (none with one worker)."""
    elems = round(p.grad_mb * 1e6 / 4)
    if workers <= 1 or calls <= 0:
        return ()
    if strategy == "deepspeed":
        shard = elems // workers
        return (("reduce_scatter", shard * workers, shard), ("allgather", shard, shard * workers))
    each = elems // calls
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
