"""Row order and joins of large frames computed on integer codes, never by comparing strings.

A metrics frame holds millions of points keyed by run id strings; sorting or merging on those
strings dominates the report's time. Factorizing a column once (a hash pass) and working on the
codes gives the same rows in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

# the canonical order of metric points; the last column breaks the remaining ties
METRIC_ORDER = ("run_id", "key", "step", "timestamp", "value")


def sorted_codes(column: pd.Series) -> np.ndarray:
    """Codes of ``column`` whose order is the order of its values (missing values last)."""
    codes, _ = pd.factorize(column, sort=True, use_na_sentinel=True)
    return np.where(codes < 0, np.iinfo(np.int64).max, codes.astype(np.int64))


def _sort_keys(frame: pd.DataFrame, columns: Sequence[str]) -> list[np.ndarray]:
    """One comparable array per column, NaN last: the column itself or its sorted codes."""
    keys = []
    for name in columns:
        column = frame[name]
        if pd.api.types.is_numeric_dtype(column.dtype):
            values = column.to_numpy()
            if values.dtype.kind == "f":
                values = np.where(np.isnan(values), np.inf, values)  # NaN last, as lexsort
            keys.append(values)
        else:
            keys.append(sorted_codes(column))
    return keys


def _in_order(keys: list[np.ndarray]) -> bool:
    """Whether rows are already sorted by ``keys`` (first is major): one pass, no sort."""
    if not keys or len(keys[0]) < 2:
        return True
    ok = np.ones(len(keys[0]) - 1, dtype=bool)
    for values in reversed(keys):
        before, after = values[:-1], values[1:]
        ok = (before < after) | ((before == after) & ok)
    return bool(ok.all())


def sort_rows(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``frame`` sorted by ``columns`` (stable), indexed 0..n-1; itself when already sorted."""
    keys = _sort_keys(frame, columns)
    if _in_order(keys):
        return frame
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
        if pd.api.types.is_numeric_dtype(column.dtype):
            values = column.to_numpy()
        else:
            values, _ = pd.factorize(column)
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
