"""Builders of small hand-made RunData for the report tests (plus checks of the builders)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import pandas as pd

from itwin_report.data.rundata import RunData

NAN = math.nan


def run(
    run_id: str,
    job_id: str,
    strategy: str,
    workers: int,
    rank: int = 0,
    probing_interval: float = 1.0,
    samples_per_epoch: float = NAN,
) -> dict:
    """One worker run row."""
    return {
        "run_id": run_id,
        "job_id": job_id,
        "run_name": f"{strategy}-{workers}",
        "strategy": strategy,
        "workers": workers,
        "rank": rank,
        "probing_interval": probing_interval,
        "samples_per_epoch": samples_per_epoch,
        "status": "FINISHED",
    }


def metric(
    run_id: str,
    key: str,
    values: Sequence[float],
    steps: Sequence[int] | None = None,
    t0_ms: int = 0,
    dt_ms: int = 1000,
) -> list[dict]:
    """Points of one metric; steps 0.. and timestamps t0, t0+dt, ... unless given."""
    steps = list(range(len(values))) if steps is None else list(steps)
    return [
        {"run_id": run_id, "key": key, "step": s, "value": float(v), "timestamp": t0_ms + i * dt_ms}
        for i, (s, v) in enumerate(zip(steps, values, strict=True))
    ]


def profile(run_id: str, rows: Iterable[tuple[str, float]]) -> list[dict]:
    """Profiler rows (name, self_cuda_time_total us) of one worker run."""
    return [{"run_id": run_id, "name": n, "self_cuda_time_total": float(t)} for n, t in rows]


def perf(
    run_id: str,
    total_samples: float,
    total_time: float,
    est: float = NAN,
    flag: bool = False,
    records: int = 1,
) -> dict:
    """One performance.json row."""
    return {
        "run_id": run_id,
        "total_samples": total_samples,
        "total_time": total_time,
        "samples_per_sec": total_samples / total_time if total_time else 0.0,
        "compile_time": 1.0,
        "programming_time": 2.0,
        "est_samples_per_sec": est,
        "suspected_input_bottleneck": flag,
        "records": records,
    }


def make_data(
    runs: Iterable[dict],
    metrics: Iterable[dict] = (),
    profiles: Iterable[dict] = (),
    performance: Iterable[dict] = (),
    warnings: Iterable[str] = (),
) -> RunData:
    """A validated RunData from row dicts (empty frames where no rows are given)."""
    frames = {}
    for name, rows in (
        ("runs", runs),
        ("metrics", metrics),
        ("profiles", profiles),
        (
            "performance",
            performance,
        ),
    ):
        rows = list(rows)
        if rows:
            frames[name] = pd.DataFrame(rows)
    return RunData(
        experiment="exp", tracking_uri="sqlite:///x.db", warnings=list(warnings), **frames
    )


def test_make_data_builds_typed_frames() -> None:
    data = make_data([run("r1", "j1", "ddp", 4)], metric("r1", "epoch_time_s", [3, 2]))
    assert data.runs["workers"].dtype == "int64"
    assert list(data.metrics["step"]) == [0, 1]
    assert list(data.metrics["timestamp"]) == [0, 1000]
    assert data.profiles.empty and data.performance.empty


def smoothed(local: list[float], a: float = 0.4) -> list[float]:
    """Rate as a trainer logs it: r the first time, then (1 - a) * r + a * Rate_prev."""
    out = [float(local[0])]
    for r in local[1:]:
        out.append((1 - a) * r + a * out[-1])
    return out
