"""What a comparison compares: the metrics, where a report holds each, and a side's values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from itwin_report.data.validate import NON_NEGATIVE, POSITIVE, SECONDS, Range

if TYPE_CHECKING:
    from itwin_report.options import Target


class Metric(NamedTuple):
    """One compared quantity: where a report holds it, and its valid range."""

    name: str  # the key in the comparison's JSON
    words: str  # how lines name it
    table: str
    columns: tuple[str, ...]  # the first present is read (newer name first, then older ones)
    unit: str
    higher_is_better: bool
    valid: Range
    option: str = ""  # its name in --metrics
    intervals: tuple[str, ...] = ()  # its 95 % interval's JSON keys, newer first
    counts: str = "runs"  # the row's key for the runs its interval came from


EFFICIENCY = ("epoch_time_efficiency", "efficiency")  # newer column name first, then older
EFFICIENCY_CI = ("epoch_time_efficiency_ci", "efficiency_ci")
METRICS: tuple[Metric, ...] = (
    Metric(
        name="epoch_time",
        words="epoch time",
        table="epoch_time",
        columns=("avg_epoch_time_s",),
        unit="s",
        higher_is_better=False,
        valid=SECONDS,
        option="epoch-time",
    ),
    Metric(
        name="epoch_time_efficiency",
        words="epoch-time efficiency",
        table="epoch_time",
        columns=EFFICIENCY,
        unit="",
        higher_is_better=True,
        valid=POSITIVE,
        option="efficiency",
        intervals=EFFICIENCY_CI,
    ),
    Metric(
        name="throughput",
        words="throughput",
        table="throughput",
        columns=("samples_per_sec",),
        unit="samples/s",
        higher_is_better=True,
        valid=NON_NEGATIVE,
        option="throughput",
        intervals=("samples_per_sec_ci",),
    ),
    Metric(
        name="energy_per_epoch",
        words="energy per epoch",
        table="gpu",
        columns=("energy_wh_per_epoch",),
        unit="Wh",
        higher_is_better=False,
        valid=NON_NEGATIVE,
        option="energy",
        intervals=("energy_wh_per_epoch_ci",),
    ),
    Metric(
        name="time_to_target",
        words="time to target",
        table="time_to_target",
        columns=("avg_time_to_target_s",),
        unit="s",
        higher_is_better=False,
        valid=SECONDS,
        option="time-to-target",
        intervals=("time_to_target_ci",),
        counts="runs_reached",
    ),
)
TIME_TO_TARGET = "time_to_target"
BY_NAME = {m.name: m for m in METRICS}
BY_OPTION = {m.option: m for m in METRICS}
# metric names of comparisons written before the efficiency was named after its source
OLD_NAMES = {"efficiency": "epoch_time_efficiency"}
RUN_TIME = "avg_epoch_time_s"
# a change's verdict: the columns of a compared row and of a metric's overall change alike
VERDICT = ["change", "worse", "noise_test", "p_value", "holm_alpha", "beyond_noise", "regression"]
COLUMNS = [
    *("strategy", "workers", "metric", "baseline", "current"),
    *VERDICT,
    *("baseline_reached", "current_reached"),
]
MAX_LISTED = 5

Config = tuple[str, int]


def label(metric: str) -> str:
    """The metric's name as a table shows it, as the report's header does: ``Efficiency (epoch
    time)``."""
    if OLD_NAMES.get(metric, metric) == "epoch_time_efficiency":
        return "Efficiency (epoch time)"
    words = BY_NAME[metric].words
    return words[0].upper() + words[1:]


def config_name(key: Config) -> str:
    return f"{key[0]}-{key[1]}"


@dataclass
class Side:
    """What a comparison needs of one report."""

    name: str
    values: dict[str, dict[Config, float]]  # metric -> configuration -> value (NaN: none)
    runs: dict[Config, list[float]] = field(default_factory=dict)  # per-run mean epoch times
    # metric -> configuration -> (95 % interval, runs it came from)
    intervals: dict[str, dict[Config, tuple[float, float, int]]] = field(default_factory=dict)
    bases: dict[Config, Config] = field(default_factory=dict)  # what its speedup is against
    configurations: set[Config] = field(default_factory=set)  # rows of the epoch-time table
    warnings: list[str] = field(default_factory=list)
    target: Target | None = None  # the quality target its time to target is for
    target_runs: dict[Config, list[float]] = field(default_factory=dict)  # reached runs' times
    reached: dict[Config, tuple[int, int]] = field(default_factory=dict)  # (reached, runs)
