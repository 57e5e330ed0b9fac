"""Where the time goes, per configuration, and one verdict on what bounds it.

Per job, then averaged over the configuration's jobs:

* ``wall_s``: the job's wall time (``total_time`` of performance.json, the longest worker's);
* ``epochs_s``: the sum of its epoch times (all epochs, warm-up included); ``outside_s`` =
  wall − epochs: set-up and teardown;
* ``steady_s``: the epochs' samples at the steady-state rate: samples per epoch × epochs /
  (the steady ``local_samples_per_sec`` of the job's lowest-rank run × workers);
  ``rest_s`` = epochs − steady: validation, checkpoints and the warm-up's excess;
* from traces (when given): ``compute_pct``, ``exposed_communication_pct`` and ``idle_pct`` of
  the device span, averaged over the configuration's ranks (every rank of every job with a
  matched trace, each rank's profiling windows summed first: :mod:`itwin_report.traces.match`).

``bound_by`` is decided only from the numbers the row shows, in this order, with them in
``evidence``: ``a straggler`` (one named by traces or metrics), ``the input pipeline`` (the
throughput table's verdict), ``fixed per-epoch overhead`` (wall time outside steady steps at
least :data:`OVERHEAD_SHARE`), ``communication`` (traces: exposed communication at least
:data:`EXPOSED_SHARE` of the span), else ``computation``. Without a wall-time split it is
``undecided`` and the evidence says what would decide it; without traces, steps that take most
of the wall time are ``undecided`` between computation and communication. A share whose 95 %
interval (over the jobs; for exposed communication, over the traced ranks) holds its threshold
is ``near the line: A or B``: noise never flips it.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from itwin_report.analysis.intervals import mean_interval
from itwin_report.data.frames import coded, isin, join_runs, text_index, value_codes
from itwin_report.data.rundata import EPOCH_TIME, RATE, RunData
from itwin_report.report import specs
from itwin_report.report.common import coded_runs, configurations, finish
from itwin_report.report.rates import steady_rate_of
from itwin_report.report.stragglers import COLUMNS as METRIC_STRAGGLER_COLUMNS
from itwin_report.traces.kinds import PERCENTS, SECONDS

OVERHEAD_SHARE = 0.25
EXPOSED_SHARE = 0.20
STRAGGLER = "a straggler"
INPUT = "the input pipeline"
OVERHEAD = "fixed per-epoch overhead"
COMMUNICATION = "communication"
COMPUTATION = "computation"
UNDECIDED = "undecided"
NEAR = "near"
NEAR_TEXT = "near the line: "
COLUMNS = specs.TIME_BREAKDOWN.names
nan = math.nan

# the report's ``trace_ranks``: one row per job and rank with a matched trace (JSON key
# ``trace_ranks``; the analyze-traces columns, the rank's windows summed)
TRACE_RANK_COLUMNS = [
    "strategy",
    "workers",
    "job_id",
    "run_id",
    "run_name",
    "rank",
    "world_size",
    "device",
    "windows",
    "files",
    "steps",
    *SECONDS,
    *PERCENTS,
    "compute_per_step_s",
    "launch_lag_s",
]
# the report's ``stragglers``: one row per straggling rank (or node) of a job, every measure
# that names it together; ``source``: "traces", "metrics" or both
STRAGGLER_COLUMNS = [*METRIC_STRAGGLER_COLUMNS, "source"]


def trace_ranks(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The per-rank trace rows as a frame with :data:`TRACE_RANK_COLUMNS`."""
    return pd.DataFrame(rows, columns=TRACE_RANK_COLUMNS)


def merged_stragglers(metrics: pd.DataFrame, traces: list[dict[str, Any]]) -> pd.DataFrame:
    """Stragglers from traces and from metrics, one row per job and rank (or node): the
    measures that name it joined, the traces' evidence first."""
    rows = [{**r, "source": "traces"} for r in traces]
    rows += [{**r, "source": "metrics"} for r in _records(metrics)]
    merged: dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, list[str]]]] = {}
    joined = {"measure": ", ", "text": "; ", "source": ", "}
    for row in rows:
        ranks = tuple(int(r) for r in row["ranks"])
        key = (row["strategy"], int(row["workers"]), str(row["job_id"]), ranks, row["scope"])
        first, parts = merged.setdefault(key, ({c: row.get(c) for c in STRAGGLER_COLUMNS}, {}))
        for column in joined:
            seen = parts.setdefault(column, [])
            if str(row[column]) not in seen:
                seen.append(str(row[column]))
    out = []
    for key in sorted(merged):
        first, parts = merged[key]
        out.append({**first, **{c: sep.join(parts[c]) for c, sep in joined.items()}})
    return pd.DataFrame(out, columns=STRAGGLER_COLUMNS)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in rec.items()} for rec in frame.to_dict("records")]


def job_times(data: RunData) -> pd.DataFrame:
    """Per job: strategy, workers, wall, epochs and steady-state seconds (NaN when unknown).

    One pass over the points of the two keys it needs, grouped once (never a scan per job).
    """
    runs = data.runs.drop_duplicates("run_id")
    keys = data.metrics["key"]
    wanted = data.metrics[isin(keys, [EPOCH_TIME, RATE])]
    metrics = join_runs(wanted, coded_runs(runs[["run_id", "job_id"]], ("job_id",)), ["job_id"])
    # epochs: the lowest run (rank) of the job that logged them
    epochs = metrics[metrics["key"] == EPOCH_TIME]
    run_codes = pd.Series(value_codes(epochs["run_id"]), index=epochs.index)
    first_run = run_codes.groupby(epochs["job_id"], observed=True).transform("min")
    firsts = epochs[run_codes == first_run].groupby("job_id", observed=True)["value"]
    epochs = text_index(firsts.agg(["sum", "size"]))
    rates = metrics[metrics["key"] == RATE]
    rate_runs = dict(list(rates.groupby("run_id", sort=False, observed=True)))
    rate_run_of = _lowest_run(rates)
    walls = (
        data.performance.merge(runs[["run_id", "job_id"]], on="run_id")
        .groupby("job_id")["total_time"]
        .max()
    )
    rows = []
    for job, mine in runs.groupby("job_id", sort=True):
        first = mine.iloc[0]
        workers = int(first["workers"])
        run = rate_run_of.get(job)
        rate = _job_rate(rate_runs[run], workers) if run is not None else nan
        samples = mine["samples_per_epoch"].dropna()
        count = int(epochs["size"].get(job, 0))
        steady = (
            count * float(samples.iloc[0]) / rate
            if count and len(samples) and rate == rate and rate > 0
            else nan
        )
        wall = walls.get(job, nan)
        rows.append(
            {
                "job_id": str(job),
                "strategy": str(first["strategy"]),
                "workers": workers,
                "wall_s": float(wall) if wall == wall else nan,
                "epochs_s": float(epochs["sum"].get(job, nan)) if count else nan,
                "steady_s": steady,
            }
        )
    return pd.DataFrame(
        rows, columns=["job_id", "strategy", "workers", "wall_s", "epochs_s", "steady_s"]
    )


def _lowest_run(points: pd.DataFrame) -> pd.Series:
    """Per job (indexed by its id, as text): the lowest id of its runs that have ``points``."""
    codes, ids = coded(points["run_id"])  # in the order of the ids: the lowest code is theirs
    lowest = pd.Series(codes, index=points.index).groupby(points["job_id"], observed=True).min()
    named = ids.astype(object)[lowest.to_numpy(dtype=np.int64)]
    return text_index(pd.Series(named, index=lowest.index))


def _job_rate(rate: pd.DataFrame, workers: int) -> float:
    """The job's steady-state samples per second: its lowest-rank run's steady Rate (``rate``:
    that run's Rate points; the one rule of :mod:`itwin_report.report.rates`) × workers."""
    if rate.empty:
        return nan
    first = rate.sort_values("step", kind="stable")
    value, _ = steady_rate_of(first["step"].to_numpy(float), first["value"].to_numpy(float))
    return value * workers


def time_breakdown(
    data: RunData,
    throughput: pd.DataFrame | None = None,
    traces: pd.DataFrame | None = None,
    stragglers: pd.DataFrame | None = None,
    warnings: list[str] | None = None,
) -> pd.DataFrame:
    """The "Where the time goes" table: one row per configuration with its verdict.

    ``traces``: per-rank trace rows with ``strategy``, ``workers`` and the ``analyze-traces``
    columns; ``stragglers``: rows with ``strategy``, ``workers`` and ``text``. A job whose
    epochs sum to more than its wall time (impossible: e.g. duplicated ``epoch_time_s`` steps)
    loses its split, and ``warnings`` gets a line naming it.
    """
    jobs = _possible_jobs(job_times(data), data.runs, warnings if warnings is not None else [])
    rows = []
    for strategy, workers in configurations(data.runs):
        mine = jobs[(jobs["strategy"] == strategy) & (jobs["workers"] == workers)]
        row: dict[str, Any] = {"strategy": strategy, "workers": workers, "runs": len(mine)}
        for col in ("wall_s", "epochs_s", "steady_s"):
            row[col] = float(mine[col].mean()) if mine[col].notna().any() else nan
        row["outside_s"] = row["wall_s"] - row["epochs_s"]
        row["rest_s"] = row["epochs_s"] - row["steady_s"]
        row.update(_trace_shares(traces, strategy, workers))
        row["bound_by"], row["evidence"] = verdict(
            row,
            Shares(_overhead_half(mine), _exposed_half(traces, strategy, workers)),
            _named(stragglers, strategy, workers),
            _value(throughput, strategy, workers, "input_bound"),
        )
        rows.append(row)
    return finish(rows, COLUMNS)


WALL_SLACK = 1.01  # epochs may exceed the wall time by rounding only


def _possible_jobs(jobs: pd.DataFrame, runs: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    """``jobs`` with the split of every job whose epochs outlast its wall time dropped, and a
    warning per such job naming its run."""
    bad = (jobs["epochs_s"] > WALL_SLACK * jobs["wall_s"]).to_numpy(dtype=bool)
    if not bad.any():
        return jobs
    names = runs.drop_duplicates("job_id").set_index("job_id")["run_name"]
    for rec in jobs[bad].to_dict("records"):
        warnings.append(
            f"dropped the wall-time split of run {names.get(rec['job_id'], rec['job_id'])} "
            f"(job {str(rec['job_id'])[:8]}): its epochs sum to {rec['epochs_s']:.1f} s, more "
            f"than its wall time ({rec['wall_s']:.1f} s); duplicated epoch_time_s steps?"
        )
    out = jobs.copy()
    out.loc[bad, ["wall_s", "epochs_s", "steady_s"]] = nan
    return out


def _trace_shares(traces: pd.DataFrame | None, strategy: str, workers: int) -> dict[str, float]:
    out = {"compute_pct": nan, "exposed_communication_pct": nan, "idle_pct": nan}
    if traces is None or traces.empty:
        return out
    mine = traces[(traces["strategy"] == strategy) & (traces["workers"] == workers)]
    if mine.empty:
        return out
    exposed = 100 * mine["exposed_communication_s"] / mine["span_s"]
    return {
        "compute_pct": float(mine["compute_pct"].mean()),
        "exposed_communication_pct": float(exposed.mean()),
        "idle_pct": float(mine["idle_pct"].mean()),
    }


def _named(stragglers: pd.DataFrame | None, strategy: str, workers: int) -> list[str]:
    if stragglers is None or stragglers.empty:
        return []
    mine = stragglers[(stragglers["strategy"] == strategy) & (stragglers["workers"] == workers)]
    return [str(t) for t in mine["text"]]


def _value(table: pd.DataFrame | None, strategy: str, workers: int, column: str) -> Any:
    if table is None or table.empty or column not in table:
        return None
    mine = table[(table["strategy"] == strategy) & (table["workers"] == workers)]
    return None if mine.empty else mine.iloc[0][column]


class Shares(NamedTuple):
    """Half-widths of the 95 % intervals of a row's two shares (NaN with fewer than two values):
    ``overhead``, of the wall time outside steady steps, over the configuration's jobs (a
    fraction); ``exposed``, of exposed communication, over its traced ranks (percent)."""

    overhead: float
    exposed: float


def _half(values: np.ndarray) -> float:
    """Half-width of the 95 % interval of the mean of ``values`` (NaN under two values)."""
    mean, low, _ = mean_interval(values)
    return mean - low


def _overhead_half(jobs: pd.DataFrame) -> float:
    """The interval's half-width of the share outside steady steps, over ``jobs`` that have
    both a wall time and steady steps."""
    wall, steady = jobs["wall_s"].to_numpy(float), jobs["steady_s"].to_numpy(float)
    known = (wall > 0) & ~np.isnan(steady)
    return _half(1 - steady[known] / wall[known])


def _exposed_half(traces: pd.DataFrame | None, strategy: str, workers: int) -> float:
    if traces is None or traces.empty:
        return nan
    mine = traces[(traces["strategy"] == strategy) & (traces["workers"] == workers)]
    return _half((100 * mine["exposed_communication_s"] / mine["span_s"]).to_numpy(float))


def _side(value: float, half: float, line: float) -> str:
    """``near`` when ``line`` lies within ``value``'s noise (``half``), else ``above`` (at least
    the line) or ``below``."""
    if half > 0 and abs(value - line) < half:  # NaN compares false
        return NEAR
    return "above" if value >= line else "below"


def _interval(value: float, half: float) -> str:
    if half != half:
        return "one run: no interval"
    return f"95 % interval {value - half:.1f}–{value + half:.1f} %"


def verdict(
    row: dict[str, Any], shares: Shares, stragglers: list[str], input_bound: Any
) -> tuple[str, str]:
    """(bound_by, evidence) for one configuration's row, decided only from the row's numbers:
    "undecided" (and what would decide) where they are missing, "near the line: A or B"
    where a share is within its noise of its threshold."""
    if stragglers:
        return STRAGGLER, stragglers[0]
    if input_bound is True or input_bound == True:  # noqa: E712 - numpy bools too
        return INPUT, "the throughput table finds it input-bound"
    wall, steady = row["wall_s"], row["steady_s"]
    if not (wall > 0 and steady == steady):  # NaN compares false
        return UNDECIDED, _missing(row, shares.exposed, input_bound)
    share = 1 - steady / wall
    side = _side(share, shares.overhead, OVERHEAD_SHARE)
    split = (
        f"{100 * share:.1f} % of the wall time ({wall:.1f} s) is outside steady-state steps "
        f"({_interval(100 * share, 100 * shares.overhead)}; the line: "
        f"{100 * OVERHEAD_SHARE:.0f} %): {row['outside_s']:.1f} s outside the epochs (set-up, "
        f"teardown), {row['rest_s']:.1f} s inside them (validation, checkpoints, warm-up)"
    )
    if side == "above":
        return OVERHEAD, split
    steps, why = _steps(row, shares.exposed)
    if side == NEAR:
        candidate = "steady steps" if steps == UNDECIDED else steps.removeprefix(NEAR_TEXT)
        return f"{NEAR_TEXT}{OVERHEAD} or {candidate}", f"{split}; {why}"
    return steps, f"{split}; {why}"


def _steps(row: dict[str, Any], half: float) -> tuple[str, str]:
    """What bounds the steady steps: the traces' exposed communication against its line."""
    exposed = row["exposed_communication_pct"]
    if exposed != exposed:
        return UNDECIDED, (
            "no traces to split the steady steps into compute and exposed communication "
            "(--traces would)"
        )
    why = (
        f"exposed communication is {exposed:.1f} % of the device time "
        f"({_interval(exposed, half)}; the line: {100 * EXPOSED_SHARE:.0f} %), compute "
        f"{row['compute_pct']:.1f} %, idle {row['idle_pct']:.1f} %"
    )
    side = _side(exposed, half, 100 * EXPOSED_SHARE)
    if side == NEAR:
        return f"{NEAR_TEXT}{COMMUNICATION} or {COMPUTATION}", why
    return (COMMUNICATION if side == "above" else COMPUTATION), why


def _missing(row: dict[str, Any], half: float, input_bound: Any) -> str:
    """What would decide a row without a wall-time split."""
    needs = []
    if not row["wall_s"] > 0:
        needs.append("the runs' wall time (total_time of performance.json)")
    if row["steady_s"] != row["steady_s"]:
        needs.append("the steady-state rate (Rate metrics) with samples per epoch")
    text = f"no wall-time split to decide from: it needs {', and '.join(needs)}"
    if row["exposed_communication_pct"] == row["exposed_communication_pct"]:
        steps, why = _steps(row, half)
        text += f"; the traced steps alone read {steps} ({why})"
    else:
        text += "; traces (--traces) would then split the steady steps"
    if not isinstance(input_bound, (bool, np.bool_)):
        text += "; whether the input pipeline bounds it is undecided too (the throughput table)"
    return text
