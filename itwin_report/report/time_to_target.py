"""Time to target: how long each run took to reach a quality target, per configuration.

A *run* is a job (as in every table). Its validation metric is read from its lowest rank that
logged the target's key (itwinai's default: only rank 0 logs). Its points are taken in the
order of their timestamps (ties: by step); the **first point that meets the target** decides:

* time to target = that point's timestamp - the worker run's start (MLflow's ``start_time``),
  in seconds: set-up, data loading and every evaluation before it count, as they do in MLPerf's
  time to train. (The alternative, counting from the first epoch's start, would leave set-up
  out; the runs do not log when their first epoch starts, so it is not used.)
* epochs to target = that point's step, read as epochs (log the metric with step = epochs
  completed; an evaluation between epoch boundaries is still timed by its timestamp).

A run with no point that meets the target did not reach it: it counts in ``runs``, not in
``runs_reached``, and is left out of the means ("4 of 5"). The mean time's 95 % interval is
:func:`~itwin_report.analysis.intervals.mean_interval` of the reached runs' times. Speedup and
efficiency are against the report's base (:mod:`itwin_report.report.baseline`), as in every
table: speedup = t(base) / t(row), efficiency = speedup x base workers / workers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from itwin_report.analysis.intervals import mean_interval, ratio_interval
from itwin_report.data.frames import as_text
from itwin_report.data.rundata import RunData
from itwin_report.options import Target
from itwin_report.report import baseline as base_rule
from itwin_report.report import specs as tables
from itwin_report.report.baseline import Baseline
from itwin_report.report.columns import base_of, is_missing
from itwin_report.report.common import finish, label
from itwin_report.util.notes import Note, tagged
from itwin_report.util.text import name_list

if TYPE_CHECKING:
    from itwin_report.report.model import Report

COLUMNS = tables.TIME_TO_TARGET.names
TABLE = "time_to_target"
RUN_COLUMNS = [
    "strategy",
    "workers",
    "job_id",
    "reached",
    "time_to_target_s",
    "epochs_to_target",
    "global_batch_size",
    "reached_at",  # the timestamp (ms) of the first point that meets the target
]
MAX_KEYS_NAMED = 20


@dataclass
class TimeToTarget:
    """The table, one row per run (job) with its outcome, and the warnings."""

    table: pd.DataFrame
    runs: pd.DataFrame
    warnings: list[str]


def target_points(data: RunData, metric: str) -> pd.DataFrame:
    """Points of ``metric`` with their worker run's job, configuration, rank and start, one
    rank per job (the lowest that logged it); text columns as text."""
    mine = (data.metrics["key"] == metric).to_numpy(dtype=bool)
    points = as_text(data.metrics.loc[mine, ["run_id", "step", "value", "timestamp"]])
    runs = data.runs[["run_id", "job_id", "strategy", "workers", "rank", "start_time"]]
    joined = points.merge(runs, on="run_id", how="inner")
    if joined.empty:
        return joined
    low = joined.groupby("job_id")["rank"].transform("min")
    return joined[joined["rank"] == low]


def first_met(points: pd.DataFrame, target: Target) -> pd.Series | None:
    """The first point (by timestamp, then step) of one run's points that meets ``target``."""
    ordered = points.sort_values(["timestamp", "step"], kind="stable")
    values = ordered["value"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        met = values >= target.value if target.higher_is_better else values <= target.value
    hits = np.flatnonzero(met)
    return None if not len(hits) else ordered.iloc[int(hits[0])]


def global_batch(runs: pd.DataFrame) -> dict[str, float]:
    """Per job: its ``global_batch_size`` param, else ``batch_size`` x workers (NaN: neither)."""
    out: dict[str, float] = {}
    for job, group in runs.groupby("job_id", sort=True):
        logged = group["global_batch_size"].dropna()
        if len(logged):
            out[str(job)] = float(logged.iloc[0])
            continue
        per = group["batch_size"].dropna()
        out[str(job)] = float(per.iloc[0]) * int(group["workers"].iloc[0]) if len(per) else math.nan
    return out


def run_outcomes(data: RunData, target: Target) -> tuple[pd.DataFrame, list[str]]:
    """One row per job of ``data``: reached or not, time and epochs to target, global batch."""
    points = target_points(data, target.metric)
    by_job: dict[str, pd.DataFrame] = {}
    if len(points):
        by_job = {str(j): g for j, g in points.groupby("job_id", sort=True)}
    batch = global_batch(data.runs)
    jobs = as_text(data.runs.drop_duplicates("job_id")[["job_id", "strategy", "workers"]])
    rows: list[dict[str, Any]] = []
    silent: list[str] = []
    no_start: list[str] = []
    for record in jobs.to_dict("records"):
        rec = {str(k): v for k, v in record.items()}
        job, name = str(rec["job_id"]), label(str(rec["strategy"]), int(rec["workers"]))
        row = _outcome(by_job.get(job), target)
        rows.append({**rec, "workers": int(rec["workers"]), "job_id": job, **row})
        rows[-1]["global_batch_size"] = batch.get(job, math.nan)
        if job not in by_job:
            silent.append(f"{job} ({name})")
        elif row["reached"] and not math.isfinite(row["time_to_target_s"]):
            no_start.append(f"{job} ({name})")
    warnings = []
    if silent:
        warnings.append(
            f"{len(silent)} run(s) logged no {target.metric} point and count as not reaching "
            f"{target}: {name_list(silent)}"
        )
    if no_start:
        warnings.append(
            f"{len(no_start)} run(s) reached {target} but have no start time, so their time to "
            f"target is unknown and left out of the mean: {name_list(no_start)}"
        )
    frame = pd.DataFrame(rows, columns=RUN_COLUMNS)
    frame = frame.sort_values(["strategy", "workers", "job_id"], kind="stable")
    return frame.reset_index(drop=True), warnings


def _outcome(points: pd.DataFrame | None, target: Target) -> dict[str, Any]:
    """reached, time_to_target_s and epochs_to_target of one run's points (None: no point)."""
    out: dict[str, Any] = {"reached": False, "time_to_target_s": math.nan}
    out["epochs_to_target"] = out["reached_at"] = math.nan
    hit = None if points is None else first_met(points, target)
    if hit is None:
        return out
    out["reached"] = True
    out["epochs_to_target"] = float(hit["step"])
    out["reached_at"] = float(hit["timestamp"])
    start = float(hit["start_time"])
    if math.isfinite(start):
        out["time_to_target_s"] = (float(hit["timestamp"]) - start) / 1000.0
    return out


def by_config(frame: pd.DataFrame) -> list[tuple[str, int, pd.DataFrame]]:
    """(strategy, workers, rows) of ``frame`` per configuration, sorted."""
    out = []
    for key, group in frame.groupby(["strategy", "workers"], sort=True):
        strategy, workers = key
        out.append((str(strategy), int(str(workers)), group))
    return out


def _row(strategy: str, workers: int, group: pd.DataFrame) -> dict[str, object]:
    reached = group[group["reached"]]
    times = reached["time_to_target_s"].dropna().to_numpy(dtype=float)
    mean, low, high = mean_interval(times)
    batches = group["global_batch_size"].dropna()
    return {
        "strategy": strategy,
        "workers": workers,
        "runs": len(group),
        "runs_reached": len(reached),
        "avg_time_to_target_s": mean,
        "time_to_target_ci_low": low,
        "time_to_target_ci_high": high,
        "epochs_to_target": float(reached["epochs_to_target"].mean()) if len(reached) else math.nan,
        "global_batch_size": float(batches.mean()) if len(batches) else math.nan,
    }


def time_to_target_table(data: RunData, target: Target, used: Baseline) -> TimeToTarget:
    """The "Time to target" table of ``data`` against the report's base ``used``."""
    logged = (data.metrics["key"] == target.metric).to_numpy(dtype=bool).any()
    if not logged:
        return TimeToTarget(
            finish([], COLUMNS),
            pd.DataFrame(columns=RUN_COLUMNS),
            [Note(_not_logged(data, target), TABLE, "missing")],
        )
    runs, warnings = run_outcomes(data, target)
    rows = [_row(s, w, group) for s, w, group in by_config(runs)]
    table = finish(rows, COLUMNS[:10])
    table, notes = base_rule.apply(table, "avg_time_to_target_s", False, used)
    never = [
        label(str(r["strategy"]), int(str(r["workers"]))) for r in rows if not r["runs_reached"]
    ]
    if never:
        warnings.append(f"no run of {name_list(never)} reached {target}")
    return TimeToTarget(table[COLUMNS], runs, [*warnings, *notes])


def _not_logged(data: RunData, target: Target) -> str:
    """The warning for a metric no worker run logged, naming the keys the runs have (those the
    loader found, else those loaded)."""
    what = f"so no time to target for {target}"
    if not data.logged_keys:
        loaded = ", ".join(sorted(set(data.metrics["key"].astype(str)))) or "none"
        return (
            f"no {target.metric} point was loaded, {what}: load it with "
            f"load(..., metrics=[{target.metric!r}]) (keys loaded: {loaded})"
        )
    keys = [k for k in data.logged_keys if k != target.metric]
    shown = ", ".join(keys[:MAX_KEYS_NAMED]) + (" ..." if len(keys) > MAX_KEYS_NAMED else "")
    return f"no worker run logged {target.metric}, {what}; the runs log {shown or 'nothing'}"


def speedup_intervals(outcomes: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Per row of the table: the 95 % interval of its time-to-target efficiency (ratio of the
    reached runs' mean times, base over row, x base workers / workers); NaN unless both sides
    have two reached runs or more."""
    times = {
        (s, w): g["time_to_target_s"].dropna().to_numpy(dtype=float)
        for s, w, g in by_config(outcomes[outcomes["reached"]])
    }
    lows, highs = [], []
    for record in table.to_dict("records"):
        rec = {str(k): v for k, v in record.items()}
        empty = np.array([])
        mine = times.get((str(rec["strategy"]), int(rec["workers"])), empty)
        base = base_of(rec)
        theirs = empty if base is None else times.get(base, empty)
        _, low, high = ratio_interval(theirs, mine)
        scale = float(rec["base_workers"]) / float(rec["workers"])
        lows.append(low * scale)
        highs.append(high * scale)
    return table.assign(efficiency_ci_low=lows, efficiency_ci_high=highs)


def add_time_to_target(report: Report, data: RunData, target: Target, used: Baseline) -> None:
    """Set ``report``'s target, time-to-target table, run outcomes and warnings."""
    found = time_to_target_table(data, target, used)
    report.target = target
    report.time_to_target = found.table
    report.time_to_target_runs = found.runs
    report.convergence = convergence_series(data, target)
    report.warnings.extend(tagged(found.warnings, TABLE))
    if report.decision is not None:
        from itwin_report.report.decision import decide_to_target
        from itwin_report.report.energy_to_target import to_target

        goal = to_target(found.table, found.runs, data, str(target))
        report.decision = decide_to_target(report.decision, goal)


def _epochs(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def _why(row: dict[str, Any], base: dict[str, Any] | None) -> str:
    """Why a row's time to target scales worse: more epochs (and the batches), or not."""
    if base is None or is_missing(row["epochs_to_target"]) or is_missing(base["epochs_to_target"]):
        return "its epochs to target are unknown"
    mine, theirs = row["epochs_to_target"], base["epochs_to_target"]
    if mine <= theirs:
        return (
            f"it needs {_epochs(mine)} epochs, the base {_epochs(theirs)}: the time outside "
            "the epochs (set-up, evaluation) weighs more"
        )
    text = f"it needs {_epochs(mine)} epochs where the base needs {_epochs(theirs)}"
    if not is_missing(row["global_batch_size"]) and not is_missing(base["global_batch_size"]):
        text += (
            f": global batch {row['global_batch_size']:,.0f} vs {base['global_batch_size']:,.0f}"
        )
    return text


def efficiency_gap_line(report: Report) -> str:
    """One sentence naming the configurations whose time-to-target efficiency lies below their
    epoch-time efficiency beyond both 95 % intervals, and why (empty when none does, or when
    an interval is missing: fewer than two reached runs on a side)."""
    table = report.time_to_target
    if table.empty or report.time_to_target_runs.empty:
        return ""
    table = speedup_intervals(report.time_to_target_runs, table)
    epoch = report.epoch_time[["strategy", "workers", "efficiency", "efficiency_ci_low"]]
    both = table.merge(epoch, on=["strategy", "workers"], suffixes=("", "_epoch"))
    rows = {
        (str(r["strategy"]), int(r["workers"])): {str(k): v for k, v in r.items()}
        for r in table.to_dict("records")
    }
    parts = []
    for record in both.to_dict("records"):
        rec = {str(k): v for k, v in record.items()}
        if not rec["efficiency_ci_high"] < rec["efficiency_ci_low_epoch"]:
            continue  # NaN (an interval missing) never is
        base = base_of(rec)
        why = _why(rec, None if base is None else rows.get(base))
        parts.append(
            f"{rec['strategy']}-{int(rec['workers'])} ({100 * rec['efficiency']:.1f} % vs "
            f"{100 * rec['efficiency_epoch']:.1f} % per epoch: {why})"
        )
    if not parts:
        return ""
    return (
        "Time-to-target efficiency is below epoch-time efficiency beyond both 95 % intervals "
        f"for {'; '.join(parts)}: epochs pass faster there, but the target is not reached as "
        "much sooner."
    )


SERIES_COLUMNS = ["strategy", "workers", "job_id", "seconds", "value"]


def convergence_series(data: RunData, target: Target) -> pd.DataFrame:
    """The target metric's points of each run (its lowest rank that logged it), as seconds
    since the worker run's start, in time order: what the convergence plot draws."""
    points = target_points(data, target.metric)
    if points.empty:
        return pd.DataFrame(columns=SERIES_COLUMNS)
    points = points.sort_values(["strategy", "workers", "job_id", "timestamp", "step"])
    seconds = (points["timestamp"].astype(float) - points["start_time"]) / 1000.0
    out = points.assign(seconds=seconds)[SERIES_COLUMNS].reset_index(drop=True)
    return out.astype({"workers": "int64", "strategy": "str", "job_id": "str"})
