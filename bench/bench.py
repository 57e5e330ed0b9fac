"""Speed benchmarks: every ratio of the project's speed goals, measured side by side in one run.

1. itwinai layout, 384 worker runs (emulated), tables + plots: the report vs itwinai 0.4.2's own
   ``generate-scalability-report`` (when ``ITWINAI_PYTHON`` names a Python that has itwinai).
2. 10,000 worker runs, 4 M points, no plots: the report's CPU time and peak memory vs the floor,
   one ``pd.read_sql`` per table; with the columnar reader (the default install) and with its
   sqlite3 fall-back (what the default install read before).
3. The emulator's layout (Rate metrics, profiles and performance.json on every worker), about
   9,200 workers: the report's CPU time vs the same floor plus reading the artifacts.
4. Default ``emulate`` (360 worker runs) vs writing the same rows in one SQL transaction.
5. The test suite, as ``make test`` runs it (``BENCH_SKIP_TESTS=1`` leaves it out).

Each command runs as a fresh process; CPU time and peak memory are its own (``wait4``). Each
side of a ratio is the best of ``BENCH_REPEATS`` (3) runs: on a shared machine noise only adds.
Stores are built once under ``bench/out/``; results are printed and written to
``bench/out/results.json``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stores import OUT, clone_runs, copy_rows_in_one_transaction, uri_of, write_layout

BIN = Path(sys.executable).parent
REPORT = [str(BIN / "itwin-report"), "generate-scalability-report", "-e"]
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))  # every side of a ratio, the same count
COLUMNAR = "ITWIN_REPORT_COLUMNAR"  # "0": the report reads SQLite through sqlite3 only
PLOT_HELPER = "ITWIN_REPORT_PLOT_HELPER"  # "0": every figure drawn in the main process

FLOOR_SCRIPT = r"""
import csv, json, sqlite3, sys, pandas as pd
from pathlib import Path
from urllib.parse import urlparse
con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
exp = pd.read_sql("SELECT experiment_id FROM experiments WHERE name = ?", con, params=[sys.argv[2]])
eid = int(exp.experiment_id.iloc[0])
runs = pd.read_sql("SELECT run_uuid, name, status, artifact_uri, start_time FROM runs "
                   "WHERE experiment_id = ? AND lifecycle_stage = 'active'", con, params=[eid])
sub = "SELECT run_uuid FROM runs WHERE experiment_id = ?"
q = "SELECT key, value, run_uuid FROM {} WHERE run_uuid IN ({})"
tags = pd.read_sql(q.format("tags", sub), con, params=[eid])
params = pd.read_sql(q.format("params", sub), con, params=[eid])
metrics = pd.read_sql(f"SELECT run_uuid, key, step, value, timestamp FROM metrics "
                      f"WHERE run_uuid IN ({sub})", con, params=[eid])
rows, perf = [], []
if sys.argv[3] == "artifacts":
    for uri in runs.artifact_uri:
        root = Path(urlparse(uri).path)
        path = root / "torch_profiling_averages" / "torch_profiling_averages.csv"
        if path.exists():
            with open(path, newline="") as f:
                rows.extend(csv.reader(f))
        path = root / "performance" / "performance.json"
        if path.exists():
            perf.append(json.loads(path.read_text()))
print(len(runs), len(metrics), len(rows), len(perf))
"""


@dataclass
class Measure:
    wall_s: float
    cpu_s: float
    peak_mib: float


def measure(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[Measure, str]:
    """Run ``cmd`` as a fresh process: its wall time, CPU time, peak RSS and stdout."""
    start = time.perf_counter()
    environ = {**os.environ, **(env or {})}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=environ
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-3000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return Measure(wall, cpu, usage.ru_maxrss / 1024), out


def best_of(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> Measure:
    """The least wall time, CPU time and peak memory of :data:`REPEATS` runs of ``cmd``.

    On a shared machine the noise only ever adds time, so the least is the best estimate.
    """
    runs = [measure(cmd, cwd, env)[0] for _ in range(REPEATS)]
    return Measure(
        min(m.wall_s for m in runs), min(m.cpu_s for m in runs), min(m.peak_mib for m in runs)
    )


def floor(db: Path, experiment: str, artifacts: bool) -> Measure:
    mode = "artifacts" if artifacts else "tables"
    return best_of([sys.executable, "-c", FLOOR_SCRIPT, str(db), experiment, mode])


def emulate(db: Path, experiment: str, *options: str) -> Measure:
    db.parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(BIN / "itwin-report"), "emulate", "--tracking-uri", uri_of(db)]
    cmd += ["--experiment-name", experiment, *options]
    return measure(cmd, cwd=db.parent)[0]


def gib(m: Measure) -> str:
    return f"{m.peak_mib / 1024:5.2f}"


def line(label: str, value: str) -> None:
    print(f"  {label:<46} {value}")


def bench_itwinai_layout(results: dict[str, object]) -> None:
    db = OUT / "itwinai384" / "mlflow.db"
    if not db.exists():  # 3 strategies x (4 + 8 + 16 + 36) workers x 2 repeats = 384
        emulate(db, "bench", "--workers", "4,8,16,36", "--epochs", "5")
    plots = OUT / "itwinai384" / "plots"
    shutil.rmtree(plots, ignore_errors=True)
    cmd = [*REPORT, "bench", "--tracking-uri", uri_of(db), "-q", "--plot-dir", str(plots)]
    ours = best_of(cmd)
    alone = best_of(cmd, env={PLOT_HELPER: "0"})
    print("1. itwinai layout, 384 worker runs, tables + plots")
    line("itwin-report", f"{ours.wall_s:6.2f} s wall, {ours.cpu_s:6.2f} s CPU")
    line("itwin-report, figures drawn in one process", f"{alone.wall_s:6.2f} s wall")
    theirs = None
    itwinai = os.environ.get("ITWINAI_PYTHON", "")
    if itwinai and Path(itwinai).is_file():
        cmd = [itwinai, "-c", "from itwinai.cli import app; app()", "generate-scalability-report"]
        cmd += ["--tracking-uri", uri_of(db), "--experiment-name", "bench"]
        cmd += ["--plot-dir", str(OUT / "itwinai384" / "itwinai-plots")]
        theirs = best_of(cmd, cwd=db.parent)
        line(
            "itwinai 0.4.2 generate-scalability-report",
            f"{theirs.wall_s:6.2f} s wall, {theirs.cpu_s:6.2f} s CPU",
        )
        ratio = theirs.wall_s / ours.wall_s
        line("ratio itwinai / itwin-report, wall (goal >= 20)", f"{ratio:6.1f}x")
        line("ratio itwinai / itwin-report, CPU", f"{theirs.cpu_s / ours.cpu_s:6.1f}x")
    else:
        line("itwinai 0.4.2", "not measured: set ITWINAI_PYTHON (make bench builds one)")
    results["itwinai_layout_384"] = {
        "ours": asdict(ours),
        "one_process": asdict(alone),
        "itwinai": theirs and asdict(theirs),
    }


def report_vs_floor(db: Path, title: str, artifacts: bool) -> dict[str, Measure]:
    """The report without plots, with the columnar reader and without, and the floor."""
    cmd = [*REPORT, "bench", "--tracking-uri", uri_of(db), "-q", "--no-plots"]
    got = {
        "ours": best_of(cmd),
        "plain": best_of(cmd, env={COLUMNAR: "0"}),
        "floor": floor(db, "bench", artifacts=artifacts),
    }
    ours, plain, base = got["ours"], got["plain"], got["floor"]
    print(title)
    line("itwin-report", f"{ours.cpu_s:6.2f} s CPU, {gib(ours)} GiB peak")
    line("itwin-report, sqlite3 fall-back", f"{plain.cpu_s:6.2f} s CPU, {gib(plain)} GiB peak")
    what = "read_sql per table + artifacts" if artifacts else "one pd.read_sql per table"
    line(f"floor: {what}", f"{base.cpu_s:6.2f} s CPU, {gib(base)} GiB peak")
    line("ratio CPU, sqlite3 fall-back / floor", f"{plain.cpu_s / base.cpu_s:6.2f}")
    return got


def bench_10k(results: dict[str, object]) -> None:
    db = OUT / "runs10k.db"
    if not db.exists():  # 500 jobs x 20 ranks x 200 samples x 2 keys = 4,000,000 points
        write_layout(db, jobs=500, ranks=20, samples=200, epochs=10)
    got = report_vs_floor(db, "2. 10,000 worker runs, 4 M points, no plots", artifacts=False)
    ours, base = got["ours"], got["floor"]
    line("ratio CPU report / floor (goal <= 1.0)", f"{ours.cpu_s / base.cpu_s:6.2f}")
    line("ratio memory report / floor (goal <= 1.2 GiB)", f"{ours.peak_mib / base.peak_mib:6.2f}")
    results["runs_10k"] = {name: asdict(m) for name, m in got.items()}


def bench_emulator_layout(results: dict[str, object]) -> None:
    source = OUT / "itwinai384" / "mlflow.db"
    db = OUT / "emulator9k" / "mlflow.db"
    if not db.exists():  # 384 emulated workers (and their 48 jobs) x 24 = 9,216 workers
        db.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, db)
        clone_runs(db, 24)
    title = "3. emulator layout (Rate, profiles, performance.json on every worker), 9,216 workers"
    got = report_vs_floor(db, title, artifacts=True)
    line("ratio CPU report / floor (goal <= 1.5)", f"{got['ours'].cpu_s / got['floor'].cpu_s:6.2f}")
    results["emulator_layout_9216"] = {name: asdict(m) for name, m in got.items()}


def bench_emulate(results: dict[str, object]) -> None:
    folder = OUT / "emulate"
    db = folder / "mlflow.db"
    runs = []
    for _ in range(REPEATS):  # a new store each time
        shutil.rmtree(folder, ignore_errors=True)
        runs.append(emulate(db, "bench"))
    ours = min(runs, key=lambda m: m.wall_s)
    one, rows = copy_rows_in_one_transaction(db, folder / "floor.db")
    print(f"4. default emulate (360 worker runs), {rows:,} rows")
    line("itwin-report emulate (store creation included)", f"{ours.wall_s:6.2f} s wall")
    line("the same rows in one transaction", f"{one:6.2f} s")
    line("ratio emulate / one transaction (goal <= 5 s)", f"{ours.wall_s / one:6.1f}x")
    results["emulate_default"] = {"ours": asdict(ours), "one_transaction_s": one, "rows": rows}


def bench_test_suite(results: dict[str, object]) -> None:
    """The suite as ``make test`` runs it (the venv is already installed)."""
    root = Path(__file__).resolve().parents[1]
    suite, _ = measure([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=root)
    print("5. the test suite (make test without the install)")
    line("pytest -q (goal <= 120 s)", f"{suite.wall_s:6.1f} s wall, {suite.cpu_s:6.1f} s CPU")
    results["test_suite"] = asdict(suite)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict[str, object] = {}
    parts = [bench_itwinai_layout, bench_10k, bench_emulator_layout, bench_emulate]
    if os.environ.get("BENCH_SKIP_TESTS") != "1":
        parts.append(bench_test_suite)
    for part in parts:
        part(results)
    (OUT / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
