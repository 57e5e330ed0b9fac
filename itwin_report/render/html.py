"""The report as one self-contained HTML page: title, summary, tables with their plots, methods.

Offline by construction: plots are inline SVG, the style sheet is inline, there is no script,
and a Content-Security-Policy allows nothing to load. Every value from the store passes through
:func:`text` (masked, then HTML-escaped); matplotlib escapes the text inside the SVG.

Light module: standard library only at import; plotting happens in :func:`page_plots`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING

from itwin_report.util.escape import MAX_LINE, shorten, terminal
from itwin_report.util.masking import mask_text, mask_uri
from itwin_report.util.notes import skipped_runs, table_of
from itwin_report.util.text import plural

if TYPE_CHECKING:
    from itwin_report.data.rundata import RunData
    from itwin_report.plots import PlotSet
    from itwin_report.render.layout import Table as TableBlock
    from itwin_report.render.layout import Title as TitleBlock
    from itwin_report.report import Report

CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
# table -> the figures drawn from it, in page order (the first sits beside its table)
TABLE_FIGURES: dict[str, tuple[str, ...]] = {
    "epoch_time": ("epoch_time", "speedup", "efficiency"),
    "gpu": ("gpu_energy", "gpu_utilization"),
    "computation": ("computation",),
    "throughput": ("throughput", "rates"),
    "pareto": ("pareto",),
    "time_breakdown": ("time_breakdown",),
    "time_to_target": ("convergence", "time_to_target_speedup"),
}
WIDE_TABLE = 8  # tables with more columns than this sit above their plots, not beside them


@dataclass(frozen=True)
class PageContext:
    """What the page states besides the tables; the clock is read by the caller."""

    version: str
    generated_at: datetime
    worker_runs: int = 0
    jobs: int = 0
    skipped: int = 0


@dataclass
class PagePlots:
    """Inline SVG per figure name, and why the missing figures are missing."""

    svg: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def text(value: object) -> str:
    """A value as HTML text: secrets masked, at most a line long (values in the layout are
    already shortened), control and bidi characters shown as escapes (``\\x1b``, ``\\u202e``),
    markup escaped (quotes too: safe in attributes)."""
    return escape(terminal(shorten(mask_text(str(value)), MAX_LINE)), quote=True)


def page_time(environ: Mapping[str, str]) -> datetime:
    """The page's date: ``SOURCE_DATE_EPOCH`` when set (reproducible pages), else now, in UTC."""
    epoch = environ.get("SOURCE_DATE_EPOCH", "").strip()
    if epoch.isdigit():
        return datetime.fromtimestamp(int(epoch), tz=UTC)
    return datetime.now(UTC)


def page_context(data: RunData, version: str, generated_at: datetime) -> PageContext:
    """Counts for the title block: worker runs and jobs read, runs the loader skipped."""
    runs = data.runs
    skipped = skipped_runs(data.warnings)
    return PageContext(
        version=version,
        generated_at=generated_at,
        worker_runs=len(runs),
        jobs=int(runs["job_id"].nunique()) if len(runs) else 0,
        skipped=skipped,
    )


def page_plots(source: Report | PlotSet) -> PagePlots:
    """Every figure as inline SVG: of a report (its figures are cleared once drawn), or of
    figures already built (left as they are, to be saved as files too)."""
    from itwin_report.plots import PlotSet, figure_svg, plot_report

    plots = source if isinstance(source, PlotSet) else plot_report(source)
    out = PagePlots(missing=dict(plots.missing))
    for name, fig in plots.figures.items():
        out.svg[name] = figure_svg(fig, name)
        if plots is not source:
            fig.clear()
    return out


def render_html(report: Report, context: PageContext, plots: PagePlots | None = None) -> str:
    """The whole page as a string: the report's layout, written as HTML."""
    from itwin_report.render.layout import WARNINGS, Footer, Notes, Table, Title, layout

    plots = plots or PagePlots()
    blocks = layout(report).blocks
    warnings = [
        w for b in blocks if isinstance(b, Notes) and b.title == "Warnings" for w in b.items
    ]
    by_table, general = _warnings_by_table(warnings)
    title = f"Scalability report: {shorten(mask_text(report.experiment))}"
    parts = [_head(title), "<body>", "<main>"]
    footer = ""
    for block in blocks:
        if isinstance(block, Title):
            parts.append(_title_block(block, context, title))
        elif isinstance(block, Table):
            parts.append(_table_section(block, plots, by_table.get(block.name, [])))
        elif isinstance(block, Notes) and block.title == WARNINGS:
            if general:
                parts.append(_list_section("warnings", "Other warnings", general, warn=True))
        elif isinstance(block, Notes) and block.warning:
            parts.append(_list_section("gate", block.title, block.items, warn=True))
        elif isinstance(block, Notes):
            parts.append(_list_section(_ident(block.title), block.title, block.items))
        elif isinstance(block, Footer):
            footer = block.text
    parts += [_methods(report, footer), "</main>", "</body>", "</html>", ""]
    return "\n".join(parts)


def _head(title: str) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            '<meta name="referrer" content="no-referrer">',
            f"<title>{text(title)}</title>",
            f"<style>{STYLE}</style>",
            "</head>",
        ]
    )


def _title_block(block: TitleBlock, context: PageContext, title: str) -> str:
    skipped = f"{context.skipped} (see warnings)" if context.skipped else "none"
    rows = [
        ("Experiment", text(block.experiment)),
        ("Tracking store", f"<code>{text(mask_uri(block.tracking_uri))}</code>"),
        (
            "Runs read",
            f"{plural(context.worker_runs, 'worker run')} in {plural(context.jobs, 'job')}",
        ),
        ("Runs skipped", skipped),
        ("Tool", f"itwin-report {text(context.version)}"),
        ("Generated", text(context.generated_at.isoformat(timespec="seconds"))),
    ]
    items = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows)
    return f'<header>\n<h1>{text(title)}</h1>\n<dl class="meta">{items}</dl>\n</header>'


def _list_section(ident: str, heading: str, lines: list[str], warn: bool = False) -> str:
    cls = ' class="warnings"' if warn else ""
    items = "\n".join(f"<li>{text(line)}</li>" for line in lines)
    return (
        f'<section id="{ident}">\n<h2>{text(heading)}</h2>\n<ul{cls}>\n{items}\n</ul>\n</section>'
    )


def _table_section(block: TableBlock, plots: PagePlots, warnings: list[str]) -> str:
    table = _table(block) if block.rows else f'<p class="empty">{text(block.empty)}</p>'
    notes = []
    if block.notes is not None:
        notes.append(_notes(block.notes.title, block.notes.items))
    if warnings:
        notes.append(_notes("Warnings", warnings, warn=True))
    figures = []
    for fig in TABLE_FIGURES.get(block.name, ()):
        if fig in plots.svg:
            figures.append(f'<figure class="plot" id="plot-{fig}">{plots.svg[fig]}</figure>')
        elif fig in plots.missing:
            why = text(plots.missing[fig])
            figures.append(f'<p class="missing">Plot {fig.replace("_", " ")} not drawn: {why}.</p>')
    layout = "stack" if len(block.headers) > WIDE_TABLE else "pair"
    return (
        f'<section class="table-section {layout}" id="{text(block.name)}">\n'
        f"<h2>{text(block.heading)}</h2>\n"
        f'<div class="data">\n{table}\n{"".join(notes)}\n</div>\n'
        f'<div class="plots">\n{chr(10).join(figures)}\n</div>\n'
        "</section>"
    )


def _table(block: TableBlock) -> str:
    def cell(tag: str, value: str, r: bool) -> str:
        return f'<{tag} class="num">{text(value)}</{tag}>' if r else f"<{tag}>{text(value)}</{tag}>"

    head = "".join(cell("th", h, r) for h, r in zip(block.headers, block.right, strict=True))
    body = "\n".join(
        "<tr>" + "".join(cell("td", v, r) for v, r in zip(row, block.right, strict=True)) + "</tr>"
        for row in block.rows
    )
    return (
        f'<table id="table-{text(block.name)}">\n<thead><tr>{head}</tr></thead>\n'
        f"<tbody>\n{body}\n</tbody>\n</table>"
    )


def _notes(heading: str, lines: list[str], warn: bool = False) -> str:
    cls = "warnings" if warn else "notes"
    items = "".join(f"<li>{text(line)}</li>" for line in lines)
    return f'<div class="{cls}"><h3>{text(heading)}</h3><ul>{items}</ul></div>'


def _ident(title: str) -> str:
    """A section id from a block's title: ``Scaling analysis`` -> ``scaling-analysis``."""
    words = "".join(c.lower() if c.isascii() and c.isalnum() else " " for c in title).split()
    return "-".join(words) or "notes"


def _warnings_by_table(warnings: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Warnings grouped under the table each note names; the rest stay general."""
    by_table: dict[str, list[str]] = {}
    general = []
    for warning in warnings:
        table = table_of(warning)
        if table:
            by_table.setdefault(table, []).append(warning)
        else:
            general.append(warning)
    return by_table, general


def _methods(report: Report, footer: str) -> str:
    from itwin_report.render.summary import methods_paragraphs
    from itwin_report.report.specs import TABLES

    parts = [f"<p>{text(p)}</p>" for p in methods_paragraphs(report, footer)]
    parts.append("<h3>Columns</h3>")
    for spec in TABLES:
        items = "".join(
            f"<dt>{text(col.header)}</dt><dd>{text(col.description)}</dd>" for col in spec.shown
        )
        parts.append(f'<h4>{text(spec.heading)}</h4>\n<dl class="columns">{items}</dl>')
    body = "\n".join(parts)
    return f'<section id="methods">\n<h2>Methods</h2>\n{body}\n</section>'


STYLE = """
:root { color-scheme: light; --ink: #1b1f24; --muted: #57606a; --line: #d0d7de; --warn: #7a4d00; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--ink); background: #fff; }
main { max-width: 1240px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 1.6rem; margin: 0 0 .6rem; overflow-wrap: anywhere; }
h2 { font-size: 1.25rem; margin: 0 0 .6rem; padding-bottom: .2rem;
  border-bottom: 1px solid var(--line); }
h3 { font-size: .95rem; margin: .8rem 0 .3rem; }
section { margin: 28px 0; }
dl.meta { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 2px 16px;
  margin: 0; }
dl.meta dt { color: var(--muted); }
dl.meta dd { margin: 0; overflow-wrap: anywhere; }
code { font: .9em ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.table-section.pair { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr);
  gap: 8px 24px; align-items: start; }
.table-section.pair > h2, .table-section.pair .missing { grid-column: 1 / -1; }
.table-section.pair .plots { display: contents; }
.table-section.stack .plots { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr);
  gap: 8px 24px; margin-top: 12px; }
.data { overflow-x: auto; }
table { border-collapse: collapse; width: 100%; font-size: .84rem; }
th, td { padding: 3px 5px; border-bottom: 1px solid var(--line); text-align: left;
  vertical-align: top; overflow-wrap: break-word; }
th { background: #f6f8fa; font-weight: 600; vertical-align: bottom; overflow-wrap: normal; }
th:first-child, td:first-child { min-width: 6.5em; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num { white-space: nowrap; }
tbody tr:nth-child(even) { background: #fbfcfd; }
figure.plot { margin: 0 0 12px; }
figure.plot svg { width: 100%; height: auto; display: block; }
.missing, .empty { color: var(--muted); font-style: italic; }
.warnings { color: var(--warn); }
ul { padding-left: 1.2rem; margin: .3rem 0; }
li { overflow-wrap: anywhere; }
#summary li { margin: .2rem 0; }
#methods p { max-width: 80ch; }
h4 { font-size: .9rem; margin: .7rem 0 .2rem; }
dl.columns { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 1px 14px;
  margin: 0; font-size: .88rem; }
dl.columns dt { font-weight: 600; }
dl.columns dd { margin: 0; color: var(--muted); }
@page { size: A4; margin: 14mm; }
@media print {
  body { font-size: 10pt; }
  table { font-size: 7.5pt; }
  th, td { padding: 2px 3px; }
  main { max-width: none; padding: 0; }
  section { break-inside: avoid; page-break-inside: avoid; margin: 0 0 8mm; }
  .table-section.pair, .table-section.stack { display: block; }
  .table-section .plots, .table-section.pair .plots { display: grid;
    grid-template-columns: 1fr 1fr; gap: 4mm; margin-top: 4mm; }
  figure.plot { break-inside: avoid; }
  h2 { break-after: avoid; }
  #methods { break-inside: auto; }
}
@media screen and (max-width: 900px) {
  .table-section.pair, .table-section.stack .plots, .table-section.pair .plots { display: block; }
}
"""
