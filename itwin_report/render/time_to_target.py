"""The time-to-target table in every format, only when the report has a target.

The layout gets the table with its notes (the target, how time is counted, and the sentence
comparing time-to-target and epoch-time efficiency); JSON gets ``target`` and
``time_to_target`` rows (the interval bounds paired as ``time_to_target_ci``); CSV gets the
table's rows.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from itwin_report.render.layout import Block, Notes, Table, shown_line, table_block
from itwin_report.report.specs import TIME_TO_TARGET
from itwin_report.report.time_to_target import efficiency_gap_line

if TYPE_CHECKING:
    from itwin_report.report import Report

HOW = (
    "Time to target: from each worker run's start to the timestamp of its first point that "
    "meets the target (not from the first epoch's start); epochs to target: that point's "
    "step. Runs that never reached it count in 'of N' and are left out of the means."
)


def target_tables(report: Report) -> tuple:
    """The table specs the report prints beyond the usual ones (CSV walks them too)."""
    return (TIME_TO_TARGET,) if getattr(report, "target", None) is not None else ()


def target_blocks(report: Report) -> list[Block]:
    """The "Time to target" table and its notes; nothing without a target."""
    if getattr(report, "target", None) is None:
        return []
    block = table_block(report, TIME_TO_TARGET)
    lines = [f"Target: {report.target}.", HOW]
    gap = efficiency_gap_line(report)
    if gap:
        lines.append(gap)
    notes = Notes("Time to target", [shown_line(line) for line in lines])
    return [
        Table(
            block.name,
            f"{block.heading} ({shown_line(str(report.target))})",
            block.headers,
            block.rows,
            block.right,
            block.empty,
            notes,
        )
    ]


def target_fields(report: Report, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """JSON's ``target`` and ``time_to_target`` (``rows``: the table's plain JSON rows)."""
    target = getattr(report, "target", None)
    if target is None:
        return {}
    out = []
    for row in rows:
        low, high = row.pop("time_to_target_ci_low"), row.pop("time_to_target_ci_high")
        row["time_to_target_ci"] = None if low is None or high is None else [low, high]
        out.append(row)
    sentence = efficiency_gap_line(report)
    return {
        "target": target.to_dict(),
        "time_to_target": out,
        "time_to_target_note": sentence,
        "time_to_target_runs": _runs(report),
    }


def _runs(report: Report) -> list[dict[str, Any]]:
    """One object per run: its configuration, job, whether it reached the target, and when."""
    from itwin_report.util.masking import mask_text

    out = []
    for rec in report.time_to_target_runs.astype(object).to_dict("records"):
        row = {str(k): v for k, v in rec.items()}
        out.append(
            {
                "strategy": mask_text(str(row["strategy"])),
                "workers": int(row["workers"]),
                "job_id": mask_text(str(row["job_id"])),
                "reached": bool(row["reached"]),
                "time_to_target_s": _number(row["time_to_target_s"]),
                "epochs_to_target": _number(row["epochs_to_target"]),
            }
        )
    return out


def _number(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None
