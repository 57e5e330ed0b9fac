"""Per-worker artifacts: the profiler's averages CSV and ``performance.json``.

Local artifact roots (``file:`` URIs and paths) are read with plain file reads; anything else
goes through a ``remote`` callable (an MLflow download). A missing artifact is normal; a
malformed one is skipped with a warning naming the run. One that cannot be read (not a regular
file such as a FIFO or a link to ``/dev/zero``, larger than :data:`MAX_ARTIFACT_BYTES`, an I/O
or permission error, a failed download) is skipped too, with one warning per artifact and reason
naming the runs: its data is missing from the report, which is not the same as never logged.
"""

from __future__ import annotations

import csv
import io
import math
import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from itwin_report.data.performance_json import NUMERIC, check_record, parse_json, record_count
from itwin_report.data.rundata import (
    PERFORMANCE_ARTIFACT,
    PERFORMANCE_COLUMNS,
    PROFILE_ARTIFACT,
    PROFILE_COLUMNS,
)
from itwin_report.data.validate import named
from itwin_report.store.uri import local_artifact_dir
from itwin_report.util.errors import DataError, ReportError
from itwin_report.util.masking import mask_text
from itwin_report.util.notes import Note
from itwin_report.util.progress import progress

Remote = Callable[[str, str], bytes | None]  # (artifact_uri, relative path) -> bytes or None
THREADS = 8
MAX_ARTIFACT_BYTES = 64 * 1024 * 1024  # far above any profiler CSV or performance.json
UNREAD_MEANS = {
    PROFILE_ARTIFACT: "their profiler data",
    PERFORMANCE_ARTIFACT: "their performance.json data",
}


class SkippedArtifact(Exception):
    """An artifact that exists but is not read (not a regular file, or too large)."""


def read_capped(path: Path) -> bytes:
    """The bytes of a regular file of at most :data:`MAX_ARTIFACT_BYTES`; else SkippedArtifact.

    Opened without blocking, so a FIFO never hangs the report, and checked on the open file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise SkippedArtifact("not a regular file")
        if info.st_size > MAX_ARTIFACT_BYTES:
            raise SkippedArtifact(
                f"{info.st_size:,} bytes, more than the {MAX_ARTIFACT_BYTES:,}-byte cap"
            )
        data = handle.read(MAX_ARTIFACT_BYTES + 1)
    if len(data) > MAX_ARTIFACT_BYTES:
        raise SkippedArtifact(f"more than the {MAX_ARTIFACT_BYTES:,}-byte cap")
    return data


def read_local(artifact_uri: str, path: str) -> bytes | None:
    """The artifact's bytes from a local artifact root, None when absent."""
    root = local_artifact_dir(artifact_uri)
    if root is None:
        raise ValueError(f"not a local artifact root: {artifact_uri}")
    try:
        return read_capped(root / path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except PermissionError:
        raise SkippedArtifact("permission denied") from None
    except OSError as exc:  # an I/O error, a loop of links, a name too long, ...
        raise SkippedArtifact(exc.strerror or type(exc).__name__) from None


def _get(artifact_uri: str, path: str, remote: Remote | None) -> bytes | str | None:
    """The artifact's bytes, None when absent, or why it was skipped."""
    try:
        if local_artifact_dir(artifact_uri) is not None:
            return read_local(artifact_uri, path)
        if remote is None:
            return None
        return remote(artifact_uri, path)
    except SkippedArtifact as exc:
        return str(exc)
    except ReportError as exc:  # a download that failed: the server or its storage
        return mask_text(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def _who(row: Any) -> str:
    return f"worker run {str(row.run_id)[:8]} (rank {row.rank}) of {row.run_name}"


def parse_profile(data: bytes, run_id: str) -> dict[str, list[Any]]:
    """Columns ``run_id, name, self_cuda_time_total`` of a profiler averages CSV.

    Parsed with the csv module: a frame per file would cost more than the parsing itself.
    """
    reader = csv.reader(io.StringIO(data.decode("utf-8-sig")))
    header = next(reader, [])
    missing = [c for c in ("name", "self_cuda_time_total") if c not in header]
    if missing:
        raise ValueError(f"no column {', '.join(missing)}")
    name_at, time_at = header.index("name"), header.index("self_cuda_time_total")
    names, times, rows = [], [], []
    for line, record in enumerate(reader, start=2):
        if not record:
            continue
        if len(record) != len(header):
            raise ValueError(f"line {line} has {len(record)} fields, expected {len(header)}")
        try:
            times.append(float(record[time_at]))
        except ValueError:
            raise ValueError(f"non-numeric self_cuda_time_total on line {line}") from None
        names.append(record[name_at])
        rows.append(record)
    out: dict[str, list[Any]] = {"run_id": [run_id] * len(names), "name": names}
    out["self_cuda_time_total"] = times
    for column, key in (("global_rank",) * 2, ("num_gpus",) * 2, ("strategy", "csv_strategy")):
        at = header.index(column) if column in header else None  # who wrote the file
        out[key] = [r[at] if at is not None else "" for r in rows]
    return out


def parse_performance(data: bytes, run_id: str) -> dict[str, Any]:
    """One performance row: the numeric fields (NaN when absent), the flag and ``records``."""
    record = check_record(parse_json(data), "performance.json")
    row: dict[str, Any] = {"run_id": run_id}
    for name in NUMERIC:
        value = record.get(name)
        row[name] = float("nan") if value is None else float(value)
        if value is not None and not math.isfinite(row[name]):
            raise ValueError(f"{name} is not a finite number")
    if pd.isna(row["samples_per_sec"]) and row["total_time"] > 0:
        row["samples_per_sec"] = row["total_samples"] / row["total_time"]
    row["suspected_input_bottleneck"] = bool(record.get("suspected_input_bottleneck", False))
    row["records"] = record_count(record)
    return row


# file systems where one file read waits on the network: reads overlap in threads there
NETWORK_FILESYSTEMS = (
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "smbfs",
    "lustre",
    "gpfs",
    "beegfs",
    "ceph",
    "glusterfs",
    "9p",
    "afs",
    "sshfs",
    "fuse",
)


def _slow_reads(rows: list[Any], remote: Remote | None) -> bool:
    """Whether reading the artifacts waits on a network (a server, or a network file system).

    Local disks are read in one thread: the reads are short and threads only add overhead.
    Only Linux tells the file system type (``/proc/self/mounts``); elsewhere threads are used.
    """
    root = local_artifact_dir(str(rows[0].artifact_uri)) if rows else None
    if root is None:
        return remote is not None
    try:
        mounts = Path("/proc/self/mounts").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True
    kind = filesystem_type(str(root.resolve()), mounts)
    return kind.split(".")[0] in NETWORK_FILESYSTEMS


def filesystem_type(path: str, mounts: str) -> str:
    """The type of the file system holding absolute ``path``, from ``/proc/self/mounts`` text."""
    best, kind = "", ""
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def read_artifacts(
    workers: pd.DataFrame, remote: Remote | None = None, show_progress: bool = True
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(profiles, performance, warnings) for the worker runs (columns of the schema)."""
    rows = list(workers.itertuples(index=False))

    def both(row: Any) -> tuple[bytes | str | None, bytes | str | None]:
        uri = str(row.artifact_uri)
        return _get(uri, PROFILE_ARTIFACT, remote), _get(uri, PERFORMANCE_ARTIFACT, remote)

    profiles, performance, warnings = [], [], []
    unreachable = [
        str(row.artifact_uri)
        for row in rows
        if remote is None and local_artifact_dir(str(row.artifact_uri)) is None
    ]
    if unreachable:
        warnings.append(
            f"artifacts of {len(unreachable)} worker runs are not on this machine "
            f"(e.g. {mask_text(unreachable[0])}): profiler and performance.json data not read; "
            "point --tracking-uri at the MLflow server that holds them"
        )
    unread: dict[tuple[str, str], list[str]] = {}  # (artifact, reason) -> run names
    size = max(1, len(rows) // (THREADS * 4))  # a few batches per thread, not a task per run
    batches = [rows[i : i + size] for i in range(0, len(rows), size)]

    def batch(part: list[Any]) -> list[tuple[bytes | str | None, bytes | str | None]]:
        return [both(row) for row in part]

    threads = THREADS if _slow_reads(rows, remote) else 1
    with (
        progress("Reading artifacts", len(rows), show_progress) as advance,
        ThreadPoolExecutor(threads) as pool,
    ):
        parts = pool.map(batch, batches) if threads > 1 else map(batch, batches)
        results = (pair for part in parts for pair in part)
        for row, (table, perf) in zip(rows, results, strict=True):
            advance(1)
            for name, data in ((PROFILE_ARTIFACT, table), (PERFORMANCE_ARTIFACT, perf)):
                if isinstance(data, str):
                    unread.setdefault((name, data), []).append(str(row.run_name))
            if isinstance(table, bytes):
                try:
                    profiles.append(parse_profile(table, str(row.run_id)))
                except (ValueError, csv.Error, UnicodeDecodeError) as exc:
                    warnings.append(f"{_who(row)}: malformed {PROFILE_ARTIFACT} ({exc}); ignored")
            if isinstance(perf, bytes):
                try:
                    performance.append(parse_performance(perf, str(row.run_id)))
                except (ValueError, OverflowError, RecursionError, DataError) as exc:
                    reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
                    warnings.append(
                        f"{_who(row)}: malformed {PERFORMANCE_ARTIFACT} ({reason}); ignored"
                    )
    for (name, reason), names in sorted(unread.items()):
        table = "computation" if name == PROFILE_ARTIFACT else "throughput"
        text = (
            f"could not read {name} of {len(names)} worker run(s) of {named(names)} ({reason}): "
            f"{UNREAD_MEANS.get(name, 'its data')} is missing from the report, not absent"
        )
        warnings.append(Note(text, table, "unread", len(names)))
    prof = pd.DataFrame(
        {col: [v for part in profiles for v in part[col]] for col in PROFILE_COLUMNS},
        columns=list(PROFILE_COLUMNS),
    )
    for column in ("global_rank", "num_gpus"):
        prof[column] = pd.to_numeric(prof[column], errors="coerce")
    perf_frame = pd.DataFrame(performance, columns=list(PERFORMANCE_COLUMNS))
    return prof, perf_frame, warnings
