"""The efficiency gate and the empty-report check: a CI gate can never pass on missing data.

``--fail-under-efficiency X --gate-on epoch-time|throughput`` fails for every configuration
whose efficiency of that kind is below X, and for every configuration it cannot evaluate
(no efficiency of that kind: no base, no data). This is the one efficiency-threshold rule:
below means ``efficiency < X``, and no efficiency (NaN) is never a pass. The verdict is a
record on the report, so every writer (text, markdown, JSON, page) shows it, and the CLI turns
a failure into exit code 3.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from itwin_report.util.errors import NothingMeasured
from itwin_report.util.text import name_list

if TYPE_CHECKING:
    from itwin_report.report import Report

GATE_ON = {
    "epoch-time": "epoch_time",
    "throughput": "throughput",
    "time-to-target": "time_to_target",
}
KIND_WORDS = {
    "epoch-time": "epoch-time efficiency",
    "throughput": "end-to-end throughput efficiency",
    "time-to-target": "time-to-target efficiency",
}


@dataclass(frozen=True)
class GateVerdict:
    """The gate's outcome: the threshold, which efficiency, what failed and why."""

    threshold: float
    on: str  # "epoch-time" or "throughput"
    below: list[str] = field(default_factory=list)  # "ddp-16 (0.57)"
    unknown: list[str] = field(default_factory=list)  # configurations without an efficiency
    checked: int = 0

    @property
    def passed(self) -> bool:
        return self.checked > 0 and not self.below and not self.unknown

    @property
    def line(self) -> str:
        kind = KIND_WORDS[self.on]
        if self.passed:
            return (
                f"Gate passed: {kind} of all {self.checked} configuration(s) is at least "
                f"{self.threshold:g}."
            )
        parts = []
        if self.below:
            parts.append(f"{kind} below {self.threshold:g}: {name_list(self.below)}")
        if self.unknown:
            parts.append(f"no {kind} to check for {name_list(self.unknown)}")
        if not self.checked:
            parts.append(f"no configuration has an {kind}")
        return "Gate failed: " + "; ".join(parts) + "."

    def to_dict(self) -> dict:
        return {
            "passed": self.passed,
            "threshold": self.threshold,
            "on": self.on,
            "below": list(self.below),
            "unknown": list(self.unknown),
            "text": self.line,
        }


def evaluate(report: Report, threshold: float, on: str = "epoch-time") -> GateVerdict:
    """The gate over every configuration of the report (from any of its tables)."""
    table = getattr(report, GATE_ON[on])
    known = {
        (str(s), int(w)): float(e)
        for s, w, e in zip(table["strategy"], table["workers"], table["efficiency"], strict=True)
        if e == e
    }
    configs = sorted(known | {c: 0.0 for c in configurations_of(report)})
    below = [
        f"{s}-{w} ({known[(s, w)]:.2f})" for s, w in configs if known.get((s, w), 1) < threshold
    ]
    unknown = [f"{s}-{w}" for s, w in configs if (s, w) not in known]
    return GateVerdict(threshold, on, below, unknown, len(known))


def configurations_of(report: Report) -> set[tuple[str, int]]:
    """Every configuration any table of the report holds."""
    out: set[tuple[str, int]] = set()
    frames = [report.epoch_time, report.gpu, report.computation, report.throughput]
    if getattr(report, "target", None) is not None:
        frames.append(report.time_to_target)
    for frame in frames:
        out |= {(str(s), int(w)) for s, w in zip(frame["strategy"], frame["workers"], strict=True)}
    return out


def require_measurements(report: Report) -> None:
    """Raise :class:`NothingMeasured` (exit 5) when the report measured no scaling at all:
    neither an epoch time nor a throughput nor, with a target, a time-to-target row for any
    configuration. The one line says why."""
    if len(report.epoch_time) or len(report.throughput):
        return
    if getattr(report, "target", None) is not None and len(report.time_to_target):
        return
    raise NothingMeasured(f"nothing to report for experiment {report.experiment!r}: {_why(report)}")


def _why(report: Report) -> str:
    """What was missing: worker runs (and why they were skipped), epochs, or both sources."""
    from itwin_report.data.rundata import EPOCH_TIME

    data = report.data
    skipped = [
        w
        for w in (data.warnings if data is not None else [])
        if getattr(w, "kind", "") == "skipped"
    ]
    if data is not None and data.runs.empty:
        if skipped:
            return f"no usable worker run; {skipped[0]}"
        return "it holds no worker runs"
    epochs = data.metrics[data.metrics["key"] == EPOCH_TIME] if data is not None else None
    if epochs is not None and len(epochs) and report.warmup_epochs > 0:
        return (
            f"every {EPOCH_TIME} point is within the {report.warmup_epochs} warm-up epoch(s) "
            "(--warmup-epochs 0 keeps them) and no throughput source covers its runs"
        )
    return f"no {EPOCH_TIME} metric and no throughput source (performance.json, rate metrics)"
