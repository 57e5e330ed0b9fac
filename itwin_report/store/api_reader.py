"""Read a store through MLflow's public API: HTTP servers, and SQL stores of another schema.

On an HTTP server everything goes through its REST API (:mod:`~itwin_report.store.rest`):
experiments and runs from the search endpoints page by page, metric histories from the bulk
endpoint, artifacts from the server's artifact proxy. The server's cost is per request and per
point, so each bulk request names as many runs as fit (up to 100 runs, 25,000 points, and a
request line short enough for gunicorn's 4,094-byte limit, which MLflow 2.x servers run under),
only for keys each run has logged, and :data:`SERVER_WORKERS` requests are in flight at once.
The bulk endpoint cuts off at ``max_results`` points without saying so: after a full page the
runs it may have cut short are asked for again, in one request; a single run that alone fills a
page goes through the paginated ``get_metric_history``. Other stores go through MLflow's
client, per run and key, but only for keys the run has logged.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd

from itwin_report.data.frames import STR, positions
from itwin_report.data.rundata import metric_keys
from itwin_report.store.api_artifacts import SHARED_BY, ApiArtifacts, shared_folders
from itwin_report.store.http_cache import CacheSettings, HttpCache, run_signature
from itwin_report.store.paging import search_pages
from itwin_report.store.rest import (
    EXPERIMENTS_PATH,
    HISTORY_PATH,
    PAGE_SIZE,
    RUNS_PATH,
    HttpLimits,
    HttpSession,
    Malformed,
    http_detail,
    objects,
    run_record,
    split_token,
    text,
)
from itwin_report.store.tree import RAW_RUN_COLUMNS
from itwin_report.store.uri import HTTP, store_kind
from itwin_report.util.escape import shorten
from itwin_report.util.progress import Advance

__all__ = [
    "ApiReader",
    "HttpSession",
    "bulk_batches",
    "http_detail",
    "shared_folders",
    "split_token",
]

BULK_PATH = "/ajax-api/2.0/mlflow/metrics/get-history-bulk"
PROBE_PATH = EXPERIMENTS_PATH
BULK_MAX_RUNS = 100
BULK_MAX_POINTS = 25_000
MAX_REQUEST_LINE = 2_000  # bytes of "GET <path>?<query> HTTP/1.1"; gunicorn refuses > 4,094
# requests in flight: the worker processes of ``mlflow server`` by default (its --workers, 4
# in MLflow 3.x under uvicorn and 2.x under gunicorn); more only queue at the server
SERVER_WORKERS = 4
# runs on the first page of a search: the server spends about 1 ms of CPU per run, so a short
# first page shows the tokens sooner and the next pages (1,000 runs each) are asked 4 at a time
RUN_PAGE = 250
THREADS = 4  # MLflow's client, one run and key per call (stores other than HTTP)
METRIC_FRAME = ["run_id", "key", "step", "value", "timestamp"]


def bulk_batches(base: str, ids: Sequence[str], key: str) -> Iterator[list[str]]:
    """Run ids in groups whose bulk request line stays within :data:`MAX_REQUEST_LINE` bytes."""
    from urllib.parse import urlencode, urlsplit

    fixed = len(f"GET {urlsplit(base).path}{BULK_PATH}? HTTP/1.1")
    fixed += len(urlencode({"metric_key": key, "max_results": BULK_MAX_POINTS})) + 1
    batch: list[str] = []
    size = fixed
    for run_id in ids:
        cost = len(urlencode({"run_id": run_id})) + 1
        if batch and (len(batch) == BULK_MAX_RUNS or size + cost > MAX_REQUEST_LINE):
            yield batch
            batch, size = [], fixed
        batch.append(run_id)
        size += cost
    if batch:
        yield batch


def points_frame(answer: Any, key: str) -> pd.DataFrame:
    """A bulk answer's points in :data:`METRIC_FRAME` columns.

    Built column by column (a frame from a list of dicts costs more than parsing the JSON);
    a value that is text (``NaN``, or not a number) becomes NaN, a step or timestamp left out
    is 0. Points that are not objects, values that are lists or objects, and steps or
    timestamps that are not whole numbers raise :class:`Malformed`.
    """
    answer = objects(answer, "metrics")
    n = len(answer)
    values = [m.get("value") for m in answer]
    try:
        value = np.array(values, dtype="float64")
    except (TypeError, ValueError, OverflowError):
        for v in values:
            text(v, "value")  # a list or an object is malformed; text is not a number
        value = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy()
        value = value.astype("float64")
    return pd.DataFrame(
        {
            "run_id": [m.get("run_id") for m in answer],
            "key": [key] * n,
            "step": _whole(answer, "step"),
            "value": value,
            "timestamp": _whole(answer, "timestamp"),
        }
    )


def _whole(points: list[dict[str, Any]], field: str) -> np.ndarray:
    """``field`` of every point as int64 (0 when left out); :class:`Malformed` otherwise."""
    try:
        return np.fromiter((p.get(field, 0) for p in points), "int64", len(points))
    except (TypeError, ValueError, OverflowError):
        bad = next(p.get(field, 0) for p in points if not _fits_int64(p.get(field, 0)))
        raise Malformed(
            f"a point's {field} is not a whole number: {shorten(repr(bad), 60)}"
        ) from None


def _fits_int64(value: Any) -> bool:
    try:
        np.fromiter((value,), "int64", 1)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def combine(frames: list[pd.DataFrame], run_ids: Sequence[str]) -> pd.DataFrame:
    """One frame of ``frames``' points of ``run_ids``, run and key as sorted categories."""
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame(columns=METRIC_FRAME)
    runs = pd.Index(sorted(set(run_ids)), dtype=STR)
    keys = pd.Index(sorted({str(k) for f in frames for k in f["key"].unique()}), dtype=STR)
    run_codes = np.concatenate([positions(f["run_id"], runs) for f in frames])
    key_codes = np.concatenate([positions(f["key"], keys) for f in frames])
    known = run_codes >= 0  # a server never answers for runs it was not asked about
    columns = {
        c: np.concatenate([f[c].to_numpy() for f in frames])[known] for c in METRIC_FRAME[2:]
    }
    return pd.DataFrame(
        {
            "run_id": pd.Categorical.from_codes(run_codes[known], categories=runs),
            "key": pd.Categorical.from_codes(key_codes[known], categories=keys),
            "step": columns["step"].astype("int64"),
            "value": columns["value"].astype("float64"),
            "timestamp": columns["timestamp"].astype("int64"),
        }
    )


class ApiReader(ApiArtifacts):
    """Experiments, runs, metrics and artifacts through an MLflow server's REST API, or through
    MLflow's client for the other stores it reads.

    ``requests`` tells how many requests went to each path of an HTTP server. ``cache``: where
    the metric histories of ended runs are kept between reports of a server
    (:mod:`~itwin_report.store.http_cache`); None reads everything from the server.
    """

    def __init__(
        self, uri: str, cache: CacheSettings | None = None, limits: HttpLimits | None = None
    ) -> None:
        self.uri = uri
        self.http: HttpSession | None = None
        self.cache: HttpCache | None = None
        self._signatures: dict[str, str | None] = {}
        self._metric_keys: dict[str, list[str]] = {}
        self._logged_keys: dict[str, list[str]] = {}
        self.extra_keys: tuple[str, ...] = ()  # keys to read besides the report's own
        self.warnings: list[str] = []
        self._shared: dict[str, tuple[str, str]] = {}  # artifact root -> shared folder, child
        self._listings: dict[str, set[str] | None] = {}  # shared folder -> names it holds
        self._listing_lock = threading.Lock()
        if store_kind(uri) == HTTP:
            # the token goes to this server only, with this session's requests
            self.uri, token = split_token(uri)
            self.http = HttpSession(self.uri, token, limits=limits)
            try:
                self.http.get(PROBE_PATH, {"max_results": 1}, retry=False)  # is anyone there?
            except BaseException:
                self.close()
                raise
            if cache is not None and cache.directory is not None:
                self.cache = HttpCache(cache, self.http.base)

    @property
    def requests(self) -> dict[str, int]:
        """Requests sent to each path of the server so far (empty for other stores)."""
        return dict(self.http.counts) if self.http is not None else {}

    def close(self) -> None:
        """Release the HTTP session."""
        if self.http is not None:
            self.http.close()

    def experiments(self) -> list[tuple[Any, str, int]]:
        """``(id, name, 1 when it has live runs)`` of the live experiments."""
        if self.http is None:
            from itwin_report.store import mlflow_api

            return list(mlflow_api.list_experiments(self.uri))
        what = "list experiments"
        body = {"max_results": PAGE_SIZE, "view_type": "ACTIVE_ONLY"}
        with self._shape(what):
            found = [
                (text(e.get("experiment_id"), "experiment_id"), text(e.get("name"), "name"))
                for e in objects(
                    list(search_pages(self.http, EXPERIMENTS_PATH, body, "experiments", what)),
                    "experiments",
                )
            ]
        if len(found) <= 1:  # nothing to choose between: no need to ask whether it has runs
            return [(i, n, 1) for i, n in found]

        def has_runs(exp_id: str) -> int:
            assert self.http is not None
            body = {"experiment_ids": [exp_id], "max_results": 1, "run_view_type": "ACTIVE_ONLY"}
            return 1 if self.http.json("POST", RUNS_PATH, what, body=body).get("runs") else 0

        with ThreadPoolExecutor(SERVER_WORKERS) as pool:
            counts = list(pool.map(has_runs, [i for i, _ in found]))
        return [(i, n, c) for (i, n), c in zip(found, counts, strict=True)]

    def runs(
        self, experiment_id: Any, param_keys: Sequence[str]
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(live runs in the tree's raw layout, their ``param_keys`` params in long format)."""
        if self.http is None:
            from itwin_report.store import mlflow_api

            found = mlflow_api.search_all_runs(
                self.uri, str(experiment_id), param_keys, metric_keys(self.extra_keys)
            )
        else:
            body = {
                "experiment_ids": [str(experiment_id)],
                "max_results": PAGE_SIZE,
                "run_view_type": "ACTIVE_ONLY",
            }
            pages = search_pages(
                self.http,
                RUNS_PATH,
                body,
                "runs",
                "search runs",
                ahead=SERVER_WORKERS,
                first=RUN_PAGE,
            )
            found = []
            wanted = metric_keys(self.extra_keys)
            with self._shape("search runs"):
                for run in objects(list(pages), "runs"):
                    found.append(run_record(run, param_keys, wanted))
                    self._signatures[found[-1]["run_id"]] = run_signature(run)
        self._metric_keys = {r["run_id"]: r["metric_keys"] for r in found}
        self._logged_keys = {r["run_id"]: r["logged_keys"] for r in found}
        if self.http is not None:
            self._shared = shared_folders([r["artifact_uri"] for r in found], SHARED_BY)
        rows = [[r[c] for c in RAW_RUN_COLUMNS] for r in found]
        runs = pd.DataFrame(rows, columns=list(RAW_RUN_COLUMNS), dtype=object)
        for column in ("start_time", "end_time"):
            runs[column] = pd.to_numeric(runs[column], errors="coerce").astype("float64")
        params = pd.DataFrame(
            [(r["run_id"], k, v) for r in found for k, v in r["params"].items()],
            columns=["run_id", "key", "value"],
        )
        return runs, params

    def metrics(self, experiment_id: Any, run_ids: Sequence[str], advance: Advance) -> pd.DataFrame:
        """Points of the report's keys and the extra keys of ``run_ids``, never truncated.

        ``advance`` counts (run, key) pairs.
        """
        cached: pd.DataFrame | None = None
        covered: set[tuple[str, str]] = set()
        if self.cache is not None:
            wanted = {r: self._metric_keys.get(r, []) for r in dict.fromkeys(run_ids)}
            cached, covered = self.cache.lookup(str(experiment_id), wanted, self._signatures)
        tasks = self._tasks(run_ids, covered)
        fetch = self._bulk if self.http is not None else self._per_run
        frames: list[pd.DataFrame] = []
        done = len(covered)
        advance(done)
        with ThreadPoolExecutor(SERVER_WORKERS if self.http is not None else THREADS) as pool:
            for (ids, _), frame in zip(tasks, pool.map(lambda t: fetch(*t), tasks), strict=True):
                frames.append(frame)
                advance(len(ids))
                done += len(ids)
        per_run = len(metric_keys(self.extra_keys))
        advance(len(run_ids) * per_run - done)  # pairs the runs never logged
        if self.cache is not None:
            read: dict[str, list[str]] = {}
            for ids, key in tasks:
                for run_id in ids:
                    read.setdefault(run_id, []).append(key)
            fetched = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
            self.cache.store(str(experiment_id), fetched, read, self._signatures)
            self.warnings.extend(self.cache.warnings)
            self.cache.warnings.clear()
        return combine([f for f in (cached, *frames) if f is not None], run_ids)

    def logged_keys(self, experiment_id: Any, run_ids: Sequence[str]) -> list[str]:
        """Every metric key ``run_ids`` logged (from their search results), sorted."""
        del experiment_id
        return sorted({k for r in run_ids for k in self._logged_keys.get(r, ())})

    def _tasks(
        self, run_ids: Sequence[str], covered: Collection[tuple[str, str]] = ()
    ) -> list[tuple[list[str], str]]:
        """(run ids, key) work items: bulk batches on HTTP, one run each otherwise; the
        ``covered`` (run, key) pairs (from the cache) are left out.

        A batch is sorted by run id, as the server sorts its answer (see :meth:`_bulk`).
        """
        keys = dict.fromkeys(k for r in run_ids for k in self._metric_keys.get(r, ()))
        tasks: list[tuple[list[str], str]] = []
        for key in keys:
            ids = sorted(
                r
                for r in dict.fromkeys(run_ids)
                if key in self._metric_keys.get(r, ()) and (r, key) not in covered
            )
            if self.http is None:
                tasks.extend(([r], key) for r in ids)
            else:
                tasks.extend((batch, key) for batch in bulk_batches(self.http.base, ids, key))
        return tasks

    def _per_run(self, ids: list[str], key: str) -> pd.DataFrame:
        (run_id,) = ids
        if self.http is not None:
            return self._history(run_id, key)
        from itwin_report.store import mlflow_api

        points = mlflow_api.metric_history(self.uri, run_id, key)
        frame = pd.DataFrame(points, columns=["step", "value", "timestamp"])
        frame.insert(0, "key", key)
        frame.insert(0, "run_id", run_id)
        return frame

    def _history(self, run_id: str, key: str) -> pd.DataFrame:
        """Every point of one run's metric, page by page (the server's paginated history)."""
        assert self.http is not None
        what = f"read metric {key} of run {run_id}"
        query = {"run_id": run_id, "metric_key": key, "max_results": BULK_MAX_POINTS}
        pages = search_pages(self.http, HISTORY_PATH, query, "metrics", what, method="GET")
        with self._shape(what):
            points = [{**p, "run_id": run_id} for p in objects(list(pages), "metrics")]
            return points_frame(points, key)

    def _bulk(self, ids: list[str], key: str) -> pd.DataFrame:
        """One bulk request, and one more for the runs a full page may have cut short.

        MLflow sorts the page by run id, so the runs before the page's last run are complete:
        they are kept, and the last run and those after it are asked for again. A run that
        alone fills a page is read page by page; a page in another order is thrown away and
        the batch halved.
        """
        assert self.http is not None
        params = {"run_id": ids, "metric_key": key, "max_results": BULK_MAX_POINTS}
        what = "read metric histories"
        answer = self.http.get(BULK_PATH, params, what).get("metrics")
        with self._shape(what):
            frame = points_frame(answer, key)
        if len(frame) < BULK_MAX_POINTS:
            return frame
        if len(ids) == 1:
            return self._per_run(ids, key)
        run_ids = frame["run_id"].astype(str)
        if not run_ids.is_monotonic_increasing:
            half = len(ids) // 2
            return pd.concat([self._bulk(ids[:half], key), self._bulk(ids[half:], key)])
        last = run_ids.iloc[-1]
        complete = frame[run_ids < last]
        rest = sorted(i for i in ids if i >= last)
        if complete.empty:  # the first run alone filled the page
            parts = [self._per_run([last], key)]
            rest = rest[1:]
        else:
            parts = [complete]
        if rest:
            parts.append(self._bulk(rest, key))
        return pd.concat(parts, ignore_index=True)
