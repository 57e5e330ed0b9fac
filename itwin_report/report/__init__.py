"""The scalability report: pure aggregation of a :class:`RunData` into tables."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from itwin_report.errors import ReportError
from itwin_report.report.common import AUTO, BASELINES, Baseline, normalized
from itwin_report.report.computation import computation_table
from itwin_report.report.epoch_time import epoch_time_table
from itwin_report.report.gpu import gpu_table
from itwin_report.report.series import rate_series
from itwin_report.report.throughput import SOURCE_NAMES, throughput_table
from itwin_report.schema import RunData

__all__ = ["Report", "below_efficiency", "build_report"]


@dataclass
class Report:
    """All tables of one experiment's report, plus the Rate series for its plot."""

    experiment: str
    tracking_uri: str
    warmup_epochs: int
    epoch_time: pd.DataFrame
    gpu: pd.DataFrame
    computation: pd.DataFrame
    throughput: pd.DataFrame
    rate_series: pd.DataFrame
    rate_config: tuple[str, int] | None
    warnings: list[str] = field(default_factory=list)
    baseline: dict = field(default_factory=lambda: {"mode": "per-strategy", "reference": None})
    # why a table is empty or all unknown, for the plots' messages: {"computation": "..."}
    reasons: dict[str, str] = field(default_factory=dict)


def build_report(
    data: RunData,
    warmup_epochs: int = 1,
    rate_config: tuple[str, int] | None = None,
    throughput_source: str = "auto",
    baseline: str = AUTO,
    samples_per_epoch: float | None = None,
) -> Report:
    """Aggregate ``data`` into a :class:`Report`; raises ``ReportError`` on bad options.

    ``baseline``: ``auto`` (the single-GPU run when there is one, else per strategy),
    ``single-gpu`` or ``per-strategy``. ``samples_per_epoch`` states the samples per epoch of
    every run for the epoch-time throughput.
    """
    if warmup_epochs < 0:
        raise ReportError(f"warm-up epochs must be >= 0, got {warmup_epochs}")
    if throughput_source != "auto" and throughput_source not in SOURCE_NAMES:
        choices = ", ".join(["auto", *SOURCE_NAMES])
        raise ReportError(f"unknown throughput source {throughput_source!r}; use one of {choices}")
    if baseline not in BASELINES:
        raise ReportError(f"unknown baseline {baseline!r}; use one of {', '.join(BASELINES)}")
    if samples_per_epoch is not None and not (0 < samples_per_epoch < float("inf")):
        raise ReportError(f"samples per epoch must be > 0 and finite, got {samples_per_epoch}")
    data = normalized(data)
    epoch, w_epoch, used = epoch_time_table(data, warmup_epochs, baseline)
    gpu, w_gpu = gpu_table(data)
    comp, w_comp, no_gpu = computation_table(data)
    thr, w_thr, thr_used = throughput_table(
        data, gpu, comp, warmup_epochs, throughput_source, baseline, samples_per_epoch
    )
    series, config, w_series = rate_series(data, rate_config)
    notes = _baseline_notes(used, thr_used, not thr.empty)
    return Report(
        experiment=data.experiment,
        tracking_uri=data.tracking_uri,
        warmup_epochs=warmup_epochs,
        epoch_time=epoch,
        gpu=gpu,
        computation=comp,
        throughput=thr,
        rate_series=series,
        rate_config=config,
        warnings=[*notes, *data.warnings, *w_epoch, *w_gpu, *w_comp, *w_thr, *w_series],
        baseline={
            "mode": used.mode,
            "reference": None
            if used.reference is None
            else {"strategy": used.reference[0], "workers": used.reference[1]},
        },
        reasons={} if no_gpu is None else {"computation": no_gpu},
    )


def _baseline_notes(epoch: Baseline, throughput: Baseline, has_throughput: bool) -> list[str]:
    """One line saying what speedup is measured against, when it is the single-GPU run."""
    notes = []
    if epoch.reference is not None:
        notes.append(
            f"speedup and efficiency of every strategy are against {epoch.describe()}; "
            "--baseline per-strategy measures each strategy against its own smallest count"
        )
    if has_throughput and throughput != epoch:
        notes.append(f"throughput speedup is against {throughput.describe()}")
    return notes


def below_efficiency(report: Report, threshold: float) -> pd.DataFrame:
    """Epoch-time rows whose parallel efficiency is below ``threshold`` (NaN never is)."""
    table = report.epoch_time
    return table[table["efficiency"] < threshold].reset_index(drop=True)
