"""CSV and JSON: every table's columns (from :mod:`itwin_report.report.specs`), values unformatted.

Text values are masked; CSV protects text cells that a spreadsheet would run as formulas,
JSON keeps the raw text.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from itwin_report import __version__
from itwin_report.render.analysis import json_fields, pair_intervals
from itwin_report.render.summary import summary_records
from itwin_report.report.columns import TableSpec, integer, is_missing
from itwin_report.report.specs import TABLES, TIME_TO_TARGET
from itwin_report.util.escape import csv_text
from itwin_report.util.masking import mask_text, mask_uri
from itwin_report.util.notes import table_of

if TYPE_CHECKING:
    from itwin_report.report import Report

# 2: base_strategy/base_workers, energy_coverage, gate, prediction notes; 3: summary records,
# the recommendation's basis and every configuration within noise (lists); 4: ``nodes`` in every
# per-configuration row, the node step, the communication table
SCHEMA_VERSION = 4
INTEGER_COLUMNS = sorted(
    {
        c.name
        for spec in (*TABLES, TIME_TO_TARGET)
        for c in spec.columns
        if c.dtype == "int64" or c.fmt is integer
    }
)


def _plain(value: Any) -> Any:
    """JSON-safe scalar: numpy -> Python, NaN/None -> None, text masked."""
    if hasattr(value, "item"):
        value = value.item()
    if is_missing(value):
        return None
    if isinstance(value, str):
        return mask_text(value)
    return value


def _masked(value: Any) -> Any:
    """``value`` with every string masked, nested lists and dicts included."""
    if isinstance(value, dict):
        return {k: _masked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v) for v in value]
    return mask_text(value) if isinstance(value, str) else value


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report as a JSON-ready object (NaN -> None, integer columns int, text masked)."""
    out: dict[str, Any] = {
        "tool": {"name": "itwin-report", "version": __version__},
        "schema_version": SCHEMA_VERSION,
        "experiment": mask_text(report.experiment),
        "tracking_uri": mask_uri(report.tracking_uri),
        "warmup_epochs": int(report.warmup_epochs),
    }
    for spec in TABLES:
        out[spec.name] = _rows(report, spec)
    out["baseline"] = _masked(report.baseline)
    out["epoch_time"] = [pair_intervals(row) for row in out["epoch_time"]]
    out["gpu"] = [_paired(row, GPU_INTERVALS) for row in out["gpu"]]
    out["throughput"] = [_paired(row, ("samples_per_sec",)) for row in out["throughput"]]
    out.update(json_fields(report))
    from itwin_report.render.time_to_target import target_fields, target_tables

    rows = _rows(report, TIME_TO_TARGET) if target_tables(report) else []
    out.update(target_fields(report, rows))
    out["stragglers"] = _frame_records(getattr(report, "stragglers", None))
    out["trace_ranks"] = _frame_records(getattr(report, "trace_ranks", None))
    out["warnings"] = [mask_text(w) for w in report.warnings]
    out["warning_records"] = [
        {"table": table_of(w), "kind": getattr(w, "kind", ""), "text": mask_text(w)}
        for w in report.warnings
    ]
    gate = getattr(report, "gate", None)
    out["gate"] = None if gate is None else gate.to_dict()
    out.update(decision_fields(report))
    out["summary"] = [{k: mask_text(v) for k, v in rec.items()} for rec in summary_records(report)]
    return out


def _rows(report: Report, spec: TableSpec) -> list[dict[str, Any]]:
    """Table ``spec`` of ``report`` as JSON rows (its columns' JSON names, plain values)."""
    rows = []
    for rec in getattr(report, spec.name).astype(object).to_dict("records"):
        row = {col.key: _plain(rec.get(col.name)) for col in spec.columns}
        for col in spec.columns:
            if (col.dtype == "int64" or col.fmt is integer) and row[col.key] is not None:
                row[col.key] = int(row[col.key])
        rows.append(row)
    return rows


def _frame_records(frame: Any) -> list[dict[str, Any]]:
    """A frame's rows, JSON-safe (lists of names and ranks kept, text masked); [] for None."""
    if frame is None or frame.empty:
        return []
    out = []
    for rec in frame.astype(object).to_dict("records"):
        out.append(
            {
                str(k): [_plain(x) for x in v] if isinstance(v, list) else _plain(v)
                for k, v in rec.items()
            }
        )
    return out


def _paired(row: dict[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """``row`` with each ``<name>_ci_low``/``_ci_high`` pair as ``<name>_ci: [low, high]`` (or
    None), at the end of the row."""
    out = {k: v for k, v in row.items() if not k.endswith(("_ci_low", "_ci_high"))}
    for name in names:
        low, high = row.get(f"{name}_ci_low"), row.get(f"{name}_ci_high")
        out[f"{name}_ci"] = None if low is None or high is None else [low, high]
    return out


GPU_INTERVALS = ("energy_wh_per_epoch", "gpu_hours_per_epoch")


def decision_fields(report: Report) -> dict[str, Any]:
    """``cost_factors``, ``pareto``, ``pareto_gpu_hours`` and ``recommendation`` (JSON-safe)."""
    costs, decision = getattr(report, "costs", None), getattr(report, "decision", None)
    if costs is None and decision is None:  # a report built by hand, without them
        return {}
    out: dict[str, Any] = {"cost_factors": None if costs is None else _masked(costs.to_dict())}
    if decision is None:
        return out
    for key, frame in (
        ("pareto", decision.pareto),
        ("pareto_gpu_hours", decision.pareto_gpu_hours),
    ):
        out[key] = [
            {k: _plain(v) for k, v in rec.items()}
            for rec in frame.astype(object).to_dict("records")
        ]
    recommendation = _masked(decision.recommendation())
    recommendation["max_energy_per_speedup"] = _plain(recommendation["max_energy_per_speedup"])
    out["recommendation"] = recommendation
    return out


def write_json(report: Report) -> str:
    return json.dumps(report_to_dict(report), indent=2) + "\n"


def write_csv(report: Report) -> str:
    """Every section in one CSV: a ``table`` column naming the section of each row, then the
    union of the sections' columns. The tables first, then (where the report has them) the
    analysis (``scaling_models``, ``karp_flatt``, ``predictions``), the fronts (``pareto``,
    ``pareto_gpu_hours``), the ``recommendation`` (one row per pick, per configuration within
    noise and per sentence), the ``gate`` verdict and the ``summary`` (one row per line)."""
    import pandas as pd

    columns: list[str] = ["table"]
    rows: list[dict[str, Any]] = []
    from itwin_report.render.time_to_target import target_tables

    for spec in (*TABLES, *target_tables(report)):
        columns += [c for c in spec.names if c not in columns]
        text_columns = [c.name for c in spec.columns if c.is_text]
        for rec in getattr(report, spec.name).astype(object).to_dict("records"):
            for name in text_columns:
                if isinstance(rec.get(name), str):
                    rec[name] = csv_text(mask_text(rec[name]))
            rows.append({"table": spec.name, **rec})
    for name, records in csv_sections(report):
        for rec in records:
            columns += [c for c in rec if c not in columns]
            cells = {k: csv_text(mask_text(v)) if isinstance(v, str) else v for k, v in rec.items()}
            rows.append({"table": name, **cells})
    out = pd.DataFrame(rows, columns=columns)
    for name in (c for c in INTEGER_COLUMNS if c in out):
        out[name] = pd.to_numeric(out[name]).astype("Int64")
    return str(out.to_csv(index=False, lineterminator="\n"))


def csv_sections(report: Report) -> list[tuple[str, list[dict[str, Any]]]]:
    """The sections beyond the tables, each as (name, JSON-safe flat records)."""
    doc = {**json_fields(report), **decision_fields(report)}
    out = [(k, doc.get(k) or []) for k in ("scaling_models", "karp_flatt", "predictions")]
    out += [(k, doc.get(k) or []) for k in ("pareto", "pareto_gpu_hours")]
    rec = doc.get("recommendation")
    if rec:
        picks = []
        for role in ("fastest", "most_frugal", "knee"):
            if rec[role] is not None:
                picks.append({"role": role, "basis": rec["basis"], **rec[role]})
            for other in rec.get(f"{role}_within_noise_of") or []:
                picks.append({"role": f"{role}_within_noise_of", "basis": rec["basis"], **other})
        if rec["deadline"] is not None and rec["deadline"]["choice"] is not None:
            picks.append({"role": "deadline", "basis": rec["basis"], **rec["deadline"]["choice"]})
        picks += [{"role": "sentence", "text": t} for t in rec["sentences"]]
        out.append(("recommendation", picks))
    gate = getattr(report, "gate", None)
    if gate is not None:
        verdict = gate.to_dict()
        verdict = {k: "; ".join(v) if isinstance(v, list) else v for k, v in verdict.items()}
        out.append(("gate", [verdict]))
    summary = [
        {"kind": r["kind"], "section": r["table"], "text": r["text"]}
        for r in summary_records(report)
    ]
    out.append(("summary", summary))
    return [(name, records) for name, records in out if records]
