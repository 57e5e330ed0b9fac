"""MLflow's REST API spoken directly: one ``requests`` session, its errors in one line.

Used for ``http(s)://`` stores, where MLflow's own client would cost its 2.5 s import and a
protobuf object per field. Light module: ``requests`` is imported when a session opens.

Requests are retried as MLflow's client retries them (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``
more tries, on refused or timed-out connections and HTTP 429/500/502/503/504), except the first
request that tells whether anything answers at all.
"""

from __future__ import annotations

import html
import json
import os
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

from itwin_report.data.system_keys import is_system_gpu_key
from itwin_report.store.tree import PARENT_TAG
from itwin_report.store.uri import mask_uri
from itwin_report.util.errors import StoreError
from itwin_report.util.masking import mask_text

EXPERIMENTS_PATH = "/api/2.0/mlflow/experiments/search"
RUNS_PATH = "/api/2.0/mlflow/runs/search"
ARTIFACTS_PATH = "/api/2.0/mlflow-artifacts/artifacts"
PROXIED_SCHEME = "mlflow-artifacts"
PAGE_SIZE = 1000  # experiments and runs per search request
CONNECT_TIMEOUT_S = 5.0
RETRIED_STATUS = (429, 500, 502, 503, 504)  # as MLflow's client
TOKEN_PARAMS = ("token", "access_token")  # a server's token given in the URI's query
TOKEN_ENV = "MLFLOW_TRACKING_TOKEN"
# Defaults that end a report on a hanging server well within 60 s: 3 tries of 10 s each and
# 0 + 2 s of backoff. MLflow's own variables, when set, win.
HTTP_ENV_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "1",
}


def limit_http_retries() -> None:
    """Bound MLflow's own HTTP timeouts and retries unless the user set them."""
    for name, value in HTTP_ENV_DEFAULTS.items():
        os.environ.setdefault(name, value)


def _env_number(name: str) -> float:
    try:
        return max(0.0, float(os.environ.get(name, "")))
    except ValueError:
        return float(HTTP_ENV_DEFAULTS[name])


def request_timeout() -> float:
    """Seconds one HTTP request may take (``MLFLOW_HTTP_REQUEST_TIMEOUT``, else our default)."""
    return _env_number("MLFLOW_HTTP_REQUEST_TIMEOUT")


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
        message = text
    message = message.strip().splitlines()[0] if message.strip() else ""
    head = f"HTTP {status}" + (f" ({reason})" if reason else "")
    if status == 404:
        message = "; ".join(
            filter(None, [message, "no MLflow REST API at this address (check --tracking-uri)"])
        )
    message = re.sub(r"<[^>]*>", "", message)[:200].strip()
    return mask_text(f"{head}: {message}" if message else head)


def split_token(uri: str) -> tuple[str, str | None]:
    """(the URI without a ``?token=``/``?access_token=`` query parameter, that token or None).

    MLflow's client appends its endpoints to the whole URI, query included, so a token in the
    query must travel another way: as MLflow's bearer token, and as the same query parameter
    on the reader's own requests.
    """
    from urllib.parse import parse_qsl, urlencode, urlunsplit

    parts = urlsplit(uri)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    token = next((v for k, v in pairs if k.lower() in TOKEN_PARAMS), None)
    if token is None:
        return uri, None
    rest = urlencode([(k, v) for k, v in pairs if k.lower() not in TOKEN_PARAMS])
    return urlunsplit(parts._replace(query=rest)), token


class HttpSession:
    """``requests`` with the credentials and TLS settings MLflow's client reads from env.

    ``counts`` holds how many requests went to each path (retries included).
    """

    def __init__(self, uri: str, query_token: str | None = None, connections: int = 16) -> None:
        import requests
        from requests.adapters import HTTPAdapter

        self.base = uri.rstrip("/")
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=connections, max_retries=0)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.params = {} if query_token is None else {"token": query_token}
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
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

    @staticmethod
    def timeout() -> tuple[float, float]:
        """(connect, read) seconds of one request: MLflow's request timeout bounds both."""
        read = request_timeout()
        return min(CONNECT_TIMEOUT_S, read), read

    @property
    def requests_sent(self) -> int:
        return sum(self.counts.values())

    def send(
        self,
        method: str,
        path: str,
        what: str | None,
        params: Any = None,
        body: Any = None,
        retry: bool = True,
        ok: Sequence[int] = (200,),
        retried: Sequence[int] = RETRIED_STATUS,
    ) -> Any:
        """The answer to ``method base+path`` whose status is in ``ok``; else StoreError.

        ``what`` words the error (``cannot {what} in <address>: ...``); without it the error
        says the server could not be reached or what it answered.
        """
        import requests

        where = mask_uri(self.base)
        tries = 1 + (int(_env_number("MLFLOW_HTTP_REQUEST_MAX_RETRIES")) if retry else 0)
        query = {**self.params, **dict(params or {})}
        for attempt in range(1, tries + 1):
            with self._lock:
                self.counts[path] += 1
            try:
                answer = self.session.request(
                    method,
                    self.base + path,
                    params=query,
                    json=body,
                    timeout=self.timeout(),
                    stream=True,
                )
            except requests.RequestException as exc:
                if attempt < tries:
                    _back_off(attempt)
                    continue
                head = (
                    f"cannot {what} in {where}"
                    if what
                    else f"cannot reach MLflow server at {where}"
                )
                raise StoreError(mask_text(f"{head}: {_reason(exc)}")) from exc
            if answer.status_code in retried and attempt < tries:
                answer.close()
                _back_off(attempt)
                continue
            break
        if answer.status_code in ok:
            return answer
        if answer.status_code in (401, 403):
            raise StoreError(
                f"MLflow server at {where} refused access (HTTP {answer.status_code}); set "
                "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN"
            )
        content_type = answer.headers.get("Content-Type", "")
        detail = http_detail(answer.status_code, answer.reason or "", content_type, answer.text)
        if what:
            raise StoreError(f"cannot {what} in {where}: {detail}")
        raise StoreError(f"MLflow server at {where} answered {detail}")

    def json(self, method: str, path: str, what: str | None, **kwargs: Any) -> dict[str, Any]:
        """The JSON object of a 200 answer (see :meth:`send`)."""
        answer = self.send(method, path, what, **kwargs)
        try:
            data = answer.json()
        except ValueError as exc:
            raise StoreError(f"{mask_uri(self.base)} did not answer like an MLflow server") from exc
        return data if isinstance(data, dict) else {}

    def get(
        self, path: str, params: Any, what: str | None = None, retry: bool = True
    ) -> dict[str, Any]:
        """The JSON answer of ``GET base+path``; StoreError on transport or HTTP errors."""
        return self.json("GET", path, what, params=params, retry=retry)

    def pages(self, path: str, body: dict[str, Any], field: str, what: str) -> Iterable[Any]:
        """Every item of ``field`` over all pages of a POSTed search."""
        token = None
        while True:
            page = self.json(
                "POST", path, what, body={**body, **({"page_token": token} if token else {})}
            )
            yield from page.get(field) or []
            token = page.get("next_page_token")
            if not token:
                return


def _back_off(attempt: int) -> None:
    """MLflow's (urllib3's) pause before retry ``attempt``: none first, then doubling."""
    factor = _env_number("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR")
    jitter = _env_number("MLFLOW_HTTP_REQUEST_BACKOFF_JITTER")
    pause = 0.0 if attempt <= 1 else min(120.0, factor * 2 ** (attempt - 1))
    time.sleep(pause + random.uniform(0, jitter))


def report_keys(keys: Iterable[str], metric_keys: Sequence[str]) -> list[str]:
    """The keys the report reads: ``metric_keys`` and MLflow's GPU system metrics."""
    return [k for k in dict.fromkeys(keys) if k in metric_keys or is_system_gpu_key(k)]


def run_record(run: dict[str, Any], param_keys: Sequence[str], metric_keys: Sequence[str]) -> dict:
    """One run of a ``runs/search`` answer as the readers' plain dict.

    The same values MLflow's client gives (its ``Run`` entity): a missing start time is 0, a
    missing or zero end time None; the run's latest metrics tell which keys it logged.
    """
    info = run.get("info") or {}
    data = run.get("data") or {}
    params = {str(p.get("key")): p.get("value", "") for p in data.get("params") or []}
    tags = {str(t.get("key")): t.get("value", "") for t in data.get("tags") or []}
    logged = [str(m.get("key")) for m in data.get("metrics") or []]
    return {
        "run_id": info.get("run_id") or info.get("run_uuid") or "",
        "name": info.get("run_name") or "",
        "status": info.get("status") or "RUNNING",
        "artifact_uri": info.get("artifact_uri") or "",
        "parent_id": tags.get(PARENT_TAG, ""),
        "has_params": bool(params),
        "start_time": _int_or(info.get("start_time"), 0),
        "end_time": _int_or(info.get("end_time"), None) or None,
        "params": {k: params[k] for k in param_keys if k in params},
        "metric_keys": report_keys(logged, metric_keys),
    }


def _int_or(value: Any, default: int | None) -> int | None:
    """An int64 field of MLflow's JSON (a number, or a string from some servers)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def proxied_path(artifact_uri: str, path: str) -> str | None:
    """The server's artifact-proxy path of ``artifact_uri/path``, or None.

    Only ``mlflow-artifacts:`` locations without a host of their own are this server's
    (MLflow's client resolves them against the tracking URI the same way).
    """
    parts = urlsplit(artifact_uri)
    if parts.scheme != PROXIED_SCHEME or parts.netloc:
        return None
    location = "/".join(p for p in (parts.path.strip("/"), path.strip("/")) if p)
    return f"{ARTIFACTS_PATH}/{quote(location)}"
