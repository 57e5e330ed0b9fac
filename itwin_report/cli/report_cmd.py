"""``generate-scalability-report``: options, then load -> build -> publish -> gate."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from itwin_report import options as rules
from itwin_report.cli.group import Failure
from itwin_report.cli.options import (
    TARGET_HELP,
    Efficiency,
    OneOf,
    Rule,
    by_rule,
    cache_options,
    cache_settings,
    format_option,
    output_option,
    target_option,
    timeout_option,
    tracking_uri_option,
    warmup_option,
)
from itwin_report.cli.output import (
    check_writable,
    html_page,
    make_plots,
    publish,
    start_plots,
    styled,
)
from itwin_report.render import FORMATS
from itwin_report.util.errors import EXIT_USAGE, GateFailed

if TYPE_CHECKING:
    from itwin_report.options import Target


@click.command("generate-scalability-report")
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
    callback=by_rule(rules.run_names),
    help="Only these top-level runs (comma-separated, repeatable).",
)
@tracking_uri_option()
@timeout_option()
@warmup_option("Leave the first N epochs of every run out of epoch times (0 = itwinai's mean).")
@format_option(
    (*FORMATS, "html"), "Output format (html: one self-contained page with inline plots)."
)
@output_option("Write the report to FILE instead of stdout.")
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
    type=Efficiency(),
    metavar="X",
    help="Exit with code 3 when any configuration's efficiency is below X, a fraction "
    "(e.g. 0.7), or cannot be evaluated; the verdict is part of every output format.",
)
@click.option(
    "--gate-on",
    type=OneOf("gate_on"),
    default="epoch-time",
    show_default=True,
    help="Which efficiency --fail-under-efficiency checks: epoch time (training epochs after "
    "warm-up), end-to-end throughput (which also pays for set-up, validation, checkpoints) or "
    "time to target (with --target: also pays for the extra epochs a larger batch needs).",
)
@click.option(
    "--baseline",
    type=OneOf("baseline"),
    default="auto",
    show_default=True,
    help="Speedup against the single-GPU run for every strategy (auto: when there is one), "
    "or against each strategy's own smallest worker count.",
)
@click.option(
    "--samples-per-epoch",
    type=Rule("samples_per_epoch"),
    metavar="N",
    help="Samples per epoch of every run, for throughput from epoch time (default: the "
    "samples_per_epoch param, else batch_size x batches per epoch x workers).",
)
@click.option(
    "--include-unfinished",
    is_flag=True,
    help="Keep runs that are not FINISHED (running, killed, failed).",
)
@click.option(
    "--throughput-source",
    type=OneOf("throughput_source"),
    default="auto",
    show_default=True,
    help="Throughput from performance.json, the logged rate metrics, or epoch time and "
    "samples_per_epoch; auto takes the first that covers a strategy.",
)
@click.option(
    "--rate-config",
    metavar="STRATEGY:WORKERS",
    callback=by_rule(rules.rate_config),
    help="Configuration for the Rate/GlobalRate plot (default: first strategy, fewest workers).",
)
@click.option(
    "--scaling",
    type=OneOf("scaling"),
    default="auto",
    show_default=True,
    help="Strong scaling (fixed global problem) or weak (fixed problem per GPU: efficiency is "
    "the throughput per GPU against the base); auto decides from samples_per_epoch.",
)
@click.option(
    "--predict",
    metavar="N,M",
    callback=by_rule(rules.worker_counts),
    help="Predict epoch time, speedup and efficiency at these worker counts from the fitted "
    "scaling models (e.g. 64,128).",
)
@click.option(
    "--pue",
    type=Rule("pue"),
    metavar="X",
    help="Power usage effectiveness of the facility (1 to 5): adds facility energy per epoch "
    "and per run (GPU energy x X). Not given: no facility energy is shown.",
)
@click.option(
    "--carbon-intensity",
    type=Rule("carbon_intensity"),
    metavar="G_PER_KWH",
    help="Grams of CO2e per kWh of the grid (0 to 2000): adds CO2e per epoch and per run "
    "(of facility energy when --pue is given).",
)
@click.option(
    "--gpu-hour-price",
    type=Rule("gpu_hour_price"),
    metavar="P",
    help="Price of one GPU-hour: adds the cost per epoch and per run (GPU-hours x P).",
)
@click.option(
    "--currency",
    metavar="CODE",
    help="Currency of --gpu-hour-price, shown in the cost headers (e.g. EUR).",
)
@click.option(
    "--gpus-per-node",
    type=Rule("gpus_per_node"),
    metavar="N",
    help="GPUs per node, for node-hours when the runs log no hostname param on every rank.",
)
@click.option(
    "--max-energy-per-speedup",
    type=Rule("max_energy_per_speedup"),
    metavar="X",
    help="The knee of the time-energy front: a step to a faster configuration is worth it "
    "while it costs at most X % more energy per 1 % more speed (default 1).",
)
@click.option(
    "--deadline-hours",
    type=Rule("deadline_hours"),
    metavar="H",
    help="With --epochs: name the configuration with the fewest GPU-hours that trains that "
    "many epochs within H hours.",
)
@click.option(
    "--epochs",
    type=Rule("epochs"),
    metavar="E",
    help="Epochs of the training to plan, with --deadline-hours.",
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
@click.option(
    "--traces",
    "traces",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="PyTorch profiler traces in itwinai's layout, DIR/<run name>/torch-traces/"
    "worker_<rank>.<time>.pt.trace.json[.gz] (or trace files; repeatable): each matched to its "
    "worker run by run name, rank and time, for the compute, exposed-communication and idle "
    "shares and the stragglers. Traces logged as artifacts of the worker runs are read "
    "without it.",
)
@cache_options
@target_option(
    f"{TARGET_HELP}: adds the time-to-target table (time from a run's start to its first "
    "point that meets it, speedup and efficiency) and its plots."
)
@click.option("--quiet", "-q", is_flag=True, help="No progress or plot messages on stderr.")
def generate_scalability_report(
    experiment_name: str | None,
    run_names: list[str],
    tracking_uri: str | None,
    timeout: float | None,
    warmup_epochs: int,
    fmt: str,
    output: Path | None,
    html_path: Path | None,
    plot_dir: Path,
    plot_format: str,
    no_plots: bool,
    fail_under_efficiency: float | None,
    gate_on: str,
    baseline: str,
    samples_per_epoch: float | None,
    include_unfinished: bool,
    throughput_source: str,
    rate_config: tuple[str, int] | None,
    scaling: str,
    predict: list[int],
    pue: float | None,
    carbon_intensity: float | None,
    gpu_hour_price: float | None,
    currency: str | None,
    gpus_per_node: int | None,
    max_energy_per_speedup: float | None,
    deadline_hours: float | None,
    epochs: int | None,
    strategy_param: str,
    workers_param: str,
    traces: tuple[Path, ...],
    cache: bool,
    cache_dir: str | None,
    cache_size: int,
    target: Target | None,
    quiet: bool,
) -> None:
    """Read the runs of an experiment and print the scalability report.

    Tables: epoch time with speedup and parallel efficiency, GPU energy and
    utilization, computation vs other, throughput with the input-bottleneck
    verdict. Plots go to --plot-dir.

    \b
    Examples (each works as written after `itwin-report emulate --traces
    mllogs/traces`; other stores: --tracking-uri, e.g. http://127.0.0.1:5000 or
    sqlite:///path/mlflow.db):
      itwin-report generate-scalability-report -e emulated-cluster
      itwin-report generate-scalability-report -e emulated-cluster -r torch-ddp-4,torch-ddp-8
      itwin-report generate-scalability-report -e emulated-cluster --format markdown > r.md
      itwin-report generate-scalability-report -e emulated-cluster --fail-under-efficiency 0.3
      itwin-report generate-scalability-report -e emulated-cluster --baseline per-strategy
      itwin-report generate-scalability-report -e emulated-cluster --samples-per-epoch 25000
      itwin-report generate-scalability-report -e emulated-cluster --predict 64,128
      itwin-report generate-scalability-report -e emulated-cluster --pue 1.2 --gpu-hour-price 2
      itwin-report generate-scalability-report -e emulated-cluster --deadline-hours 2 --epochs 100
      itwin-report generate-scalability-report --strategy-param distributed_strategy
      itwin-report generate-scalability-report -e emulated-cluster --format html -o r.html
      itwin-report generate-scalability-report -e emulated-cluster --html r.html --no-plots
      itwin-report generate-scalability-report -e emulated-cluster --traces mllogs/traces
      itwin-report generate-scalability-report -e emulated-cluster --target val_accuracy>=0.76
    """
    want_page = fmt == "html" or html_path is not None
    # the drawing process starts first: it imports matplotlib while this one imports pandas and
    # reads the store; whatever fails before the figures, it is stopped on the way out
    helper = start_plots(want_page or not no_plots)
    if helper is not None:
        click.get_current_context().call_on_close(helper.close)
    from itwin_report import store
    from itwin_report.api import read_traces
    from itwin_report.render import render
    from itwin_report.report import build_report
    from itwin_report.report.cost import CostFactors
    from itwin_report.report.gate import require_measurements
    from itwin_report.store.http import HttpLimits

    # the rules between options (--currency needs --gpu-hour-price, ...), as the API's
    rules.currency(currency, gpu_hour_price)
    rules.deadline(deadline_hours, epochs)
    costs = CostFactors(pue, carbon_intensity, gpu_hour_price, currency or "", gpus_per_node)
    uri = store.resolve_tracking_uri(tracking_uri)
    outputs = {
        "--output": output,
        "--html": html_path,
        "--plot-dir": None if no_plots else plot_dir,
    }
    trace_files: list[Path] = []
    if traces:
        from itwin_report.traces.analyze import find_traces

        # a folder that does not exist: one line and exit 1, before loading
        trace_files = find_traces(traces)
    conflict = store.check_outputs(uri, outputs, inputs=[*trace_files, *traces])
    if conflict:
        raise Failure(conflict, EXIT_USAGE)
    check_writable(outputs)
    limits, start = HttpLimits(timeout=timeout), time.monotonic()
    data = store.load_experiment(
        uri,
        experiment_name,
        run_names,
        include_unfinished=include_unfinished,
        show_progress=not quiet,
        strategy_param=strategy_param,
        workers_param=workers_param,
        cache=cache_settings(cache, cache_dir, cache_size),
        http=limits,
        extra_metrics=() if target is None else (target.metric,),
    )
    left = max(0.001, limits.seconds - (time.monotonic() - start))  # one deadline for the read
    found = read_traces(data, traces, tracking_uri=uri, timeout=left)
    report = build_report(
        data,
        warmup_epochs=warmup_epochs,
        rate_config=rate_config,
        throughput_source=throughput_source,
        baseline=baseline,
        samples_per_epoch=samples_per_epoch,
        scaling=scaling,
        predict_workers=predict,
        gate=None if fail_under_efficiency is None else (fail_under_efficiency, gate_on),
        costs=costs,
        max_energy_per_speedup=max_energy_per_speedup,
        deadline=None if deadline_hours is None or epochs is None else (deadline_hours, epochs),
        traces=found,
        target=target,
    )
    require_measurements(report)
    wanted = want_page or not no_plots
    files = None if no_plots else plot_format
    plots = make_plots(report, helper, files, want_page) if wanted else None
    page = html_page(report, data, plots) if want_page else ""
    text = page if fmt == "html" else render(report, fmt, styled=styled(fmt, output))
    publish(
        text, output, page, html_path, None if no_plots else plots, plot_dir, plot_format, quiet
    )
    if report.gate is not None and not report.gate.passed:
        raise GateFailed(report.gate.line)
