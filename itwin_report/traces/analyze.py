"""A set of traces: found under the paths given, read rank by rank (in parallel when large),
grouped into jobs, and the stragglers of each job named.

``analyze-traces`` (:func:`analyze_traces`) knows no MLflow run: a job is the traces of one
folder (itwinai writes ``<run name>/torch-traces/worker_<rank>…``). Repeated jobs with the same
run name share the folder: when every rank appears the same number of times, the n-th trace of
each rank (by start time) belongs to the n-th job; otherwise a rank seen twice is a warning and
only its first trace is compared.

The scalability report (:func:`run_traces`) knows the runs: each trace is matched to its MLflow
job and worker run by run name, rank and time (:mod:`itwin_report.traces.match`), a rank's
profiling windows are summed into one row per job and rank, and the stragglers of each job are
named with their node when the rank's worker run logs a ``hostname``. Each trace is read once.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from itwin_report.analysis.outliers import Straggler, lagging
from itwin_report.traces import collectives
from itwin_report.traces.kinds import PERCENTS, SECONDS
from itwin_report.traces.match import (
    Match,
    TraceFacts,
    TraceFile,
    layout_run_name,
    match_traces,
    name_time_ns,
    wall_clock_ns,
)
from itwin_report.traces.reader import (
    RawTrace,
    TraceReadError,
    is_trace_name,
    rank_from_name,
    read_trace,
)
from itwin_report.traces.timeline import RankTimeline, analyse
from itwin_report.util.errors import NothingMeasured, ReportError
from itwin_report.util.notes import Note
from itwin_report.util.text import name_list, plural

TABLE = "traces"
# below this much trace text in all, reading in one process is faster: a pool's start costs
# about 0.55 s before a worker reads (its own interpreter and imports, or the fork server's),
# where reading takes about 10 ms per MiB (docs/traces.md)
PARALLEL_MIN_BYTES = 64 << 20
MEASURES = (  # (timeline attribute, words, unit)
    ("compute_per_step_s", "compute per step", " s"),
    ("launch_lag_s", "collective launch delay per step", " s"),
)


@dataclass
class TraceSet:
    """The analysed traces: one timeline per readable trace, stragglers, warnings."""

    ranks: list[RankTimeline] = field(default_factory=list)
    stragglers: list[dict[str, object]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def collectives(self) -> list[dict[str, object]]:
        """Per rank, collective and group size: count, bytes, kernel time, algbw, busbw."""
        return [{"rank": r.rank, **row} for r in self.ranks for row in r.collectives]

    def collective_sizes(self) -> list[dict[str, object]]:
        """Per rank, collective, group size and size class: count, bytes, kernel time and
        the busbw median and quartiles over the kernels."""
        return [{"rank": r.rank, **row} for r in self.ranks for row in r.size_classes]

    def link_fits(self) -> list[dict[str, object]]:
        """Per rank with enough distinct message sizes: time = alpha + bus bytes / beta."""
        return [{"rank": r.rank, **r.link_fit} for r in self.ranks if r.link_fit is not None]

    def to_dict(self) -> dict[str, object]:
        return {
            "ranks": [r.row() for r in self.ranks],
            "collectives": self.collectives(),
            "collective_sizes": self.collective_sizes(),
            "link_fits": self.link_fits(),
            "stragglers": self.stragglers,
            "warnings": [str(w) for w in self.warnings],
        }


def find_traces(paths: Iterable[Path]) -> list[Path]:
    """Trace files named on the command line, and those under the folders named (sorted);
    ``ReportError`` for a path that does not exist."""
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out += sorted(p for p in path.rglob("*") if is_trace_name(p.name) and not p.is_dir())
        elif path.exists() or path.is_symlink():
            out.append(path)
        else:
            raise ReportError(f"no such file or folder: {path}")
    seen: set[Path] = set()
    unique = []
    for path in out:
        key = path.resolve() if path.exists() else path
        if key not in seen:
            seen.add(key)
            unique.append(path)
    return unique


def read_one(path: Path) -> RankTimeline | str:
    """One trace's timeline, or the reason it could not be read (a worker's task)."""
    try:
        raw = read_trace(path)
    except TraceReadError as exc:
        return str(exc)
    timeline = analyse(raw, str(path))
    if timeline.rank is None:
        timeline.rank = rank_from_name(path)
    timeline.first_ns = wall_clock(raw, timeline.start_ns)
    if raw.collectives is not None:
        timeline.collectives = collectives.rows(raw.collectives)
        timeline.size_classes = collectives.size_classes(raw.collectives)
        timeline.link_fit = collectives.link_fit(raw.collectives)
    return timeline


def wall_clock(raw: RawTrace, base_ns: float) -> float:
    """Wall clock (ns) of the first event's start in ``raw`` (NaN when it does not say)."""
    starts = [a for a in (raw.kernel_ts, raw.host_ts, raw.step_ts, raw.op_ts) if a.size]
    if not starts:
        return float("nan")
    return wall_clock_ns(base_ns, float(min(a.min() for a in starts)))


def read_all(paths: list[Path], jobs: int | None = None) -> list[RankTimeline | str]:
    """Every trace's result, in the order of ``paths``; sets of at least
    ``PARALLEL_MIN_BYTES`` of trace text in parallel processes (at most ``jobs``, default the
    CPU count), each reading one trace at a time."""
    size = sum(text_bytes(p) for p in paths)
    workers = min(len(paths), jobs or os.cpu_count() or 1)
    if workers < 2 or size < PARALLEL_MIN_BYTES:
        return [read_one(p) for p in paths]
    from itwin_report.traces.workers import map_in_workers

    return map_in_workers(read_one, paths, workers)


def text_bytes(path: Path) -> int:
    """The bytes of trace text in ``path``: its size, or a gzipped file's uncompressed size
    (its last four bytes, modulo 4 GiB, never less than its size); 0 for what is not a
    regular file (a FIFO is never opened)."""
    try:
        if not path.is_file():
            return 0
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                return fh.seek(0, os.SEEK_END)
            size = fh.seek(-4, os.SEEK_END) + 4
            return max(size, int.from_bytes(fh.read(4), "little"))
    except OSError:
        return 0


def analyze_traces(paths: Iterable[Path], jobs: int | None = None) -> TraceSet:
    """Find, read and compare the traces under ``paths``.

    ``ReportError`` for a missing path; ``NothingMeasured`` when no trace is found or none can
    be analysed (its message lists the reasons).
    """
    given = list(paths)
    files = find_traces(given)
    if not files:
        shown = name_list([str(p) for p in given])
        raise NothingMeasured(f"no trace files (*.pt.trace.json[.gz]) found in {shown}")
    out = TraceSet()
    for path, result in zip(files, read_all(files, jobs), strict=True):
        if isinstance(result, str):
            out.warnings.append(Note(result, TABLE, "unread"))
        elif result.span_s != result.span_s:
            out.warnings.append(
                Note(f"{path}: no GPU kernels or CPU operators to analyse", TABLE, "empty")
            )
        else:
            out.ranks.append(result)
            out.warnings += [Note(f"{path}: {n}", TABLE, "window") for n in result.notes]
            unsized = collectives.unsized(result.collectives)
            if unsized:
                out.warnings.append(
                    Note(
                        f"{path}: {plural(unsized, 'collective')} without message sizes "
                        "(a kernel launched before the profiling window, or a trace without "
                        "sizes in its kernels' args nor its CPU ops' shapes): bytes and "
                        "bandwidth unknown",
                        TABLE,
                        "unsized",
                    )
                )
            if result.rank is None:
                out.warnings.append(
                    Note(
                        f"{path}: rank unknown (no distributedInfo, no worker_<rank> in the "
                        "name): left out of the straggler comparison",
                        TABLE,
                        "rank",
                    )
                )
    if not out.ranks:
        reasons = "; ".join(str(w) for w in out.warnings[:3])
        raise NothingMeasured(f"no trace could be analysed: {reasons}")
    out.ranks.sort(key=lambda r: (str(Path(r.file).parent), r.rank is None, r.rank or 0, r.file))
    for folder, job in groups(out.ranks, out.warnings):
        out.stragglers += [{"job": folder, **s.record(unit)} for s, unit in stragglers(job)]
    return out


def groups(ranks: list[RankTimeline], warnings: list[str]) -> list[tuple[str, list[RankTimeline]]]:
    """The jobs: per folder, the n-th trace of each rank (by start) in the n-th job."""
    by_folder: dict[str, dict[int, list[RankTimeline]]] = {}
    for timeline in ranks:
        if timeline.rank is not None:
            folder = str(Path(timeline.file).parent)
            by_folder.setdefault(folder, {}).setdefault(timeline.rank, []).append(timeline)
    out = []
    for folder, by_rank in by_folder.items():
        for traces in by_rank.values():
            traces.sort(key=lambda t: (t.start_ns if t.start_ns == t.start_ns else 0.0, t.file))
        counts = {len(t) for t in by_rank.values()}
        if len(counts) == 1:
            n = counts.pop()
            label = folder if n == 1 else None
            for i in range(n):
                out.append(
                    (label or f"{folder} (job {i + 1} of {n})", [t[i] for t in by_rank.values()])
                )
            continue
        for rank, traces in sorted(by_rank.items()):
            if len(traces) > 1:
                files = name_list([Path(t.file).name for t in traces])
                warnings.append(
                    Note(
                        f"rank {rank} appears {plural(len(traces), 'time')} in {folder} "
                        f"({files}): only the first is compared",
                        TABLE,
                        "duplicate",
                    )
                )
        out.append((folder, [t[0] for t in by_rank.values()]))
    return out


def stragglers(job: list[RankTimeline]) -> list[tuple[Straggler, str]]:
    """The lagging ranks of one job, by each measure."""
    out = []
    for attribute, words, unit in MEASURES:
        values = {t.rank: getattr(t, attribute) for t in job if t.rank is not None}
        out += [(s, unit) for s in lagging(values, words)]
    return out


# ------------------------------------------------------------ traces of a report's runs

REPORT_TABLE = "time_breakdown"  # the report table whose warnings these are


@dataclass
class RunTraces:
    """Traces matched to a report's worker runs: one row per job and rank (its profiling
    windows together), the stragglers of each job, and warnings naming files."""

    ranks: list[dict[str, Any]] = field(default_factory=list)
    stragglers: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def layout_files(
    found: Iterable[Path], run_names: Iterable[str], given: Sequence[Path] = ()
) -> tuple[list[TraceFile], list[str]]:
    """The traces ``found`` (by :func:`find_traces` under ``given``) that may belong to the
    report: in itwinai's layout, only those whose run name is one of ``run_names``; a note for
    what is left out, or when ``given`` holds no trace at all."""
    found = list(found)
    names = set(run_names)
    kept: list[TraceFile] = []
    other: dict[str, int] = {}
    for path in found:
        name = layout_run_name(path)
        if name is None or name in names:
            kept.append(TraceFile(path))
        else:
            other[name] = other.get(name, 0) + 1
    notes: list[str] = []
    if given and not found:
        shown = name_list([str(p) for p in given])
        notes.append(
            Note(f"no trace files (*.pt.trace.json[.gz]) found in {shown}", REPORT_TABLE, "none")
        )
    if other:
        files = plural(sum(other.values()), "trace file")
        notes.append(
            Note(
                f"{files} of runs not in the report left out: {name_list(sorted(other))}",
                REPORT_TABLE,
                "other-runs",
            )
        )
    return kept, notes


def run_traces(
    runs: list[dict[str, Any]], files: Sequence[TraceFile], jobs: int | None = None
) -> RunTraces:
    """Read ``files`` once (in parallel when large), match each to its job and worker run
    (:mod:`itwin_report.traces.match`), and compare the ranks of each job.

    ``runs``: the report's worker runs as records (``run_id``, ``job_id``, ``run_name``,
    ``strategy``, ``workers``, ``rank``, ``hostname``, ``start_time``, ``end_time``).
    """
    out = RunTraces()
    files = _unique(files)
    if not files:
        return out
    facts, timelines = [], {}
    for item, result in zip(files, read_all([f.path for f in files], jobs), strict=True):
        label = item.label or str(item.path)
        if isinstance(result, str):
            text = result.replace(str(item.path), label, 1)
            out.warnings.append(Note(text, REPORT_TABLE, "unread"))
            continue
        if result.span_s != result.span_s:
            text = f"{label}: no GPU kernels or CPU operators to analyse"
            out.warnings.append(Note(text, REPORT_TABLE, "empty"))
            continue
        out.warnings += [Note(f"{label}: {n}", REPORT_TABLE, "window") for n in result.notes]
        start = result.first_ns if result.first_ns == result.first_ns else name_time_ns(item.path)
        run_name = layout_run_name(item.path) if item.run_id is None else None
        facts.append(
            TraceFacts(label, result.rank, result.world_size, start, run_name, item.run_id)
        )
        timelines[label] = result
    matching = match_traces(runs, facts)
    out.warnings += matching.warnings
    by_rank: dict[tuple[str, int], list[Match]] = {}
    for match in matching.matched:
        by_rank.setdefault((match.job_id, match.rank), []).append(match)
    for _, matches in sorted(by_rank.items(), key=lambda kv: _order(kv[1][0])):
        out.ranks.append(_rank_row(matches, [timelines[m.file] for m in matches]))
    out.stragglers = _job_stragglers(out.ranks, runs)
    return out


def _order(match: Match) -> tuple[str, int, str, int]:
    return match.strategy, match.workers, match.job_id, match.rank


def _unique(files: Sequence[TraceFile]) -> list[TraceFile]:
    """``files`` without a second copy of the same file (a logged artifact's copy kept)."""
    seen: set[Path] = set()
    out: list[TraceFile] = []
    for item in sorted(files, key=lambda f: f.run_id is None):
        try:
            key = item.path.resolve()
        except OSError:
            key = item.path
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


def _rank_row(matches: list[Match], timelines: list[RankTimeline]) -> dict[str, Any]:
    """One rank of one job: its windows' seconds summed, percentages of the sums."""
    first = matches[0]
    row: dict[str, Any] = {
        "strategy": first.strategy,
        "workers": first.workers,
        "job_id": first.job_id,
        "run_id": first.run_id,
        "run_name": first.run_name,
        "rank": first.rank,
        "world_size": timelines[0].world_size,
        "device": timelines[0].device,
        "windows": len(timelines),
        "files": [m.file for m in matches],
        "steps": sum(t.steps for t in timelines),
        "profiled_steps": sum(t.profiled_steps for t in timelines),
        # every window's collectives by size class, and its link fit (report/communication.py)
        "size_classes": [row for t in timelines for row in t.size_classes],
        "link_fits": [t.link_fit for t in timelines if t.link_fit is not None],
    }
    if len(timelines) == 1:
        one = timelines[0]
        row.update({k: getattr(one, k) for k in (*SECONDS, *PERCENTS)})
        row["compute_per_step_s"] = one.compute_per_step_s
        row["launch_lag_s"] = one.launch_lag_s
        return row
    total = {k: float(sum(getattr(t, k) for t in timelines)) for k in SECONDS}
    span, compute, comm = total["span_s"], total["compute_s"], total["communication_s"]
    idle, exposed = total["idle_s"], total["exposed_communication_s"]
    row.update(total)
    row["compute_pct"] = _pct(compute, span)
    row["non_compute_pct"] = _pct(span - compute - idle, span)
    row["idle_pct"] = _pct(idle, span)
    row["overlap_pct"] = _pct(comm - exposed, comm)
    steps = int(row["steps"])
    row["compute_per_step_s"] = compute / steps if steps else float("nan")
    lags = [(t.launch_lag_s, t.steps) for t in timelines if t.launch_lag_s == t.launch_lag_s]
    weight = sum(n for _, n in lags)
    row["launch_lag_s"] = sum(v * n for v, n in lags) / weight if weight else float("nan")
    return row


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole > 0 else float("nan")


def _job_stragglers(
    ranks: list[dict[str, Any]], runs: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Per job, the ranks (or node) lagging in compute per step or collective launch delay,
    named with their node where the rank's worker run logs its ``hostname``."""
    hosts = {
        (str(r["job_id"]), int(r["rank"])): str(r.get("hostname") or "")
        for r in runs
        if r.get("hostname")
    }
    jobs: dict[str, list[dict[str, Any]]] = {}
    for row in ranks:
        jobs.setdefault(str(row["job_id"]), []).append(row)
    out = []
    for job, rows in sorted(jobs.items()):
        nodes = {int(r["rank"]): hosts.get((job, int(r["rank"])), "") for r in rows}
        first = rows[0]
        for attribute, words, unit in MEASURES:
            values = {int(r["rank"]): float(r[attribute]) for r in rows}
            out += [
                found.job_row(first["strategy"], first["workers"], job, unit)
                for found in lagging(values, words, nodes)
            ]
    return out
