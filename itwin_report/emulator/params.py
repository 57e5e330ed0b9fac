"""Parameters of the emulated cluster's performance model, and the named presets.

Every field is a physical quantity with a unit in its name; ``docs/emulator.md`` documents them.
Per-strategy fields carry the strategy's prefix: ``ddp_`` (torch-ddp), ``hvd_`` (horovod),
``ds_`` (deepspeed). This module is light: no numpy, pandas or mlflow.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields, replace
from typing import Any

from itwin_report.util.errors import ReportError

MAX_TRACED_STEPS = 100  # keeps each emulated trace small
STRATEGIES: tuple[str, ...] = ("deepspeed", "horovod", "torch-ddp")
PREFIX: dict[str, str] = {"deepspeed": "ds", "horovod": "hvd", "torch-ddp": "ddp"}
STRATEGY_CLASS: dict[str, str] = {
    "deepspeed": "DeepSpeedStrategy",
    "horovod": "HorovodStrategy",
    "torch-ddp": "TorchDDPStrategy",
}


@dataclass(frozen=True)
class ModelParams:
    """All inputs of the performance model (defaults: the ``default`` preset)."""

    # workload
    epochs: int = 5
    samples_per_epoch: int = 25_000
    batch_size: int = 32  # per GPU
    gpu_samples_per_sec: float = 250.0  # forward + backward, one GPU, no limits
    backward_share: float = 0.65  # share of forward+backward spent in the backward pass
    optimizer_s: float = 0.004  # optimizer step per training step
    grad_mb: float = 102.0  # fp32 gradient volume G (MB = 1e6 bytes)
    sample_mb: float = 0.6  # one input sample as copied host -> device
    # cluster
    gpus_per_node: int = 4
    intra_gb_per_s: float = 150.0  # NVLink-like bus bandwidth (GB/s)
    intra_latency_us: float = 5.0  # per ring step inside a node
    inter_gbit_per_s: float = 200.0  # inter-node link (Gb/s)
    inter_latency_us: float = 12.0  # per ring step across nodes
    pcie_gb_per_s: float = 12.0  # host -> device copies
    # input pipeline
    loader_samples_per_sec_per_node: float = 4_000.0
    storage_samples_per_sec: float = 5_000.0  # shared file system, whole job
    # epoch structure
    setup_s: float = 12.0  # programming time: clock starts this long before the first step
    compile_s: float = 0.0
    warmup_s: float = 8.0  # extra on epoch 0
    epoch_overhead_s: float = 3.0  # validation, logging
    checkpoint_s: float = 4.0
    checkpoint_every: int = 2  # 0: never
    # GPU sampling and power
    probing_interval: float = 1.0
    idle_w: float = 60.0
    board_w: float = 400.0
    overhead_busy: float = 0.35  # busy share during warm-up and per-epoch overhead
    checkpoint_busy: float = 0.02
    # trainer logging and profiling
    log_every_steps: int = 10
    rate_smoothing: float = 0.4
    backlog_steps: int = 8  # outputs held back by a checkpoint, released after it
    profiled_steps: int = 20
    sync_us: float = 40.0  # cudaDeviceSynchronize + cudaStreamSynchronize per step
    profiler_step_us: float = 30.0  # self time of the ProfilerStep* rows per step
    traced_steps: int = 4  # profiler steps per rank in each trace (emulate --traces)
    # a straggler: one rank's (or one node's) compute takes straggler_factor times longer
    straggler_factor: float = 1.0  # 1: none
    straggler_rank: int = 0  # the slow rank; a job with fewer ranks has none
    straggler_node: int = 0  # 1: every rank on straggler_rank's node is slow (a slow node)
    # convergence: rank 0's val_accuracy per epoch (emulator/convergence.py); the epochs to
    # reach conv_target grow as conv_epochs_min * (1 + global batch / conv_critical_batch)
    conv_epochs_min: float = 1.9  # 0: no validation metric
    conv_critical_batch: float = 347.0
    conv_start: float = 0.1
    conv_ceiling: float = 0.8
    conv_target: float = 0.76
    sigma_conv: float = 0.02  # per run: the curve stretched by a mean-one factor
    sigma_val: float = 0.001  # per evaluation, additive
    # noise (multiplicative factors have mean exactly 1; ``noise`` scales every sigma)
    noise: float = 1.0
    sigma_run: float = 0.02
    sigma_epoch: float = 0.03
    sigma_util_pct: float = 1.5
    sigma_power_w: float = 4.0
    sigma_profile: float = 0.02
    # torch-ddp
    ddp_compute_factor: float = 1.0
    ddp_epoch_extra_s: float = 0.0
    ddp_bucket_mb: float = 25.0
    ddp_launch_us: float = 30.0
    ddp_overlap: float = 0.8
    ddp_spin_base_ms: float = 12.0
    ddp_spin_node_ms: float = 6.0
    ddp_spin_exp: float = 1.0
    # horovod
    hvd_compute_factor: float = 1.05
    hvd_epoch_extra_s: float = 0.5
    hvd_fusion_mb: float = 64.0
    hvd_negotiation_us: float = 150.0  # per fused tensor per log2(N)
    device_copy_gb_per_s: float = 300.0  # device-to-device copies (fusion buffer, buckets)
    hvd_spin_base_ms: float = 8.0
    hvd_spin_node_ms: float = 5.0
    hvd_spin_exp: float = 1.0
    # deepspeed (ZeRO stage 1/2)
    ds_compute_factor: float = 1.02
    ds_epoch_extra_s: float = 0.0
    ds_partition_ms: float = 2.0
    ds_overlap: float = 0.5
    ds_spin_base_ms: float = 5.0
    ds_spin_node_ms: float = 4.0
    ds_spin_exp: float = 1.0

    def strategy(self, strategy: str, name: str) -> Any:
        """The per-strategy field ``name`` (e.g. ``compute_factor``) of ``strategy``."""
        return getattr(self, f"{PREFIX[strategy]}_{name}")

    def as_dict(self) -> dict[str, Any]:
        """All fields by name."""
        return dataclasses.asdict(self)


MNIST = ModelParams(
    epochs=5,
    samples_per_epoch=60_000,
    batch_size=64,
    gpu_samples_per_sec=10_000.0,
    backward_share=0.6,
    optimizer_s=0.0008,
    grad_mb=1.7,
    sample_mb=0.003,
    loader_samples_per_sec_per_node=60_000.0,
    storage_samples_per_sec=1_000_000.0,
    setup_s=6.0,
    warmup_s=0.0,
    epoch_overhead_s=0.8225,
    checkpoint_s=0.0,
    checkpoint_every=0,
    idle_w=55.0,
    board_w=400.0,
    log_every_steps=10,
    # calibrated with tools/calibrate_presets.py
    ds_compute_factor=0.8468,
    ds_epoch_extra_s=0.0,
    ds_spin_base_ms=1.7088,
    ds_spin_node_ms=11.0351,
    ds_spin_exp=1.2,
    hvd_compute_factor=1.1936,
    hvd_epoch_extra_s=0.9877,
    hvd_spin_base_ms=3.4818,
    hvd_spin_node_ms=3.1269,
    hvd_spin_exp=0.55,
    ddp_compute_factor=1.2914,
    ddp_epoch_extra_s=0.0298,
    ddp_spin_base_ms=76.1612,
    ddp_spin_node_ms=69.9009,
    ddp_spin_exp=0.7,
)

VIRGO = ModelParams(
    epochs=4,
    samples_per_epoch=24_000,
    batch_size=32,
    gpu_samples_per_sec=140.0,
    backward_share=0.65,
    optimizer_s=0.003,
    grad_mb=60.0,
    sample_mb=1.0,
    loader_samples_per_sec_per_node=2_000.0,
    storage_samples_per_sec=50_000.0,
    setup_s=15.0,
    warmup_s=0.0,
    epoch_overhead_s=2.8709,
    checkpoint_s=0.0,
    checkpoint_every=0,
    log_every_steps=10,
    # calibrated with tools/calibrate_presets.py
    ds_compute_factor=1.1261,
    ds_epoch_extra_s=0.0,
    ds_spin_base_ms=213.8147,
    ds_spin_node_ms=0.0001,
    ds_spin_exp=2.5,
    hvd_compute_factor=1.2202,
    hvd_epoch_extra_s=1.4234,
    hvd_spin_base_ms=285.3026,
    hvd_spin_node_ms=9.3197,
    hvd_spin_exp=0.8,
    ddp_compute_factor=1.2582,
    ddp_epoch_extra_s=1.3598,
    ddp_spin_base_ms=533.7358,
    ddp_spin_node_ms=67.2246,
    ddp_spin_exp=0.7,
)

PRESETS: dict[str, ModelParams] = {
    "default": ModelParams(),
    "mnist": MNIST,
    "virgo": VIRGO,
    "input-bound": replace(
        ModelParams(), loader_samples_per_sec_per_node=600.0, storage_samples_per_sec=2_400.0
    ),
}


def preset(name: str) -> ModelParams:
    """The preset ``name``; ReportError listing the known ones otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        known = ", ".join(PRESETS)
        raise ReportError(f"unknown preset {name!r}; choose one of: {known}") from None


def _convert(name: str, kind: type, text: str) -> Any:
    try:
        number = float(text)
    except ValueError:
        raise ReportError(f"--set {name}={text}: not a number") from None
    if not math.isfinite(number) or number < 0:
        raise ReportError(f"--set {name}={text}: must be a finite value >= 0")
    if kind is int:
        if number != int(number):
            raise ReportError(f"--set {name}={text}: must be a whole number")
        return int(number)
    return number


def with_overrides(params: ModelParams, assignments: list[str] | tuple[str, ...]) -> ModelParams:
    """Apply ``NAME=VALUE`` assignments (``--set``) with type and range checks."""
    types = {f.name: (int if f.type in ("int", int) else float) for f in fields(params)}
    changes: dict[str, Any] = {}
    for item in assignments:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ReportError(f"--set expects NAME=VALUE, got {item!r}")
        if name not in types:
            raise ReportError(
                f"--set {name}: unknown parameter (itwin-report emulate --list-params lists them)"
            )
        changes[name] = _convert(name, types[name], text.strip())
    out = replace(params, **changes)
    validate(out)
    return out


def validate(p: ModelParams) -> None:
    """Reject parameter combinations the model cannot evaluate."""
    positive = (
        "epochs",
        "samples_per_epoch",
        "batch_size",
        "gpu_samples_per_sec",
        "gpus_per_node",
        "intra_gb_per_s",
        "inter_gbit_per_s",
        "pcie_gb_per_s",
        "loader_samples_per_sec_per_node",
        "storage_samples_per_sec",
        "probing_interval",
        "log_every_steps",
        "profiled_steps",
        "traced_steps",
        "ddp_bucket_mb",
        "hvd_fusion_mb",
        "device_copy_gb_per_s",
        "ddp_compute_factor",
        "hvd_compute_factor",
        "ds_compute_factor",
    )
    for name in positive:
        if getattr(p, name) <= 0:
            raise ReportError(f"parameter {name} must be > 0")
    for name in ("backward_share", "overhead_busy", "checkpoint_busy", "ddp_overlap", "ds_overlap"):
        if getattr(p, name) > 1:
            raise ReportError(f"parameter {name} must be between 0 and 1")
    if p.traced_steps > MAX_TRACED_STEPS:
        raise ReportError(f"parameter traced_steps must be at most {MAX_TRACED_STEPS}")
    if p.straggler_factor < 1:
        raise ReportError("parameter straggler_factor must be >= 1 (1: no straggler)")
    if p.straggler_node > 1:
        raise ReportError("parameter straggler_node must be 0 (one slow rank) or 1 (a slow node)")
    if p.rate_smoothing >= 1:
        raise ReportError("parameter rate_smoothing must be below 1")
    if p.board_w < p.idle_w:
        raise ReportError("parameter board_w must be >= idle_w")
    from itwin_report.emulator.convergence import check

    problem = check(p)
    if problem:
        raise ReportError(problem)
