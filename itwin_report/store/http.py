"""One HTTP session to one MLflow server, bounded in time, pages, size and where it goes.

* **Credentials** travel with this session's requests only: a token given in the store's URI
  (or ``MLFLOW_TRACKING_TOKEN``, ``MLFLOW_TRACKING_USERNAME``/``_PASSWORD`` as set by the
  user) becomes this session's header; nothing is written to the process environment.
* **One deadline** for the whole read (:attr:`HttpLimits.timeout`): when it passes, every
  connection of the session is shut down, so a server that trickles one byte at a time cannot
  hold the read, and the error says so. Each request also has MLflow's per-request timeout
  (``MLFLOW_HTTP_REQUEST_TIMEOUT`` when set, else 10 s) and is retried as MLflow's client
  retries (``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` when set, else 2 more tries), on refused or
  timed-out connections and HTTP 429/500/502/503/504, never past the deadline.
* **Bounded answers**: at most :attr:`HttpLimits.max_answer_bytes` bytes in one answer and
  :attr:`HttpLimits.max_pages` pages in one search; a page token seen twice ends the search.
* **Redirects** are followed only to the same origin (scheme, host and port), at most
  :data:`MAX_REDIRECTS` times; a redirect elsewhere is an error that names only the other
  origin (never its path or query, which may carry a token).

Every failure is a one-line :class:`StoreError` naming the server (its password masked).
Light module: ``requests`` is imported when a session opens.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import socket
import threading
import time
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from itwin_report.store.uri import mask_uri
from itwin_report.util.errors import EXIT_USAGE, ReportError, StoreError
from itwin_report.util.escape import shorten, terminal
from itwin_report.util.masking import mask_text

DEFAULT_TIMEOUT_S = 60.0  # the whole read of one server
MAX_TIMEOUT_S = 86_400.0
MAX_PAGES = 1_000  # pages of one search (1,000 runs a page: a million runs)
MAX_ANSWER_BYTES = 256 * 2**20  # one JSON answer; a page of 1,000 runs is a few MB
ERROR_BODY_BYTES = 64 * 1024  # read of an error answer, for its message
CHUNK_BYTES = 256 * 1024
MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)
CONNECT_TIMEOUT_S = 5.0
RETRIED_STATUS = (429, 500, 502, 503, 504)  # as MLflow's client
# MLflow's own variables, read (never written) when set; else these per-request defaults
REQUEST_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": 10.0,
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": 2.0,
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": 1.0,
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": 1.0,
}


class BadTimeout(ReportError):
    """A timeout that is not a number of seconds in range: bad usage."""

    exit_code = EXIT_USAGE


def check_timeout(value: Any) -> float:
    """``value`` as seconds for a whole read: a finite number above 0 and at most a day."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadTimeout(f"timeout must be a number of seconds, not {shorten(repr(value), 40)}")
    if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise BadTimeout(f"timeout must be above 0 and at most {MAX_TIMEOUT_S:,.0f} s, not {value}")
    return float(value)


@dataclass(frozen=True)
class HttpLimits:
    """What one read of a server may take: seconds in all (None: :data:`DEFAULT_TIMEOUT_S`),
    pages of a search, bytes an answer."""

    timeout: float | None = None
    max_pages: int = MAX_PAGES
    max_answer_bytes: int = MAX_ANSWER_BYTES

    def __post_init__(self) -> None:
        seconds = DEFAULT_TIMEOUT_S if self.timeout is None else check_timeout(self.timeout)
        object.__setattr__(self, "timeout", seconds)

    @property
    def seconds(self) -> float:
        return float(self.timeout or DEFAULT_TIMEOUT_S)


def _setting(name: str) -> float:
    """MLflow's variable ``name`` as a number >= 0, else our default (never written)."""
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return REQUEST_DEFAULTS[name]
    return max(0.0, value) if math.isfinite(value) else REQUEST_DEFAULTS[name]


def request_timeout() -> float:
    """Seconds one HTTP request may wait for the server (MLflow's variable, else 10)."""
    return _setting("MLFLOW_HTTP_REQUEST_TIMEOUT")


def reason(exc: BaseException) -> str:
    """A short, printable reason from a transport error (``[Errno 111] Connection refused``)."""
    text = str(exc)
    found = re.search(r"(\[Errno [^\]]+\][^'\")]*)", text)
    if found:
        return terminal(found.group(1).strip())
    if "timed out" in text.lower():
        return "timed out"
    return type(exc).__name__


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``, the port filled in for http and https."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1
    default = {"http": 80, "https": 443}.get(scheme)
    return scheme, (parts.hostname or "").lower(), port if port is not None else default


class Watchdog:
    """Shuts the session's connections down when the read's deadline passes.

    A connection is shut down, not closed, so the thread reading it gets an error at once
    and the socket is released by its owner as usual.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self.expired = threading.Event()
        self._connections: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self.expire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def track(self, connection: Any) -> None:
        with self._lock:
            self._connections.add(connection)
        if self.expired.is_set():
            _shut(connection)

    def expire(self) -> None:
        self.expired.set()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            _shut(connection)

    def stop(self) -> None:
        self._timer.cancel()


def _shut(connection: Any) -> None:
    sock = getattr(connection, "sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the TCP socket, under any TLS


def _tracked_pools(watchdog: Watchdog, pools: dict[str, Any]) -> dict[str, Any]:
    """``pools`` (urllib3's pool class per scheme, as requests' adapter holds them) made into
    classes whose connections ``watchdog`` can shut down."""

    def tracked(pool: Any) -> Any:
        class Connection(pool.ConnectionCls):
            def connect(self) -> None:
                watchdog.track(self)
                super().connect()
                watchdog.track(self)

        return type(pool.__name__, (pool,), {"ConnectionCls": Connection})

    return {scheme: tracked(pools[scheme]) for scheme in ("http", "https")}


class HttpSession:
    """``requests`` with this server's credentials and TLS settings, within :class:`HttpLimits`.

    ``counts`` holds how many requests went to each path (retries included).
    """

    def __init__(
        self,
        uri: str,
        query_token: str | None = None,
        connections: int = 16,
        limits: HttpLimits | None = None,
    ) -> None:
        import requests
        from requests.adapters import HTTPAdapter

        self.base = uri.rstrip("/")
        self.where = mask_uri(self.base)
        self.limits = limits or HttpLimits()
        self.watchdog = Watchdog(self.limits.seconds)
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=connections, max_retries=0)
        manager = adapter.poolmanager
        manager.pool_classes_by_scheme = _tracked_pools(
            self.watchdog, manager.pool_classes_by_scheme
        )
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.params = {} if query_token is None else {"token": query_token}
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        token = query_token or os.environ.get("MLFLOW_TRACKING_TOKEN")
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

    def close(self) -> None:
        self.watchdog.stop()
        self.session.close()

    @property
    def requests_sent(self) -> int:
        return sum(self.counts.values())

    def timeout(self) -> tuple[float, float]:
        """(connect, read) seconds of one request: the per-request timeout, within the deadline."""
        left = max(0.01, self.watchdog.remaining())
        read = min(request_timeout(), left)
        return min(CONNECT_TIMEOUT_S, read), read

    def late(self, what: str | None) -> StoreError:
        """The error of a read that ran past its deadline."""
        doing = f" (while trying to {what})" if what else ""
        return StoreError(
            f"MLflow server at {self.where} did not answer everything within "
            f"{self.limits.seconds:g} s{doing}; raise --timeout if it is only slow"
        )

    def malformed(self, what: str, detail: str) -> StoreError:
        """The error of an answer whose data is not what MLflow sends."""
        return StoreError(
            mask_text(
                f"MLflow server at {self.where} answered {what} with malformed data: {detail}"
            )
        )

    def _check_time(self, what: str | None) -> None:
        if self.watchdog.expired.is_set() or self.watchdog.remaining() <= 0:
            raise self.late(what)

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
        says the server could not be reached or what it answered. The answer's body is read
        with :meth:`body`.
        """
        import requests

        tries = 1 + (int(_setting("MLFLOW_HTTP_REQUEST_MAX_RETRIES")) if retry else 0)
        query = {**self.params, **dict(params or {})}
        for attempt in range(1, tries + 1):
            self._check_time(what)
            with self._lock:
                self.counts[path] += 1
            try:
                answer = self._follow(method, self.base + path, query, body, what)
            except requests.RequestException as exc:
                self._check_time(what)
                if attempt < tries:
                    self._back_off(attempt)
                    continue
                head = (
                    f"cannot {what} in {self.where}"
                    if what
                    else (f"cannot reach MLflow server at {self.where}")
                )
                raise StoreError(mask_text(f"{head}: {reason(exc)}")) from None
            if answer.status_code in retried and attempt < tries:
                answer.close()
                self._back_off(attempt)
                continue
            break
        if answer.status_code in ok:
            return answer
        return self._refused(answer, what)

    def _follow(self, method: str, url: str, query: Any, body: Any, what: str | None) -> Any:
        """The answer at ``url``, after redirects to the same origin only."""
        for _ in range(MAX_REDIRECTS + 1):
            answer = self.session.request(
                method,
                url,
                params=query,
                json=body,
                timeout=self.timeout(),
                stream=True,
                allow_redirects=False,
            )
            location = answer.headers.get("Location")
            if answer.status_code not in REDIRECTS or not location:
                return answer
            answer.close()
            target = urljoin(answer.url, location)
            if origin(target) != origin(self.base):
                scheme, host, port = origin(target)
                raise StoreError(
                    f"MLflow server at {self.where} redirected to another address "
                    f"({terminal(shorten(f'{scheme}://{host}:{port}', 100))}): not followed"
                )
            url, query = target, self.params  # the Location's own query, plus our token
            if answer.status_code == 303 or (answer.status_code in (301, 302) and body is not None):
                method, body = "GET", None
            self._check_time(what)
        raise StoreError(
            f"MLflow server at {self.where} redirected more than {MAX_REDIRECTS} times: stopped"
        )

    def _refused(self, answer: Any, what: str | None) -> Any:
        """Raise the StoreError of an answer whose status is not the one hoped for."""
        from itwin_report.store.rest import http_detail

        if answer.status_code in (401, 403):
            answer.close()
            raise StoreError(
                f"MLflow server at {self.where} refused access (HTTP {answer.status_code}); set "
                "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD or MLFLOW_TRACKING_TOKEN"
            )
        content_type = answer.headers.get("Content-Type", "")
        text = self.text(answer, what)
        detail = http_detail(answer.status_code, answer.reason or "", content_type, text)
        if what:
            raise StoreError(f"cannot {what} in {self.where}: {detail}")
        raise StoreError(f"MLflow server at {self.where} answered {detail}")

    def body(
        self, answer: Any, what: str | None, limit: int | None = None, cut: bool = False
    ) -> bytes:
        """The answer's (decoded) bytes, read within the deadline and at most ``limit`` bytes
        (default :attr:`HttpLimits.max_answer_bytes`): past it, an error, or with ``cut``
        the first ``limit + 1`` bytes. A broken transfer is an error naming the server."""
        import requests

        limit = self.limits.max_answer_bytes if limit is None else limit
        declared = answer.headers.get("Content-Length", "")
        if not cut and declared.isdigit() and int(declared) > limit:
            answer.close()
            raise self._too_big(what, limit)
        chunks, size = [], 0
        try:
            for chunk in answer.iter_content(CHUNK_BYTES):
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    if cut:
                        break
                    raise self._too_big(what, limit)
                self._check_time(what)
            self._check_time(what)  # a connection shut at the deadline may end like a file
        except requests.RequestException as exc:
            self._check_time(what)
            doing = f" to {what}" if what else ""
            raise StoreError(
                f"MLflow server at {self.where} sent a broken answer{doing}: {reason(exc)}"
            ) from None
        finally:
            answer.close()
        return b"".join(chunks)[: limit + 1] if cut else b"".join(chunks)

    def _too_big(self, what: str | None, limit: int) -> StoreError:
        doing = f" to {what}" if what else ""
        return StoreError(
            f"MLflow server at {self.where} sent an answer{doing} larger than "
            f"{limit / 2**20:,.0f} MiB: not read further"
        )

    def text(self, answer: Any, what: str | None) -> str:
        """The first bytes of an (error) answer as text, for its message."""
        try:
            data = self.body(answer, what, ERROR_BODY_BYTES, cut=True)
        except StoreError:
            return ""
        return data[:ERROR_BODY_BYTES].decode(answer.encoding or "utf-8", errors="replace")

    def json(self, method: str, path: str, what: str | None, **kwargs: Any) -> dict[str, Any]:
        """The JSON object of a 200 answer (see :meth:`send`)."""
        answer = self.send(method, path, what, **kwargs)
        data = self.body(answer, what)
        try:
            parsed = json.loads(data)
        except (ValueError, RecursionError):
            raise StoreError(f"{self.where} did not answer like an MLflow server") from None
        if not isinstance(parsed, dict):
            raise StoreError(f"{self.where} did not answer like an MLflow server")
        return parsed

    def get(
        self, path: str, params: Any, what: str | None = None, retry: bool = True
    ) -> dict[str, Any]:
        """The JSON answer of ``GET base+path``; StoreError on transport or HTTP errors."""
        return self.json("GET", path, what, params=params, retry=retry)

    def _back_off(self, attempt: int) -> None:
        """MLflow's (urllib3's) pause before retry ``attempt`` (none first, then doubling),
        never past the deadline."""
        factor = _setting("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR")
        jitter = _setting("MLFLOW_HTTP_REQUEST_BACKOFF_JITTER")
        pause = 0.0 if attempt <= 1 else min(120.0, factor * 2 ** (attempt - 1))
        pause = min(pause + random.uniform(0, jitter), max(0.0, self.watchdog.remaining()))
        self.watchdog.expired.wait(pause)
