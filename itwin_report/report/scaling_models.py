"""Scaling models fitted to mean epoch times: Amdahl, Karp–Flatt, the Universal Scalability Law.

Both fitted models are linear in their coefficients when written for the epoch time ``T(p)`` on
``p`` workers (one worker is the reference, ``T1 = T(1)``):

* Amdahl: ``T(p) = T1 (s + (1 - s)/p)`` = ``c0/p + c1``; serial fraction ``s = c1 / (c0 + c1)``;
* USL: ``T(p) = T1 (1 + σ(p - 1) + κ p(p - 1)) / p`` = ``c0/p + c1 + c2 p``;
  contention ``σ = (c1 + c2)/T1``, coherency ``κ = c2/T1``, peak at ``p* = sqrt((1 - σ)/κ)``.

They are fitted by least squares on relative residuals (rows divided by the measured time, so
a 1 s miss at 100 s weighs like 0.1 s at 10 s), with ``numpy.linalg.lstsq``. Fit quality is R²
on the epoch times and the leave-one-out error (each worker count predicted from a fit without
it, root-mean-square relative error). A prediction interval at a new worker count combines the
coefficients' uncertainty and the residual scatter, ``t(0.975, dof)`` wide, and is never
narrower than the leave-one-out error scaled by how far the prediction extrapolates (so a model
that misses its own points by 3 % is not trusted to 0.5 % at four times the largest count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from itwin_report.report.confidence import t_quantile

MODELS = ("amdahl", "usl")
MIN_POINTS = {"amdahl": 3, "usl": 4}
MIN_R2 = 0.9
PARSIMONY = 0.8  # the USL (one more coefficient) must cut the leave-one-out error by 20 %
MAX_LOO = 0.05  # relative leave-one-out error; beyond it a fit is too poor to extrapolate

PREDICTION_COLUMNS = [
    "strategy",
    "workers",
    "model",
    "avg_epoch_time_s",
    "low_s",
    "high_s",
    "speedup",
    "efficiency",
]
MODEL_COLUMNS = [
    "strategy",
    "model",
    "points",
    "serial_fraction",
    "contention",
    "coherency",
    "peak_workers",
    "r2",
    "loo_error",
    "chosen",
]
KARP_FLATT_COLUMNS = ["strategy", "workers", "karp_flatt"]


def _design(workers: np.ndarray, model: str) -> np.ndarray:
    p = np.asarray(workers, dtype=float)
    cols = [1.0 / p, np.ones_like(p)]
    if model == "usl":
        cols.append(p)
    return np.column_stack(cols)


@dataclass(frozen=True)
class Fit:
    """A least-squares fit of ``model`` to (workers, epoch time) points."""

    model: str
    workers: np.ndarray
    times: np.ndarray
    coef: np.ndarray  # c0, c1[, c2]
    xtx_inv: np.ndarray  # (Xw' Xw)^-1 of the weighted design
    s2: float  # residual variance of the relative residuals
    dof: int
    r2: float
    loo_error: float

    def predict(self, workers: float | np.ndarray) -> np.ndarray:
        """Fitted epoch time at ``workers``."""
        return _design(np.atleast_1d(np.asarray(workers, dtype=float)), self.model) @ self.coef

    def interval(self, workers: float) -> tuple[float, float, float]:
        """(prediction, low, high): the 95 % prediction interval of the epoch time."""
        t = float(self.predict(workers)[0])
        x = _design(np.array([float(workers)]), self.model)[0] / t
        rel_var = self.s2 * (1.0 + float(x @ self.xtx_inv @ x))
        half = t_quantile(self.dof) * math.sqrt(rel_var) if self.dof >= 1 else math.inf
        reach = max(1.0, float(workers) / float(self.workers.max()))
        half = max(half, self.loo_error * reach)
        return t, t * math.exp(-half), t * math.exp(half)

    @property
    def t1(self) -> float:
        """The fitted one-worker epoch time ``T1``."""
        return float(self.coef.sum())

    @property
    def serial_fraction(self) -> float:
        """Amdahl's serial fraction ``s`` (NaN for the USL)."""
        return float(self.coef[1] / self.t1) if self.model == "amdahl" else math.nan

    @property
    def contention(self) -> float:
        return float((self.coef[1] + self.coef[2]) / self.t1) if self.model == "usl" else math.nan

    @property
    def coherency(self) -> float:
        return float(self.coef[2] / self.t1) if self.model == "usl" else math.nan

    @property
    def peak_workers(self) -> float:
        """USL's ``sqrt((1 - σ)/κ)`` = ``sqrt(c0/c2)``; inf without coherency cost."""
        if self.model != "usl" or self.coef[2] <= 0:
            return math.inf if self.model == "usl" else math.nan
        return math.sqrt(float(self.coef[0] / self.coef[2]))


def _solve(workers: np.ndarray, times: np.ndarray, model: str) -> np.ndarray:
    xw = _design(workers, model) / times[:, None]
    coef, *_ = np.linalg.lstsq(xw, np.ones(len(times)), rcond=None)
    return np.asarray(coef)


def fit(workers: np.ndarray, times: np.ndarray, model: str) -> Fit:
    """Fit ``model`` ("amdahl" or "usl"); needs more points than coefficients."""
    p = np.asarray(workers, dtype=float)
    y = np.asarray(times, dtype=float)
    k = 3 if model == "usl" else 2
    if len(p) <= k:
        raise ValueError(f"{model} needs at least {k + 1} worker counts, got {len(p)}")
    coef = _solve(p, y, model)
    xw = _design(p, model) / y[:, None]
    rel = 1.0 - xw @ coef
    dof = len(p) - k
    pred = _design(p, model) @ coef
    ss_tot = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float(((y - pred) ** 2).sum()) / ss_tot if ss_tot > 0 else math.nan
    loo = []
    for i in range(len(p)):
        keep = np.arange(len(p)) != i
        c = _solve(p[keep], y[keep], model)
        loo.append(float((_design(p[i : i + 1], model) @ c)[0]) / y[i] - 1.0)
    return Fit(
        model=model,
        workers=p,
        times=y,
        coef=coef,
        xtx_inv=np.linalg.pinv(xw.T @ xw),
        s2=float((rel**2).sum()) / dof,
        dof=dof,
        r2=r2,
        loo_error=math.sqrt(float(np.mean(np.square(loo)))),
    )


def karp_flatt(workers: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Karp–Flatt serial fraction per worker count, relative to the smallest count.

    ``e = (1/S - 1/n) / (1 - 1/n)`` with ``n = p/p0`` and ``S = T(p0)/T(p)``; NaN at the base.
    """
    p = np.asarray(workers, dtype=float)
    t = np.asarray(times, dtype=float)
    n = p / p.min()
    speedup = t[np.argmin(p)] / t
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (1.0 / speedup - 1.0 / n) / (1.0 - 1.0 / n)
    return np.where(n > 1, e, np.nan)


def karp_flatt_rising(e: np.ndarray) -> bool:
    """Rising serial fraction: the last value above the first by 0.005 and a positive trend."""
    vals = e[~np.isnan(e)]
    if len(vals) < 2:
        return False
    slope = np.polyfit(np.arange(len(vals)), vals, 1)[0]
    return bool(vals[-1] > vals[0] + 0.005 and slope > 0)


@dataclass
class StrategyModels:
    """The fits of one strategy and the model chosen for prediction (None: refused, why says)."""

    strategy: str
    workers: np.ndarray
    times: np.ndarray
    fits: dict[str, Fit]
    chosen: str | None
    why: str


def fit_strategy(strategy: str, workers: np.ndarray, times: np.ndarray) -> StrategyModels:
    """Fit every model the points allow; choose Amdahl unless the USL predicts left-out points
    clearly better (leave-one-out error below :data:`PARSIMONY` times Amdahl's)."""
    order = np.argsort(workers)
    p = np.asarray(workers, dtype=float)[order]
    t = np.asarray(times, dtype=float)[order]
    fits = {m: fit(p, t, m) for m in MODELS if len(p) >= MIN_POINTS[m]}
    usl = fits.get("usl")
    if usl is not None and (usl.coef[2] < 0 or usl.coef[0] <= 0):
        del fits["usl"]  # negative coherency or compute: USL does not describe these points
    if len(p) < MIN_POINTS["amdahl"]:
        why = f"{len(p)} worker count(s) measured; a prediction needs at least 3"
        return StrategyModels(strategy, p, t, fits, None, why)
    if not fits:
        return StrategyModels(strategy, p, t, fits, None, "no model could be fitted")
    best = fits.get("amdahl") or fits["usl"]
    usl = fits.get("usl")
    if usl is not None and usl.loo_error < PARSIMONY * best.loo_error:
        best = usl
    failed = []  # only the criteria the fit misses
    if not best.r2 >= MIN_R2:
        failed.append(f"R² {best.r2:.2f} (needs >= {MIN_R2})")
    if not best.loo_error <= MAX_LOO:
        failed.append(f"leave-one-out error {best.loo_error:.0%} (needs <= {MAX_LOO:.0%})")
    if failed:
        why = f"best fit ({best.model}) is too poor to extrapolate: {', '.join(failed)}"
        return StrategyModels(strategy, p, t, fits, None, why)
    return StrategyModels(strategy, p, t, fits, best.model, "")


def describe(sm: StrategyModels) -> str:
    """A plain sentence: which model fits and what it means."""
    kf = karp_flatt(sm.workers, sm.times)
    trend = ""
    if karp_flatt_rising(kf):
        trend = (
            f" The Karp–Flatt serial fraction rises from {kf[1]:.3f} to "
            f"{kf[-1]:.3f}: overhead grows with the worker count (communication, "
            "synchronisation), not a fixed serial part."
        )
    elif len(kf[~np.isnan(kf)]) >= 2:
        trend = " The Karp–Flatt serial fraction stays roughly constant: a fixed serial part."
    if sm.chosen is None:
        return f"{sm.strategy}: no scaling model fitted ({sm.why}).{trend}"
    f = sm.fits[sm.chosen]
    quality = f"R² {f.r2:.3f}, leave-one-out error {f.loo_error:.1%}"
    if f.model == "usl":
        peak = f.peak_workers
        where = (
            f"epoch time stops falling near {peak:.0f} workers"
            if math.isfinite(peak)
            else "no peak"
        )
        text = (
            f"{sm.strategy}: the Universal Scalability Law fits best ({quality}); contention "
            f"σ = {f.contention:.4f}, coherency κ = {f.coherency:.2e}; {where}."
        )
    else:
        limit = 1.0 / f.serial_fraction if f.serial_fraction > 0 else math.inf
        bound = f"speedup over one GPU is bounded by {limit:.0f}x" if math.isfinite(limit) else ""
        text = (
            f"{sm.strategy}: Amdahl's law fits best ({quality}); serial fraction "
            f"{f.serial_fraction:.4f}" + (f", so {bound}." if bound else ".")
        )
    return text + trend


def config_means(epoch_time: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per strategy: (workers, mean epoch time) of the rows with a positive time."""
    out = {}
    usable = epoch_time[epoch_time["avg_epoch_time_s"] > 0]
    for strategy, group in usable.groupby("strategy", sort=True):
        out[str(strategy)] = (
            group["workers"].to_numpy(dtype=float),
            group["avg_epoch_time_s"].to_numpy(dtype=float),
        )
    return out


def fit_all(epoch_time: pd.DataFrame) -> list[StrategyModels]:
    """Fit every strategy of the epoch-time table."""
    return [fit_strategy(s, p, t) for s, (p, t) in config_means(epoch_time).items()]


def models_table(models: list[StrategyModels]) -> pd.DataFrame:
    """One row per (strategy, fitted model): parameters, quality, and whether it is chosen."""
    rows = []
    for sm in models:
        for name, f in sm.fits.items():
            rows.append(
                {
                    "strategy": sm.strategy,
                    "model": name,
                    "points": len(f.workers),
                    "serial_fraction": f.serial_fraction,
                    "contention": f.contention,
                    "coherency": f.coherency,
                    "peak_workers": f.peak_workers,
                    "r2": f.r2,
                    "loo_error": f.loo_error,
                    "chosen": sm.chosen == name,
                }
            )
    return pd.DataFrame(rows, columns=MODEL_COLUMNS)


def karp_flatt_table(models: list[StrategyModels]) -> pd.DataFrame:
    """Karp–Flatt serial fraction per strategy and worker count (base count left out)."""
    rows = []
    for sm in models:
        e = karp_flatt(sm.workers, sm.times)
        for w, v in zip(sm.workers, e, strict=True):
            if not math.isnan(v):
                rows.append({"strategy": sm.strategy, "workers": int(w), "karp_flatt": float(v)})
    frame = pd.DataFrame(rows, columns=KARP_FLATT_COLUMNS)
    return frame.astype({"workers": "int64"}) if len(frame) else frame


def predict(models: list[StrategyModels], targets: list[int]) -> tuple[pd.DataFrame, list[str]]:
    """Prediction rows for ``targets`` per strategy with a chosen model, and refusals."""
    rows, refusals = [], []
    for sm in models if targets else []:
        if sm.chosen is None:
            refusals.append(f"no prediction for {sm.strategy}: {sm.why}")
            continue
        f = sm.fits[sm.chosen]
        base_p, base_t = float(sm.workers[0]), float(sm.times[0])
        for w in targets:
            t, low, high = f.interval(float(w))
            if not t > 0:
                refusals.append(
                    f"no prediction for {sm.strategy} at {w} workers: the {f.model} fit "
                    "gives no positive epoch time there"
                )
                continue
            speedup = base_t / t
            rows.append(
                {
                    "strategy": sm.strategy,
                    "workers": int(w),
                    "model": f.model,
                    "avg_epoch_time_s": t,
                    "low_s": low,
                    "high_s": high,
                    "speedup": speedup,
                    "efficiency": speedup * base_p / w,
                }
            )
    frame = pd.DataFrame(rows, columns=PREDICTION_COLUMNS)
    return (frame.astype({"workers": "int64"}) if len(frame) else frame), refusals
