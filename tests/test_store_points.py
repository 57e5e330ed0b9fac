"""Every way the SQL reader reads points gives the same data, on a store with awkward points.

The store holds NaN (as MLflow writes it: 0 with ``is_nan``), infinities (the largest float),
steps beyond 2**53 and negative ones, repeated steps (a NaN and a number at one timestamp),
steps that go back while time goes on, keys some runs lack and one no run logs, MLflow's GPU
system metrics (and keys only a LIKE pattern matches), and a second experiment. It is written
through SQLAlchemy, so the same rows go into SQLite and into a real PostgreSQL.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from conftest import new_sqlite_store

from itwin_report.store import load_experiment, sql_reader
from itwin_report.store.columnar import ENV
from itwin_report.store.points import PointParts, in_order, stable_order
from itwin_report.store.sql_reader import SqlReader

BIG = 1.7976931348623157e308  # MLflow's infinity
JOBS, RANKS = 60, 4  # 240 worker runs


def _points(rng: random.Random, job: int, rank: int) -> list[tuple[str, float, int, int, int]]:
    """(key, value, timestamp, step, is_nan) of one worker run."""
    t0 = 1_700_000_000_000 + job * 10_000_000
    out: list[tuple[str, float, int, int, int]] = []
    if rank == 0:
        out += [("epoch_time_s", 20.0 + rng.random(), t0 + e * 1000, e, 0) for e in range(5)]
    if job % 5 != 1:  # some jobs log no GPU metrics at all
        for s in range(30):
            out.append(("gpu_power_W", 100.0 + s + rank, t0 + s * 100, s, 0))
            out.append(("gpu_utilization_percent", float(s % 100), t0 + s * 100, s, 0))
    elif rank < 2:  # ... but MLflow's system metrics, for two GPUs
        for s in range(10):
            out.append(("system/gpu_0_power_usage_watts", 150.0 + s, t0 + s, s, 0))
            out.append(("system/gpu_1_utilization_percentage", 40.0 + s, t0 + s, s, 0))
            out.append(("system/gpuX_power_usage_watts", 1.0, t0 + s, s, 0))  # LIKE only
            out.append(("SYSTEM/GPU_0_power_usage_watts", 2.0, t0 + s, s, 0))
            out.append(("system/node 1/gpu_2_memory_usage_megabytes", 9.0, t0 + s, s, 0))
            out.append(("system/gpu_0_power_usage_percentage", 50.0, t0 + s, s, 0))  # not read
    if job % 7 == 0:
        out.append(("gpu_power_W", 0.0, t0 + 50, 3, 1))  # NaN, a repeated step
        out.append(("gpu_power_W", 0.0, t0 + 300, 3, 1))  # NaN at the repeat's timestamp
        out.append(("gpu_power_W", 7.0, t0 + 300, 3, 0))
        out.append(("gpu_utilization_percent", BIG, t0 + 77, 77, 0))
        out.append(("gpu_utilization_percent", -BIG, t0 + 78, 78, 0))
    if job % 11 == 0 and rank == 1:
        out.append(("train_loss_epoch", 0.5, t0 + 1, 2**53 + 1, 0))
        out.append(("train_loss_epoch", 0.4, t0 + 2, 2**60, 0))
        out.append(("train_loss_epoch", 0.3, t0 + 3, -5, 0))
        out.append(("local_samples_per_sec", 900.0, t0 + 9, 1, 0))
        out.append(("local_samples_per_sec", 950.0, t0 + 10, 0, 0))  # step goes back
        out.append(("local_samples_per_sec", 960.0, t0 + 11, -(2**62), 0))
    return out


def write_store(uri: str, client_uri: str | None = None) -> None:
    """The awkward experiment ("points") and a small other one ("other") in the store."""
    import sqlalchemy
    from mlflow.tracking import MlflowClient

    client = MlflowClient(client_uri or uri)
    experiments = {name: int(client.create_experiment(name)) for name in ("points", "other")}
    rng = random.Random(5)
    runs, params, tags, metrics = [], [], [], []
    for name, exp in experiments.items():
        jobs = JOBS if name == "points" else 3
        for job in range(jobs):
            top = f"{exp:04x}{job:08x}{0:020x}"
            runs.append({"id": top, "name": f"torch-ddp-{RANKS}", "exp": exp})
            for rank in range(RANKS):
                run = f"{exp:04x}{job:08x}{rank + 1:020x}"
                runs.append({"id": run, "name": f"worker_{rank}", "exp": exp})
                tags.append({"k": "mlflow.parentRunId", "v": top, "r": run})
                for key, value in (
                    ("strategy", "torch-ddp"),
                    ("global_rank", str(rank)),
                    ("global_world_size", str(RANKS)),
                ):
                    params.append({"k": key, "v": value, "r": run})
                for key, value, ts, step, nan in _points(rng, job, rank):
                    metrics.append({"k": key, "v": value, "t": ts, "r": run, "s": step, "n": nan})
    rng.shuffle(metrics)  # the store's order is no order
    engine = sqlalchemy.create_engine(uri.replace("postgresql://", "postgresql+psycopg://", 1))
    text = sqlalchemy.text
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name,"
                " user_id, status, start_time, end_time, source_version, lifecycle_stage,"
                " artifact_uri, experiment_id) VALUES (:id, :name, 'LOCAL', '', '', 'test',"
                " 'FINISHED', 1, 2, '', 'active', '', :exp)"
            ),
            runs,
        )
        conn.execute(text("INSERT INTO tags (key, value, run_uuid) VALUES (:k, :v, :r)"), tags)
        conn.execute(text("INSERT INTO params (key, value, run_uuid) VALUES (:k, :v, :r)"), params)
        conn.execute(
            text(
                "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan)"
                " VALUES (:k, :v, :t, :r, :s, :n != 0)"
            ),
            metrics,
        )
    engine.dispose()


def _load(uri: str) -> Any:
    return load_experiment(uri, "points", show_progress=False)


def _generic(uri: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The experiment read by the generic SQL path (one ``read_sql`` of the points)."""
    original = SqlReader.metrics

    def generic(self: SqlReader, exp: Any, ids: Any, advance: Any) -> pd.DataFrame:
        conn, self._sqlite = self._sqlite, None
        postgres, self._postgres_uri = self._postgres_uri, None
        try:
            return original(self, exp, ids, advance)
        finally:
            self._sqlite, self._postgres_uri = conn, postgres

    with monkeypatch.context() as m:
        m.setattr(SqlReader, "metrics", generic)
        return _load(uri)


def assert_same(a: Any, b: Any) -> None:
    for name in ("runs", "metrics", "profiles", "performance"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=True)
    assert a.warnings == b.warnings


@pytest.fixture(scope="module")
def awkward_sqlite(tmp_path_factory: pytest.TempPathFactory, sqlite_store_template: Path) -> str:
    uri = new_sqlite_store(sqlite_store_template, tmp_path_factory.mktemp("points") / "m.db")
    write_store(uri)
    return uri


def _check_awkward(data: Any) -> None:
    """What the awkward store must give, whichever path read it."""
    metrics = data.metrics
    assert metrics["run_id"].nunique() > JOBS * RANKS // 2
    assert set(metrics["key"]) == {
        "epoch_time_s",
        "gpu_power_W",
        "gpu_utilization_percent",
        "train_loss_epoch",
        "local_samples_per_sec",
        # MLflow's system metrics the report reads, with or without a node id
        "system/gpu_0_power_usage_watts",
        "system/gpu_1_utilization_percentage",
        "system/node 1/gpu_2_memory_usage_megabytes",
    }
    assert (metrics["step"] == 2**53 + 1).sum() == len(range(0, JOBS, 11))  # kept, exact
    assert not (metrics["step"].abs() > 2**53 + 1).any()  # beyond 2**53: left out
    assert any("2**53" in str(w) for w in data.warnings)
    assert metrics["run_id"].str.startswith("0001").all()  # the other experiment's: none


@pytest.mark.parametrize("share", [10**9, 0], ids=["key-scan", "run-join"])
def test_sqlite_paths_give_the_same_data(
    awkward_sqlite: str, monkeypatch: pytest.MonkeyPatch, share: int
) -> None:
    """ADBC (reading whole keys, or the wanted runs'), sqlite3 and the generic path agree."""
    used: list[bool] = []
    real = sql_reader.read_batches

    def recording(*args: Any, **kwargs: Any) -> bool:
        used.append(real(*args, **kwargs))
        return used[-1]

    monkeypatch.setattr(sql_reader, "read_batches", recording)
    monkeypatch.setattr(sql_reader, "SCAN_SHARE", share)
    monkeypatch.setenv(ENV, "1")
    columnar = _load(awkward_sqlite)
    assert used == [True]
    _check_awkward(columnar)
    monkeypatch.setenv(ENV, "0")
    assert_same(columnar, _load(awkward_sqlite))
    assert_same(columnar, _generic(awkward_sqlite, monkeypatch))


def test_without_the_driver_sqlite3_reads_the_awkward_store(
    awkward_sqlite: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "1")
    columnar = _load(awkward_sqlite)
    monkeypatch.setitem(sys.modules, "adbc_driver_sqlite.dbapi", None)  # import fails
    assert_same(columnar, _load(awkward_sqlite))


@pytest.mark.postgres
def test_postgres_columnar_read_gives_the_generic_paths_data(
    postgres: Any, awkward_sqlite: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ADBC PostgreSQL read, the generic read and SQLite's all give the same data; without
    the driver (or switched off) the generic path reads it."""
    from itwin_report.store import postgres as columnar_postgres

    uri = postgres("points")
    write_store(uri, client_uri=uri.replace("postgresql://", "postgresql+psycopg://", 1))
    used: list[bool] = []
    real = columnar_postgres.read_points

    def recording(*args: Any, **kwargs: Any) -> bool:
        used.append(real(*args, **kwargs))
        return used[-1]

    monkeypatch.setattr(columnar_postgres, "read_points", recording)
    monkeypatch.setenv(ENV, "1")
    columnar = _load(uri)
    assert used == [True]
    _check_awkward(columnar)
    generic = _generic(uri, monkeypatch)
    assert_same(columnar, generic)
    monkeypatch.setenv(ENV, "0")
    assert_same(columnar, _load(uri))
    assert used == [True]  # switched off: not tried
    monkeypatch.setenv(ENV, "1")
    monkeypatch.setitem(sys.modules, "adbc_driver_postgresql.dbapi", None)
    assert_same(columnar, _load(uri))
    assert used == [True, False]
    # the same store in SQLite: the same points (the URI and run ids' prefix aside)
    sqlite = _load(awkward_sqlite)
    pd.testing.assert_frame_equal(columnar.metrics, sqlite.metrics, check_exact=True)


def test_stable_order_is_numpys_stable_argsort() -> None:
    rng = np.random.default_rng(3)
    for top in (5, 70_000, 2**40):
        codes = rng.integers(0, top, 20_000)
        np.testing.assert_array_equal(stable_order(codes), np.argsort(codes, kind="stable"))
    assert len(stable_order(np.empty(0, dtype=np.int64))) == 0


def test_parts_come_out_in_lexsort_order() -> None:
    """Parts in any order, with repeats, NaN and steps that go back, give the rows of a full
    lexsort by run, key, step, timestamp, value (NaN last); unwanted runs are dropped."""
    rng = np.random.default_rng(4)
    runs, keys = [f"r{i:03d}" for i in range(40)], ["a", "b", "c"]
    parts = PointParts(runs, keys)
    rows = []
    for _ in range(30):
        n = int(rng.integers(1, 400))
        run = rng.integers(-1, len(runs), n)
        key = int(rng.integers(0, len(keys)))
        step = rng.integers(-3, 6, n)
        stamp = rng.integers(0, 4, n)
        value = rng.choice([0.5, 1.5, np.nan, -np.inf], n)
        bad = rng.random(n) < 0.1
        parts.add(run, key, value, step, stamp, bad)
        rows += [
            (r, key, s, t, v, b)
            for r, s, t, v, b in zip(run, step, stamp, value, bad, strict=True)
            if r >= 0
        ]
    frame, bad = parts.frame()
    r, k, s, t, v, b = (np.array(c) for c in zip(*rows, strict=True))
    order = np.lexsort((v, t, s, k, r))
    assert len(frame) == len(order)
    np.testing.assert_array_equal(frame["run_id"].cat.codes, r[order])
    np.testing.assert_array_equal(frame["key"].cat.codes, k[order])
    np.testing.assert_array_equal(frame["step"], s[order])
    np.testing.assert_array_equal(frame["timestamp"], t[order])
    np.testing.assert_array_equal(frame["value"], v[order])
    # a flag travels with its row: the flagged rows are the same multiset
    flagged = sorted(zip(r[b], k[b], s[b], t[b], strict=True))
    got = frame[bad]
    columns = (got["run_id"].cat.codes, got["key"].cat.codes, got["step"], got["timestamp"])
    assert sorted(zip(*columns, strict=True)) == flagged
    assert in_order([frame["run_id"].cat.codes.to_numpy(), frame["step"].to_numpy()]) is False
