"""The report of the Python API: the model plus its outputs, and its display in Jupyter.

``Report._repr_html_`` gives the report as HTML tables, escaped as the page escapes.

Walks the same :func:`~itwin_report.render.layout.layout` as every writer: title, tables with
their notes, the analysis, warnings, the gate and the footer; no plots (``report.figures()``
gives them as matplotlib figures).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from itwin_report.render.data import report_to_dict
from itwin_report.render.html import text
from itwin_report.render.layout import Footer, Notes, Table, Title, layout
from itwin_report.report.model import Report as ReportModel

if TYPE_CHECKING:
    from matplotlib.figure import Figure


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


def tables_html(report: ReportModel) -> str:
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


@dataclass
class Report(ReportModel):
    """A report with its outputs: JSON, text, the HTML page, figures, and a Jupyter display."""

    @classmethod
    def of(cls, report: ReportModel) -> Report:
        """The same report, with these methods."""
        return cls(**{f.name: getattr(report, f.name) for f in fields(report)})

    def to_dict(self) -> dict:
        """The report as the JSON object ``--format json`` prints (strict JSON values)."""
        return report_to_dict(self)

    def to_json(self) -> str:
        """The report as ``--format json`` prints it."""
        from itwin_report.render import render

        return render(self, "json")

    def to_text(self, fmt: str = "table") -> str:
        """The report as plain text (``table``), ``markdown`` or ``csv``."""
        from itwin_report.render import render

        return render(self, fmt)

    def figures(self) -> dict[str, Figure]:
        """Name -> matplotlib Figure for every plot that has data (nothing is saved)."""
        from itwin_report.plots import make_figures

        return make_figures(self)

    def to_html(self) -> str:
        """The self-contained HTML page (tables, sentences and inline plots)."""
        from itwin_report import __version__
        from itwin_report.data.rundata import RunData
        from itwin_report.render.html import page_context, page_plots, page_time, render_html

        data = self.data if self.data is not None else RunData(self.experiment, self.tracking_uri)
        context = page_context(data, __version__, page_time({}))
        return render_html(self, context, page_plots(self))

    def _repr_html_(self) -> str:
        """Jupyter shows the report as the page's tables, escaped like the page."""
        return tables_html(self)
