"""Render a :class:`~itwin_report.report.Report` as text: table, markdown, csv or json.

Light module: pandas and rich are imported inside functions, so ``--help`` stays fast.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from itwin_report.report import Report

FORMATS = ("table", "markdown", "csv", "json")
TABLE_NAMES = ("epoch_time", "gpu", "computation", "throughput")
HEADINGS = {
    "epoch_time": "Epoch time",
    "gpu": "GPU energy and utilization",
    "computation": "Computation vs other",
    "throughput": "Throughput",
}
EMPTY = {
    "epoch_time": "No epoch time data found.",
    "gpu": "No GPU data found.",
    "computation": "No profiler data found.",
    "throughput": "No throughput data found.",
}
MISSING = "n/a"


def _num(fmt: str, unit: str = "") -> Callable[[Any], str]:
    def show(value: Any) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return MISSING
        return format(float(value), fmt) + unit

    return show


def _pct_of_fraction(value: Any) -> str:
    return _num(".1f", " %")(None if value is None else float(value) * 100)


def _flag(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return "yes" if bool(value) else "no"


def _text(value: Any) -> str:
    return MISSING if value is None or value != value else str(value)


def _int(value: Any) -> str:
    return str(int(value))


# column, header, formatter, right-aligned
Column = tuple[str, str, Callable[[Any], str], bool]
COLUMNS: dict[str, list[Column]] = {
    "epoch_time": [
        ("strategy", "Strategy", _text, False),
        ("workers", "Workers", _int, True),
        ("runs", "Runs", _int, True),
        ("epochs", "Epochs", _int, True),
        ("avg_epoch_time_s", "Avg epoch time", _num(".2f", " s"), True),
        ("std_epoch_time_s", "Std between runs", _num(".2f", " s"), True),
        ("speedup", "Speedup", _num(".2f", "x"), True),
        ("efficiency", "Efficiency", _pct_of_fraction, True),
    ],
    "gpu": [
        ("strategy", "Strategy", _text, False),
        ("workers", "Workers", _int, True),
        ("runs", "Runs", _int, True),
        ("energy_wh", "Energy per run", _num(".1f", " Wh"), True),
        ("energy_wh_per_epoch", "Energy per epoch", _num(".2f", " Wh"), True),
        ("utilization_pct", "Utilization", _num(".1f", " %"), True),
        ("avg_power_w", "Avg power per GPU", _num(".1f", " W"), True),
    ],
    "computation": [
        ("strategy", "Strategy", _text, False),
        ("workers", "Workers", _int, True),
        ("runs", "Runs", _int, True),
        ("computation_fraction", "Computation", _pct_of_fraction, True),
        ("communication_fraction", "Communication", _pct_of_fraction, True),
    ],
    "throughput": [
        ("strategy", "Strategy", _text, False),
        ("workers", "Workers", _int, True),
        ("runs", "Runs", _int, True),
        ("samples_per_sec", "Samples/s", _num(".1f"), True),
        ("samples_per_sec_per_gpu", "Per GPU", _num(".1f"), True),
        ("speedup", "Speedup", _num(".2f", "x"), True),
        ("efficiency", "Efficiency", _pct_of_fraction, True),
        ("est_samples_per_sec", "Estimate", _num(".1f"), True),
        ("achieved_fraction", "Achieved", _pct_of_fraction, True),
        ("input_bound", "Input-bound", _flag, False),
        ("source", "Source", _text, False),
    ],
}
VERDICT_WORDS = {True: "input-bound", False: "not input-bound", None: "undecided"}


def render(report: Report, fmt: str, styled: bool = False) -> str:
    """The report as text in ``fmt`` (one of :data:`FORMATS`); styling only for "table"."""
    if fmt == "table":
        return _render_rich(report) if styled else _render_plain(report)
    if fmt == "markdown":
        return _render_markdown(report)
    if fmt == "csv":
        return _render_csv(report)
    if fmt == "json":
        return json.dumps(report_to_dict(report), indent=2) + "\n"
    from itwin_report.errors import ReportError

    raise ReportError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")


def warmup_line(report: Report) -> str:
    """The sentence stating the warm-up choice."""
    n = report.warmup_epochs
    if n <= 0:
        return "All epochs included in epoch times."
    return f"First {n} epoch(s) of every run left out of epoch times."


def title_line(report: Report) -> str:
    return f"Scalability report for experiment {report.experiment!r} ({report.tracking_uri})"


def cells(report: Report, name: str) -> tuple[list[str], list[list[str]], list[bool]]:
    """(headers, formatted rows, right-aligned flags) of one table."""
    spec = COLUMNS[name]
    frame: pd.DataFrame = getattr(report, name)
    rows = [[fmt(rec[col]) for col, _, fmt, _ in spec] for rec in frame.to_dict("records")]
    return [h for _, h, _, _ in spec], rows, [r for _, _, _, r in spec]


def evidence_lines(report: Report) -> list[str]:
    """One line per throughput row: the input-bottleneck verdict and its evidence."""
    lines = []
    for rec in report.throughput.to_dict("records"):
        bound = rec["input_bound"]
        word = VERDICT_WORDS[None if bound is None or bound != bound else bool(bound)]
        lines.append(f"{rec['strategy']}-{int(rec['workers'])}: {word} ({rec['evidence']})")
    return lines


def _render_plain(report: Report) -> str:
    out = [title_line(report), ""]
    for name in TABLE_NAMES:
        out += [HEADINGS[name], "=" * len(HEADINGS[name])]
        headers, rows, right = cells(report, name)
        out += _aligned(headers, rows, right) if rows else [EMPTY[name]]
        if name == "throughput" and rows:
            out += ["", "Input-bottleneck evidence:"]
            out += [f"- {line}" for line in evidence_lines(report)]
        out.append("")
    if report.warnings:
        out.append("Warnings:")
        out += [f"- {w}" for w in report.warnings]
        out.append("")
    out.append(warmup_line(report))
    return "\n".join(out) + "\n"


def _aligned(headers: list[str], rows: list[list[str]], right: list[bool]) -> list[str]:
    widths = [max(len(c) for c in col) for col in zip(headers, *rows, strict=True)]

    def line(values: list[str]) -> str:
        parts = [
            v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)
        ]
        return "  ".join(parts).rstrip()

    return [line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def _render_rich(report: Report) -> str:
    import io

    from rich.console import Console
    from rich.table import Table

    width = max(100, shutil.get_terminal_size((160, 24)).columns)
    console = Console(file=io.StringIO(), record=True, force_terminal=True, width=width)
    console.print(title_line(report), style="bold", markup=False, highlight=False)
    for name in TABLE_NAMES:
        headers, rows, right = cells(report, name)
        if not rows:
            console.print(f"\n[bold]{HEADINGS[name]}[/bold]\n{EMPTY[name]}")
            continue
        table = Table(title=HEADINGS[name], title_style="bold", title_justify="left")
        for header, r in zip(headers, right, strict=True):
            table.add_column(header, justify="right" if r else "left")
        for row in rows:
            table.add_row(*row)
        console.print()
        console.print(table)
        if name == "throughput":
            console.print("Input-bottleneck evidence:", style="bold")
            for line in evidence_lines(report):
                console.print(f"- {line}", markup=False, highlight=False)
    if report.warnings:
        console.print("\n[bold yellow]Warnings:[/bold yellow]")
        for w in report.warnings:
            console.print(f"- {w}", style="yellow", markup=False, highlight=False)
    console.print()
    console.print(warmup_line(report), style="dim")
    return console.export_text(styles=True)


def _render_markdown(report: Report) -> str:
    out = [
        f"# Scalability report: {report.experiment}",
        "",
        f"Tracking URI: `{report.tracking_uri}`",
    ]
    for name in TABLE_NAMES:
        out += ["", f"## {HEADINGS[name]}", ""]
        headers, rows, right = cells(report, name)
        if not rows:
            out.append(EMPTY[name])
            continue
        out.append("| " + " | ".join(headers) + " |")
        out.append("|" + "|".join("---:" if r else "---" for r in right) + "|")
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        if name == "throughput":
            out += ["", "Input-bottleneck evidence:", ""]
            out += [f"- {line}" for line in evidence_lines(report)]
    if report.warnings:
        out += ["", "## Warnings", ""]
        out += [f"- {w}" for w in report.warnings]
    out += ["", warmup_line(report)]
    return "\n".join(out) + "\n"


def _render_csv(report: Report) -> str:
    import pandas as pd

    frames = []
    columns: list[str] = ["table"]
    for name in TABLE_NAMES:
        frame: pd.DataFrame = getattr(report, name)
        columns += [c for c in frame.columns if c not in columns]
        frames.append(frame.astype(object).assign(table=name))
    rows = [r for f in frames for r in f.to_dict("records")]
    out = pd.DataFrame(rows, columns=columns)
    for name in ("workers", "runs", "epochs"):
        out[name] = pd.to_numeric(out[name]).astype("Int64")
    return str(out.to_csv(index=False, lineterminator="\n"))


def _plain(value: Any) -> Any:
    """JSON-safe scalar: numpy -> Python, NaN/None -> None."""
    if hasattr(value, "item"):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def report_to_dict(report: Report) -> dict:
    """The report as a JSON-ready object (NaN -> None, workers int)."""
    from itwin_report.analysis_text import json_fields, pair_intervals

    out: dict[str, Any] = {
        "experiment": report.experiment,
        "tracking_uri": report.tracking_uri,
        "warmup_epochs": int(report.warmup_epochs),
    }
    for name in TABLE_NAMES:
        frame: pd.DataFrame = getattr(report, name)
        records = frame.astype(object).to_dict("records")
        out[name] = [{str(k): _plain(v) for k, v in rec.items()} for rec in records]
        for rec in out[name]:
            rec["workers"] = int(rec["workers"])
    out["epoch_time"] = [pair_intervals(rec) for rec in out["epoch_time"]]
    out.update(json_fields(report))
    out["warnings"] = list(report.warnings)
    return out
