"""A report as HTML tables for Jupyter (``Report._repr_html_``), escaped as the page escapes.

Walks the same :func:`~itwin_report.render.layout.layout` as every writer: title, tables with
their notes, the analysis, warnings, the gate and the footer; no plots (``report.figures()``
gives them as matplotlib figures).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from itwin_report.render.html import text
from itwin_report.render.layout import Footer, Notes, Table, Title, layout

if TYPE_CHECKING:
    from itwin_report.report import Report


def _notes(block: Notes) -> str:
    items = "".join(f"<li>{text(item)}</li>" for item in block.items)
    return f"<h4>{text(block.title)}</h4><ul>{items}</ul>"


def _table(block: Table) -> str:
    out = [f"<h4>{text(block.heading)}</h4>"]
    if not block.rows:
        out.append(f"<p>{text(block.empty)}</p>")
    else:
        align = ["right" if r else "left" for r in block.right]
        head = "".join(
            f'<th style="text-align:{a}">{text(h)}</th>'
            for h, a in zip(block.headers, align, strict=True)
        )
        body = "".join(
            "<tr>"
            + "".join(
                f'<td style="text-align:{a}">{text(c)}</td>'
                for c, a in zip(row, align, strict=True)
            )
            + "</tr>"
            for row in block.rows
        )
        out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    if block.notes is not None:
        out.append(_notes(block.notes))
    return "".join(out)


def tables_html(report: Report) -> str:
    """The report's tables and sentences as one ``<div>`` of HTML."""
    parts = ['<div class="itwin-report">']
    for block in layout(report).blocks:
        if isinstance(block, Title):
            parts.append(f"<h3>{text(block.line)}</h3>")
        elif isinstance(block, Table):
            parts.append(_table(block))
        elif isinstance(block, Notes):
            parts.append(_notes(block))
        elif isinstance(block, Footer):
            parts.append(f"<p><em>{text(block.text)}</em></p>")
    parts.append("</div>")
    return "".join(parts)
