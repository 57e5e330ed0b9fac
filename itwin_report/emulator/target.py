"""Where ``emulate`` may write: the checks made before anything is touched.

Light module (standard library only) except :func:`check_schema`, which asks the installed
MLflow for its newest schema revision.
"""

from __future__ import annotations

import socket
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

from itwin_report.store.uri import HTTP, SQL, store_kind
from itwin_report.util.errors import StoreError
from itwin_report.util.files import SQLITE_MAGIC
from itwin_report.util.masking import mask_uri

MLFLOW_TABLES = ("alembic_version", "experiments", "runs", "metrics", "params", "tags")
CONNECT_TIMEOUT_S = 10.0
SQL_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}


def sqlite_state(path: Path) -> str | None:
    """None for an absent or empty file (a new store), else the file's schema revision.

    StoreError for a file that is not an SQLite database or holds no MLflow tables.
    """
    if not path.exists():
        return None
    if not path.is_file():
        raise StoreError(f"{path} is not a file; emulate writes an SQLite store there")
    if path.stat().st_size == 0:
        return None
    with path.open("rb") as handle:
        if handle.read(16) != SQLITE_MAGIC:
            raise StoreError(f"{path} is not an SQLite database; emulate leaves it unchanged")
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
            missing = [t for t in MLFLOW_TABLES if t not in tables]
            if missing:
                raise StoreError(
                    f"{path} is not an MLflow store (no {', '.join(missing)} table); "
                    "emulate leaves it unchanged"
                )
            row = db.execute("SELECT version_num FROM alembic_version").fetchone()
        finally:
            db.close()
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read {path}: {exc}") from None
    return str(row[0]) if row else ""


def check_schema(path: Path, revision: str | None, migrate: bool) -> bool:
    """Refuse a store of another MLflow schema unless ``migrate``; True when it needs upgrading."""
    if revision is None:
        return False
    from itwin_report.emulator.mlflow_writer import mlflow_schema_head

    head = mlflow_schema_head()
    if revision == head:
        _require_metric_columns(path)
        return False
    if migrate and revision:
        return True
    raise StoreError(
        f"{path} has MLflow schema {revision or 'unknown'}, this MLflow writes {head}; "
        "emulate does not change another version's store (pass --migrate to upgrade it in place)"
    )


def _require_metric_columns(path: Path) -> None:
    """Refuse a store whose metrics table lacks a column its schema revision promises."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        columns = {row[1] for row in db.execute("PRAGMA table_info(metrics)")}
    finally:
        db.close()
    if "is_nan" not in columns:
        raise StoreError(
            f"{path} has no metrics.is_nan column although its schema revision says it should; "
            "emulate leaves it unchanged"
        )


def check_file_store(path: Path) -> None:
    """Refuse a file, or a non-empty folder that holds no MLflow experiment."""
    if path.exists() and not path.is_dir():
        raise StoreError(f"{path} is a file, not an MLflow file store")
    if not path.is_dir() or not any(path.iterdir()):
        return
    if (path / ".trash").exists() or any((c / "meta.yaml").is_file() for c in path.iterdir()):
        return
    raise StoreError(f"{path} is a non-empty folder that is not an MLflow file store")


def _tcp_probe(uri: str, host: str | None, port: int) -> None:
    if not host:
        return
    try:
        with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
            return
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if isinstance(exc, TimeoutError | socket.timeout):
            reason = f"no answer within {CONNECT_TIMEOUT_S:g} s"
        raise StoreError(f"cannot reach {mask_uri(uri)}: {reason}") from None


def check_reachable(uri: str) -> None:
    """A server or database that refuses or does not answer fails here, within seconds."""
    kind = store_kind(uri)
    if kind not in (HTTP, SQL):
        return
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:
        raise StoreError(f"malformed tracking URI {mask_uri(uri)}") from None
    if kind == HTTP:
        default = 443 if parts.scheme == "https" else 80
    else:
        default = SQL_PORTS.get(parts.scheme.split("+", 1)[0], 5432)
    _tcp_probe(uri, parts.hostname, port or default)
    if kind == SQL:
        # MLflow retries a refused login for minutes, one warning per try: log in once first
        from itwin_report.store.sql_open import check_login

        check_login(uri)
