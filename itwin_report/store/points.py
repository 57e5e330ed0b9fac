"""Metric points read in parts (a key, a batch of rows) and put in the schema's order on codes.

A reader hands over each part as arrays: the position of each point's run in the wanted run ids
(-1 for a run that is not wanted), its key's position, value, step and timestamp (floats or
integers) and which points are not numbers. Points of runs that are not wanted are dropped as
each part arrives, so memory holds only the experiment's points, never the store's.

The parts are then ordered as the loader's frames are: by run, key, step, timestamp, value
(NaN last). Run and key travel as integer codes; the order is found by a stable radix sort on
``run * keys + key`` (linear in the number of points) and a check, in one pass, that the points
of each (run, key) already follow step, timestamp and value, which holds when they are read in
the order of an index. Only the groups where they do not are sorted further.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from itwin_report.data.frames import STR

RADIX_BITS = 16  # numpy sorts 16-bit integers stably by radix: linear, not n log n
# parts are joined into chunks of this many points as they arrive: a batch's small arrays are
# freed and their memory reused for the next batches, instead of thousands of them scattering
# the heap (memory the process would keep after they are joined into the frame)
CHUNK_POINTS = 1 << 21


def stable_order(codes: np.ndarray) -> np.ndarray:
    """The stable sorting permutation of non-negative integer ``codes``, in linear time.

    Least significant 16 bits first, each pass a radix sort of 16-bit integers. The positions
    are 32-bit integers where they fit: half the memory of the 64-bit ones.
    """
    small = len(codes) < 2**31
    order = np.arange(len(codes), dtype=np.int32 if small else np.int64)
    if not len(codes):
        return order
    top = int(codes.max())
    shift = 0
    while True:
        digits = ((codes[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digits, kind="stable")]
        shift += RADIX_BITS
        if top >> shift == 0:
            return order


def _after(prev: np.ndarray, nxt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(prev < nxt, prev == nxt) elementwise, NaN sorting after every number and equal to NaN."""
    prev_nan, next_nan = np.isnan(prev), np.isnan(nxt)
    with np.errstate(invalid="ignore"):
        less = (prev < nxt) | (~prev_nan & next_nan)
        same = (prev == nxt) | (prev_nan & next_nan)
    return less, same


def out_of_order(group: np.ndarray, columns: Sequence[np.ndarray]) -> np.ndarray:
    """Per point: whether it comes before its predecessor of the same group by ``columns``
    (compared in turn, NaN last, as ``np.lexsort`` orders them)."""
    wrong = np.zeros(len(group), dtype=bool)
    if len(group) < 2:
        return wrong
    ok = np.ones(len(group) - 1, dtype=bool)
    for column in reversed(columns):  # the last column decides only where the others tie
        prev, nxt = column[:-1], column[1:]
        if column.dtype.kind == "f":
            less, same = _after(prev, nxt)
        else:
            less, same = prev < nxt, prev == nxt
        ok = less | (same & ok)
    wrong[1:] = ~ok & (group[:-1] == group[1:])
    return wrong


def in_order(columns: Sequence[np.ndarray]) -> bool:
    """Whether rows are sorted by ``columns`` (the first decides first; NaN last), in one pass."""
    if not columns or len(columns[0]) < 2:
        return True
    return not out_of_order(np.zeros(len(columns[0]), dtype=np.int8), columns).any()


@dataclass
class PointParts:
    """Points of the wanted runs, part by part; :meth:`frame` puts them in the schema's order."""

    run_ids: Sequence[str]  # sorted: a run's code is its position
    keys: Sequence[str]  # sorted: a key's code is its position
    _parts: list[tuple[np.ndarray, ...]] = field(default_factory=list, init=False)
    _pending: list[tuple[np.ndarray, ...]] = field(default_factory=list, init=False)
    _pending_points: int = field(default=0, init=False)

    def add(
        self,
        runs: np.ndarray,
        keys: np.ndarray | int,
        value: np.ndarray,
        step: np.ndarray,
        timestamp: np.ndarray,
        bad: np.ndarray,
    ) -> None:
        """One part: run positions (-1: not wanted), key positions (or one for all), columns,
        and which points are not numbers."""
        keep = runs >= 0
        if not keep.all():
            runs, value, step, timestamp, bad = (
                a[keep] for a in (runs, value, step, timestamp, bad)
            )
            if not isinstance(keys, int):
                keys = keys[keep]
        if not len(runs):
            return
        key_codes = np.full(len(runs), keys, dtype=np.int16) if isinstance(keys, int) else keys
        self._pending.append(
            (
                runs.astype(np.int32, copy=False),
                key_codes.astype(np.int16, copy=False),
                value,
                step,
                timestamp,
                bad.astype(bool, copy=False),
            )
        )
        self._pending_points += len(runs)
        if self._pending_points >= CHUNK_POINTS:
            self._flush()

    def _flush(self) -> None:
        """The parts that arrived since the last chunk, joined into one."""
        if self._pending:
            self._parts.append(tuple(np.concatenate(c) for c in zip(*self._pending, strict=True)))
        self._pending, self._pending_points = [], 0

    def __len__(self) -> int:
        return sum(len(p[0]) for p in self._parts) + self._pending_points

    def _column(self, at: int) -> np.ndarray:
        """One column of every part, joined; the parts' arrays are released."""
        self._flush()
        arrays = [p[at] for p in self._parts]
        self._parts = [(*p[:at], np.empty(0), *p[at + 1 :]) for p in self._parts]
        if not arrays:
            return np.empty(0)
        return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]

    def frame(self) -> tuple[pd.DataFrame, np.ndarray]:
        """(points as ``run_id, key`` categoricals and ``step, value, timestamp``, sorted by
        run, key, step, timestamp, value; which of them are not numbers)."""
        runs, keys = self._column(0), self._column(1)
        width = max(len(self.keys), 1)
        small = len(self.run_ids) * width < 2**31  # int32 codes: half the memory of int64
        group: np.ndarray[Any, Any] = runs.astype(np.int32 if small else np.int64)
        del runs
        group *= width  # in place: no temporary of every point
        group += keys
        del keys
        order = stable_order(group)
        group = group[order]
        columns = {"value": 2, "step": 3, "timestamp": 4, "bad": 5}
        data = {name: self._column(at)[order] for name, at in columns.items()}
        del order
        self._parts = []
        wrong = out_of_order(group, [data["step"], data["timestamp"], data["value"]])
        if wrong.any():
            _sort_groups(group, data, wrong)
        frame = pd.DataFrame(
            {
                "run_id": pd.Categorical.from_codes(
                    (group // width).astype(np.int32), categories=pd.Index(self.run_ids, dtype=STR)
                ),
                "key": pd.Categorical.from_codes(
                    (group % width).astype(np.int16), categories=pd.Index(self.keys, dtype=STR)
                ),
                "step": data["step"],
                "value": data["value"],
                "timestamp": data["timestamp"],
            },
            copy=False,
        )
        return frame, data["bad"]


def _sort_groups(group: np.ndarray, data: dict[str, np.ndarray], wrong: np.ndarray) -> None:
    """Sort, in place, the points of the groups that hold a point out of order."""
    unsorted = np.isin(group, np.unique(group[wrong]))
    at = np.flatnonzero(unsorted)
    order = np.lexsort((data["value"][at], data["timestamp"][at], data["step"][at], group[at]))
    for column in data.values():
        column[at] = column[at][order]
