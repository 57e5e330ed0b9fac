"""Columnar reads of a SQLite store with the ADBC driver (a default dependency).

Python's sqlite3 hands back one Python object per value: for the millions of metric points of a
large experiment that, not SQLite, is most of the loading time. The ADBC SQLite driver fills
Arrow arrays in C instead, handed over batch by batch so that memory holds one batch of them.
The same read-only URI is used, so the rows are the same; when the driver is not installed, or
cannot read a result (it refuses a column whose type changes from row to row), the read is
left to sqlite3. Setting ``ITWIN_REPORT_COLUMNAR=0`` turns the driver off (and the columnar
PostgreSQL read, :mod:`~itwin_report.store.postgres`).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

ENV = "ITWIN_REPORT_COLUMNAR"
OFF = {"0", "false", "no", "off"}
BATCH_ROWS = (
    65_536  # rows per batch handed over: fewer calls than the driver's 1,024, little memory
)
# the ADBC driver of each database and its options for a query
DRIVERS: dict[str, tuple[str, dict[str, str]]] = {
    "sqlite": ("adbc_driver_sqlite.dbapi", {"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)}),
    # batches of about 4 MB, as SQLite's (the driver's default, 16 MB, held 13 MB more at the peak
    # of a 4 M-point read)
    "postgresql": (
        "adbc_driver_postgresql.dbapi",
        {"adbc.postgresql.batch_size_hint_bytes": str(4 << 20)},
    ),
}
CANCEL_WAIT_S = 2.0  # how long an interrupted query may take to stop before the report exits


def enabled() -> bool:
    """Whether the columnar reader may be used (it still needs the driver installed)."""
    return os.environ.get(ENV, "1").strip().lower() not in OFF


class Refused(Exception):
    """Raised by a batch consumer for data the columnar path does not read (sqlite3 reads it)."""


Consume = Callable[[Any, Any], None]  # (the query's tag, a pyarrow RecordBatch)


def read_batches(
    url: str,
    setup: Sequence[tuple[str, Sequence[Sequence[Any]]]],
    queries: Sequence[tuple[Any, str, Sequence[Any]]],
    consume: Consume,
    database: str = "sqlite",
    connection: Any = None,
) -> bool:
    """Run ``queries`` (``(tag, sql, params)``) and hand every batch of rows to ``consume``.

    ``connection``: an open connection of the driver to use (left open) instead of one of its
    own.

    ``url`` is a SQLite URI filename (``file:...?mode=ro``), or a libpq URI for ``database``
    ``"postgresql"``; ``setup`` holds statements run first on the same connection, each with
    its parameter rows (a TEMP table to join on). Batches are handed over as they are read, so
    memory holds one batch of the driver's, never the whole result.

    False means "read it with sqlite3": no driver, switched off, the driver refused a query
    (it refuses a column whose type changes from row to row), or ``consume`` raised
    :class:`Refused`; ``consume`` may have seen part of the rows by then. Ctrl-C (or SIGTERM)
    is never such a refusal: the queries run in a thread of their own, so that the driver
    never takes over SIGINT, and the signal's exception reaches the caller after the query is
    cancelled. Any other exception of ``consume`` reaches the caller as it is.
    """
    if not enabled():
        return False
    module, options = DRIVERS[database]
    try:
        import pyarrow  # noqa: F401

        adbc = importlib.import_module(module)
    except ImportError:
        return False
    handles: dict[str, Any] = {}
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["read"] = _read(
                adbc, url, setup, queries, consume, options, handles, connection
            )
        except BaseException as exc:  # the consumer's own error, raised again below
            outcome["error"] = exc

    thread = threading.Thread(target=work, name="itwin-report-columnar", daemon=True)
    thread.start()
    try:
        thread.join()
    except BaseException:  # KeyboardInterrupt or SIGTERM's Interrupted: stop the query
        conn = handles.get("conn")
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.adbc_cancel()
        thread.join(CANCEL_WAIT_S)
        raise
    if "error" in outcome:
        raise outcome["error"]
    return bool(outcome.get("read"))


def _read(
    adbc: Any,
    url: str,
    setup: Sequence[tuple[str, Sequence[Sequence[Any]]]],
    queries: Sequence[tuple[Any, str, Sequence[Any]]],
    consume: Consume,
    options: dict[str, str],
    handles: dict[str, Any],
    connection: Any = None,
) -> bool:
    """Every batch of every query to ``consume``; False when the driver refuses (in a thread)."""
    try:
        conn = connection if connection is not None else adbc.connect(url)
    except Exception:
        return False
    handles["conn"] = conn
    cursor = None
    try:
        try:
            cursor = conn.cursor()
            for statement, rows in setup:
                if rows:
                    cursor.executemany(statement, [list(r) for r in rows])
                else:
                    cursor.execute(statement)
        except Exception:
            return False
        for tag, sql, params in queries:
            try:
                if options:
                    cursor.adbc_statement.set_options(**options)
                cursor.execute(sql, list(params) if params else None)
                reader = cursor.fetch_record_batch()
            except Exception:  # any refusal of the driver: sqlite3 reads the same rows
                return False
            while True:
                try:
                    batch = reader.read_next_batch()
                except StopIteration:
                    break
                except Exception:  # a type change after the first rows, say
                    return False
                try:
                    consume(tag, batch)
                except Refused:
                    return False
        return True
    finally:
        _close(cursor)
        if connection is None:
            _close(conn)


def numeric_columns(batch: Any, columns: Sequence[int] | range) -> np.ndarray:
    """``columns`` of a record batch as one float64 array (NULL -> NaN); Refused for a column
    that is not numbers.

    Unchecked, as sqlite3's rows become floats: an integer beyond 2**53 is rounded (the loader
    leaves such steps and timestamps out with a warning) instead of refused.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    kinds = (pa.types.is_integer, pa.types.is_floating, pa.types.is_null)
    out = np.empty((batch.num_rows, len(columns)))
    for j, i in enumerate(columns):
        column = batch.column(i)
        if not any(kind(column.type) for kind in kinds):
            raise Refused(f"column {i} is {column.type}")
        out[:, j] = pc.cast(column, pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    return out


def integer_column(column: Any) -> tuple[np.ndarray, np.ndarray]:
    """(64-bit integers, which were NULL) of an integer Arrow column, NULL read as 0; Refused
    for a column of any other type (a step stored as a float, say: sqlite3 reads it)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_null(column.type):
        return np.zeros(len(column), dtype=np.int64), np.ones(len(column), dtype=bool)
    if not pa.types.is_integer(column.type):
        raise Refused(f"a column of {column.type}")
    missing = np.zeros(len(column), dtype=bool)
    if column.null_count:
        missing = column.is_null().to_numpy(zero_copy_only=False)
        column = pc.fill_null(column, 0)
    # a copy: a view would keep the driver's whole batch (run ids and all) alive
    return np.array(column.to_numpy(zero_copy_only=False), dtype=np.int64), missing


def _close(handle: Any) -> None:
    """Close a cursor or connection; a driver that complains on closing changes nothing."""
    if handle is None:
        return
    with contextlib.suppress(Exception):
        handle.close()
