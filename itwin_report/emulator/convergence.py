"""The emulated validation metric: how quality grows with the epochs seen and the global batch.

Large-batch model (the empirical model of McCandlish et al., 2018, "An Empirical Model of
Large-Batch Training", in epochs): the epochs needed to reach a quality target grow with the
global batch ``B`` past a critical batch size ``B_crit``,

    E(B) = E_min * (1 + B / B_crit)

(``conv_epochs_min``, ``conv_critical_batch``): a small batch needs about ``E_min`` epochs, a
batch of ``B_crit`` twice as many, and beyond it the extra GPUs mostly buy more epochs. The
metric (``val_accuracy``, higher is better) after ``e`` epochs approaches a ceiling,

    acc(e) = ceiling - (ceiling - start) * exp(-e / tau),  tau = E(B) / ln((ceiling - start)
                                                                       / (ceiling - target))

so that ``acc(E(B)) = target`` exactly (``conv_start``, ``conv_ceiling``, ``conv_target``). Each
run's ``tau`` is multiplied by a mean-one noise factor (``sigma_conv``) and each evaluation gets
additive noise (``sigma_val``), both times ``noise``. Rank 0 logs it as itwinai logs its
validation metrics: one point per epoch at the epoch's end, here with step = epochs completed.

The truth of a configuration is noise-free: the first evaluation (epoch ``e`` = 1, 2, ...) whose
metric meets the target, and the time from the job's start to that epoch's end.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from itwin_report.emulator.params import ModelParams

METRIC = "val_accuracy"
Point = tuple[str, float, int, int]


def global_batch(p: ModelParams, workers: int) -> int:
    """Samples per training step of the whole job: per-GPU batch x GPUs."""
    return p.batch_size * workers


def epochs_needed(p: ModelParams, workers: int) -> float:
    """E(B): the (fractional) epochs the noise-free curve needs to meet the target."""
    return p.conv_epochs_min * (1.0 + global_batch(p, workers) / p.conv_critical_batch)


def accuracy(p: ModelParams, workers: int, epochs_seen: np.ndarray, factor: float = 1.0) -> Any:
    """The metric after ``epochs_seen`` epochs (``factor`` stretches the curve)."""
    tau = epochs_needed(p, workers) * factor / _log_gap(p)
    return p.conv_ceiling - (p.conv_ceiling - p.conv_start) * np.exp(-epochs_seen / tau)


def _log_gap(p: ModelParams) -> float:
    return math.log((p.conv_ceiling - p.conv_start) / (p.conv_ceiling - p.conv_target))


def target_text(p: ModelParams) -> str:
    """The target as ``--target`` takes it."""
    return f"{METRIC}>={p.conv_target:g}"


def enabled(p: ModelParams) -> bool:
    return p.conv_epochs_min > 0


def points(
    p: ModelParams, workers: int, epoch_ends_ms: np.ndarray, rng: np.random.Generator
) -> list[Point]:
    """Rank 0's ``val_accuracy`` points, one per epoch end, step = epochs completed."""
    if not enabled(p):
        return []
    sigma = p.sigma_conv * p.noise
    factor = float(np.exp(sigma * rng.standard_normal() - sigma * sigma / 2))
    seen = np.arange(1, len(epoch_ends_ms) + 1, dtype=float)
    values = accuracy(p, workers, seen, factor)
    values = values + p.sigma_val * p.noise * rng.standard_normal(len(seen))
    return [
        (METRIC, float(v), int(t), int(e))
        for v, t, e in zip(values.tolist(), epoch_ends_ms.tolist(), seen.tolist(), strict=True)
    ]


def truth(p: ModelParams, workers: int, epoch_times: list[float]) -> dict[str, Any]:
    """Noise-free epochs and time to target of one configuration (None: not reached)."""
    out: dict[str, Any] = {
        "global_batch_size": global_batch(p, workers),
        "epochs_needed": epochs_needed(p, workers) if enabled(p) else None,
        "reaches_target": False,
        "epochs_to_target": None,
        "time_to_target_s": None,
    }
    if not enabled(p):
        return out
    seen = np.arange(1, len(epoch_times) + 1, dtype=float)
    met = np.flatnonzero(accuracy(p, workers, seen) >= p.conv_target)
    if len(met):
        e = int(met[0]) + 1
        out.update(
            reaches_target=True,
            epochs_to_target=e,
            time_to_target_s=p.setup_s + float(sum(epoch_times[:e])),
        )
    return out


def check(p: ModelParams) -> str:
    """Why the convergence parameters cannot be used ("" when they can)."""
    if p.conv_epochs_min < 0:
        return "parameter conv_epochs_min must be >= 0 (0: no validation metric)"
    if p.conv_critical_batch <= 0:
        return "parameter conv_critical_batch must be > 0"
    if not p.conv_start < p.conv_target < p.conv_ceiling:
        return "parameters must satisfy conv_start < conv_target < conv_ceiling"
    if p.sigma_conv < 0 or p.sigma_val < 0:
        return "parameters sigma_conv and sigma_val must be >= 0"
    return ""
