"""Per-job, per-rank time series with seeded noise: epoch times, GPU samples, rates, profile.

Times are seconds since the job's clock started (the worker run's start); monitoring and the
first epoch start ``setup_s`` later. No wall clock is read anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from itwin_report.emulator import convergence, model, profile
from itwin_report.emulator.params import ModelParams

Point = tuple[str, float, int, int]  # key, value, timestamp_ms, step


def mean_one(rng: np.random.Generator, sigma: float, size: int) -> np.ndarray:
    """Log-normal factors with mean exactly 1: exp(sigma * z - sigma^2 / 2)."""
    if sigma <= 0:
        return np.ones(size)
    return np.exp(sigma * rng.standard_normal(size) - sigma**2 / 2)


@dataclass
class Layout:
    """Segments of the emulated training (relative to the first epoch's start)."""

    durations: np.ndarray  # one per segment
    busy: np.ndarray  # busy share of each segment
    epoch_times: np.ndarray
    train_starts: np.ndarray  # start of each epoch's training steps
    step_times: np.ndarray  # per epoch
    checkpoint_windows: list[tuple[float, float]] = field(default_factory=list)


def layout(p: ModelParams, strategy: str, workers: int, factors: np.ndarray) -> Layout:
    """Epoch structure: [warm-up] training steps, overhead, [checkpoint]; scaled by factors."""
    st = model.step(p, strategy, workers)
    steps = model.steps_per_epoch(p.samples_per_epoch, workers, p.batch_size)
    overhead = model.epoch_overhead_s(p, strategy)
    durations: list[float] = []
    busy: list[float] = []
    epochs, starts, windows = [], [], []
    clock = 0.0
    for e, f in enumerate(factors):
        begin = clock
        parts = [(p.warmup_s if e == 0 else 0.0, p.overhead_busy)]
        parts += [(steps * st.time, st.gpu_busy_share), (overhead, p.overhead_busy)]
        parts.append(
            (p.checkpoint_s if model.is_checkpoint_epoch(p, e) else 0.0, p.checkpoint_busy)
        )
        for i, (d, share) in enumerate(parts):
            if i == 1:
                starts.append(clock)
            if i == 3 and d > 0:
                windows.append((clock, clock + d * f))
            durations.append(d * f)
            busy.append(share)
            clock += d * f
        epochs.append(clock - begin)
    return Layout(
        durations=np.asarray(durations),
        busy=np.asarray(busy),
        epoch_times=np.asarray(epochs),
        train_starts=np.asarray(starts),
        step_times=st.time * np.asarray(factors, dtype=float),
        checkpoint_windows=windows,
    )


def utilization(lay: Layout, interval: float) -> np.ndarray:
    """Noise-free utilization (%) of samples k*interval, k = 1..floor(T / interval).

    Sample k is the busy share of [(k-1)*interval, k*interval), read off the cumulative
    busy-time function (piecewise linear, so interpolation at the boundaries is exact).
    """
    edges = np.concatenate([[0.0], np.cumsum(lay.durations)])
    busy = np.concatenate([[0.0], np.cumsum(lay.durations * lay.busy)])
    count = int(np.floor(edges[-1] / interval + 1e-9))
    at = np.arange(count + 1) * interval
    return 100.0 * np.diff(np.interp(at, edges, busy)) / interval


def power(p: ModelParams, util: np.ndarray) -> np.ndarray:
    """Board power for utilization samples: idle + (board - idle) * util / 100."""
    return p.idle_w + (p.board_w - p.idle_w) * util / 100.0


def step_completions(lay: Layout, steps: int, offset: float) -> np.ndarray:
    """Completion time of every training step (global order), ``offset`` added."""
    i = np.arange(1, steps + 1)
    per_epoch = [
        offset + s + i * dt for s, dt in zip(lay.train_starts, lay.step_times, strict=True)
    ]
    return np.concatenate(per_epoch)


@dataclass
class Throughput:
    """Trainer-style throughput points of one worker."""

    steps: np.ndarray  # steps completed at the logging point
    times: np.ndarray  # seconds since the clock started
    received: np.ndarray  # cumulative samples whose outputs were received
    rate: np.ndarray  # local_samples_per_sec (smoothed)
    global_rate: np.ndarray  # avg_samples_per_sec


def throughput(
    completions: np.ndarray,
    batch: int,
    log_every: int,
    smoothing: float,
    checkpoints: list[tuple[float, float]] = (),  # type: ignore[assignment]
    backlog_steps: int = 0,
) -> Throughput:
    """Rate and GlobalRate at every ``log_every``-th step.

    A checkpoint holds back the outputs of ``min(backlog_steps, log_every - 1)`` steps at the
    first logging point after it; the next point receives them (samples are conserved).
    """
    idx = np.arange(log_every - 1, len(completions), log_every)
    steps = idx + 1
    times = completions[idx]
    received = steps.astype(float) * batch
    held = batch * min(backlog_steps, log_every - 1)
    for _, end in checkpoints:
        after = np.nonzero(times > end)[0]
        if held > 0 and len(after) and after[0] + 1 < len(times):
            received[after[0]] -= held
    counts = np.diff(received, prepend=0.0)
    r = counts / np.diff(times, prepend=0.0)
    rate = np.empty_like(r)
    for i, value in enumerate(r):
        rate[i] = value if i == 0 else (1 - smoothing) * value + smoothing * rate[i - 1]
    return Throughput(steps, times, received, rate, received / times)


@dataclass
class RankOutput:
    """What one logging rank writes: metric points, profile CSV, performance record."""

    rank: int
    points: list[Point]
    profile_csv: str
    performance: dict[str, Any]


@dataclass
class Job:
    """One emulated job (a top-level run) and its logging ranks."""

    strategy: str
    workers: int
    repeat: int
    start_ms: int
    total_time: float
    epoch_times: np.ndarray
    ranks: list[RankOutput]
    train_starts: np.ndarray = field(default_factory=lambda: np.zeros(0))  # s since the start

    @property
    def end_ms(self) -> int:
        """Emulated end of the job."""
        return self.start_ms + round(self.total_time * 1000)


def performance_record(p: ModelParams, strategy: str, workers: int, total_time: float) -> dict:
    """performance.json of one worker."""
    st = model.step(p, strategy, workers)
    samples = p.epochs * model.steps_per_epoch(p.samples_per_epoch, workers, p.batch_size)
    samples *= p.batch_size
    return {
        "total_samples": samples,
        "total_time": total_time,
        "samples_per_sec": samples / total_time,
        "compile_time": p.compile_s,
        "programming_time": p.setup_s,
        "est_samples_per_sec": model.est_samples_per_sec(p, strategy, workers),
        "suspected_input_bottleneck": st.loader_wait / st.time > 0.1,
    }


def _ms(start_ms: int, seconds: np.ndarray) -> np.ndarray:
    return start_ms + np.rint(seconds * 1000).astype(np.int64)


def _noisy_profile(rows: list[profile.Row], rng: np.random.Generator, sigma: float) -> list:
    f = mean_one(rng, sigma, len(rows))
    return [
        profile.Row(r.name, r.self_us * x, r.total_us * x, r.calls, r.computation)
        for r, x in zip(rows, f, strict=True)
    ]


def build_job(
    p: ModelParams,
    strategy: str,
    workers: int,
    repeat: int,
    start_ms: int,
    rng: np.random.Generator,
    log_ranks: list[int],
    label: str | None = None,
) -> Job:
    """Emulate one job: noise factors, layout, then each logging rank's series.

    ``strategy`` picks the performance model; ``label`` (default: the same) is the strategy
    the runs log, e.g. ``non-distributed`` for a 1-GPU job.
    """
    label = label or strategy
    factors = mean_one(rng, p.sigma_run * p.noise, 1)[0] * mean_one(
        rng, p.sigma_epoch * p.noise, p.epochs
    )
    lay = layout(p, strategy, workers, factors)
    total = p.setup_s + float(lay.epoch_times.sum())
    steps = model.steps_per_epoch(p.samples_per_epoch, workers, p.batch_size)
    windows = [(a + p.setup_s, b + p.setup_s) for a, b in lay.checkpoint_windows]
    tp = throughput(
        step_completions(lay, steps, p.setup_s),
        p.batch_size,
        p.log_every_steps,
        p.rate_smoothing,
        windows,
        p.backlog_steps,
    )
    util0 = utilization(lay, p.probing_interval)
    k = np.arange(1, len(util0) + 1) * p.probing_interval
    gpu_ms = _ms(start_ms, p.setup_s + k)
    gpu_steps = np.rint(k).astype(np.int64)
    epoch_ends = _ms(start_ms, p.setup_s + np.cumsum(lay.epoch_times))
    rate_ms = _ms(start_ms, tp.times)
    perf = performance_record(p, strategy, workers, total)
    rows = profile.rows(p, strategy, workers)
    out = []
    for rank in log_ranks:
        util = np.clip(util0 + p.sigma_util_pct * p.noise * rng.standard_normal(len(util0)), 0, 100)
        watts = power(p, util) + p.sigma_power_w * p.noise * rng.standard_normal(len(util))
        watts = np.clip(watts, p.idle_w, p.board_w)
        pts: list[Point] = []
        pts += _series("gpu_utilization_percent", util, gpu_ms, gpu_steps)
        pts += _series("gpu_power_W", watts, gpu_ms, gpu_steps)
        pts += _series("local_samples_per_sec", tp.rate, rate_ms, tp.steps)
        pts += _series("avg_samples_per_sec", tp.global_rate, rate_ms, tp.steps)
        pts += losses(p.epochs, steps, epoch_ends, rank == 0)
        if rank == 0:
            pts += _series("epoch_time_s", lay.epoch_times, epoch_ends, np.arange(p.epochs))
        table = _noisy_profile(rows, rng, p.sigma_profile * p.noise)
        csv = profile.to_csv(table, label, workers, rank, p.gpus_per_node)
        out.append(RankOutput(rank, pts, csv, dict(perf)))
    if 0 in log_ranks:  # drawn last: every other series stays as it was without it
        out[log_ranks.index(0)].points += convergence.points(p, workers, epoch_ends, rng)
    starts = p.setup_s + lay.train_starts
    return Job(label, workers, repeat, start_ms, total, lay.epoch_times, out, starts)


def losses(epochs: int, steps: int, epoch_ends_ms: np.ndarray, main: bool) -> list[Point]:
    """itwinai's loss metrics: per-rank losses at step = cumulative batches, global per epoch.

    ``train_loss_epoch`` and ``validation_loss_epoch`` have ``step = steps * (e + 1)`` (the
    rank's cumulative batch count); rank 0 adds ``global_validation_loss_epoch`` with
    ``step = e``. Values: 0.1 + 2.2 * 0.6^e (validation 10 % higher).
    """
    e = np.arange(epochs)
    train = 0.1 + 2.2 * 0.6**e
    batches = steps * (e + 1)
    pts = _series("train_loss_epoch", train, epoch_ends_ms, batches)
    pts += _series("validation_loss_epoch", 1.1 * train, epoch_ends_ms, batches)
    if main:
        pts += _series("global_validation_loss_epoch", 1.1 * train, epoch_ends_ms, e)
    return pts


def _series(key: str, values: np.ndarray, ms: np.ndarray, steps: np.ndarray) -> list[Point]:
    return [
        (key, float(v), int(t), int(s))
        for v, t, s in zip(values.tolist(), ms.tolist(), steps.tolist(), strict=True)
    ]
