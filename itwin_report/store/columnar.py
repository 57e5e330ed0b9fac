"""Columnar reads of a SQLite store with the ADBC driver (a default dependency).

Python's sqlite3 hands back one Python object per value: for the millions of metric points of a
large experiment that, not SQLite, is most of the loading time. The ADBC SQLite driver fills
Arrow arrays in C instead. The same read-only URI and the same SQL are used, so the rows are the
same; when the driver is not installed, or cannot read a result (it refuses a column whose
type changes from row to row), the read is left to sqlite3. Setting ``ITWIN_REPORT_COLUMNAR=0``
turns the driver off.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

ENV = "ITWIN_REPORT_COLUMNAR"
OFF = {"0", "false", "no", "off"}
CANCEL_WAIT_S = 2.0  # how long an interrupted query may take to stop before the report exits


def enabled() -> bool:
    """Whether the columnar reader may be used (it still needs the driver installed)."""
    return os.environ.get(ENV, "1").strip().lower() not in OFF


def fetch_numeric(
    url: str,
    setup: Sequence[tuple[str, Sequence[Sequence[Any]]]],
    sql: str,
    params: Sequence[Any],
) -> np.ndarray | None:
    """All rows of a numeric query as one float64 array (NULL -> NaN), or None.

    A result with a column that is not numbers (the driver turns a column that starts with
    mixed types into text) is None too.

    ``url`` is a SQLite URI filename (``file:...?mode=ro``); ``setup`` holds statements run
    first on the same connection, each with its parameter rows (a TEMP table to join on).
    None means "read it with sqlite3": no driver, switched off, or the driver refused the
    query. Ctrl-C (or SIGTERM) is never such a refusal: the query runs in a thread of its own,
    so that the driver never takes over SIGINT, and the signal's exception reaches the caller
    after the query is cancelled.
    """
    if not enabled():
        return None
    try:
        import adbc_driver_sqlite.dbapi as adbc
        import pyarrow  # noqa: F401
    except ImportError:
        return None
    handles: dict[str, Any] = {}
    outcome: dict[str, Any] = {}

    def work() -> None:
        outcome["table"] = _read(adbc, url, setup, sql, params, handles)

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
    table: np.ndarray | None = outcome.get("table")
    return table


def _read(
    adbc: Any,
    url: str,
    setup: Sequence[tuple[str, Sequence[Sequence[Any]]]],
    sql: str,
    params: Sequence[Any],
    handles: dict[str, Any],
) -> np.ndarray | None:
    """The query's rows as a float64 array, None when the driver refuses it (in a thread)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        conn = adbc.connect(url)
    except Exception:
        return None
    handles["conn"] = conn
    cursor = None
    try:
        cursor = conn.cursor()
        for statement, rows in setup:
            if rows:
                cursor.executemany(statement, [list(r) for r in rows])
            else:
                cursor.execute(statement)
        cursor.execute(sql, list(params))
        table = cursor.fetch_arrow_table()
    except Exception:  # any refusal of the driver: sqlite3 reads the same rows
        return None
    finally:
        _close(cursor)
        _close(conn)
    kinds = (pa.types.is_integer, pa.types.is_floating, pa.types.is_null)
    if not all(any(kind(t) for kind in kinds) for t in table.schema.types):
        return None  # text, say: sqlite3 reads it, with its own checks
    if not table.num_rows:
        return np.empty((0, table.num_columns))
    # unchecked, as sqlite3's rows become floats: an integer beyond 2**53 is rounded (the
    # loader leaves such steps and timestamps out with a warning) instead of refused
    columns = [
        pc.cast(table.column(i), pa.float64(), safe=False).to_numpy()
        for i in range(table.num_columns)
    ]
    return np.column_stack(columns)


def _close(handle: Any) -> None:
    """Close a cursor or connection; a driver that complains on closing changes nothing."""
    if handle is None:
        return
    with contextlib.suppress(Exception):
        handle.close()
