"""Load one experiment from an MLflow tracking store into the schema's frames.

Light on import: the readers (pandas, sqlite, MLflow) are imported inside :func:`load_experiment`.

* ``sqlite:///...`` and other SQL URIs: read-only SQL queries (``sql_reader``), falling back to
  MLflow's API when the schema is not the expected one;
* ``http(s)://``: MLflow's client plus the bulk metric-history endpoint (``api_reader``);
* plain paths and ``file:`` URIs: the file store's directory layout (``file_reader``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from itwin_report.store.uri import (
    DEFAULT_TRACKING_URI,
    FILE,
    SQL,
    SQLITE,
    mask_uri,
    resolve_tracking_uri,
    store_kind,
)

if TYPE_CHECKING:
    from itwin_report.schema import RunData

__all__ = ["DEFAULT_TRACKING_URI", "load_experiment", "mask_uri", "resolve_tracking_uri"]


def _open_reader(uri: str) -> Any:
    """The fastest reader that can read ``uri``."""
    kind = store_kind(uri)
    if kind == FILE:
        from itwin_report.store.file_reader import FileStoreReader

        return FileStoreReader(uri)
    if kind in (SQLITE, SQL):
        from itwin_report.store.sql_reader import open_sql_reader

        reader = open_sql_reader(uri)
        if reader is not None:
            return reader
    from itwin_report.store.api_reader import ApiReader

    return ApiReader(uri)


def load_experiment(
    tracking_uri: str,
    experiment_name: str | None,
    run_names: Sequence[str] = (),
    include_unfinished: bool = False,
    show_progress: bool = True,
) -> RunData:
    """Worker runs, metrics, profiles and performance records of one experiment.

    Raises :class:`~itwin_report.errors.StoreError` for a missing or unreadable store or an
    unknown experiment, :class:`~itwin_report.errors.ReportError` for run names that match
    nothing. Skipped runs and malformed artifacts are reported in ``RunData.warnings``.
    """
    reader = _open_reader(tracking_uri)
    try:
        return _load(
            reader, tracking_uri, experiment_name, run_names, include_unfinished, show_progress
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
) -> RunData:
    from itwin_report.progress import progress
    from itwin_report.schema import METRIC_KEYS, RunData
    from itwin_report.store.artifacts import read_artifacts
    from itwin_report.store.tree import choose_experiment, select_workers

    experiments = reader.experiments()
    exp_id = choose_experiment(experiments, experiment_name)
    name = next(n for i, n, _ in experiments if i == exp_id)
    runs, params = reader.runs(exp_id)
    selection = select_workers(runs, params, run_names, include_unfinished, name)
    workers = selection.workers
    ids = list(workers["run_id"])
    with progress("Loading metrics", len(ids) * len(METRIC_KEYS), show_progress) as advance:
        metrics = reader.metrics(exp_id, ids, advance) if ids else None
    remote = getattr(reader, "remote_artifact", None)
    profiles, performance, warnings = read_artifacts(workers, remote, show_progress)
    data = RunData(
        experiment=name,
        tracking_uri=mask_uri(uri),
        runs=workers,
        profiles=profiles,
        performance=performance,
        warnings=[*selection.warnings, *warnings],
    )
    if metrics is not None:
        data.metrics = _tidy_metrics(metrics)
    from itwin_report.validate import validate

    return validate(data)


def _tidy_metrics(metrics: Any) -> Any:
    """Metrics in the schema's columns, sorted by run, key, step, timestamp and value."""
    from itwin_report.schema import METRIC_COLUMNS, conform

    ordered = metrics.sort_values(["run_id", "key", "step", "timestamp", "value"])
    return conform(ordered, METRIC_COLUMNS, "metrics")
