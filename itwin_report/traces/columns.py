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

from array import array
from typing import Any

import numpy as np

from itwin_report.traces.collectives import MAX_NAME, MAX_NAMES, UNKNOWN, canonical
from itwin_report.traces.kinds import (
    COMMUNICATION,
    DEVICE_STEP,
    STEP_MARK,
    kernel_kind,
    operator_kind,
    step_number,
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
                    self.add_collective(dur, name, args if type(args) is dict else {})
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
        self.whole_ts = whole

    def add_collective(self, dur: float, kernel: str, args: dict[str, Any]) -> None:
        """One communication kernel: its duration and its args' message description."""
        said = args.get("Collective name")
        self.c_dur.append(dur)
        self.c_coll.append(self.code(canonical(said if said is not None else kernel)))
        self.c_group.append(_count(args.get("Group size")))
        self.c_in.append(_count(args.get("In msg nelems")))
        self.c_out.append(_count(args.get("Out msg nelems")))
        dtype = args.get("dtype")
        self.c_dtype.append(self.code(dtype if isinstance(dtype, str) else ""))

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
        self._table_collectives(args, dur, names, name, kinds, device)
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
        self.o_ts.frombytes(ts[op].tobytes())
        self.o_dur.frombytes(dur[op].tobytes())
        self.o_kind.frombytes(op_kinds[name[op]].tobytes())

    def _table_collectives(
        self,
        args: list[Any],
        dur: np.ndarray,
        names: list[str],
        name: np.ndarray,
        kinds: np.ndarray,
        device: np.ndarray,
    ) -> None:
        """:meth:`add_collective` for each communication kernel of a table's rows (``args``:
        the flattened fields of :func:`~itwin_report.traces.pieces.arrow_events`)."""
        rows = np.flatnonzero(device & (kinds[name] == COMMUNICATION))
        if not rows.size:
            return
        fields = ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size")
        picked = [args[2 + i].take(rows).to_pylist() for i in range(len(fields))]
        for j, row in enumerate(rows):
            said = {f: v[j] for f, v in zip(fields, picked, strict=True) if v[j] is not None}
            self.add_collective(float(dur[row]), names[name[row]], said)

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
