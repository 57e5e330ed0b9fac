"""A side of a comparison from a saved JSON report, every value checked against its range."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from itwin_report.data.validate import MAX_WORKERS, SECONDS, Range
from itwin_report.util.errors import DataError

if TYPE_CHECKING:
    pass

from itwin_report.analysis.comparison.metrics import (
    MAX_LISTED,
    METRICS,
    RUN_TIME,
    Config,
    Side,
    config_name,
)

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
