"""The ``emulate`` command (light: numpy, pandas and mlflow load only when it runs)."""

from __future__ import annotations

import click

from itwin_report.emulator.options import DEFAULT_EXPERIMENT, EmulationOptions, OptionError
from itwin_report.emulator.params import PRESETS, STRATEGIES
from itwin_report.store import DEFAULT_TRACKING_URI, resolve_tracking_uri
from itwin_report.util.masking import mask_text, mask_uri
from itwin_report.util.text import plural


def _split(text: str, what: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items:
        raise OptionError(f"{what} must list at least one value")
    return items


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in _split(text, "--workers"))
    except ValueError:
        raise OptionError(f"--workers expects comma-separated integers, got {text!r}") from None


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _summary(result, truth_path: str | None, traces: str | None) -> str:
    uri = mask_uri(result.tracking_uri)
    lines = [
        f"experiment:    {mask_text(result.experiment_name)} (id {result.experiment_id})",
        f"tracking URI:  {uri}",
        f"artifacts:     {mask_uri(result.artifact_location) or 'chosen by the server'}",
        f"jobs:          {plural(result.jobs, 'top-level run')}, "
        f"{plural(result.worker_runs, 'worker run')}",
        f"metric points: {result.metric_points}",
        f"took:          {result.seconds:.1f} s",
    ]
    if truth_path:
        lines.append(f"truth:         {truth_path}")
    if traces:
        size = result.trace_bytes / 1e6
        lines.append(
            f"traces:        {plural(len(result.trace_files), 'file')} ({size:.1f} MB) under "
            f"{mask_text(traces)}"
        )
    command = "itwin-report generate-scalability-report --experiment-name "
    command += _quote(mask_text(result.experiment_name))
    if result.tracking_uri != DEFAULT_TRACKING_URI:
        command += f" --tracking-uri {_quote(uri)}"
    lines.append(f"next:          {command}")
    return "\n".join(lines)


def _check_outputs(
    truth_path: str | None, traces: str | None, uri: str, root: str | None, experiment: str
) -> None:
    """--truth and --traces go through the one output check: never the store, its side files
    or the artifact folders (those of its experiments and the one this emulation writes
    into)."""
    from pathlib import Path

    from itwin_report.cli.group import Failure
    from itwin_report.emulator.mlflow_writer import artifact_location
    from itwin_report.store import check_outputs
    from itwin_report.store.uri import local_artifact_dir
    from itwin_report.util.errors import EXIT_USAGE

    location = artifact_location(uri, experiment, root)
    local = local_artifact_dir(location) if location else None
    new_roots = [local.parent] if local is not None else []
    outputs = {"--truth": truth_path, "--traces": traces}
    given = {k: Path(v) for k, v in outputs.items() if v}
    conflict = check_outputs(uri, given, extra=new_roots)
    if conflict:
        raise Failure(conflict, EXIT_USAGE)


def params_listing(name: str) -> str:
    """Every model parameter with its type and its value in preset ``name``, one a line."""
    from dataclasses import fields

    from itwin_report.emulator.params import preset as get_preset

    values = get_preset(name)
    lines = [f"Model parameters of preset {name!r} (change one with --set NAME=VALUE):"]
    for f in fields(values):
        kind = "integer" if f.type in ("int", int) else "number"
        lines.append(f"  {f.name:<34} {kind:<8} {getattr(values, f.name)!r}")
    lines.append("Prefixes: ddp_ torch-ddp, hvd_ horovod, ds_ deepspeed; units are in the names.")
    return "\n".join(lines)


@click.command(
    "emulate",
    epilog="""\b
Examples:
  itwin-report emulate
  itwin-report emulate --preset virgo --repeats 1 --experiment-name virgo
  itwin-report emulate --strategies torch-ddp --workers 2,4 --epochs 3 --set noise=0
  itwin-report emulate --preset input-bound --log-on-workers 0 --truth truth.json
  itwin-report emulate --traces traces --set straggler_factor=1.2 --set straggler_rank=5
  itwin-report emulate --itwinai-only --workers 1,2,4 --log-on-workers 0
  itwin-report emulate --scaling weak --truth weak-truth.json
  itwin-report emulate --tracking-uri postgresql://user@db/mlflow --artifact-root /shared/artifacts
  itwin-report emulate --list-params --preset mnist

\b
Limits (bad values exit 2 before anything is written): --workers 1..4096 each,
--epochs 1..1000, --repeats 1..100, --seed 0..4294967295, at most 20000 worker
runs and about 5 million metric points in all.
""",
)
@click.option(
    "--strategies",
    default=",".join(STRATEGIES),
    show_default=True,
    help="Comma-separated strategies to emulate, e.g. --strategies deepspeed,torch-ddp.",
)
@click.option(
    "--workers",
    default="4,8,16,32",
    show_default=True,
    help="Comma-separated GPU counts per job (1 is logged as itwinai's non-distributed job), "
    "e.g. --workers 1,2,4,8.",
)
@click.option(
    "--epochs",
    type=int,
    default=None,
    help="Epochs per job (default: the preset's), e.g. --epochs 3.",
)
@click.option(
    "--repeats",
    type=int,
    default=2,
    show_default=True,
    help="Jobs per configuration, e.g. --repeats 3.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Noise seed, e.g. --seed 7.")
@click.option(
    "--preset",
    type=click.Choice(list(PRESETS)),
    default="default",
    show_default=True,
    help="Model parameters to start from, e.g. --preset mnist.",
)
@click.option(
    "--gpus-per-node",
    type=int,
    default=None,
    help="GPUs per node (default: the preset's), e.g. --gpus-per-node 8.",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="NAME=VALUE",
    help="Override a model parameter (repeatable), e.g. --set sigma_run=0 --set noise=0.",
)
@click.option(
    "--log-on-workers",
    type=click.Choice(["all", "0"]),
    default="all",
    show_default=True,
    help="Which ranks get a worker run: every rank, or rank 0 only (--log-on-workers 0).",
)
@click.option(
    "--experiment-name",
    default=DEFAULT_EXPERIMENT,
    show_default=True,
    help="MLflow experiment to write, e.g. --experiment-name demo.",
)
@click.option(
    "--tracking-uri",
    default=None,
    help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mllogs/mlflow.db), "
    "e.g. --tracking-uri sqlite:///runs/mlflow.db.",
)
@click.option(
    "--truth",
    "truth_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the noise-free ground truth as JSON, e.g. --truth truth.json.",
)
@click.option(
    "--append", is_flag=True, help="Add runs to an experiment that already holds some (--append)."
)
@click.option(
    "--no-performance-json",
    is_flag=True,
    help="Do not log performance/performance.json artifacts (--no-performance-json).",
)
@click.option(
    "--energy-counter",
    is_flag=True,
    help="Also log each GPU's cumulative energy counter gpu_energy_J (consistent with its "
    "power samples) and each rank's hostname and gpu_index params (--energy-counter).",
)
@click.option(
    "--itwinai-only",
    is_flag=True,
    help="Log only what itwinai 0.4.2 logs: no Rate metrics, performance.json, "
    "samples_per_epoch or model parameters (--itwinai-only).",
)
@click.option(
    "--scaling",
    type=click.Choice(["strong", "weak"]),
    default="strong",
    show_default=True,
    help="strong: the same samples per epoch at every GPU count; weak: samples per epoch "
    "grow with the GPUs (the smallest count keeps the preset's), e.g. --scaling weak.",
)
@click.option(
    "--artifact-root",
    metavar="DIR|URI",
    default=None,
    help="Where new experiments keep their artifacts (default: artifacts/ beside an SQLite "
    "store; for other databases ./mllogs/artifacts), e.g. --artifact-root /shared/artifacts.",
)
@click.option(
    "--migrate",
    is_flag=True,
    help="Upgrade an SQLite store written by an older MLflow in place before writing "
    "(otherwise such a store is refused).",
)
@click.option(
    "--list-params",
    is_flag=True,
    help="List the model parameters --set takes, with their values in --preset, and exit.",
)
@click.option(
    "--traces",
    metavar="DIR",
    default=None,
    help="Also write one small PyTorch profiler trace per rank of every job in itwinai's "
    "layout, DIR/<run name>/torch-traces/worker_<rank>.<time ns>.pt.trace.json (gzipped for "
    "odd repeats), e.g. --traces mllogs/traces.",
)
@click.option("--quiet", "-q", is_flag=True, help="No progress on stderr.")
def emulate_command(
    strategies: str,
    workers: str,
    epochs: int | None,
    repeats: int,
    seed: int,
    preset: str,
    gpus_per_node: int | None,
    overrides: tuple[str, ...],
    log_on_workers: str,
    experiment_name: str,
    tracking_uri: str | None,
    truth_path: str | None,
    append: bool,
    no_performance_json: bool,
    energy_counter: bool,
    itwinai_only: bool,
    scaling: str,
    artifact_root: str | None,
    migrate: bool,
    list_params: bool,
    traces: str | None,
    quiet: bool,
) -> None:
    """Write realistic sample training runs of an emulated GPU cluster to MLflow.

    The performance model's parameters (list them with --list-params) start from --preset and
    are changed one by one with --set NAME=VALUE.
    """
    from itwin_report.util.atomic import write_stdout

    if list_params:
        write_stdout(params_listing(preset))
        return
    options = EmulationOptions(
        strategies=_split(strategies, "--strategies"),
        workers=_ints(workers),
        epochs=epochs,
        repeats=repeats,
        seed=seed,
        preset=preset,
        gpus_per_node=gpus_per_node,
        overrides=overrides,
        log_on_workers=log_on_workers,
        experiment_name=experiment_name,
        append=append,
        performance_json=not no_performance_json,
        itwinai_only=itwinai_only,
        energy_counter=energy_counter,
        scaling=scaling,
        traces=traces,
    )
    options.params()  # fail on bad options before touching the store
    uri = resolve_tracking_uri(tracking_uri)
    from itwin_report.emulator.truth import expected_truth, write_truth
    from itwin_report.emulator.writer import default_artifact_root, run_emulation

    root = artifact_root or default_artifact_root(uri)
    if truth_path or traces:
        _check_outputs(truth_path, traces, uri, root, experiment_name)
    result = run_emulation(
        options, uri, show_progress=not quiet, artifact_root=root, migrate=migrate
    )
    if truth_path:
        write_truth(expected_truth(options), truth_path)
    write_stdout(_summary(result, truth_path, traces))
