"""Row order and joins of large frames computed on integer codes, never by comparing strings.

A metrics frame holds millions of points keyed by run id strings; sorting or merging on those
strings dominates the report's time. Factorizing a column once (a hash pass) and working on the
codes gives the same rows in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

# the canonical order of metric points; the last column breaks the remaining ties
METRIC_ORDER = ("run_id", "key", "step", "timestamp", "value")


def sorted_codes(column: pd.Series) -> np.ndarray:
    """Codes of ``column`` whose order is the order of its values (missing values last)."""
    codes, _ = pd.factorize(column, sort=True, use_na_sentinel=True)
    return np.where(codes < 0, np.iinfo(np.int64).max, codes.astype(np.int64))


def _sort_keys(frame: pd.DataFrame, columns: Sequence[str]) -> list[np.ndarray]:
    """One array per column for ``np.lexsort`` (which puts NaN last, as pandas does)."""
    return [
        frame[name].to_numpy() if _numeric(frame[name]) else sorted_codes(frame[name])
        for name in columns
    ]


def _pairs(column: pd.Series) -> tuple[np.ndarray, np.ndarray] | None:
    """(row < next row, row == next row) for a column; None when values do not compare."""
    values: Any = column.to_numpy() if _numeric(column) else column.array
    before, after = values[:-1], values[1:]
    try:
        less, same = before < after, before == after
    except TypeError:  # mixed types in an object column
        return None
    if isinstance(less, np.ndarray):
        return less.astype(bool), same.astype(bool)
    return less.to_numpy(dtype=bool, na_value=False), same.to_numpy(dtype=bool, na_value=False)


def _in_order(frame: pd.DataFrame, columns: Sequence[str]) -> bool:
    """Whether rows are already sorted by ``columns`` (first is major): one pass, no sort.

    Missing values never compare, so a frame holding them in a sort column is "not sorted"
    and goes through the sort, which puts them last.
    """
    if len(frame) < 2 or not columns:
        return True
    ok = np.ones(len(frame) - 1, dtype=bool)
    for name in reversed(columns):
        pairs = _pairs(frame[name])
        if pairs is None:
            return False
        less, same = pairs
        ok = less | (same & ok)
    return bool(ok.all())


def _numeric(column: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(column.dtype)


def sort_rows(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``frame`` sorted by ``columns`` (stable), indexed 0..n-1; itself when already sorted."""
    if _in_order(frame, columns):
        return frame
    keys = _sort_keys(frame, columns)
    out = frame.take(np.lexsort(keys[::-1]))
    out.index = pd.RangeIndex(len(out))
    return out


def last_of_each(frame: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """For a frame sorted by ``columns`` (and more): True where the next row has equal ``columns``.

    Marks every row but the last of each group of equal ``columns``.
    """
    repeated = np.zeros(len(frame), dtype=bool)
    if len(frame) < 2:
        return repeated
    same = np.ones(len(frame) - 1, dtype=bool)
    for name in columns:
        column = frame[name]
        values = column.to_numpy() if _numeric(column) else pd.factorize(column)[0]
        same &= values[:-1] == values[1:]
    repeated[:-1] = same
    return repeated


def join_runs(points: pd.DataFrame, runs: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``points`` with ``columns`` of their run (matched on ``run_id``); points of no run go.

    The same rows as an inner merge on ``run_id`` when run ids are unique in ``runs``, with
    the points' order kept.
    """
    index = pd.Index(runs["run_id"])
    wanted = [c for c in columns if c != "run_id"]
    if not index.is_unique:
        return points.merge(runs[["run_id", *wanted]], on="run_id", how="inner")
    codes, uniques = pd.factorize(points["run_id"])
    where = index.get_indexer(uniques)
    row = np.where(codes >= 0, where[codes] if len(where) else -1, -1)
    keep = row >= 0
    kept = points if keep.all() else points[keep]
    picked = runs[wanted].iloc[row[keep]]
    return kept.reset_index(drop=True).assign(**{c: picked[c].array for c in wanted})
