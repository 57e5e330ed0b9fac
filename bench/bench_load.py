"""Loading benchmark: the report end to end against the SQL floor and per-run MLflow calls.

Builds (once, cached under bench/out/) an itwinai-layout experiment of JOBS jobs x RANKS worker
runs with GPU samples on every rank and epoch times on rank 0, then measures in one run:

* report: ``itwin-report generate-scalability-report --format json --no-plots -q`` (subprocess)
* floor:  a subprocess that reads the same tables with one SQL query each (sqlite3 + pandas)
          and the same profiler CSVs with the csv module into one frame
* naive:  one ``MlflowClient.get_metric_history`` call per run and metric key (itwinai's way)
* help:   ``itwin-report --help`` wall time (median of 5)

Prints the times and the ratios report/floor (target <= 2) and naive/report.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "out"
DB = OUT / "bench.db"
URI = f"sqlite:///{DB}"
EXPERIMENT = "bench"
JOBS = 50
RANKS = 20  # 50 jobs x 20 ranks = 1,000 worker runs
SAMPLES = 200  # GPU samples per rank and key: 1,000 x 2 x 200 = 400,000 points (+ epoch times)
EPOCHS = 10
STRATEGIES = ("deepspeed", "horovod", "torch-ddp")
T0 = 1_767_600_000_000  # 2026-01-05, ms
BIN = Path(sys.executable).parent

FLOOR_SCRIPT = r"""
import csv, sqlite3, sys, pandas as pd
from pathlib import Path
from urllib.parse import urlparse
con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
exp = pd.read_sql("SELECT experiment_id FROM experiments WHERE name = ?", con, params=[sys.argv[2]])
eid = int(exp.experiment_id.iloc[0])
runs = pd.read_sql("SELECT run_uuid, name, status, artifact_uri FROM runs "
                   "WHERE experiment_id = ? AND lifecycle_stage = 'active'", con, params=[eid])
sub = "SELECT run_uuid FROM runs WHERE experiment_id = ?"
q = "SELECT key, value, run_uuid FROM {} WHERE run_uuid IN ({})"
tags = pd.read_sql(q.format("tags", sub), con, params=[eid])
params = pd.read_sql(q.format("params", sub), con, params=[eid])
metrics = pd.read_sql(f"SELECT run_uuid, key, step, value, timestamp FROM metrics "
                      f"WHERE run_uuid IN ({sub})", con, params=[eid])
rows = []
for uri in runs.artifact_uri:
    path = Path(urlparse(uri).path) / "torch_profiling_averages" / "torch_profiling_averages.csv"
    if path.exists():
        with open(path, newline="") as f:
            rows.extend(csv.reader(f))
csvs = pd.DataFrame(rows)
print(len(runs), len(metrics), len(csvs))
"""


def build_store() -> None:
    """Write the benchmark experiment through MLflow (cached: skipped when it exists)."""
    if DB.exists():
        return
    sys.path.insert(0, str(ROOT.parent))
    from itwin_report.emulator.mlflow_writer import RunWriter
    from itwin_report.emulator.mlflow_writer import artifact_location as default_artifact_location

    OUT.mkdir(parents=True, exist_ok=True)
    writer = RunWriter(URI)
    eid = writer.experiment_id(EXPERIMENT, default_artifact_location(URI, EXPERIMENT))
    start = time.perf_counter()
    for job in range(JOBS):
        strategy = STRATEGIES[job % len(STRATEGIES)]
        t_job = T0 + job * 3_600_000
        parent = writer.create_run(eid, f"{strategy}-{RANKS}", t_job)
        for rank in range(RANKS):
            name = "worker_0 (main)" if rank == 0 else f"worker_{rank}"
            run = writer.create_run(eid, name, t_job, parent)
            points = []
            for s in range(SAMPLES):
                util = 60.0 + (rank * 7 + s * 13 + job) % 40
                points.append(("gpu_utilization_percent", util, t_job + s * 1000, s))
                points.append(("gpu_power_W", 90.0 + 3.0 * util, t_job + s * 1000, s))
            if rank == 0:
                points += [
                    ("epoch_time_s", 20.0 + (e * 3 + job) % 5, t_job + e * 20_000, e)
                    for e in range(EPOCHS)
                ]
            params = {
                "strategy": strategy,
                "global_rank": rank,
                "global_world_size": RANKS,
                "probing_interval": 1,
            }
            writer.log_batch(run, points, params)
            csv = "name,self_cuda_time_total\naten::mm,700\nnccl:all_reduce,250\nProfilerStep*,50\n"
            writer.log_text(run, csv, "torch_profiling_averages/torch_profiling_averages.csv")
            writer.end_run(run, t_job + SAMPLES * 1000)
        writer.end_run(parent, t_job + SAMPLES * 1000)
        print(f"\rbuilding: job {job + 1}/{JOBS}", end="", file=sys.stderr, flush=True)
    print(
        f"\rbuilt {JOBS * RANKS} worker runs in {time.perf_counter() - start:.0f} s",
        file=sys.stderr,
    )


def timed(cmd: list[str]) -> tuple[float, str]:
    """Wall time of a subprocess, and its stdout; fails loudly if it fails."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return elapsed, proc.stdout


def naive_seconds() -> float:
    """itwinai's approach: one search, then one history call per run and metric key."""
    sys.path.insert(0, str(ROOT.parent))
    from itwin_report.store.mlflow_api import client

    mlflow_client = client(URI)
    start = time.perf_counter()
    exp = mlflow_client.get_experiment_by_name(EXPERIMENT)
    runs = mlflow_client.search_runs([exp.experiment_id], max_results=50_000)
    points = 0
    for run in runs:
        for key in ("epoch_time_s", "gpu_power_W", "gpu_utilization_percent"):
            points += len(mlflow_client.get_metric_history(run.info.run_id, key))
    elapsed = time.perf_counter() - start
    print(f"naive read {len(runs)} runs, {points} points", file=sys.stderr)
    return elapsed


def main() -> None:
    build_store()
    report_cmd = [
        str(BIN / "itwin-report"),
        "generate-scalability-report",
        "--tracking-uri",
        URI,
        "-e",
        EXPERIMENT,
        "--format",
        "json",
        "--no-plots",
        "-q",
    ]
    floor_cmd = [sys.executable, "-c", FLOOR_SCRIPT, str(DB), EXPERIMENT]
    timed(floor_cmd)  # warm the page cache for both
    report_s = min(timed(report_cmd)[0] for _ in range(3))
    floor_s = min(timed(floor_cmd)[0] for _ in range(3))
    out = json.loads(timed(report_cmd)[1])
    rows = sum(r["runs"] for r in out["epoch_time"])
    help_s = statistics.median(timed([str(BIN / "itwin-report"), "--help"])[0] for _ in range(5))
    naive_s = naive_seconds() if os.environ.get("BENCH_SKIP_NAIVE") != "1" else float("nan")
    print(
        f"experiment: {JOBS * RANKS} worker runs, {JOBS * RANKS * SAMPLES * 2:,} GPU points "
        f"+ {JOBS * EPOCHS} epoch times; report saw {rows} jobs"
    )
    print(f"report end to end (subprocess, best of 3): {report_s:6.2f} s")
    print(f"floor: one SQL query per table (subprocess): {floor_s:6.2f} s")
    print(f"naive: one MLflow call per run and key:      {naive_s:6.2f} s")
    print(f"ratio report/floor: {report_s / floor_s:.2f}  (target <= 2)")
    print(f"ratio naive/report: {naive_s / report_s:.1f}")
    print(f"itwin-report --help: {help_s * 1000:.0f} ms (median of 5; target < 300 ms)")


if __name__ == "__main__":
    main()
