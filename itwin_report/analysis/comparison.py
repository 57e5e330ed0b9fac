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
)
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
        self, where: str, row: dict[str, Any], columns: tuple[str, ...], valid: Range
    ) -> tuple[float, float, int] | None:
        """(low, high, the row's runs) of the first present interval column; None when absent,
        null or not an interval of values in ``valid``."""
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
        runs = row.get("runs")
        count = self.number(f"{where} runs", runs) if runs is not None else math.nan
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
    for table in ("epoch_time", "throughput", "gpu", "runs"):
        kept = rows.setdefault(table, [])
        seen: set[Config] = set()
        for where, row in reader.rows(report, table):
            key = reader.config(where, row)
            if key is None:
                continue
            if table != "runs" and key in seen:
                reader.problems.append(f"{where} repeats {config_name(key)}")
                continue
            seen.add(key)
            kept.append((where, key, row))
    for metric in METRICS:
        mine = side.intervals.setdefault(metric.name, {})
        for where, key, row in rows[metric.table]:
            side.values[metric.name][key] = reader.value(where, row, metric.columns, metric.valid)
            interval = reader.interval(where, row, metric.intervals, metric.valid)
            if interval is not None:
                mine[key] = interval
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
) -> Comparison:
    """Every picked metric of every configuration measured on both sides, with its verdict.

    A pair whose relative change is not a finite number (a baseline of 0, or a ratio too large
    for a float) is left out with a warning.
    """
    import pandas as pd

    from itwin_report.analysis.noise_tests import RowTest, family, row_test

    check_max_regression(max_regression)
    picked = pick_metrics(metrics)
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
        _skipped_warning(skipped) + base_warning(baseline, current, picked),
        pd.DataFrame(overall, columns=OVERALL_COLUMNS),
        picked,
        sum(r.test is not None for t in tests.values() for r in t) + len(means),
    )
    return result


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
