"""Benchmark stores, written in bulk: one SQL transaction into a store MLflow migrated itself.

Every store is cached under ``bench/out/`` and rebuilt only when missing.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"
T0 = 1_767_600_000_000  # 2026-01-05, ms
STRATEGIES = ("deepspeed", "horovod", "torch-ddp")
# tables an MLflow run's rows live in (all hold a run_uuid column)
RUN_TABLES = ("runs", "tags", "params", "metrics", "latest_metrics")


def uri_of(path: Path) -> str:
    return f"sqlite:///{path}"


def empty_store(path: Path) -> int:
    """Create ``path`` as an empty MLflow store (MLflow migrates it) with experiment "bench"."""
    from mlflow.tracking import MlflowClient

    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    return int(MlflowClient(uri_of(path)).create_experiment("bench"))


def _insert(db: sqlite3.Connection, table: str, columns: str, rows: Any) -> None:
    marks = ", ".join("?" * len(columns.split(",")))
    db.executemany(f"INSERT INTO {table} ({columns}) VALUES ({marks})", rows)


def write_layout(path: Path, jobs: int, ranks: int, samples: int, epochs: int) -> None:
    """itwinai's layout: a top-level run per job, a worker run per rank with GPU samples.

    Rank 0 logs ``epoch_time_s``; every rank logs ``gpu_power_W`` and
    ``gpu_utilization_percent`` ``samples`` times (jobs * ranks * samples * 2 points).
    """
    start = time.perf_counter()
    exp = empty_store(path)
    db = sqlite3.connect(path)
    db.execute("PRAGMA synchronous=OFF")
    artifacts = path.with_suffix("")  # no artifacts are written: no profiles, no performance

    def run_rows() -> Iterator[tuple[Any, ...]]:
        for job in range(jobs):
            t = T0 + job * 3_600_000
            end = t + samples * 1000
            top = f"{job:08x}{0:024x}"
            yield (top, f"{STRATEGIES[job % 3]}-{ranks}", t, end, f"{artifacts}/{top}")
            for rank in range(ranks):
                name = "worker_0 (main)" if rank == 0 else f"worker_{rank}"
                run = f"{job:08x}{rank + 1:024x}"
                yield (run, name, t, end, f"{artifacts}/{run}")

    common = "'LOCAL', '', '', 'bench', 'FINISHED', '', 'active'"
    with db:
        db.executemany(
            "INSERT INTO runs (run_uuid, name, start_time, end_time, source_type, source_name,"
            " entry_point_name, user_id, status, source_version, lifecycle_stage, experiment_id,"
            f" artifact_uri) VALUES (?, ?, ?, ?, {common}, {exp}, ?)",
            run_rows(),
        )
        db.execute(
            "INSERT INTO tags (key, value, run_uuid) SELECT 'mlflow.runName', name, run_uuid"
            " FROM runs"
        )
        db.execute(
            "INSERT INTO tags (key, value, run_uuid) SELECT 'mlflow.parentRunId',"
            " substr(run_uuid, 1, 8) || printf('%024x', 0), run_uuid FROM runs"
            " WHERE substr(run_uuid, 9) != printf('%024x', 0)"
        )
        params = (
            (key, value, f"{job:08x}{rank + 1:024x}")
            for job in range(jobs)
            for rank in range(ranks)
            for key, value in (
                ("strategy", STRATEGIES[job % 3]),
                ("global_rank", str(rank)),
                ("global_world_size", str(ranks)),
                ("probing_interval", "1"),
            )
        )
        _insert(db, "params", "key, value, run_uuid", params)

        def points() -> Iterator[tuple[Any, ...]]:
            for job in range(jobs):
                t = T0 + job * 3_600_000
                for rank in range(ranks):
                    run = f"{job:08x}{rank + 1:024x}"
                    for s in range(samples):
                        util = 60.0 + (rank * 7 + s * 13 + job) % 40
                        yield ("gpu_utilization_percent", util, t + s * 1000, run, s, 0)
                        yield ("gpu_power_W", 90.0 + 3.0 * util, t + s * 1000, run, s, 0)
                    if rank == 0:
                        for e in range(epochs):
                            value = 20.0 + (e * 3 + job) % 5
                            yield ("epoch_time_s", value, t + e * 20_000, run, e, 0)

        _insert(db, "metrics", "key, value, timestamp, run_uuid, step, is_nan", points())
        db.execute(  # SQLite takes the bare columns from the row holding max(step)
            "INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid)"
            " SELECT key, value, timestamp, max(step), is_nan, run_uuid FROM metrics"
            " GROUP BY run_uuid, key"
        )
    db.close()
    print(f"built {path.name}: {time.perf_counter() - start:.0f} s", file=sys.stderr)


def clone_runs(path: Path, copies: int) -> None:
    """Repeat every run of ``path`` ``copies - 1`` more times (new ids, same rows) in one
    transaction; parents stay parents of their own copies, artifacts are shared."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA synchronous=OFF")
    new_id = "substr({0}, 1, 28) || printf('%04x', k.n)"
    with db:
        db.execute("CREATE TEMP TABLE k (n INTEGER)")
        db.executemany("INSERT INTO k VALUES (?)", [(n,) for n in range(1, copies)])
        columns = {t: [r[1] for r in db.execute(f"PRAGMA table_info({t})")] for t in RUN_TABLES}
        for table in RUN_TABLES:
            cols = columns[table]
            picked = [new_id.format("t.run_uuid") if c == "run_uuid" else f"t.{c}" for c in cols]
            if table == "tags":
                value = (
                    f"CASE WHEN t.key = 'mlflow.parentRunId' THEN {new_id.format('t.value')}"
                    " ELSE t.value END"
                )
                picked = [value if c == "value" else p for c, p in zip(cols, picked, strict=True)]
            db.execute(
                f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(picked)}"
                f" FROM {table} t, k"
            )
    db.close()


def copy_rows_in_one_transaction(source: Path, target: Path) -> tuple[float, int]:
    """Write every run row of ``source`` into the fresh store ``target`` in one transaction.

    Returns (seconds spent reading the rows out and writing them, number of rows): the floor
    of any writer that must put those rows in a SQLite store.
    """
    exp = empty_store(target)
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    db = sqlite3.connect(target)
    start = time.perf_counter()
    count = 0
    with db:
        for table in RUN_TABLES:
            cols = [r[1] for r in src.execute(f"PRAGMA table_info({table})")]
            rows = src.execute(f"SELECT {', '.join(cols)} FROM {table}").fetchall()
            if table == "runs":
                at = cols.index("experiment_id")
                rows = [(*r[:at], exp, *r[at + 1 :]) for r in rows]
            marks = ", ".join("?" * len(cols))
            db.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({marks})", rows)
            count += len(rows)
    elapsed = time.perf_counter() - start
    db.close()
    src.close()
    return elapsed, count
