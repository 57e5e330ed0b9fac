"""The speedup base: decided once per report, carried as columns that everything else reads.

Every strategy gets one base configuration, ``(base_strategy, base_workers)``:

* ``auto`` and ``single-gpu``: when a 1-worker configuration has epoch times, every strategy is
  measured against it (a strategy's own 1-worker row first, else the ``non-distributed`` one,
  else the first 1-worker strategy by name); under ``auto``, never when the strategy's runs and
  the single-GPU run's say they train different things (their ``batch_size`` differs, or their
  ``samples_per_epoch`` differ both in total and per worker): such a strategy keeps its own
  smallest count, with a note (under ``single-gpu`` the base is shared, with a note);
* ``per-strategy`` (and ``auto`` without a single-GPU run): the strategy's smallest worker count
  with epoch times.

The decision is made on the epoch-time table (:func:`decide`). Every table with a speedup reads
it through :func:`apply` and stores ``base_strategy``/``base_workers`` in each row; intervals,
scaling models, Karp–Flatt, predictions, plots and sentences read those columns and never work
the base out again. speedup = v(base)/v(row) for times, v(row)/v(base) for rates; efficiency =
speedup · base workers / workers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from itwin_report.options import CHOICES, choice
from itwin_report.report.columns import base_of
from itwin_report.report.common import label

__all__ = ["AUTO", "BASELINES", "Baseline", "apply", "base_of", "decide"]

NON_DISTRIBUTED = "non-distributed"  # how itwinai names a 1-worker job's strategy
AUTO, SINGLE_GPU, PER_STRATEGY = "auto", "single-gpu", "per-strategy"
BASELINES = CHOICES["baseline"]  # (AUTO, SINGLE_GPU, PER_STRATEGY)
BASE_COLUMNS = ["base_strategy", "base_workers"]

Config = tuple[str, int]


@dataclass(frozen=True)
class Baseline:
    """The report's base: the mode and, per strategy, its base configuration."""

    mode: str  # SINGLE_GPU or PER_STRATEGY
    reference: Config | None = None  # the single-GPU configuration (SINGLE_GPU only)
    bases: tuple[tuple[str, Config], ...] = ()  # (strategy, base configuration), sorted

    def of(self, strategy: str) -> Config | None:
        """The base configuration of ``strategy`` (None: it has no usable value)."""
        return dict(self.bases).get(strategy)

    def describe(self) -> str:
        if self.reference is None:
            return "each strategy's smallest worker count with data"
        return f"the single-GPU run ({label(*self.reference)})"

    def to_dict(self) -> dict:
        ref = self.reference
        return {
            "mode": self.mode,
            "reference": None if ref is None else {"strategy": ref[0], "workers": ref[1]},
            "bases": [
                {"strategy": s, "base_strategy": b[0], "base_workers": b[1]} for s, b in self.bases
            ],
        }


def _usable(values: np.ndarray) -> np.ndarray:
    return np.isfinite(values) & (np.nan_to_num(values, nan=0.0) > 0)


def _single_gpu(strategies: np.ndarray, workers: np.ndarray, usable: np.ndarray) -> Config | None:
    """The single-GPU reference (``non-distributed`` first, else by name), None when none."""
    ones = sorted({str(strategies[i]) for i in np.flatnonzero(usable & (workers == 1))})
    if not ones:
        return None
    return (NON_DISTRIBUTED if NON_DISTRIBUTED in ones else ones[0], 1)


Params = dict[Config, tuple[float, float]]  # per configuration: (batch_size, samples_per_epoch)


def model_params(runs: pd.DataFrame) -> Params:
    """Per configuration: the batch size and samples per epoch its runs logged (NaN unknown;
    the first known value of its runs)."""
    columns = ["batch_size", "samples_per_epoch"]
    first = runs.groupby(["strategy", "workers"], sort=True)[columns].first()  # first known
    return {
        (str(s), int(w)): (float(batch), float(samples))
        for (s, w), (batch, samples) in zip(first.index, first.to_numpy(float), strict=True)
    }


def differ(params: Params, a: Config, b: Config) -> str:
    """Why the runs of ``a`` and ``b`` train different things ("" when nothing says so): a
    different batch size per worker, or samples per epoch that differ both in total (strong
    scaling keeps them) and per worker (weak scaling keeps those)."""
    nan = (np.nan, np.nan)
    (batch_a, samples_a), (batch_b, samples_b) = params.get(a, nan), params.get(b, nan)
    if batch_a == batch_a and batch_b == batch_b and batch_a != batch_b:
        return f"batch_size {batch_a:g} vs {batch_b:g}"
    known = samples_a == samples_a and samples_b == samples_b
    if known and samples_a != samples_b and not np.isclose(samples_a / a[1], samples_b / b[1]):
        return f"samples_per_epoch {samples_a:g} vs {samples_b:g}"
    return ""


def decide(
    table: pd.DataFrame,
    value: str,
    baseline: str = AUTO,
    all_configs: list[Config] | None = None,
    what: str = "",
    params: Params | None = None,
) -> tuple[Baseline, list[str]]:
    """The base of every strategy of ``table`` (rows with a positive ``value``), and notes.

    A strategy whose smallest configuration in ``all_configs`` has no usable value is named in
    a note (its base moved up). ``params`` (:func:`model_params`): under ``auto`` a strategy
    whose params differ from the single-GPU run's keeps its own base, with a note.
    """
    choice("baseline", baseline)
    strategies = table["strategy"].astype(str).to_numpy(dtype=object)
    workers = table["workers"].to_numpy(dtype=float)
    usable = _usable(table[value].to_numpy(dtype=float))
    what = what or value
    ref = _single_gpu(strategies, workers, usable) if baseline != PER_STRATEGY else None
    notes: list[str] = []
    if baseline == SINGLE_GPU and ref is None:
        notes.append(
            f"no single-GPU run with {what}; speedup is against each strategy's smallest "
            "worker count"
        )
    bases: list[tuple[str, Config]] = []
    for strategy in sorted({str(s) for s in strategies}):
        valid = np.flatnonzero((strategies == strategy) & usable)
        if not len(valid):
            continue
        own = (strategy, int(workers[valid].min()))
        why = differ(params or {}, own, ref) if ref is not None and own[1] != 1 else ""
        if why and ref is not None:
            notes.append(_differ_note(strategy, own, ref, why, baseline == AUTO))
        if ref is not None and own[1] != 1 and not (why and baseline == AUTO):
            bases.append((strategy, ref))
            continue
        bases.append((strategy, own))
        if all_configs is not None:
            smallest = min(w for s, w in all_configs if s == strategy)
            if smallest < own[1]:
                notes.append(
                    f"{strategy}: no {what} at {smallest} workers; its speedup and "
                    f"efficiency are against {own[1]} workers"
                )
    mode = SINGLE_GPU if ref is not None else PER_STRATEGY
    return Baseline(mode, ref, tuple(bases)), notes


def _differ_note(strategy: str, own: Config, ref: Config, why: str, kept: bool) -> str:
    head = f"{strategy}: its params differ from the single-GPU run's ({label(*ref)}: {why})"
    if not kept:
        return f"{head}, yet --baseline single-gpu measures it against that run"
    return (
        f"{head}: no shared base; its speedup and efficiency are against its own {own[1]} workers"
    )


def apply(
    table: pd.DataFrame, value: str, higher_is_better: bool, base: Baseline
) -> tuple[pd.DataFrame, list[str]]:
    """``table`` with ``base_strategy``, ``base_workers``, ``speedup`` and ``efficiency``.

    A strategy whose base configuration has no usable ``value`` in this table is measured
    against its own smallest worker count here, with a note (the columns say so per row).
    """
    out = table.copy()
    strategies = out["strategy"].astype(str).to_numpy(dtype=object)
    workers = out["workers"].to_numpy(dtype=float)
    values = out[value].to_numpy(dtype=float)
    usable = _usable(values)
    known = {
        (str(s), int(w)): float(v)
        for s, w, v, u in zip(strategies, workers, values, usable, strict=True)
        if u
    }
    base_s = np.full(len(out), None, dtype=object)
    base_w = np.full(len(out), np.nan)
    base_v = np.full(len(out), np.nan)
    notes = []
    for strategy in sorted({str(s) for s in strategies}):
        rows = (strategies == strategy) & usable
        if not rows.any():
            continue
        chosen = base.of(strategy)
        if chosen is None or chosen not in known:
            own = (strategy, int(workers[rows].min()))
            if chosen is not None:
                notes.append(
                    f"{strategy}: no {value.replace('_', ' ')} at the base "
                    f"({label(*chosen)}); here it is against {own[1]} workers"
                )
            chosen = own
        base_s[rows] = chosen[0]
        base_w[rows] = chosen[1]
        base_v[rows] = known[chosen]
    ratio = values / base_v if higher_is_better else base_v / values
    speedup = np.where(usable, ratio, np.nan)
    out["base_strategy"] = pd.Series(base_s, index=out.index, dtype="object")
    out["base_workers"] = base_w
    out["speedup"] = speedup
    out["efficiency"] = speedup * base_w / workers
    return out, notes
