"""The one layout of a report: title, tables (each with its notes), warnings, footer, in order.

Every text writer (plain, rich, markdown, html) walks :func:`layout`'s blocks and writes each
in its own way; none decides what a report contains or in which order. Texts in the blocks are
masked (:mod:`itwin_report.masking`) but not escaped: escaping belongs to each writer
(:mod:`itwin_report.render.safe`).

Light module: pandas is only touched through the report's frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from itwin_report.masking import mask_text, mask_uri
from itwin_report.tables import TABLES, TableSpec, is_missing

if TYPE_CHECKING:
    from itwin_report.report import Report

VERDICT_WORDS = {True: "input-bound", False: "not input-bound", None: "undecided"}


@dataclass(frozen=True)
class Title:
    experiment: str
    tracking_uri: str

    @property
    def line(self) -> str:
        return f"Scalability report for experiment {self.experiment!r} ({self.tracking_uri})"


@dataclass(frozen=True)
class Notes:
    """A titled list: the evidence under a table, or the report's warnings."""

    title: str
    items: list[str]
    warning: bool = False


@dataclass(frozen=True)
class Table:
    """One table: heading, headers, formatted rows, right-alignment flags, its empty message."""

    name: str
    heading: str
    headers: list[str]
    rows: list[list[str]]
    right: list[bool]
    empty: str
    notes: Notes | None = None


@dataclass(frozen=True)
class Footer:
    text: str


Block = Title | Table | Notes | Footer


@dataclass(frozen=True)
class Layout:
    blocks: list[Block] = field(default_factory=list)


def warmup_line(report: Report) -> str:
    """The sentence stating the warm-up choice."""
    n = report.warmup_epochs
    if n <= 0:
        return "All epochs included in epoch times."
    return f"First {n} epoch(s) of every run left out of epoch times."


def title_line(report: Report) -> str:
    """The plain title line, URI masked."""
    return Title(mask_text(report.experiment), mask_uri(report.tracking_uri)).line


def table_block(report: Report, spec: TableSpec) -> Table:
    """The table ``spec`` of ``report``, every cell formatted and masked."""
    shown = spec.shown
    records = getattr(report, spec.name).to_dict("records")
    rows = [[mask_text(col.fmt(rec[col.name])) for col in shown] for rec in records]
    notes = None
    if spec.name == "throughput" and rows:
        notes = Notes("Input-bottleneck evidence", evidence_lines(report))
    return Table(
        name=spec.name,
        heading=spec.heading,
        headers=[str(col.header) for col in shown],
        rows=rows,
        right=[col.right for col in shown],
        empty=spec.empty,
        notes=notes,
    )


def evidence_lines(report: Report) -> list[str]:
    """One line per throughput row: the input-bottleneck verdict and its evidence."""
    lines = []
    for rec in report.throughput.to_dict("records"):
        bound = rec["input_bound"]
        word = VERDICT_WORDS[None if is_missing(bound) else bool(bound)]
        line = f"{rec['strategy']}-{int(rec['workers'])}: {word} ({rec['evidence']})"
        lines.append(mask_text(line))
    return lines


def layout(report: Report) -> Layout:
    """The blocks of ``report`` in the order every writer prints them."""
    blocks: list[Block] = [Title(mask_text(report.experiment), mask_uri(report.tracking_uri))]
    blocks += [table_block(report, spec) for spec in TABLES]
    if report.warnings:
        blocks.append(Notes("Warnings", [mask_text(w) for w in report.warnings], warning=True))
    blocks.append(Footer(warmup_line(report)))
    return Layout(blocks)
