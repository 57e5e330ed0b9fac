"""Log emulated jobs to MLflow in itwinai's layout (``mlflow_writer`` writes the rows)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from itwin_report.data.rundata import PERFORMANCE_ARTIFACT, PROFILE_ARTIFACT
from itwin_report.emulator import timeline, tracing
from itwin_report.emulator.options import NON_DISTRIBUTED, Config, EmulationOptions
from itwin_report.emulator.params import STRATEGIES, STRATEGY_CLASS, ModelParams
from itwin_report.emulator.target import check_reachable
from itwin_report.store.uri import SQLITE, local_artifact_dir, sqlite_path, store_kind
from itwin_report.util.errors import ReportError, StoreError
from itwin_report.util.masking import mask_text, mask_uri
from itwin_report.util.progress import progress

EPOCH_MS = 1_767_600_000_000  # 2026-01-05T08:00:00Z, the emulated clock's origin
GAP_S = (20.0, 90.0)  # idle time before each job, drawn from the seed
# metrics itwinai 0.4.2 does not log (the throughput references' trainer does)
EXTRA_METRICS = ("local_samples_per_sec", "avg_samples_per_sec")
ITWINAI_PARAMS = ("strategy", "global_rank", "global_world_size", "probing_interval",
                  "distributed_strategy", "batch_size", "epochs")  # fmt: skip

# Called as hook(event, job_index) with event "worker-written" or "job-done".
if TYPE_CHECKING:
    from itwin_report.emulator.mlflow_writer import JobRecord

Hook = Callable[[str, int], None]


@dataclass
class EmulationResult:
    """What an emulation wrote."""

    experiment_name: str
    experiment_id: str
    tracking_uri: str
    artifact_location: str = ""
    jobs: int = 0
    worker_runs: int = 0
    metric_points: int = 0
    seconds: float = 0.0
    job_run_ids: list[str] = field(default_factory=list)
    trace_files: list[Path] = field(default_factory=list)

    @property
    def trace_bytes(self) -> int:
        """Size of the trace files written."""
        return sum(path.stat().st_size for path in self.trace_files)


def job_rng(seed: int, strategy: str, workers: int, repeat: int) -> np.random.Generator:
    """Independent stream per job, so a job's data does not depend on the other jobs."""
    key = (STRATEGIES.index(strategy), workers, repeat)
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


def job_gaps(seed: int, count: int) -> np.ndarray:
    """Seed-derived idle seconds before each job."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1_000_000,)))
    return rng.uniform(*GAP_S, size=count)


def worker_params(
    p: ModelParams, options: EmulationOptions, strategy: str, workers: int, rank: int
) -> dict[str, object]:
    """Params of a worker run: the trainer's, then (unless itwinai-only) every model parameter."""
    out: dict[str, object] = {} if options.itwinai_only else dict(p.as_dict())
    out.update(
        strategy=strategy,
        global_rank=rank,
        global_world_size=workers,
        probing_interval=p.probing_interval,
        distributed_strategy=STRATEGY_CLASS.get(strategy, "NonDistributedStrategy"),
        batch_size=p.batch_size,
        epochs=p.epochs,
    )
    if options.energy_counter:
        out.update(hostname=f"node{rank // p.gpus_per_node:04d}", gpu_index=rank % p.gpus_per_node)
    if not options.itwinai_only:
        out.update(
            samples_per_epoch=p.samples_per_epoch,
            preset=options.preset,
            seed=options.seed,
            scaling=options.scaling,
        )
    return out


COUNTER_START_J = 5.0e6  # the counter's reading when a job starts: energy since the driver loaded


def energy_counter(
    points: list[timeline.Point], interval: float, rank: int
) -> list[timeline.Point]:
    """``gpu_energy_J`` readings consistent with a rank's ``gpu_power_W`` samples.

    Each power sample stands for one probing interval, so the counter grows by ``watts x
    interval`` at each sample: a reading one interval before the first sample (step 0), then
    one with each sample (steps 1..n). The last reading minus the first is then exactly the
    energy the power samples integrate to.
    """
    power = [pt for pt in points if pt[0] == "gpu_power_W"]
    if not power:
        return []
    start = COUNTER_START_J + 1000.0 * rank
    readings = start + np.concatenate([[0.0], np.cumsum([pt[1] for pt in power]) * interval])
    stamps = [power[0][2] - round(interval * 1000), *(pt[2] for pt in power)]
    return [
        ("gpu_energy_J", float(v), int(t), k)
        for k, (v, t) in enumerate(zip(readings.tolist(), stamps, strict=True))
    ]


def job_record(job: timeline.Job, p: ModelParams, options: EmulationOptions) -> JobRecord:
    """The runs of one emulated job, as the writer takes them."""
    from itwin_report.emulator.mlflow_writer import JobRecord, RunRecord

    workers = []
    for out in job.ranks:
        points = out.points
        artifacts = {PROFILE_ARTIFACT: out.profile_csv}
        if options.itwinai_only:
            points = [pt for pt in points if pt[0] not in EXTRA_METRICS]
        elif options.performance_json:
            artifacts[PERFORMANCE_ARTIFACT] = json.dumps(out.performance, indent=2)
        if options.energy_counter:
            points = points + energy_counter(points, p.probing_interval, out.rank)
        workers.append(
            RunRecord(
                name="worker_0 (main)" if out.rank == 0 else f"worker_{out.rank}",
                params=worker_params(p, options, job.strategy, job.workers, out.rank),
                points=points,
                artifacts=artifacts,
            )
        )
    return JobRecord(f"{job.strategy}-{job.workers}", job.start_ms, job.end_ms, workers)


def _prepare_store(uri: str) -> None:
    if store_kind(uri) == SQLITE:
        db = sqlite_path(uri)
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {db.parent}: {exc.strerror}") from exc


def _build(
    p: ModelParams, options: EmulationOptions, repeat: int, config: Config, start: int
) -> timeline.Job:
    q = options.config_params(p, config.workers)
    rng = job_rng(options.seed, config.model, config.workers, repeat)
    label = NON_DISTRIBUTED if config.strategy == NON_DISTRIBUTED else None
    return timeline.build_job(
        q, config.model, config.workers, repeat, start, rng, options.log_ranks(config.workers),
        label,
    )  # fmt: skip


def run_emulation(
    options: EmulationOptions,
    tracking_uri: str,
    show_progress: bool = False,
    hook: Hook | None = None,
    artifact_root: str | None = None,
    migrate: bool = False,
) -> EmulationResult:
    """Emulate every job of ``options`` and log it to ``tracking_uri``.

    Options and target are checked before anything is written (see ``check_target``);
    ``artifact_root`` places a new experiment's artifacts, ``migrate`` lets MLflow upgrade an
    older MLflow SQLite store first.

    Database stores get every run in one transaction: on any exception nothing is kept. Other
    stores are written run by run; on an exception the runs left open are marked KILLED
    (KeyboardInterrupt) or FAILED. MLflow errors become :class:`StoreError`.
    """
    started = time.perf_counter()
    p = options.params()
    upgrade = check_target(tracking_uri, migrate)
    check_reachable(tracking_uri)
    created = new_paths(tracking_uri, options.experiment_name, artifact_root)
    if options.traces is not None:
        first = _first_missing(Path(options.traces))
        created += [first] if first is not None else []
    traces: list[Path] = []
    try:
        _prepare_store(tracking_uri)
        from itwin_report.emulator import mlflow_writer

        if upgrade:
            mlflow_writer.upgrade_store(tracking_uri)

        with mlflow_writer.writing_environment(tracking_uri):
            result = _emulate(options, p, tracking_uri, show_progress, hook, artifact_root, traces)
    except BaseException as exc:
        tracing.remove(traces)
        remove_created(created)
        if isinstance(exc, Exception) and not isinstance(exc, ReportError):
            reason = _os_reason(exc)
            if reason is not None:
                raise StoreError(
                    f"writing to {mask_uri(tracking_uri)} failed: {reason}; nothing was kept"
                ) from None
        raise
    result.trace_files = traces
    result.seconds = time.perf_counter() - started
    return result


def _os_reason(exc: BaseException) -> str | None:
    """A full disk or a failed write, as one short phrase (``None``: not such a failure).

    OSError, sqlite3's errors and the database errors SQLAlchemy wraps them in (``.orig``).
    """
    import sqlite3

    inner = getattr(exc, "orig", None) or exc
    if isinstance(inner, OSError):
        return str(inner.strerror or inner)
    if isinstance(inner, sqlite3.Error):
        return str(inner).splitlines()[0] if str(inner) else type(inner).__name__
    return None


def _first_missing(path: Path) -> Path | None:
    """The outermost folder or file on the way to ``path`` that does not exist yet."""
    path = path.expanduser().absolute()
    if path.exists():
        return None
    missing = path
    while not missing.parent.exists() and missing.parent != missing:
        missing = missing.parent
    return missing


def new_paths(uri: str, experiment: str, artifact_root: str | None) -> list[Path]:
    """What an emulation into ``uri`` would create on this machine (a new SQLite database and
    its side files, a new file store, the new experiment's artifact folder): removed again when
    the emulation fails, so a full disk or an interruption leaves no partial store behind."""
    from itwin_report.emulator.mlflow_writer import artifact_location
    from itwin_report.store.uri import FILE, file_store_path

    kind = store_kind(uri)
    out: list[Path] = []
    if kind == SQLITE:
        db = sqlite_path(uri).expanduser().absolute()
        if not db.exists():
            first = _first_missing(db.parent)
            out += [first] if first is not None else []
            out += [db.with_name(db.name + suffix) for suffix in ("", "-journal", "-wal", "-shm")]
    elif kind == FILE:
        first = _first_missing(file_store_path(uri))
        out += [first] if first is not None else []
    location = artifact_location(uri, experiment, artifact_root)
    local = local_artifact_dir(location) if location else None
    if local is not None:
        first = _first_missing(local)
        out += [first] if first is not None else []
    return out


def remove_created(paths: list[Path]) -> None:
    """Remove files and folders this emulation created (see :func:`new_paths`)."""
    import shutil

    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists() or path.is_symlink():
            with contextlib.suppress(OSError):
                path.unlink()


def _emulate(
    options: EmulationOptions,
    p: ModelParams,
    tracking_uri: str,
    show_progress: bool,
    hook: Hook | None,
    artifact_root: str | None,
    traces: list[Path],
) -> EmulationResult:
    """Write every job; the trace files written are added to ``traces`` as they are written."""
    from itwin_report.emulator import mlflow_writer

    try:
        writer = mlflow_writer.open_writer(tracking_uri)
        name = options.experiment_name
        location = mlflow_writer.artifact_location(tracking_uri, name, artifact_root)
        exp_id, actual_location = writer.experiment(name, location)
        remote = not local_artifact_dir(actual_location)
        if isinstance(writer, mlflow_writer.BulkWriter) and remote:  # uploaded by the client
            writer = mlflow_writer.ClientWriter(tracking_uri)
        _check_empty(writer.count_runs(exp_id), options)
    except ModuleNotFoundError as exc:
        raise StoreError(
            f"no database driver for {mask_uri(tracking_uri)} ({exc.name} is missing); "
            "install it with pip install 'itwin-report[postgres]'"
        ) from None
    except mlflow_writer.MlflowException as exc:
        raise StoreError(mask_text(f"cannot open {mask_uri(tracking_uri)}: {exc}")) from None
    result = EmulationResult(name, exp_id, tracking_uri, actual_location)
    jobs = options.jobs()
    gaps = job_gaps(options.seed, len(jobs))
    clock = EPOCH_MS
    try:
        with progress("Emulating jobs", len(jobs), enabled=show_progress) as advance:
            for index, (repeat, config) in enumerate(jobs):
                start = clock + round(gaps[index] * 1000)
                job = _build(p, options, repeat, config, start)
                clock = job.end_ms
                record = job_record(job, options.config_params(p, config.workers), options)
                if options.traces is not None:
                    traces += write_traces(Path(options.traces), record.name, job, p, options,
                                           config)  # fmt: skip
                on_worker = (lambda i=index: hook("worker-written", i)) if hook else None
                run_id = writer.write_job(exp_id, record, on_worker)
                result.jobs += 1
                result.worker_runs += len(job.ranks)
                result.metric_points += sum(len(w.points) for w in record.workers)
                result.job_run_ids.append(run_id)
                if hook:
                    hook("job-done", index)
                advance(1)
        writer.commit()
    except BaseException as exc:
        with contextlib.suppress(Exception):  # the first error is the one to report
            writer.abort(clock, "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
        if isinstance(exc, mlflow_writer.MlflowException):
            message = f"writing to {mask_uri(tracking_uri)} failed: {exc}"
            raise StoreError(mask_text(message)) from None
        if isinstance(exc, OSError) and not isinstance(exc, ReportError):
            raise StoreError(f"writing the artifacts failed: {exc.strerror or exc}") from None
        raise
    return result


def write_traces(
    root: Path,
    run_name: str,
    job: timeline.Job,
    p: ModelParams,
    options: EmulationOptions,
    config: Config,
) -> list[Path]:
    """One profiler trace per rank of ``job`` in ``root/<run name>/torch-traces``, inside the
    job's start and end; the traces of odd repeats are gzipped (``.pt.trace.json.gz``)."""
    q = options.config_params(p, config.workers)
    specs = tracing.rank_specs(q, config.model, config.workers)
    specs = tracing.placed(
        specs, job.start_ms, job.end_ms, tracing.profiled_start_s(job.train_starts)
    )
    return tracing.write_job(tracing.trace_folder(root, run_name), specs, gz=job.repeat % 2 == 1)


def _check_empty(count: int, options: EmulationOptions) -> None:
    if not options.append and count > 0:
        raise ReportError(
            f"experiment {options.experiment_name!r} already holds runs; pass --append to add "
            "to it or choose another --experiment-name"
        )


def check_target(uri: str, migrate: bool = False) -> bool:
    """Refuse a local store this emulation must not write to; True when it is to be upgraded."""
    from itwin_report.emulator import target
    from itwin_report.store.uri import FILE, file_store_path

    kind = store_kind(uri)
    if kind == SQLITE:
        db = sqlite_path(uri)
        return target.check_schema(db, target.sqlite_state(db), migrate)
    if kind == FILE:
        target.check_file_store(file_store_path(uri))
    return False


def default_artifact_root(uri: str) -> str | None:
    """``--artifact-root`` when not given: ./mllogs/artifacts for a database server's store.

    SQLite stores keep artifacts beside the database and servers decide for themselves (None).
    """
    from itwin_report.store.uri import SQL

    if store_kind(uri) == SQL:
        return str(Path("mllogs", "artifacts").resolve())
    return None
