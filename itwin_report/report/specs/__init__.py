"""One definition per report table: its columns, dtypes, headers, formats and JSON names.

Aggregation builds its frames from these specs (column order and dtypes of an empty table),
every renderer reads headers, formats and alignment from them, and the JSON writer the names.
A column with ``header=None`` is kept in the frame, CSV and JSON, but not shown as a table
column (the throughput ``evidence`` is printed as a list under its table).

Light modules: standard library only, so ``--help`` stays fast. The tables of time live in
:mod:`.timing`, those of the GPUs in :mod:`.gpu`, those read from traces in :mod:`.traces`, and
what they share in :mod:`.common`.
"""

from __future__ import annotations

from itwin_report.report.columns import TableSpec
from itwin_report.report.specs.common import COST as COST
from itwin_report.report.specs.gpu import COMPUTATION, GPU
from itwin_report.report.specs.timing import EPOCH_TIME, THROUGHPUT, TIME_TO_TARGET
from itwin_report.report.specs.traces import COMMUNICATION, TIME_BREAKDOWN

TABLES: tuple[TableSpec, ...] = (
    EPOCH_TIME,
    GPU,
    COMPUTATION,
    THROUGHPUT,
    TIME_BREAKDOWN,
    COMMUNICATION,
)
"""The report's tables, in the order they are printed."""

SPECS: dict[str, TableSpec] = {spec.name: spec for spec in TABLES}
TABLE_NAMES: tuple[str, ...] = tuple(SPECS)


def spec(name: str) -> TableSpec:
    """The spec of table ``name``."""
    return SPECS[name]


def _dtypes() -> dict[str, str]:
    out: dict[str, str] = {}
    for table in (*TABLES, TIME_TO_TARGET):
        for col in table.columns:
            if out.setdefault(col.name, col.dtype) != col.dtype:
                raise TypeError(f"column {col.name!r} has two dtypes")
    return out


DTYPES: dict[str, str] = _dtypes()
"""Every report column's dtype (a name means the same in every table)."""
