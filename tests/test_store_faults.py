"""Failing fast with a one-line, masked error: real sockets that refuse, hang or fail."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from conftest import cli_runner

from itwin_report.cli import main
from itwin_report.store import load_experiment
from itwin_report.store.api_reader import BULK_MAX_RUNS, BULK_PATH, MAX_REQUEST_LINE, bulk_batches
from itwin_report.util.errors import StoreError

PROMISE_S = 60  # the documented bound on any failing report
SECRET = "s3cr3t-pw"


class FaultServer:
    """A stdlib HTTP server answering the first ``good`` requests, then hanging or failing."""

    def __init__(self, good: int, then: str) -> None:
        self.good, self.then = good, then
        self.paths: list[str] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def _answer(self) -> None:
                server.paths.append(self.path)
                if len(server.paths) <= server.good:
                    self._send(200, json.dumps({"experiments": []}))
                elif server.then == "hang":
                    server.release.wait(PROMISE_S)
                else:  # fail, echoing a URL with credentials as some proxies do
                    self._send(500, f"upstream http://admin:{SECRET}@10.0.0.1/ broke\nline 2")

            def _send(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://user:{SECRET}@127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FaultServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def quick_http(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """MLflow's own variables, set as a user would: 1 s per request, one retry."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "0")
    yield


def _fails(uri: str) -> str:
    """The one-line error of a failing load. How long it takes is bench/bench_limits.py's to
    measure; a test asserts the work done (requests sent), never seconds."""
    with pytest.raises(StoreError) as err:
        load_experiment(uri, None, show_progress=False)
    return str(err.value)


def _one_line_masked(message: str) -> None:
    assert "\n" not in message
    assert SECRET not in message


def test_refused_port_is_one_masked_line() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nobody listens there
    message = _fails(f"http://user:{SECRET}@127.0.0.1:{port}")
    assert message.startswith(f"cannot reach MLflow server at http://user:***@127.0.0.1:{port}: ")
    _one_line_masked(message)


def test_server_that_never_answers(quick_http: None) -> None:
    with FaultServer(good=0, then="hang") as server:
        message = _fails(server.url)
    assert message == (
        f"cannot reach MLflow server at http://user:***@127.0.0.1:"
        f"{server.httpd.server_address[1]}: timed out"
    )
    assert len(server.paths) == 1  # our own probe is never retried


def test_server_that_answers_once_then_hangs(quick_http: None) -> None:
    with FaultServer(good=1, then="hang") as server:
        message = _fails(server.url)
    assert message.startswith("cannot list experiments in http://user:***@127.0.0.1:")
    _one_line_masked(message)
    # the probe, then MLflow's request tried 1 + MLFLOW_HTTP_REQUEST_MAX_RETRIES times
    assert len(server.paths) == 1 + 2
    assert all("experiments/search" in path for path in server.paths)


def test_server_that_answers_once_then_fails(quick_http: None) -> None:
    with FaultServer(good=1, then="fail") as server:
        message = _fails(server.url)
    assert message.startswith("cannot list experiments in http://user:***@127.0.0.1:")
    assert "500" in message
    _one_line_masked(message)


def test_failures_through_the_cli_are_one_line(quick_http: None) -> None:
    with FaultServer(good=1, then="fail") as server:
        result = cli_runner().invoke(
            main, ["generate-scalability-report", "--tracking-uri", server.url, "--no-plots"]
        )
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("Error: cannot list experiments in http://user:***@")
    assert result.stderr.count("\n") == 1 and SECRET not in result.stderr
    assert "Traceback" not in result.stderr and "unexpected" not in result.stderr


@pytest.mark.parametrize("uri", ["ftp://user:pw@host/x", "s3://bucket/mlruns", "gopher://h"])
def test_unknown_scheme_is_one_line(uri: str) -> None:
    result = cli_runner().invoke(main, ["generate-scalability-report", "--tracking-uri", uri])
    assert result.exit_code == 1
    scheme = uri.split(":", 1)[0]
    assert result.stderr.startswith(f"Error: unsupported tracking URI scheme '{scheme}' in ")
    assert result.stderr.count("\n") == 1 and ":pw@" not in result.stderr


def test_bulk_requests_fit_any_server() -> None:
    ids = [f"{i:032x}" for i in range(250)]
    base = "http://mlflow.example.org/some/prefix"
    batches = list(bulk_batches(base, ids, "gpu_utilization_percent"))
    assert [i for batch in batches for i in batch] == ids  # every run once, in order
    for batch in batches:
        fixed = ["metric_key=gpu_utilization_percent", "max_results=25000"]
        query = "&".join([*(f"run_id={i}" for i in batch), *fixed])
        line = f"GET /some/prefix{BULK_PATH}?{query} HTTP/1.1"
        assert len(line) <= MAX_REQUEST_LINE < 4094  # gunicorn's default limit
        assert len(batch) <= BULK_MAX_RUNS
        assert parse_qs(urlsplit(line.split(" ")[1]).query)["run_id"] == batch
    assert len(batches) > 250 // BULK_MAX_RUNS + 1  # 32-hex ids: the line, not 100, limits


def test_tracking_uri_stays_set_while_any_download_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two downloads overlap; the first to finish must not restore the old tracking URI."""
    from itwin_report.store import mlflow_api

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")  # another server
    shared = mlflow_api._SharedTrackingEnv()
    here = "http://127.0.0.1:2"
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[str | None] = []

    def first() -> None:
        with shared(here):
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with shared(here):
            second_in.set()
            first_out.wait(5)
            seen.append(os.environ.get("MLFLOW_TRACKING_URI"))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert first_out.is_set() and seen == [here]
    assert os.environ["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:1"
