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
A prediction the input ceiling decides is that measured floor, with the floor's own interval
(over its runs) widened by the same reach, and the model "input ceiling".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from itwin_report.analysis.intervals import t_quantile

MODELS = ("amdahl", "usl")
MIN_POINTS = {"amdahl": 3, "usl": 4}
MIN_R2 = 0.9
PARSIMONY = 0.8  # the USL (one more coefficient) must cut the leave-one-out error by 20 %
MAX_LOO = 0.05  # relative leave-one-out error; beyond it a fit is too poor to extrapolate

BASE = ["base_strategy", "base_workers"]
PREDICTION_COLUMNS = [
    "strategy",
    "workers",
    "model",
    "avg_epoch_time_s",
    "low_s",
    "high_s",
    "speedup",
    "efficiency",
    *BASE,
    "note",
]
INPUT_CEILING = "input ceiling"  # the model column of a prediction that is the input floor
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
    *BASE,
]
KARP_FLATT_COLUMNS = [
    "strategy",
    "workers",
    "karp_flatt",
    "karp_flatt_low",
    "karp_flatt_high",
    *BASE,
]


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


def karp_flatt_interval(
    workers: np.ndarray, speedup_low: np.ndarray, speedup_high: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The 95 % interval of each Karp–Flatt fraction, from its speedup's: ``e`` falls as the
    speedup grows, so ``(e(S_high), e(S_low))``; NaN at the base or without an interval."""
    p = np.asarray(workers, dtype=float)
    n = p / p.min()
    with np.errstate(divide="ignore", invalid="ignore"):
        low = (1.0 / np.asarray(speedup_high, float) - 1.0 / n) / (1.0 - 1.0 / n)
        high = (1.0 / np.asarray(speedup_low, float) - 1.0 / n) / (1.0 - 1.0 / n)
    return np.where(n > 1, low, np.nan), np.where(n > 1, high, np.nan)


def karp_flatt_trend(e: np.ndarray, low: np.ndarray, high: np.ndarray) -> str:
    """ "rising", "falling", "mixed", "flat" (within noise) or "untested" over the known
    values, in order.

    A change counts only when it exceeds its noise: the later value's 95 % interval lies wholly
    above (a rise) or below (a fall) the earlier's, for consecutive counts or the first and last.
    Rising (falling) when some change rises (falls) and none falls (rises); mixed when both; flat
    when none does; untested when a value has no interval (one run: its noise unknown).
    """
    known = ~np.isnan(e)
    vals, lo, hi = e[known], np.asarray(low, float)[known], np.asarray(high, float)[known]
    if len(vals) < 2:
        return ""
    if np.isnan(lo).any() or np.isnan(hi).any():
        return "untested"
    pairs = [(i, i + 1) for i in range(len(vals) - 1)] + [(0, len(vals) - 1)]
    up = any(lo[j] > hi[i] for i, j in pairs)
    down = any(hi[j] < lo[i] for i, j in pairs)
    if up and down:
        return "mixed"
    return "rising" if up else "falling" if down else "flat"


@dataclass
class StrategyModels:
    """The fits of one strategy and the model chosen for prediction (None: refused, why says)."""

    strategy: str
    workers: np.ndarray
    times: np.ndarray
    fits: dict[str, Fit]
    chosen: str | None
    why: str
    base: tuple[str, int] | None = None  # the base configuration (the smallest point)
    speedup_low: np.ndarray | None = None  # the speedups' 95 % intervals, per point
    speedup_high: np.ndarray | None = None

    def karp_flatt(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(e, low, high): the Karp–Flatt fractions and their 95 % intervals (NaN unknown)."""
        e = karp_flatt(self.workers, self.times)
        if self.speedup_low is None or self.speedup_high is None:
            return e, np.full_like(e, np.nan), np.full_like(e, np.nan)
        return e, *karp_flatt_interval(self.workers, self.speedup_low, self.speedup_high)


def fit_strategy(
    strategy: str, workers: np.ndarray, times: np.ndarray, base: tuple[str, int] | None = None
) -> StrategyModels:
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
        counts = ", ".join(f"{w:g}" for w in p)
        why = f"{len(p)} worker count{'' if len(p) == 1 else 's'} measured ({counts}); needs 3"
        return StrategyModels(strategy, p, t, fits, None, why, base)
    if not fits:
        return StrategyModels(strategy, p, t, fits, None, "no model could be fitted", base)
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
        return StrategyModels(strategy, p, t, fits, None, why, base)
    return StrategyModels(strategy, p, t, fits, best.model, "", base)


def describe(sm: StrategyModels) -> str:
    """A plain sentence: which model fits and what it means, each fraction with its base."""
    e, low, high = sm.karp_flatt()
    path = " → ".join(f"{v:.3f}" for v in e[~np.isnan(e)])
    base = _base(sm)
    against = (
        f"The Karp–Flatt serial fraction against {base['base_strategy']}-{base['base_workers']}"
    )
    trend = {
        "rising": f" {against} rises beyond its noise ({path}): overhead grows with the worker "
        "count (communication, synchronisation), not a fixed serial part.",
        "falling": f" {against} falls beyond its noise ({path}): the base pays overheads that "
        "larger counts share.",
        "flat": f" {against} is flat within noise ({path}; the 95 % intervals overlap).",
        "mixed": f" {against} moves beyond its noise without a clear trend ({path}).",
        "untested": f" {against} is {path}; with one run at some count its noise is unknown, so "
        "no trend is called.",
        "": "",
    }[karp_flatt_trend(e, low, high)]
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
        one = f"{base['base_strategy']}-1" if base["base_workers"] == 1 else ""
        of = f"measured as {one}" if one else f"extrapolated from {f.workers.min():g} GPUs"
        text = (
            f"{sm.strategy}: Amdahl's law fits best ({quality}); serial fraction "
            f"{f.serial_fraction:.4f} of the one-GPU epoch time ({of})"
            + (f", so {bound}." if bound else ".")
        )
    return text + trend


def config_means(
    epoch_time: pd.DataFrame, exclude: set[tuple[str, int]] | None = None
) -> dict[str, tuple[np.ndarray, np.ndarray, tuple[str, int] | None, np.ndarray, np.ndarray]]:
    """Per strategy: (workers, mean epoch time, base, speedup interval low, high) of its rows
    with a positive time (the intervals NaN where the table has none; 1 at the base).

    The base configuration's point is included when it belongs to another strategy (the
    single-GPU run), so models, Karp–Flatt and predictions use the table's own base.
    Configurations in ``exclude`` (input-bound ones) are left out; the base never is.
    """
    out = {}
    exclude = exclude or set()
    usable = epoch_time[epoch_time["avg_epoch_time_s"] > 0]
    times = {
        (str(s), int(w)): float(t)
        for s, w, t in zip(
            usable["strategy"], usable["workers"], usable["avg_epoch_time_s"], strict=True
        )
    }
    cis = {
        (str(s), int(w)): (float(lo), float(hi))
        for s, w, lo, hi in zip(
            usable["strategy"],
            usable["workers"],
            usable.get("speedup_ci_low", pd.Series(math.nan, index=usable.index)),
            usable.get("speedup_ci_high", pd.Series(math.nan, index=usable.index)),
            strict=True,
        )
    }
    for strategy, group in usable.groupby("strategy", sort=True):
        first = group.iloc[0].to_dict()
        base = None
        if isinstance(first.get("base_strategy"), str) and first["base_workers"] > 0:
            base = (str(first["base_strategy"]), int(first["base_workers"]))
        pts = {
            int(w): float(t)
            for w, t in zip(group["workers"], group["avg_epoch_time_s"], strict=True)
            if (str(strategy), int(w)) not in exclude
        }
        if base is not None and base in times:
            pts[base[1]] = times[base]
        order = sorted(pts)
        ci = [
            (1.0, 1.0) if base is not None and w == base[1] else cis[str(strategy), w]
            for w in order
        ]
        out[str(strategy)] = (
            np.array(order, dtype=float),
            np.array([pts[w] for w in order], dtype=float),
            base,
            np.array([c[0] for c in ci], dtype=float),
            np.array([c[1] for c in ci], dtype=float),
        )
    return out


def fit_all(
    epoch_time: pd.DataFrame, exclude: set[tuple[str, int]] | None = None
) -> list[StrategyModels]:
    """Fit every strategy of the epoch-time table that ran more than one worker count."""
    out = []
    for s, (p, t, base, low, high) in config_means(epoch_time, exclude).items():
        if (p > 1).any():
            sm = fit_strategy(s, p, t, base)
            sm.speedup_low, sm.speedup_high = low, high
            out.append(sm)
    return out


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
                    **_base(sm),
                }
            )
    return pd.DataFrame(rows, columns=MODEL_COLUMNS)


def karp_flatt_table(models: list[StrategyModels]) -> pd.DataFrame:
    """Karp–Flatt serial fraction per strategy and worker count (base count left out)."""
    rows = []
    for sm in models:
        e, low, high = sm.karp_flatt()
        for w, v, lo, hi in zip(sm.workers, e, low, high, strict=True):
            if not math.isnan(v):
                row = {"strategy": sm.strategy, "workers": int(w), "karp_flatt": float(v)}
                row |= {"karp_flatt_low": float(lo), "karp_flatt_high": float(hi)}
                rows.append({**row, **_base(sm)})
    frame = pd.DataFrame(rows, columns=KARP_FLATT_COLUMNS)
    return frame.astype({"workers": "int64"}) if len(frame) else frame


def _base(sm: StrategyModels) -> dict:
    base = sm.base or (sm.strategy, int(sm.workers[0]))
    return {"base_strategy": base[0], "base_workers": int(base[1])}


@dataclass(frozen=True)
class Ceiling:
    """An input ceiling measured for a strategy: from ``workers`` on, epoch time >= ``floor_s``,
    the mean epoch time measured at ``floor_workers``; ``rel_half``: the half-width of that
    mean's 95 % interval over its runs, relative to it (NaN with one run)."""

    workers: int
    floor_s: float
    samples_per_sec: float
    floor_workers: int = 0
    rel_half: float = math.nan

    def interval(self, workers: float) -> tuple[float, float]:
        """The floor's 95 % interval at ``workers``: its own, widened in proportion to how far
        beyond the measured count it reaches (as a fit's leave-one-out error is)."""
        reach = max(1.0, float(workers) / max(self.floor_workers, self.workers, 1))
        half = self.rel_half * reach
        return self.floor_s * math.exp(-half), self.floor_s * math.exp(half)


def predict(
    models: list[StrategyModels], targets: list[int], ceilings: dict[str, Ceiling] | None = None
) -> pd.DataFrame:
    """One row per strategy and target: a prediction, or a refusal whose ``note`` says why.

    Where a strategy has an input ceiling, the epoch time never drops below its floor: a
    model's prediction is capped there, and without a model the floor itself is the
    prediction from the ceiling's worker count on.
    """
    ceilings = ceilings or {}
    rows = []
    for sm in models if targets else []:
        base = _base(sm)
        base_t = float(sm.times[np.argmin(sm.workers)])
        cap = ceilings.get(sm.strategy)
        for w in targets:
            row: dict = {"strategy": sm.strategy, "workers": int(w), **base}
            row.update(_one_prediction(sm, float(w), cap))
            t = row["avg_epoch_time_s"]
            row["speedup"] = base_t / t if t > 0 else math.nan
            row["efficiency"] = row["speedup"] * base["base_workers"] / w
            rows.append(row)
    frame = pd.DataFrame(rows, columns=PREDICTION_COLUMNS)
    return frame.astype({"workers": "int64", "base_workers": "int64"}) if len(frame) else frame


def _answer(model: str | None, t: float, low: float, high: float, note: str) -> dict:
    return {"model": model, "avg_epoch_time_s": t, "low_s": low, "high_s": high, "note": note}


def _one_prediction(sm: StrategyModels, w: float, cap: Ceiling | None) -> dict:
    nan = math.nan
    note = ""
    if cap is not None:
        rate = (
            f", ~{cap.samples_per_sec:.0f} samples/s" if math.isfinite(cap.samples_per_sec) else ""
        )
        note = (
            f"capped by the input pipeline: input-bound from {cap.workers} workers, epochs no "
            f"faster than measured there ({cap.floor_s:.2f} s{rate})"
        )
    capped = cap is not None and w >= cap.workers
    if sm.chosen is None:
        if cap is not None and capped:
            return _answer(INPUT_CEILING, cap.floor_s, *cap.interval(w), note)
        return _answer(None, nan, nan, nan, f"no scaling model: {sm.why}")
    f = sm.fits[sm.chosen]
    t, low, high = f.interval(w)
    if cap is not None and (capped or t < cap.floor_s):
        if t <= cap.floor_s:  # the cap decides: its value, its interval, its name
            return _answer(INPUT_CEILING, cap.floor_s, *cap.interval(w), note)
        return _answer(f.model, t, max(low, cap.interval(w)[0]), high, note)
    if not t > 0:
        return _answer(None, nan, nan, nan, f"the {f.model} fit gives no positive epoch time")
    return _answer(f.model, t, low, high, "")
