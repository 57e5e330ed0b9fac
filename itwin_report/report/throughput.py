"""Throughput table: samples/s per configuration from the best source each strategy has."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from itwin_report.analysis.intervals import mean_interval
from itwin_report.data.frames import as_text, coded
from itwin_report.data.performance_json import merge_records
from itwin_report.data.rundata import PERFORMANCE_FIELDS, RATE, TRAIN_LOSS_EPOCH, RunData
from itwin_report.report import baseline as base_rule
from itwin_report.report import specs as tables
from itwin_report.report import verdict
from itwin_report.report.baseline import AUTO, Baseline
from itwin_report.report.common import (
    configurations,
    empty_table,
    finish,
    label,
    lowest_rank_points,
    points,
)
from itwin_report.report.epoch_time import after_warmup, epoch_points
from itwin_report.report.rates import steady_rate_of
from itwin_report.util.errors import DataError
from itwin_report.util.text import name_list

COLUMNS = tables.THROUGHPUT.names
SOURCE_NAMES = {"performance": "performance.json", "rates": "rate metrics", "epochs": "epoch time"}
PREFERENCE = ("performance", "rates", "epochs")
JOB_COLUMNS = ["job_id", "strategy", "workers", "sps"]
CI = ["samples_per_sec_ci_low", "samples_per_sec_ci_high"]  # 95 % interval from the runs' own


def _with_config(frame: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    cols = ["run_id", "job_id", "strategy", "workers", "rank"]
    return frame.merge(runs[cols], on="run_id", how="inner")


def performance_jobs(data: RunData) -> tuple[pd.DataFrame, list[str]]:
    """Per job: merged performance.json -> sps (scaled to all workers), est, flags."""
    perf = _with_config(data.performance, data.runs)
    perf = perf.sort_values(["job_id", "rank", "run_id"], kind="stable")
    fields = (*PERFORMANCE_FIELDS, "records")
    every = [{f: _plain(r[f]) for f in fields} for r in perf.to_dict("records")]
    jobs = perf["job_id"].to_numpy(dtype=object)
    run_ids = perf["run_id"].to_numpy(dtype=object)
    firsts = np.flatnonzero(np.r_[True, jobs[1:] != jobs[:-1]]) if len(perf) else np.zeros(0)
    edges = [*map(int, firsts), len(perf)]  # job i is rows edges[i] .. edges[i + 1]
    rows, warnings = [], []
    for a, b in itertools.pairwise(edges):
        job, group = jobs[a], perf.iloc[a:b]
        strategy, workers = str(group["strategy"].iloc[0]), int(group["workers"].iloc[0])
        records = every[a:b]
        names = [f"performance.json of worker run {r}" for r in run_ids[a:b]]
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
    """Per job: mean over its worker runs of the steady Rate, times workers.

    One sort of all Rate points, then each run's steady rate on numpy slices of it.
    """
    rate = points(data, RATE, ["run_id", "step", "value", "job_id", "strategy", "workers"])
    rate = rate.sort_values(["run_id", "step", "value"], kind="stable")
    run_ids, _ = coded(rate["run_id"])
    steps = rate["step"].to_numpy(dtype=float)
    values = rate["value"].to_numpy(dtype=float)
    changes = np.r_[True, run_ids[1:] != run_ids[:-1]] if len(rate) else np.zeros(0, bool)
    starts = np.flatnonzero(changes)
    ends = np.r_[starts[1:], len(rate)].astype(int) if len(rate) else starts
    steady = [steady_rate_of(steps[a:b], values[a:b])[0] for a, b in zip(starts, ends, strict=True)]
    first = rate.iloc[starts]
    per_run = pd.DataFrame(
        {
            "job_id": first["job_id"].to_numpy(),
            "strategy": first["strategy"].to_numpy(),
            "workers": first["workers"].to_numpy(dtype="int64"),
            "rate": np.asarray(steady, dtype=float),
        }
    )
    per_run = per_run[per_run["rate"].notna()]
    per_job = per_run.groupby(["job_id", "strategy", "workers"], as_index=False).agg(
        rate=("rate", "mean")
    )
    per_job["sps"] = per_job["rate"] * per_job["workers"]
    return per_job.loc[:, JOB_COLUMNS]


def _batches_per_epoch(steps: np.ndarray) -> int | None:
    """Batches per epoch from the cumulative batch counts logged at each epoch's end.

    None unless every epoch has the same positive count.
    """
    counts = np.diff(np.sort(steps), prepend=0)
    if len(counts) == 0 or counts[0] <= 0 or (counts != counts[0]).any():
        return None
    return int(counts[0])


def samples_per_epoch(data: RunData, given: float | None = None) -> tuple[pd.DataFrame, dict]:
    """Per job ``job_id, samples_per_epoch, derived``, and per job without it what is missing.

    Taken from ``given`` (``--samples-per-epoch``), else the ``samples_per_epoch`` param, else
    derived as ``batch_size`` (per worker) x batches per epoch (the step spacing of
    ``train_loss_epoch``, the cumulative batch count, on the job's lowest rank that logged it)
    x workers, only when the batches per epoch are the same in every epoch.
    """
    columns = ["job_id", "samples_per_epoch", "derived"]
    jobs = data.runs.drop_duplicates("job_id")[["job_id", "workers"]]
    if given is not None:
        return pd.DataFrame(
            {"job_id": jobs["job_id"], "samples_per_epoch": given, "derived": False}
        ), {}
    logged = data.runs.dropna(subset=["samples_per_epoch"]).drop_duplicates("job_id")
    rows = [
        (j, float(v), False)
        for j, v in zip(logged["job_id"], logged["samples_per_epoch"], strict=True)
    ]
    batch = data.runs.dropna(subset=["batch_size"]).drop_duplicates("job_id")
    batch_size = dict(zip(batch["job_id"], batch["batch_size"], strict=True))
    losses = lowest_rank_points(points(data, TRAIN_LOSS_EPOCH, ["step", "job_id", "rank"]))
    by_job = losses.groupby("job_id", sort=False, observed=True)
    steps = {str(job): g["step"].to_numpy() for job, g in by_job}
    missing: dict[str, str] = {}
    for job, workers in zip(jobs["job_id"], jobs["workers"], strict=True):
        if job in set(logged["job_id"]):
            continue
        if job not in batch_size:
            missing[job] = "no samples_per_epoch or batch_size param"
        elif job not in steps:
            missing[job] = f"no samples_per_epoch param and no {TRAIN_LOSS_EPOCH} steps"
        elif (per_epoch := _batches_per_epoch(steps[job])) is None:
            missing[job] = (
                f"no samples_per_epoch param, and the {TRAIN_LOSS_EPOCH} steps give different "
                "batch counts per epoch"
            )
        else:
            rows.append((job, float(batch_size[job]) * per_epoch * int(workers), True))
    return pd.DataFrame(rows, columns=columns), missing


def epoch_jobs(
    data: RunData, warmup_epochs: int, given: float | None = None
) -> tuple[pd.DataFrame, dict]:
    """Per job: samples per epoch / mean epoch time after warm-up (with ``derived``), and per
    job without samples per epoch what is missing."""
    kept = after_warmup(epoch_points(data), warmup_epochs)
    by_job = kept.groupby(["job_id", "strategy", "workers"], as_index=False, observed=True)
    mean_time = as_text(by_job["value"].mean())  # type: ignore[arg-type]
    spe, missing = samples_per_epoch(data, given)
    merged = mean_time.merge(spe, on="job_id", how="inner")
    merged["sps"] = merged["samples_per_epoch"] / merged["value"]
    return merged.loc[merged["value"] > 0, [*JOB_COLUMNS, "derived"]], missing


def _plain(value: object) -> object:
    """numpy scalars -> Python scalars, NaN kept."""
    return value.item() if isinstance(value, np.generic) else value


def _config_means(jobs: pd.DataFrame, column: str) -> pd.DataFrame:
    out = jobs.groupby(["strategy", "workers"], as_index=False).agg(
        value=(column, "mean"), runs=("job_id", "nunique")
    )
    values = {k: g.to_numpy(dtype=float) for k, g in jobs.groupby(["strategy", "workers"])[column]}
    out["ci"] = [
        mean_interval(values[(s, w)])[1:]
        for s, w in zip(out["strategy"], out["workers"], strict=True)
    ]
    derived = jobs["derived"] if "derived" in jobs else pd.Series(False, index=jobs.index)
    flags = derived.astype(bool).groupby([jobs["strategy"], jobs["workers"]]).any()
    out["derived"] = [
        bool(flags.get((s, w), False)) for s, w in zip(out["strategy"], out["workers"], strict=True)
    ]
    return out


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


DERIVED_SOURCE = "epoch time, derived samples/epoch"
GIVEN_SOURCE = "epoch time, --samples-per-epoch"


def throughput_table(
    data: RunData,
    gpu: pd.DataFrame,
    computation: pd.DataFrame,
    warmup_epochs: int = 1,
    source: str = "auto",
    baseline: str = AUTO,
    samples_per_epoch: float | None = None,
    base: Baseline | None = None,
) -> tuple[pd.DataFrame, list[str], Baseline]:
    """The throughput table (with verdict), its warnings and the scaling baseline used.

    ``samples_per_epoch`` states the samples per epoch of every run (the epoch-time source).
    ``base``: the report's base (decided on epoch times); without one, it is decided here.
    """
    if source != "auto" and source not in SOURCE_NAMES:
        raise DataError(f"unknown throughput source {source!r}; use auto, {', '.join(PREFERENCE)}")
    perf, warnings = performance_jobs(data)
    epochs, missing_spe = epoch_jobs(data, warmup_epochs, samples_per_epoch)
    per_source = {
        "performance": _config_means(perf, "sps"),
        "rates": _config_means(rate_jobs(data), "sps"),
        "epochs": _config_means(epochs, "sps"),
    }
    coverage = {
        s: set(zip(f["strategy"], f["workers"].astype(int), strict=True))
        for s, f in per_source.items()
    }
    rows = []
    missing: dict[str, list[str]] = {}  # why -> configurations without throughput
    all_configs = configurations(data.runs)
    for strategy in sorted({s for s, _ in all_configs}):
        configs = [c for c in all_configs if c[0] == strategy]
        chosen, notes = choose_source(configs, coverage, source)
        warnings.extend(notes)
        for strategy_, workers in configs:
            if chosen is None or (strategy_, workers) not in coverage[chosen]:
                why = _missing(data, strategy_, workers, source, missing_spe)
                missing.setdefault(why, []).append(label(strategy_, workers))
                continue
            table = per_source[chosen]
            row = table[(table["strategy"] == strategy_) & (table["workers"] == workers)].iloc[0]
            name = SOURCE_NAMES[chosen]
            if chosen == "epochs" and samples_per_epoch is not None:
                name = GIVEN_SOURCE
            elif chosen == "epochs" and bool(row["derived"]):
                name = DERIVED_SOURCE
            rows.append(
                {
                    "strategy": strategy_,
                    "workers": workers,
                    "runs": int(row["runs"]),
                    "samples_per_sec": float(row["value"]),
                    "samples_per_sec_ci_low": float(row["ci"][0]),
                    "samples_per_sec_ci_high": float(row["ci"][1]),
                    "source": name,
                }
            )
    warnings += [f"no throughput for {name_list(names)}: {why}" for why, names in missing.items()]
    columns = ["strategy", "workers", "nodes", "runs", "samples_per_sec", *CI, "source"]
    table = finish(rows, columns)
    used = base
    if used is None or not used.bases:
        used, notes = base_rule.decide(table, "samples_per_sec", baseline, None, "throughput")
        warnings.extend(notes)
    table, notes = base_rule.apply(table, "samples_per_sec", True, used)
    warnings.extend(notes)
    table["samples_per_sec_per_gpu"] = table["samples_per_sec"] / table["workers"]
    table = _add_estimates(table, perf)
    table = _add_verdict(table, perf, per_source["rates"], gpu, computation)
    if table.empty:
        return empty_table(COLUMNS), warnings, used
    return table[COLUMNS].reset_index(drop=True), warnings, used


def _missing(
    data: RunData, strategy: str, workers: int, source: str, missing_spe: dict[str, str]
) -> str:
    """What each source lacks for one configuration (the reason of a missing throughput)."""
    mine = data.runs[(data.runs["strategy"] == strategy) & (data.runs["workers"] == workers)]
    jobs = set(mine["job_id"])
    has_epochs = bool(epoch_points(data)["job_id"].isin(jobs).any())
    lacks = {
        "performance": "no performance.json",
        "rates": f"no {RATE} metric",
        "epochs": next((missing_spe[j] for j in sorted(jobs) if j in missing_spe), "")
        if has_epochs
        else "no epoch times",
    }
    if not lacks["epochs"]:
        lacks["epochs"] = "no epoch times after warm-up"
    wanted = PREFERENCE if source == "auto" else (source,)
    hint = "" if source not in ("auto", "epochs") else "; --samples-per-epoch N states it"
    hint = hint if "samples_per_epoch" in lacks["epochs"] else ""
    return ", ".join(lacks[s] for s in wanted) + hint


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
