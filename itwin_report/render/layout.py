"""The one layout of a report: title, tables (each with its notes), warnings, footer, in order.

Every text writer (plain, rich, markdown, html) walks :func:`layout`'s blocks and writes each
in its own way; none decides what a report contains or in which order. Texts in the blocks are
masked (:mod:`itwin_report.util.masking`) and shortened (a value to
:data:`~itwin_report.util.escape.MAX_SHOWN` characters, a sentence to
:data:`~itwin_report.util.escape.MAX_LINE`) but not escaped: escaping belongs to each writer
(:mod:`itwin_report.util.escape`).

Light module: pandas is only touched through the report's frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from itwin_report.report.columns import TableSpec, is_missing
from itwin_report.report.specs import COST, GPU, TABLES
from itwin_report.util.escape import MAX_LINE, shorten
from itwin_report.util.masking import mask_text, mask_uri
from itwin_report.util.notes import like

if TYPE_CHECKING:
    from itwin_report.report import Report

WARNINGS = "Warnings"  # the title of the report's warnings block
SUMMARY = "Summary"  # the title of the summary block, first after the title
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


def shown(value: str) -> str:
    """A store value as every writer shows it: masked (whole), then shortened."""
    return shorten(mask_text(value))


def shown_line(text: str) -> str:
    """A sentence that may quote store values: masked (whole), then shortened to a line."""
    return shorten(mask_text(text), MAX_LINE)


def title_line(report: Report) -> str:
    """The plain title line, URI masked."""
    return Title(shown(report.experiment), mask_uri(report.tracking_uri)).line


def table_block(report: Report, spec: TableSpec) -> Table:
    """The table ``spec`` of ``report``, every cell formatted and masked; an optional column
    only when some row has a value."""
    records = getattr(report, spec.name).to_dict("records")
    columns = [
        c
        for c in spec.shown
        if not c.optional or any(not is_missing(r.get(c.name)) for r in records)
    ]
    rows = [[shown(col.cell(rec)) for col in columns] for rec in records]
    notes = None
    if spec.name == "throughput" and rows:
        notes = Notes("Input-bottleneck evidence", evidence_lines(report))
    if spec.name == "time_breakdown" and rows:
        notes = Notes("What bounds each configuration", bound_lines(report))
    if spec.name == "communication" and rows:
        notes = Notes("Why communication costs what it does", communication_lines(report))
    if spec.name == "computation" and rows:
        notes = Notes("How computation is measured", computation_lines(report))
    if spec.name in ("epoch_time", "gpu") and rows:
        from itwin_report.render.summary import details

        lines = [shown_line(line) for line in details(report, spec.name)]
        notes = Notes("In short", lines) if lines else None
    return Table(
        name=spec.name,
        heading=spec.heading,
        headers=[str(col.header) for col in columns],
        rows=rows,
        right=[col.right for col in columns],
        empty=spec.empty,
        notes=notes,
    )


def evidence_lines(report: Report) -> list[str]:
    """One line per throughput row: the input-bottleneck verdict and its evidence."""
    lines = []
    for rec in report.throughput.to_dict("records"):
        bound = rec["input_bound"]
        word = VERDICT_WORDS[None if is_missing(bound) else bool(bound)]
        name = shown(str(rec["strategy"]))
        lines.append(shown_line(f"{name}-{int(rec['workers'])}: {word} ({rec['evidence']})"))
    return lines


def communication_lines(report: Report) -> list[str]:
    """One line per configuration with traces: its communication verdict and its evidence."""
    return [
        shown_line(
            f"{shown(str(r['strategy']))}-{int(r['workers'])}: {r['verdict']} ({r['evidence']})"
        )
        for r in report.communication.to_dict("records")
    ]


def bound_lines(report: Report) -> list[str]:
    """One line per configuration: what bounds it and why; then the stragglers named."""
    lines = []
    for rec in report.time_breakdown.to_dict("records"):
        name = shown(str(rec["strategy"]))
        lines.append(
            shown_line(f"{name}-{int(rec['workers'])}: {rec['bound_by']} ({rec['evidence']})")
        )
    lines += [shown_line(f"straggler in {line}") for line in straggler_lines(report)]
    return lines


def straggler_lines(report: Report) -> list[str]:
    """``torch-ddp-16 (job 4b9134de): rank 9: …`` per straggler; the same evidence in several
    jobs of one configuration (repeats) once, with the count: ``torch-ddp-16 (2 jobs): …``."""
    slow = getattr(report, "stragglers", None)
    if slow is None or not len(slow):
        return []
    jobs: dict[tuple[str, int, str], list[str]] = {}
    for rec in slow.to_dict("records"):
        key = (str(rec["strategy"]), int(rec["workers"]), str(rec["text"]))
        jobs.setdefault(key, []).append(str(rec["job_id"]))
    out = []
    for (strategy, workers, text), ids in jobs.items():
        which = f"{len(ids)} jobs" if len(ids) > 1 else f"job {ids[0][:8]}"
        out.append(f"{shown(strategy)}-{workers} ({which}): {text}")
    return out


def computation_lines(report: Report) -> list[str]:
    """What the computation table's fractions can and cannot tell, per source of its rows."""
    averages, traced = [], []
    for rec in report.computation.to_dict("records"):
        name = f"{shown(str(rec['strategy']))}-{int(rec['workers'])}"
        if not is_missing(rec.get("trace_compute_fraction")):
            traced.append(name)
        elif not is_missing(rec.get("computation_fraction")):
            averages.append(name)
    lines = []
    if averages:
        lines.append(
            shown_line(
                f"{', '.join(averages)}: from the profiler averages (self_cuda_time_total "
                "summed), which count communication that overlaps computation twice, so the "
                "computation fraction understates computation; traces (--traces, or logged as "
                "artifacts) count the overlap once"
            )
        )
    if traced:
        lines.append(
            shown_line(
                f"{', '.join(traced)}: Compute (traces) is the share of the device span with a "
                "compute kernel running, overlap counted once (the ranks' mean); it replaces "
                "the averages' fraction, which counts overlapped communication twice"
            )
        )
    return lines


def cost_block(report: Report) -> Table | None:
    """The GPU table's cost columns as a table of their own; an optional column only when a
    row has a value (its option was given). None when the GPU table is empty."""
    records = [{str(k): v for k, v in r.items()} for r in report.gpu.to_dict("records")]
    if not records:
        return None
    keys = [GPU.column(name) for name in ("strategy", "workers", "nodes")]
    columns = [
        c
        for c in GPU.grouped(COST)
        if not c.optional or any(not is_missing(r.get(c.name)) for r in records)
    ]
    costs = getattr(report, "costs", None)
    currency = f" ({shown(costs.currency)})" if costs is not None and costs.currency else ""
    headers = [str(c.header) for c in keys]
    headers += [str(c.header) + (currency if c.name.startswith("cost_") else "") for c in columns]
    factors = cost_lines(report)
    return Table(
        name=COST,
        heading="Cost per configuration",
        headers=headers,
        rows=[[shown(c.cell(r)) for c in (*keys, *columns)] for r in records],
        right=[c.right for c in (*keys, *columns)],
        empty="",
        notes=Notes("Cost factors", factors) if factors else None,
    )


def cost_lines(report: Report) -> list[str]:
    """The factors the cost columns use, one line each (none when no factor was given)."""
    costs = getattr(report, "costs", None)
    if costs is None:
        return []
    lines = []
    if costs.pue is not None:
        lines.append(f"PUE {costs.pue:g}: facility energy = GPU energy x {costs.pue:g}.")
    if costs.carbon_intensity is not None:
        lines.append(f"Carbon intensity {costs.carbon_intensity:g} g CO2e per kWh.")
    if costs.gpu_hour_price is not None:
        unit = f" {shown(costs.currency)}" if costs.currency else ""
        lines.append(f"Price {costs.gpu_hour_price:g}{unit} per GPU-hour.")
    if costs.gpus_per_node is not None:
        lines.append(
            f"{costs.gpus_per_node} GPUs per node where the runs log no hostname on every rank."
        )
    return lines


# the Pareto table's value columns per basis: (frame column, header, the column whose format
# and ``~`` rule it takes)
PARETO_SHOWN = {
    "epoch": (
        ("epoch_time_s", "Epoch time", ("epoch_time", "avg_epoch_time_s")),
        ("energy_wh_per_epoch", "Energy per epoch", ("gpu", "energy_wh_per_epoch")),
        ("gpu_hours_per_epoch", "GPU-h per epoch", ("gpu", "gpu_hours_per_epoch")),
    ),
    "1k samples": (
        ("time_s_per_1k_samples", "Time per 1k samples", ("epoch_time", "avg_epoch_time_s")),
        ("energy_wh_per_1k_samples", "Energy per 1k samples", ("gpu", "energy_wh_per_1k_samples")),
        ("gpu_hours_per_1k_samples", "GPU-h per 1k samples", ("gpu", "gpu_hours_per_epoch")),
    ),
    "target": (
        ("time_to_target_s", "Time to target", ("epoch_time", "avg_epoch_time_s")),
        ("energy_wh_to_target", "Energy to target", ("gpu", "energy_wh_per_epoch")),
        ("gpu_hours_to_target", "GPU-h to target", ("gpu", "gpu_hours_per_epoch")),
    ),
}


def pareto_cell(name: str, table_column: tuple[str, str], row: dict) -> str:
    """A Pareto value as its source column shows it (format, ``~`` for estimated energy)."""
    from itwin_report.report.specs import SPECS

    column = SPECS[table_column[0]].column(table_column[1])
    return column.cell({column.name: row[name], "energy_coverage": row.get("energy_coverage")})


def decision_blocks(report: Report) -> list[Block]:
    """The time–energy Pareto front (fastest first) and the recommendation's sentences."""
    decision = getattr(report, "decision", None)
    if decision is None or (decision.pareto.empty and not decision.sentences):
        return []
    shown_columns = PARETO_SHOWN[decision.basis]
    rows = [
        [shown(str(r["strategy"])), str(int(r["workers"]))]
        + [pareto_cell(name, source, r) for name, _, source in shown_columns]
        for r in decision.pareto.to_dict("records")
    ]
    blocks: list[Block] = []
    if rows:
        per = {"epoch": "", "target": f", to {decision.target}"}.get(
            decision.basis, ", per 1k samples: samples per epoch vary"
        )
        blocks.append(
            Table(
                name="pareto",
                heading=f"Time–energy Pareto front (fastest first{per})",
                headers=["Strategy", "Workers", *(header for _, header, _ in shown_columns)],
                rows=rows,
                right=[False, True, True, True, True],
                empty="",
            )
        )
    lines = [shown_line(line) for line in decision.sentences]
    if lines:
        blocks.append(Notes("Recommendation", lines))
    return blocks


def analysis_blocks(report: Report) -> list[Block]:
    """Intervals, scaling models, predictions and their sentences (see docs/analysis.md)."""
    from itwin_report.render.analysis import analysis_tables, sentences

    blocks: list[Block] = [
        Table(name, heading, headers, [[shown(c) for c in row] for row in rows], right, empty)
        for name, heading, headers, rows, right, empty in analysis_tables(report)
    ]
    lines = [shown_line(line) for line in sentences(report)]
    if lines:
        blocks.append(Notes("Scaling analysis", lines))
    return blocks


def summary_block(report: Report) -> Notes:
    """The summary's top lines (:mod:`itwin_report.render.summary`): at most five decisions,
    each naming the table its number comes from."""
    from itwin_report.render.summary import summary_lines

    return Notes(SUMMARY, [shown_line(line.text) for line in summary_lines(report)])


def layout(report: Report) -> Layout:
    """The blocks of ``report`` in the order every writer prints them."""
    blocks: list[Block] = [Title(shown(report.experiment), mask_uri(report.tracking_uri))]
    blocks.append(summary_block(report))
    for spec in TABLES:
        if spec.name == "communication" and report.communication.empty:
            continue  # printed only with traces
        blocks.append(table_block(report, spec))
        cost = cost_block(report) if spec is GPU else None
        if cost is not None:
            blocks.append(cost)
    from itwin_report.render.time_to_target import target_blocks

    blocks += target_blocks(report)
    blocks += analysis_blocks(report)
    blocks += decision_blocks(report)
    if report.warnings:
        items = [like(shown_line(w), w) for w in report.warnings]
        blocks.append(Notes(WARNINGS, items, warning=True))
    gate = getattr(report, "gate", None)
    if gate is not None:
        blocks.append(Notes("Efficiency gate", [mask_text(gate.line)], warning=not gate.passed))
    blocks.append(Footer(warmup_line(report)))
    return Layout(blocks)
