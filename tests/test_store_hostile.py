"""Servers that never finish, never stop paging, answer too much or nonsense, send a reader
elsewhere or write escape codes; and credentials that must go to their own server only.

Each server is a small stdlib HTTP server on 127.0.0.1 whose handlers stop by themselves
(a trickle ends when the reader hangs up, or after a few seconds). Bounds are made small
through the reader's limits so the tests are quick; no test asserts a wall time.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from conftest import cli_runner

from itwin_report.cli import main
from itwin_report.store import load_experiment
from itwin_report.store.http import HttpLimits
from itwin_report.util.errors import StoreError

SECRET = "T0p-s3cret-token"
RUN_ID = "a" * 32
EXPERIMENTS = {"experiments": [{"experiment_id": "1", "name": "exp"}]}

Answer = Callable[["Handler"], None]


class Handler(BaseHTTPRequestHandler):
    """Answers with the server's ``answer`` for the request's path; records what it got."""

    server: HostileServer  # type: ignore[assignment]
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.body = json.loads(self.rfile.read(length) or b"{}")
        self._answer()

    def _answer(self) -> None:
        self.server.seen.append((self.command, self.path, dict(self.headers)))
        path = self.path.split("?", 1)[0]
        for prefix, answer in self.server.answers.items():
            if path.endswith(prefix):
                answer(self)
                return
        send(self, 200, EXPERIMENTS)

    def log_message(self, *args: object) -> None:
        pass


class HostileServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, answers: dict[str, Answer]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.answers = answers
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.shutdown()
        self.server_close()


def send(h: Handler, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(raw)))
    for name, value in (headers or {}).items():
        h.send_header(name, value)
    h.end_headers()
    h.wfile.write(raw)


def trickle(h: Handler, data: bytes, every_s: float = 0.5) -> None:
    """``data`` one byte at a time, until the reader hangs up or the test ends."""
    for byte in data:
        if h.server.done.wait(every_s):
            return
        try:
            h.wfile.write(bytes([byte]))
            h.wfile.flush()
        except OSError:
            return


def _error(uri: str, **limits: Any) -> str:
    with pytest.raises(StoreError) as err:
        load_experiment(uri, None, show_progress=False, http=HttpLimits(**limits))
    message = str(err.value)
    assert "\n" not in message and "\x1b" not in message
    return message


@pytest.fixture(autouse=True)
def one_try(monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's variables as a user sets them: one try of 1 s, no pause."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_JITTER", "0")


def _probe_then(answer: Answer) -> dict[str, Answer]:
    """The probe answered well, then ``answer`` for the experiments' listing."""
    calls = []

    def listing(h: Handler) -> None:
        calls.append(1)
        if len(calls) == 1:
            send(h, 200, EXPERIMENTS)
        else:
            answer(h)

    return {"experiments/search": listing}


# ------------------------------------------------------------------ the whole read's deadline


def test_a_body_sent_one_byte_at_a_time_ends_at_the_deadline() -> None:
    def slow(h: Handler) -> None:
        body = json.dumps(EXPERIMENTS).encode()
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        trickle(h, body)

    with HostileServer(_probe_then(slow)) as server:
        message = _error(server.url, timeout=2)
    assert message == (
        f"MLflow server at {server.url} did not answer everything within 2 s (while trying to "
        "list experiments); raise --timeout if it is only slow"
    )


def test_headers_sent_one_byte_at_a_time_end_at_the_deadline() -> None:
    def slow(h: Handler) -> None:
        trickle(h, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    with HostileServer({"experiments/search": slow}) as server:
        message = _error(server.url, timeout=2)
    assert message.startswith(f"MLflow server at {server.url} did not answer everything within 2 s")


def test_the_deadline_is_an_option_of_the_command() -> None:
    def slow(h: Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "100")
        h.end_headers()
        trickle(h, b" " * 100)

    with HostileServer(_probe_then(slow)) as server:
        result = cli_runner().invoke(
            main, ["generate-scalability-report", "--tracking-uri", server.url, "--timeout", "2"]
        )
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: MLflow server at {server.url} did not answer")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e9", "soon"])
def test_a_timeout_out_of_range_is_bad_usage(value: str) -> None:
    result = cli_runner().invoke(
        main,
        ["generate-scalability-report", "--tracking-uri", "http://127.0.0.1:9", "--timeout", value],
    )
    assert result.exit_code == 2
    assert "--timeout" in result.stderr and result.stderr.count("\n") == 1


# ------------------------------------------------------------------ pages and sizes


def _endless(same_token: bool) -> Answer:
    pages = []

    def runs(h: Handler) -> None:
        pages.append(1)
        token = "again" if same_token else f"page-{len(pages)}"
        send(h, 200, {"runs": [], "next_page_token": token})

    return runs


def test_a_search_that_never_ends_stops_at_the_page_bound() -> None:
    with HostileServer({"runs/search": _endless(same_token=False)}) as server:
        message = _error(server.url, max_pages=5)
    assert message == (
        f"MLflow server at {server.url} kept sending pages to search runs (more than 5): stopped"
    )
    assert sum("runs/search" in path for _, path, _ in server.seen) == 5


def test_a_page_token_sent_twice_stops_at_once() -> None:
    with HostileServer({"runs/search": _endless(same_token=True)}) as server:
        message = _error(server.url)
    assert message == (
        f"MLflow server at {server.url} answered search runs with malformed data: "
        "a next_page_token that is not new text"
    )
    assert sum("runs/search" in path for _, path, _ in server.seen) == 2


def test_an_answer_larger_than_the_bound_is_not_read() -> None:
    big = b'{"experiments": [], "x": "' + b"y" * (3 * 2**20) + b'"}'

    def declared(h: Handler) -> None:
        send(h, 200, big)

    def chunked(h: Handler) -> None:  # no length said: the reader counts what comes
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for start in range(0, len(big), 65536):
            part = big[start : start + 65536]
            try:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            except OSError:
                return
        h.wfile.write(b"0\r\n\r\n")

    for answer in (declared, chunked):
        with HostileServer(_probe_then(answer)) as server:
            message = _error(server.url, max_answer_bytes=2**20)
        assert message == (
            f"MLflow server at {server.url} sent an answer to list experiments larger than "
            "1 MiB: not read further"
        )


# ------------------------------------------------------------------ malformed answers


def _garbage_chunks(h: Handler) -> None:
    h.send_response(200)
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    h.wfile.write(b"zz\r\nnot a chunk\r\n0\r\n\r\n")


def _deep(h: Handler) -> None:
    send(h, 200, b"[" * 100_000 + b"]" * 100_000)


def _runs(runs: Any) -> Answer:
    return lambda h: send(h, 200, {"runs": runs})


def _points(points: Any) -> dict[str, Answer]:
    run = {
        "info": {"run_id": RUN_ID, "run_name": "r", "status": "FINISHED", "start_time": 1},
        "data": {
            "params": [
                {"key": "strategy", "value": "ddp"},
                {"key": "global_world_size", "value": "1"},
                {"key": "global_rank", "value": "0"},
            ],
            "metrics": [{"key": "epoch_time_s", "value": 1.0}],
        },
    }
    return {
        "runs/search": _runs([run]),
        "get-history-bulk": lambda h: send(h, 200, {"metrics": points}),
    }


MALFORMED = {
    "garbage-chunks": (_probe_then(_garbage_chunks), "sent a broken answer to list experiments"),
    "nested-json": (_probe_then(_deep), "did not answer like an MLflow server"),
    "experiments-an-object": (
        _probe_then(lambda h: send(h, 200, {"experiments": {"a": 1}})),
        "answered list experiments with malformed data: 'experiments' is not a list",
    ),
    "experiment-name-a-list": (
        _probe_then(lambda h: send(h, 200, {"experiments": [{"experiment_id": "1", "name": [1]}]})),
        "answered list experiments with malformed data: 'name' is list, not text: [1]",
    ),
    "run-info-a-list": (
        {"runs/search": _runs([{"info": [1, 2]}])},
        "answered search runs with malformed data: 'info' is not an object",
    ),
    "run-params-text": (
        {"runs/search": _runs([{"info": {"run_id": RUN_ID}, "data": {"params": "p"}}])},
        "answered search runs with malformed data: 'params' is not a list of objects",
    ),
    "run-start-an-object": (
        {"runs/search": _runs([{"info": {"run_id": RUN_ID, "start_time": {"ms": 1}}}])},
        "answered search runs with malformed data: 'start_time' is dict, not text: {'ms': 1}",
    ),
    "runs-a-number": (
        {"runs/search": _runs(7)},
        "answered search runs with malformed data: 'runs' is not a list",
    ),
    "point-step-text": (
        _points([{"run_id": RUN_ID, "value": 1.0, "step": "abc", "timestamp": 1}]),
        "answered read metric histories with malformed data: a point's step is not a whole "
        "number: 'abc'",
    ),
    "point-value-an-object": (
        _points([{"run_id": RUN_ID, "value": {"v": 1}, "step": 0, "timestamp": 1}]),
        "answered read metric histories with malformed data: 'value' is dict, not text",
    ),
    "point-timestamp-huge": (
        _points([{"run_id": RUN_ID, "value": 1.0, "step": 0, "timestamp": 10**30}]),
        "a point's timestamp is not a whole number: 1000000000000000000000000000000",
    ),
    "points-not-objects": (
        _points([1, 2, 3]),
        "answered read metric histories with malformed data: 'metrics' is not a list of objects",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_answer_is_one_line_naming_the_server(case: str) -> None:
    answers, expected = MALFORMED[case]
    # garbage an earlier test of this process left is collected now, not inside the command,
    # where an object's failing finaliser would add Python's own line to the stderr read here
    gc.collect()
    with HostileServer(answers) as server:
        result = cli_runner().invoke(
            main, ["generate-scalability-report", "--tracking-uri", server.url, "--no-plots", "-q"]
        )
    assert result.exit_code == 1, result.stderr
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
    assert server.url in result.stderr and expected in result.stderr
    assert "unexpected" not in result.stderr


def test_text_points_are_missing_values_not_errors() -> None:
    """MLflow writes NaN as text: a point whose value is text is kept as NaN."""
    from itwin_report.store.api_reader import points_frame

    frame = points_frame([{"run_id": RUN_ID, "value": "NaN", "step": "3", "timestamp": 5}], "k")
    assert frame["value"].isna().all() and list(frame["step"]) == [3]


# ------------------------------------------------------------------ redirects and escapes


def test_a_redirect_to_another_port_is_not_followed() -> None:
    with HostileServer({}) as elsewhere:
        target = f"{elsewhere.url}/api/2.0/mlflow/experiments/search?token={SECRET}"

        def away(h: Handler) -> None:
            send(h, 307, b"", {"Location": target})

        with HostileServer({"experiments/search": away}) as server:
            message = _error(f"{server.url}/?token=mine")
    assert message == (
        f"MLflow server at {server.url} redirected to another address "
        f"(http://127.0.0.1:{elsewhere.server_address[1]}): not followed"
    )
    assert elsewhere.seen == [] and SECRET not in message


def test_a_redirect_on_the_same_server_is_followed_and_a_loop_is_stopped() -> None:
    def moved(h: Handler) -> None:
        send(h, 307, b"", {"Location": "/moved/api/2.0/mlflow/experiments/search"})

    def loop(h: Handler) -> None:
        send(h, 302, b"", {"Location": h.path})

    with HostileServer(
        {"/api/2.0/mlflow/experiments/search": moved, "runs/search": loop}
    ) as server:
        message = _error(server.url)
    paths = [path.split("?")[0] for _, path, _ in server.seen]
    assert paths[:2] == [
        "/api/2.0/mlflow/experiments/search",
        "/moved/api/2.0/mlflow/experiments/search",
    ]
    assert message == f"MLflow server at {server.url} redirected more than 5 times: stopped"


def test_a_servers_text_reaches_the_terminal_escaped() -> None:
    retitle = "\x1b]0;owned\x07 broke\x1b[2J"

    def fail(h: Handler) -> None:
        send(h, 500, {"message": retitle}, {"X": "y"})

    with HostileServer(_probe_then(fail)) as server:
        result = cli_runner().invoke(
            main, ["generate-scalability-report", "--tracking-uri", server.url, "--no-plots"]
        )
    assert result.exit_code == 1
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr
    assert "\\x1b]0;owned\\x07 broke\\x1b[2J" in result.stderr
    assert result.stderr.count("\n") == 1


# ------------------------------------------------------------------ credentials


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
    yield


def test_a_token_goes_to_its_server_only_and_never_into_the_environment(
    clean_env: None,
) -> None:
    """A failed load with a token, then a load of another server: the token stays with the
    first; the process environment is the same before, between and after."""
    import itwin_report as ir

    before = dict(os.environ)
    fail = _probe_then(lambda h: send(h, 500, {"message": "broken"}))
    with HostileServer(fail) as first, HostileServer({}) as second:
        with pytest.raises(StoreError):
            ir.load(f"{first.url}/?token={SECRET}")
        assert dict(os.environ) == before
        assert ir.load(second.url, "exp").runs.empty  # an experiment without runs
        assert dict(os.environ) == before
    assert first.seen and all(
        headers.get("Authorization") == f"Bearer {SECRET}" and f"token={SECRET}" in path
        for _, path, headers in first.seen
    )
    assert second.seen
    for _, path, headers in second.seen:
        assert "Authorization" not in headers and SECRET not in path
        assert SECRET not in json.dumps(headers)


def test_the_users_own_settings_are_read_and_left_alone(
    clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "7")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "users-own")
    before = dict(os.environ)
    with HostileServer({"runs/search": _runs([])}) as server:
        assert load_experiment(server.url, "exp", show_progress=False).runs.empty
    assert dict(os.environ) == before
    assert {h.get("Authorization") for _, _, h in server.seen} == {"Bearer users-own"}


def test_a_deadline_timer_never_outlives_the_read(clean_env: None) -> None:
    def timers() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if isinstance(t, threading.Timer)]

    with HostileServer(_probe_then(lambda h: send(h, 500, {}))) as server:
        _error(server.url)
        _error(server.url + "/?token=x")
    deadline = time.monotonic() + 10  # a cancelled timer's thread ends at once
    while timers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert timers() == []
