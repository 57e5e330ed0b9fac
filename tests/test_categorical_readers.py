"""Every reader gives the metrics frame with ``run_id`` and ``key`` as the same categoricals.

SQLite read column-wise (the ADBC driver), SQLite read by sqlite3 (``ITWIN_REPORT_COLUMNAR=0``)
and the file store: text categories, sorted, each one present, and the same points.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from itwin_report.data.frames import STR
from itwin_report.data.rundata import METRIC_COLUMNS, RunData
from itwin_report.store import load_experiment
from itwin_report.store.columnar import ENV


def _check_schema(metrics: pd.DataFrame) -> None:
    assert list(metrics.columns) == list(METRIC_COLUMNS)
    for name in ("run_id", "key"):
        dtype = metrics[name].dtype
        assert isinstance(dtype, pd.CategoricalDtype), name
        assert not dtype.ordered
        categories = dtype.categories
        assert categories.dtype == STR, name
        assert list(categories) == sorted(categories), name
        present = set(metrics[name].astype(str))
        assert set(categories) == present, f"{name}: categories nobody holds"
        assert metrics[name].cat.codes.min() >= 0
    assert metrics["step"].dtype == "int64"
    assert metrics["value"].dtype == "float64"
    assert metrics["timestamp"].dtype == "int64"


def _points(data: RunData) -> list[tuple[Any, ...]]:
    """Each point with its run's name and rank instead of the run id (ids differ by store)."""
    runs = data.runs.set_index("run_id")
    metrics = data.metrics
    names = runs.loc[metrics["run_id"].astype(str), ["run_name", "rank"]]
    return sorted(
        zip(
            names["run_name"],
            names["rank"],
            metrics["key"].astype(str),
            metrics["step"],
            metrics["value"],
            metrics["timestamp"],
            strict=True,
        )
    )


def test_sqlite_columnar_and_sqlite3_reads_give_equal_frames(
    scaling_sqlite: tuple[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, _ = scaling_sqlite
    monkeypatch.delenv(ENV, raising=False)
    columnar = load_experiment(uri, "scaling", show_progress=False)
    monkeypatch.setenv(ENV, "0")
    plain = load_experiment(uri, "scaling", show_progress=False)
    _check_schema(columnar.metrics)
    _check_schema(plain.metrics)
    assert len(columnar.metrics) > 0
    pd.testing.assert_frame_equal(columnar.metrics, plain.metrics)
    # every worker run logs power; a key no kept point holds is no category (train_loss is no
    # report key and is never read)
    assert set(columnar.metrics["key"].cat.categories) == {
        "epoch_time_s",
        "gpu_power_W",
        "gpu_utilization_percent",
    }


def test_file_store_gives_the_same_dtypes_and_points_as_sqlite(
    scaling_sqlite: tuple[str, dict[str, Any]],
    scaling_file_store: tuple[str, dict[str, Any]],
) -> None:
    from_sqlite = load_experiment(scaling_sqlite[0], "scaling", show_progress=False)
    from_files = load_experiment(scaling_file_store[0], "scaling", show_progress=False)
    _check_schema(from_files.metrics)
    sqlite_dtypes, file_dtypes = from_sqlite.metrics.dtypes, from_files.metrics.dtypes
    assert sqlite_dtypes["key"] == file_dtypes["key"]  # same keys: the same dtype
    for name in ("step", "value", "timestamp"):
        assert sqlite_dtypes[name] == file_dtypes[name]
    assert file_dtypes["run_id"].categories.dtype == sqlite_dtypes["run_id"].categories.dtype
    assert _points(from_files) == _points(from_sqlite)


def test_run_data_round_trips_its_categoricals(
    scaling_sqlite: tuple[str, dict[str, Any]], tmp_path: Any
) -> None:
    data = load_experiment(scaling_sqlite[0], "scaling", show_progress=False)
    back = RunData.load(data.save(tmp_path / "saved"))
    _check_schema(back.metrics)
    pd.testing.assert_frame_equal(back.metrics, data.metrics)


def test_text_columns_handed_to_run_data_become_the_categoricals() -> None:
    metrics = pd.DataFrame(
        {
            "run_id": ["r2", "r1", "r2", "nan"],
            "key": ["k", "k", "j", "k"],
            "step": [0, 0, 1, 2],
            "value": [1.0, 2.0, 3.0, 4.0],
            "timestamp": [0, 0, 0, 0],
        }
    )
    data = RunData("e", "u", metrics=metrics)
    _check_schema(data.metrics)
    assert list(data.metrics["run_id"].cat.categories) == ["nan", "r1", "r2"]
    assert data.metrics["run_id"].astype(str).tolist() == ["r2", "r1", "r2", "nan"]
    # a categorical with unused, unsorted categories is recoded, its values kept
    odd = metrics.assign(
        run_id=pd.Categorical(metrics["run_id"], categories=["r2", "zz", "nan", "r1"]),
        key=pd.Categorical(metrics["key"], categories=["k", "j", "unused"], ordered=True),
    )
    again = RunData("e", "u", metrics=odd)
    _check_schema(again.metrics)
    pd.testing.assert_frame_equal(again.metrics, data.metrics)
