"""``analyze-traces``: where each rank's device time goes, from PyTorch profiler traces."""

from __future__ import annotations

from pathlib import Path

import click

from itwin_report.cli.options import Rule, format_option, output_option
from itwin_report.cli.output import check_writable, emit

FORMATS = ("table", "json", "markdown")


@click.command("analyze-traces")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@format_option(FORMATS)
@click.option(
    "--jobs",
    "-j",
    type=Rule("jobs"),
    metavar="N",
    default=None,
    help="Traces read at once, each in its own process (default: the CPU count; small sets "
    "are read in one process).",
)
@output_option("Write the analysis to FILE instead of stdout.")
def analyze_traces_command(
    paths: tuple[Path, ...], fmt: str, jobs: int | None, output: Path | None
) -> None:
    """Break down each rank's time from PyTorch profiler traces.

    PATHS are trace files (worker_<rank>.<time>.pt.trace.json, plain or
    gzipped) or folders searched for them, such as itwinai's
    <run name>/torch-traces. Per rank: the span analysed, compute,
    communication, memory, idle and exposed communication (no compute under
    it), as Holistic Trace Analysis defines them (the last profiler step left
    out); CPU-only (gloo) traces are analysed on their CPU operators. Ranks of
    one folder form a job; a rank whose compute per step or collective launch
    lags the median beyond the others' spread is named a straggler.
    Unreadable traces are warnings naming the file; the files are never
    changed (an --output that is one of them, or lies in a folder of PATHS,
    is refused with exit code 2).

    \b
    Examples:
      itwin-report analyze-traces logs_torch_profiler/ddp-8/torch-traces
      itwin-report analyze-traces worker_0.1.pt.trace.json.gz --format json
    """
    from itwin_report.cli.group import Failure
    from itwin_report.render.traces import write
    from itwin_report.store.uri import output_conflict
    from itwin_report.traces.analyze import analyze_traces, find_traces
    from itwin_report.util.errors import EXIT_USAGE

    if output is not None:  # never over a trace, nor into a folder of them
        conflict = output_conflict({"--output": output}, [], [*find_traces(paths), *paths])
        if conflict:
            raise Failure(conflict, EXIT_USAGE)
    check_writable({"--output": output})
    emit(write(analyze_traces(paths, jobs), fmt), output)
