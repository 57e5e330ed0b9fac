"""Which MLflow job, and which worker run, each profiler trace belongs to. Pure: no store, no file
is read here (the traces' ranks and times come from :mod:`itwin_report.traces.analyze`).

itwinai writes a job's traces to
``<dir>/<run name>/torch-traces/worker_<rank>.<time>.pt.trace.json``
(``.gz`` when gzipped) and repeated jobs share the run name, so one folder may hold the traces
of several jobs. A trace is given to the job

* whose top-level run has the folder's **run name** (any job when the path is not in that
  layout);
* that has the trace's **rank**: below the job's worker count, and the trace's ``world_size``
  (``distributedInfo``) equal to it when the trace says;
* whose worker runs were running at the trace's **time**: the wall clock of its first event
  (``baseTimeNanoseconds`` + ``ts`` × 1000 ns; PyTorch versions without ``baseTimeNanoseconds``
  wrote ``ts`` as µs since the epoch; else the ``<time>`` of the file name, which PyTorch's
  trace handler takes from ``time.time_ns()`` when it writes the trace, just after the window).
  The window is the worker run of that rank (start to end), or, when the rank has no worker
  run (itwinai logs from rank 0 only by default), the job's worker runs together. A run that
  never ended is open until the next job with the same run name starts. A time inside exactly
  one window decides; when none holds it, a window within :data:`TOLERANCE_NS` (clocks of two
  nodes differ a little) does; two windows holding it are an ambiguity. A trace without a known
  time is matched only when a single job remains.

A trace logged as an artifact of a worker run belongs to that run's job (its rank from the
trace, else the run's). What does not match, or matches twice, is a warning naming the file.

Several traces of one rank in one job are the profiler's active windows (``schedule(...,
repeat=n)``): **all are used**, their seconds summed per rank (more steps, so less noise, than
the newest alone). Two traces of one rank
with the same start are the same window twice (a copy, or the same trace in the folder and
in MLflow): it counts once, and a warning names both files.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from itwin_report.util.notes import Note
from itwin_report.util.text import name_list

TABLE = "time_breakdown"  # the report table trace warnings belong to
LAYOUT_FOLDER = "torch-traces"
TOLERANCE_NS = 2e9  # a trace this close to a run's start or end still belongs to it
SAME_WINDOW_NS = 1e3  # two traces of one rank starting this close are one window
ABSOLUTE_TS_US = 1e14  # without baseTimeNanoseconds, a ts above this is µs since the epoch
NAME_TIME = re.compile(r"\.(\d{15,20})\.pt\.trace\.json(?:\.gz)?$")


@dataclass(frozen=True)
class TraceFile:
    """A trace to read: a file on disk, and the worker run it was logged to when it came from
    MLflow's artifacts (None: found in a folder)."""

    path: Path
    run_id: str | None = None
    label: str = ""  # how warnings name it (default: the path; a download's remote address)


@dataclass(frozen=True)
class TraceFacts:
    """What matching needs of one read trace."""

    file: str
    rank: int | None
    world_size: int | None
    start_ns: float  # wall clock of its first event (NaN when unknown)
    run_name: str | None = None  # the itwinai layout's <run name> (None: not in that layout)
    run_id: str | None = None  # the worker run it was logged to as an artifact


@dataclass(frozen=True)
class Match:
    """A trace and the job (and worker run) it belongs to."""

    file: str
    job_id: str
    run_id: str  # the worker run of this rank; "" when the rank has no worker run
    run_name: str
    strategy: str
    workers: int
    rank: int
    start_ns: float


@dataclass
class Matching:
    matched: list[Match] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def layout_run_name(path: PurePath) -> str | None:
    """The ``<run name>`` of ``…/<run name>/torch-traces/<file>`` (None in any other layout)."""
    parent = path.parent
    if parent.name == LAYOUT_FOLDER and parent.parent.name:
        return parent.parent.name
    return None


def name_time_ns(path: PurePath) -> float:
    """The ``<time>`` (ns since the epoch) of ``worker_<rank>.<time>.pt.trace.json``, NaN
    when the name has none."""
    found = NAME_TIME.search(path.name)
    return float(found.group(1)) if found else math.nan


def wall_clock_ns(base_ns: float, ts_us: float) -> float:
    """The wall clock of profiler time ``ts_us``: ``base_ns`` + ts × 1000; without a base,
    ``ts_us`` itself when it reads as µs since the epoch (older PyTorch), else NaN."""
    if ts_us != ts_us:
        return math.nan
    if base_ns == base_ns:
        return base_ns + ts_us * 1000.0
    return ts_us * 1000.0 if ts_us > ABSOLUTE_TS_US else math.nan


@dataclass
class _Job:
    job_id: str
    run_name: str
    strategy: str
    workers: int
    ranks: dict[int, tuple[str, float, float]]  # rank -> (run id, start ns, end ns)
    start: float = math.nan
    end: float = math.nan


def _jobs(runs: Iterable[Mapping[str, Any]]) -> dict[str, _Job]:
    """The report's jobs, each with its worker runs' windows in ns (an open end: NaN)."""
    jobs: dict[str, _Job] = {}
    for run in runs:
        job_id = str(run["job_id"])
        if job_id not in jobs:
            jobs[job_id] = _Job(
                job_id, str(run["run_name"]), str(run["strategy"]), int(run["workers"]), {}
            )
        job = jobs[job_id]
        start, end = (_ns(run.get(k)) for k in ("start_time", "end_time"))
        job.ranks.setdefault(int(run["rank"]), (str(run["run_id"]), start, end))
    for job in jobs.values():
        starts = [s for _, s, _ in job.ranks.values() if s == s]
        ends = [e for _, _, e in job.ranks.values()]
        job.start = min(starts) if starts else math.nan
        job.end = math.nan if not ends or any(e != e for e in ends) else max(ends)
    return jobs


def _ns(ms: Any) -> float:
    try:
        value = float(ms)
    except (TypeError, ValueError):
        return math.nan
    return value * 1e6 if math.isfinite(value) else math.nan


def _window(job: _Job, rank: int, later: float) -> tuple[float, float]:
    """(start, end) in ns of ``rank``'s worker run, else of the job; an open end closes at
    ``later`` (the next start of a job with the same run name, or never)."""
    _, start, end = job.ranks.get(rank, ("", job.start, job.end))
    return start, end if end == end else later


def match_traces(runs: Iterable[Mapping[str, Any]], traces: Sequence[TraceFacts]) -> Matching:
    """Each trace's job and worker run, or a warning saying why it has none.

    ``runs``: the report's worker runs (``run_id``, ``job_id``, ``run_name``, ``strategy``,
    ``workers``, ``rank``, ``start_time``, ``end_time`` in ms).
    """
    jobs = _jobs(runs)
    by_run = {rid: job for job in jobs.values() for rid, _, _ in job.ranks.values()}
    next_start = _next_starts(jobs)
    out = Matching()
    for trace in traces:
        found = _one(trace, jobs, by_run, next_start)
        if isinstance(found, str):
            out.warnings.append(Note(f"{trace.file}: {found}", TABLE, "unmatched"))
        else:
            out.matched.append(found)
    out.matched = _same_windows(out.matched, out.warnings)
    return out


def _next_starts(jobs: dict[str, _Job]) -> dict[str, float]:
    """Per job, the start of the next job with the same run name (inf when none)."""
    by_name: dict[str, list[_Job]] = {}
    for job in jobs.values():
        by_name.setdefault(job.run_name, []).append(job)
    out = {}
    for same in by_name.values():
        timed = sorted((j for j in same if j.start == j.start), key=lambda j: j.start)
        for job in same:
            later = [j.start for j in timed if job.start == job.start and j.start > job.start]
            out[job.job_id] = min(later) if later else math.inf
    return out


def _one(
    trace: TraceFacts,
    jobs: dict[str, _Job],
    by_run: dict[str, _Job],
    next_start: dict[str, float],
) -> Match | str:
    """The trace's match, or why it has none."""
    if trace.run_id is not None:
        job = by_run.get(trace.run_id)
        if job is None:
            return f"logged to run {trace.run_id[:8]}, which is not a worker run of the report"
        rank = trace.rank if trace.rank is not None else _rank_of(job, trace.run_id)
        return _match(trace, job, rank)
    if trace.rank is None:
        return "rank unknown (no distributedInfo, no worker_<rank> in the name): not matched"
    named = [j for j in jobs.values() if trace.run_name in (None, j.run_name)]
    where = f"run {trace.run_name!r}" if trace.run_name is not None else "any run"
    if not named:
        return f"no job of {where} in the report"
    fits = [j for j in named if trace.rank < j.workers and trace.world_size in (None, j.workers)]
    if not fits:
        size = f" of {trace.world_size}" if trace.world_size is not None else ""
        return f"no job of {where} has rank {trace.rank}{size}"
    chosen = _by_time(trace, fits, next_start, where)
    return chosen if isinstance(chosen, str) else _match(trace, chosen, trace.rank)


def _by_time(
    trace: TraceFacts, fits: list[_Job], next_start: dict[str, float], where: str
) -> _Job | str:
    """The one job whose window holds the trace's time, or why there is none."""
    t = trace.start_ns
    if t != t:
        if len(fits) == 1:
            return fits[0]
        return f"its time is unknown and {len(fits)} jobs of {where} could hold it"
    windows = [(j, _window(j, trace.rank or 0, next_start[j.job_id])) for j in fits]
    known = [(j, w) for j, w in windows if w[0] == w[0]]
    if not known:
        if len(fits) == 1:
            return fits[0]
        return f"{len(fits)} jobs of {where} could hold it and none has run times"
    for slack in (0.0, TOLERANCE_NS):
        inside = [j for j, (s, e) in known if s - slack <= t <= e + slack]
        if len(inside) == 1:
            return inside[0]
        if len(inside) > 1:
            ids = name_list([j.job_id[:8] for j in inside])
            return f"its time lies in {len(inside)} jobs of {where} ({ids}): ambiguous"
    return f"its time ({_utc(t)}) lies outside every worker run of {where}"


def _utc(ns: float) -> str:
    from datetime import UTC, datetime

    try:
        return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return f"{ns:.0f} ns"


def _rank_of(job: _Job, run_id: str) -> int:
    return next(rank for rank, (rid, _, _) in job.ranks.items() if rid == run_id)


def _match(trace: TraceFacts, job: _Job, rank: int) -> Match:
    run_id = job.ranks[rank][0] if rank in job.ranks else ""
    return Match(
        file=trace.file,
        job_id=job.job_id,
        run_id=run_id,
        run_name=job.run_name,
        strategy=job.strategy,
        workers=job.workers,
        rank=rank,
        start_ns=trace.start_ns,
    )


def _same_windows(matched: list[Match], warnings: list[str]) -> list[Match]:
    """``matched`` without repeats of one window (same job, rank and start); a warning each."""
    kept: dict[tuple[str, int], list[Match]] = {}
    out = []
    for match in sorted(matched, key=lambda m: (m.job_id, m.rank, m.file)):
        mine = kept.setdefault((match.job_id, match.rank), [])
        twin = next(
            (
                m
                for m in mine
                if m.start_ns == m.start_ns and abs(m.start_ns - match.start_ns) <= SAME_WINDOW_NS
            ),
            None,
        )
        if twin is not None:
            warnings.append(
                Note(
                    f"{match.file}: the same profiling window of rank {match.rank} as "
                    f"{twin.file} (job {match.run_name}, {match.job_id[:8]}): counted once",
                    TABLE,
                    "duplicate",
                )
            )
            continue
        mine.append(match)
        out.append(match)
    return out
