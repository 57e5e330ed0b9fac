"""Open a SQL store read-only and check that it is an MLflow database this reader can read.

Nothing is ever written, migrated or created. SQLite files are opened read-only (``mode=ro``,
or ``immutable=1`` where even a read-only connection would leave ``-wal``/``-shm`` files or
cannot create them); other databases go through sqlalchemy in a read-only transaction. A
database of an older schema is read as it is when only optional columns are missing, and
refused (naming its schema revision) otherwise.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.request import pathname2url

import pandas as pd

from itwin_report.store.postgres import libpq_uri
from itwin_report.store.sql_reader import Query, SqlReader, first_line
from itwin_report.store.uri import SQLITE, mask_uri, require_sqlite_file, store_kind
from itwin_report.util.errors import StoreError

NEEDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "experiments": ("experiment_id", "name", "lifecycle_stage"),
    "runs": ("run_uuid", "name", "status", "lifecycle_stage", "artifact_uri", "experiment_id"),
    "tags": ("key", "value", "run_uuid"),
    "params": ("key", "value", "run_uuid"),
    "metrics": ("key", "value", "timestamp", "step", "run_uuid"),
}
OPTIONAL_COLUMNS: dict[str, tuple[str, ...]] = {"metrics": ("is_nan",)}
CONNECT_TIMEOUT_S = 10
POSTGRES_EXTRA = "pip install 'itwin-report[postgres]'"


def _sqlite_query(conn: sqlite3.Connection, where: str) -> Query:
    def query(sql: str, params: dict[str, Any]) -> pd.DataFrame:
        try:
            return pd.read_sql(sql, conn, params=params)
        except (sqlite3.Error, pd.errors.DatabaseError) as exc:
            raise StoreError(f"cannot read {where}: {first_line(exc)}") from None

    return query


def _writable(path: Path) -> bool:
    """False on read-only media, or where no one may write (permission bits)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return os.access(path, os.W_OK) and bool(mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _is_wal(path: Path) -> bool:
    """True when the database header says WAL journal mode (file format bytes 18 and 19 = 2)."""
    try:
        with path.open("rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[18] == 2 and header[19] == 2


HOT_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")  # a rollback journal still to be played back
WAL_HEADER_BYTES = 32  # a -wal file no longer than its header holds no page


def _hot_journal(path: Path) -> Path | None:
    """The ``-journal`` file beside ``path`` when it holds a transaction left unfinished."""
    journal = Path(f"{path}-journal")
    try:
        with journal.open("rb") as handle:
            head = handle.read(len(HOT_JOURNAL_MAGIC))
    except OSError:
        return None
    return journal if head == HOT_JOURNAL_MAGIC else None


def _journal_error(path: Path, journal: Path) -> StoreError:
    return StoreError(
        f"{path} has an unfinished transaction in {journal.name} (a writer was killed while "
        "writing); it must be rolled back before it can be read: open the store once with "
        f"write access, e.g. sqlite3 {path} 'PRAGMA integrity_check', then run the report again"
    )


def _wal_pages(path: Path) -> bool:
    """Whether the ``-wal`` file beside ``path`` may hold pages not yet in the database."""
    try:
        return Path(f"{path}-wal").stat().st_size > WAL_HEADER_BYTES
    except OSError:
        return False


def sqlite_open_mode(path: Path) -> str:
    """``ro``, ``ro-shm`` or ``immutable``: how to open ``path`` leaving no file beside it.

    A WAL database needs a ``-shm`` file even to be read; unless ``-wal`` and ``-shm`` are
    both there already (then reading through them gives the latest data) it is read as
    immutable, which is exact when no ``-wal`` file holds uncheckpointed pages. A database in a
    directory that cannot be written is read as immutable too, unless its ``-wal`` holds pages
    and a ``-shm`` is there to read them through: ``ro-shm`` reads both without writing to
    the ``-shm`` (SQLite's ``readonly_shm``).
    """
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    both = wal.exists() and shm.exists()
    if not _writable(path.parent):
        return "ro-shm" if _is_wal(path) and both and _wal_pages(path) else "immutable"
    if _is_wal(path) and not both:
        return "immutable"
    return "ro"


def _connect(path: Path, mode: str) -> tuple[sqlite3.Connection, str]:
    """A checked connection and its URI filename; sqlite3.Error when it cannot be read."""
    option = {"immutable": "immutable=1", "ro-shm": "mode=ro&readonly_shm=1"}.get(mode, "mode=ro")
    url = f"file:{pathname2url(str(path.resolve()))}?{option}"
    conn = sqlite3.connect(url, uri=True, check_same_thread=False)
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.Error:
        conn.close()
        raise
    return conn, url


def _open_sqlite(uri: str) -> SqlReader:
    path = require_sqlite_file(uri)
    mode = sqlite_open_mode(path)
    journal = _hot_journal(path)
    if journal is not None and mode == "immutable":
        raise _journal_error(path, journal)  # read as it is, it would be half written
    warnings = []
    try:
        try:
            conn, url = _connect(path, mode)
        except sqlite3.Error:
            if mode != "ro-shm":
                raise
            mode = "immutable"  # a -shm SQLite cannot read: without the -wal, with a warning
            conn, url = _connect(path, mode)
    except sqlite3.Error as exc:
        journal = _hot_journal(path)
        if journal is not None:
            raise _journal_error(path, journal) from None
        raise StoreError(f"cannot open {path} as a database: {exc}") from exc
    if mode == "immutable" and _wal_pages(path):
        warnings.append(
            f"{path}-wal may hold changes that are not in {path.name} yet; reading them needs "
            "a -shm file beside it, which this report never creates: the report may miss the "
            f"latest runs and points; open the store once with write access (e.g. sqlite3 "
            f"{path} 'PRAGMA wal_checkpoint') to move them into the database"
        )
    reader = SqlReader(_sqlite_query(conn, mask_uri(uri)), uri, sqlite=conn, sqlite_url=url)
    reader.warnings.extend(warnings)
    return reader


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def engine_url(uri: str, installed: Callable[[str], bool] = _installed) -> str:
    """``uri`` with the PostgreSQL driver that is ``installed`` (psycopg 3, else psycopg2).

    ``postgresql://`` names no driver; an explicit ``postgresql+driver://`` is kept. Without any
    driver, a StoreError says how to install one.
    """
    scheme, sep, rest = uri.partition("://")
    if scheme.lower() not in ("postgresql", "postgres"):
        return uri
    for module, dialect in (("psycopg", "postgresql+psycopg"), ("psycopg2", "postgresql+psycopg2")):
        if installed(module):
            return f"{dialect}{sep}{rest}"
    raise StoreError(f"reading PostgreSQL needs a database driver: {POSTGRES_EXTRA}")


def _driver_error(exc: BaseException) -> str:
    """The first line of a database error, from the driver's own exception when wrapped."""
    return first_line(getattr(exc, "orig", None) or exc)


def _connect_sql(uri: str) -> tuple[Any, Any, bool]:
    """(engine, connection, is PostgreSQL) for a SQL URI; StoreError when it cannot connect.

    PostgreSQL and MySQL are given a connect timeout of :data:`CONNECT_TIMEOUT_S`.
    """
    import sqlalchemy

    where = mask_uri(uri)
    url = engine_url(uri)
    postgres = url.lower().startswith("postgresql")
    timeout = postgres or url.lower().startswith("mysql")
    connect_args = {"connect_timeout": CONNECT_TIMEOUT_S} if timeout else {}
    try:
        engine = sqlalchemy.create_engine(url, connect_args=connect_args)
        conn = engine.connect()
    except ImportError as exc:
        hint = POSTGRES_EXTRA if postgres else f"pip install {exc.name or 'the driver'}"
        raise StoreError(f"the database driver for {where} is not installed: {hint}") from None
    except Exception as exc:  # sqlalchemy's and the driver's errors alike
        raise StoreError(f"cannot connect to {where}: {_driver_error(exc)}") from None
    return engine, conn, postgres


def check_login(uri: str) -> None:
    """Log in to a SQL database once and leave: a wrong password or a missing database fails
    here within seconds, with the driver's one-line reason (StoreError)."""
    engine, conn, _ = _connect_sql(uri)
    conn.close()
    engine.dispose()


def _open_sqlalchemy(uri: str) -> SqlReader:
    import sqlalchemy

    where = mask_uri(uri)
    engine, conn, postgres = _connect_sql(uri)
    if postgres:
        conn.execute(sqlalchemy.text("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"))

    def query(sql: str, params: dict[str, Any]) -> pd.DataFrame:
        try:
            return pd.read_sql(sqlalchemy.text(sql), conn, params=params)
        except Exception as exc:  # sqlalchemy's and the driver's errors alike
            with contextlib.suppress(Exception):  # the connection may be gone: say why below
                conn.rollback()  # a failed statement aborts the transaction in PostgreSQL
            raise StoreError(f"cannot read {where}: {_driver_error(exc)}") from None

    def close() -> None:
        conn.close()
        engine.dispose()

    postgres_uri = libpq_uri(uri) if postgres else None
    return SqlReader(query, uri, close=close, postgres_uri=postgres_uri)


PLACEHOLDER = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def _positional(sql: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """``:name`` placeholders as PostgreSQL's ``$1, $2, ...`` and their values in that order
    (a name used twice binds once); numpy numbers become Python's."""
    order: dict[str, int] = {}

    def number(found: re.Match[str]) -> str:
        return f"${order.setdefault(found.group(1), len(order) + 1)}"

    text = PLACEHOLDER.sub(number, sql)
    values = [params[name] for name in order]
    return text, [v.item() if hasattr(v, "item") else v for v in values]


def _connect_timeout(libpq: str) -> str:
    """``libpq`` with libpq's ``connect_timeout`` unless it names one."""
    if "connect_timeout=" in libpq:
        return libpq
    return f"{libpq}{'&' if '?' in libpq else '?'}connect_timeout={CONNECT_TIMEOUT_S}"


def _open_postgres_adbc(uri: str) -> SqlReader | None:
    """A reader of PostgreSQL on one read-only ADBC connection: runs, params, tags and points
    come back as Arrow columns, and neither SQLAlchemy nor a DB-API driver is imported. None
    when the ADBC driver is not installed or the columnar read is switched off (then
    SQLAlchemy reads it)."""
    from itwin_report.store.columnar import enabled

    libpq = libpq_uri(uri)
    if libpq is None or not enabled():
        return None
    try:
        from adbc_driver_postgresql import dbapi
    except ImportError:
        return None
    where = mask_uri(uri)
    try:
        conn = dbapi.connect(_connect_timeout(libpq))
    except Exception as exc:  # the driver's own errors, one line
        raise StoreError(f"cannot connect to {where}: {first_line(exc)}") from None
    try:
        with conn.cursor() as cursor:
            cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        conn.commit()
    except Exception as exc:
        with contextlib.suppress(Exception):
            conn.close()
        raise StoreError(f"cannot read {where}: {first_line(exc)}") from None

    def query(sql: str, params: dict[str, Any]) -> pd.DataFrame:
        text, values = _positional(sql, params)
        try:
            with conn.cursor() as cursor:
                cursor.execute(text, values or None)
                return cursor.fetch_arrow_table().to_pandas()
        except Exception as exc:
            with contextlib.suppress(Exception):  # a failed statement aborts the transaction
                conn.rollback()
            raise StoreError(f"cannot read {where}: {first_line(exc)}") from None

    def close() -> None:
        with contextlib.suppress(Exception):
            conn.rollback()
        with contextlib.suppress(Exception):
            conn.close()

    return SqlReader(query, uri, close=close, postgres_uri=libpq, postgres_connection=conn)


def _version(query: Query) -> str | None:
    """The alembic revision of the database, None when it has no ``alembic_version`` table."""
    try:
        frame = query("SELECT version_num FROM alembic_version", {})
    except Exception:
        return None
    return str(frame["version_num"].iloc[0]) if len(frame) else "unknown"


def _check_schema(reader: SqlReader, uri: str) -> None:
    """Raise StoreError unless this is an MLflow database whose needed columns all exist."""
    query = reader._query
    version = _version(query)
    where = mask_uri(uri)
    if version is None:
        raise StoreError(f"{where} is not an MLflow tracking database (no alembic_version table)")
    missing_tables, missing_columns = [], []
    for table in dict.fromkeys([*NEEDED_COLUMNS, *OPTIONAL_COLUMNS]):
        try:  # one query per table: its columns come back with the empty result
            held = {str(c).lower() for c in query(f"SELECT * FROM {table} WHERE 1 = 0", {})}
        except Exception:
            missing_tables.append(table)
            continue
        wanted = (*NEEDED_COLUMNS.get(table, ()), *OPTIONAL_COLUMNS.get(table, ()))
        missing_columns += [f"{table}.{c}" for c in dict.fromkeys(wanted) if c not in held]
    if missing_tables:
        raise StoreError(
            f"{where} is not an MLflow tracking database (no table "
            f"{', '.join(dict.fromkeys(missing_tables))}; alembic revision {version})"
        )
    optional = {f"{t}.{c}" for t, cs in OPTIONAL_COLUMNS.items() for c in cs}
    reader.has_is_nan = "metrics.is_nan" not in missing_columns
    needed = [c for c in missing_columns if c not in optional]
    if needed:
        raise StoreError(
            f"{where} is an MLflow database of a schema this tool cannot read (alembic revision "
            f"{version}, no column {', '.join(needed)}); it was left as it is: read it through "
            "`mlflow server --backend-store-uri <this URI>` run with the MLflow version that wrote "
            "it, and pass that server's http:// address as --tracking-uri"
        )


def open_sql_reader(uri: str) -> SqlReader:
    """A read-only reader for a sqlite or other SQL store; StoreError when it cannot be read."""
    if store_kind(uri) == SQLITE:
        reader = _open_sqlite(uri)
    else:
        reader = _open_postgres_adbc(uri) or _open_sqlalchemy(uri)
    try:
        _check_schema(reader, uri)
    except BaseException:
        reader.close()
        raise
    return reader
