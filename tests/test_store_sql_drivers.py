"""SQL URIs other than sqlite: the PostgreSQL driver choice and the errors without a driver."""

from __future__ import annotations

import importlib.util
import socket

import pytest

from itwin_report.errors import StoreError
from itwin_report.store import load_experiment
from itwin_report.store.sql_reader import POSTGRES_EXTRA, engine_url

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
