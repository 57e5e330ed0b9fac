"""Row order and joins of large frames computed on integer codes, never by comparing strings.

A metrics frame holds millions of points keyed by run id strings; sorting or merging on those
strings dominates the report's time, and holding them as Python strings its memory. The
schema keeps such columns as categoricals (:func:`categorical`: text categories, sorted, each
one used), so a column's codes are in the order of its values; other columns are factorized
once (a hash pass). Working on the codes gives the same rows in the same order.

Pandas before 3.0 groups a categorical by every category, present or not: every ``groupby``
over such a column passes ``observed=True``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

# the canonical order of metric points; the last column breaks the remaining ties
METRIC_ORDER = ("run_id", "key", "step", "timestamp", "value")
# the dtype of text: object holding str before pandas 3, pandas' own str from 3.0 on
STR: Any = pd.Series(dtype="str").dtype


def is_categorical(column: pd.Series | pd.Index) -> bool:
    """Whether ``column`` holds a categorical."""
    return isinstance(column.dtype, pd.CategoricalDtype)


def categorical(column: pd.Series) -> pd.Categorical:
    """``column`` as the schema's categorical: text categories, sorted, each one used.

    Text as ``astype("str")`` gives it (a missing value becomes "nan"). A categorical that is
    one already keeps its codes where it can: unused categories are dropped and the others
    sorted by recoding, one pass over the codes (never a pass over strings).
    """
    if not is_categorical(column):
        values = pd.Categorical(column.astype("str"))
        if (values.codes < 0).any():  # pandas 3 keeps a missing value missing in text
            values = pd.Categorical(column.astype(object).map(str).astype(STR))
        return _compact(values)
    values = column.array
    assert isinstance(values, pd.Categorical)
    categories = values.categories
    if (values.codes < 0).any() or pd.api.types.infer_dtype(categories) != "string":
        return categorical(pd.Series(np.asarray(values, dtype=object)).map(str))
    if values.ordered:
        values = values.as_unordered()
    return _compact(values)


def _compact(values: Any) -> pd.Categorical:
    """``values`` with the categories it uses, sorted, as text (itself when they already are)."""
    categories = values.categories
    codes = values.codes
    used = np.bincount(codes, minlength=len(categories)).astype(bool)
    if categories.dtype != STR:
        categories = categories.astype(STR)
    if used.all() and categories.is_monotonic_increasing:
        if categories is values.categories:
            return values
        return pd.Categorical.from_codes(codes, categories=categories)
    order = np.arange(len(categories)) if categories.is_monotonic_increasing else None
    if order is None:
        order = categories.argsort(kind="stable")
    order = order[used[order]]  # the used categories, in the order of their values
    new = np.full(len(categories), -1, dtype=codes.dtype)
    new[order] = np.arange(len(order), dtype=codes.dtype)
    return pd.Categorical.from_codes(new[codes], categories=categories.take(order))


def as_text(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its categorical columns as text (for a small table a reader sees)."""
    wanted = {c: STR for c in frame.columns if is_categorical(frame[c])}
    return frame.astype(wanted) if wanted else frame


def isin(column: pd.Series, values: Any) -> np.ndarray:
    """Per row: whether ``column``'s value is one of ``values``; for a categorical the
    categories are looked up once and the codes gathered (never a search per row)."""
    if not is_categorical(column):
        if not len(column):
            return np.zeros(0, dtype=bool)
        return column.isin(values).to_numpy(dtype=bool)
    array = column.array
    assert isinstance(array, pd.Categorical)
    known = values if isinstance(values, set | frozenset) else set(values)
    categories = array.categories.tolist()  # text: one set lookup each (pandas 3 is slower)
    wanted = np.fromiter((c in known for c in categories), dtype=bool, count=len(categories))
    return np.append(wanted, False)[array.codes]  # a missing value (code -1) is in none


def present(column: pd.Series, where: np.ndarray | None = None) -> list[str]:
    """The distinct values of ``column`` (in the rows ``where`` is True), sorted, as text;
    found on a categorical's codes without a copy of the rows."""
    if not is_categorical(column):
        picked = column if where is None else column[where]
        return sorted(str(v) for v in pd.unique(picked))
    values = column.array
    assert isinstance(values, pd.Categorical)
    codes = values.codes if where is None else values.codes[where]
    codes = codes[codes >= 0]
    seen = np.bincount(codes, minlength=len(values.categories)).astype(bool)
    return sorted(str(v) for v in values.categories[seen])


def text_index(frame: pd.DataFrame | pd.Series) -> Any:
    """``frame`` (grouped by a categorical: one row per run or job) with its index as text."""
    index = frame.index
    if isinstance(index, pd.MultiIndex):
        levels = [lvl.astype(STR) if is_categorical(lvl) else lvl for lvl in index.levels]
        out = frame.copy(deep=False)
        out.index = index.set_levels(levels)  # type: ignore[arg-type]
        return out
    if not is_categorical(index):
        return frame
    out = frame.copy(deep=False)
    out.index = index.astype(STR)
    return out


def coded(column: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """(codes, values) of ``column``: ``values`` distinct and sorted, ``values[codes]`` the
    column (-1: missing); a categorical's own codes when its categories are sorted."""
    if is_categorical(column):
        values = column.array
        assert isinstance(values, pd.Categorical)
        categories = values.categories
        if categories.is_monotonic_increasing:
            return values.codes, categories
        order = categories.argsort(kind="stable")
        rank = np.empty(len(order) + 1, dtype=np.int64)
        rank[order] = np.arange(len(order))
        rank[-1] = -1  # code -1 (missing) stays -1
        return rank[values.codes], categories.take(order)
    codes, uniques = pd.factorize(column, sort=True, use_na_sentinel=True)
    return codes, pd.Index(uniques)


def positions(column: pd.Series, index: pd.Index) -> np.ndarray:
    """Per row, the position of its value (as text) in ``index``; -1 where it is missing or
    not there. Each distinct value is looked up once (a categorical's codes are never hashed)."""
    codes, values = coded(column)
    where = np.append(index.get_indexer(pd.Index([str(v) for v in values], dtype=object)), -1)
    return where[codes]  # code -1 (missing) takes the appended -1


def value_codes(column: pd.Series) -> np.ndarray:
    """Integer codes of ``column``, equal where the values are equal and ordered as they are
    (missing values last)."""
    codes, _ = coded(column)
    return np.where(codes < 0, np.iinfo(np.int64).max, codes.astype(np.int64))


def sorted_codes(column: pd.Series) -> np.ndarray:
    """Codes of ``column`` whose order is the order of its values (missing values last)."""
    return value_codes(column)


def _sort_keys(frame: pd.DataFrame, columns: Sequence[str]) -> list[np.ndarray]:
    """One array per column for ``np.lexsort`` (which puts NaN last, as pandas does)."""
    return [
        frame[name].to_numpy() if _numeric(frame[name]) else sorted_codes(frame[name])
        for name in columns
    ]


def _pairs(column: pd.Series) -> tuple[np.ndarray, np.ndarray] | None:
    """(row < next row, row == next row) for a column; None when values do not compare."""
    values: Any = column.to_numpy() if _numeric(column) else column.array
    if is_categorical(column):
        values, _ = coded(column)  # the column's own codes when its categories are sorted
        if len(values) and values.min() < 0:
            return None  # a missing value: the sort puts it last
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


def renumbered(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` indexed 0..n-1, its columns shared (``reset_index`` copies them in pandas 2)."""
    index = frame.index
    if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
        return frame
    out = frame.copy(deep=False)
    out.index = pd.RangeIndex(len(out))
    return out


def rows_where(frame: pd.DataFrame, keep: np.ndarray) -> pd.DataFrame:
    """The rows of ``frame`` where ``keep`` is True: ``frame`` itself when that is every row."""
    return frame if keep.all() else frame[keep]


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
        if _numeric(column):
            values = column.to_numpy()
        elif is_categorical(column):
            values = column.array.codes
        else:
            values = pd.factorize(column)[0]
        same &= values[:-1] == values[1:]
    repeated[:-1] = same
    return repeated


def join_runs(points: pd.DataFrame, runs: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``points`` with ``columns`` of their run (matched on ``run_id``); points of no run go.

    The same rows as an inner merge on ``run_id`` when run ids are unique in ``runs``, with
    the points' order kept; each column keeps its dtype in ``runs`` (a categorical stays one,
    so that no text is copied per point), and the points' ``run_id`` keeps its own.
    """
    index = pd.Index(runs["run_id"])
    wanted = [c for c in columns if c != "run_id"]
    if not index.is_unique:
        return points.merge(runs[["run_id", *wanted]], on="run_id", how="inner")
    column = points["run_id"]
    if is_categorical(column):  # the categories looked up once, the codes never hashed
        codes = column.array.codes
        uniques = pd.Index(column.cat.categories)
    else:
        codes, uniques = pd.factorize(column)
        uniques = pd.Index(uniques)
    where = np.append(index.get_indexer(uniques), -1)
    row = where[codes]  # a missing run id (code -1) takes the appended -1
    keep = row >= 0
    if keep.all():
        kept = points
    else:
        kept, row = points[keep], row[keep]
    out = {c: kept[c].array for c in kept.columns}
    out.update({c: runs[c].array.take(row) for c in wanted})  # a column at a time
    return pd.DataFrame(out, copy=False)  # no copy of the points' columns


def code_sums(
    levels: Sequence[tuple[np.ndarray, int]], values: np.ndarray
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """Per group of points, a group being one combination of codes (``levels``: per level the
    points' codes, as :func:`coded` gives them, and how many values they code; a point with a
    missing code, -1, is left out as a group-by leaves it): (each present group's code per
    level, its points, the sum and the count of its values that are numbers).

    One integer per point and one bin per group: a group-by of millions of points held copies
    of their columns and of its own keys at once.
    """
    group = np.zeros(len(values), dtype=np.int64)
    missing = np.zeros(len(values), dtype=bool)
    size = 1
    for codes, count in levels:
        group *= count
        group += codes
        missing |= codes < 0
        size *= count
    if missing.any():
        group, values = group[~missing], values[~missing]
    ids = None  # each bin's group, where the bins are not the groups themselves
    if size > len(group) + 1024:  # more groups possible than points: bins of present ones
        ids, group = np.unique(group, return_inverse=True)
        size = len(ids)
    points = np.bincount(group, minlength=size)
    nan = np.isnan(values)
    if nan.any():
        sums = np.bincount(group[~nan], weights=values[~nan], minlength=size)
        counts = points - np.bincount(group[nan], minlength=size)
    else:
        sums, counts = np.bincount(group, weights=values, minlength=size), points
    at = np.flatnonzero(points)
    found = at if ids is None else ids[at]
    per_level = []
    for _, count in reversed(levels):
        found, code = np.divmod(found, count)
        per_level.append(code)
    return per_level[::-1], points[at], sums[at], counts[at]
