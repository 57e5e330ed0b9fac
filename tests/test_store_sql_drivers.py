"""SQL URIs other than sqlite: the PostgreSQL driver choice and the errors without a driver."""

from __future__ import annotations

import importlib.util
import socket
from pathlib import Path
from typing import Any

import pytest

from itwin_report.store import load_experiment
from itwin_report.store.sql_open import POSTGRES_EXTRA, engine_url
from itwin_report.util.errors import StoreError

URI = "postgresql://alice:pw-secret@db.example.org:5432/mlflow"


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        ({"psycopg", "psycopg2"}, "postgresql+psycopg://"),
        ({"psycopg"}, "postgresql+psycopg://"),
        ({"psycopg2"}, "postgresql+psycopg2://"),
    ],
)
def test_postgres_driver_choice(present: set[str], expected: str) -> None:
    url = engine_url(URI, installed=present.__contains__)
    assert url == expected + URI.split("://", 1)[1]


def test_explicit_driver_and_other_databases_are_kept() -> None:
    nothing = set[str]().__contains__
    assert engine_url("postgresql+psycopg2://h/db", nothing) == "postgresql+psycopg2://h/db"
    assert engine_url("mysql+pymysql://h/db", nothing) == "mysql+pymysql://h/db"


def test_no_driver_is_one_line_naming_the_extra() -> None:
    with pytest.raises(StoreError) as err:
        engine_url(URI, installed=set[str]().__contains__)
    assert str(err.value) == (
        "reading PostgreSQL needs a database driver: pip install 'itwin-report[postgres]'"
    )


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_postgres_uri_end_to_end_fails_in_one_masked_line() -> None:
    """With this environment's drivers: the extra is named, or the refused port is reported."""
    port = _closed_port()
    uri = f"postgresql://alice:pw-secret@127.0.0.1:{port}/mlflow"
    with pytest.raises(StoreError) as err:
        load_experiment(uri, None, show_progress=False)
    message = str(err.value)
    assert "\n" not in message and "pw-secret" not in message
    if any(importlib.util.find_spec(m) for m in ("psycopg", "psycopg2")):
        assert message.startswith(f"cannot connect to postgresql://alice:***@127.0.0.1:{port}/")
    else:
        assert message.endswith(POSTGRES_EXTRA)


@pytest.mark.parametrize(
    ("uri", "module"),
    [
        ("mysql+nosuchdriver://u:pw-secret@h/db", None),
        ("mysql+pymysql://u:pw-secret@h/db", "pymysql"),
    ],
)
def test_missing_driver_module(uri: str, module: str | None) -> None:
    with pytest.raises(StoreError) as err:
        load_experiment(uri, None, show_progress=False)
    message = str(err.value)
    assert "\n" not in message and "pw-secret" not in message
    masked = uri.replace("pw-secret", "***")
    if module is not None and importlib.util.find_spec(module) is None:
        assert message == (
            f"the database driver for {masked} is not installed: pip install {module}"
        )
    else:  # an unknown dialect, or a driver that is there and finds no host "h"
        assert message.startswith(f"cannot connect to {masked}: ")


@pytest.fixture(scope="module")
def password_database(postgres: Any) -> str:
    """A database of a role that must log in with its password ('right-pw'); its URI
    (socket folder in the query) with the password left out."""
    import psycopg

    admin = postgres("passworded")
    with psycopg.connect(admin, autocommit=True) as conn:
        hba = Path(str(conn.execute("SHOW hba_file").fetchone()[0]))  # type: ignore[index]
        conn.execute("CREATE ROLE alice LOGIN PASSWORD 'right-pw'")
        conn.execute('ALTER DATABASE "passworded" OWNER TO alice')
        hba.write_text("local all alice scram-sha-256\n" + hba.read_text())
        conn.execute("SELECT pg_reload_conf()")
    return admin.replace("postgresql://postgres:@", "postgresql://alice:{password}@", 1)


@pytest.mark.postgres
def test_emulate_into_postgres_with_a_wrong_password_fails_at_once(
    password_database: str, tmp_path: Path
) -> None:
    """One line, not MLflow's minutes of retries and warnings (its seconds: bench)."""
    import os
    import subprocess
    import sys

    uri = password_database.format(password="Wrong-pw-4242")
    cmd = [sys.executable, "-m", "itwin_report", "emulate", "--tracking-uri", uri,
           "--workers", "2", "--repeats", "1"]  # fmt: skip
    done = subprocess.run(
        cmd, capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"}
    )
    assert done.returncode == 1 and done.stdout == ""
    masked = uri.replace("Wrong-pw-4242", "***")
    assert done.stderr.startswith(f"Error: cannot connect to {masked}: connection failed: ")
    assert done.stderr.endswith('password authentication failed for user "alice"\n')
    assert done.stderr.count("\n") == 1 and "Wrong-pw-4242" not in done.stderr
    # the right password goes through the same check and writes the runs
    right = password_database.format(password="right-pw")
    done = subprocess.run([*cmd[:5], right, *cmd[6:]], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
