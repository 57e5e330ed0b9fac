"""Two sides compared configuration by configuration: verdicts, the gate and its words."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from itwin_report.util.errors import DataError, NothingMeasured, RegressionFound, ReportError

if TYPE_CHECKING:
    import pandas as pd

    from itwin_report.options import Target

from itwin_report.analysis.comparison.metrics import (
    BY_NAME,
    BY_OPTION,
    COLUMNS,
    MAX_LISTED,
    METRICS,
    TIME_TO_TARGET,
    VERDICT,
    Config,
    Metric,
    Side,
    config_name,
)

# ---------------------------------------------------------------- comparing

OVERALL_COLUMNS = ["metric", "configurations", *VERDICT]


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
