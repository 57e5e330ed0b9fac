"""Load one experiment from an MLflow tracking store into the schema's frames, never writing to it.

Light on import: the readers (pandas, sqlite, MLflow) are imported inside :func:`load_experiment`.

* ``sqlite:///...`` and other SQL URIs: read-only SQL queries (``sql_reader``);
* ``http(s)://`` and ``databricks``: MLflow's client plus the bulk metric-history endpoint
  (``api_reader``);
* plain paths and ``file:`` URIs: the file store's directory layout (``file_reader``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from itwin_report.store.uri import (
    DEFAULT_TRACKING_URI,
    FILE,
    HTTP,
    OTHER,
    SQLITE,
    local_artifact_dir,
    mask_uri,
    output_conflict,
    resolve_tracking_uri,
    sqlite_path,
    store_kind,
    store_paths,
)
from itwin_report.util.errors import ReportError

if TYPE_CHECKING:
    from itwin_report.data.rundata import RunData
    from itwin_report.store.http import HttpLimits
    from itwin_report.store.http_cache import CacheSettings
    from itwin_report.store.trace_artifacts import Found

__all__ = [
    "DEFAULT_TRACKING_URI",
    "STRATEGY_PARAM",
    "WORKERS_PARAM",
    "check_outputs",
    "load_experiment",
    "logged_traces",
    "mask_uri",
    "resolve_tracking_uri",
]

STRATEGY_PARAM = "strategy"
WORKERS_PARAM = "global_world_size"


def _open_reader(
    uri: str, cache: CacheSettings | None = None, http: HttpLimits | None = None
) -> Any:
    """The reader for ``uri``'s kind of store (``cache``: a server's, see ``http_cache``;
    ``http``: the bounds of a server's read)."""
    kind = store_kind(uri)
    if kind == FILE:
        from itwin_report.store.file_reader import FileStoreReader

        return FileStoreReader(uri)
    if kind in (HTTP, OTHER):
        from itwin_report.store.api_reader import ApiReader

        return ApiReader(uri, cache, http)
    from itwin_report.store.sql_open import open_sql_reader

    return open_sql_reader(uri)


def check_outputs(
    uri: str,
    outputs: Mapping[str, Path | None],
    inputs: Sequence[Path] = (),
    extra: Sequence[Path] = (),
) -> str | None:
    """A one-line message when an output path (``{option: path}``) would write into the store or
    over one of ``inputs``, else None. Every command checks its outputs here, before it writes.

    Guarded: the sqlite file and its side files (:data:`~itwin_report.store.uri.sqlite_files`),
    the file-store directory, the local artifact roots of a sqlite or file store's experiments,
    the ``artifacts`` folder beside a sqlite file (where new experiments keep theirs), ``extra``
    (artifact roots a command is about to create) and ``inputs`` (files, and folders whose
    files the command reads). A URI the loader would refuse
    guards nothing here: the load reports it.
    """
    given = {option: path for option, path in outputs.items() if path is not None}
    if not given:
        return None
    try:
        protected = [*store_paths(uri), *extra]
        kind = store_kind(uri)
    except ReportError:
        return output_conflict(given, list(extra), inputs)
    if kind in (SQLITE, FILE):
        protected += _local_artifact_roots(uri)
    if kind == SQLITE:  # where the emulator puts the artifacts of a new experiment
        protected.append(sqlite_path(uri).parent / "artifacts")
    return output_conflict(given, protected, inputs)


def _local_artifact_roots(uri: str) -> list[Path]:
    """The local artifact folders of a sqlite or file store's experiments (none if unreadable)."""
    try:
        reader = _open_reader(uri)
    except ReportError:
        return []  # the load reports it
    try:
        roots = reader.artifact_roots()
    except ReportError:
        return []
    finally:
        reader.close()
    return [p for p in map(local_artifact_dir, roots) if p is not None]


def load_experiment(
    tracking_uri: str,
    experiment_name: str | None,
    run_names: Sequence[str] = (),
    include_unfinished: bool = False,
    show_progress: bool = True,
    strategy_param: str = STRATEGY_PARAM,
    workers_param: str = WORKERS_PARAM,
    cache: CacheSettings | None = None,
    http: HttpLimits | None = None,
    extra_metrics: Sequence[str] = (),
) -> RunData:
    """Worker runs, metrics, profiles and performance records of one experiment.

    ``extra_metrics``: metric keys to read besides the report's own (a validation metric for
    time to target), every point as logged. When one of them has no point in any worker run,
    ``RunData.logged_keys`` lists the keys the experiment's runs did log.

    ``strategy_param`` and ``workers_param`` name the params that define a configuration
    (itwinai's ``strategy`` and ``global_world_size`` by default). ``cache``: where an HTTP
    server's finished runs are kept between reports (:mod:`~itwin_report.store.http_cache`);
    None reads everything from the server. Other stores never use it.
    ``http`` bounds the read of an ``http(s)://`` store (its deadline, pages and answer size;
    60 s by default).

    Raises :class:`~itwin_report.util.errors.StoreError` for a missing or unreadable store or an
    unknown experiment, :class:`~itwin_report.util.errors.ReportError` for run names that match
    nothing. Skipped runs and malformed data are reported in ``RunData.warnings``.
    """
    reader = _open_reader(tracking_uri, cache, http)
    reader.extra_keys = tuple(dict.fromkeys(extra_metrics))
    try:
        return _load(
            reader,
            tracking_uri,
            experiment_name,
            run_names,
            include_unfinished,
            show_progress,
            {STRATEGY_PARAM: strategy_param, WORKERS_PARAM: workers_param},
        )
    finally:
        reader.close()


def _load(
    reader: Any,
    uri: str,
    experiment_name: str | None,
    run_names: Sequence[str],
    include_unfinished: bool,
    show_progress: bool,
    renamed: Mapping[str, str] | None = None,
) -> RunData:
    from itwin_report.data.rundata import RunData, metric_keys
    from itwin_report.store.artifacts import read_artifacts
    from itwin_report.store.metrics import tidy_metrics
    from itwin_report.store.tree import WORKER_PARAMS, choose_experiment, select_workers
    from itwin_report.util.progress import progress

    names_in_store = {p: (renamed or {}).get(p, p) for p in WORKER_PARAMS}
    experiments = reader.experiments()
    exp_id = choose_experiment(experiments, experiment_name)
    name = next(n for i, n, _ in experiments if i == exp_id)
    runs, params = reader.runs(exp_id, list(dict.fromkeys(names_in_store.values())))
    params = _canonical_params(params, names_in_store)
    selection = select_workers(
        runs, params, run_names, include_unfinished, name, names=names_in_store
    )
    workers = selection.workers
    ids = list(workers["run_id"])
    keys = metric_keys(reader.extra_keys)
    with progress("Loading metrics", len(ids) * len(keys), show_progress) as advance:
        metrics = reader.metrics(exp_id, ids, advance) if ids else None
    remote = getattr(reader, "remote_artifact", None)
    candidates = _may_hold_artifacts(workers)
    if len(candidates) == len(workers):
        profiles, performance, warnings = read_artifacts(workers, remote, show_progress)
    else:  # runs without an artifact folder are done at once
        with progress("Reading artifacts", len(workers), show_progress) as advance:
            profiles, performance, warnings = read_artifacts(candidates, remote, False)
            advance(len(workers))
    warnings = [*selection.warnings, *getattr(reader, "warnings", []), *warnings]
    data = RunData(
        experiment=name,
        tracking_uri=mask_uri(uri),
        runs=workers,
        profiles=profiles,
        performance=performance,
        warnings=warnings,
        artifact_uris=dict(
            zip(workers["run_id"].astype(str), workers["artifact_uri"].astype(str), strict=True)
        ),
    )
    if metrics is not None:
        data.metrics, more = tidy_metrics(metrics, reader.extra_keys)
        data.warnings.extend(more)
    # the keys present, from the column's distinct values (never a walk over every point)
    if set(reader.extra_keys) - {str(k) for k in data.metrics["key"].unique()}:
        data.logged_keys = reader.logged_keys(exp_id, ids) if ids else []
    # the single place where the loaded data is validated
    from itwin_report.data.validate import validate

    valid = validate(data)
    # the runs validation keeps, with the locations the traces lookup reads instead of the store
    kept = set(valid.runs["run_id"])
    valid.artifact_uris = {r: u for r, u in data.artifact_uris.items() if r in kept}
    return valid


def _may_hold_artifacts(workers: Any) -> Any:
    """``workers`` less the runs whose local artifact folder does not exist: nothing to read.

    Found by listing folders, each once, instead of two failed opens per run: the folder that
    several runs' artifact folders share (``<root>/<run>``), or the one that holds every
    run's own folder (MLflow's ``<root>/<experiment>/<run>/artifacts``). The URIs are split as
    text; only each folder's URI is turned into a path. A folder that cannot be listed keeps
    its runs: reading them reports why.
    """
    import os
    from collections import Counter
    from urllib.parse import unquote

    uris = [str(uri).rstrip("/") for uri in workers["artifact_uri"]]
    split = [uri.rpartition("/") for uri in uris]
    shared = Counter(folder for folder, _, _ in split)
    listed: dict[str, set[str] | None] = {}

    def names(folder_uri: str) -> set[str] | None:
        if folder_uri not in listed:
            folder = local_artifact_dir(folder_uri) if folder_uri else None
            try:
                listed[folder_uri] = None if folder is None else set(os.listdir(folder))
            except (FileNotFoundError, NotADirectoryError):
                listed[folder_uri] = set()
            except OSError:
                listed[folder_uri] = None
        return listed[folder_uri]

    def present(uri: str, folder: str, name: str) -> bool:
        if not name or not folder or "?" in uri or "#" in uri:
            return True
        if shared[folder] == 1:  # each run in a folder of its own: ask the folder holding them
            folder, _, name = folder.rpartition("/")
            if not name or not folder:
                return True
        found = names(folder)
        plain = unquote(name) if uri.startswith("file:") else name
        return found is None or plain in found

    keep = [present(uri, folder, name) for uri, (folder, _, name) in zip(uris, split, strict=True)]
    return workers if all(keep) else workers[keep]


def _canonical_params(params: Any, names_in_store: Mapping[str, str]) -> Any:
    """Params under the names the tree expects (``--strategy-param x`` -> ``strategy``)."""
    if all(k == v for k, v in names_in_store.items()):
        return params
    import pandas as pd

    parts = [
        params[params["key"] == stored].assign(key=canonical)
        for canonical, stored in names_in_store.items()
    ]
    return pd.concat(parts, ignore_index=True)


@contextmanager
def logged_traces(
    tracking_uri: str,
    data: RunData,
    wanted: Callable[[str], bool],
    http: HttpLimits | None = None,
) -> Iterator[Found]:
    """The profiler traces logged as artifacts of ``data``'s worker runs (files whose name
    ``wanted`` accepts), as local files while the ``with`` block runs (a server's are
    downloaded into a temporary folder, removed after).

    The artifact locations the loader kept (``data.artifact_uris``) are used as they are; a
    tracking server is opened again to list and download through it (its runs are asked for
    again only for data that kept no locations). Raises what :func:`load_experiment` raises
    for a store or experiment that cannot be read; a run whose artifacts cannot be listed is a
    warning.
    """
    import pandas as pd

    from itwin_report.store.trace_artifacts import trace_artifacts
    from itwin_report.store.tree import choose_experiment

    kind = store_kind(tracking_uri)
    known = pd.DataFrame(list(data.artifact_uris.items()), columns=["run_id", "artifact_uri"])
    known = known[known["run_id"].isin(set(data.runs["run_id"]))]
    if data.artifact_uris and kind not in (HTTP, OTHER):
        mine = _may_hold_artifacts(known)
        pairs = list(zip(mine["run_id"], mine["artifact_uri"], strict=True))
        with trace_artifacts(tracking_uri, pairs, False, wanted) as out:
            yield out
        return
    reader = _open_reader(tracking_uri, http=http)
    try:
        if data.artifact_uris:  # a server: opened to fetch through it, its runs not asked again
            runs = known
            if hasattr(reader, "expect_artifacts"):
                reader.expect_artifacts(list(known["artifact_uri"].astype(str)))
        else:
            exp_id = choose_experiment(reader.experiments(), data.experiment)
            runs, _ = reader.runs(exp_id, [STRATEGY_PARAM])
            runs = runs[runs["run_id"].isin(set(data.runs["run_id"]))]
        mine = _may_hold_artifacts(runs)
        ids, roots = mine["run_id"].astype(str), mine["artifact_uri"].astype(str)
        pairs = list(zip(ids, roots, strict=True))
        remote = hasattr(reader, "remote_artifact")
        address = getattr(reader, "uri", tracking_uri)
        lister = reader if hasattr(reader, "traces_under") else None
        with trace_artifacts(address, pairs, remote, wanted, lister) as out:
            yield out
    finally:
        reader.close()
