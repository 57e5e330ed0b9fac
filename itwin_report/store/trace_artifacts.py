"""Profiler traces logged as MLflow artifacts of worker runs: any file anywhere under a run's
artifacts whose name the caller's ``wanted`` accepts (the report passes
:func:`itwin_report.traces.reader.is_trace_name`: ``*.pt.trace.json[.gz]``; the store knows no
trace).

Local artifact roots (``file:`` URIs and paths, as SQLite and file stores keep them) are walked
on disk and the traces read in place; the walk never follows a link into a folder (a loop cannot
hang it) and stops :data:`MAX_DEPTH` folders down. A server's artifacts are listed folder by
folder, in threads, through its REST API (a run whose folder the experiment's shared folder lacks
is not asked at all) or, for artifacts stored elsewhere, through MLflow; each trace is
downloaded into a temporary folder that is removed when the caller is done with the files. A
root that is neither (an ``s3://`` root behind a database store) cannot be reached here; the
loader already warns about those runs.
A failure to list or download is a warning naming the runs, never an error: the report is
built without those traces.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from itwin_report.store.uri import local_artifact_dir
from itwin_report.util.errors import ReportError
from itwin_report.util.masking import mask_text
from itwin_report.util.notes import Note
from itwin_report.util.text import name_list

MAX_DEPTH = 8  # folders below a run's artifact root searched for traces
THREADS = 8  # listings and downloads at once from a server
TABLE = "time_breakdown"  # the report table these warnings concern
Wanted = Callable[[str], bool]  # a file name -> whether it is a trace


@dataclass(frozen=True)
class FoundTrace:
    """A trace logged to a worker run, as a file on this machine."""

    run_id: str
    path: Path
    label: str  # how a warning names it: the local path, or the artifact's address


@dataclass
class Found:
    traces: list[FoundTrace] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def local_traces(root: Path, wanted: Wanted) -> list[Path]:
    """The trace files under ``root`` (sorted), links to folders not followed."""
    out: list[Path] = []
    if not root.is_dir():
        return out
    for folder, dirs, files in os.walk(root, followlinks=False):
        depth = len(Path(folder).relative_to(root).parts)
        if depth >= MAX_DEPTH:
            dirs.clear()
        out += [Path(folder) / name for name in files if wanted(name)]
    return sorted(out)


def _remote_traces(
    uri: str, run_id: str, artifact_uri: str, wanted: Wanted, reader: Any = None
) -> list[str]:
    """Relative paths of the trace files among the artifacts of ``run_id`` on a server:
    through ``reader``'s own listing (its ``traces_under``) when it can, else MLflow's."""
    from itwin_report.store import mlflow_api

    if reader is not None:
        try:
            listed = reader.traces_under(artifact_uri, wanted, MAX_DEPTH)
        except ReportError as exc:
            raise ReportError(_reason(exc)) from None
        if listed is not None:
            return list(listed)

    client = mlflow_api.client(uri)
    out: list[str] = []
    folders: list[tuple[str | None, int]] = [(None, 0)]
    while folders:
        folder, depth = folders.pop()
        try:
            listed = client.list_artifacts(run_id, folder)
        except (mlflow_api.mlflow_exception(), OSError) as exc:
            raise ReportError(_reason(exc)) from None
        for info in listed:
            if info.is_dir:
                if depth + 1 < MAX_DEPTH:
                    folders.append((info.path, depth + 1))
            elif wanted(info.path.rsplit("/", 1)[-1]):
                out.append(info.path)
    return sorted(out)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    return mask_text(text.splitlines()[0][:200] if text else type(exc).__name__)


@contextmanager
def trace_artifacts(
    uri: str,
    runs: Sequence[tuple[str, str]],
    remote: bool,
    wanted: Wanted,
    reader: Any = None,
) -> Iterator[Found]:
    """The traces logged to ``runs`` (``(run id, artifact URI)`` pairs), as local files while
    the ``with`` block runs. ``remote``: whether artifacts off this machine can be fetched
    through ``uri`` (a tracking server); ``wanted``: which file names are traces; ``reader``:
    the server's reader, whose listings skip runs without artifacts (MLflow's otherwise)."""
    out = Found()
    far = []
    for run_id, artifact_uri in runs:
        root = local_artifact_dir(artifact_uri)
        if root is not None:
            out.traces += [FoundTrace(run_id, p, str(p)) for p in local_traces(root, wanted)]
        elif remote and artifact_uri:
            far.append((run_id, artifact_uri))
    if not far:
        yield out
        return
    with tempfile.TemporaryDirectory(prefix="itwin-report-traces-") as tmp:
        _fetch(uri, far, Path(tmp), out, wanted, reader)
        yield out


def _fetch(
    uri: str,
    runs: list[tuple[str, str]],
    tmp: Path,
    out: Found,
    wanted: Wanted,
    reader: Any = None,
) -> None:
    """List the remote runs' traces and download them under ``tmp`` (one folder per run)."""
    from itwin_report.store import mlflow_api

    def one(item: tuple[int, tuple[str, str]]) -> list[FoundTrace] | str:
        index, (run_id, artifact_uri) = item
        try:
            found = []
            for path in _remote_traces(uri, run_id, artifact_uri, wanted, reader):
                local = mlflow_api.download_artifact(uri, artifact_uri, path, str(tmp / str(index)))
                if local is not None:
                    label = mask_text(f"{artifact_uri.rstrip('/')}/{path}")
                    found.append(FoundTrace(run_id, local, label))
            return found
        except ReportError as exc:
            return _reason(exc)

    failed: dict[str, list[str]] = {}
    with ThreadPoolExecutor(THREADS) as pool:
        for (run_id, _), result in zip(runs, pool.map(one, enumerate(runs)), strict=True):
            if isinstance(result, str):
                failed.setdefault(result, []).append(run_id[:8])
            else:
                out.traces += result
    for reason, ids in sorted(failed.items()):
        out.warnings.append(
            Note(
                f"could not fetch the trace artifacts of {len(ids)} worker run(s) "
                f"({name_list(ids)}): {reason}; their traces are missing from the report",
                TABLE,
                "unread",
                len(ids),
            )
        )
