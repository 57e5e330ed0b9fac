"""A set of traces: found under the paths given, read rank by rank (in parallel when large),
grouped into jobs, and the stragglers of each job named.

A job is the traces of one folder (itwinai writes ``<run name>/torch-traces/worker_<rank>…``).
Repeated jobs with the same run name share the folder: when every rank appears the same number
of times, the n-th trace of each rank (by start time) belongs to the n-th job; otherwise a rank
seen twice is a warning and only its first trace is compared.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from itwin_report.analysis.outliers import Straggler, lagging
from itwin_report.traces.reader import TraceReadError, is_trace_name, rank_from_name, read_trace
from itwin_report.traces.timeline import RankTimeline, analyse
from itwin_report.util.errors import NothingMeasured, ReportError
from itwin_report.util.notes import Note
from itwin_report.util.text import name_list, plural

TABLE = "traces"
PARALLEL_MIN_BYTES = 16 << 20  # below this in all, reading in one process is faster
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

    def to_dict(self) -> dict[str, object]:
        return {
            "ranks": [r.row() for r in self.ranks],
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
    return timeline


def read_all(paths: list[Path], jobs: int | None = None) -> list[RankTimeline | str]:
    """Every trace's result, in the order of ``paths``; large sets in parallel processes
    (at most ``jobs``, default the CPU count), each reading one trace at a time."""
    size = sum(_size(p) for p in paths)
    workers = min(len(paths), jobs or os.cpu_count() or 1)
    if workers < 2 or size < PARALLEL_MIN_BYTES:
        return [read_one(p) for p in paths]
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        return list(pool.map(read_one, paths))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
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
