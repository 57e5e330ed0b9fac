"""The valid range of every value the report reads, enforced once where loading ends.

NaN is never valid. Upper bounds lie far above anything real, so that sums and means of valid
values stay finite.

The worker params (strategy, world size, rank) are checked by :func:`check_worker_params`,
which the loader calls when it picks the worker runs (naming the params as logged, e.g. by
``--workers-param``) and :func:`validate` calls again on data that did not come through it.

:func:`validate` drops what cannot be right (a negative epoch time, a utilization of 1e6, a
world size of 1e30) and blanks optional values that are out of range, so no table shows an
impossible number. Each kind of dropped or blanked data becomes ONE warning that counts it and
names the runs (their top-level run names, at most :data:`MAX_NAMED`).

=========================  ==============================================================
value                      valid
=========================  ==============================================================
workers                    integer in 1 .. :data:`MAX_WORKERS` (else the worker run goes)
rank                       integer in 0 .. workers - 1 (else the worker run goes)
strategy                   non-empty after stripping surrounding whitespace (stripped)
probing_interval           > 0 and <= 1e9 (else NaN: the step spacing is used)
samples_per_epoch          > 0 and <= 1e15 (else NaN)
batch_size                 > 0 and <= 1e15 (else NaN)
global_batch_size          > 0 and <= 1e15 (else NaN)
gpus_per_node              1 .. MAX_WORKERS (else NaN)
epoch_time_s               > 0 and <= 1e9 (s)
gpu_power_W                0 .. 1e5 (W)
gpu_energy_J               0 .. 1e15 (J, a cumulative counter)
gpu_utilization_percent    0 .. 100
system/..gpu_<i>_...       MLflow's system metrics: power_usage_watts 0 .. 1e5 (W),
                           utilization_percentage and memory_usage_percentage 0 .. 100,
                           memory_usage_megabytes 0 .. 1e9 (MB)
local/avg_samples_per_sec  0 .. 1e15
train_loss_epoch step      >= 0 (only its steps are read)
step, timestamp            integers within +-2**53, exact in float64 (else the point goes)
metric points              one per (run, key, step) of the report's keys: the last logged of the
                           valid ones is kept; points of other keys are kept as logged
self_cuda_time_total       0 .. 1e15 (microseconds)
profiler CSV               its global_rank/num_gpus agree with the worker run; one CSV per
                           rank of a job
performance.json           total_samples 0 .. 1e15, total_time > 0 and <= 1e9, records
                           1 .. MAX_WORKERS (else the record goes); compile_time and
                           programming_time 0 .. 1e9, samples_per_sec 0 .. 1e15,
                           est_samples_per_sec > 0 and <= 1e15 (else NaN)
=========================  ==============================================================

The ranges, and the report's options checked against the same ranges, live in
:mod:`itwin_report.options`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from itwin_report.data.frames import (
    isin,
    last_of_each,
    present,
    renumbered,
    rows_where,
    sort_rows,
)
from itwin_report.data.rundata import (
    EPOCH_TIME,
    GLOBAL_RATE,
    GPU_ENERGY,
    GPU_POWER,
    GPU_UTIL,
    METRIC_KEYS,
    RATE,
    TRAIN_LOSS_EPOCH,
    RunData,
)
from itwin_report.data.system_keys import system_gpu_key
from itwin_report.options import (
    MAX_SECONDS,
    MAX_WORKERS,
    NON_NEGATIVE,
    POSITIVE,
    SECONDS,
    Range,
)
from itwin_report.util.notes import Note

MAX_NAMED = 5
# the report table whose data each metric feeds (warnings about it are grouped there)
TABLE_OF_KEY = {
    EPOCH_TIME: "epoch_time",
    GPU_POWER: "gpu",
    GPU_UTIL: "gpu",
    GPU_ENERGY: "gpu",
    RATE: "throughput",
    GLOBAL_RATE: "throughput",
    TRAIN_LOSS_EPOCH: "throughput",
}


MAX_WATTS = 1e5  # one device
METRIC_RANGES: dict[str, Range] = {
    EPOCH_TIME: SECONDS,
    GPU_POWER: Range(0.0, MAX_WATTS),
    GPU_UTIL: Range(0.0, 100.0),
    GPU_ENERGY: Range(0.0, 1e15),
    RATE: NON_NEGATIVE,
    GLOBAL_RATE: NON_NEGATIVE,
}
# MLflow's system GPU metrics, by the report's name of their measure
SYSTEM_GPU_RANGES: dict[str, Range] = {
    "power_w": Range(0.0, MAX_WATTS),
    "utilization_pct": Range(0.0, 100.0),
    "memory_pct": Range(0.0, 100.0),
    "memory_mb": Range(0.0, 1e9),
}
RUN_VALUES: dict[str, Range] = {
    "probing_interval": SECONDS,
    "samples_per_epoch": POSITIVE,
    "batch_size": POSITIVE,
    "global_batch_size": POSITIVE,
    "gpus_per_node": Range(1.0, MAX_WORKERS),
}
PERFORMANCE_REQUIRED: dict[str, Range] = {
    "total_samples": NON_NEGATIVE,
    "total_time": SECONDS,
    "records": Range(1.0, MAX_WORKERS),
}
PERFORMANCE_OPTIONAL: dict[str, Range] = {
    "compile_time": Range(0.0, MAX_SECONDS),
    "programming_time": Range(0.0, MAX_SECONDS),
    "samples_per_sec": NON_NEGATIVE,
    "est_samples_per_sec": POSITIVE,
}


# metric steps and timestamps travel as float64 through the SQLite readers: only integers within
# +-2**53 survive that exactly, and none of a real run's lies beyond
MAX_EXACT_INTEGER = float(2**53)
POINT_INTEGER = Range(-MAX_EXACT_INTEGER, MAX_EXACT_INTEGER)
POINT_INTEGER_TEXT = "within -2**53..2**53"

STRATEGY, WORLD_SIZE, RANK = "strategy", "global_world_size", "global_rank"
WORKER_PARAMS_CHECKED = (STRATEGY, WORLD_SIZE, RANK)


@dataclass
class WorkerParams:
    """Parsed worker params: what is wrong with each row ("" when nothing), and the integers.

    ``workers`` and ``rank`` hold 0 where the row has a problem, so they always fit int64.
    """

    problems: pd.Series
    strategy: pd.Series
    workers: pd.Series
    rank: pd.Series


def _float(value: object) -> float:
    """``float(value)`` (inf for a 400-digit integer), NaN when it is no number."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return float("nan")


def _integers(values: pd.Series) -> pd.Series:
    """Numbers parsed from numbers or text like "4", "4.0" and "inf" (as floats).

    NaN where the value is no number or has a fraction; an infinity (or a number too large
    for a float) is kept, for the range check to refuse.
    """
    if values.dtype == object or pd.api.types.is_string_dtype(values.dtype):
        values = values.astype(object).map(lambda v: v.strip() if isinstance(v, str) else v)
    numbers = pd.to_numeric(values, errors="coerce").astype("float64")
    missed = numbers.isna() & values.notna()
    if missed.any():  # pandas before 3 gives NaN for a number too large for a float
        numbers = numbers.where(~missed, values.map(_float).astype("float64"))
    x = numbers.to_numpy()
    with np.errstate(invalid="ignore"):
        whole = ~np.isfinite(x) | (np.floor(np.where(np.isfinite(x), x, 0.0)) == x)
    return numbers.where(whole)


def check_worker_params(
    frame: pd.DataFrame, names: Mapping[str, str] | None = None
) -> WorkerParams:
    """The one rule for a worker's strategy, world size and rank.

    ``frame`` has columns ``strategy``, ``global_world_size`` and ``global_rank`` (text as
    logged, or numbers); ``names`` maps those to the param names in the store (for
    ``--workers-param``), so each problem names the param the user logged. Valid: a strategy
    that is not blank, a world size that is an integer in 1 .. :data:`MAX_WORKERS`, and a rank
    that is an integer in 0 .. world size - 1.
    """
    shown = {c: (names or {}).get(c, c) for c in WORKER_PARAMS_CHECKED}
    strategy = frame[STRATEGY].astype(object)
    given = {c: frame[c].notna() for c in WORKER_PARAMS_CHECKED}
    blank = given[STRATEGY] & (strategy.map(lambda v: str(v).strip()) == "")
    size = _integers(frame[WORLD_SIZE])
    rank = _integers(frame[RANK])
    size_ok = size.between(1, MAX_WORKERS)
    checks = [
        (~given[STRATEGY], f"no {shown[STRATEGY]} param"),
        (blank, f"{shown[STRATEGY]} is blank"),
        (~given[WORLD_SIZE], f"no {shown[WORLD_SIZE]} param"),
        (given[WORLD_SIZE] & size.isna(), f"{shown[WORLD_SIZE]} is not an integer"),
        (
            size.notna() & ~size_ok,
            f"{shown[WORLD_SIZE]} is outside 1..{MAX_WORKERS:,}",
        ),
        (~given[RANK], f"no {shown[RANK]} param"),
        (given[RANK] & rank.isna(), f"{shown[RANK]} is not an integer"),
        (
            rank.notna() & size_ok & ((rank < 0) | (rank >= size)),
            f"{shown[RANK]} is outside 0..{shown[WORLD_SIZE]}-1",
        ),
    ]
    found = [""] * len(frame)
    for mask, text in checks:
        for i in np.flatnonzero(mask.fillna(False).to_numpy(dtype=bool)):
            found[i] = f"{found[i]}; {text}" if found[i] else text
    problems = pd.Series(found, index=frame.index, dtype=object)
    good = (problems == "").to_numpy()
    return WorkerParams(
        problems=problems,
        strategy=strategy.where(good, ""),
        workers=size.where(good, 0).fillna(0).astype("int64"),
        rank=rank.where(good, 0).fillna(0).astype("int64"),
    )


def grouped(
    problems: Mapping[str, Sequence[str]], template: str, kind: str = "", table: str = ""
) -> list[str]:
    """One warning per kind of problem: ``template`` with ``{n}``, ``{runs}`` and ``{what}``.

    ``problems`` maps each problem's text to the names of the runs that have it; each warning
    is a :class:`~itwin_report.util.notes.Note` of ``kind`` counting those runs.
    """
    return [
        Note(
            template.format(n=len(runs), runs=named(list(runs)), what=what), table, kind, len(runs)
        )
        for what, runs in sorted(problems.items())
        if runs
    ]


def named(names: pd.Series | list[str]) -> str:
    """``'a', 'b', 'c' and 2 more`` for the distinct names, sorted."""
    unique = sorted({str(n) for n in names})
    shown = ", ".join(repr(n) for n in unique[:MAX_NAMED])
    more = len(unique) - MAX_NAMED
    return f"{shown} and {more} more" if more > 0 else shown


class _Notes:
    """Collects one warning per kind of dropped data."""

    def __init__(self, runs: pd.DataFrame) -> None:
        self.run_names = dict(zip(runs["run_id"], runs["run_name"], strict=True))
        self.warnings: list[str] = []

    def add(self, count: int, text: str, run_ids: pd.Series | list[str], table: str = "") -> None:
        """Add ``text`` with ``{n}`` (the count) and ``{runs}`` (the run names) filled in, as a
        note of ``table`` (the report table whose data it drops)."""
        if count:
            names = named([self.run_names.get(r, str(r)[:8]) for r in run_ids])
            self.warnings.append(Note(text.format(n=count, runs=names), table, "dropped", count))


def validate(data: RunData) -> RunData:
    """A copy of ``data`` holding only values in their valid range, with warnings appended."""
    runs, run_warnings = _valid_runs(data.runs)
    notes = _Notes(data.runs)
    notes.warnings = run_warnings
    kept = set(runs["run_id"])
    metrics = _valid_metrics(_of_runs(data.metrics, kept), notes)
    profiles = _valid_profiles(_of_runs(data.profiles, kept), runs, notes)
    performance = _valid_performance(_of_runs(data.performance, kept), notes)
    return RunData(
        experiment=data.experiment,
        tracking_uri=data.tracking_uri,
        runs=runs,
        metrics=metrics,
        profiles=profiles,
        performance=performance,
        warnings=[*data.warnings, *notes.warnings],
        logged_keys=list(data.logged_keys),
    )


def _of_runs(frame: pd.DataFrame, kept: set[str]) -> pd.DataFrame:
    """The rows of ``frame`` whose run is kept (the frame itself, not a copy, when all are)."""
    return rows_where(frame, isin(frame["run_id"], kept))


def _valid_runs(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Worker runs with a sane world size and rank, stripped strategy, optional values in range."""
    out = runs.copy()
    warnings: list[str] = []
    stripped = out["strategy"].astype("str").str.strip()
    changed = stripped != out["strategy"]
    if changed.any():
        raw = sorted({repr(s) for s in out.loc[changed, "strategy"]})
        warnings.append(
            f"strategy names with surrounding whitespace were stripped ({', '.join(raw[:5])}) "
            f"in run(s) {named(out.loc[changed, 'run_name'])}"
        )
        out["strategy"] = stripped
    checked = check_worker_params(
        pd.DataFrame(
            {STRATEGY: out["strategy"], WORLD_SIZE: out["workers"], RANK: out["rank"]},
            index=out.index,
        )
    )
    good = (checked.problems == "").to_numpy()
    if not good.all():
        bad = out[~good]
        by_problem: dict[str, list[str]] = {}
        for name, text in zip(bad["run_name"], checked.problems[~good], strict=True):
            by_problem.setdefault(text, []).append(str(name))
        warnings += grouped(by_problem, "dropped {n} worker run(s) of {runs}: {what}")
        out = out[good]
    for column, valid in RUN_VALUES.items():
        given = out[column].notna()
        wrong = given & ~valid.ok(out[column])
        if wrong.any():
            warnings.append(
                f"ignored {column} of {int(wrong.sum())} worker run(s) of "
                f"{named(out.loc[wrong, 'run_name'])}: not {valid}"
            )
            out[column] = out[column].where(~wrong)
    return out.reset_index(drop=True), warnings


def _ranges(keys: list[str]) -> dict[str, Range]:
    """The valid range of each of ``keys`` that has one (the report's keys, system GPU keys)."""
    ranges = {k: v for k, v in METRIC_RANGES.items() if k in keys}
    for key in keys:
        parsed = system_gpu_key(key)
        if parsed is not None:
            ranges[key] = SYSTEM_GPU_RANGES[parsed[2]]
    return ranges


def _valid_metrics(metrics: pd.DataFrame, notes: _Notes) -> pd.DataFrame:
    """Points in range, one per (run, key, step)."""
    keep = np.ones(len(metrics), dtype=bool)
    keys = metrics["key"]
    for key, valid in _ranges(present(keys)).items():
        mine = (keys == key).to_numpy(dtype=bool)
        if not mine.any():
            continue
        wrong = mine & ~valid.ok(metrics["value"])
        nans = int((wrong & metrics["value"].isna().to_numpy()).sum())
        notes.add(
            int(wrong.sum()),
            f"dropped {{n}} {key} point(s) of {{runs}}: not {valid}"
            + (f" ({nans} NaN)" if nans else ""),
            metrics["run_id"][wrong],
            TABLE_OF_KEY.get(key, "gpu"),
        )
        keep &= ~wrong
    steps = metrics["step"].to_numpy(dtype="int64")
    wrong = (keys == TRAIN_LOSS_EPOCH).to_numpy(dtype=bool) & (steps < 0)
    notes.add(
        int(wrong.sum()),
        f"dropped {{n}} {TRAIN_LOSS_EPOCH} point(s) of {{runs}}: negative step",
        metrics["run_id"][wrong],
    )
    keep &= ~wrong
    for column in ("step", "timestamp"):
        wrong = ~POINT_INTEGER.ok(metrics[column])
        notes.add(
            int(wrong.sum()),
            f"dropped {{n}} metric point(s) of {{runs}}: {column} not {POINT_INTEGER_TEXT}",
            metrics["run_id"][wrong],
        )
        keep &= ~wrong
    out = rows_where(metrics, keep)  # no copy of the points when every one is valid
    # only after the range checks: a repeated point that is invalid never hides a valid one
    order = sort_rows(out, ["run_id", "key", "step", "timestamp"])
    # the report's own keys: one point per step; any other key (a validation metric, which
    # may be logged several times at one step) keeps every point as logged
    dup = last_of_each(order, ["run_id", "key", "step"]) & isin(order["key"], METRIC_KEYS)
    notes.add(
        int(dup.sum()),
        "dropped {n} duplicated point(s) of {runs} (same run, key and step; the last "
        "logged value is kept)",
        order["run_id"][dup],
    )
    return renumbered(rows_where(order, ~dup))


def _valid_profiles(profiles: pd.DataFrame, runs: pd.DataFrame, notes: _Notes) -> pd.DataFrame:
    """Profiler rows with a valid device time, from CSVs that belong to their run's job."""
    wrong = ~NON_NEGATIVE.ok(profiles["self_cuda_time_total"])
    notes.add(
        int(wrong.sum()),
        f"dropped {{n}} profiler row(s) of {{runs}}: self_cuda_time_total not {NON_NEGATIVE}",
        profiles.loc[wrong, "run_id"],
        table="computation",
    )
    rows = profiles[~wrong]
    if rows.empty:
        return rows
    owner = runs.set_index("run_id")[["job_id", "rank", "workers", "strategy"]]
    files = rows.groupby("run_id", sort=True).agg(
        csv_rank=("global_rank", "first"),
        csv_gpus=("num_gpus", "first"),
        csv_strategy=("csv_strategy", "first"),
    )
    files = files.join(owner, how="inner")
    files["from_rank"] = files["csv_rank"].fillna(files["rank"]).astype("int64")
    other_job = files["csv_gpus"].notna() & (files["csv_gpus"] != files["workers"])
    other_rank = files["from_rank"] != files["rank"]
    strategy_differs = (files["csv_strategy"].str.strip() != "") & (
        files["csv_strategy"].str.strip() != files["strategy"]
    )
    # one CSV per (job, rank it came from): the one in that rank's own run first
    files["own"] = ~other_rank
    ranked = files[~other_job].sort_values(["own", "run_id"], ascending=[False, True])
    twice = ranked.duplicated(["job_id", "from_rank"])
    dropped = set(files.index[other_job]) | set(ranked.index[twice])
    notes.add(
        int(other_rank.sum()),
        "{n} profiler CSV(s) of {runs} were written by another rank (their global_rank "
        "differs from the worker run's)",
        list(files.index[other_rank]),
        table="computation",
    )
    notes.add(
        int(other_job.sum()),
        "dropped {n} profiler CSV(s) of {runs}: their num_gpus differs from the worker "
        "run's world size",
        list(files.index[other_job]),
        table="computation",
    )
    notes.add(
        int(twice.sum()),
        "dropped {n} profiler CSV(s) of {runs} that would count a rank twice (another "
        "CSV of the same job comes from that rank)",
        list(ranked.index[twice]),
        table="computation",
    )
    notes.add(
        int(strategy_differs.sum()),
        "{n} profiler CSV(s) of {runs} name another strategy than their worker run (kept)",
        list(files.index[strategy_differs]),
        table="computation",
    )
    return rows[~rows["run_id"].isin(dropped)].reset_index(drop=True)


def _valid_performance(perf: pd.DataFrame, notes: _Notes) -> pd.DataFrame:
    """performance.json rows with valid totals; optional fields out of range become NaN."""
    out = perf.copy()
    good = np.ones(len(out), dtype=bool)
    for column, valid in PERFORMANCE_REQUIRED.items():
        good &= valid.ok(out[column])
    notes.add(
        int((~good).sum()),
        f"dropped {{n}} performance.json record(s) of {{runs}}: total_samples not "
        f"{NON_NEGATIVE}, total_time not {SECONDS}, or records outside 1..{MAX_WORKERS:,}",
        out.loc[~good, "run_id"],
        table="throughput",
    )
    out = out[good]
    for column, valid in PERFORMANCE_OPTIONAL.items():
        wrong = out[column].notna() & ~valid.ok(out[column])
        if column == "est_samples_per_sec":
            wrong &= out[column] != 0  # 0 is how an unset estimate reads: silently unknown
            out[column] = out[column].where(out[column] != 0)
        notes.add(
            int(wrong.sum()),
            f"ignored {column} in {{n}} performance.json record(s) of {{runs}}: not {valid}",
            out.loc[wrong, "run_id"],
            table="throughput",
        )
        out[column] = out[column].where(~wrong)
    return out.reset_index(drop=True)
