"""``compare``'s output: the comparison as a table (plain, markdown), JSON or benchmark JSON,
and a built report turned into a comparison side."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from itwin_report.analysis.comparison import (
    BY_NAME,
    METRICS,
    Comparison,
    Side,
    _records,
    compared_words,
    config_name,
    gate_error,
    label,
    method_words,
    reached_words,
    regressions,
    side_from_dict,
)
from itwin_report.render import COMPARE_FORMATS as FORMATS
from itwin_report.util.errors import ReportError

if TYPE_CHECKING:
    import pandas as pd

    from itwin_report.report import Report


def side_from_report(report: Report, name: str) -> Side:
    """A side from a built report (through its JSON form, so both paths agree)."""
    from itwin_report.render import report_to_dict

    return side_from_dict(json.loads(json.dumps(report_to_dict(report))), name)


HEADERS = ["Configuration", "Metric", "Baseline", "Current", "Change", "Noise test", "Verdict"]


def _value(metric: str, value: float) -> str:
    """A metric's value with its unit: 12.30 s, 80.0 %, 1234.5 samples/s, 2.50 Wh."""
    if metric == "epoch_time_efficiency":
        return f"{value * 100:.1f} %"
    unit = BY_NAME[metric].unit
    return f"{value:.1f} {unit}" if metric == "throughput" else f"{value:.2f} {unit}"


def _verdict(row: dict[str, Any]) -> str:
    if row["regression"]:
        return "REGRESSION"
    if row["worse"]:
        return "within noise"
    return "ok"


def _noise_word(row: dict[str, Any]) -> str:
    """``welch p=0.0003 <= 0.001: beyond noise``; ``none`` without a test."""
    if row["noise_test"] == "none":
        return "none"
    if row["noise_test"] == "base":
        return "n/a: the base"
    beyond = "beyond" if row["beyond_noise"] else "within"
    sign = "<=" if row["p_value"] <= row["holm_alpha"] else ">"
    return (
        f"{row['noise_test']} p={row['p_value']:.2g} {sign} {row['holm_alpha']:.2g}: {beyond} noise"
    )


OVERALL_HEADERS = ["Metric", "Configurations", "Mean change", "Noise test", "Verdict"]


def overall_rows(result: Comparison) -> list[list[str]]:
    """Each metric's mean change over the configurations (geometric mean), formatted."""
    frame = result.overall
    if frame is None or frame.empty:
        return []
    return [
        [
            label(r["metric"]),
            str(r["configurations"]),
            f"{float(r['change']):+.1%}",
            _noise_word(r),
            _verdict(r),
        ]
        for r in _records(frame)
    ]


def _cell(row: dict[str, Any], side: str) -> str:
    """A side's value, with the runs that reached the target for a time to target:
    ``270.00 s (3 of 5 reached)``."""
    text = _value(row["metric"], float(row[side]))
    counts = row.get(f"{side}_reached")
    return f"{text} ({reached_words(tuple(counts))})" if isinstance(counts, list) else text


def comparison_rows(table: pd.DataFrame) -> list[list[str]]:
    """Formatted rows of the comparison (configuration names are escaped by the caller)."""
    return [
        [
            f"{r['strategy']}-{r['workers']}",
            label(r["metric"]),
            _cell(r, "baseline"),
            _cell(r, "current"),
            f"{float(r['change']):+.1%}",
            _noise_word(r),
            _verdict(r),
        ]
        for r in _records(table)
    ]


def title(result: Comparison) -> str:
    """``Scaling comparison of epoch time, ...: base vs current`` (masked, not escaped)."""
    from itwin_report.util.masking import mask_text

    names = f"{mask_text(result.baseline.name)} vs {mask_text(result.current.name)}"
    return f"Scaling comparison of {compared_words(result.table, result.metrics)}: {names}"


def _verdict_line(result: Comparison) -> str:
    """The first verdict line: what regressed, or that nothing did, and how noise was weighed."""
    table, threshold = result.table, f"{result.max_regression:.0%}"
    found = regressions(result)
    untested = int((table["noise_test"] == "none").sum())
    method = method_words(result) if result.family_size else ""
    if found:
        how = f" ({method})" if method else ""
        return f"Regression beyond {threshold}{how}: " + ", ".join(found)
    words = compared_words(table, result.metrics)
    if not method:
        return (
            f"No regression beyond {threshold} in {words} (no noise test: one run on a side; "
            "the threshold alone decided)."
        )
    line = f"No regression beyond {threshold} and noise in {words} ({method})."
    if untested:
        line += (
            f" {untested} of {len(table)} rows had no noise test (one run on a side) and were "
            "held to the threshold alone."
        )
    return line


def summary_lines(result: Comparison) -> list[str]:
    """The verdict lines: regressions (each naming its metric and test), then missing
    configurations."""
    if result.table.empty:
        lines = ["Nothing compared: no configuration has a metric measured in both reports."]
    else:
        lines = [_verdict_line(result)]
    lines += unreached_lines(result)
    if result.missing:
        names = ", ".join(config_name(k) for k in result.missing)
        if result.allow_missing:
            lines.append(f"Missing from the current report (allowed by --allow-missing): {names}")
        else:
            lines.append(
                f"Missing from the current report: {names}; this fails the comparison "
                "(--allow-missing accepts it)"
            )
    return lines


def unreached_lines(result: Comparison) -> list[str]:
    """The configurations whose time to target a side lacks because none of its runs reached
    the target: a regression when the baseline's did, else a statement."""
    lost = [u.words() for u in result.unreached if u.regression]
    other = [u.words() for u in result.unreached if not u.regression]
    lines = []
    if lost:
        lines.append(
            f"The target is no longer reached by {', '.join(lost)}; this fails the comparison."
        )
    if other:
        lines.append(
            "Time to target not compared where a side never reached the target: "
            f"{', '.join(other)}."
        )
    return lines


def notes(result: Comparison) -> list[str]:
    return [f"only in the current report: {config_name(k)}" for k in result.added]


def _benchmark(current: Side, bigger: bool, picked: tuple[str, ...]) -> list[dict[str, Any]]:
    """github-action-benchmark's custom tool format: [{name, unit, value, range}]."""
    from itwin_report.analysis.intervals import mean_interval

    out = []
    for metric in METRICS:
        if metric.higher_is_better != bigger or metric.name not in picked:
            continue
        for key, value in sorted(current.values.get(metric.name, {}).items()):
            if math.isnan(value):
                continue
            item: dict[str, Any] = {
                "name": f"{config_name(key)} {metric.words}",
                "unit": metric.unit or "fraction",
                "value": value,
            }
            if metric.name == "epoch_time" and len(current.runs.get(key, [])) >= 2:
                _, low, high = mean_interval(current.runs[key])
                if math.isfinite(high - low):
                    item["range"] = f"± {(high - low) / 2:.4g}"
            out.append(item)
    return out


def _strict_json(payload: Any) -> str:
    """Strict JSON (RFC 8259): a value that is not a finite number is written as null."""
    return json.dumps(_json_value(payload), indent=2, allow_nan=False) + "\n"


def _payload(result: Comparison) -> dict[str, Any]:
    from itwin_report.analysis.significance import FAMILY_ALPHA
    from itwin_report.util.masking import mask_text

    records = result.table.astype(object).to_dict("records")
    overall = [] if result.overall is None else result.overall.astype(object).to_dict("records")
    return {
        "baseline": mask_text(result.baseline.name),
        "current": mask_text(result.current.name),
        "max_regression": result.max_regression,
        "allow_missing": result.allow_missing,
        "metrics": {
            m.name: {
                "compared": m.words,
                "option": m.option,
                "table": m.table,
                "columns": list(m.columns),
                "unit": m.unit or "fraction",
                "higher_is_better": m.higher_is_better,
            }
            for m in METRICS
            if m.name in result.metrics
        },
        "target": {
            "baseline": _masked(result.baseline.target),
            "current": _masked(result.current.target),
        },
        "unreached": [
            {
                "configuration": mask_text(config_name(u.key)),
                "baseline_reached": list(u.baseline),
                "current_reached": list(u.current),
                "regression": u.regression,
            }
            for u in result.unreached
        ],
        "family_size": result.family_size,
        "family_alpha": FAMILY_ALPHA,
        "comparison": [{str(k): v for k, v in r.items()} for r in records],
        "overall": [{str(k): v for k, v in r.items()} for r in overall],
        "regressions": [mask_text(r) for r in regressions(result)],
        "missing": [mask_text(config_name(k)) for k in result.missing],
        "only_in_current": [mask_text(config_name(k)) for k in result.added],
        "summary": [mask_text(line) for line in summary_lines(result)],
        "notes": [mask_text(n) for n in notes(result)],
        "warnings": [mask_text(w) for w in result.all_warnings],
    }


def _masked(target: object) -> str | None:
    from itwin_report.util.masking import mask_text

    return None if target is None else mask_text(str(target))


def render_comparison(result: Comparison, fmt: str) -> str:
    """The comparison as text in ``fmt`` (one of :data:`FORMATS`); JSON is strict JSON."""
    from itwin_report.util.masking import mask_text

    if fmt == "json":
        return _strict_json(_payload(result))
    if fmt in ("benchmark-json", "benchmark-json-bigger"):
        bigger = fmt.endswith("bigger")
        return _strict_json(_benchmark(result.current, bigger, result.metrics))
    if fmt not in ("table", "markdown"):
        raise ReportError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    rows = [[_escape(mask_text(c), fmt) for c in row] for row in comparison_rows(result.table)]
    means = overall_rows(result)  # metric names and numbers only: nothing to escape
    summary = [_escape(mask_text(line), fmt) for line in summary_lines(result)]
    extra = [f"- {_escape(mask_text(n), fmt)}" for n in notes(result)]
    extra += [f"- Warning: {_escape(mask_text(w), fmt)}" for w in result.all_warnings]
    heading = _escape(title(result), fmt)
    if fmt == "markdown":
        out = [f"## {heading}", ""]
        if rows:
            out.append("| " + " | ".join(HEADERS) + " |")
            out.append("|---|---|---:|---:|---:|---|---|")
            out += ["| " + " | ".join(r) + " |" for r in rows]
        else:
            out.append("No configuration measured on both sides.")
        if means:
            out += ["", "Mean change over the configurations (geometric mean):", ""]
            out.append("| " + " | ".join(OVERALL_HEADERS) + " |")
            out.append("|---|---:|---:|---|---|")
            out += ["| " + " | ".join(r) + " |" for r in means]
        failing = gate_error(result) is not None
        out += ["", *(f"**{line}**" if failing else line for line in summary), *extra]
        return "\n".join(out) + "\n"
    lines = [heading, "", *_plain_table(HEADERS, rows)]
    if not rows:
        lines.append("No configuration measured on both sides.")
    if means:
        lines += ["", "Mean change over the configurations (geometric mean):", ""]
        lines += _plain_table(OVERALL_HEADERS, means)
    lines += ["", *summary, *extra]
    return "\n".join(lines) + "\n"


def _plain_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(c) for c in col) for col in zip(headers, *rows, strict=True)]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [headers, ["-" * w for w in widths], *rows]
    ]


def _escape(text: str, fmt: str) -> str:
    """Untrusted names escaped for ``fmt`` (terminal or markdown cell)."""
    from itwin_report.util import escape as safe

    return safe.markdown(text, cell=True) if fmt == "markdown" else safe.terminal(text)


def _json_value(value: Any) -> Any:
    """Plain JSON values: numpy scalars unwrapped, NaN and infinities as null."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    return value
