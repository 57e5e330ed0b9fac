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

import functools
import math
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
    # as the profiler spells a CPU op's ``Input type`` (C++ names)
    "long int": 8,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "complex<float>": 8,
    "complex<double>": 16,
    "complex<c10::half>": 4,
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
    return _canonical(name) if isinstance(name, str) else UNKNOWN


@functools.lru_cache(maxsize=1024)
def _canonical(name: str) -> str:
    bare = name[:200].lower().replace("_", "")
    bare = re.sub(r"^(?:nccl|rccl|hccl)(?:dev)?kernel", "", bare)
    for spelled, out in CANONICAL:
        if spelled in bare:
            return out
    return UNKNOWN


def dtype_bytes(dtype: Any) -> int:
    """Bytes per element of a dtype name (``Float``, ``c10::BFloat16``); 0 when unknown."""
    return _dtype_bytes(dtype) if isinstance(dtype, str) else 0


@functools.lru_cache(maxsize=1024)
def _dtype_bytes(dtype: str) -> int:
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
    corr: np.ndarray | None = None  # each kernel's correlation (-1: none; gloo's operators)


def rows(kernels: CollectiveKernels) -> list[dict[str, Any]]:
    """Per collective and group size (sized kernels and unsized ones apart): ``collective``,
    ``group_size``, ``count``, ``bytes`` (None: unknown), ``time_s``, ``algbw_gbps``,
    ``busbw_gbps``."""
    size, _ = per_kernel(kernels)
    sized = ~np.isnan(size)
    keys, at = _groups(kernels.collective, kernels.group, sized)
    count = np.bincount(at, minlength=len(keys))
    total = np.bincount(at, np.where(sized, size, 0.0), minlength=len(keys))
    dur_us = np.bincount(at, kernels.dur_us, minlength=len(keys))
    out = []
    order = sorted(
        range(len(keys)), key=lambda g: (kernels.names[keys[g][0]], keys[g][1], not keys[g][2])
    )
    for g in order:
        name, group, known = kernels.names[keys[g][0]], keys[g][1], bool(keys[g][2])
        time_s = float(dur_us[g]) / 1e6
        algbw = float(total[g]) / time_s / 1e9 if known and time_s > 0 else None
        factor = bus_factor(name, group if group > 0 else None)
        out.append(
            {
                "collective": name,
                "group_size": group if group > 0 else None,
                "count": int(count[g]),
                "bytes": int(total[g]) if known else None,
                "time_s": time_s,
                "algbw_gbps": algbw,
                "busbw_gbps": algbw * factor if algbw is not None and factor else None,
            }
        )
    return out


def _groups(*columns: np.ndarray) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """The distinct rows of ``columns`` taken side by side (as tuples of ints) and each
    entry's index into them."""
    if not columns[0].size:
        return [], np.empty(0, dtype=np.int64)
    values = [np.asarray(c, dtype=np.int64) for c in columns]
    lows = [int(v.min()) for v in values]
    spans = [int(v.max()) - low + 1 for v, low in zip(values, lows, strict=True)]
    if math.prod(spans) >= 1 << 62:  # values too far apart to pack: the slower way
        keys, at = np.unique(np.stack(values, axis=1), axis=0, return_inverse=True)
        return [tuple(int(x) for x in k) for k in keys], np.asarray(at).reshape(-1)
    packed = np.zeros(values[0].size, dtype=np.int64)
    for v, low, span in zip(values, lows, spans, strict=True):
        packed = packed * span + (v - low)
    distinct, at = np.unique(packed, return_inverse=True)
    out = []
    for key in distinct.tolist():
        digits = []
        for low, span in zip(reversed(lows), reversed(spans), strict=True):
            key, digit = divmod(key, span)
            digits.append(digit + low)
        out.append(tuple(reversed(digits)))
    return out, np.asarray(at).reshape(-1)


def unsized(rows_: list[dict[str, Any]]) -> int:
    """How many kernels of ``rows_`` have unknown bytes."""
    return sum(int(r["count"]) for r in rows_ if r["bytes"] is None)


# message size classes (nccl-tests' sweep: below 64 KiB a collective's time is its latency,
# from 1 MiB on it is bandwidth-bound; between the two both count)
LARGE_BYTES = 1 << 20
SMALL_BYTES = 64 << 10
SIZE_CLASSES = ("large", "medium", "small", UNKNOWN)


def per_kernel(kernels: CollectiveKernels) -> tuple[np.ndarray, np.ndarray]:
    """Each kernel's message bytes, max(in, out) elements × the dtype's size (NaN when the
    sizes or the dtype are unknown), and nccl-tests' bus factor (NaN: none)."""
    size = np.array([dtype_bytes(d) for d in kernels.names], dtype=np.float64)
    elems = np.maximum(kernels.in_elems, kernels.out_elems).astype(np.float64)
    each = size[kernels.dtype]
    per = np.where((each > 0) & (elems >= 0), each * elems, np.nan)
    keys, at = _groups(kernels.collective, kernels.group)
    found = [bus_factor(kernels.names[c], g if g > 0 else None) for c, g in keys]
    factor = np.array([np.nan if f is None else f for f in found] + [np.nan])[at]
    return per, factor


def size_class(size: np.ndarray) -> np.ndarray:
    """Each size's class, as an index into :data:`SIZE_CLASSES`: ``large`` (≥ 1 MiB),
    ``medium``, ``small`` (< 64 KiB) or ``unknown`` (NaN)."""
    with np.errstate(invalid="ignore"):
        known = np.where(size >= LARGE_BYTES, 0, np.where(size < SMALL_BYTES, 2, 1))
    return np.where(np.isnan(size), 3, known)


def size_classes(kernels: CollectiveKernels) -> list[dict[str, Any]]:
    """Per collective, group size and size class: ``count``, ``bytes`` (None: unknown),
    ``time_s`` and the median, 25th and 75th percentiles of the kernels' own busbw
    (``busbw_median_gbps``, ``busbw_p25_gbps``, ``busbw_p75_gbps``; None without a factor or
    a kernel time)."""
    size, factor = per_kernel(kernels)
    with np.errstate(divide="ignore", invalid="ignore"):
        busbw = size / (kernels.dur_us * 1e3) * factor  # bytes/µs/1e3 = GB/s
    keys, at = _groups(kernels.collective, kernels.group, size_class(size))
    members = np.argsort(at, kind="stable")
    bounds = np.searchsorted(at[members], np.arange(len(keys) + 1))
    out = []
    order = sorted(range(len(keys)), key=lambda g: (kernels.names[keys[g][0]], *keys[g][1:]))
    for g in order:
        coll, group, klass = keys[g]
        idx = members[bounds[g] : bounds[g + 1]]
        bw = busbw[idx][np.isfinite(busbw[idx]) & (kernels.dur_us[idx] > 0)]
        p25, median, p75 = np.percentile(bw, [25, 50, 75]) if bw.size else (None,) * 3
        known = SIZE_CLASSES[klass] != UNKNOWN
        out.append(
            {
                "collective": kernels.names[coll],
                "group_size": group if group > 0 else None,
                "size_class": SIZE_CLASSES[klass],
                "count": int(idx.size),
                "bytes": int(size[idx].sum()) if known else None,
                "time_s": float(kernels.dur_us[idx].sum()) / 1e6,
                "busbw_median_gbps": _float(median),
                "busbw_p25_gbps": _float(p25),
                "busbw_p75_gbps": _float(p75),
            }
        )
    return out


def link_fit(kernels: CollectiveKernels) -> dict[str, Any] | None:
    """Kernel time = α + bus bytes / β by least squares over the sized kernels with a bus
    factor and a kernel time (bus bytes: bytes × the factor, so β is a bus bandwidth):
    ``alpha_s`` and ``beta_gbps`` with their 95 % intervals (``alpha_ci``, ``beta_ci``:
    [low, high], a bound None where β's interval reaches infinity) and ``kernels``; None with
    fewer than 3 distinct bus sizes or a fitted slope that is not positive."""
    size, factor = per_kernel(kernels)
    bus = size * factor
    keep = np.isfinite(bus) & (kernels.dur_us > 0)
    x, y = bus[keep], kernels.dur_us[keep] / 1e6
    if np.unique(x).size < 3:
        return None
    n = x.size
    mx = x.mean()
    sxx = float(np.sum((x - mx) ** 2))
    slope = float(np.sum((x - mx) * (y - y.mean()))) / sxx
    alpha = float(y.mean()) - slope * float(mx)
    if not slope > 0:
        return None
    resid = y - alpha - slope * x
    s2 = float(np.sum(resid**2)) / (n - 2)
    se_slope = math.sqrt(s2 / sxx)
    se_alpha = math.sqrt(s2 * (1 / n + float(mx) ** 2 / sxx))
    from itwin_report.analysis.intervals import t_quantile

    q = t_quantile(n - 2)
    low, high = slope - q * se_slope, slope + q * se_slope
    return {
        "alpha_s": alpha,
        "alpha_ci": [alpha - q * se_alpha, alpha + q * se_alpha],
        "beta_gbps": 1 / slope / 1e9,
        "beta_ci": [1 / high / 1e9, 1 / low / 1e9 if low > 0 else None],
        "kernels": int(n),
    }


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
