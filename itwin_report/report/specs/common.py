"""Columns and formats several tables share: a configuration's key, nodes, base, intervals."""

from __future__ import annotations

from typing import Any

from itwin_report.report.columns import (  # the building blocks, used with the specs
    MISSING,
    Column,
    integer,
    is_missing,
    number,
    text,
)


def key_columns() -> tuple[Column, ...]:
    return (
        Column(
            "strategy",
            "str",
            "Strategy",
            text,
            right=False,
            description="Distributed strategy (DDP, DeepSpeed, Horovod, ...) as the runs log it.",
        ),
        Column(
            "workers",
            "int64",
            "Workers",
            integer,
            description="Workers (GPUs) of the configuration: the global world size.",
        ),
        NODES,
        Column(
            "runs",
            "int64",
            "Runs",
            integer,
            description="Jobs of the configuration that contribute data to this table.",
        ),
    )


def whole(value: Any) -> str:
    """A count that may be a mean: ``2``, or ``1.5`` when the jobs differ."""
    if is_missing(value):
        return MISSING
    return str(int(value)) if float(value).is_integer() else format(float(value), ".1f")


NODES = Column(
    "nodes",
    "float64",
    "Nodes",
    whole,
    optional=True,
    description="Nodes of the configuration's jobs: the distinct hostname params of their "
    "ranks where every rank logged one, else GPUs / GPUs per node rounded up (--gpus-per-node, "
    "else the runs' gpus_per_node param); unknown otherwise. A mean when its jobs differ.",
)


def base_columns() -> tuple[Column, ...]:
    """The configuration a row's speedup is measured against (CSV and JSON only)."""
    return (
        Column("base_strategy", "str", None, text, right=False, description="Base strategy."),
        Column("base_workers", "float64", None, integer, description="Base worker count."),
    )


SECONDS = number(".2f", " s")
SPEEDUP = number(".2f", "x")
COST = "cost"  # the GPU table's cost columns, printed as a table of their own


def interval_columns(name: str, what: str, group: str = "") -> tuple[Column, Column]:
    """The hidden 95 % interval bounds of column ``name`` (CSV and JSON only)."""
    return tuple(  # type: ignore[return-value]
        Column(
            f"{name}_ci_{end}",
            "float64",
            None,
            number(".4f"),
            group=group,
            description=f"{end.capitalize()} bound of the 95 % interval of {what}.",
        )
        for end in ("low", "high")
    )


PERCENT = number(".1f", " %")


def scaled(factor: float, fmt: str, unit: str) -> Any:
    """Formatter: ``value x factor`` in ``fmt`` with ``unit`` (bytes as MB, seconds as ms)."""
    show = number(fmt, unit)
    return lambda value: show(value if is_missing(value) else float(value) * factor)


GBPS = number(".1f", " GB/s")


def evidence_column(description: str) -> Column:
    """A verdict's evidence: kept in CSV and JSON, listed under the table, never a column."""
    return Column("evidence", "str", None, text, right=False, description=description)
