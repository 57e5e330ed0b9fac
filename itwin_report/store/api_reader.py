"""Read a store through MLflow's public API: HTTP servers, and SQL stores of another schema.

Runs come from ``search_runs`` page by page. On an HTTP server metric histories come from the
bulk endpoint (up to 100 runs and 25,000 points a request, and a request line short enough for
gunicorn's 4,094-byte limit, which MLflow 2.x servers run under); that endpoint cuts off at
``max_results`` points without saying so, so after a full page the runs it may have cut short
are asked for again; a single run that alone fills a page goes through the paginated
``get_metric_history``. Other stores are asked per run
and key, but only for keys the run has logged.
"""

from __future__ import annotations

import html
import json
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd

from itwin_report.data.rundata import METRIC_KEYS
from itwin_report.store import mlflow_api
from itwin_report.store.tree import RAW_RUN_COLUMNS
from itwin_report.store.uri import HTTP, mask_uri, store_kind
from itwin_report.util.errors import StoreError
from itwin_report.util.masking import mask_text
from itwin_report.util.progress import Advance

BULK_PATH = "/ajax-api/2.0/mlflow/metrics/get-history-bulk"
PROBE_PATH = "/api/2.0/mlflow/experiments/search"
BULK_MAX_RUNS = 100
BULK_MAX_POINTS = 25_000
MAX_REQUEST_LINE = 2_000  # bytes of "GET <path>?<query> HTTP/1.1"; gunicorn refuses > 4,094
CONNECT_TIMEOUT_S = 5.0
THREADS = 4
METRIC_FRAME = ["run_id", "key", "step", "value", "timestamp"]


def _reason(exc: Exception) -> str:
    """A short reason from a requests error (``[Errno 111] Connection refused``)."""
    text = str(exc)
    found = re.search(r"(\[Errno [^\]]+\][^'\")]*)", text)
    if found:
        return found.group(1).strip()
    if "timed out" in text.lower():
        return "timed out"
    return type(exc).__name__


def http_detail(status: int, reason: str, content_type: str, body: str) -> str:
    """``HTTP 404 (Not Found): ...`` from an error answer, in one short line, never markup.

    MLflow's JSON errors give their message; an HTML page (a proxy's, a web server's) gives
    its title; a 404 adds that no MLflow REST API answers at that address.
    """
    text = body.strip()
    message = ""
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            message = str(data.get("message") or data.get("error_code") or "")
    elif "html" in content_type.lower() or text[:15].lower().startswith(("<!doctype", "<html")):
        title = re.search(r"<title[^>]*>(.*?)</title>", text, re.IGNORECASE | re.DOTALL)
        message = re.sub(r"\s+", " ", html.unescape(title.group(1))).strip() if title else ""
        message = "" if message.lower() in (reason.lower(), "error response") else message
    elif text:
        message = text.splitlines()[0]
    head = f"HTTP {status}" + (f" ({reason})" if reason else "")
    if status == 404:
        message = "; ".join(
            filter(None, [message, "no MLflow REST API at this address (check --tracking-uri)"])
        )
    message = re.sub(r"<[^>]*>", "", message)[:200].strip()
    return mask_text(f"{head}: {message}" if message else head)


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


TOKEN_PARAMS = ("token", "access_token")  # a server's token given in the URI's query
TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"


def split_token(uri: str) -> tuple[str, str | None]:
    """(the URI without a ``?token=``/``?access_token=`` query parameter, that token or None).

    MLflow's client appends its endpoints to the whole URI, query included, so a token in the
    query must travel another way: as MLflow's bearer token, and as the same query parameter
    on the reader's own requests.
    """
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(uri)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    token = next((v for k, v in pairs if k.lower() in TOKEN_PARAMS), None)
    if token is None:
        return uri, None
    rest = urlencode([(k, v) for k, v in pairs if k.lower() not in TOKEN_PARAMS])
    return urlunsplit(parts._replace(query=rest)), token


class HttpSession:
    """``requests`` with the credentials and TLS settings MLflow's client reads from env."""

    def __init__(self, uri: str, query_token: str | None = None) -> None:
        import requests

        self.base = uri.rstrip("/")
        self.session = requests.Session()
        self.params = {} if query_token is None else {"token": query_token}
        token = os.environ.get(TOKEN_ENV)
        user = os.environ.get("MLFLOW_TRACKING_USERNAME")
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"
        elif user:
            self.session.auth = (user, os.environ.get("MLFLOW_TRACKING_PASSWORD", ""))
        if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true":
            self.session.verify = False
        elif os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH"):
            self.session.verify = os.environ["MLFLOW_TRACKING_SERVER_CERT_PATH"]
        if os.environ.get("MLFLOW_TRACKING_CLIENT_CERT_PATH"):
            self.session.cert = os.environ["MLFLOW_TRACKING_CLIENT_CERT_PATH"]

    def get(self, path: str, params: Any, timeout: tuple[float, float]) -> dict[str, Any]:
        """The JSON answer of ``GET base+path``; StoreError on transport or HTTP errors."""
        import requests

        where = mask_uri(self.base)
        try:
            query = {**self.params, **dict(params or {})}
            answer = self.session.get(self.base + path, params=query, timeout=timeout)
        except requests.RequestException as exc:
            raise StoreError(f"cannot reach MLflow server at {where}: {_reason(exc)}") from exc
        if answer.status_code in (401, 403):
            raise StoreError(
                f"MLflow server at {where} refused access (HTTP {answer.status_code}); set "
                "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN"
            )
        if answer.status_code != 200:
            detail = http_detail(
                answer.status_code,
                answer.reason or "",
                answer.headers.get("Content-Type", ""),
                answer.text,
            )
            raise StoreError(f"MLflow server at {where} answered {detail}")
        try:
            data = answer.json()
        except ValueError as exc:
            raise StoreError(f"{where} did not answer like an MLflow server") from exc
        return data if isinstance(data, dict) else {}


class ApiReader:
    """Experiments, runs, metrics and artifacts through MLflow's client (and its REST API)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.http: HttpSession | None = None
        self._metric_keys: dict[str, list[str]] = {}
        self.warnings: list[str] = []
        self._saved_token: tuple[bool, str | None] | None = None
        if store_kind(uri) == HTTP:
            mlflow_api.limit_http_retries()
            self.uri, token = split_token(uri)
            if token is not None and not os.environ.get(TOKEN_ENV):
                # MLflow's client sends it as its bearer token for the reader's lifetime
                self._saved_token = (TOKEN_ENV in os.environ, os.environ.get(TOKEN_ENV))
                os.environ[TOKEN_ENV] = token
            self.http = HttpSession(self.uri, token)
            self.http.get(PROBE_PATH, {"max_results": 1}, self.timeout())

    @staticmethod
    def timeout() -> tuple[float, float]:
        """(connect, read) seconds of one request: MLflow's request timeout bounds both."""
        read = mlflow_api.request_timeout()
        return min(CONNECT_TIMEOUT_S, read), read

    def close(self) -> None:
        """Release the HTTP session (and give the bearer-token variable its value back)."""
        if self.http is not None:
            self.http.session.close()
        if self._saved_token is not None:
            had, value = self._saved_token
            if had and value is not None:
                os.environ[TOKEN_ENV] = value
            else:
                os.environ.pop(TOKEN_ENV, None)
            self._saved_token = None

    def experiments(self) -> list[tuple[Any, str, int]]:
        """``(id, name, 1 when it has live runs)`` of the live experiments."""
        return list(mlflow_api.list_experiments(self.uri))

    def runs(
        self, experiment_id: Any, param_keys: Sequence[str]
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(live runs in the tree's raw layout, their ``param_keys`` params in long format)."""
        found = mlflow_api.search_all_runs(self.uri, str(experiment_id), param_keys, METRIC_KEYS)
        self._metric_keys = {r["run_id"]: r["metric_keys"] for r in found}
        runs = pd.DataFrame([{c: r[c] for c in RAW_RUN_COLUMNS} for r in found])
        runs = runs.reindex(columns=list(RAW_RUN_COLUMNS))
        for column in ("start_time", "end_time"):
            runs[column] = pd.to_numeric(runs[column], errors="coerce").astype("float64")
        params = pd.DataFrame(
            [(r["run_id"], k, v) for r in found for k, v in r["params"].items()],
            columns=["run_id", "key", "value"],
        )
        return runs, params

    def metrics(self, experiment_id: Any, run_ids: Sequence[str], advance: Advance) -> pd.DataFrame:
        """Points of :data:`METRIC_KEYS` of ``run_ids``, never truncated.

        ``advance`` counts (run, key) pairs.
        """
        del experiment_id
        tasks = self._tasks(run_ids)
        fetch = self._bulk if self.http is not None else self._per_run
        frames: list[pd.DataFrame] = []
        done = 0
        with ThreadPoolExecutor(THREADS) as pool:
            for (ids, _), frame in zip(tasks, pool.map(lambda t: fetch(*t), tasks), strict=True):
                frames.append(frame)
                advance(len(ids))
                done += len(ids)
        advance(len(run_ids) * len(METRIC_KEYS) - done)  # pairs the runs never logged
        frames = [f for f in frames if not f.empty]
        if not frames:
            return pd.DataFrame(columns=METRIC_FRAME)
        return pd.concat(frames, ignore_index=True)

    def _tasks(self, run_ids: Sequence[str]) -> list[tuple[list[str], str]]:
        """(run ids, key) work items: bulk batches on HTTP, one run each otherwise."""
        keys = dict.fromkeys(k for r in run_ids for k in self._metric_keys.get(r, ()))
        tasks: list[tuple[list[str], str]] = []
        for key in keys:
            ids = [r for r in run_ids if key in self._metric_keys.get(r, ())]
            if self.http is None:
                tasks.extend(([r], key) for r in ids)
            else:
                tasks.extend((batch, key) for batch in bulk_batches(self.http.base, ids, key))
        return tasks

    def _per_run(self, ids: list[str], key: str) -> pd.DataFrame:
        (run_id,) = ids
        points = mlflow_api.metric_history(self.uri, run_id, key)
        frame = pd.DataFrame(points, columns=["step", "value", "timestamp"])
        frame.insert(0, "key", key)
        frame.insert(0, "run_id", run_id)
        return frame

    def _bulk(self, ids: list[str], key: str) -> pd.DataFrame:
        """One bulk request; runs a full page may have cut short are asked for again."""
        assert self.http is not None
        params = {"run_id": ids, "metric_key": key, "max_results": BULK_MAX_POINTS}
        answer = self.http.get(BULK_PATH, params, self.timeout()).get("metrics", [])
        frame = pd.DataFrame(answer, columns=METRIC_FRAME)
        frame["value"] = pd.to_numeric(frame["value"], errors="coerce")
        if len(frame) < BULK_MAX_POINTS:
            return frame
        if len(ids) == 1:
            return self._per_run(ids, key)
        return self._after_full_page(frame, ids, key)

    def _after_full_page(self, frame: pd.DataFrame, ids: list[str], key: str) -> pd.DataFrame:
        """Complete the answer to a full page.

        MLflow sorts the page by run id, so runs before the page's last run are complete:
        keep them, and ask again for the last run and the runs after it. A page in another
        order is thrown away and the batch halved.
        """
        run_ids = frame["run_id"]
        if not run_ids.is_monotonic_increasing:
            half = len(ids) // 2
            return pd.concat([self._bulk(ids[:half], key), self._bulk(ids[half:], key)])
        last = str(run_ids.iloc[-1])
        complete = frame[run_ids < last]
        tail = self._per_run([last], key) if complete.empty else self._bulk([last], key)
        later = sorted(i for i in ids if i > last)
        parts = [complete, tail]
        if later:
            parts.append(self._bulk(later, key))
        return pd.concat([p for p in parts if not p.empty] or [frame.iloc[:0]])

    def remote_artifact(self, artifact_uri: str, path: str) -> bytes | None:
        """Download one artifact through MLflow; None when the run has none."""
        from itwin_report.store.artifacts import read_capped

        with tempfile.TemporaryDirectory(prefix="itwin-report-") as tmp:
            local = mlflow_api.download_artifact(self.uri, artifact_uri, path, tmp)
            return read_capped(Path(local)) if local is not None else None
