"""Read one PyTorch profiler (Kineto) Chrome trace, plain or gzipped, streaming.

The events are parsed one at a time (ijson's C backend) and only what the timelines need is
kept, in typed arrays: per device event its start, duration, kind and correlation; per host
event with a correlation its start; the host's ``ProfilerStep#N`` annotations; per CPU
operator its start, duration and kind. Memory stays a small multiple of the kept events,
whatever the size of the file. The top-level metadata (``distributedInfo``,
``deviceProperties``, ``baseTimeNanoseconds``) is read from the bytes before the events and
after them, so the file is read once.

Which event is what follows Holistic Trace Analysis (HTA): an event counts when it has a
duration and a category other than ``Trace``; a device event has an integer ``args.stream``
>= 0 and ``args.correlation`` >= 0; everything else is on the host, and a host event whose name
contains ``ProfilerStep`` marks a step (Kineto writes the device-side ``ProfilerStep``
annotation without a stream, so it is one of them, as in HTA). One departure: an annotation
that does carry a stream but no correlation is left out, where HTA 0.5 would count it as a
kernel. A CPU-only trace's operators are its ``cpu_op`` events and the communication it
records as annotations (gloo's ``gloo:all_reduce`` on its own thread is a ``user_annotation``).
Kinds are decided by :func:`kernel_kind` and :func:`operator_kind` (one home for each rule).
Whether the trace's timestamps are fractional (HTA rounds them only then) is noted.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import stat
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from itwin_report.util.errors import DataError

# kinds of device events and CPU operators; OTHER: a device event HTA counts as neither compute
# nor communication nor memory (a synchronisation, a copy not named as one first)
COMPUTE, COMMUNICATION, MEMORY, OTHER = 0, 1, 2, 3
KIND_NAMES = ("compute", "communication", "memory", "other")

# communication kernels: NCCL (``ncclKernel_…``, ``ncclDevKernel_…``), RCCL (AMD, which keeps
# NCCL's names, or says ``rccl``), HCCL (Intel Gaudi / Ascend); HTA's rule is ``^nccl.*Kernel``
COMM_KERNEL = re.compile(r"(?i)^(?:nccl|rccl|hccl)")
# memory kernels: HTA's ``^Memcpy``, ``^Memset``, ``^dma``
MEMORY_KERNEL = re.compile(r"^(?:Memcpy|Memset|dma)")
# not compute in HTA either: ``Memcpy`` or ``Sync`` anywhere in the name (``Stream Sync``,
# ``cudaMemcpy…`` kernels, ``SyncBatchNorm`` kernels)
NON_COMPUTE_KERNEL = re.compile(r"Memcpy|Sync")
# communication operators on CPU threads (gloo, c10d's dispatch, the profiler's comms record)
COMM_OPERATOR = re.compile(
    r"(?i)^(?:gloo:|nccl:|c10d::|record_param_comms)|all_?reduce|all_?gather|reduce_?scatter"
    r"|all_?to_?all|broadcast"
)
# memory operators on CPU threads (copies between tensors)
MEMORY_OPERATOR = re.compile(r"^aten::(?:copy_|_to_copy|to|contiguous|clone)$")
STEP_MARK = "ProfilerStep"  # a host event whose name contains this marks a step (HTA)
STEP_NAME = re.compile(r"ProfilerStep\s*#\s*(\d+)")
WORKER_NAME = re.compile(r"worker_(\d+)\b")
HEAD_LIMIT = 8 << 20  # metadata before the events is read from at most this many bytes
TAIL_KEEP = 1 << 16  # and after them from the last this many bytes
CHUNK = 1 << 20


def kernel_kind(name: str) -> int:
    """COMPUTE, COMMUNICATION, MEMORY or OTHER for a device event's name."""
    if COMM_KERNEL.match(name):
        return COMMUNICATION
    if MEMORY_KERNEL.match(name):
        return MEMORY
    return OTHER if NON_COMPUTE_KERNEL.search(name) else COMPUTE


def operator_kind(name: str) -> int:
    """COMPUTE, COMMUNICATION or MEMORY for a CPU operator's name."""
    if COMM_OPERATOR.search(name):
        return COMMUNICATION
    return MEMORY if MEMORY_OPERATOR.match(name) else COMPUTE


class TraceReadError(DataError):
    """A trace that cannot be read (the message names the file and why)."""


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
    op_ts: np.ndarray = field(default_factory=lambda: np.empty(0))
    op_dur: np.ndarray = field(default_factory=lambda: np.empty(0))
    op_kind: np.ndarray = field(default_factory=lambda: np.empty(0, np.int8))
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


def _open(path: Path) -> Any:
    """The file, decompressed when gzipped (by its magic bytes, not its name); refuses what is
    not a regular file (a FIFO would block, a device never end)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise TraceReadError(f"{path}: not a regular file")
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
        magic = raw.read(2)
        raw.seek(0)
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return gzip.GzipFile(fileobj=raw, mode="rb") if magic == b"\x1f\x8b" else raw


class _Columns:
    """The arrays being filled while the events stream by."""

    def __init__(self) -> None:
        self.k_ts, self.k_dur = array("d"), array("d")
        self.k_kind, self.k_corr = array("b"), array("q")
        self.h_corr, self.h_ts = array("q"), array("d")
        self.s_ts, self.s_dur, self.s_id = array("d"), array("d"), array("q")
        self.o_ts, self.o_dur, self.o_kind = array("d"), array("d"), array("b")
        self.kinds: dict[str, int] = {}
        self.op_kinds: dict[str, int] = {}
        self.events = 0
        self.whole_ts = True  # every event's ts a JSON integer so far

    def add(self, event: Any) -> None:
        self.events += 1
        if type(event) is not dict:
            return
        ts = event.get("ts")
        if self.whole_ts and type(ts) is not int:
            self.whole_ts = False  # HTA rounds only the traces with a fractional (or no) time
        dur, cat = event.get("dur"), event.get("cat")
        if dur is None or cat is None or cat == "Trace" or ts is None:
            return
        try:
            ts, dur = float(ts), float(dur)
        except (TypeError, ValueError):
            return
        name = event.get("name")
        if type(name) is not str:
            name = str(name)
        args = event.get("args")
        stream = corr = -1
        if type(args) is dict:
            stream = args.get("stream", -1)
            if type(stream) is not int:
                stream = _integer(stream)
            corr = args.get("correlation", -1)
            if type(corr) is not int:
                corr = _integer(corr)
        if stream >= 0:
            if corr < 0:
                return  # a device annotation that carries a stream (see the module's note)
            kind = self.kinds.get(name)
            if kind is None:
                kind = self.kinds[name] = kernel_kind(name)
            self.k_ts.append(ts)
            self.k_dur.append(dur)
            self.k_kind.append(kind)
            self.k_corr.append(corr)
            return
        if corr >= 0:
            self.h_corr.append(corr)
            self.h_ts.append(ts)
        if STEP_MARK in name:
            match = STEP_NAME.search(name)
            self.s_ts.append(ts)
            self.s_dur.append(dur)
            self.s_id.append(int(match.group(1)) if match else -1)
        elif cat == "cpu_op" or cat == "user_annotation":
            kind = self.op_kinds.get(name)
            if kind is None:
                kind = self.op_kinds[name] = operator_kind(name)
            if cat == "cpu_op" or kind == COMMUNICATION:
                self.o_ts.append(ts)
                self.o_dur.append(dur)
                self.o_kind.append(kind)


def _integer(value: Any) -> int:
    """An argument as an integer, -1 when it is not one (HTA's rule for ``stream``)."""
    if isinstance(value, bool):
        return -1
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return -1


class _Edges:
    """The first bytes (up to the events) and the last bytes of the stream, for the metadata."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.head_done = False
        self.tail = b""

    def feed(self, chunk: bytes) -> None:
        if not self.head_done:
            self.head += chunk
            at = self.head.find(b'"traceEvents"')
            if at >= 0:
                del self.head[at:]
                self.head_done = True
            elif len(self.head) > HEAD_LIMIT:
                self.head_done = True
                self.head.clear()
        self.tail = (self.tail + chunk)[-TAIL_KEEP:]

    def meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        head = self.head.decode("utf-8", "replace").strip().rstrip(",")
        if head.startswith("{"):
            try:
                value = json.loads(head + "}")
                out.update(value if isinstance(value, dict) else {})
            except ValueError:
                pass
        out.update(_tail_meta(self.tail.decode("utf-8", "replace")))
        return out


def _tail_meta(tail: str) -> dict[str, Any]:
    """The top-level keys after the events: the first ``]`` closing the event list whose rest
    reads as the end of an object."""
    for match in re.finditer(r"\]\s*,\s*\"", tail):
        try:
            value = json.loads("{" + tail[match.end() - 1 :])
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def read_trace(path: Path) -> RawTrace:
    """Read ``path`` (``TraceReadError`` naming it when it is not a readable trace)."""
    import ijson

    columns, edges = _Columns(), _Edges()
    tee = None
    try:
        with _open(path) as fh:
            tee = _Tee(fh, edges)
            for event in ijson.items(tee, "traceEvents.item", use_float=True, buf_size=CHUNK):
                columns.add(event)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceReadError(f"{path}: truncated or corrupt gzip ({exc})") from None
    except ijson.JSONError as exc:
        read = tee.read_bytes if tee else 0
        what = "not JSON" if read and not columns.events else "truncated or malformed JSON"
        if not read:
            what = "empty file"
        raise TraceReadError(f"{path}: {what} ({_short(exc)})") from None
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise TraceReadError(f"{path}: not JSON (not UTF-8 text)") from None
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
        op_ts=np.frombuffer(columns.o_ts, dtype=np.float64),
        op_dur=np.frombuffer(columns.o_dur, dtype=np.float64),
        op_kind=np.frombuffer(columns.o_kind, dtype=np.int8),
        events=columns.events,
        bytes_read=tee.read_bytes if tee else 0,
        fractional=not columns.whole_ts,
    )


class _Tee:
    """The file as ijson reads it, every chunk also shown to the metadata reader."""

    def __init__(self, fh: Any, edges: _Edges) -> None:
        self.fh, self.edges, self.read_bytes = fh, edges, 0

    def read(self, size: int = -1) -> bytes:
        chunk = self.fh.read(size)
        self.read_bytes += len(chunk)
        self.edges.feed(chunk)
        return chunk


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:120]
