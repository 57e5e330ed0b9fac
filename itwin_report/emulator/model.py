"""The noise-free performance model: pure functions of (params, strategy, workers).

Times are seconds, sizes bytes, rates samples per second. See ``docs/emulator.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from itwin_report.emulator.params import ModelParams


def nodes(workers: int, gpus_per_node: int) -> int:
    """Nodes a job of ``workers`` GPUs occupies: ceil(N / g)."""
    return math.ceil(workers / gpus_per_node)


def steps_per_epoch(samples_per_epoch: int, workers: int, batch_size: int) -> int:
    """Training steps per epoch: ceil(S / (N * b))."""
    return math.ceil(samples_per_epoch / (workers * batch_size))


def link(p: ModelParams, workers: int) -> tuple[float, float]:
    """(bandwidth B in bytes/s, latency alpha in s) of the ring's slowest link."""
    if nodes(workers, p.gpus_per_node) == 1:
        return p.intra_gb_per_s * 1e9, p.intra_latency_us * 1e-6
    return p.inter_gbit_per_s * 1e9 / 8, p.inter_latency_us * 1e-6


def ring_allreduce_s(grad_bytes: float, workers: int, bandwidth: float, alpha: float) -> float:
    """Ring all-reduce: 2(N-1)/N * G/B + 2(N-1) * alpha (0 for one worker)."""
    if workers <= 1:
        return 0.0
    n = workers
    return 2 * (n - 1) / n * grad_bytes / bandwidth + 2 * (n - 1) * alpha


@dataclass(frozen=True)
class Step:
    """Per-step times of one configuration (seconds)."""

    forward_backward: float  # b / gpu rate * compute factor
    backward: float
    optimizer: float
    comm: float  # device time of the collectives themselves
    hidden: float  # part of comm overlapped with the backward pass
    extra: float  # host-side strategy cost per step (negotiation, bookkeeping, copies)
    collectives: int  # collective calls per step
    spin: float  # device time collectives spend waiting for peers (not wall time)
    input: float  # b / per-GPU loader rate
    straggle: float = 0.0  # the others' wait per step for a slow rank (see slow_ranks)

    @property
    def compute(self) -> float:
        """Device compute per step: forward, backward and optimizer."""
        return self.forward_backward + self.optimizer

    @property
    def exposed_comm(self) -> float:
        """Communication (and strategy overhead) not hidden behind the backward pass."""
        return self.comm - self.hidden + self.extra

    @property
    def busy(self) -> float:
        """Compute plus exposed communication (plus the wait for a straggler): the step time
        without input limits."""
        return self.compute + self.exposed_comm + self.straggle

    @property
    def time(self) -> float:
        """Step time with a prefetching loader: max(compute + exposed comm, input)."""
        return max(self.busy, self.input)

    @property
    def input_bound(self) -> bool:
        """The loader, not the GPU, sets the pace."""
        return self.input > self.busy

    @property
    def loader_wait(self) -> float:
        """Seconds per step the trainer waits for data."""
        return max(0.0, self.input - self.busy)

    @property
    def gpu_busy_share(self) -> float:
        """Share of the step a kernel runs (compute, collectives, spinning, waiting for a
        straggler inside the collective), at most 1."""
        return min(1.0, (self.compute + self.comm + self.spin + self.straggle) / self.time)


def input_rate(p: ModelParams, workers: int) -> float:
    """Per-GPU loader rate: min(node loader / min(N, g), storage / N)."""
    node_share = p.loader_samples_per_sec_per_node / min(workers, p.gpus_per_node)
    return min(node_share, p.storage_samples_per_sec / workers)


def spin_s(p: ModelParams, strategy: str, workers: int) -> float:
    """Waiting for peers inside collective kernels: base + node * (m - 1)^exp (0 alone)."""
    if workers <= 1:
        return 0.0
    m = nodes(workers, p.gpus_per_node)
    base = p.strategy(strategy, "spin_base_ms") * 1e-3
    per_node = p.strategy(strategy, "spin_node_ms") * 1e-3
    return base + per_node * (m - 1) ** p.strategy(strategy, "spin_exp")


def _communication(
    p: ModelParams, strategy: str, workers: int, backward: float
) -> tuple[float, float, float, int]:
    """(comm, hidden, extra, collectives) for one step of ``strategy``."""
    grad = p.grad_mb * 1e6
    bandwidth, alpha = link(p, workers)
    n = workers
    if n <= 1:
        return 0.0, 0.0, 0.0, 0
    volume = 2 * (n - 1) / n * grad / bandwidth
    if strategy == "torch-ddp":
        buckets = math.ceil(p.grad_mb / p.ddp_bucket_mb)
        comm = volume + buckets * (2 * (n - 1) * alpha + p.ddp_launch_us * 1e-6)
        return comm, min(p.ddp_overlap * comm, backward), 0.0, buckets
    if strategy == "horovod":
        fused = math.ceil(p.grad_mb / p.hvd_fusion_mb)
        comm = volume + fused * 2 * (n - 1) * alpha
        negotiation = fused * p.hvd_negotiation_us * 1e-6 * math.log2(n)
        copies = 2 * grad / (p.device_copy_gb_per_s * 1e9)
        return comm, 0.0, negotiation + copies, fused
    if strategy == "deepspeed":
        comm = ring_allreduce_s(grad, n, bandwidth, alpha)  # reduce-scatter + all-gather
        return comm, min(p.ds_overlap * comm, backward), p.ds_partition_ms * 1e-3, 2
    raise ValueError(f"unknown strategy {strategy!r}")


def slow_ranks(p: ModelParams, workers: int) -> range:
    """The ranks whose compute takes ``straggler_factor`` times longer, holding the others
    back: ``straggler_rank``, or with ``straggler_node`` every rank on its node. None when the
    factor is 1, when the job has no such rank, or when every rank of the job would be slow
    (one worker, a one-node job on the slow node: nobody waits for anybody)."""
    rank = p.straggler_rank
    if p.straggler_factor == 1 or rank >= workers:
        return range(0)
    slow = range(rank, rank + 1)
    if p.straggler_node:
        first = rank // p.gpus_per_node * p.gpus_per_node
        slow = range(first, min(first + p.gpus_per_node, workers))
    return slow if len(slow) < workers else range(0)


def step(p: ModelParams, strategy: str, workers: int) -> Step:
    """All per-step times of ``strategy`` on ``workers`` GPUs."""
    fb = p.batch_size / p.gpu_samples_per_sec * p.strategy(strategy, "compute_factor")
    optimizer = p.optimizer_s / workers if strategy == "deepspeed" else p.optimizer_s
    # the others wait for the slow ranks inside the collective
    straggle = (fb + optimizer) * (p.straggler_factor - 1) if slow_ranks(p, workers) else 0.0
    backward = p.backward_share * fb
    comm, hidden, extra, calls = _communication(p, strategy, workers, backward)
    return Step(
        forward_backward=fb,
        backward=backward,
        optimizer=optimizer,
        comm=comm,
        hidden=hidden,
        extra=extra,
        collectives=calls,
        spin=spin_s(p, strategy, workers),
        input=p.batch_size / input_rate(p, workers),
        straggle=straggle,
    )


def epoch_overhead_s(p: ModelParams, strategy: str) -> float:
    """Per-epoch time outside training steps: validation/logging plus the strategy's own."""
    return p.epoch_overhead_s + p.strategy(strategy, "epoch_extra_s")


def is_checkpoint_epoch(p: ModelParams, epoch: int) -> bool:
    """A checkpoint is written at the end of every ``checkpoint_every``-th epoch."""
    return p.checkpoint_every > 0 and (epoch + 1) % p.checkpoint_every == 0


def epoch_times(p: ModelParams, strategy: str, workers: int) -> list[float]:
    """Noise-free epoch times: steps * step + overhead (+ warm-up on 0, + checkpoints)."""
    st = step(p, strategy, workers)
    train = steps_per_epoch(p.samples_per_epoch, workers, p.batch_size) * st.time
    base = train + epoch_overhead_s(p, strategy)
    out = []
    for e in range(p.epochs):
        t = base + (p.warmup_s if e == 0 else 0.0)
        out.append(t + (p.checkpoint_s if is_checkpoint_epoch(p, e) else 0.0))
    return out


def est_samples_per_sec(p: ModelParams, strategy: str, workers: int) -> float:
    """The job's estimate with no input or communication limits: N * b / t_compute."""
    return workers * p.batch_size / step(p, strategy, workers).compute
