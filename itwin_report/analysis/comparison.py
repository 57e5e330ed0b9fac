"""Compare two reports configuration by configuration and find regressions (pure functions).

A side is a saved JSON report (``--format json``) or a freshly built :class:`Report`; both are
reduced to the same :class:`Side`. Every number read from a side must lie in the range the
loader accepts for it (:mod:`itwin_report.data.validate`); a value outside is left out with a
warning.

What is compared, per configuration (strategy, workers): the mean epoch time, the parallel
efficiency computed from epoch time (the epoch-time table's, not the throughput table's), the
throughput in samples/s and the GPU energy per epoch. A change is a *regression* when it is for
the worse by more than ``max_regression`` (relative) and, where per-run values exist, beyond
noise:

* epoch time: Welch's t-test on the per-run mean epoch times (``|t| > t(0.975, df)``);
* epoch-time efficiency: the two 95 % intervals do not overlap;
* throughput and energy per epoch: no per-run values are kept, the threshold alone decides.

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


EFFICIENCY = ("epoch_time_efficiency", "efficiency")  # newer column name first, then older
METRICS: tuple[Metric, ...] = (
    Metric("epoch_time", "epoch time", "epoch_time", ("avg_epoch_time_s",), "s", False, SECONDS),
    Metric(
        name="epoch_time_efficiency",
        words="epoch-time efficiency",
        table="epoch_time",
        columns=EFFICIENCY,
        unit="",
        higher_is_better=True,
        valid=POSITIVE,
    ),
    Metric(
        name="throughput",
        words="throughput",
        table="throughput",
        columns=("samples_per_sec",),
        unit="samples/s",
        higher_is_better=True,
        valid=NON_NEGATIVE,
    ),
    Metric(
        name="energy_per_epoch",
        words="energy per epoch",
        table="gpu",
        columns=("energy_wh_per_epoch",),
        unit="Wh",
        higher_is_better=False,
        valid=NON_NEGATIVE,
    ),
)
BY_NAME = {m.name: m for m in METRICS}
# metric names of comparisons written before the efficiency was named after its source
OLD_NAMES = {"efficiency": "epoch_time_efficiency"}
EFFICIENCY_CI = ("epoch_time_efficiency_ci", "efficiency_ci")
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
    efficiency_ci: dict[Config, tuple[float, float]] = field(default_factory=dict)
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

    def interval(self, where: str, row: dict[str, Any]) -> tuple[float, float] | None:
        column = next((c for c in EFFICIENCY_CI if row.get(c) is not None), None)
        if column is None:
            return None
        pair = row[column]
        if not isinstance(pair, list) or len(pair) != 2:
            raise DataError(f"{self.name}: malformed JSON report ({where} {column} is not a pair)")
        if any(v is None for v in pair):
            return None
        low, high = (self.number(f"{where} {column}", v) for v in pair)
        if not (_in_range(POSITIVE, low) and _in_range(POSITIVE, high) and low <= high):
            self.problems.append(f"{where} {column} [{_shown(pair[0])}, {_shown(pair[1])}]")
            return None
        return low, high

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
        for where, key, row in rows[metric.table]:
            side.values[metric.name][key] = reader.value(where, row, metric.columns, metric.valid)
    for where, key, row in rows["epoch_time"]:
        side.configurations.add(key)
        interval = reader.interval(where, row)
        if interval is not None:
            side.efficiency_ci[key] = interval
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


@dataclass
class Comparison:
    """The rows compared (:data:`COLUMNS`), what could not be compared, and the settings."""

    table: pd.DataFrame
    baseline: Side
    current: Side
    max_regression: float
    allow_missing: bool = False
    warnings: list[str] = field(default_factory=list)

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


def _noise(metric: str, key: Config, baseline: Side, current: Side) -> tuple[str, bool | None]:
    """(which test, beyond noise?) for one metric of one configuration; None: no test."""
    from itwin_report.analysis.intervals import separate, welch_test

    if metric == "epoch_time":
        a, b = baseline.runs.get(key, []), current.runs.get(key, [])
        if len(a) >= 2 and len(b) >= 2:
            return "welch", welch_test(a, b)[2]
    if metric == "epoch_time_efficiency":
        a_ci, b_ci = baseline.efficiency_ci.get(key), current.efficiency_ci.get(key)
        if a_ci and b_ci:
            return "intervals", separate(a_ci, b_ci)
    return "none", None


def check_max_regression(max_regression: float) -> None:
    if not (math.isfinite(max_regression) and max_regression >= 0):
        raise ReportError(f"max_regression must be a finite number >= 0, got {max_regression}")


def compare_sides(
    baseline: Side, current: Side, max_regression: float = 0.05, allow_missing: bool = False
) -> Comparison:
    """Every metric of every configuration measured on both sides, with its verdict.

    A pair whose relative change is not a finite number (a baseline of 0, or a ratio too large
    for a float) is left out with a warning.
    """
    import pandas as pd

    check_max_regression(max_regression)
    rows, skipped = [], []
    for metric in METRICS:
        a_vals, b_vals = baseline.values.get(metric.name, {}), current.values.get(metric.name, {})
        for key in sorted(set(a_vals) & set(b_vals)):
            a, b = a_vals[key], b_vals[key]
            if math.isnan(a) or math.isnan(b):
                continue
            change = b / a - 1.0 if a != 0 else math.inf
            if not math.isfinite(change):
                skipped.append(f"{config_name(key)} {metric.words} ({a:g} -> {b:g})")
                continue
            worse = _worse(change, metric.higher_is_better) > max_regression
            test, beyond = _noise(metric.name, key, baseline, current)
            rows.append(
                {
                    "strategy": key[0],
                    "workers": key[1],
                    "metric": metric.name,
                    "baseline": a,
                    "current": b,
                    "change": change,
                    "worse": worse,
                    "noise_test": test,
                    "beyond_noise": beyond,
                    "regression": bool(worse and beyond is not False),
                }
            )
    warnings = []
    if skipped:
        more = len(skipped) - MAX_LISTED
        tail = f"; and {more} more" if more > 0 else ""
        warnings.append(
            f"not compared, the relative change is not a finite number: "
            f"{'; '.join(skipped[:MAX_LISTED])}{tail}"
        )
    table = pd.DataFrame(rows, columns=COLUMNS)
    return Comparison(table, baseline, current, max_regression, allow_missing, warnings)


def compare(baseline: Side, current: Side, max_regression: float = 0.05) -> pd.DataFrame:
    """The rows of :func:`compare_sides` alone."""
    return compare_sides(baseline, current, max_regression).table


def regressions(table: pd.DataFrame) -> list[str]:
    """``strategy-workers metric (+x %)`` for every regression row."""
    return [
        f"{r['strategy']}-{r['workers']} {BY_NAME[r['metric']].words} ({r['change']:+.1%})"
        for r in _records(table)
        if r["regression"]
    ]


def compared_words(table: pd.DataFrame) -> str:
    """``epoch time, epoch-time efficiency and throughput``: what the rows compare (all the
    metrics when there is no row)."""
    present = set(table["metric"]) if len(table) else {m.name for m in METRICS}
    words = [m.words for m in METRICS if m.name in present]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def gate_error(result: Comparison) -> ReportError | None:
    """What fails the comparison, as the error to raise; None when it passes.

    :class:`RegressionFound` (exit 4) for a regression, or for configurations of the baseline the
    current report lacks unless they are allowed; :class:`NothingMeasured` (exit 5) when no
    configuration was compared at all.
    """
    parts = []
    found = [safe_name(r) for r in regressions(result.table)]
    threshold = f"{result.max_regression:.0%}"
    if found:
        parts.append(f"regression beyond {threshold} and noise: " + ", ".join(found))
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
            f" ({compared_words(result.table)})"
        )
    return None


def _records(table: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in rec.items()} for rec in table.to_dict("records")]


def safe_name(text: str) -> str:
    """Masked, with control characters shown as escapes: for messages on a terminal."""
    from itwin_report.util.escape import terminal
    from itwin_report.util.masking import mask_text

    return terminal(mask_text(text))
