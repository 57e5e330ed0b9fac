"""The collectives of a trace: per collective and group size, how many kernels, the bytes they
moved, their kernel time, and the bandwidths nccl-tests reports (one home for the arithmetic).

A collective kernel (NCCL/RCCL, see :mod:`~itwin_report.traces.kinds`) of a PyTorch 2.x trace
describes itself in its ``args``: ``Collective name``, ``In msg nelems``, ``Out msg nelems``
(elements), ``dtype`` and ``Group size``. Its message size is the larger of its input and output
buffers: elements × the dtype's size in bytes. **algbw** is bytes / kernel time (GB/s, 10⁹
bytes per second); **busbw** is algbw × nccl-tests' factor for ``n`` ranks, which makes
collectives comparable with the link's bandwidth: all-reduce 2(n−1)/n; all-gather,
reduce-scatter and all-to-all (n−1)/n; broadcast, reduce, send and recv 1 (none for the
others: a barrier, a gather). A row's bandwidths are its bytes summed over its summed kernel
time. A kernel without sizes (launched before the profiling window, an older trace, an unknown
dtype) is counted in a row of its own with unknown bytes; its collective is named from the
kernel's name when its args do not say.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

# bytes per element of the dtypes PyTorch names in a collective's args
DTYPE_BYTES = {
    "float": 4,
    "half": 2,
    "bfloat16": 2,
    "double": 8,
    "long": 8,
    "int": 4,
    "short": 2,
    "byte": 1,
    "char": 1,
    "bool": 1,
    "complexhalf": 4,
    "complexfloat": 8,
    "complexdouble": 16,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
}
# collective names, spelled without "_" and lower case, and the name they are reported under
CANONICAL = (
    ("allreduce", "all_reduce"),
    ("allgather", "all_gather"),
    ("reducescatter", "reduce_scatter"),
    ("alltoall", "all_to_all"),
    ("broadcast", "broadcast"),
    ("reduce", "reduce"),
    ("sendrecv", "send_recv"),
    ("send", "send"),
    ("recv", "recv"),
    ("barrier", "barrier"),
    ("gather", "gather"),
    ("scatter", "scatter"),
)
UNKNOWN = "unknown"
MAX_NAMES = 64  # distinct collective and dtype names kept per trace (bounded memory)
MAX_NAME = 64  # characters of a name kept


def canonical(name: Any) -> str:
    """The collective a kernel's ``Collective name``, or its kernel name, says
    (``_allgather_base`` and ``ncclDevKernel_AllGather_RING_LL`` are ``all_gather``)."""
    if not isinstance(name, str):
        return UNKNOWN
    bare = name[:200].lower().replace("_", "")
    bare = re.sub(r"^(?:nccl|rccl|hccl)(?:dev)?kernel", "", bare)
    for spelled, out in CANONICAL:
        if spelled in bare:
            return out
    return UNKNOWN


def dtype_bytes(dtype: Any) -> int:
    """Bytes per element of a dtype name (``Float``, ``c10::BFloat16``); 0 when unknown."""
    if not isinstance(dtype, str):
        return 0
    return DTYPE_BYTES.get(dtype[:40].lower().removeprefix("c10::"), 0)


def bus_factor(collective: str, n: int | None) -> float | None:
    """nccl-tests' factor from algbw to busbw for ``n`` ranks (None when it has none)."""
    if collective in ("broadcast", "reduce", "send", "recv", "send_recv"):
        return 1.0
    if not n or n < 1:
        return None
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return None


def message_bytes(in_elems: int, out_elems: int, dtype: str) -> int | None:
    """max(in, out) elements × the dtype's size; None when the sizes or the dtype are unknown."""
    size = dtype_bytes(dtype)
    elems = max(in_elems, out_elems)
    return elems * size if size and elems >= 0 else None


@dataclass
class CollectiveKernels:
    """The collective kernels of one trace, one entry per kernel: duration (µs), collective,
    group size (-1 unknown), input and output elements (-1 unknown) and dtype (names as codes
    into ``names``)."""

    dur_us: np.ndarray
    collective: np.ndarray
    group: np.ndarray
    in_elems: np.ndarray
    out_elems: np.ndarray
    dtype: np.ndarray
    names: list[str]


def rows(kernels: CollectiveKernels) -> list[dict[str, Any]]:
    """Per collective and group size (sized kernels and unsized ones apart): ``collective``,
    ``group_size``, ``count``, ``bytes`` (None: unknown), ``time_s``, ``algbw_gbps``,
    ``busbw_gbps``."""
    groups: dict[tuple[str, int, bool], list[float]] = {}
    for i in range(kernels.dur_us.size):
        name = kernels.names[int(kernels.collective[i])]
        group = int(kernels.group[i])
        size = message_bytes(
            int(kernels.in_elems[i]), int(kernels.out_elems[i]), kernels.names[kernels.dtype[i]]
        )
        key = (name, group, size is not None)
        acc = groups.setdefault(key, [0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += size or 0
        acc[2] += float(kernels.dur_us[i])
    out = []
    for (name, group, sized), (count, total, dur_us) in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1], not kv[0][2])
    ):
        time_s = dur_us / 1e6
        algbw = total / time_s / 1e9 if sized and time_s > 0 else None
        factor = bus_factor(name, group if group > 0 else None)
        out.append(
            {
                "collective": name,
                "group_size": group if group > 0 else None,
                "count": int(count),
                "bytes": int(total) if sized else None,
                "time_s": time_s,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * factor if algbw is not None and factor else None,
            }
        )
    return out


def unsized(rows_: list[dict[str, Any]]) -> int:
    """How many kernels of ``rows_`` have unknown bytes."""
    return sum(int(r["count"]) for r in rows_ if r["bytes"] is None)
