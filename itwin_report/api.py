"""The Python API: what the command line does, callable from a notebook or a script.

    import itwin_report as ir

    data = ir.load("sqlite:///mllogs/mlflow.db", "emulated-cluster")
    report = ir.build(data, predict=[64, 128])
    report.epoch_time            # a DataFrame with the documented columns
    report.to_json()             # what --format json prints
    report.figures()             # name -> matplotlib Figure
    result = ir.compare(baseline_report, report)
    result.table                 # one row per configuration and metric
    report = ir.build(data, traces="logs_torch_profiler")   # profiler traces, itwinai's layout

Errors are :class:`~itwin_report.util.errors.ReportError` subclasses with the CLI's exit codes;
every argument is checked by the command line's own rules (:mod:`itwin_report.options`), and a
refused one is a ``BadOption`` (exit code 2) with the command line's words.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from itwin_report.analysis.comparison import Comparison, Side
    from itwin_report.data.rundata import RunData
    from itwin_report.render.notebook import Report
    from itwin_report.report import Report as ReportModel
    from itwin_report.traces.analyze import RunTraces

TracePaths = str | Path | Sequence[str | Path]


def load(
    tracking_uri: str | None = None,
    experiment: str | None = None,
    run_names: Sequence[str] | str = (),
    *,
    include_unfinished: bool = False,
    strategy_param: str = "strategy",
    workers_param: str = "global_world_size",
    progress: bool = False,
    cache: bool = True,
    cache_dir: str | Path | None = None,
    cache_size: str | int | None = None,
    timeout: float | None = None,
    metrics: Sequence[str] = (),
) -> RunData:
    """Read one experiment's worker runs from an MLflow tracking store.

    ``tracking_uri``: an SQLite, PostgreSQL, file-store or ``http(s)://`` URI (default:
    ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mllogs/mlflow.db``); ``experiment``: its name
    (optional when only one experiment holds runs); ``timeout``: seconds the whole read of an
    ``http(s)://`` store may take (default 60). ``metrics``: metric keys to read besides
    the report's own, such as the validation metric of ``build(data, target=...)``. Nothing in
    the store is modified.

    Over ``http(s)://`` the metric histories of finished runs are kept in a local cache
    (``cache_dir``, default ``$XDG_CACHE_HOME/itwin-report``, else ``~/.cache/itwin-report``;
    at most ``cache_size``, e.g. ``"2GB"``, default 1 GiB) and read from the server again only
    when its run listing shows them changed; ``cache=False`` reads everything from the server.
    """
    from itwin_report import options, store
    from itwin_report.store.http import HttpLimits
    from itwin_report.store.http_cache import CacheSettings

    folder = None if cache_dir is None else _paths(cache_dir, "cache_dir")[0]
    settings = CacheSettings.from_options(options.boolean("cache", cache), folder, cache_size)

    uri = store.resolve_tracking_uri(_uri(tracking_uri))
    return store.load_experiment(
        uri,
        options.text("experiment", experiment, optional=True),
        options.run_names(run_names),
        include_unfinished=options.boolean("include_unfinished", include_unfinished),
        show_progress=options.boolean("progress", progress),
        strategy_param=options.text("strategy_param", strategy_param),
        workers_param=options.text("workers_param", workers_param),
        cache=settings,
        http=HttpLimits(timeout=timeout),
        extra_metrics=[str(m) for m in metrics],
    )


def _uri(value: Any) -> str | None:
    """A tracking URI given as text or a path (None: the default)."""
    from itwin_report.util.errors import BadOption

    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Path):
        return str(value)
    raise BadOption(f"--tracking-uri: expected a URI or a path, got {value!r}")


def build(
    data: RunData,
    *,
    warmup_epochs: int = 1,
    baseline: str = "auto",
    scaling: str = "auto",
    predict: Sequence[int] | str = (),
    samples_per_epoch: float | None = None,
    throughput_source: str = "auto",
    rate_config: tuple[str, int] | str | None = None,
    fail_under_efficiency: float | None = None,
    gate_on: str = "epoch-time",
    pue: float | None = None,
    carbon_intensity: float | None = None,
    gpu_hour_price: float | None = None,
    currency: str = "",
    gpus_per_node: int | None = None,
    max_energy_per_speedup: float | None = None,
    deadline_hours: float | None = None,
    epochs: int | None = None,
    traces: TracePaths | RunTraces | None = None,
    target: str | None = None,
) -> Report:
    """Aggregate loaded runs into a :class:`Report` (pure: no I/O, unless ``traces`` names
    files to read): the report's tables as DataFrames, with ``to_json()``, ``to_text()``,
    ``to_html()``, ``figures()`` and a Jupyter display.

    ``traces``: profiler traces, as the command's ``--traces``: a folder in itwinai's layout
    (``<run name>/torch-traces/worker_<rank>.<time>.pt.trace.json[.gz]``), trace files, a list
    of them, or what :func:`read_traces` returned (which can add the traces logged as
    artifacts of the worker runs). They give the time breakdown its compute, exposed
    communication and idle shares (``report.trace_ranks`` per rank) and name stragglers.

    The options are the report command's; with ``fail_under_efficiency`` the report carries the
    gate's verdict (``report.gate``) instead of raising. The energy and cost options
    (``pue``, ``carbon_intensity``, ``gpu_hour_price``, ``currency``, ``gpus_per_node``,
    ``max_energy_per_speedup``, ``deadline_hours`` with ``epochs``) are the command's too: a
    value out of range raises a ReportError with exit code 2.

    ``target``: ``"val_accuracy>=0.76"`` or ``"val_loss<=0.3"`` (``--target``): adds
    ``report.time_to_target``; load the metric with ``load(..., metrics=["val_accuracy"])``.
    A target without a bound, another operator or a bound that is not finite raises a
    ReportError with exit code 2.
    """
    from itwin_report.options import ReportOptions
    from itwin_report.render.notebook import Report
    from itwin_report.report import build_report
    from itwin_report.report.cost import CostFactors
    from itwin_report.traces.analyze import RunTraces

    _require_data(data)
    o = ReportOptions.of(
        warmup_epochs=warmup_epochs,
        baseline=baseline,
        scaling=scaling,
        predict=predict,
        samples_per_epoch=samples_per_epoch,
        throughput_source=throughput_source,
        rate_config=rate_config,
        fail_under_efficiency=fail_under_efficiency,
        gate_on=gate_on,
        pue=pue,
        carbon_intensity=carbon_intensity,
        gpu_hour_price=gpu_hour_price,
        currency=currency,
        gpus_per_node=gpus_per_node,
        max_energy_per_speedup=max_energy_per_speedup,
        deadline_hours=deadline_hours,
        epochs=epochs,
    )
    gate = None if o.fail_under_efficiency is None else (o.fail_under_efficiency, o.gate_on)
    if traces is not None and not isinstance(traces, RunTraces):
        traces = read_traces(data, traces)
    report = build_report(
        data,
        warmup_epochs=o.warmup_epochs,
        rate_config=o.rate_config,
        throughput_source=o.throughput_source,
        baseline=o.baseline,
        samples_per_epoch=o.samples_per_epoch,
        scaling=o.scaling,
        predict_workers=list(o.predict),
        gate=gate,
        costs=CostFactors(o.pue, o.carbon_intensity, o.gpu_hour_price, o.currency, o.gpus_per_node),
        max_energy_per_speedup=o.max_energy_per_speedup,
        deadline=(o.deadline_hours, o.epochs),
        traces=traces,
        target=target,
    )
    return Report.of(report)


def _require_data(data: Any) -> None:
    """BadOption unless ``data`` is what :func:`load` returned."""
    from itwin_report.data.rundata import RunData
    from itwin_report.util.errors import BadOption

    if not isinstance(data, RunData):
        raise BadOption(f"data: expected the runs ir.load returned, got {type(data).__name__}")


def _paths(paths: Any, name: str = "traces") -> list[Path]:
    """Paths: one path or text, or (for ``traces``) a sequence of them."""
    from itwin_report import options
    from itwin_report.util.errors import BadOption

    if isinstance(paths, str | Path):
        return [Path(paths)]
    many = name == "traces" and isinstance(paths, Sequence)
    if many and all(isinstance(p, str | Path) for p in paths):
        return [Path(p) for p in paths]
    what = "a path or a list of paths" if name == "traces" else "a path"
    raise BadOption(f"{options.flag(name)}: expected {what}, got {paths!r}")


def read_traces(
    data: RunData,
    paths: TracePaths = (),
    *,
    tracking_uri: str | None = None,
    jobs: int | None = None,
    timeout: float | None = None,
) -> RunTraces:
    """Profiler traces matched to ``data``'s worker runs, each read once (``jobs`` processes
    at most): the files and folders in ``paths`` and, with ``tracking_uri`` (the store ``data``
    was loaded from), the traces logged as artifacts of its worker runs (``timeout``: seconds
    the whole read of an ``http(s)://`` store may take, default 60).

    A path that does not exist raises a ReportError (exit code 1); traces that match no worker
    run, or several, are warnings naming the file (``docs/traces.md``).
    """
    from itwin_report import options, store
    from itwin_report.store.http import HttpLimits
    from itwin_report.traces.analyze import RunTraces, find_traces, layout_files, run_traces
    from itwin_report.traces.match import TraceFile
    from itwin_report.traces.reader import is_trace_name

    _require_data(data)
    given = _paths(paths)
    jobs = options.number("jobs", jobs)
    tracking_uri = _uri(tracking_uri)
    limits = HttpLimits(timeout=timeout)
    found = find_traces(given)
    files, notes = layout_files(found, set(data.runs["run_name"]), given)

    def runs() -> list[dict[str, Any]]:
        return [{str(k): v for k, v in r.items()} for r in data.runs.to_dict("records")]

    if tracking_uri is None:
        out = run_traces(runs(), files, jobs) if files else RunTraces()
        out.warnings[:0] = notes
        return out
    with store.logged_traces(tracking_uri, data, is_trace_name, limits) as logged:
        files += [TraceFile(t.path, t.run_id, t.label) for t in logged.traces]
        out = run_traces(runs(), files, jobs) if files else RunTraces()
    out.warnings[:0] = [*notes, *logged.warnings]
    return out


def _side(value: Any, name: str) -> Side:
    from itwin_report.analysis.comparison import load_side_file, side_from_dict
    from itwin_report.render.comparison import side_from_report
    from itwin_report.report import Report

    if isinstance(value, Report):
        return side_from_report(value, name)
    if isinstance(value, dict):
        return side_from_dict(value, name)
    if not isinstance(value, str | Path):
        from itwin_report.util.errors import BadOption

        raise BadOption(
            f"{name}: expected a report, a JSON object or a saved report's path, "
            f"got {type(value).__name__}"
        )
    return load_side_file(Path(value))


def compare(
    baseline: ReportModel | dict | str | Path,
    current: ReportModel | dict | str | Path,
    *,
    max_regression: float = 0.05,
    allow_missing: bool = False,
    metrics: str | list[str] | None = None,
    target: str | None = None,
) -> Comparison:
    """Compare two reports (built reports, JSON objects, or saved ``--format json`` files).

    ``metrics``: what is compared and gated, as ``--metrics`` takes it (``"epoch-time,energy"``
    or a list of those names); None: all. ``target``: ``"val_accuracy>=0.76"`` (``--target``),
    the quality target both reports' times to target must be for (build them with it); a side
    without it or with another raises :class:`~itwin_report.util.errors.DataError`.
    ``result.table`` has one row per configuration and metric, ``result.overall`` each metric's
    mean change over the configurations, ``result.unreached`` the configurations whose runs on a
    side never reached the target;
    ``compare.gate_error(result)`` is the error the ``compare`` command would exit with (None
    when it passes).
    """
    from itwin_report import options
    from itwin_report.analysis.comparison import compare_sides, pick_metrics

    threshold = options.number("max_regression", max_regression)
    missing = options.boolean("allow_missing", allow_missing)
    picked = pick_metrics(metrics)  # checked before anything is read
    goal = options.target(target)
    return compare_sides(
        _side(baseline, "BASELINE"), _side(current, "CURRENT"), threshold, missing, picked, goal
    )
