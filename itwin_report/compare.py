"""Compare two reports configuration by configuration and find regressions (pure functions).

A side is a saved JSON report (``--format json``) or a freshly built :class:`Report`; both are
reduced to the same :class:`Side`. A change is a *regression* when it is for the worse by more
than ``max_regression`` (relative) and, where per-run values exist, beyond noise:

* epoch time: Welch's t-test on the per-run mean epoch times (``|t| > t(0.975, df)``);
* efficiency: the two 95 % intervals do not overlap;
* throughput and energy per epoch: no per-run values are kept, the threshold alone decides.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from itwin_report.errors import DataError, ReportError

if TYPE_CHECKING:
    import pandas as pd

    from itwin_report.report import Report

# name, table, column, unit, higher is better
METRICS: tuple[tuple[str, str, str, str, bool], ...] = (
    ("epoch_time", "epoch_time", "avg_epoch_time_s", "s", False),
    ("efficiency", "epoch_time", "efficiency", "", True),
    ("throughput", "throughput", "samples_per_sec", "samples/s", True),
    ("energy_per_epoch", "gpu", "energy_wh_per_epoch", "Wh", False),
)
LABELS = {
    "epoch_time": "Epoch time",
    "efficiency": "Efficiency",
    "throughput": "Throughput",
    "energy_per_epoch": "Energy per epoch",
}
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

Config = tuple[str, int]


@dataclass
class Side:
    """What a comparison needs of one report."""

    name: str
    values: dict[str, dict[Config, float]]  # metric -> configuration -> value
    runs: dict[Config, list[float]] = field(default_factory=dict)  # per-run mean epoch times
    efficiency_ci: dict[Config, tuple[float, float]] = field(default_factory=dict)


def _number(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def side_from_dict(report: dict[str, Any], name: str) -> Side:
    """A side from a JSON report object; DataError when it is not one."""
    if not isinstance(report, dict) or not isinstance(report.get("epoch_time"), list):
        raise DataError(f"{name}: not a JSON report of itwin-report (no epoch_time table)")
    values: dict[str, dict[Config, float]] = {}
    ci: dict[Config, tuple[float, float]] = {}
    try:
        for metric, table, column, _, _ in METRICS:
            values[metric] = {
                (str(row["strategy"]), int(row["workers"])): _number(row.get(column))
                for row in report.get(table) or []
            }
        for row in report["epoch_time"]:
            low_high = row.get("efficiency_ci") or [None, None]
            ci[(str(row["strategy"]), int(row["workers"]))] = (
                _number(low_high[0]),
                _number(low_high[1]),
            )
        runs: dict[Config, list[float]] = {}
        for row in report.get("runs") or []:
            key = (str(row["strategy"]), int(row["workers"]))
            runs.setdefault(key, []).append(_number(row["avg_epoch_time_s"]))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise DataError(f"{name}: malformed JSON report ({type(exc).__name__}: {exc})") from None
    return Side(name, values, runs, ci)


def load_side_file(path: Path) -> Side:
    """A side from a saved JSON report file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot read {path}: {exc.strerror}") from None
    try:
        report = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    return side_from_dict(report, str(path))


def side_from_report(report: Report, name: str) -> Side:
    """A side from a built report (through its JSON form, so both paths agree)."""
    from itwin_report.render import report_to_dict

    return side_from_dict(json.loads(json.dumps(report_to_dict(report))), name)


def _worse(change: float, higher_is_better: bool) -> float:
    """The relative change in the bad direction (positive = worse)."""
    return -change if higher_is_better else change


def _noise(metric: str, key: Config, baseline: Side, current: Side) -> tuple[str, bool | None]:
    """(which test, beyond noise?) for one metric of one configuration; None: no test."""
    from itwin_report.report.confidence import separate, welch_test

    if metric == "epoch_time":
        a, b = baseline.runs.get(key, []), current.runs.get(key, [])
        if len(a) >= 2 and len(b) >= 2:
            return "welch", welch_test(a, b)[2]
    if metric == "efficiency":
        a_ci, b_ci = baseline.efficiency_ci.get(key), current.efficiency_ci.get(key)
        if a_ci and b_ci and not any(math.isnan(v) for v in (*a_ci, *b_ci)):
            return "intervals", separate(a_ci, b_ci)
    return "none", None


def compare(baseline: Side, current: Side, max_regression: float = 0.05) -> pd.DataFrame:
    """One row per (configuration, metric) present on both sides, with the verdict."""
    import pandas as pd

    if max_regression < 0:
        raise ReportError(f"--max-regression must be >= 0, got {max_regression}")
    rows = []
    for metric, _, _, _, higher in METRICS:
        a_vals, b_vals = baseline.values.get(metric, {}), current.values.get(metric, {})
        for key in sorted(set(a_vals) & set(b_vals)):
            a, b = a_vals[key], b_vals[key]
            if math.isnan(a) or math.isnan(b) or a == 0:
                continue
            change = b / a - 1.0
            worse = _worse(change, higher) > max_regression
            test, beyond = _noise(metric, key, baseline, current)
            rows.append(
                {
                    "strategy": key[0],
                    "workers": key[1],
                    "metric": metric,
                    "baseline": a,
                    "current": b,
                    "change": change,
                    "worse": worse,
                    "noise_test": test,
                    "beyond_noise": beyond,
                    "regression": bool(worse and beyond is not False),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def only_on_one_side(baseline: Side, current: Side) -> list[str]:
    """Lines naming the configurations measured on one side only."""
    a = set(baseline.values.get("epoch_time", {}))
    b = set(current.values.get("epoch_time", {}))
    out = [f"only in the baseline: {s}-{w}" for s, w in sorted(a - b)]
    return out + [f"only in the current report: {s}-{w}" for s, w in sorted(b - a)]


def regressions(table: pd.DataFrame) -> list[str]:
    """``strategy-workers metric (+x %)`` for every regression row."""
    return [
        f"{r['strategy']}-{r['workers']} {LABELS[r['metric']].lower()} ({r['change']:+.1%})"
        for r in _records(table)
        if r["regression"]
    ]


def _records(table: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in rec.items()} for rec in table.to_dict("records")]


FORMATS = ("table", "markdown", "json", "benchmark-json", "benchmark-json-bigger")
HEADERS = ["Configuration", "Metric", "Baseline", "Current", "Change", "Noise test", "Verdict"]


def _value(metric: str, value: float) -> str:
    """A metric's value with its unit: 12.30 s, 80.0 %, 1234.5 samples/s, 2.50 Wh."""
    if metric == "efficiency":
        return f"{value * 100:.1f} %"
    unit = next(u for m, _, _, u, _ in METRICS if m == metric)
    return f"{value:.1f} {unit}" if metric == "throughput" else f"{value:.2f} {unit}"


def _verdict(row: dict[str, Any]) -> str:
    if row["regression"]:
        return "REGRESSION"
    if row["worse"]:
        return "within noise"
    return "ok"


def _noise_word(row: dict[str, Any]) -> str:
    if row["noise_test"] == "none":
        return "n/a"
    return f"{row['noise_test']}: {'beyond' if row['beyond_noise'] else 'within'} noise"


def comparison_rows(table: pd.DataFrame) -> list[list[str]]:
    """Formatted rows of the comparison (configuration names are escaped by the caller)."""
    return [
        [
            f"{r['strategy']}-{r['workers']}",
            LABELS[r["metric"]],
            _value(r["metric"], float(r["baseline"])),
            _value(r["metric"], float(r["current"])),
            f"{float(r['change']):+.1%}",
            _noise_word(r),
            _verdict(r),
        ]
        for r in _records(table)
    ]


def summary_line(table: pd.DataFrame, max_regression: float) -> str:
    found = regressions(table)
    if not found:
        return f"No regression beyond {max_regression:.0%} and noise."
    return f"Regression beyond {max_regression:.0%} and noise: " + ", ".join(found)


def _benchmark(table: pd.DataFrame, current: Side, bigger: bool) -> list[dict[str, Any]]:
    """github-action-benchmark's custom tool format: [{name, unit, value, range}]."""
    from itwin_report.report.confidence import mean_interval

    out = []
    for metric, _, _, unit, higher in METRICS:
        if higher != bigger:
            continue
        for key, value in sorted(current.values.get(metric, {}).items()):
            if math.isnan(value):
                continue
            item: dict[str, Any] = {
                "name": f"{key[0]}-{key[1]} {LABELS[metric].lower()}",
                "unit": unit or "fraction",
                "value": value,
            }
            if metric == "epoch_time" and len(current.runs.get(key, [])) >= 2:
                _, low, high = mean_interval(current.runs[key])
                item["range"] = f"± {(high - low) / 2:.4g}"
            out.append(item)
    return out


def render_comparison(
    table: pd.DataFrame,
    baseline: Side,
    current: Side,
    fmt: str,
    max_regression: float,
) -> str:
    """The comparison as text in ``fmt`` (one of :data:`FORMATS`)."""
    from itwin_report.masking import mask_text

    notes = [mask_text(n) for n in only_on_one_side(baseline, current)]
    names = f"{mask_text(baseline.name)} vs {mask_text(current.name)}"
    summary = summary_line(table, max_regression)
    if fmt == "json":
        records = table.astype(object).to_dict("records")
        payload = {
            "baseline": mask_text(baseline.name),
            "current": mask_text(current.name),
            "max_regression": max_regression,
            "comparison": [{str(k): _json_value(v) for k, v in r.items()} for r in records],
            "regressions": [mask_text(r) for r in regressions(table)],
            "notes": notes,
        }
        return json.dumps(payload, indent=2) + "\n"
    if fmt in ("benchmark-json", "benchmark-json-bigger"):
        items = _benchmark(table, current, bigger=fmt.endswith("bigger"))
        return json.dumps(items, indent=2) + "\n"
    rows = [[_escape(mask_text(c), fmt) for c in row] for row in comparison_rows(table)]
    summary = _escape(mask_text(summary), fmt)
    if fmt == "markdown":
        out = [f"## Scaling comparison: {_escape(names, fmt)}", ""]
        if rows:
            out.append("| " + " | ".join(HEADERS) + " |")
            out.append("|---|---|---:|---:|---:|---|---|")
            out += ["| " + " | ".join(r) + " |" for r in rows]
        else:
            out.append("No configuration measured on both sides.")
        out += ["", f"**{summary}**" if regressions(table) else summary]
        out += [f"- {_escape(n, fmt)}" for n in notes]
        return "\n".join(out) + "\n"
    if fmt != "table":
        raise ReportError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    widths = [max(len(c) for c in col) for col in zip(HEADERS, *rows, strict=True)]
    lines = [f"Scaling comparison: {_escape(names, fmt)}", ""]
    for row in [HEADERS, ["-" * w for w in widths], *rows]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        lines.append("No configuration measured on both sides.")
    lines += ["", summary, *(f"- {_escape(n, fmt)}" for n in notes)]
    return "\n".join(lines) + "\n"


def safe_name(text: str) -> str:
    """Masked, with control characters shown as escapes: for messages on a terminal."""
    from itwin_report.masking import mask_text

    return _escape(mask_text(text), "table")


def _escape(text: str, fmt: str) -> str:
    """Untrusted names escaped for ``fmt`` (terminal or markdown cell)."""
    from itwin_report.render import safe

    return safe.markdown(text, cell=True) if fmt == "markdown" else safe.terminal(text)


def _json_value(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
