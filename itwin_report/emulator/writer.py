"""Log emulated jobs to MLflow the way itwinai's trainer does (via ``RunWriter``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from itwin_report.emulator import timeline
from itwin_report.emulator.options import EmulationOptions
from itwin_report.emulator.params import STRATEGIES, STRATEGY_CLASS, ModelParams
from itwin_report.errors import ReportError, StoreError
from itwin_report.progress import progress
from itwin_report.schema import PERFORMANCE_ARTIFACT, PROFILE_ARTIFACT

if TYPE_CHECKING:
    from itwin_report.store.mlflow_api import RunWriter

EPOCH_MS = 1_767_600_000_000  # 2026-01-05T08:00:00Z, the emulated clock's origin
GAP_S = (20.0, 90.0)  # idle time before each job, drawn from the seed

# Called as hook(event, job_index) with event "worker-written" or "job-done".
Hook = Callable[[str, int], None]


@dataclass
class EmulationResult:
    """What an emulation wrote."""

    experiment_name: str
    experiment_id: str
    tracking_uri: str
    jobs: int = 0
    worker_runs: int = 0
    metric_points: int = 0
    seconds: float = 0.0
    job_run_ids: list[str] = field(default_factory=list)


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
    """Params of a worker run: the trainer's, then every model parameter."""
    out: dict[str, object] = dict(p.as_dict())
    out.update(
        strategy=strategy,
        global_rank=rank,
        global_world_size=workers,
        probing_interval=p.probing_interval,
        samples_per_epoch=p.samples_per_epoch,
        batch_size=p.batch_size,
        distributed_strategy=STRATEGY_CLASS[strategy],
        preset=options.preset,
        seed=options.seed,
    )
    return out


def _prepare_store(uri: str) -> None:
    if uri.startswith("sqlite:///"):
        db = Path(uri.removeprefix("sqlite:///"))
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {db.parent}: {exc.strerror}") from exc


def _write_job(
    writer: RunWriter,
    exp_id: str,
    job: timeline.Job,
    p: ModelParams,
    options: EmulationOptions,
    open_runs: list[str],
    hook: Hook | None,
    index: int,
) -> tuple[str, int]:
    """Write one job; ``open_runs`` always lists the runs created and not yet ended."""
    parent = writer.create_run(exp_id, f"{job.strategy}-{job.workers}", job.start_ms)
    open_runs.append(parent)
    ids = []
    for out in job.ranks:
        name = "worker_0 (main)" if out.rank == 0 else f"worker_{out.rank}"
        ids.append(writer.create_run(exp_id, name, job.start_ms, parent_run_id=parent))
        open_runs.append(ids[-1])
    points = 0
    for run_id, out in zip(ids, job.ranks, strict=True):
        params = worker_params(p, options, job.strategy, job.workers, out.rank)
        writer.log_batch(run_id, out.points, params)
        writer.log_text(run_id, out.profile_csv, PROFILE_ARTIFACT)
        if options.performance_json:
            writer.log_text(run_id, json.dumps(out.performance, indent=2), PERFORMANCE_ARTIFACT)
        points += len(out.points)
        if hook:
            hook("worker-written", index)
        writer.end_run(run_id, job.end_ms)
        open_runs.remove(run_id)
    writer.end_run(parent, job.end_ms)
    open_runs.remove(parent)
    return parent, points


def _check_empty(writer: RunWriter, exp_id: str, options: EmulationOptions) -> None:
    if not options.append and writer.count_runs(exp_id) > 0:
        name = options.experiment_name
        raise ReportError(
            f"experiment {name!r} already holds runs; pass --append to add to it "
            "or choose another --experiment-name"
        )


def run_emulation(
    options: EmulationOptions,
    tracking_uri: str,
    show_progress: bool = False,
    hook: Hook | None = None,
) -> EmulationResult:
    """Emulate every job of ``options`` and log it to ``tracking_uri``.

    On any exception the runs left open are marked KILLED (KeyboardInterrupt) or FAILED and
    the exception propagates; MLflow errors become :class:`StoreError`.
    """
    started = time.perf_counter()
    p = options.params()
    _prepare_store(tracking_uri)
    from itwin_report.store import mlflow_api

    writer = mlflow_api.RunWriter(tracking_uri)
    name = options.experiment_name
    exp_id = writer.experiment_id(name, mlflow_api.default_artifact_location(tracking_uri, name))
    _check_empty(writer, exp_id, options)
    result = EmulationResult(name, exp_id, tracking_uri)
    jobs = options.jobs()
    gaps = job_gaps(options.seed, len(jobs))
    clock = EPOCH_MS
    open_runs: list[str] = []
    try:
        with progress("Emulating jobs", len(jobs), enabled=show_progress) as advance:
            for index, (repeat, strategy, workers) in enumerate(jobs):
                start = clock + round(gaps[index] * 1000)
                rng = job_rng(options.seed, strategy, workers, repeat)
                job = timeline.build_job(
                    p, strategy, workers, repeat, start, rng, options.log_ranks(workers)
                )
                clock = job.end_ms
                run_id, points = _write_job(writer, exp_id, job, p, options, open_runs, hook, index)
                result.jobs += 1
                result.worker_runs += len(job.ranks)
                result.metric_points += points
                result.job_run_ids.append(run_id)
                if hook:
                    hook("job-done", index)
                advance(1)
    except BaseException as exc:
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        _close(writer, open_runs, clock, status)
        if isinstance(exc, mlflow_api.mlflow_exception()):
            raise StoreError(f"writing to {tracking_uri} failed: {exc}") from exc
        raise
    result.seconds = time.perf_counter() - started
    return result


def _close(writer: RunWriter, open_runs: list[str], end_ms: int, status: str) -> None:
    """Mark the runs left open as ended with ``status`` (best effort, children first)."""
    for run_id in reversed(open_runs):
        try:
            writer.end_run(run_id, end_ms, status)
        except Exception:  # the original error matters more than this one
            continue
