"""The parts every table spec is made of: a column (name, dtype, header, format, JSON name,
description) and a table spec, and the formatters that show a value as the tables print it.

Light module: standard library only, so ``--help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MISSING = "n/a"

Formatter = Callable[[Any], str]


def is_missing(value: Any) -> bool:
    """None or NaN (float, numpy or pandas)."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except (TypeError, ValueError):
        return False


def base_of(row: dict[str, Any]) -> tuple[str, int] | None:
    """The base configuration a table row names (``base_strategy``, ``base_workers``)."""
    strategy, workers = row.get("base_strategy"), row.get("base_workers")
    if not isinstance(strategy, str) or workers is None or is_missing(workers):
        return None
    return strategy, int(workers)


def number(fmt: str, unit: str = "") -> Formatter:
    """Formatter: ``format(value, fmt) + unit``, ``n/a`` when missing."""

    def show(value: Any) -> str:
        if is_missing(value):
            return MISSING
        return format(float(value), fmt) + unit

    return show


def percent_of_fraction(value: Any) -> str:
    """0.8 -> ``80.0 %``."""
    return MISSING if is_missing(value) else format(float(value) * 100, ".1f") + " %"


def flag(value: Any) -> str:
    """True/False -> ``yes``/``no``; ``n/a`` when undecided."""
    return MISSING if is_missing(value) else ("yes" if bool(value) else "no")


def text(value: Any) -> str:
    return MISSING if is_missing(value) else str(value)


def integer(value: Any) -> str:
    return MISSING if is_missing(value) else str(int(value))


@dataclass(frozen=True)
class Column:
    """One column: frame name, pandas dtype, header (None: not a table column), format."""

    name: str
    dtype: str
    header: str | None
    fmt: Formatter = text
    right: bool = True
    json_name: str = ""
    description: str = ""
    estimated_by: str = ""  # a coverage column: below 1, the cell is an estimate shown with ~
    group: str = ""  # a named group of columns printed as a table of its own (e.g. "cost")
    optional: bool = False  # printed only when some row has a value (an option asked for it)

    @property
    def key(self) -> str:
        """The name used in JSON output."""
        return self.json_name or self.name

    def cell(self, row: dict[str, Any]) -> str:
        """The formatted value of this column in ``row``, ``~`` marking an estimate."""
        shown = self.fmt(row.get(self.name))
        coverage = row.get(self.estimated_by) if self.estimated_by else None
        if coverage is not None and not is_missing(coverage) and coverage < 1 and shown != MISSING:
            return "~" + shown
        return shown

    @property
    def is_text(self) -> bool:
        """A column holding text from the store or the report (never a number)."""
        return self.dtype == "str"


@dataclass(frozen=True)
class TableSpec:
    """A report table: name (the Report attribute), heading, message when empty, columns."""

    name: str
    heading: str
    empty: str
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def dtypes(self) -> dict[str, str]:
        return {c.name: c.dtype for c in self.columns}

    @property
    def shown(self) -> tuple[Column, ...]:
        """The columns printed in a table, in order (a group's columns are printed apart)."""
        return tuple(c for c in self.columns if c.header is not None and not c.group)

    def grouped(self, group: str) -> tuple[Column, ...]:
        """The printed columns of ``group``, in order."""
        return tuple(c for c in self.columns if c.header is not None and c.group == group)

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(name)
