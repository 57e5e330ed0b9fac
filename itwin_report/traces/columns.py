"""The columns kept of a trace's events: what the timelines use, in typed arrays, filled while
the events stream by.

Which event is what follows Holistic Trace Analysis (HTA): an event counts when it has a
duration and a category other than ``Trace``; a device event has an integer ``args.stream``
>= 0 and ``args.correlation`` >= 0; everything else is on the host, and a host event whose name
contains ``ProfilerStep`` marks a step (Kineto writes the device-side ``ProfilerStep``
annotation without a stream, so it is one of them, as in HTA). One departure: an annotation
that does carry a stream but no correlation is left out, where HTA 0.5 would count it as a
kernel. A CPU-only trace's operators are its ``cpu_op`` events and the communication it
records as annotations (gloo's ``gloo:all_reduce`` on its own thread is a ``user_annotation``).
Kinds are decided by :mod:`itwin_report.traces.kinds`. Whether the trace's timestamps are
fractional (HTA rounds them only then) is noted.

The rules are applied in two forms that keep identical columns: :meth:`Columns.add_many` on
events parsed into Python objects (the streaming fall-back) and :meth:`Columns.add_table` on a
pyarrow table of them (the fast read).
"""

from __future__ import annotations

import json
import re
from array import array
from typing import Any

import numpy as np

from itwin_report.traces.collectives import MAX_NAME, MAX_NAMES, UNKNOWN, canonical
from itwin_report.traces.comm_ops import GLOO, input_message
from itwin_report.traces.kinds import (
    COMMUNICATION,
    DEVICE_STEP,
    STEP_MARK,
    kernel_kind,
    operator_kind,
    step_number,
)

# an event's name that may be a communication operator's (kinds.COMM_OPERATOR, widened: the
# event is parsed and the rule applied), a communication kernel's passed over
OP_NAME = re.compile(
    rb'"name"\s*:\s*"(?!(?i:[nrh]ccl(?:dev)?kernel))[^"]{0,200}?'
    rb"(?i:gloo:|nccl:|c10d::|record_param_comms|all_?reduce|all_?gather|reduce_?scatter"
    rb"|all_?to_?all|broadcast)"
)


class Columns:
    """The arrays being filled while the events stream by: per device event (``k_``) its
    start, duration, kind and correlation; per host event with a correlation (``h_``) its
    correlation and start; per ``ProfilerStep`` annotation (``s_``) its start, duration,
    number and whether it is the device-side one (``gpu_user_annotation``); per CPU operator
    (``o_``) its start, duration and kind; per communication kernel (``c_``) its duration and
    what its args say of its message (:mod:`~itwin_report.traces.collectives`), names kept as
    codes into ``c_names`` (at most ``MAX_NAMES`` of them, each cut to ``MAX_NAME``
    characters: bounded memory whatever the trace holds)."""

    def __init__(self) -> None:
        self.k_ts, self.k_dur = array("d"), array("d")
        self.k_kind, self.k_corr = array("b"), array("q")
        self.h_corr, self.h_ts = array("q"), array("d")
        self.s_ts, self.s_dur, self.s_id = array("d"), array("d"), array("q")
        self.s_dev = array("b")
        self.o_ts, self.o_dur, self.o_kind = array("d"), array("d"), array("b")
        self.c_dur, self.c_coll, self.c_group = array("d"), array("i"), array("q")
        self.c_in, self.c_out, self.c_dtype = array("q"), array("q"), array("i")
        self.c_corr = array("q")
        self.p_ts, self.p_dur, self.p_coll = array("d"), array("d"), array("i")
        self.p_gloo, self.p_elems = array("b"), array("q")
        self.p_dtype, self.p_group = array("i"), array("q")
        self.piece_ops: dict[str, int] = {}  # the last table's comms operators, by name
        self.op_names: set[str] = set()  # comms operators the fast read left in the text
        self.c_names: list[str] = [UNKNOWN, ""]
        self._codes: dict[str, int] = {UNKNOWN: 0, "": 1}
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
                if kind == COMMUNICATION:
                    self.add_collective(dur, name, args if type(args) is dict else {}, corr)
                continue
            if corr >= 0:
                h_corr(corr)
                h_ts(ts)
            if STEP_MARK in name:
                self.s_ts.append(ts)
                self.s_dur.append(dur)
                self.s_id.append(step_number(name))
                self.s_dev.append(cat == DEVICE_STEP)
            elif cat == "cpu_op" or cat == "user_annotation":
                kind = op_kinds.get(name)
                if kind is None:
                    kind = op_kinds[name] = operator_kind(name)
                if cat == "cpu_op" or kind == COMMUNICATION:
                    o_ts(ts)
                    o_dur(dur)
                    o_kind(kind)
                if kind == COMMUNICATION:
                    self.add_op(ts, dur, name, args if type(args) is dict else {})
        self.whole_ts = whole

    def add_collective(self, dur: float, kernel: str, args: dict[str, Any], corr: int) -> None:
        """One communication kernel: its duration, correlation and its args' message
        description."""
        said = args.get("Collective name")
        self.c_dur.append(dur)
        self.c_corr.append(corr)
        self.c_coll.append(self.code(canonical(said if said is not None else kernel)))
        self.c_group.append(_count(args.get("Group size")))
        self.c_in.append(_count(args.get("In msg nelems")))
        self.c_out.append(_count(args.get("Out msg nelems")))
        dtype = args.get("dtype")
        self.c_dtype.append(self.code(dtype if isinstance(dtype, str) else ""))

    def add_op(self, ts: float, dur: float, name: str, args: dict[str, Any]) -> None:
        """One communication operator on a CPU thread (:mod:`~itwin_report.traces.comm_ops`):
        its time, collective, message from its inputs' shapes, and group size; kept only when
        it is gloo's or records its inputs' shapes."""
        gloo = name[:5].lower() == GLOO
        if not gloo and "Input Dims" not in args:
            return  # an operator is kept for its sizes, or as gloo's collective
        said = args.get("Collective name")
        elems, dtype = input_message(args)
        self.p_ts.append(ts)
        self.p_dur.append(dur)
        self.p_coll.append(self.code(canonical(said if said is not None else name)))
        self.p_gloo.append(gloo)
        self.p_elems.append(elems)
        self.p_dtype.append(self.code(dtype))
        self.p_group.append(_count(args.get("Group size")))

    def add_ops_text(self, piece: bytes, sep: bytes) -> None:
        """gloo's operators among the events of ``piece`` (separated by ``sep``;
        :meth:`add_table` counted the comms operators by name in ``piece_ops``) through
        :meth:`add_op`; the names of the other comms operators kept in ``op_names``, for
        :meth:`add_ops_named` to find if a kernel needs their sizes."""
        gloo = {n: c for n, c in self.piece_ops.items() if n[:5].lower() == GLOO}
        self.op_names.update(n for n in self.piece_ops if n not in gloo)
        if gloo:
            self.add_ops_named(piece, sep, gloo)

    def add_ops_named(self, piece: bytes, sep: bytes, names: dict[str, int]) -> None:
        """:meth:`add_op` for the operators named ``names`` (each counted that many times,
        -1: not counted) among the events of ``piece``, found by name in the text and parsed
        alone under :meth:`add_many`'s rules (a few per step, where parsing every event in
        Python would cost twice the read). When a name is found fewer times than counted
        (written with escapes), every name that may be an operator's is looked for."""
        hits: list[int] = []
        for name, count in names.items():
            found = 0
            for ascii_only in (False, True):
                needle = b'"name": ' + json.dumps(name, ensure_ascii=ascii_only).encode()
                at = piece.find(needle)
                while at >= 0:
                    hits.append(at)
                    found += 1
                    at = piece.find(needle, at + len(needle))
                if found or name.isascii():
                    break
            if found < count:
                hits = [m.start() for m in OP_NAME.finditer(piece)]
                break
        seen = set()
        for at in hits:
            start = piece.rfind(sep, 0, at)
            start = 0 if start < 0 else start + 2
            if start not in seen:
                seen.add(start)
                end = piece.find(sep, at)
                self._op_text(piece[start : len(piece) if end < 0 else end + 1])

    def _op_text(self, text: bytes) -> None:
        try:
            event = json.loads(text)
        except ValueError:
            return
        if type(event) is dict:
            self._op_event(event)

    def _op_event(self, event: dict[str, Any]) -> None:
        """:meth:`add_many`'s rules for one host event that may be a communication operator."""
        ts, dur, cat, name, args = (event.get(k) for k in ("ts", "dur", "cat", "name", "args"))
        if cat not in ("cpu_op", "user_annotation") or type(name) is not str:
            return
        if STEP_MARK in name or operator_kind(name) != COMMUNICATION:
            return
        args = args if type(args) is dict else {}
        if _integer(args.get("stream", -1)) >= 0:
            return
        try:
            ts, dur = float(ts), float(dur)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return
        self.add_op(ts, dur, name, args)

    def code(self, name: str) -> int:
        """``name``'s index in ``c_names`` (added when new and there is room, else 0)."""
        name = name[:MAX_NAME]
        found = self._codes.get(name)
        if found is None:
            if len(self.c_names) >= MAX_NAMES:
                return 0
            found = self._codes[name] = len(self.c_names)
            self.c_names.append(name)
        return found

    def add_table(self, table: Any) -> None:
        """:meth:`add_many`'s rules on a pyarrow table of events (columns ts, dur, cat, name,
        args with its fields stream and correlation)."""
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
        self._table_collectives(args, dur, corr, names, name, kinds, device)
        linked = host & (corr >= 0)
        self.h_corr.frombytes(corr[linked].astype(np.int64).tobytes())
        self.h_ts.frombytes(ts[linked].tobytes())
        marks = np.array([STEP_MARK in n for n in names], dtype=bool)
        step = host & marks[name]
        step_ids = np.array([step_number(n) for n in names], dtype=np.int64)
        self.s_ts.frombytes(ts[step].tobytes())
        self.s_dur.frombytes(dur[step].tobytes())
        self.s_id.frombytes(step_ids[name[step]].tobytes())
        device_step = cats.index(DEVICE_STEP) if DEVICE_STEP in cats else -2
        self.s_dev.frombytes((cat[step] == device_step).astype(np.int8).tobytes())
        op_kinds = np.array(
            [self._kind(n, self.op_kinds, operator_kind) for n in names], dtype=np.int8
        )
        cpu_op = cats.index("cpu_op") if "cpu_op" in cats else -2
        annotation = cats.index("user_annotation") if "user_annotation" in cats else -2
        op = host & ~step
        op &= (cat == cpu_op) | ((cat == annotation) & (op_kinds[name] == COMMUNICATION))
        comm_names, counts = np.unique(
            name[op & (op_kinds[name] == COMMUNICATION)], return_counts=True
        )
        self.piece_ops = {names[int(n)]: int(c) for n, c in zip(comm_names, counts, strict=True)}
        self.o_ts.frombytes(ts[op].tobytes())
        self.o_dur.frombytes(dur[op].tobytes())
        self.o_kind.frombytes(op_kinds[name[op]].tobytes())

    def _table_collectives(
        self,
        args: list[Any],
        dur: np.ndarray,
        corr: np.ndarray,
        names: list[str],
        name: np.ndarray,
        kinds: np.ndarray,
        device: np.ndarray,
    ) -> None:
        """:meth:`add_collective`'s rules, column-wise, for the communication kernels of a
        table's rows (``args``: the flattened fields of
        :func:`~itwin_report.traces.pieces.arrow_events`: stream, correlation, then
        ``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``dtype``, ``Group size``).
        """
        import pyarrow.compute as pc

        rows = np.flatnonzero(device & (kinds[name] == COMMUNICATION))
        if not rows.size:
            return
        said, said_at = _distinct(args[2].take(rows))
        coll = np.array([self.code(canonical(v)) for v in said] + [0], dtype=np.int32)[said_at]
        unsaid = said_at < 0  # named from the kernel's name
        if unsaid.any():
            kernel = name[rows][unsaid]
            uniq = np.unique(kernel)
            codes = np.array([self.code(canonical(names[u])) for u in uniq], dtype=np.int32)
            coll[unsaid] = codes[np.searchsorted(uniq, kernel)]
        sizes = []
        for field in (6, 3, 4):  # Group size, In msg nelems, Out msg nelems
            value = pc.fill_null(args[field].take(rows), -1).to_numpy(zero_copy_only=False)
            sizes.append(np.where((value >= 0) & (value < 1 << 62), value, -1).astype(np.int64))
        dtypes, dtype_at = _distinct(args[5].take(rows))
        dtype = np.array([self.code(v) for v in dtypes] + [self.code("")], dtype=np.int32)
        self.c_dur.frombytes(dur[rows].astype(np.float64).tobytes())
        self.c_corr.frombytes(corr[rows].astype(np.int64).tobytes())
        self.c_coll.frombytes(coll.tobytes())
        for column, value in zip((self.c_group, self.c_in, self.c_out), sizes, strict=True):
            column.frombytes(value.tobytes())
        self.c_dtype.frombytes(dtype[dtype_at].tobytes())

    @staticmethod
    def _kind(name: str, cache: dict[str, int], rule: Any) -> int:
        kind = cache.get(name)
        if kind is None:
            kind = cache[name] = rule(name)
        return int(kind)


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


def _distinct(column: Any) -> tuple[list[Any], np.ndarray]:
    """A pyarrow array's distinct values and each row's index into them (-1: null)."""
    encoded = column.dictionary_encode()
    at = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    return encoded.dictionary.to_pylist(), at.astype(np.int64)


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


def _count(value: Any) -> int:
    """A size in a kernel's args (elements, ranks), -1 when it is none or out of range."""
    number = -1 if value is None else _integer(value)
    return number if 0 <= number < 1 << 62 else -1
