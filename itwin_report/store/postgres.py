"""The columnar PostgreSQL read: metric points through the ADBC PostgreSQL driver.

The SQL reader's generic path reads points with ``pandas.read_sql``: one Python object per
value, about 790 MiB per million points. With the ``postgres`` extra installed, the ADBC
PostgreSQL driver (libpq and PostgreSQL's binary ``COPY`` into Arrow, in C) reads them instead,
one key at a time and batch by batch into :class:`~itwin_report.store.points.PointParts`, on a
read-only session of its own. The rows are those of the generic path: the experiment's points
of the wanted keys, typed as PostgreSQL stores them (steps and timestamps stay exact 64-bit
integers). When the driver is not installed, cannot connect, or refuses a query, the generic
path reads the store as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from itwin_report.store.columnar import Refused, read_batches
from itwin_report.store.points import PointParts

READ_ONLY = "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"


def libpq_uri(uri: str) -> str | None:
    """``uri`` as libpq reads it (no SQLAlchemy ``+driver``), None when not PostgreSQL."""
    scheme, sep, rest = uri.partition("://")
    base = scheme.split("+", 1)[0].lower()
    if not sep or base not in ("postgresql", "postgres"):
        return None
    return f"postgresql://{rest}"


def text_literal(text: str) -> str:
    """``text`` as a PostgreSQL escape-string literal (``E'...'``): the same text whatever the
    server's ``standard_conforming_strings``."""
    if "\0" in text:
        raise ValueError("PostgreSQL text holds no NUL character")
    return "E'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def read_points(
    uri: str, experiment_id: Any, parts: PointParts, has_is_nan: bool, connection: Any = None
) -> bool:
    """The experiment's points of ``parts.keys`` into ``parts``; False when the driver is
    missing, off, cannot connect, or refuses (``parts`` is then incomplete: start again).
    ``connection``: the reader's own read-only ADBC connection, used instead of a new one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    nan = "CASE WHEN m.is_nan THEN 1 ELSE 0 END" if has_is_nan else "0"
    ids = pa.array(list(parts.run_ids), type=pa.string())
    try:
        experiment = int(experiment_id)
    except (TypeError, ValueError):
        return False
    sql = (
        f"SELECT m.run_uuid, m.value, m.step, m.timestamp, {nan} FROM metrics m "
        f"JOIN runs r ON r.run_uuid = m.run_uuid WHERE r.experiment_id = {experiment} "
        "AND m.key = {key}"
    )

    def consume(key: int, batch: Any) -> None:
        run, value, step, stamp, is_nan = (batch.column(i) for i in range(5))
        if not (pa.types.is_string(run.type) or pa.types.is_large_string(run.type)):
            raise Refused("a run id that is not text")
        if not pa.types.is_floating(value.type):
            raise Refused("a value that is not a float")
        for column in (step, stamp, is_nan):
            if not pa.types.is_integer(column.type) or column.null_count:
                raise Refused("a step or timestamp that is not an integer")
        if value.null_count:
            raise Refused("a NULL value")
        codes = pc.fill_null(pc.index_in(run, value_set=ids), -1).to_numpy(zero_copy_only=False)
        values = value.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        values = np.where(is_nan.to_numpy() != 0, np.nan, values)
        # copies: a view would keep the driver's whole batch (run ids and all) alive
        steps = np.array(step.to_numpy(), dtype=np.int64)
        stamps = np.array(stamp.to_numpy(), dtype=np.int64)
        parts.add(codes, key, values, steps, stamps, np.zeros(len(codes), dtype=bool))

    # literals, not parameters: the driver streams a query without parameters through
    # ``COPY ... TO STDOUT`` batch by batch, while one with parameters is read whole into
    # libpq's memory first (a 2 M-point key: 600 MiB against 155 MiB, and no overlap of the
    # server's work with the batches' conversion here)
    queries: Sequence[tuple[Any, str, Sequence[Any]]] = [
        (i, sql.format(key=text_literal(k)), []) for i, k in enumerate(parts.keys)
    ]
    setup: list[tuple[str, Sequence[Any]]] = [] if connection is not None else [(READ_ONLY, ())]
    return read_batches(uri, setup, queries, consume, database="postgresql", connection=connection)
