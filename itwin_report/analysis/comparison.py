"""Compare two reports configuration by configuration and find regressions (pure functions).

A side is a saved JSON report (``--format json``) or a freshly built :class:`Report`; both are
reduced to the same :class:`Side`. Every number read from a side must lie in the range the
loader accepts for it (:mod:`itwin_report.data.validate`); a value outside is left out with a
warning.

What is compared, per configuration (strategy, workers), among the metrics picked (all by
default): the mean epoch time, the parallel efficiency computed from epoch time (the epoch-time
table's, not the throughput table's), the throughput in samples/s and the GPU energy per epoch.
A change is a *regression* when it is for the worse by more than ``max_regression`` (relative)
and beyond noise: every row whose sides have two runs or more gets a one-sided Welch t-test
(:mod:`itwin_report.analysis.noise_tests`), each metric a test of its mean change over the
configurations too, and Holm–Bonferroni over all of them holds the comparison's false-alarm
rate at 5 %. A row without a noise test (one run on a side) is decided by the threshold alone,
and says so.

A configuration of the baseline that the current report lacks fails the comparison too, unless
missing configurations are allowed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from itwin_report.data.validate import MAX_WORKERS, NON_NEGATIVE, POSITIVE, SECONDS, Range
from itwin_report.util.errors import DataError, NothingMeasured, RegressionFound, ReportError

if TYPE_CHECKING:
    import pandas as pd

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
COLUMNS = [
    "strategy",
    "workers",
    "metric",
    "baseline",
    "current",
    "change",
    "worse",
    "noise_test",
    "p_value",
    "holm_alpha",
    "beyond_noise",
    "regression",
    "baseline_reached",
    "current_reached",
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


# ---------------------------------------------------------------- reading a side


def _in_range(valid: Range, value: float) -> bool:
    import pandas as pd

    return bool(valid.ok(pd.Series([value], dtype="float64"))[0])


def _shown(value: object) -> str:
    """A value read from a file, short: ``-5``, ``1e-310``, ``inf``, ``'abc'``."""
    if isinstance(value, float):
        return f"{value:g}"
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _number(value: object, where: str) -> float:
    """A JSON number as a float (too large: inf); DataError for anything else."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise DataError(f"{where} is not a number: {_shown(value)}")
    try:
        return float(value)
    except OverflowError:  # an integer of hundreds of digits
        return math.inf if value > 0 else -math.inf


class _Reader:
    """Reads one side's rows, collecting what is out of range for one warning."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.problems: list[str] = []

    def rows(self, report: dict[str, Any], table: str) -> list[tuple[str, dict[str, Any]]]:
        rows = report.get(table)
        if rows is None:
            return []
        if not isinstance(rows, list):
            raise DataError(f"{self.name}: malformed JSON report ({table} is not a list)")
        out = []
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise DataError(
                    f"{self.name}: malformed JSON report ({table}[{i}] is not an object)"
                )
            out.append((f"{table}[{i}]", row))
        return out

    def config(self, where: str, row: dict[str, Any]) -> Config | None:
        """The row's (strategy, workers); None, with a problem noted, when out of range."""
        strategy, workers = row.get("strategy"), row.get("workers")
        if not isinstance(strategy, str):
            raise DataError(f"{self.name}: malformed JSON report ({where}: strategy is not text)")
        number = self.number(f"{where} workers", workers)
        if not (math.isfinite(number) and number.is_integer()):
            raise DataError(
                f"{self.name}: malformed JSON report ({where}: workers {_shown(workers)} "
                "is not an integer)"
            )
        if not 1 <= number <= MAX_WORKERS:
            self.problems.append(f"{where} workers {_shown(workers)} (not 1..{MAX_WORKERS:,})")
            return None
        if not strategy.strip():
            self.problems.append(f"{where} strategy blank")
            return None
        return strategy.strip(), int(number)

    def number(self, where: str, value: object) -> float:
        try:
            return _number(value, where)
        except DataError as exc:
            raise DataError(f"{self.name}: malformed JSON report ({exc})") from None

    def value(
        self, where: str, row: dict[str, Any], columns: tuple[str, ...], valid: Range
    ) -> float:
        """The first present column's value; NaN when absent, null or out of ``valid``."""
        column = next((c for c in columns if row.get(c) is not None), None)
        if column is None:
            return math.nan
        raw = row[column]
        number = self.number(f"{where} {column}", raw)
        if not _in_range(valid, number):
            self.problems.append(f"{where} {column} {_shown(raw)} (not {valid})")
            return math.nan
        return number

    def interval(
        self,
        where: str,
        row: dict[str, Any],
        columns: tuple[str, ...],
        valid: Range,
        counts: str = "runs",
    ) -> tuple[float, float, int] | None:
        """(low, high, the runs it came from: the row's ``counts``) of the first present
        interval column; None when absent, null or not an interval of values in ``valid``."""
        column = next((c for c in columns if row.get(c) is not None), None)
        if column is None:
            return None
        pair = row[column]
        if not isinstance(pair, list) or len(pair) != 2:
            raise DataError(f"{self.name}: malformed JSON report ({where} {column} is not a pair)")
        if any(v is None for v in pair):
            return None
        low, high = (self.number(f"{where} {column}", v) for v in pair)
        if not (math.isfinite(low) and _in_range(valid, high) and low <= high):
            self.problems.append(f"{where} {column} [{_shown(pair[0])}, {_shown(pair[1])}]")
            return None
        runs = row.get(counts)
        count = self.number(f"{where} {counts}", runs) if runs is not None else math.nan
        if not (math.isfinite(count) and count.is_integer() and count >= 2):
            return None  # an interval without the runs it came from cannot be weighed
        return low, high, int(count)

    def base(self, where: str, row: dict[str, Any]) -> Config | None:
        """The row's base configuration (``base_strategy``, ``base_workers``), when it has one."""
        strategy, workers = row.get("base_strategy"), row.get("base_workers")
        if not isinstance(strategy, str) or isinstance(workers, bool):
            return None
        if isinstance(workers, float) and not (math.isfinite(workers) and workers.is_integer()):
            return None
        if not isinstance(workers, int | float):
            return None
        return strategy.strip(), int(workers)

    def warning(self) -> list[str]:
        """One line naming every value left out (the first few, then a count)."""
        if not self.problems:
            return []
        shown = "; ".join(self.problems[:MAX_LISTED])
        more = len(self.problems) - MAX_LISTED
        tail = f"; and {more} more" if more > 0 else ""
        return [
            f"{self.name}: left out {len(self.problems)} value(s) outside their valid range: "
            f"{shown}{tail}"
        ]


TABLES = ("epoch_time", "throughput", "gpu", "time_to_target")  # one row per configuration
PER_RUN = ("runs", "time_to_target_runs")  # one row per run
TARGET_RUN_TIME = "time_to_target_s"


def _read_target(
    reader: _Reader,
    report: dict[str, Any],
    side: Side,
    rows: dict[str, list[tuple[str, Config, dict[str, Any]]]],
) -> None:
    """The side's target, each configuration's reached count and its reached runs' times."""
    from itwin_report.options import BadTarget, target_from_dict

    if report.get("target") is not None:
        try:
            side.target = target_from_dict(report["target"])
        except BadTarget as exc:
            raise DataError(f"{reader.name}: malformed JSON report ({exc})") from None
    for where, key, row in rows["time_to_target"]:
        counts = [row.get("runs_reached"), row.get("runs")]
        if all(c is not None for c in counts):
            reached, runs = (
                reader.number(f"{where} {n}", c) for n, c in zip(REACHED, counts, strict=True)
            )
            if 0 <= reached <= runs and reached.is_integer() and runs.is_integer():
                side.reached[key] = (int(reached), int(runs))
            else:
                reader.problems.append(f"{where} runs_reached {reached:g} of {runs:g}")
    for where, key, row in rows["time_to_target_runs"]:
        if row.get("reached") is not True:
            continue
        value = reader.value(where, row, (TARGET_RUN_TIME,), SECONDS)
        if not math.isnan(value):
            side.target_runs.setdefault(key, []).append(value)


REACHED = ("runs_reached", "runs")


def side_from_dict(report: object, name: str) -> Side:
    """A side from a JSON report object; DataError when it is not one.

    Values outside their valid range are left out (with one warning in ``Side.warnings``);
    a row whose configuration is out of range is left out whole.
    """
    if not isinstance(report, dict) or not isinstance(report.get("epoch_time"), list):
        raise DataError(f"{name}: not a JSON report of itwin-report (no epoch_time table)")
    reader = _Reader(name)
    side = Side(name, {m.name: {} for m in METRICS})
    rows: dict[str, list[tuple[str, Config, dict[str, Any]]]] = {}
    for table in (*TABLES, *PER_RUN):
        kept = rows.setdefault(table, [])
        seen: set[Config] = set()
        for where, row in reader.rows(report, table):
            key = reader.config(where, row)
            if key is None:
                continue
            if table not in PER_RUN and key in seen:
                reader.problems.append(f"{where} repeats {config_name(key)}")
                continue
            seen.add(key)
            kept.append((where, key, row))
    for metric in METRICS:
        mine = side.intervals.setdefault(metric.name, {})
        for where, key, row in rows[metric.table]:
            side.values[metric.name][key] = reader.value(where, row, metric.columns, metric.valid)
            interval = reader.interval(where, row, metric.intervals, metric.valid, metric.counts)
            if interval is not None:
                mine[key] = interval
    _read_target(reader, report, side, rows)
    for where, key, row in rows["epoch_time"]:
        side.configurations.add(key)
        base = reader.base(where, row)
        if base is not None:
            side.bases[key] = base
    for where, key, row in rows["runs"]:
        value = reader.value(where, row, (RUN_TIME,), SECONDS)
        if not math.isnan(value):
            side.runs.setdefault(key, []).append(value)
    side.warnings = reader.warning()
    if side.target is not None and not rows["time_to_target"]:
        side.warnings.append(
            f"{name}: no time to target for {side.target}: no run logged {side.target.metric}"
        )
    return side


MAX_SIDE_BYTES = 256 << 20  # a saved JSON report of thousands of configurations is a few MB


def load_side_file(path: Path) -> Side:
    """A side from a saved JSON report file; DataError naming the file when it is not one."""
    from itwin_report.data.performance_json import parse_json
    from itwin_report.util.files import SQLITE_MAGIC, read_regular

    raw = read_regular(path, MAX_SIDE_BYTES, "saved report")
    if raw.startswith(SQLITE_MAGIC):
        raise DataError(
            f"{path} is an SQLite database, not a saved JSON report; to compare an experiment "
            f"of it, name the experiment and pass --tracking-uri sqlite:///{path}"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
            "save reports with --format json"
        ) from None
    try:
        report = parse_json(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except ValueError as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None
    return side_from_dict(report, str(path))


# ---------------------------------------------------------------- comparing

OVERALL_COLUMNS = [
    "metric",
    "configurations",
    "change",
    "worse",
    "noise_test",
    "p_value",
    "holm_alpha",
    "beyond_noise",
    "regression",
]


class Unreached(NamedTuple):
    """A configuration whose runs on one side or both never reached the target."""

    key: Config
    baseline: tuple[int, int]  # (runs that reached it, runs)
    current: tuple[int, int]

    @property
    def regression(self) -> bool:
        """The baseline reached the target and the current report never did."""
        return self.baseline[0] > 0 and self.current[0] == 0

    def words(self) -> str:
        """``torch-ddp-8 (baseline 3 of 3 reached, current 0 of 3)``."""
        return (
            f"{config_name(self.key)} (baseline {reached_words(self.baseline)}, "
            f"current {reached_words(self.current)})"
        )


def reached_words(counts: tuple[int, int] | None) -> str:
    """``3 of 5 reached``; "" when unknown."""
    return "" if counts is None else f"{counts[0]} of {counts[1]} reached"


@dataclass
class Comparison:
    """The rows compared (:data:`COLUMNS`), each metric's mean change over the configurations
    (:data:`OVERALL_COLUMNS`), what could not be compared, and the settings."""

    table: pd.DataFrame
    baseline: Side
    current: Side
    max_regression: float
    allow_missing: bool = False
    warnings: list[str] = field(default_factory=list)
    overall: pd.DataFrame | None = None
    metrics: tuple[str, ...] = tuple(m.name for m in METRICS)  # the metrics compared and gated
    family_size: int = 0  # the tests Holm–Bonferroni weighed together
    # configurations with no time to target on a side: none of its runs reached the target
    unreached: list[Unreached] = field(default_factory=list)

    @property
    def missing(self) -> list[Config]:
        """Configurations of the baseline that the current report lacks."""
        return sorted(self.baseline.configurations - self.current.configurations)

    @property
    def added(self) -> list[Config]:
        """Configurations only the current report has."""
        return sorted(self.current.configurations - self.baseline.configurations)

    @property
    def all_warnings(self) -> list[str]:
        return [*self.baseline.warnings, *self.current.warnings, *self.warnings]


def _worse(change: float, higher_is_better: bool) -> float:
    """The relative change in the bad direction (positive = worse)."""
    return -change if higher_is_better else change


def _log_worse(a: float, b: float, higher_is_better: bool) -> float:
    """log(b / a) in the bad direction; NaN unless both are > 0."""
    if not (a > 0 and b > 0):
        return math.nan
    change = math.log(b) - math.log(a)
    return -change if higher_is_better else change


def check_max_regression(max_regression: float) -> None:
    if not (math.isfinite(max_regression) and max_regression >= 0):
        raise ReportError(f"max_regression must be a finite number >= 0, got {max_regression}")


def pick_metrics(names: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The metrics to compare and gate, from ``--metrics`` names (``epoch-time,efficiency``;
    a list of them, or of JSON keys, in the API); None: all. BadOption (exit 2) for an unknown
    name."""
    from itwin_report.util.errors import BadOption

    if names is None:
        return tuple(m.name for m in METRICS)
    if not isinstance(names, str | list | tuple):
        raise BadOption(f"--metrics: expected names such as 'epoch-time,energy', got {names!r}")
    items = names.split(",") if isinstance(names, str) else list(names)
    picked = set()
    for item in items:
        name = str(item).strip()
        metric = BY_OPTION.get(name) or BY_NAME.get(name)
        if metric is None:
            choices = ", ".join(m.option for m in METRICS)
            raise BadOption(f"unknown metric {name!r} in --metrics; use some of {choices}")
        picked.add(metric.name)
    if not picked:
        raise BadOption("--metrics names no metric")
    return tuple(m.name for m in METRICS if m.name in picked)


def compare_sides(
    baseline: Side,
    current: Side,
    max_regression: float = 0.05,
    allow_missing: bool = False,
    metrics: str | list[str] | tuple[str, ...] | None = None,
    target: Target | str | None = None,
) -> Comparison:
    """Every picked metric of every configuration measured on both sides, with its verdict.

    A pair whose relative change is not a finite number (a baseline of 0, or a ratio too large
    for a float) is left out with a warning. ``target``: the quality target (``--target``)
    both sides' times to target must be for (:func:`target_notes`).
    """
    import pandas as pd

    from itwin_report import options
    from itwin_report.analysis.noise_tests import RowTest, family, row_test

    check_max_regression(max_regression)
    picked = _with_target(pick_metrics(metrics), baseline, current)
    notes = target_notes(baseline, current, options.target(target), picked)
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    tests: dict[str, list[RowTest]] = {}
    for metric in (m for m in METRICS if m.name in picked):
        a_vals, b_vals = baseline.values.get(metric.name, {}), current.values.get(metric.name, {})
        for key in sorted(set(a_vals) & set(b_vals)):
            a, b = a_vals[key], b_vals[key]
            if math.isnan(a) or math.isnan(b):
                continue
            change = b / a - 1.0 if a != 0 else math.inf
            if not math.isfinite(change):
                skipped.append(f"{config_name(key)} {metric.words} ({a:g} -> {b:g})")
                continue
            estimate = _log_worse(a, b, metric.higher_is_better)
            test = row_test(metric.name, key, baseline, current, estimate)
            tests.setdefault(metric.name, []).append(test)
            rows.append(
                {
                    "strategy": key[0],
                    "workers": key[1],
                    "metric": metric.name,
                    "baseline": a,
                    "current": b,
                    "change": change,
                    "worse": _worse(change, metric.higher_is_better) > max_regression,
                    "test": test,
                    "baseline_reached": _counts(baseline, metric, key),
                    "current_reached": _counts(current, metric, key),
                }
            )
    means = family(tests)
    for row in rows:
        row.update(_verdict(row.pop("test"), row["worse"]))
    overall = []
    for m in means:
        higher_is_better = BY_NAME[m.metric].higher_is_better
        change = math.expm1(-m.row.estimate if higher_is_better else m.row.estimate)
        worse = _worse(change, higher_is_better) > max_regression
        overall.append(
            {"metric": m.metric, "configurations": m.configurations, "change": change}
            | {"worse": worse, **_verdict(m.row, worse)}
        )
    result = Comparison(
        pd.DataFrame(rows, columns=COLUMNS),
        baseline,
        current,
        max_regression,
        allow_missing,
        _skipped_warning(skipped) + base_warning(baseline, current, picked) + notes,
        pd.DataFrame(overall, columns=OVERALL_COLUMNS),
        picked,
        sum(r.test is not None for t in tests.values() for r in t) + len(means),
        unreached(baseline, current) if TIME_TO_TARGET in picked else [],
    )
    return result


def _with_target(picked: tuple[str, ...], baseline: Side, current: Side) -> tuple[str, ...]:
    """The picked metrics, less time to target when neither side has a target (unless it is
    the only one picked: then nothing is compared, and the gate says so)."""
    if baseline.target is None and current.target is None and len(picked) > 1:
        return tuple(m for m in picked if m != TIME_TO_TARGET)
    return picked


def target_notes(
    baseline: Side, current: Side, target: Target | None, picked: tuple[str, ...]
) -> list[str]:
    """Whether the two sides' times to target can be compared: DataError when a side's time to
    target is for another target than ``target`` (or than the other side's), or when ``target``
    is given and a side has no time to target; a warning when only one side has one."""
    if TIME_TO_TARGET not in picked:
        return []
    sides = (baseline, current)
    if target is not None:
        for side in sides:
            check_target(side, target)
        return []
    targets = [side.target for side in sides]
    if None not in targets and targets[0] != targets[1]:
        raise DataError(
            f"the two sides' times to target are for different targets ({targets[0]} vs "
            f"{targets[1]}): times to different targets are not comparable"
        )
    lacking = [side.name for side in sides if side.target is None]
    if len(lacking) == 1:
        return [
            f"time to target not compared: {lacking[0]} has none (built without a target); "
            f"the other side's is for {baseline.target or current.target}"
        ]
    return []


def check_target(side: Side, target: Target) -> None:
    """DataError unless ``side``'s time to target is for ``target`` (``--target``)."""
    if side.target is None:
        raise DataError(
            f"{side.name} has no time to target (built without a target): generate it "
            f"with --target {target} to compare times to target"
        )
    if side.target != target:
        raise DataError(f"{side.name}'s time to target is for {side.target}, not --target {target}")


def unreached(baseline: Side, current: Side) -> list[Unreached]:
    """Configurations on both sides where a side's runs never reached the target."""
    both = sorted(set(baseline.reached) & set(current.reached))
    return [
        Unreached(key, baseline.reached[key], current.reached[key])
        for key in both
        if baseline.reached[key][0] == 0 or current.reached[key][0] == 0
    ]


def _counts(side: Side, metric: Metric, key: Config) -> list[int] | None:
    """[runs that reached the target, runs] of a time-to-target row; None for other metrics."""
    counts = side.reached.get(key) if metric.name == TIME_TO_TARGET else None
    return None if counts is None else list(counts)


def _verdict(test: Any, worse: bool) -> dict[str, Any]:
    """A row's noise test and verdict: beyond noise when the family rejects its test; without a
    test (None) the threshold alone decides."""
    p = test.test.p if test.test is not None else math.nan
    return {
        "noise_test": test.kind,
        "p_value": p,
        "holm_alpha": test.holm_alpha,
        "beyond_noise": test.rejected,
        "regression": bool(worse and test.rejected is not False),
    }


def _skipped_warning(skipped: list[str]) -> list[str]:
    if not skipped:
        return []
    more = len(skipped) - MAX_LISTED
    tail = f"; and {more} more" if more > 0 else ""
    return [
        f"not compared, the relative change is not a finite number: "
        f"{'; '.join(skipped[:MAX_LISTED])}{tail}"
    ]


def base_warning(baseline: Side, current: Side, picked: tuple[str, ...]) -> list[str]:
    """One warning naming the configurations whose speedup the two sides measure against
    different bases (their efficiencies are then different ratios)."""
    if "epoch_time_efficiency" not in picked:
        return []
    differ = [
        f"{config_name(key)} ({config_name(baseline.bases[key])} vs "
        f"{config_name(current.bases[key])})"
        for key in sorted(set(baseline.bases) & set(current.bases))
        if baseline.bases[key] != current.bases[key]
    ]
    if not differ:
        return []
    shown = ", ".join(differ[:MAX_LISTED])
    more = f" and {len(differ) - MAX_LISTED} more" if len(differ) > MAX_LISTED else ""
    return [
        f"the two sides measure speedup against different bases for {len(differ)} "
        f"configuration(s): {shown}{more}; their efficiency changes compare different ratios "
        "(generate both reports with the same --baseline)"
    ]


def compare(baseline: Side, current: Side, max_regression: float = 0.05) -> pd.DataFrame:
    """The rows of :func:`compare_sides` alone."""
    return compare_sides(baseline, current, max_regression).table


def regressions(result: Comparison) -> list[str]:
    """``strategy-workers metric (+x %, test)`` for every regression row, then each metric's
    mean change over the configurations that regressed."""
    from itwin_report.analysis.noise_tests import NONE

    out = []
    frames = [(result.table, False), (result.overall, True)]
    for frame, overall in frames:
        if frame is None:
            continue
        for r in _records(frame):
            if not r["regression"]:
                continue
            words = BY_NAME[r["metric"]].words
            where = (
                f"{words}, mean of {r['configurations']} configurations"
                if overall
                else f"{r['strategy']}-{r['workers']} {words}"
            )
            why = (
                "threshold alone: one run on a side"
                if r["noise_test"] == NONE
                else f"{r['noise_test']} p={r['p_value']:.2g} <= {r['holm_alpha']:.2g}"
            )
            out.append(f"{where} ({r['change']:+.1%}, {why})")
    return out


def compared_words(table: pd.DataFrame, metrics: tuple[str, ...] | None = None) -> str:
    """``epoch time, epoch-time efficiency and throughput``: what the rows compare (the picked
    metrics, all by default, when there is no row)."""
    present = set(table["metric"]) if len(table) else set(metrics or BY_NAME)
    words = [m.words for m in METRICS if m.name in present]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def method_words(result: Comparison) -> str:
    """How noise was weighed: ``one-sided Welch t-tests; Holm–Bonferroni over 52 tests holds
    the false-alarm rate at 5%``."""
    from itwin_report.analysis.significance import FAMILY_ALPHA

    return (
        f"one-sided Welch t-tests; Holm–Bonferroni over {result.family_size} tests holds the "
        f"false-alarm rate at {FAMILY_ALPHA:.0%}"
    )


def gate_error(result: Comparison) -> ReportError | None:
    """What fails the comparison, as the error to raise; None when it passes.

    :class:`RegressionFound` (exit 4) for a regression, or for configurations of the baseline the
    current report lacks unless they are allowed; :class:`NothingMeasured` (exit 5) when no
    configuration was compared at all.
    """
    parts = []
    found = [safe_name(r) for r in regressions(result)]
    threshold = f"{result.max_regression:.0%}"
    if found:
        parts.append(f"regression beyond {threshold}: " + ", ".join(found))
    never = [u.words() for u in result.unreached if u.regression]
    if never:
        parts.append("the target is no longer reached: " + safe_name(", ".join(never)))
    if result.missing and not result.allow_missing:
        names = ", ".join(safe_name(config_name(k)) for k in result.missing)
        parts.append(
            f"the current report lacks {len(result.missing)} configuration(s) of the baseline: "
            f"{names} (pass --allow-missing to compare the others)"
        )
    if parts:
        return RegressionFound("; ".join(parts))
    if result.table.empty:
        return NothingMeasured(
            "nothing compared: no configuration has a metric measured in both reports"
            f" ({compared_words(result.table, result.metrics)})"
        )
    return None


def _records(table: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in rec.items()} for rec in table.to_dict("records")]


def safe_name(text: str) -> str:
    """Masked, with control characters shown as escapes: for messages on a terminal."""
    from itwin_report.util.escape import terminal
    from itwin_report.util.masking import mask_text

    return terminal(mask_text(text))
