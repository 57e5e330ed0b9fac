"""``analyze-traces`` output: one table of ranks, the stragglers and the warnings, as plain text,
markdown or JSON (the layout's writers do the escaping; JSON keeps values raw)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from itwin_report.render.layout import Layout, Notes, Table
from itwin_report.util.escape import MAX_LINE, shorten
from itwin_report.util.masking import mask_text

if TYPE_CHECKING:
    from itwin_report.traces.analyze import TraceSet

SCHEMA = "itwin-report-traces/1"
FORMATS = ("table", "json", "markdown")
# (JSON name, header, format); seconds as s, percentages of the span (overlap: of communication)
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("rank", "Rank", "int"),
    ("device", "Device", "text"),
    ("steps", "Steps", "int"),
    ("span_s", "Span", "s"),
    ("compute_s", "Compute", "s"),
    ("communication_s", "Comm", "s"),
    ("exposed_communication_s", "Exposed comm", "s"),
    ("memory_s", "Memory", "s"),
    ("idle_s", "Idle", "s"),
    ("compute_pct", "Compute %", "pct"),
    ("non_compute_pct", "Non-compute %", "pct"),
    ("idle_pct", "Idle %", "pct"),
    ("overlap_pct", "Overlap %", "pct"),
    ("file", "File", "text"),
)

# the collectives table: per rank, collective and group size (traces/collectives.py)
COLLECTIVE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("rank", "Rank", "int"),
    ("collective", "Collective", "text"),
    ("group_size", "Group", "int"),
    ("count", "Kernels", "int"),
    ("bytes", "Bytes", "int"),
    ("time_s", "Kernel time", "s"),
    ("algbw_gbps", "algbw GB/s", "gbps"),
    ("busbw_gbps", "busbw GB/s", "gbps"),
)

# per rank, collective, group size and size class (traces/collectives.py's size_classes)
SIZE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("rank", "Rank", "int"),
    ("collective", "Collective", "text"),
    ("group_size", "Group", "int"),
    ("size_class", "Size", "text"),
    ("count", "Kernels", "int"),
    ("bytes", "Bytes", "int"),
    ("time_s", "Kernel time", "s"),
    ("busbw_p25_gbps", "busbw p25", "gbps"),
    ("busbw_median_gbps", "busbw median", "gbps"),
    ("busbw_p75_gbps", "busbw p75", "gbps"),
)
# per rank: kernel time = alpha + bus bytes / beta (traces/collectives.py's link_fit)
FIT_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("rank", "Rank", "int"),
    ("kernels", "Kernels", "int"),
    ("alpha_s", "alpha", "us"),
    ("alpha_ci", "alpha 95% CI", "us"),
    ("beta_gbps", "beta GB/s", "gbps"),
    ("beta_ci", "beta 95% CI", "gbps"),
)


def _cell(value: Any, kind: str) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_cell(v, kind) for v in value) + "]"
    if value is None:
        return "n/a"
    if kind == "int":
        return str(int(value))
    if kind == "s":
        return f"{value:.4f} s"
    if kind == "us":
        return f"{value * 1e6:.1f} us"
    if kind == "pct" or kind == "gbps":
        return f"{value:.2f}"
    return str(value)


def layout(traces: TraceSet) -> Layout:
    """The ranks table (files shown by name), then stragglers and warnings."""
    rows = []
    for rank in traces.ranks:
        row = rank.row()
        row["file"] = Path(str(row["file"])).name
        rows.append([shorten(mask_text(_cell(row[n], k))) for n, _, k in COLUMNS])
    straggling = [shorten(mask_text(str(s["text"])), MAX_LINE) for s in traces.stragglers]
    blocks: list[Any] = [
        Table(
            "traces",
            "Where the device time goes, per rank",
            [h for _, h, _ in COLUMNS],
            rows,
            [k != "text" for _, _, k in COLUMNS],
            "No trace analysed.",
            Notes(
                "Stragglers", straggling or ["none: no rank lags the others beyond their spread"]
            ),
        ),
        collectives_table(traces),
        _table(
            traces.collective_sizes(),
            SIZE_COLUMNS,
            "collective_sizes",
            "Collectives by message size, per rank (large >= 1 MiB, small < 64 KiB; busbw "
            "quartiles over the kernels)",
            "No collective kernel in the traces.",
        ),
        _table(
            traces.link_fits(),
            FIT_COLUMNS,
            "link_fits",
            "Link fit, per rank (kernel time = alpha + bus bytes / beta, least squares)",
            "No rank has collectives of three or more message sizes to fit.",
        ),
    ]
    if traces.warnings:
        items = [shorten(mask_text(str(w)), MAX_LINE) for w in traces.warnings]
        blocks.append(Notes("Warnings", items, warning=True))
    return Layout(blocks)


def collectives_table(traces: TraceSet) -> Table:
    """Per rank, collective and group size: kernels, bytes, kernel time, algbw and busbw."""
    rows = [
        [shorten(mask_text(_cell(row[n], k))) for n, _, k in COLLECTIVE_COLUMNS]
        for row in traces.collectives()
    ]
    return Table(
        "collectives",
        "Collectives, per rank (bandwidth over kernel time; busbw as nccl-tests counts it)",
        [h for _, h, _ in COLLECTIVE_COLUMNS],
        rows,
        [k != "text" for _, _, k in COLLECTIVE_COLUMNS],
        "No collective kernel in the traces.",
    )


def _table(
    rows: list[dict[str, Any]],
    columns: tuple[tuple[str, str, str], ...],
    key: str,
    title: str,
    empty: str,
) -> Table:
    cells = [[shorten(mask_text(_cell(row[n], k))) for n, _, k in columns] for row in rows]
    return Table(
        key, title, [h for _, h, _ in columns], cells, [k != "text" for _, _, k in columns], empty
    )


def write(traces: TraceSet, fmt: str) -> str:
    """``traces`` in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "json":
        from itwin_report import __version__

        body = {
            "tool": {"name": "itwin-report", "version": __version__},
            "schema_version": SCHEMA,
            **traces.to_dict(),
        }
        return json.dumps(body, indent=2, allow_nan=False) + "\n"
    if fmt == "markdown":
        from itwin_report.render import markdown

        return markdown.write(layout(traces))
    from itwin_report.render import plain

    return plain.write(layout(traces))
