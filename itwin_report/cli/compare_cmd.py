"""The ``compare`` command: a regression gate between two reports (thin layer over compare.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from itwin_report.cli.options import (
    TARGET_HELP,
    Threshold,
    cache_options,
    cache_settings,
    format_option,
    output_option,
    target_option,
    timeout_option,
    tracking_uri_option,
    warmup_option,
)
from itwin_report.render import COMPARE_FORMATS
from itwin_report.util.errors import EXIT_USAGE, ReportError

if TYPE_CHECKING:
    from itwin_report.analysis.comparison import Side
    from itwin_report.options import Target


def _is_file(source: str) -> bool:
    """Whether ``source`` names an existing file (an experiment name too long for a path, or
    holding a NUL, does not)."""
    try:
        return Path(source).is_file()
    except (OSError, ValueError):
        return False


def _file_side(source: str) -> Side | None:
    """A saved JSON report when ``source`` is a file; None when it names an experiment."""
    from itwin_report.analysis.comparison import load_side_file

    if _is_file(source):
        return load_side_file(Path(source))
    if source.lower().endswith(".json"):
        raise ReportError(f"no such report file: {source}")
    return None


def _store_side(
    source: str,
    tracking_uri: str | None,
    warmup_epochs: int,
    quiet: bool,
    end: float,
    cache: Any = None,
    target: Target | None = None,
) -> Side:
    """An experiment of the store (read by the monotonic time ``end``) as a side, with its time
    to ``target`` when one is given."""
    from itwin_report import store
    from itwin_report.render.comparison import side_from_report
    from itwin_report.report import build_report
    from itwin_report.store.http import HttpLimits

    uri = store.resolve_tracking_uri(tracking_uri)
    left = HttpLimits(timeout=max(0.001, end - time.monotonic()))
    extra = () if target is None else (target.metric,)
    data = store.load_experiment(
        uri, source, [], show_progress=not quiet, cache=cache, http=left, extra_metrics=extra
    )
    report = build_report(data, warmup_epochs=warmup_epochs, target=target)
    return side_from_report(report, source)


def _saved_target(sides: list[Side | None]) -> Target | None:
    """The target of the saved report(s) among the sides, when they name one."""
    found = {s.target for s in sides if s is not None and s.target is not None}
    return found.pop() if len(found) == 1 else None


@click.command("compare")
@click.argument("baseline")
@click.argument("current")
@tracking_uri_option(
    "Store of BASELINE/CURRENT when they name experiments "
    "(default: $MLFLOW_TRACKING_URI, else sqlite:///mllogs/mlflow.db)."
)
@timeout_option()
@click.option(
    "--max-regression",
    type=Threshold(),
    default=0.05,
    show_default=True,
    metavar="FRACTION",
    help="A change for the worse larger than this (0.05 = 5 %) is a regression, when it is "
    "also beyond noise.",
)
@click.option(
    "--metrics",
    default="epoch-time,efficiency,throughput,energy,time-to-target",
    show_default=True,
    metavar="A,B",
    help="The metrics compared and gated (comma-separated): epoch-time, efficiency (from "
    "epoch time), throughput, energy (per epoch), time-to-target (where the sides have one).",
)
@click.option(
    "--allow-missing",
    is_flag=True,
    help="Do not fail when CURRENT lacks configurations of BASELINE (they are listed as "
    "missing); with no configuration compared at all the exit code is 5.",
)
@warmup_option("Warm-up epochs left out when a side is read from a store.")
@format_option(
    COMPARE_FORMATS,
    "Output format; benchmark-json (smaller is better: epoch time, energy) and "
    "benchmark-json-bigger (efficiency, throughput) are github-action-benchmark's custom tools.",
)
@output_option(
    "Write the comparison to FILE instead of stdout (never a side, nor a file or "
    "artifact folder of the tracking store)."
)
@cache_options
@target_option(
    f"{TARGET_HELP}: compares the mean time to target of the runs that reached it (how many "
    "did is shown on each side); a side read from a store is built with it; a saved "
    "report must carry the same target. Without it, a side read from a store takes the target "
    "of the saved report on the other side."
)
@click.option("--quiet", "-q", is_flag=True, help="No progress messages on stderr.")
def compare_command(
    baseline: str,
    current: str,
    tracking_uri: str | None,
    timeout: float | None,
    max_regression: float,
    metrics: str,
    allow_missing: bool,
    warmup_epochs: int,
    fmt: str,
    output: Path | None,
    cache: bool,
    cache_dir: str | None,
    cache_size: int,
    target: Target | None,
    quiet: bool,
) -> None:
    """Compare two reports per configuration and exit 4 on a regression.

    BASELINE and CURRENT are each a JSON report saved with --format json, or
    an experiment name read from --tracking-uri. Per configuration, for the
    --metrics picked: the mean epoch time, the parallel efficiency computed
    from epoch time (the epoch time table's), throughput and energy per epoch,
    with their changes, and each metric's mean change over the
    configurations. A regression is a change for the worse beyond
    --max-regression that is also beyond noise: one-sided Welch t-tests on the
    per-run values (or the 95 % intervals the report computed from them), with
    Holm-Bonferroni over all the tests of the comparison, so that an unchanged
    model fails at most 5 % of the time; where a side has one run, the
    threshold alone decides. A configuration of BASELINE that CURRENT lacks
    fails too (exit 4) unless --allow-missing is given. Values of a saved
    report outside their valid range are left out with a warning.

    \b
    Examples:
      itwin-report generate-scalability-report -e nightly --format json -o base.json
      itwin-report compare base.json nightly --tracking-uri sqlite:///mlflow.db
      itwin-report compare base.json current.json --format markdown >> "$GITHUB_STEP_SUMMARY"
      itwin-report compare base.json current.json --format benchmark-json -o bench.json
      itwin-report compare base.json smaller.json --allow-missing
      itwin-report compare base.json current.json --metrics epoch-time,throughput
    """
    from itwin_report import store
    from itwin_report.analysis.comparison import (
        check_target,
        compare_sides,
        gate_error,
        pick_metrics,
    )
    from itwin_report.cli.group import Failure
    from itwin_report.cli.output import emit
    from itwin_report.render.comparison import render_comparison

    try:
        picked = pick_metrics(metrics)
    except ReportError as exc:
        raise Failure(str(exc), EXIT_USAGE) from None
    uri = store.resolve_tracking_uri(tracking_uri)
    files = [Path(s) for s in (baseline, current) if _is_file(s)]
    conflict = store.check_outputs(uri, {"--output": output}, inputs=files)
    if conflict:
        raise Failure(conflict, EXIT_USAGE)
    from itwin_report.store.http import HttpLimits

    settings = cache_settings(cache, cache_dir, cache_size)
    end = time.monotonic() + HttpLimits(timeout=timeout).seconds  # one deadline for both sides
    saved = [_file_side(baseline), _file_side(current)]
    if target is not None and "time_to_target" in picked:  # before a store is read
        for side in (s for s in saved if s is not None):
            check_target(side, target)
    goal = target if target is not None else _saved_target(saved)
    base, cur = (
        side or _store_side(name, tracking_uri, warmup_epochs, quiet, end, settings, goal)
        for side, name in zip(saved, (baseline, current), strict=True)
    )
    result = compare_sides(base, cur, max_regression, allow_missing, picked, target)
    emit(render_comparison(result, fmt), output)
    failure = gate_error(result)
    if failure is not None:
        raise failure
