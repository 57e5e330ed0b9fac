"""Render a :class:`~itwin_report.report.Report` as text: table, markdown, csv or json.

The text formats share one layout (:mod:`.layout`) and differ only in how they write its
blocks (:mod:`.plain`, :mod:`.styled`, :mod:`.markdown`); csv and json write the tables'
columns (:mod:`.data`). Store values are escaped for each format (:mod:`.safe`) and every
text is masked (:mod:`itwin_report.util.masking`).

Light package: pandas and rich are imported inside functions, so ``--help`` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from itwin_report.render.data import report_to_dict, write_csv, write_json
from itwin_report.render.layout import evidence_lines, layout, title_line, warmup_line
from itwin_report.report.specs import TABLE_NAMES

if TYPE_CHECKING:
    from itwin_report.report import Report

__all__ = [
    "FORMATS",
    "TABLE_NAMES",
    "evidence_lines",
    "layout",
    "render",
    "report_to_dict",
    "title_line",
    "warmup_line",
]

FORMATS = ("table", "markdown", "csv", "json")
COMPARE_FORMATS = ("table", "markdown", "json", "benchmark-json", "benchmark-json-bigger")


def render(report: Report, fmt: str, styled: bool = False) -> str:
    """The report as text in ``fmt`` (one of :data:`FORMATS`); styling only for "table"."""
    from itwin_report.render import markdown, plain
    from itwin_report.render import styled as rich_writer

    if fmt == "table":
        return (rich_writer if styled else plain).write(layout(report))
    if fmt == "markdown":
        return markdown.write(layout(report))
    if fmt == "csv":
        return write_csv(report)
    if fmt == "json":
        return write_json(report)
    from itwin_report.util.errors import ReportError

    raise ReportError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
