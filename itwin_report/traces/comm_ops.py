"""The communication operators on a trace's CPU threads, and what they tell of the collectives.

Two uses, one record per operator (its start, duration, collective, message and group size):

* **sizes for older traces**: a trace of PyTorch 1.x or early 2.x has no sizes in its NCCL
  kernels' args, but the CPU-side op that launched the kernel (``nccl:all_reduce``,
  ``record_param_comms``, ``c10d::allreduce_``) records its inputs' shapes and types (``Input
  Dims`` and ``Input type``, when the profiler ran with ``record_shapes``). A kernel's
  ``correlation`` names its runtime launch (``cudaLaunchKernel``), which runs inside the comms
  op: the kernel takes the sizes of the innermost comms op with sizes that encloses its launch
  (the latest to start). Threads are not compared (the fast read does not convert them; NCCL
  launches on the thread of the op that issues it, and two comms ops with sizes running at the
  same instant on two threads of one rank do not occur in PyTorch's collectives).
* **gloo's collectives**: on a CPU-only trace the collectives are gloo's own operators
  (``gloo:all_reduce`` …, on gloo's thread), counted with the time of the operator and its
  sizes from its own ``Input Dims``/``Input type`` where it has them, else unknown.

An operator's message is its largest tensor input: a shape of at least one dimension (a list of
whole numbers) whose type names a dtype (``float``, ``c10::BFloat16``, ``long int`` …); tensor
lists, scalars and other arguments are passed over. Its group size is its ``Group size`` arg
when it has one, else the trace's world size (``distributedInfo``), which is the group of every
collective that does not name a subgroup.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from itwin_report.traces.collectives import UNKNOWN, CollectiveKernels, dtype_bytes, per_kernel

MAX_INPUTS = 64  # inputs of an operator looked at
MAX_DIMS = 16  # dimensions of a shape
GLOO = "gloo:"


def input_message(args: dict[str, Any]) -> tuple[int, str]:
    """(elements, dtype name) of the largest tensor input in ``args``' ``Input Dims`` and
    ``Input type``; (-1, "") when none has a shape and a known dtype."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if type(dims) is not list or type(types) is not list:
        return -1, ""
    best, found = -1, (-1, "")
    for shape, name in zip(dims[:MAX_INPUTS], types[:MAX_INPUTS], strict=False):
        size = dtype_bytes(name)
        if not size or type(shape) is not list or not 0 < len(shape) <= MAX_DIMS:
            continue
        if not all(type(d) is int and 0 <= d < 1 << 62 for d in shape):
            continue
        elems = math.prod(shape)
        if elems < 1 << 62 and elems * size > best:
            best, found = elems * size, (elems, name)
    return found


@dataclass
class CommOps:
    """The comms operators of one trace: start and duration (µs), collective and dtype (codes
    into the collectives' ``names``), whether it is gloo's own, elements (-1 unknown) and
    group size (-1 unknown)."""

    ts: np.ndarray
    dur: np.ndarray
    collective: np.ndarray
    gloo: np.ndarray
    elems: np.ndarray
    dtype: np.ndarray
    group: np.ndarray


def needs_sizes(kernels: CollectiveKernels) -> bool:
    """Whether a kernel without sizes has a correlation to follow to its comms op."""
    size, _ = per_kernel(kernels)
    return kernels.corr is not None and bool(np.any(np.isnan(size) & (kernels.corr >= 0)))


def complete(
    kernels: CollectiveKernels,
    ops: CommOps,
    launch_corr: np.ndarray,
    launch_ts: np.ndarray,
    world: int | None,
) -> CollectiveKernels:
    """``kernels`` with the sizes of the unsized ones taken from the comms op around their
    launch (``launch_corr``, ``launch_ts``: the host events with a correlation), followed by
    gloo's operators as collectives of their own (see the module's note)."""
    k = CollectiveKernels(
        kernels.dur_us.copy(),
        kernels.collective.copy(),
        kernels.group.copy(),
        kernels.in_elems.copy(),
        kernels.out_elems.copy(),
        kernels.dtype.copy(),
        kernels.names,
        kernels.corr,
    )
    sized = (ops.elems >= 0) & ~ops.gloo.astype(bool)
    if sized.any() and needs_sizes(k):
        _from_ops(k, ops, np.flatnonzero(sized), launch_corr, launch_ts, world)
    gloo = np.flatnonzero(ops.gloo)
    if not gloo.size:
        return k
    group = np.where(ops.group[gloo] > 0, ops.group[gloo], world or -1)
    return CollectiveKernels(
        np.concatenate([k.dur_us, ops.dur[gloo]]),
        np.concatenate([k.collective, ops.collective[gloo]]).astype(np.int32),
        np.concatenate([k.group, group]).astype(np.int64),
        np.concatenate([k.in_elems, ops.elems[gloo]]),
        np.concatenate([k.out_elems, ops.elems[gloo]]),
        np.concatenate([k.dtype, ops.dtype[gloo]]).astype(np.int32),
        k.names,
        None if k.corr is None else np.concatenate([k.corr, np.full(gloo.size, -1)]),
    )


def _from_ops(
    k: CollectiveKernels,
    ops: CommOps,
    sized: np.ndarray,
    launch_corr: np.ndarray,
    launch_ts: np.ndarray,
    world: int | None,
) -> None:
    """Fill in place the unsized kernels of ``k`` from the innermost sized op (``sized``:
    indices into ``ops``) around their launch."""
    assert k.corr is not None
    size, _ = per_kernel(k)
    todo = np.flatnonzero(np.isnan(size) & (k.corr >= 0))
    wanted = np.isin(launch_corr, k.corr[todo])
    when: dict[int, float] = {}
    for c, t in zip(launch_corr[wanted].tolist(), launch_ts[wanted].tolist(), strict=True):
        when.setdefault(c, t)
    starts, ends = ops.ts[sized], ops.ts[sized] + ops.dur[sized]
    for i in todo.tolist():
        t = when.get(int(k.corr[i]))
        if t is None:
            continue
        around = np.flatnonzero((starts <= t) & (ends >= t))
        if not around.size:
            continue
        j = int(sized[around[np.argmax(starts[around])]])
        k.in_elems[i] = k.out_elems[i] = ops.elems[j]
        k.dtype[i] = ops.dtype[j]
        if k.group[i] <= 0:
            k.group[i] = ops.group[j] if ops.group[j] > 0 else (world or -1)
        if k.names[int(k.collective[i])] == UNKNOWN:
            k.collective[i] = ops.collective[j]
