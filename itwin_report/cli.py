"""Command line: option parsing around the library, and the one place errors become exit codes.

Only click and light modules are imported here, so ``itwin-report --help`` stays fast; the
commands import the loader, the report and the plots when they run.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from itwin_report import __version__
from itwin_report.emulator.command import emulate_command
from itwin_report.errors import EXIT_ERROR, EXIT_USAGE, GateFailed, ReportError
from itwin_report.render import FORMATS

DEBUG_ENV = "ITWIN_REPORT_DEBUG"


class _Failure(click.ClickException):
    """A ReportError on its way out: ``Error: <message>`` on stderr and the error's exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]


class _Group(click.Group):
    """Turns the project's exceptions into one-line errors with documented exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ReportError as exc:
            raise _Failure(str(exc), exc.exit_code) from None
        except (click.ClickException, click.exceptions.Exit, click.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:  # a bug, not user input: keep it to one line unless debugging
            if os.environ.get(DEBUG_ENV):
                traceback.print_exc()
            hint = f" (set {DEBUG_ENV}=1 for the traceback)"
            raise _Failure(f"unexpected {type(exc).__name__}: {exc}{hint}", EXIT_ERROR) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="itwin-report")
def main() -> None:
    """Scalability reports for distributed deep-learning runs logged to MLflow.

    \b
    Try it with emulated data:
      itwin-report emulate
      itwin-report generate-scalability-report --experiment-name emulated-cluster

    Exit codes: 0 success, 1 error (bad input, unreachable store), 2 bad usage,
    3 --fail-under-efficiency found a configuration below the threshold.
    """


def _split_names(values: Sequence[str]) -> list[str]:
    """``--run-names a,b --run-names c`` -> ``[a, b, c]``."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _parse_rate_config(value: str | None) -> tuple[str, int] | None:
    if not value:
        return None
    strategy, sep, workers = value.rpartition(":")
    if not sep or not strategy or not workers.isdigit():
        raise click.BadParameter(
            "expected STRATEGY:WORKERS, e.g. horovod:8", param_hint="--rate-config"
        )
    return strategy, int(workers)


def _styled(fmt: str, output: Path | None) -> bool:
    """Rich styling only for a table on a terminal, and never with NO_COLOR set."""
    return (
        fmt == "table" and output is None and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    )


@main.command("generate-scalability-report")
@click.option(
    "--experiment-name",
    "-e",
    help="MLflow experiment to read (required unless only one experiment holds runs).",
)
@click.option(
    "--run-names",
    "-r",
    multiple=True,
    metavar="A,B",
    help="Only these top-level runs (comma-separated, repeatable).",
)
@click.option(
    "--tracking-uri",
    metavar="URI",
    help="sqlite:///x.db, postgresql://…, http(s)://server, or a file-store path "
    "(default: $MLFLOW_TRACKING_URI, else sqlite:///mllogs/mlflow.db).",
)
@click.option(
    "--warmup-epochs",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Leave the first N epochs of every run out of epoch times (0 = itwinai's mean).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice((*FORMATS, "html")),
    default="table",
    show_default=True,
    help="Output format (html: one self-contained page with inline plots).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report to FILE instead of stdout.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="Also write the report as a self-contained HTML page to PATH.",
)
@click.option(
    "--plot-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("plots"),
    show_default=True,
    help="Directory for the plots.",
)
@click.option(
    "--plot-format",
    type=click.Choice(["png", "svg", "pdf"]),
    default="png",
    show_default=True,
    help="Image format of the plots.",
)
@click.option("--no-plots", is_flag=True, help="Do not write plots.")
@click.option(
    "--fail-under-efficiency",
    type=click.FloatRange(min=0),
    metavar="X",
    help="Exit with code 3 when any configuration's parallel efficiency is below X (e.g. 0.7).",
)
@click.option(
    "--include-unfinished",
    is_flag=True,
    help="Keep runs that are not FINISHED (running, killed, failed).",
)
@click.option(
    "--throughput-source",
    type=click.Choice(["auto", "performance", "rates", "epochs"]),
    default="auto",
    show_default=True,
    help="Throughput from performance.json, the logged rate metrics, or epoch time and "
    "samples_per_epoch; auto takes the first that covers a strategy.",
)
@click.option(
    "--rate-config",
    metavar="STRATEGY:WORKERS",
    help="Configuration for the Rate/GlobalRate plot (default: first strategy, fewest workers).",
)
@click.option(
    "--strategy-param",
    default="strategy",
    show_default=True,
    metavar="NAME",
    help="Run param that names the strategy of a configuration.",
)
@click.option(
    "--workers-param",
    default="global_world_size",
    show_default=True,
    metavar="NAME",
    help="Run param that holds the number of workers of a configuration.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress or plot messages on stderr.")
def generate_scalability_report(
    experiment_name: str | None,
    run_names: tuple[str, ...],
    tracking_uri: str | None,
    warmup_epochs: int,
    fmt: str,
    output: Path | None,
    html_path: Path | None,
    plot_dir: Path,
    plot_format: str,
    no_plots: bool,
    fail_under_efficiency: float | None,
    include_unfinished: bool,
    throughput_source: str,
    rate_config: str | None,
    strategy_param: str,
    workers_param: str,
    quiet: bool,
) -> None:
    """Read the runs of an experiment and print the scalability report.

    Tables: epoch time with speedup and parallel efficiency, GPU energy and
    utilization, computation vs other, throughput with the input-bottleneck
    verdict. Plots go to --plot-dir.

    \b
    Examples:
      itwin-report generate-scalability-report -e my-exp
      itwin-report generate-scalability-report -e my-exp --run-names ddp-4,ddp-8
      itwin-report generate-scalability-report -e my-exp --tracking-uri mllogs/mlflow
      itwin-report generate-scalability-report -e my-exp --tracking-uri http://127.0.0.1:5000
      itwin-report generate-scalability-report -e my-exp --format markdown >> "$GITHUB_STEP_SUMMARY"
      itwin-report generate-scalability-report -e my-exp --fail-under-efficiency 0.7 --no-plots
      itwin-report generate-scalability-report -e my-exp --strategy-param backend \
        --workers-param world_size
      itwin-report generate-scalability-report -e my-exp --format html -o report.html
      itwin-report generate-scalability-report -e my-exp --html report.html --no-plots
    """
    from itwin_report import store
    from itwin_report.render import render
    from itwin_report.report import below_efficiency, build_report

    rate = _parse_rate_config(rate_config)
    uri = store.resolve_tracking_uri(tracking_uri)
    outputs = {
        "--output": output,
        "--html": html_path,
        "--plot-dir": None if no_plots else plot_dir,
    }
    conflict = store.check_outputs(uri, outputs)
    if conflict:
        raise _Failure(conflict, EXIT_USAGE)
    data = store.load_experiment(
        uri,
        experiment_name,
        _split_names(run_names),
        include_unfinished=include_unfinished,
        show_progress=not quiet,
        strategy_param=strategy_param,
        workers_param=workers_param,
    )
    report = build_report(
        data, warmup_epochs=warmup_epochs, rate_config=rate, throughput_source=throughput_source
    )
    want_page = fmt == "html" or html_path is not None
    plots = _plots(report) if want_page or not no_plots else None
    page = _html_page(report, data, plots) if want_page else ""
    text = page if fmt == "html" else render(report, fmt, styled=_styled(fmt, output))
    _emit(text, output)
    if html_path is not None:
        _emit(page, html_path)
    if not no_plots:
        _save_plots(plots, plot_dir, plot_format, quiet)
    if fail_under_efficiency is not None:
        failing = below_efficiency(report, fail_under_efficiency)
        if len(failing):
            names = ", ".join(
                f"{row.strategy}-{row.workers} ({row.efficiency:.2f})"
                for row in failing.itertuples()
            )
            raise GateFailed(f"parallel efficiency below {fail_under_efficiency:g}: {names}")


def _emit(text: str, output: Path | None) -> None:
    """Print ``text`` or write it to ``output``."""
    if output is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write {output}: {exc.strerror}") from None


def _plots(report: Any) -> Any:
    """The report's figures, built once for the page and the plot files."""
    from itwin_report.plots import plot_report

    return plot_report(report)


def _html_page(report: Any, data: Any, plots: Any) -> str:
    from itwin_report.render.html import page_context, page_plots, page_time, render_html

    context = page_context(data, __version__, page_time(os.environ))
    return render_html(report, context, page_plots(plots))


def _save_plots(plots: Any, plot_dir: Path, plot_format: str, quiet: bool) -> None:
    from itwin_report.plots import save_figures

    paths = save_figures(plots.figures, plot_dir, plot_format)
    if not quiet:
        missing = "; ".join(f"{name}: {why}" for name, why in plots.missing.items())
        tail = f"; not drawn: {missing}" if missing else ""
        click.echo(f"Wrote {len(paths)} plots to {plot_dir}/ ({plot_format}){tail}", err=True)


@main.command("merge-performance")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the merged record to FILE (default: stdout).",
)
def merge_performance(files: tuple[Path, ...], output: Path | None) -> None:
    """Merge several workers' performance.json records into one.

    Samples add up, total_time is the first file's, compile_time and
    programming_time take the maximum, est_samples_per_sec must agree (an error
    names the files otherwise) and samples_per_sec is recomputed. Nothing is
    written when any input is missing or malformed.

    \b
    Example:
      itwin-report merge-performance w0/performance.json w1/performance.json -o performance.json
    """
    from itwin_report.performance import merge_files

    merged = merge_files(list(files))
    text = json.dumps(merged, indent=4, sort_keys=True) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    tmp = output.with_name(output.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(output)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ReportError(f"cannot write {output}: {exc.strerror}") from None


main.add_command(emulate_command)

if __name__ == "__main__":
    main()
