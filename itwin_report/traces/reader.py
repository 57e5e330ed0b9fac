"""Read one PyTorch profiler (Kineto) Chrome trace, plain or gzipped, streaming.

The event list is read a few MiB at a time, cut between two events where PyTorch's layout puts
a line break, and each piece parsed by pyarrow's JSON reader, which converts only the fields
used here (two to three times as fast as parsing every event into Python objects; like
Python's own JSON reader, and HTA, it takes a ``NaN``). A file laid out otherwise, or one that
reader cannot take whole, is read by ijson's streaming parser instead, which also words every
error. Only what the timelines need is kept,
in typed arrays: per device event its start, duration, kind and correlation; per host event
with a correlation its start; the ``ProfilerStep#N`` annotations; per CPU operator its start,
duration and kind. Memory stays a small multiple of the kept events, whatever the size of the
file. The top-level metadata (``distributedInfo``, ``deviceProperties``,
``baseTimeNanoseconds``) is read from the bytes before the events and after them, so a
well-formed file is read once.

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
BATCH = 10_000  # events handed over at once by the streaming parser
PIECE = 4 << 20  # bytes of events parsed at once by pyarrow
MAX_PIECE = 64 << 20  # a piece with no cut in it is left to the streaming parser
EVENTS_START = re.compile(rb'"traceEvents"\s*:\s*\[')
# between two events as PyTorch writes them: "},", a line break, the indentation, "{" (a line
# break cannot be inside a JSON string, so this is structure; the first one in the list is
# between its first two events, and the same text is looked for after that)
EVENT_BREAK = re.compile(rb"\},\r?\n[ \t]*\{")
FLOAT_TS = re.compile(rb'"ts"\s*:\s*-?[0-9]+[.eE]')


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

    def add_many(self, events: list[Any]) -> None:
        """Keep what the timelines need of ``events`` (one loop, its lookups bound once: this is
        where the time goes once the JSON is parsed)."""
        self.events += len(events)
        k_ts, k_dur, k_kind, k_corr = (
            self.k_ts.append,
            self.k_dur.append,
            self.k_kind.append,
            self.k_corr.append,
        )
        h_corr, h_ts = self.h_corr.append, self.h_ts.append
        o_ts, o_dur, o_kind = self.o_ts.append, self.o_dur.append, self.o_kind.append
        kinds, op_kinds = self.kinds, self.op_kinds
        whole = self.whole_ts
        for event in events:
            if type(event) is not dict:
                continue
            get = event.get
            ts = get("ts")
            if whole and type(ts) is not int:
                whole = False  # HTA rounds only the traces with a fractional (or no) time
            dur, cat = get("dur"), get("cat")
            if dur is None or cat is None or cat == "Trace" or ts is None:
                continue
            if type(ts) is not float or type(dur) is not float:
                try:
                    ts, dur = float(ts), float(dur)
                except (TypeError, ValueError):
                    continue
            name = get("name")
            if type(name) is not str:
                name = str(name)
            args = get("args")
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
                    continue  # a device annotation that carries a stream (see the module's note)
                kind = kinds.get(name)
                if kind is None:
                    kind = kinds[name] = kernel_kind(name)
                k_ts(ts)
                k_dur(dur)
                k_kind(kind)
                k_corr(corr)
                continue
            if corr >= 0:
                h_corr(corr)
                h_ts(ts)
            if STEP_MARK in name:
                match = STEP_NAME.search(name)
                self.s_ts.append(ts)
                self.s_dur.append(dur)
                self.s_id.append(int(match.group(1)) if match else -1)
            elif cat == "cpu_op" or cat == "user_annotation":
                kind = op_kinds.get(name)
                if kind is None:
                    kind = op_kinds[name] = operator_kind(name)
                if cat == "cpu_op" or kind == COMMUNICATION:
                    o_ts(ts)
                    o_dur(dur)
                    o_kind(kind)
        self.whole_ts = whole

    def add_piece(self, piece: bytes, sep: bytes) -> bool:
        """Keep what the timelines need of a piece of the event list (events separated by
        ``sep``), parsed by pyarrow; False, and nothing kept, when pyarrow cannot read it all."""
        import pyarrow as pa

        text = piece.replace(sep, b"}" + sep[2:])  # the commas between events out
        try:
            table = _arrow_events(text)
        except (pa.ArrowException, ValueError):
            return False
        if self.whole_ts and (table.column("ts").null_count or FLOAT_TS.search(piece)):
            self.whole_ts = False  # as add_many decides it
        self._add_table(table)
        return True

    def _add_table(self, table: Any) -> None:
        """:meth:`add_many`'s rules on a table of events (columns ts, dur, cat, name, args)."""
        import pyarrow.compute as pc

        self.events += table.num_rows
        ts = table.column("ts").to_numpy()
        dur = table.column("dur").to_numpy()
        cats, cat = _codes(table.column("cat"))
        names, name = _codes(table.column("name"), "None")
        args = table.column("args").combine_chunks().flatten()
        stream = pc.fill_null(args[0], -1).to_numpy(zero_copy_only=False)
        corr = pc.fill_null(args[1], -1).to_numpy(zero_copy_only=False)
        trace = cats.index("Trace") if "Trace" in cats else -2
        valid = ~np.isnan(ts) & ~np.isnan(dur) & (cat >= 0) & (cat != trace)
        device = valid & (stream >= 0) & (corr >= 0)
        host = valid & (stream < 0)
        kinds = np.array([self._kind(n, self.kinds, kernel_kind) for n in names], dtype=np.int8)
        self.k_ts.frombytes(ts[device].tobytes())
        self.k_dur.frombytes(dur[device].tobytes())
        self.k_kind.frombytes(kinds[name[device]].tobytes())
        self.k_corr.frombytes(corr[device].astype(np.int64).tobytes())
        linked = host & (corr >= 0)
        self.h_corr.frombytes(corr[linked].astype(np.int64).tobytes())
        self.h_ts.frombytes(ts[linked].tobytes())
        marks = np.array([STEP_MARK in n for n in names], dtype=bool)
        step = host & marks[name]
        ids = [STEP_NAME.search(n) for n in names]
        step_ids = np.array([int(m.group(1)) if m else -1 for m in ids], dtype=np.int64)
        self.s_ts.frombytes(ts[step].tobytes())
        self.s_dur.frombytes(dur[step].tobytes())
        self.s_id.frombytes(step_ids[name[step]].tobytes())
        op_kinds = np.array(
            [self._kind(n, self.op_kinds, operator_kind) for n in names], dtype=np.int8
        )
        cpu_op = cats.index("cpu_op") if "cpu_op" in cats else -2
        annotation = cats.index("user_annotation") if "user_annotation" in cats else -2
        op = host & ~step
        op &= (cat == cpu_op) | ((cat == annotation) & (op_kinds[name] == COMMUNICATION))
        self.o_ts.frombytes(ts[op].tobytes())
        self.o_dur.frombytes(dur[op].tobytes())
        self.o_kind.frombytes(op_kinds[name[op]].tobytes())

    @staticmethod
    def _kind(name: str, cache: dict[str, int], rule: Any) -> int:
        kind = cache.get(name)
        if kind is None:
            kind = cache[name] = rule(name)
        return int(kind)


ARROW_SCHEMA: Any = None


def _arrow_events(text: bytes) -> Any:
    """The events of ``text`` (objects separated by white space, one block) as a pyarrow
    table of the fields the timelines use; every other field is skipped unconverted."""
    import pyarrow as pa
    import pyarrow.json as pj

    global ARROW_SCHEMA
    if ARROW_SCHEMA is None:
        args = pa.struct([("stream", pa.int64()), ("correlation", pa.int64())])
        ARROW_SCHEMA = pa.schema(
            [
                ("ts", pa.float64()),
                ("dur", pa.float64()),
                ("cat", pa.string()),
                ("name", pa.string()),
                ("args", args),
            ]
        )
    return pj.read_json(
        pa.BufferReader(text),
        read_options=pj.ReadOptions(block_size=len(text) + 1, use_threads=False),
        parse_options=pj.ParseOptions(
            explicit_schema=ARROW_SCHEMA,
            unexpected_field_behavior="ignore",
            newlines_in_values=True,
        ),
    )


def _codes(column: Any, null: str | None = None) -> tuple[list[str], np.ndarray]:
    """A string column as its distinct values and each row's index into them (-1 for a null,
    or the index of ``null`` appended to the values)."""
    encoded = column.combine_chunks().dictionary_encode()
    values = encoded.dictionary.to_pylist()
    missing = -1
    if null is not None:
        missing = len(values)
        values.append(null)
    codes = encoded.indices.fill_null(missing).to_numpy(zero_copy_only=False)
    return values, codes.astype(np.int64)


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
        if len(chunk) >= TAIL_KEEP:
            self.tail = chunk[-TAIL_KEEP:]
        else:
            self.tail = (self.tail + chunk)[-TAIL_KEEP:]

    def head_reads(self, at: int) -> bool:
        """Whether the event list's key is the first ``"traceEvents"`` of the file, at ``at``,
        and what precedes it reads as the start of a JSON object."""
        if not self.head_done or len(self.head) != at:
            return False
        try:
            head = self.head.decode("utf-8").strip().rstrip(",")
            return isinstance(json.loads(head + "}", parse_constant=_not_json), dict)
        except ValueError:  # UnicodeDecodeError is a ValueError
            return False

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
    """Read ``path`` (``TraceReadError`` naming it when it is not a readable trace).

    The event list is parsed a few MiB at a time, cut between two events, by pyarrow's JSON
    reader, which converts only the fields the timelines use; a file laid out otherwise, or
    anything it cannot be sure of (text that is not plain, well-formed JSON, a malformed end),
    is read again from the start by ijson's streaming parser, which decides what the file holds
    and words any error.
    """
    try:
        with _open(path) as fh:
            columns, edges = _Columns(), _Edges()
            read = _read_pieces(fh, columns, edges)
        if read is None:
            with _open(path) as fh:
                columns, edges = _Columns(), _Edges()
                read = _read_streaming(path, fh, columns, edges)
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
        op_ts=np.frombuffer(columns.o_ts, dtype=np.float64),
        op_dur=np.frombuffer(columns.o_dur, dtype=np.float64),
        op_kind=np.frombuffer(columns.o_kind, dtype=np.int8),
        events=columns.events,
        bytes_read=read,
        fractional=not columns.whole_ts,
    )


def _read_streaming(path: Path, fh: Any, columns: _Columns, edges: _Edges) -> int:
    """Every event through ijson (the bytes read), ``TraceReadError`` saying what is wrong."""
    import ijson

    tee = _Tee(fh, edges)
    batch: list[Any] = []
    try:
        for event in ijson.items(tee, "traceEvents.item", use_float=True, buf_size=CHUNK):
            batch.append(event)
            if len(batch) >= BATCH:
                columns.add_many(batch)
                batch.clear()
        columns.add_many(batch)
    except ijson.JSONError as exc:
        columns.add_many(batch)
        read = tee.read_bytes
        what = "not JSON" if read and not columns.events else "truncated or malformed JSON"
        if not read:
            what = "empty file"
        raise TraceReadError(f"{path}: {what} ({_short(exc)})") from None
    except UnicodeDecodeError:
        raise TraceReadError(f"{path}: not JSON (not UTF-8 text)") from None
    return tee.read_bytes


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _object_end(rest: bytes) -> bool:
    """Whether ``rest`` (what follows the event list) closes the top-level object."""
    text = rest.strip()
    if text == b"}":
        return True
    if not text.startswith(b","):
        return False
    try:
        return isinstance(json.loads(b"{" + text[1:], parse_constant=_not_json), dict)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False


def _read_pieces(fh: Any, columns: _Columns, edges: _Edges) -> int | None:
    """The events parsed a piece of about ``PIECE`` bytes at a time, each piece cut between two
    events (the bytes read); None when the file is not laid out as PyTorch writes it (an event
    list with a line break between events) or anything in it is not plain, well-formed JSON:
    :func:`_read_streaming` then reads it instead."""
    read, buf = 0, b""
    while True:  # up to the event list's opening bracket
        chunk = fh.read(PIECE)
        read += len(chunk)
        edges.feed(chunk)
        buf += chunk
        start = EVENTS_START.search(buf)
        if start:
            if not edges.head_reads(start.start()):  # buf holds the file from its start
                return None
            buf = buf[start.end() :]
            break
        if not chunk or len(buf) > HEAD_LIMIT:
            return None
    sep = None
    while chunk:
        chunk = fh.read(PIECE)
        read += len(chunk)
        edges.feed(chunk)
        buf += chunk
        if not chunk:
            break
        if sep is None:
            found = EVENT_BREAK.search(buf)
            if found is None:
                if len(buf) > MAX_PIECE:
                    return None
                continue
            sep = found.group()
        cut = buf.rfind(sep)
        if cut < 0:
            if len(buf) > MAX_PIECE:
                return None
            continue
        if not columns.add_piece(buf[: cut + 1], sep):
            return None
        buf = buf[cut + 2 :]
    close = len(buf)
    for _ in range(8):  # the list's closing bracket: the last "]" that the object's end follows
        close = buf.rfind(b"]", 0, close)
        if close < 0:
            break
        if _object_end(buf[close + 1 :]):
            last = buf[:close].strip()
            if sep is None:
                found = EVENT_BREAK.search(last)
                sep = found.group() if found else b"},\n{"
            return read if not last or columns.add_piece(last, sep) else None
    return None


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
