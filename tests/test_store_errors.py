"""Tracking URIs, credential masking, and the errors a user meets with missing stores."""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path

import pytest

from itwin_report.store import DEFAULT_TRACKING_URI, load_experiment, mask_uri, resolve_tracking_uri
from itwin_report.store.api_reader import ApiReader
from itwin_report.store.sql_open import open_sql_reader
from itwin_report.store.uri import FILE, HTTP, OTHER, SQL, SQLITE, sqlite_path, store_kind
from itwin_report.util.errors import StoreError


@pytest.mark.parametrize(
    ("uri", "masked"),
    [
        (
            "https://alice:s3cret@mlflow.example.org/path",
            "https://alice:***@mlflow.example.org/path",
        ),
        ("postgresql://bob:pw@db:5432/mlflow", "postgresql://bob:***@db:5432/mlflow"),
        ("mysql+pymysql://u:p%40ss@h/m", "mysql+pymysql://u:***@h/m"),
        ("https://token@host", "https://***@host"),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
        ("sqlite:///mllogs/mlflow.db", "sqlite:///mllogs/mlflow.db"),
        ("mllogs/mlflow", "mllogs/mlflow"),
        # the URI keeps its shape: only the secrets change
        ("sqlite:////abs/x.db?password=pw-1&mode=ro", "sqlite:////abs/x.db?password=***&mode=ro"),
        ("sqlite:///rel.db?token=t0k3n", "sqlite:///rel.db?token=***"),
        ("http://h:5000/?token=t0k3n", "http://h:5000/?token=***"),
        ("https://u:p@h/a?b=1&api_key=k#frag", "https://u:***@h/a?b=1&api_key=***#frag"),
        (
            "postgresql://u:pw@/db?host=/run/pg&sslpassword=x",
            "postgresql://u:***@/db?host=/run/pg&sslpassword=***",
        ),
    ],
)
def test_mask_uri(uri: str, masked: str) -> None:
    assert mask_uri(uri) == masked


def test_resolve_tracking_uri(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_tracking_uri(None) == DEFAULT_TRACKING_URI == "sqlite:///mllogs/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://env:5000")
    assert resolve_tracking_uri(None) == "http://env:5000"
    assert resolve_tracking_uri("sqlite:///x.db") == "sqlite:///x.db"


def test_store_kinds_and_paths() -> None:
    assert store_kind("sqlite:///a.db") == SQLITE
    assert store_kind("postgresql+psycopg2://h/db") == SQL
    assert store_kind("https://h") == HTTP
    assert store_kind("mllogs/mlflow") == FILE == store_kind("file:///tmp/mlruns")
    assert store_kind("databricks") == OTHER == store_kind("databricks://profile")
    assert sqlite_path("sqlite:///rel/x.db") == Path("rel/x.db")
    assert sqlite_path("sqlite:////abs/x.db") == Path("/abs/x.db")


def test_missing_sqlite_is_an_error_and_not_created(tmp_path: Path) -> None:
    db = tmp_path / "none.db"
    with pytest.raises(StoreError, match=r"^no MLflow database at .*none\.db"):
        load_experiment(f"sqlite:///{db}", None, show_progress=False)
    assert not db.exists()


def test_default_store_hints_at_itwinai_file_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mllogs" / "mlflow").mkdir(parents=True)
    with pytest.raises(StoreError) as err:
        load_experiment(DEFAULT_TRACKING_URI, None, show_progress=False)
    assert str(err.value) == (
        "no MLflow database at mllogs/mlflow.db (tracking URI sqlite:///mllogs/mlflow.db); "
        "mllogs/mlflow looks like itwinai's MLflow file store: use --tracking-uri mllogs/mlflow"
    )
    assert sorted(p.name for p in (tmp_path / "mllogs").iterdir()) == ["mlflow"]


def test_missing_file_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no MLflow file store at"):
        load_experiment(str(tmp_path / "mlruns"), None, show_progress=False)
    assert not (tmp_path / "mlruns").exists()


def test_not_an_mlflow_database(tmp_path: Path) -> None:
    db = tmp_path / "other.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError, match="is not an MLflow tracking database"):
        load_experiment(f"sqlite:///{db}", None, show_progress=False)
    text = tmp_path / "text.db"
    text.write_text("hello, not sqlite at all " * 100)
    with pytest.raises(StoreError):
        load_experiment(f"sqlite:///{text}", None, show_progress=False)


def test_unreadable_schema_is_refused_unchanged(tmp_path: Path) -> None:
    db = tmp_path / "odd.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num TEXT)")
        conn.execute("INSERT INTO alembic_version VALUES ('abc123')")
        conn.execute("CREATE TABLE experiments (experiment_id, name, lifecycle_stage)")
        conn.execute("CREATE TABLE runs (run_uuid, name, status, lifecycle_stage)")  # lacks 2
        for table in ("tags", "params"):
            conn.execute(f"CREATE TABLE {table} (key, value, run_uuid)")
        conn.execute("CREATE TABLE metrics (key, value, timestamp, step, run_uuid)")
    conn.close()
    before = db.read_bytes()
    with pytest.raises(StoreError) as err:
        open_sql_reader(f"sqlite:///{db}")
    assert "alembic revision abc123, no column runs.artifact_uri, runs.experiment_id" in str(
        err.value
    )
    assert "mlflow server --backend-store-uri" in str(err.value)
    assert db.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["odd.db"]


def test_unreachable_server_fails_fast() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed when the block ends: nobody listens there
    with pytest.raises(StoreError) as err:  # its seconds: bench/bench_limits.py
        ApiReader(f"http://user:pw@127.0.0.1:{port}")
    assert str(err.value).startswith(
        f"cannot reach MLflow server at http://user:***@127.0.0.1:{port}: "
    )
    assert "Connection refused" in str(err.value) and "pw" not in str(err.value)


def test_a_web_page_for_an_answer_is_one_readable_line(tmp_path: Path) -> None:
    """A web server that is not MLflow answers 404 with an HTML page: status and reason only."""
    import functools
    import http.server
    import threading

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}/mlflow?token=t0k3n-4242"
    try:
        with pytest.raises(StoreError) as err:
            ApiReader(uri)
    finally:
        server.shutdown()
        server.server_close()
    address = uri.split("?")[0]  # the token travels apart from the address and is never shown
    assert "t0k3n" not in str(err.value)
    assert str(err.value) == (
        f"MLflow server at {address} answered HTTP 404 (File not found): no MLflow REST API at "
        "this address (check --tracking-uri)"
    )


@pytest.mark.parametrize(
    ("body", "content_type", "detail"),
    [
        (
            '{"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "No run"}',
            "application/json",
            "HTTP 404 (Not Found): No run; no MLflow REST API at this address "
            "(check --tracking-uri)",
        ),
        (
            "<html><head><title>Bad &amp; gone</title></head><body><h1>x</h1></body></html>",
            "text/html",
            "HTTP 502 (Bad Gateway): Bad & gone",
        ),
        ("<!doctype html><p>no title</p>", "", "HTTP 502 (Bad Gateway)"),
        ("plain words\nsecond line", "text/plain", "HTTP 502 (Bad Gateway): plain words"),
    ],
)
def test_http_error_details(body: str, content_type: str, detail: str) -> None:
    from itwin_report.store.api_reader import http_detail

    status, reason = (404, "Not Found") if "error_code" in body else (502, "Bad Gateway")
    assert http_detail(status, reason, content_type, body) == detail
