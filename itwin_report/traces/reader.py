"""Read one PyTorch profiler (Kineto) Chrome trace, plain or gzipped, streaming.

The event list is read a few MiB at a time, cut between two events where PyTorch's layout puts
a line break, and each piece parsed by pyarrow's JSON reader, which converts only the fields
used here (:mod:`~itwin_report.traces.pieces`). A file laid out otherwise, or one that reader
cannot take whole, is read again by ijson's streaming parser
(:mod:`~itwin_report.traces.streaming`), which also words every error. Only what the timelines
need is kept, in typed arrays (:mod:`~itwin_report.traces.columns`, which states which event is
what): per device event its start, duration, kind and correlation; per host event with a
correlation its start; the ``ProfilerStep#N`` annotations; per CPU operator its start, duration
and kind; per communication kernel its duration and message (collective, elements, dtype, group
size: :mod:`~itwin_report.traces.collectives`). Memory stays a small multiple of the kept
events, whatever the size of the file. The top-level metadata (``distributedInfo``,
``deviceProperties``, ``baseTimeNanoseconds``) is read from the bytes before the events and
after them (:mod:`~itwin_report.traces.source`), so a well-formed file is read once.
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from itwin_report.traces.collectives import CollectiveKernels
from itwin_report.traces.columns import Columns
from itwin_report.traces.comm_ops import CommOps, complete, needs_sizes
from itwin_report.traces.kinds import (
    COMMUNICATION,
    COMPUTE,
    KIND_NAMES,
    MEMORY,
    OTHER,
    kernel_kind,
    operator_kind,
)
from itwin_report.traces.pieces import read_pieces, scan_ops
from itwin_report.traces.source import Edges, TraceReadError, open_trace
from itwin_report.traces.streaming import read_streaming

__all__ = [
    "COMMUNICATION",
    "COMPUTE",
    "KIND_NAMES",
    "MEMORY",
    "OTHER",
    "RawTrace",
    "TraceReadError",
    "is_trace_name",
    "kernel_kind",
    "operator_kind",
    "rank_from_name",
    "read_trace",
]

WORKER_NAME = re.compile(r"worker_(\d+)\b")


@dataclass
class RawTrace:
    """What one trace file holds that the timelines use (times in µs on the trace's clock)."""

    path: Path
    meta: dict[str, Any] = field(default_factory=dict)
    kernel_ts: np.ndarray = field(default_factory=lambda: np.empty(0))
    kernel_dur: np.ndarray = field(default_factory=lambda: np.empty(0))
    kernel_kind: np.ndarray = field(default_factory=lambda: np.empty(0, np.int8))
    kernel_corr: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    host_corr: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    host_ts: np.ndarray = field(default_factory=lambda: np.empty(0))
    step_ts: np.ndarray = field(default_factory=lambda: np.empty(0))
    step_dur: np.ndarray = field(default_factory=lambda: np.empty(0))
    step_ids: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    step_device: np.ndarray = field(default_factory=lambda: np.empty(0, np.int8))  # 1: device
    op_ts: np.ndarray = field(default_factory=lambda: np.empty(0))
    op_dur: np.ndarray = field(default_factory=lambda: np.empty(0))
    op_kind: np.ndarray = field(default_factory=lambda: np.empty(0, np.int8))
    collectives: CollectiveKernels | None = None  # the communication kernels' messages
    events: int = 0  # events read (all of them)
    bytes_read: int = 0  # uncompressed bytes
    fractional: bool = True  # some event's time is fractional or missing: HTA rounds (see timeline)


def is_trace_name(name: str) -> bool:
    """A file name PyTorch's trace handler writes (``….pt.trace.json`` or ``.json.gz``)."""
    return name.endswith((".pt.trace.json", ".pt.trace.json.gz"))


def rank_from_name(path: Path) -> int | None:
    """The rank in a ``worker_<rank>.<time>.pt.trace.json`` name (None when none)."""
    match = WORKER_NAME.search(path.name)
    return int(match.group(1)) if match else None


def read_trace(path: Path) -> RawTrace:
    """Read ``path`` (``TraceReadError`` naming it when it is not a readable trace).

    The event list is parsed a few MiB at a time, cut between two events, by pyarrow's JSON
    reader, which converts only the fields the timelines use; a file laid out otherwise, or
    anything it cannot be sure of (text that is not plain, well-formed JSON, a malformed end),
    is read again from the start by ijson's streaming parser, which decides what the file holds
    and words any error.
    """
    try:
        with open_trace(path) as fh:
            columns, edges = Columns(), Edges()
            read = read_pieces(fh, columns, edges)
        if read is None:
            with open_trace(path) as fh:
                columns, edges = Columns(), Edges()
                read = read_streaming(path, fh, columns, edges)
        collectives = _collectives(columns, edges.meta(), path)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceReadError(f"{path}: truncated or corrupt gzip ({exc})") from None
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return RawTrace(
        path=path,
        meta=edges.meta(),
        kernel_ts=np.frombuffer(columns.k_ts, dtype=np.float64),
        kernel_dur=np.frombuffer(columns.k_dur, dtype=np.float64),
        kernel_kind=np.frombuffer(columns.k_kind, dtype=np.int8),
        kernel_corr=np.frombuffer(columns.k_corr, dtype=np.int64),
        host_corr=np.frombuffer(columns.h_corr, dtype=np.int64),
        host_ts=np.frombuffer(columns.h_ts, dtype=np.float64),
        step_ts=np.frombuffer(columns.s_ts, dtype=np.float64),
        step_dur=np.frombuffer(columns.s_dur, dtype=np.float64),
        step_ids=np.frombuffer(columns.s_id, dtype=np.int64),
        step_device=np.frombuffer(columns.s_dev, dtype=np.int8),
        op_ts=np.frombuffer(columns.o_ts, dtype=np.float64),
        op_dur=np.frombuffer(columns.o_dur, dtype=np.float64),
        op_kind=np.frombuffer(columns.o_kind, dtype=np.int8),
        collectives=collectives,
        events=columns.events,
        bytes_read=read,
        fractional=not columns.whole_ts,
    )


def _collectives(columns: Columns, meta: dict[str, Any], path: Path) -> CollectiveKernels:
    """The communication kernels, those without sizes sized from their comms op where it has
    them (the fast read leaves those ops in the text: then the file is read again for them,
    an older trace's cost only), then gloo's operators
    (:mod:`~itwin_report.traces.comm_ops`)."""
    kernels = CollectiveKernels(
        dur_us=np.frombuffer(columns.c_dur, dtype=np.float64),
        collective=np.frombuffer(columns.c_coll, dtype=np.int32),
        group=np.frombuffer(columns.c_group, dtype=np.int64),
        in_elems=np.frombuffer(columns.c_in, dtype=np.int64),
        out_elems=np.frombuffer(columns.c_out, dtype=np.int64),
        dtype=np.frombuffer(columns.c_dtype, dtype=np.int32),
        names=columns.c_names,
        corr=np.frombuffer(columns.c_corr, dtype=np.int64),
    )
    if columns.op_names and needs_sizes(kernels):
        with open_trace(path) as fh:
            scan_ops(fh, columns)
        columns.op_names.clear()
    if not columns.p_ts:
        return kernels
    ops = CommOps(
        ts=np.frombuffer(columns.p_ts, dtype=np.float64),
        dur=np.frombuffer(columns.p_dur, dtype=np.float64),
        collective=np.frombuffer(columns.p_coll, dtype=np.int32),
        gloo=np.frombuffer(columns.p_gloo, dtype=np.int8),
        elems=np.frombuffer(columns.p_elems, dtype=np.int64),
        dtype=np.frombuffer(columns.p_dtype, dtype=np.int32),
        group=np.frombuffer(columns.p_group, dtype=np.int64),
    )
    info = meta.get("distributedInfo")
    world = info.get("world_size") if isinstance(info, dict) else None
    world = world if type(world) is int and 0 < world < 1 << 31 else None
    host_corr = np.frombuffer(columns.h_corr, dtype=np.int64)
    host_ts = np.frombuffer(columns.h_ts, dtype=np.float64)
    return complete(kernels, ops, host_corr, host_ts, world)
