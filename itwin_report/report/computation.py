"""Computation table: share of device time in ATen/c10/autograd ops and in communication.

The fractions sum ``self_cuda_time_total`` over the profiler averages (itwinai's rule), which
cannot tell when two kernels ran at once: communication that overlaps computation (DDP's
gradient all-reduce under the backward pass) is counted twice in the denominator, so the
computation fraction understates computation. Where a configuration has traces, the table also
gives ``trace_compute_fraction``: the share of the device span with a compute kernel running,
overlap counted once (the ranks' mean, from :mod:`itwin_report.traces`).
"""

from __future__ import annotations

from math import nan

import pandas as pd

from itwin_report.data.rundata import RunData
from itwin_report.report import specs as tables
from itwin_report.report.common import configurations, finish, label
from itwin_report.util.notes import table_of
from itwin_report.util.text import name_list

COLUMNS = tables.COMPUTATION.names

COMPUTATION_PATTERN = r"\b(?:aten|at|c10|autograd)::"
# collectives on every backend: NCCL (NVIDIA) and RCCL (AMD, whose kernels keep NCCL's names)
# kernels and ops, gloo's CPU ops, c10d's dispatch and the profiler's comms record
COMMUNICATION_PATTERN = (
    r"(?i)nccl|rccl|gloo:|c10d::|record_param_comms|all_?reduce|all_?gather|reduce_?scatter"
    r"|all_?to_?all|broadcast"
)
NO_GPU_REASON = "the profiles hold no GPU time (recorded without a GPU)"
STEP_PREFIX = "ProfilerStep"


def classify(profiles: pd.DataFrame) -> pd.DataFrame:
    """Profiler rows without ``ProfilerStep*``, with boolean ``computation``/``communication``."""
    names = profiles["name"].astype("str")
    rows = profiles[~names.str.startswith(STEP_PREFIX)].copy()
    names = rows["name"].astype("str")
    rows["computation"] = names.str.contains(COMPUTATION_PATTERN, regex=True)
    rows["communication"] = (
        names.str.contains(COMMUNICATION_PATTERN, regex=True) & ~rows["computation"]
    )
    return rows


def fractions(rows: pd.DataFrame) -> tuple[float, float]:
    """(computation, communication) shares of the summed ``self_cuda_time_total``."""
    total = float(rows["self_cuda_time_total"].sum())
    if total <= 0:
        return float("nan"), float("nan")
    comp = float(rows.loc[rows["computation"], "self_cuda_time_total"].sum())
    comm = float(rows.loc[rows["communication"], "self_cuda_time_total"].sum())
    return comp / total, comm / total


def computation_table(
    data: RunData, traces: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, list[str], str | None]:
    """The computation table (rows pooled over ranks and runs), warnings, and the reason its
    fractions are all unknown (None when some are known or there is no profile at all).

    ``traces``: per-rank trace rows (``strategy``, ``workers``, ``job_id``, ``compute_pct``);
    a configuration with traces but no profiler averages gets a row of its own.
    """
    cols = ["run_id", "job_id", "strategy", "workers"]
    joined = data.profiles.merge(data.runs[cols], on="run_id", how="inner")
    rows_out, warnings, no_gpu, missing = [], [], [], []
    classified = classify(joined)
    shares, traced_jobs = _trace_shares(traces)
    profiled = 0
    for strategy, workers in configurations(data.runs):
        mask = (joined["strategy"] == strategy) & (joined["workers"] == workers)
        share = shares.get((strategy, workers), nan)
        if not mask.any():
            if share == share:
                rows_out.append(
                    {
                        "strategy": strategy,
                        "workers": workers,
                        "runs": traced_jobs[(strategy, workers)],
                        "computation_fraction": nan,
                        "communication_fraction": nan,
                        "other_fraction": nan,
                        "trace_compute_fraction": share,
                    }
                )
            else:
                missing.append(label(strategy, workers))
            continue
        profiled += 1
        rows = classified[(classified["strategy"] == strategy) & (classified["workers"] == workers)]
        comp, comm = fractions(rows)
        if not float(rows["self_cuda_time_total"].sum()) > 0:
            no_gpu.append(label(strategy, workers))
        rows_out.append(
            {
                "strategy": strategy,
                "workers": workers,
                "runs": joined.loc[mask, "job_id"].nunique(),
                "computation_fraction": comp,
                "communication_fraction": comm,
                "other_fraction": 1.0 - comp - comm,
                "trace_compute_fraction": share,
            }
        )
    if missing:
        unread = any(
            getattr(w, "kind", "") == "unread" and table_of(w) == "computation"
            for w in data.warnings
        )
        why = " (some profiler files could not be read: see that warning)" if unread else ""
        warnings.append(f"no profiler data for {name_list(missing)}{why}")
    if no_gpu:
        shown = name_list(no_gpu)
        warnings.append(
            f"computation fractions unknown for {shown}: {NO_GPU_REASON}, so the share of "
            "device time is undefined"
        )
    reason = NO_GPU_REASON if no_gpu and len(no_gpu) == profiled else None
    return finish(rows_out, COLUMNS), warnings, reason


def _trace_shares(
    traces: pd.DataFrame | None,
) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], int]]:
    """Per configuration: the ranks' mean compute share of the span (0-1) and the jobs."""
    if traces is None or traces.empty:
        return {}, {}
    shares: dict[tuple[str, int], float] = {}
    jobs: dict[tuple[str, int], int] = {}
    for (strategy, workers), rows in traces.groupby(["strategy", "workers"]):
        key = (str(strategy), int(str(workers)))
        shares[key] = float(rows["compute_pct"].mean()) / 100.0
        jobs[key] = int(rows["job_id"].nunique())
    return shares, jobs
