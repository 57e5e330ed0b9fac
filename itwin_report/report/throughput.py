"""Throughput table: samples/s per configuration from the best source each strategy has."""

from __future__ import annotations

import numpy as np
import pandas as pd

from itwin_report import tables
from itwin_report.errors import DataError
from itwin_report.performance import merge_records
from itwin_report.report import verdict
from itwin_report.report.common import (
    add_scaling,
    configurations,
    empty_table,
    finish,
    label,
    points,
)
from itwin_report.report.epoch_time import after_warmup, epoch_points
from itwin_report.report.rates import steady_rate
from itwin_report.schema import PERFORMANCE_FIELDS, RATE, RunData

COLUMNS = tables.THROUGHPUT.names
SOURCE_NAMES = {"performance": "performance.json", "rates": "rate metrics", "epochs": "epoch time"}
PREFERENCE = ("performance", "rates", "epochs")
JOB_COLUMNS = ["job_id", "strategy", "workers", "sps"]


def _with_config(frame: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    cols = ["run_id", "job_id", "strategy", "workers", "rank"]
    return frame.merge(runs[cols], on="run_id", how="inner")


def performance_jobs(data: RunData) -> tuple[pd.DataFrame, list[str]]:
    """Per job: merged performance.json -> sps (scaled to all workers), est, flags."""
    perf = _with_config(data.performance, data.runs)
    rows, warnings = [], []
    for job, group in perf.groupby("job_id", sort=True):
        strategy, workers = str(group["strategy"].iloc[0]), int(group["workers"].iloc[0])
        group = group.sort_values(["rank", "run_id"], kind="stable")
        records = [
            {f: _plain(r[f]) for f in (*PERFORMANCE_FIELDS, "records")}
            for r in group.to_dict("records")
        ]
        names = [f"performance.json of worker run {r}" for r in group["run_id"]]
        try:
            merged = merge_records(records, names)
        except DataError as exc:
            warnings.append(f"run {job} ({label(strategy, workers)}): {exc}; ignored")
            continue
        if not merged["total_time"] > 0:
            warnings.append(f"run {job} ({label(strategy, workers)}): total_time is 0; ignored")
            continue
        samples, count = merged["total_samples"], merged["records"]
        if count < workers:
            samples *= workers / count
            warnings.append(
                f"run {job} ({label(strategy, workers)}): performance.json from {count} of "
                f"{workers} workers; samples scaled by {workers}/{count}"
            )
        flagged = int(group.loc[group["suspected_input_bottleneck"], "records"].sum())
        rows.append(
            {
                "job_id": job,
                "strategy": strategy,
                "workers": workers,
                "sps": samples / merged["total_time"],
                "est": merged["est_samples_per_sec"],
                "flagged": flagged,
                "flag_total": int(count),
            }
        )
    columns = [*JOB_COLUMNS, "est", "flagged", "flag_total"]
    return pd.DataFrame(rows, columns=columns), warnings


def rate_jobs(data: RunData) -> pd.DataFrame:
    """Per job: mean over its worker runs of the steady Rate, times workers."""
    rate = points(data, RATE)
    rows = []
    for run_id, group in rate.groupby("run_id", sort=True):
        steady, _ = steady_rate(group[["step", "value"]])
        first = group.iloc[0]
        rows.append(
            {
                "job_id": first["job_id"],
                "strategy": first["strategy"],
                "workers": int(first["workers"]),
                "run_id": run_id,
                "rate": steady,
            }
        )
    per_run = pd.DataFrame(rows, columns=["job_id", "strategy", "workers", "run_id", "rate"])
    per_run = per_run[per_run["rate"].notna()]
    per_job = per_run.groupby(["job_id", "strategy", "workers"], as_index=False).agg(
        rate=("rate", "mean")
    )
    per_job["sps"] = per_job["rate"] * per_job["workers"]
    return per_job.loc[:, JOB_COLUMNS]


def epoch_jobs(data: RunData, warmup_epochs: int) -> pd.DataFrame:
    """Per job: samples_per_epoch / mean epoch time after warm-up."""
    kept = after_warmup(epoch_points(data), warmup_epochs)
    mean_time = kept.groupby(["job_id", "strategy", "workers"], as_index=False)["value"].mean()
    spe = data.runs.dropna(subset=["samples_per_epoch"]).drop_duplicates("job_id")
    merged = mean_time.merge(spe[["job_id", "samples_per_epoch"]], on="job_id", how="inner")
    merged["sps"] = merged["samples_per_epoch"] / merged["value"]
    return merged.loc[merged["value"] > 0, JOB_COLUMNS]


def _plain(value: object) -> object:
    """numpy scalars -> Python scalars, NaN kept."""
    return value.item() if isinstance(value, np.generic) else value


def _config_means(jobs: pd.DataFrame, column: str) -> pd.DataFrame:
    return jobs.groupby(["strategy", "workers"], as_index=False).agg(
        value=(column, "mean"), runs=("job_id", "nunique")
    )


def choose_source(
    configs: list[tuple[str, int]], coverage: dict[str, set], forced: str
) -> tuple[str | None, list[str]]:
    """The source for one strategy's configurations, and a note when it is a fallback."""
    if forced != "auto":
        return forced, []
    full = [s for s in PREFERENCE if set(configs) <= coverage[s]]
    chosen: str | None
    if full:
        chosen = full[0]
    else:
        best = max(
            PREFERENCE, key=lambda s: (len(coverage[s] & set(configs)), -PREFERENCE.index(s))
        )
        chosen = best if coverage[best] & set(configs) else None
    notes = []
    for better in PREFERENCE[: PREFERENCE.index(chosen)] if chosen else PREFERENCE:
        have = len(coverage[better] & set(configs))
        if have:
            notes.append(
                f"{configs[0][0]}: {SOURCE_NAMES[better]} covers only {have} of "
                f"{len(configs)} configurations; throughput uses "
                f"{SOURCE_NAMES[chosen] if chosen else 'nothing'} for all"
            )
    return chosen, notes


def throughput_table(
    data: RunData,
    gpu: pd.DataFrame,
    computation: pd.DataFrame,
    warmup_epochs: int = 1,
    source: str = "auto",
) -> tuple[pd.DataFrame, list[str]]:
    """The throughput table (with verdict) and its warnings."""
    if source != "auto" and source not in SOURCE_NAMES:
        raise DataError(f"unknown throughput source {source!r}; use auto, {', '.join(PREFERENCE)}")
    perf, warnings = performance_jobs(data)
    per_source = {
        "performance": _config_means(perf, "sps"),
        "rates": _config_means(rate_jobs(data), "sps"),
        "epochs": _config_means(epoch_jobs(data, warmup_epochs), "sps"),
    }
    coverage = {
        s: set(zip(f["strategy"], f["workers"].astype(int), strict=True))
        for s, f in per_source.items()
    }
    rows = []
    all_configs = configurations(data.runs)
    for strategy in sorted({s for s, _ in all_configs}):
        configs = [c for c in all_configs if c[0] == strategy]
        chosen, notes = choose_source(configs, coverage, source)
        warnings.extend(notes)
        for strategy_, workers in configs:
            if chosen is None or (strategy_, workers) not in coverage[chosen]:
                what = "throughput source" if source == "auto" else SOURCE_NAMES[source] + " data"
                warnings.append(f"no {what} for {label(strategy_, workers)}")
                continue
            table = per_source[chosen]
            row = table[(table["strategy"] == strategy_) & (table["workers"] == workers)].iloc[0]
            rows.append(
                {
                    "strategy": strategy_,
                    "workers": workers,
                    "runs": int(row["runs"]),
                    "samples_per_sec": float(row["value"]),
                    "source": SOURCE_NAMES[chosen],
                }
            )
    base = ["strategy", "workers", "runs", "samples_per_sec", "source"]
    table = add_scaling(finish(rows, base), "samples_per_sec", higher_is_better=True)
    table["samples_per_sec_per_gpu"] = table["samples_per_sec"] / table["workers"]
    table = _add_estimates(table, perf)
    table = _add_verdict(table, perf, per_source["rates"], gpu, computation)
    if table.empty:
        return empty_table(COLUMNS), warnings
    return table[COLUMNS].reset_index(drop=True), warnings


def _add_estimates(table: pd.DataFrame, perf: pd.DataFrame) -> pd.DataFrame:
    est = perf.groupby(["strategy", "workers"], as_index=False)["est"].mean()
    out = table.merge(est, on=["strategy", "workers"], how="left")
    out["est_samples_per_sec"] = out["est"].astype("float64")
    out["achieved_fraction"] = out["samples_per_sec"] / out["est_samples_per_sec"]
    return out.drop(columns="est")


def _steady_fraction(row: dict) -> float:
    """Steady-state rate over the estimate; NaN when the table already shows the rates."""
    if row["source"] == SOURCE_NAMES["rates"]:
        return float("nan")
    return float(row["steady_sps"]) / float(row["est_samples_per_sec"])


def _add_verdict(
    table: pd.DataFrame,
    perf: pd.DataFrame,
    rates: pd.DataFrame,
    gpu: pd.DataFrame,
    computation: pd.DataFrame,
) -> pd.DataFrame:
    flags = perf.groupby(["strategy", "workers"], as_index=False)[["flagged", "flag_total"]].sum()
    out = table.merge(flags, on=["strategy", "workers"], how="left")
    steady = rates.rename(columns={"value": "steady_sps"})[["strategy", "workers", "steady_sps"]]
    out = out.merge(steady, on=["strategy", "workers"], how="left")
    out = out.merge(
        gpu[["strategy", "workers", "utilization_pct"]], on=["strategy", "workers"], how="left"
    )
    out = out.merge(
        computation[["strategy", "workers", "communication_fraction"]],
        on=["strategy", "workers"],
        how="left",
    )
    bound, text = [], []
    for r in out.to_dict("records"):
        args = (
            float(r["achieved_fraction"]),
            _steady_fraction(r),
            verdict.idle_share(float(r["utilization_pct"])),
            float(r["communication_fraction"]),
            0 if pd.isna(r["flagged"]) else int(r["flagged"]),
            0 if pd.isna(r["flag_total"]) else int(r["flag_total"]),
        )
        bound.append(verdict.decide(*args))
        text.append(verdict.evidence(*args))
    out["input_bound"] = pd.Series(bound, index=out.index, dtype="object")
    out["evidence"] = pd.Series(text, index=out.index, dtype="str")
    return out
