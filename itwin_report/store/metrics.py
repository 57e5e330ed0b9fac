"""The loader's tidy step for metric points: the report's keys kept, sorted.

Points out of range and repeated (run, key, step) points are dropped where the loaded data is
validated (:mod:`itwin_report.data.validate`), in that order, so that an invalid repetition never
hides a valid point.

MLflow's own GPU system metrics (``system/[<node id>/]gpu_<i>_<measure>``) keep their keys:
the GPU table reads them per GPU (:mod:`itwin_report.report.system_gpus`); other system
metrics are left out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from itwin_report.data.frames import categorical, isin, rows_where
from itwin_report.data.rundata import METRIC_COLUMNS, conform, is_report_key
from itwin_report.store.points import in_order


def _report_points(metrics: pd.DataFrame, extra: Sequence[str] = ()) -> pd.DataFrame:
    """The points of the keys the report reads and of the ``extra`` keys asked for (the frame
    itself when they all are)."""
    keys = categorical(metrics["key"]).categories
    wanted = [k for k in keys if is_report_key(str(k)) or str(k) in extra]
    return rows_where(metrics, isin(metrics["key"], wanted))


def tidy_metrics(
    metrics: pd.DataFrame, extra: Sequence[str] = ()
) -> tuple[pd.DataFrame, list[str]]:
    """(metrics in the schema's columns, sorted by run, key, step, timestamp, value; warnings).

    Keys the report does not read are left out, unless ``extra`` names them (a validation
    metric for time to target). ``run_id`` and ``key`` stay categoricals
    (the readers hand them over as such), and order works on their codes, never on the
    strings; a frame that is in order already (as the SQL reader hands it over) is checked in
    one pass, not sorted. Repeated (run, key, step) points are all kept: validation drops the
    invalid ones first, then keeps the latest of each.
    """
    main = _report_points(metrics, extra)
    run = categorical(main["run_id"])  # sorted categories: the codes' order is the values'
    key = categorical(main["key"])
    value = main["value"].to_numpy(dtype="float64")
    stamp = main["timestamp"].to_numpy(dtype="int64")
    step = main["step"].to_numpy(dtype="int64")
    del main
    columns = [run.codes, key.codes, step, stamp, value]
    if not in_order(columns):
        order = np.lexsort(columns[::-1])
        columns = [c[order] for c in columns]
        del order
    run_codes, key_codes, step, stamp, value = columns
    tidy = pd.DataFrame(
        {
            "run_id": pd.Categorical.from_codes(run_codes, dtype=run.dtype),
            "key": pd.Categorical.from_codes(key_codes, dtype=key.dtype),
            "step": step,
            "value": value,
            "timestamp": stamp,
        },
        copy=False,
    )
    return conform(tidy, METRIC_COLUMNS, "metrics"), []
