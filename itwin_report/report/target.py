"""The quality target of a time-to-target report: ``METRIC>=VALUE`` or ``METRIC<=VALUE``.

One parser for the command line and the API (:func:`parse_target`). Light module: standard
library only, so ``--help`` stays fast.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from itwin_report.util.errors import EXIT_USAGE, ReportError

OPERATORS = (">=", "<=")
# any comparison a user may write; only OPERATORS are accepted, the others are named in errors
_SPLIT = re.compile(r"^(?P<metric>.*?)\s*(?P<op>>=|<=|=>|=<|==|!=|>|<|=)\s*(?P<value>.*)$")
# MLflow's metric names: letters, digits, ``_ - . /`` and spaces, never a ``..`` path part
_NAME = re.compile(r"^[\w\-./ ]+$")


class BadTarget(ReportError):
    """A target that cannot be read: bad usage."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class Target:
    """A metric key, ``>=`` (higher is better) or ``<=`` (lower is better), and the bound."""

    metric: str
    op: str
    value: float

    @property
    def higher_is_better(self) -> bool:
        return self.op == ">="

    def met(self, value: float) -> bool:
        """Whether ``value`` meets the target (NaN never does)."""
        return value >= self.value if self.higher_is_better else value <= self.value

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.value:g}"

    def to_dict(self) -> dict[str, object]:
        return {"metric": self.metric, "op": self.op, "value": self.value, "text": str(self)}


def parse_target(text: str | Target) -> Target:
    """``text`` read as ``METRIC>=VALUE`` or ``METRIC<=VALUE`` (spaces around the operator
    allowed); :class:`BadTarget` (exit code 2) for a target without a bound, an unknown
    operator, a value that is not a finite number, or a metric name MLflow would refuse."""
    if isinstance(text, Target):
        return text
    shown = str(text).strip()
    found = _SPLIT.match(shown)
    if found is None or not found["op"]:
        raise BadTarget(
            f"target {shown!r} has no bound: write METRIC>=VALUE or METRIC<=VALUE "
            "(e.g. val_accuracy>=0.76)"
        )
    metric, op, value = found["metric"].strip(), found["op"], found["value"].strip()
    if op not in OPERATORS:
        raise BadTarget(f"target {shown!r}: unknown operator {op!r}; use >= or <=")
    if not metric:
        raise BadTarget(f"target {shown!r} names no metric: write METRIC>=VALUE")
    if not _NAME.match(metric) or ".." in metric.split("/") or metric.startswith("/"):
        raise BadTarget(f"target {shown!r}: {metric!r} is not an MLflow metric name")
    if not value:
        raise BadTarget(f"target {shown!r} has no bound: write {metric}{op}VALUE")
    try:
        bound = float(value)
    except ValueError:
        raise BadTarget(f"target {shown!r}: the bound {value!r} is not a number") from None
    if not math.isfinite(bound):
        raise BadTarget(f"target {shown!r}: the bound must be a finite number, got {value!r}")
    return Target(metric, op, bound)
