"""Small PyTorch-profiler (Kineto) Chrome traces with a known truth, one per rank.

Each profiler step on a GPU rank runs, on the device: an input copy (``Memcpy HtoD``), a run of
compute kernels back to back, then an NCCL all-reduce on its own stream that starts ``overlap``
before the compute ends (DDP overlaps the gradient all-reduce with the backward pass), then
nothing until the next step. The host side has a ``ProfilerStep#N`` annotation per step and one
``cudaLaunchKernel`` / ``cudaMemcpyAsync`` per device event (linked by ``correlation``), each
``HOST_LEAD_US`` before its event starts. As in a real trace, each step also has a device-side
``ProfilerStep#N`` annotation (``gpu_user_annotation``, on the device's row, from the step's
first device event to its end, with no ``stream`` in its arguments: an event with one is a
kernel), and there are flow and metadata events an analysis must ignore. A CPU-only (gloo) rank
has ``aten::`` operators on its main thread and ``gloo:all_reduce`` on a second thread instead.

:func:`truth` works out, from the same numbers and by plain arithmetic, what an analysis
following Holistic Trace Analysis's rules must find: the last step left out, except the device
events launched before its device-side annotation starts (see :func:`truth`).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

BASE_US = 1_000_000.0  # the first step's start on the profiler's clock
BASE_NS = 1_700_000_000_000_000_000  # the wall clock at the profiler's 0 (baseTimeNanoseconds)
HOST_LEAD_US = 40.0  # the host launches each device event this long before it starts
COMPUTE_KERNELS = 4  # compute kernels per step
COMPUTE_STREAM = 7
COMM_STREAM = 20
BUCKET_ELEMS = 6_553_600  # fp32 elements of a 25 MiB-ish gradient bucket (26.2 MB)
CORR_STRIDE = 1000  # correlation ids per step (room for the step's kernels)
KERNEL_NAMES = {  # the NCCL kernel of each collective
    "allreduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    "reduce_scatter": "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevComm*, unsigned long, "
    "ncclWork*)",
    "allgather": "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
}


@dataclass(frozen=True)
class RankSpec:
    """One rank's steps, in microseconds (whole numbers keep the truth exact)."""

    rank: int = 0
    world_size: int = 1
    steps: int = 5
    step_us: float = 10_000.0  # from one step's start to the next
    copy_us: float = 500.0
    compute_us: float = 6_000.0
    comm_us: float = 2_000.0
    overlap_us: float = 1_000.0  # how long the all-reduce runs under the compute
    device: str = "gpu"  # "gpu" or "cpu" (gloo: operators on CPU threads)
    hostname: str = "node0"
    base_ns: int = BASE_NS  # baseTimeNanoseconds: the wall clock at the profiler's 0
    # the step's collective kernels, back to back over comm_us (its whole microseconds split
    # evenly, the rest on the last), each (collective, input elements, output elements) of
    # fp32 ``Float``, as PyTorch 2.x describes them in the kernel's args
    messages: tuple[tuple[str, int, int], ...] = (("allreduce", BUCKET_ELEMS, BUCKET_ELEMS),)
    # each collective kernel's duration (whole µs, summing to comm_us), as the link's time for
    # its message (:func:`~itwin_report.emulator.tracing.kernel_durations`); empty: comm_us
    # split evenly
    kernel_us: tuple[float, ...] = ()

    def scaled(self, compute: float) -> RankSpec:
        """This rank with its compute slowed by ``compute`` (1.2: 20 % slower); the others'
        all-reduce is not changed here (see :func:`job`)."""
        return replace(self, compute_us=self.compute_us * compute)


def job(
    world_size: int,
    slow_rank: int | None = None,
    slow_factor: float = 1.2,
    gpus_per_node: int = 4,
    **spec: Any,
) -> list[RankSpec]:
    """The ranks of one job; ``slow_rank``'s compute is ``slow_factor`` times longer and every
    other rank's all-reduce waits that much longer for it (the step stays in lockstep)."""
    base = RankSpec(world_size=world_size, **spec)
    out = []
    for rank in range(world_size):
        mine = replace(base, rank=rank, hostname=f"node{rank // gpus_per_node}")
        if slow_rank is not None:
            extra = base.compute_us * (slow_factor - 1)
            if rank == slow_rank:
                mine = mine.scaled(slow_factor)
            else:
                mine = replace(mine, comm_us=mine.comm_us + extra)
        out.append(mine)
    return out


def events(spec: RankSpec) -> list[dict[str, Any]]:
    """The trace events of one rank."""
    return [e for step in range(-1, spec.steps) for e in step_events(spec, step)]


def step_events(spec: RankSpec, step: int) -> list[dict[str, Any]]:
    """The events of one profiler step (step -1: the metadata before the first)."""
    if step < 0:
        return [
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
            {
                "ph": "X",
                "cat": "Trace",
                "name": "PyTorch Profiler",
                "pid": 0,
                "tid": 0,
                "ts": BASE_US,
                "dur": spec.steps * spec.step_us,
            },
        ]
    corr = 100 + step * CORR_STRIDE  # the step's annotations' External id; its events' follow
    out: list[dict[str, Any]] = []
    t0 = BASE_US + step * spec.step_us
    name = f"ProfilerStep#{step + 1}"
    step_args = {"External id": corr}
    out.append(_host(name, "user_annotation", t0 - HOST_LEAD_US, spec.step_us, **step_args))
    if spec.device == "cpu":
        return out + _cpu_step(spec, t0)
    out.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": name,
            "pid": 0,
            "tid": COMPUTE_STREAM,
            "ts": t0,
            "dur": spec.step_us,
            "args": step_args,  # as Kineto writes it: no stream, no device
        }
    )
    kernels: list[tuple[Any, ...]] = [
        ("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", t0, spec.copy_us, 7)
    ]
    each = spec.compute_us / COMPUTE_KERNELS
    start = t0 + spec.copy_us
    for k in range(COMPUTE_KERNELS):
        name = f"void at::native::elementwise_kernel<128, {k}>(int, float*)"
        kernels.append(("kernel", name, start + k * each, each, COMPUTE_STREAM))
    comm_start = start + spec.compute_us - spec.overlap_us
    kernels += _collectives(spec, comm_start)
    for cat, name, ts, dur, stream, *launched in kernels:
        corr += 1
        launch = "cudaMemcpyAsync" if cat == "gpu_memcpy" else "cudaLaunchKernel"
        at = launched[0] if launched else ts
        out.append(_host(launch, "cuda_runtime", at - HOST_LEAD_US, 5.0, correlation=corr))
        args = {"device": 0, "stream": stream, "correlation": corr, "External id": corr}
        out.append(
            {
                "ph": "X",
                "cat": cat,
                "name": name,
                "pid": 0,
                "tid": stream,
                "ts": ts,
                "dur": dur,
                "args": args if len(launched) < 2 else {**args, **launched[1]},
            }
        )
        out.append(
            {
                "ph": "f",
                "id": corr,
                "pid": 0,
                "tid": stream,
                "ts": ts,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
        )
    return out


def durations(spec: RankSpec) -> list[float]:
    """The step's collective kernels' durations (µs), summing to ``comm_us``: ``kernel_us``
    when given, else ``comm_us`` split evenly (its whole µs; the rest on the last)."""
    if spec.kernel_us:
        return list(spec.kernel_us)
    count = min(len(spec.messages), int(spec.comm_us))
    if count <= 0:
        return []
    each = float(int(spec.comm_us) // count)
    return [each] * (count - 1) + [spec.comm_us - each * (count - 1)]


def _collectives(spec: RankSpec, start: float) -> list[tuple[Any, ...]]:
    """The step's collective kernels from ``start``, back to back over ``comm_us`` (none with
    one worker), all launched with the first (launch time, then the args of PyTorch 2.x)."""
    ranks = str(list(range(spec.world_size)))
    out: list[tuple[Any, ...]] = []
    at = start
    for dur, (collective, elems_in, elems_out) in zip(durations(spec), spec.messages, strict=False):
        said = {
            "Collective name": collective,
            "In msg nelems": elems_in,
            "Out msg nelems": elems_out,
            "dtype": "Float",
            "Group size": spec.world_size,
            "Process Group Ranks": ranks,
        }
        name = KERNEL_NAMES.get(collective, KERNEL_NAMES["allreduce"])
        out.append(("kernel", name, at, dur, COMM_STREAM, start, said))
        at += dur
    return out


def _host(name: str, cat: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def _cpu_step(spec: RankSpec, t0: float) -> list[dict[str, Any]]:
    """A gloo rank's step: the copy and compute as aten:: operators on the main thread, the
    all-reduce as ``gloo:all_reduce`` on the communication thread."""
    out = [_op("aten::copy_", t0, spec.copy_us, 1)]
    each = spec.compute_us / COMPUTE_KERNELS
    for k in range(COMPUTE_KERNELS):
        out.append(_op("aten::addmm", t0 + spec.copy_us + k * each, each, 1))
    comm_start = t0 + spec.copy_us + spec.compute_us - spec.overlap_us
    if spec.comm_us > 0:
        out.append(_op("gloo:all_reduce", comm_start, spec.comm_us, 2))
    return out


def _op(name: str, ts: float, dur: float, tid: int) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"External id": 1},
    }


def document(spec: RankSpec) -> dict[str, Any]:
    """The whole trace of one rank, as PyTorch writes it."""
    return {**document_meta(spec), "traceEvents": events(spec)}


def document_meta(spec: RankSpec) -> dict[str, Any]:
    """The top-level keys of a trace, its events left out; ``distributedInfo`` only for more
    than one rank (a 1-worker job never starts ``torch.distributed``)."""
    gpu = spec.device == "gpu"
    out: dict[str, Any] = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 85e9}]
        if gpu
        else [],
    }
    if spec.world_size > 1:
        out["distributedInfo"] = {
            "backend": "nccl" if gpu else "gloo",
            "rank": spec.rank,
            "world_size": spec.world_size,
        }
    out["traceName"] = f"worker_{spec.rank}"
    out["baseTimeNanoseconds"] = spec.base_ns
    return out


def write(spec: RankSpec, folder: Path, gz: bool = False, stamp: int = 1) -> Path:
    """Write ``worker_<rank>.<stamp>.pt.trace.json`` (``.gz`` when ``gz``) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"worker_{spec.rank}.{stamp}.pt.trace.json"
    tail_keys = ("traceName", "baseTimeNanoseconds")
    head = {k: v for k, v in document_meta(spec).items() if k not in tail_keys}
    with (
        gzip.open(path.with_name(path.name + ".gz"), "wt", encoding="utf-8")
        if gz
        else open(path, "w", encoding="utf-8")
    ) as fh:
        fh.write(json.dumps(head)[:-1] + ', "traceEvents": [')
        sep = ""
        for step in range(-1, spec.steps):
            for event in step_events(spec, step):
                fh.write(sep + json.dumps(event))
                sep = ",\n"
        tail = {"traceName": f"worker_{spec.rank}", "baseTimeNanoseconds": spec.base_ns}
        fh.write("], " + json.dumps(tail)[1:])
    return path.with_name(path.name + ".gz") if gz else path


def truth(spec: RankSpec) -> dict[str, float]:
    """What the analysis must find for ``spec``, in seconds and percent (steps that do not
    overlap: ``copy + compute + max(comm - overlap, 0) <= step``).

    With two steps or more, the steps but the last are analysed whole, and of the last one the
    device events launched before it starts: HTA's last step starts at the latest
    ``ProfilerStep`` annotation, which is the device-side one, at the step's first device
    event; each event is launched ``HOST_LEAD_US`` before it starts, so the input copy counts,
    and so do the kernels starting less than ``HOST_LEAD_US`` into the step (:func:`_head`).
    A CPU rank has no device-side annotation: its last step starts at the host's, after which
    every operator starts, so none of it counts. With one step the whole trace counts.
    """
    k = spec.steps - 1 if spec.steps > 1 else 1
    overlap = min(spec.overlap_us, spec.comm_us)
    tail = max(spec.comm_us - spec.overlap_us, 0.0)
    busy_step = spec.copy_us + spec.compute_us + tail
    if spec.steps > 1 and spec.device == "gpu":
        head = _head(spec)
        span = k * spec.step_us + head.end
    else:
        head = _Head()
        span = (k - 1) * spec.step_us + busy_step
    compute = k * spec.compute_us + head.compute
    comm = k * spec.comm_us + head.comm
    memory = k * spec.copy_us + head.memory
    idle = span - k * busy_step - head.end  # the head is busy from its start to its end
    exposed = comm - k * overlap - head.overlap
    return {
        "steps": k,
        "span_s": span / 1e6,
        "compute_s": compute / 1e6,
        "communication_s": comm / 1e6,
        "memory_s": memory / 1e6,
        "idle_s": idle / 1e6,
        "exposed_communication_s": exposed / 1e6,
        "compute_pct": 100 * compute / span,
        "idle_pct": 100 * idle / span,
        "non_compute_pct": 100 * (span - compute - idle) / span,
        "overlap_pct": 100 * (comm - exposed) / comm if comm else float("nan"),
    }


@dataclass(frozen=True)
class _Head:
    """The part of the last step an analysis counts, in µs from the step's start: busy from
    the start to ``end``."""

    end: float = 0.0
    compute: float = 0.0
    comm: float = 0.0
    memory: float = 0.0
    overlap: float = 0.0  # communication under compute


def _head(spec: RankSpec) -> _Head:
    """The device events of the last step that start less than ``HOST_LEAD_US`` into it (so
    are launched before it starts): the copy at 0, the compute kernels back to back from
    ``copy`` (a kernel starting at or past the lead, and every one after it, left out), and the
    all-reduce when it starts under the lead. They leave no gap: fewer than all kernels reach
    past the lead, and the all-reduce starts before the compute ends."""
    each = spec.compute_us / COMPUTE_KERNELS
    kernels = sum(1 for k in range(COMPUTE_KERNELS) if spec.copy_us + k * each < HOST_LEAD_US)
    compute_end = spec.copy_us + kernels * each
    comm_start = spec.copy_us + spec.compute_us - spec.overlap_us
    if spec.comm_us <= 0 or comm_start >= HOST_LEAD_US:
        return _Head(compute_end, kernels * each, 0.0, spec.copy_us, 0.0)
    comm_end = comm_start + spec.comm_us
    under = max(0.0, min(comm_end, compute_end) - max(comm_start, spec.copy_us))
    end = max(compute_end, comm_end)
    return _Head(end, kernels * each, spec.comm_us, spec.copy_us, under)
