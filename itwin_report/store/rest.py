"""MLflow's REST API spoken directly: its paths, and its answers read into plain values.

Used for ``http(s)://`` stores, where MLflow's own client would cost its 2.5 s import and a
protobuf object per field. The transport (credentials, deadline, bounds, redirects) is
:mod:`~itwin_report.store.http`. An answer whose fields have other JSON types than MLflow's
raises :class:`Malformed`, which the reader turns into one line naming the server.
Light module: ``requests`` is imported when a session opens.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

from itwin_report.data.system_keys import is_system_gpu_key
from itwin_report.store.http import RETRIED_STATUS, HttpLimits, HttpSession, request_timeout
from itwin_report.store.tree import PARENT_TAG
from itwin_report.util.escape import shorten, terminal
from itwin_report.util.masking import mask_text

__all__ = ["RETRIED_STATUS", "HttpLimits", "HttpSession", "Malformed", "request_timeout"]

EXPERIMENTS_PATH = "/api/2.0/mlflow/experiments/search"
RUNS_PATH = "/api/2.0/mlflow/runs/search"
HISTORY_PATH = "/api/2.0/mlflow/metrics/get-history"
ARTIFACTS_PATH = "/api/2.0/mlflow-artifacts/artifacts"
PROXIED_SCHEME = "mlflow-artifacts"
PAGE_SIZE = 1000  # experiments and runs per search request
TOKEN_PARAMS = ("token", "access_token")  # a server's token given in the URI's query
_SCALAR = (str, int, float)


class Malformed(ValueError):
    """A field of a server's answer whose JSON type is not MLflow's."""


def objects(value: Any, field: str) -> list[dict[str, Any]]:
    """``value`` as a list of JSON objects (missing: empty); else :class:`Malformed`."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise Malformed(f"'{field}' is not a list of objects")
    return value


def an_object(value: Any, field: str) -> dict[str, Any]:
    """``value`` as a JSON object (missing: empty); else :class:`Malformed`."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"'{field}' is not an object")
    return value


def text(value: Any, field: str) -> str:
    """A scalar field as text (missing: empty); a list or an object is :class:`Malformed`."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, _SCALAR):
        raise Malformed(
            f"'{field}' is {type(value).__name__}, not text: {shorten(repr(value), 60)}"
        )
    return str(value)


def http_detail(status: int, reason: str, content_type: str, body: str) -> str:
    """``HTTP 404 (Not Found): ...`` from an error answer, in one short line, never markup.

    MLflow's JSON errors give their message; an HTML page (a proxy's, a web server's) gives
    its title; a 404 adds that no MLflow REST API answers at that address.
    """
    text = body.strip()
    reason = terminal(shorten(reason, 60))
    message = ""
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
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
    message = terminal(re.sub(r"<[^>]*>", "", message)[:200].strip())  # never terminal codes
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


def report_keys(keys: Iterable[str], metric_keys: Sequence[str]) -> list[str]:
    """The keys the report reads: ``metric_keys`` and MLflow's GPU system metrics."""
    return [k for k in dict.fromkeys(keys) if k in metric_keys or is_system_gpu_key(k)]


def run_record(run: dict[str, Any], param_keys: Sequence[str], metric_keys: Sequence[str]) -> dict:
    """One run of a ``runs/search`` answer as the readers' plain dict.

    The same values MLflow's client gives (its ``Run`` entity): a missing start time is 0, a
    missing or zero end time None; the run's latest metrics tell which keys it logged. A
    field of another JSON type than MLflow's raises :class:`Malformed`.
    """
    info = an_object(run.get("info"), "info")
    data = an_object(run.get("data"), "data")
    params = {
        text(p.get("key"), "key"): text(p.get("value"), "value")
        for p in objects(data.get("params"), "params")
    }
    tags = {
        text(t.get("key"), "key"): text(t.get("value"), "value")
        for t in objects(data.get("tags"), "tags")
    }
    logged = [text(m.get("key"), "key") for m in objects(data.get("metrics"), "metrics")]
    return {
        "run_id": text(info.get("run_id") or info.get("run_uuid"), "run_id"),
        "name": text(info.get("run_name"), "run_name"),
        "status": text(info.get("status"), "status") or "RUNNING",
        "artifact_uri": text(info.get("artifact_uri"), "artifact_uri"),
        "parent_id": tags.get(PARENT_TAG, ""),
        "has_params": bool(params),
        "start_time": _int_or(text(info.get("start_time"), "start_time"), 0),
        "end_time": _int_or(text(info.get("end_time"), "end_time"), None) or None,
        "params": {k: params[k] for k in param_keys if k in params},
        "metric_keys": report_keys(logged, metric_keys),
        "logged_keys": sorted(set(logged)),
    }


def _int_or(value: Any, default: int | None) -> int | None:
    """An int64 field of MLflow's JSON (a number, or a string from some servers)."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
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
