"""``merge-performance``: several workers' performance.json records as one."""

from __future__ import annotations

from pathlib import Path

import click

from itwin_report.cli.group import Failure
from itwin_report.cli.options import output_option
from itwin_report.cli.output import emit
from itwin_report.util.errors import EXIT_USAGE


@click.command("merge-performance")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@output_option(
    "Write the merged record to FILE (default: stdout); never one of FILES nor a file of "
    "the tracking store ($MLFLOW_TRACKING_URI, else sqlite:///mllogs/mlflow.db)."
)
def merge_performance(files: tuple[Path, ...], output: Path | None) -> None:
    """Merge several workers' performance.json records into one.

    The result does not depend on the order of FILES: samples add up,
    total_time is the longest worker's (the job's wall time), compile_time
    and programming_time take the maximum, est_samples_per_sec must agree
    (an error names the files otherwise), samples_per_sec is recomputed as
    samples / total_time and the per-worker summaries are sorted. Nothing is
    written when any input is missing or malformed.

    \b
    Example:
      itwin-report merge-performance w0/performance.json w1/performance.json -o performance.json
    """
    from itwin_report import store
    from itwin_report.data.performance_json import merge_files, to_json

    uri = store.resolve_tracking_uri(None)
    conflict = store.check_outputs(uri, {"--output": output}, inputs=list(files))
    if conflict:
        raise Failure(conflict, EXIT_USAGE)
    emit(to_json(merge_files(list(files))), output)
