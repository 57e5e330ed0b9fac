"""The report through ``mlflow server`` against the same store read directly.

SQLite: the 10,000-run store of ``bench.py`` (500 jobs x 20 ranks x 200 samples x 2 GPU keys,
10 epochs on rank 0: 4 M points) and a 2,000-run one of the same layout, each served by
``mlflow server --backend-store-uri sqlite:///...`` with its default workers (4 under uvicorn
in MLflow 3.x) on 127.0.0.1. Each side runs as a fresh process (``bench.measure``); the HTTP
side also reports the server's CPU time (its worker processes, from ``/proc``), per point
served, and the requests its access log shows. The direct side is the best of
``BENCH_REPEATS`` runs; the HTTP side too, unless one run takes minutes (``LONG_S``): then it
runs once and says so.

PostgreSQL (a centre's deployment): the same 10,000-run layout in ``bench.py``'s PostgreSQL
database (started as its ``pg`` part starts it, on ``bench/out/postgres``), served by
``mlflow server --backend-store-uri postgresql+psycopg2://...`` with its default workers, vs
the report reading that database directly (``--tracking-uri postgresql://...``). Beside the
workers' CPU it reports PostgreSQL's own (its postmaster and backends), both per point, and
the SQLite-backed workers' per point (this run's, else the last in ``results_http.json``).
Then one bulk request (100 runs x ``gpu_power_W``, 20,000 points) is taken apart in a plain
process, in microseconds per point: MLflow's ``SqlAlchemyStore.get_metric_history_bulk`` as a
whole; its SQL alone (psycopg2 ``fetchall``), its ORM query (``.all()``), the rows made
entities (``to_mlflow_entity``) and the rest (session, commit); the handler's ``to_dict``;
Flask's JSON; the handler through Flask's test client; PostgreSQL's execution time and plan
(``EXPLAIN ANALYZE``). What the workers spend beyond the test client is uvicorn, the
ASGI-to-WSGI bridge and HTTP.

``bench_http(results)`` prints its rows and adds them to ``results``; run alone with
``python bench/bench_http.py``, which merges them into ``bench/out/results_http.json``.
``BENCH_HTTP_RUNS=2000`` measures one size only (PostgreSQL has 10,000 runs only);
``BENCH_HTTP_BACKEND=postgres`` (or ``sqlite``) one backend only (both unless told);
``BENCH_HTTP_ANALYZE=1`` adds a SQLite server on a copy of each store with its statistics.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stores import OUT, uri_of, write_layout

from bench import BIN, REPEATS, REPORT, Measure, _json_tables, best_of, line, measure

# runs -> (cached store, jobs of 20 ranks)
STORES = {2_000: ("runs2k.db", 100), 10_000: ("runs10k.db", 500)}
LONG_S = 120.0  # an HTTP run longer than this is not repeated
GOAL = 3.0  # HTTP wall time / direct wall time
REPEAT_GOAL = 1.5  # the second report through the server (its cache warm) / direct
# MLflow's request timeout for the HTTP side: a loaded machine must not fail the benchmark
HTTP_ENV = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "60"}
# the whole read's deadline (--timeout, 60 s by default): 10,000 runs through a server take minutes
WHOLE_READ = ["--timeout", "1800"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with suppress(OSError), open(f"/proc/{entry}/stat", encoding="ascii") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
    return found


def _tree(pid: int) -> list[int]:
    return [pid, *(p for child in _children(pid) for p in _tree(child))]


def _cmdline(pid: int) -> str:
    with suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")
    return ""


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of ``pids`` (the living ones), from ``/proc``."""
    ticks = 0
    for pid in pids:
        with suppress(OSError), open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


class Server:
    """A running ``mlflow server``: its URL, worker processes and access log."""

    def __init__(self, url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.url, self.proc, self.log = url, proc, log

    def workers(self) -> list[int]:
        """The processes that answer requests: uvicorn's (or gunicorn's) tree."""
        front = [p for p in _tree(self.proc.pid) if "uvicorn" in _cmdline(p)]
        front = front or [p for p in _tree(self.proc.pid) if "gunicorn" in _cmdline(p)]
        return _tree(front[0]) if front else _tree(self.proc.pid)

    def requests(self) -> Counter[str]:
        """Requests in the access log so far, by method and path."""
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return Counter(re.findall(r'"((?:GET|POST) [^? ]+)\S* HTTP/1\.1"', text))


@contextmanager
def mlflow_server(db: Path | str, folder: Path | None = None) -> Iterator[Server]:
    """``mlflow server`` on ``db`` (a SQLite file, or any backend store URI, then serving from
    ``folder``) with its default workers, answering and warmed up."""
    if isinstance(db, Path):
        backend, folder = uri_of(db), folder or db.parent / f"{db.stem}-server"
    else:
        backend = db
    assert folder is not None
    folder.mkdir(exist_ok=True)
    port = _free_port()
    cmd = [str(BIN / "mlflow"), "server", "--backend-store-uri", backend]
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    log = folder / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=folder,
            start_new_session=True,
            env={**os.environ, "MLFLOW_TRACKING_URI": ""},
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while not _answers(f"{url}/health"):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"mlflow server did not start; see {log}")
            time.sleep(0.5)
        search = f"{url}/api/2.0/mlflow/experiments/search?max_results=1"
        with ThreadPoolExecutor(8) as pool:  # each worker's first request is slow
            list(pool.map(lambda _: _answers(search, 120), range(24)))
        yield Server(url, proc, log)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _answers(url: str, timeout: float = 2) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def store(runs: int) -> Path:
    name, jobs = STORES[runs]
    db = OUT / name
    if not db.exists():  # jobs x 20 ranks x 200 samples x 2 keys (+ 10 epochs on rank 0)
        write_layout(db, jobs=jobs, ranks=20, samples=200, epochs=10)
    return db


def points(db: Path) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        return int(con.execute("SELECT count(*) FROM metrics").fetchone()[0])


def a_run(db: Path) -> str:
    """A run of ``db`` that logged ``gpu_power_W``."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        (run,) = con.execute(
            "SELECT run_uuid FROM latest_metrics WHERE key = 'gpu_power_W'"
        ).fetchone()
    return str(run)


def one_run_request(server: Server, run: str, repeats: int = 5) -> float:
    """Server CPU seconds of a bulk request for one run's ``gpu_power_W`` (200 points).

    On SQLite that is mostly the scan of every point of the key that answers each request.
    """
    path = "/ajax-api/2.0/mlflow/metrics/get-history-bulk"
    url = f"{server.url}{path}?run_id={run}&metric_key=gpu_power_W"
    pids = server.workers()
    cpu = cpu_seconds(pids)
    for _ in range(repeats):
        _answers(url, 120)
    return (cpu_seconds(pids) - cpu) / repeats


@dataclass
class Served:
    """The best report through a server and what the server spent on it."""

    report: Measure
    made: int  # reports run
    server_cpu_s: float  # the server's workers, during that report
    requests: Counter[str]
    one_run_s: float  # the workers' CPU s for a one-run bulk request
    database_cpu_s: float | None = None  # the database server's processes, during that report


def through_server(
    db: Path | str,
    repeats: int = REPEATS,
    folder: Path | None = None,
    run: str | None = None,
    database_cpu: Callable[[], float] | None = None,
) -> Served:
    """The report through ``mlflow server`` on ``db`` (a SQLite file or a backend URI, see
    :func:`mlflow_server`), best of ``repeats``; ``database_cpu`` reads the CPU seconds of a
    database server behind it so far."""
    with mlflow_server(db, folder) as server:
        cmd = [*REPORT, "bench", "--tracking-uri", server.url, "-q", "--no-plots", "--no-cache"]
        cmd += WHOLE_READ
        best: Served | None = None
        made = 0
        while made < repeats:
            pids, asked = server.workers(), server.requests()
            cpu = cpu_seconds(pids)
            behind = database_cpu() if database_cpu else None
            got = measure(cmd, env=HTTP_ENV)[0]
            time.sleep(1)  # the access log's last lines
            used, sent = cpu_seconds(pids) - cpu, server.requests() - asked
            spent = database_cpu() - behind if database_cpu and behind is not None else None
            made += 1
            if best is None or got.wall_s < best.report.wall_s:
                best = Served(got, 0, used, sent, 0.0, spent)
            if got.wall_s > LONG_S:
                break
        assert best is not None
        best.made = made
        best.one_run_s = one_run_request(server, run or a_run(Path(db)))
    return best


def repeat_read(db: Path, direct_json: str) -> tuple[Measure, Measure, bool]:
    """(the first report through a server with an empty cache, the best of :data:`REPEATS`
    reports after it, whether every table of both equals the direct read's)."""
    import tempfile

    with tempfile.TemporaryDirectory() as cache, mlflow_server(db) as server:
        cmd = [*REPORT, "bench", "--tracking-uri", server.url, "-q", "--no-plots", *WHOLE_READ]
        cmd += ["--format", "json", "--cache-dir", cache]
        first, first_out = measure(cmd, env=HTTP_ENV)
        again = [measure(cmd, env=HTTP_ENV) for _ in range(REPEATS)]
    want = _json_tables(direct_json)
    same = _json_tables(first_out) == want and all(_json_tables(out) == want for _, out in again)
    best = min((m for m, _ in again), key=lambda m: m.wall_s)
    return first, best, same


def analyzed_server(db: Path) -> tuple[Path, Measure, float, float]:
    """The report through a server on a copy of ``db`` with SQLite's statistics (``ANALYZE``),
    which let it answer each bulk request through the run index instead of a scan of the key.

    (copy, report, server CPU s, server CPU s of a one-run request); the copy is cached.
    """
    copy = db.with_name(f"{db.stem}-analyzed.db")
    if not copy.exists():
        part = copy.with_suffix(".part")
        shutil.copyfile(db, part)
        with sqlite3.connect(part) as con:
            con.execute("ANALYZE")
        part.rename(copy)
    got = through_server(copy, repeats=1)
    return copy, got.report, got.server_cpu_s, got.one_run_s


def bench_http(results: dict[str, object]) -> None:
    """Worker runs through ``mlflow server`` vs the same store read directly, on each backend
    of ``BENCH_HTTP_BACKEND`` ("sqlite,postgres" unless told)."""
    backends = os.environ.get("BENCH_HTTP_BACKEND", "sqlite,postgres").split(",")
    if "sqlite" in backends:
        bench_http_sqlite(results)
    if "postgres" in backends:
        bench_http_postgres(results)


def bench_http_sqlite(results: dict[str, object]) -> None:
    """2,000 and 10,000 worker runs through ``mlflow server`` vs the same store read directly."""
    chosen = os.environ.get("BENCH_HTTP_RUNS", "")  # e.g. "2000": only that size
    for runs in sorted(STORES):
        if chosen and str(runs) not in chosen.split(","):
            continue
        db = store(runs)
        n = points(db)
        served = through_server(db)
        over_http, made, server_cpu = served.report, served.made, served.server_cpu_s
        sent, single = served.requests, served.one_run_s
        direct = best_of([*REPORT, "bench", "--tracking-uri", uri_of(db), "-q", "--no-plots"])
        ratio = over_http.wall_s / direct.wall_s
        bulk = sum(c for path, c in sent.items() if path.endswith("/get-history-bulk"))
        print(f"HTTP. {runs:,} worker runs, {n / 1e6:.1f} M points, through `mlflow server`")
        print("      (SQLite, its default 4 workers) vs the same store read directly, no plots")
        line(
            f"itwin-report through the server (best of {made})",
            f"{over_http.wall_s:6.1f} s wall, {over_http.cpu_s:6.1f} s CPU",
        )
        line(
            "  the server's workers",
            f"{server_cpu:6.1f} s CPU, {1e6 * server_cpu / n:5.1f} us per point",
        )
        line("  a bulk request for one run (200 points)", f"{single:6.2f} s of server CPU")
        line(
            "  requests",
            f"{sum(sent.values())}: {bulk} bulk histories, "
            f"{sum(sent.values()) - bulk} searches and others",
        )
        line(
            "itwin-report, the store read directly",
            f"{direct.wall_s:6.1f} s wall, {direct.cpu_s:6.1f} s CPU",
        )
        line(f"ratio wall, through the server / direct (goal <= {GOAL:g})", f"{ratio:6.2f}")
        direct_json = measure(
            [*REPORT, "bench", "--tracking-uri", uri_of(db), "-q", "--no-plots", "--format", "json"]
        )[1]
        filled, repeat, same = repeat_read(db, direct_json)
        repeat_ratio = repeat.wall_s / direct.wall_s
        line(
            "through the server, cache empty (fills it)",
            f"{filled.wall_s:6.1f} s wall, {filled.cpu_s:6.1f} s CPU",
        )
        line(
            f"through the server, repeat read from the cache (best of {REPEATS})",
            f"{repeat.wall_s:6.1f} s wall, {repeat.cpu_s:6.1f} s CPU, "
            f"{repeat.peak_mib:5.0f} MiB peak",
        )
        line(
            f"ratio wall, repeat read / direct (goal <= {REPEAT_GOAL:g})",
            f"{repeat_ratio:6.2f}{'' if same else '  TABLES DIFFER'}",
        )
        cores = os.cpu_count() or 1
        floor = (server_cpu + over_http.cpu_s) / cores / direct.wall_s
        line(f"floor: server + client CPU on {cores} cores / direct", f"{floor:6.2f}")
        analyzed = None
        if os.environ.get("BENCH_HTTP_ANALYZE") == "1":
            _, run_s, cpu_s, single_s = analyzed_server(db)
            analyzed = {"http": asdict(run_s), "server_cpu_s": cpu_s, "one_run": single_s}
            line(
                "through a server whose database was ANALYZEd",
                f"{run_s.wall_s:6.1f} s wall, server {cpu_s:6.1f} s CPU ({single_s:.2f} s a run)",
            )
            line("ratio wall, that server / direct", f"{run_s.wall_s / direct.wall_s:6.2f}")
        results[f"http_{runs}"] = {
            "analyzed": analyzed,
            "points": n,
            "http": asdict(over_http),
            "http_runs": made,
            "server_cpu_s": server_cpu,
            "requests": dict(sent),
            "direct": asdict(direct),
            "ratio_wall": ratio,
            "one_run_request_server_cpu_s": single,
            "floor_ratio": floor,
            "cache_fill": asdict(filled),
            "repeat": asdict(repeat),
            "repeat_ratio_wall": repeat_ratio,
            "repeat_tables_identical": same,
        }


def _sqlite_us_per_point(results: dict[str, object]) -> tuple[float, str] | None:
    """The SQLite-backed server's CPU per point at 10,000 runs: from this run, else from the
    last one recorded in ``results_http.json``."""
    got = results.get("http_10000")
    where = "this run"
    if not isinstance(got, dict):
        with suppress(OSError, ValueError):
            got = json.loads((OUT / "results_http.json").read_text()).get("http_10000")
        where = "results_http.json"
    if not isinstance(got, dict):
        return None
    return 1e6 * float(got["server_cpu_s"]) / int(got["points"]), where


def _bulk_requests(sent: Counter[str]) -> int:
    return sum(c for path, c in sent.items() if path.endswith("/get-history-bulk"))


def bench_http_postgres(results: dict[str, object]) -> None:
    """10,000 worker runs through ``mlflow server`` on PostgreSQL (``bench.py``'s database,
    started as its ``pg`` part starts it) vs the same database read directly."""
    if "10000" not in os.environ.get("BENCH_HTTP_RUNS", "10000").split(","):
        return
    try:
        from bench import _server_cpu, postgres_store
    except ImportError:
        print("HTTP. PostgreSQL not measured: bench.py cannot start a PostgreSQL server")
        return
    try:
        database, uri = postgres_store()
    except (ImportError, OSError, subprocess.SubprocessError) as err:
        print(f"HTTP. PostgreSQL not measured: no PostgreSQL server ({err})")
        return
    try:
        pid = database.get_pid()

        def pg_cpu() -> float:
            return float(_server_cpu(pid))

        backend = uri.replace("postgresql://", "postgresql+psycopg2://", 1)
        n, run, ids = _postgres_points(uri)
        served = through_server(
            backend, folder=OUT / "runs10k-postgres-server", run=run, database_cpu=pg_cpu
        )
        cmd = [*REPORT, "bench", "--tracking-uri", uri, "-q", "--no-plots"]
        directs = []
        for _ in range(REPEATS):
            before = pg_cpu()
            got = measure(cmd)[0]
            directs.append((got, pg_cpu() - before))
        direct, direct_pg = min(directs, key=lambda d: d[0].wall_s)
        profile = profile_bulk(backend, ids)
    finally:
        database.cleanup()
    over_http, sent = served.report, served.requests
    ratio = over_http.wall_s / direct.wall_s
    bulk = _bulk_requests(sent)
    pg_s = served.database_cpu_s or 0.0
    print(f"HTTP. 10,000 worker runs, {n / 1e6:.1f} M points, through `mlflow server`")
    print("      (PostgreSQL, its default 4 workers) vs the same database read directly, no plots")
    line(
        f"itwin-report through the server (best of {served.made})",
        f"{over_http.wall_s:6.1f} s wall, {over_http.cpu_s:6.1f} s CPU",
    )
    line(
        "  the server's workers",
        f"{served.server_cpu_s:6.1f} s CPU, {1e6 * served.server_cpu_s / n:5.1f} us per point",
    )
    line("  PostgreSQL's processes", f"{pg_s:6.1f} s CPU, {1e6 * pg_s / n:5.1f} us per point")
    lite = _sqlite_us_per_point(results)
    if lite is not None:
        line(f"  (SQLite-backed workers at 10,000, {lite[1]})", f"{lite[0]:5.1f} us per point")
    line("  a bulk request for one run (200 points)", f"{served.one_run_s:6.2f} s of server CPU")
    line(
        "  requests",
        f"{sum(sent.values())}: {bulk} bulk histories, "
        f"{sum(sent.values()) - bulk} searches and others",
    )
    line(
        f"itwin-report, the database read directly (best of {REPEATS})",
        f"{direct.wall_s:6.1f} s wall, {direct.cpu_s:6.1f} s CPU + {direct_pg:5.1f} s PostgreSQL",
    )
    line(f"ratio wall, through the server / direct (goal <= {GOAL:g})", f"{ratio:6.2f}")
    cores = os.cpu_count() or 1
    floor = (served.server_cpu_s + pg_s + over_http.cpu_s) / cores / direct.wall_s
    line(f"floor: server + PostgreSQL + client CPU on {cores} cores / direct", f"{floor:6.2f}")
    print(f"      one bulk request in a plain process, 100 runs x gpu_power_W, {ids[1]:,} points:")
    print("      us per point, CPU (wall), best of 5")
    for step, value in profile.items():
        if isinstance(value, list):
            cpu = "      " if value[0] is None else f"{value[0]:6.2f}"
            line(f"  {step}", f"{cpu} ({value[1]:6.2f})")
    line("  PostgreSQL's plan", str(profile.get("plan", "")))
    results["http_postgres_10000"] = {
        "points": n,
        "http": asdict(over_http),
        "http_runs": served.made,
        "server_cpu_s": served.server_cpu_s,
        "server_us_per_point": 1e6 * served.server_cpu_s / n,
        "postgres_cpu_s": pg_s,
        "postgres_us_per_point": 1e6 * pg_s / n,
        "sqlite_server_us_per_point": lite[0] if lite else None,
        "requests": dict(sent),
        "direct": asdict(direct),
        "direct_postgres_cpu_s": direct_pg,
        "ratio_wall": ratio,
        "one_run_request_server_cpu_s": served.one_run_s,
        "floor_ratio": floor,
        "bulk_request_us_per_point": profile,
    }


def _postgres_points(uri: str) -> tuple[int, str, tuple[list[str], int]]:
    """(points in the database, a run that logged ``gpu_power_W``, (the first 100 such runs,
    their ``gpu_power_W`` points))."""
    import psycopg

    with psycopg.connect(uri) as conn:
        (n,) = conn.execute("SELECT count(*) FROM metrics").fetchone() or (0,)
        rows = conn.execute(
            "SELECT run_uuid FROM latest_metrics WHERE key = 'gpu_power_W'"
            " ORDER BY run_uuid LIMIT 100"
        ).fetchall()
        ids = [str(r[0]) for r in rows]
        (count,) = conn.execute(
            "SELECT count(*) FROM metrics WHERE key = 'gpu_power_W' AND run_uuid = ANY(%s)",
            (ids,),
        ).fetchone() or (0,)
    return int(n), ids[0], (ids, int(count))


# One bulk request as a PostgreSQL-backed server answers it, step by step (MLflow's handler:
# the store's query, ORM rows to entities, entities to dicts, Flask's JSON); prints a JSON object
# of step -> [CPU us per point, wall us per point] and the plan PostgreSQL chose.
PROFILE_SCRIPT = r"""
import json, os, sys, time
import flask
from mlflow.store.tracking.dbmodels.models import SqlMetric
from mlflow.store.tracking.sqlalchemy_store import MetricWithRunId, SqlAlchemyStore

uri, ids, key = sys.argv[1], json.loads(sys.argv[2]), "gpu_power_W"
store = SqlAlchemyStore(uri, "/tmp/bench-artifacts")
dumps = flask.Flask("bench").json.dumps  # sort_keys, as the server's responses
sql = ("SELECT key, value, timestamp, step, is_nan, run_uuid FROM metrics"
       " WHERE key = %s AND run_uuid IN %s ORDER BY run_uuid, timestamp, step, value LIMIT 25000")
out, points = {}, 0
BULK = "/ajax-api/2.0/mlflow/metrics/get-history-bulk"

def timed(name, fn, repeats=5):
    best = None
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        got = fn()
        c, w = time.process_time() - c, time.perf_counter() - w
        best = (c, w) if best is None or w < best[1] else best
    out[name] = best
    return got

def orm():  # the store's own query, its rows made entities while the session is open
    with store.ManagedSessionMaker() as session:
        c, w = time.process_time(), time.perf_counter()
        rows = (session.query(SqlMetric)
                .filter(SqlMetric.key == key, SqlMetric.run_uuid.in_(ids))
                .order_by(SqlMetric.run_uuid, SqlMetric.timestamp, SqlMetric.step,
                          SqlMetric.value)
                .limit(25000).all())
        c2, w2 = time.process_time(), time.perf_counter()
        got = [MetricWithRunId(run_id=m.run_uuid, metric=m.to_mlflow_entity()) for m in rows]
        c3, w3 = time.process_time(), time.perf_counter()
    return got, (c2 - c, w2 - w), (c3 - c2, w3 - w2)

def fetch():
    conn = store.engine.raw_connection()
    try:
        cur = conn.cursor()
        cur.execute(sql, (key, tuple(ids)))
        return cur.fetchall()
    finally:
        conn.close()

whole_name = "the whole store call (get_metric_history_bulk)"
orm_name, entity_name = "  the ORM query (.all())", "  to_mlflow_entity + MetricWithRunId"
whole = timed(whole_name,
              lambda: store.get_metric_history_bulk(run_ids=ids, metric_key=key,
                                                    max_results=25000))
points = len(whole)
timed("  the SQL alone (psycopg2 execute + fetchall)", fetch)
parts = [orm() for _ in range(5)]
entities = parts[0][0]
out[orm_name] = min((p[1] for p in parts), key=lambda t: t[1])
out[entity_name] = min((p[2] for p in parts), key=lambda t: t[1])
rest = [a - b - c for a, b, c in zip(out[whole_name], out[orm_name], out[entity_name])]
out["  the rest (session, commit, expiry)"] = tuple(rest)
dicts = timed("to_dict (the handler)", lambda: [m.to_dict() for m in entities])
timed("JSON (Flask's provider)", lambda: dumps({"metrics": dicts}))
os.environ["_MLFLOW_SERVER_FILE_STORE"] = uri  # the server's store, for its Flask app
os.environ["_MLFLOW_SERVER_ARTIFACT_ROOT"] = "/tmp/bench-artifacts"
from mlflow.server import app
client = app.test_client()
query = [("run_id", i) for i in ids] + [("metric_key", key), ("max_results", "25000")]
client.get(BULK, query_string=query)  # the app's first request builds its store
answer = timed("the handler through Flask, in process (test client)",
               lambda: client.get(BULK, query_string=query))
assert answer.status_code == 200 and len(answer.get_json()["metrics"]) == points
conn = store.engine.raw_connection()
cur = conn.cursor()
cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, (key, tuple(ids)))
plan = cur.fetchone()[0][0]
conn.close()
node = plan["Plan"]
while node.get("Plans") and "Index" not in node.get("Node Type", ""):
    node = node["Plans"][0]
result = {k: [1e6 * c / points, 1e6 * w / points] for k, (c, w) in out.items()}
result["  PostgreSQL's execution (EXPLAIN ANALYZE)"] = [
    None, 1e3 * plan["Execution Time"] / points]
result["plan"] = f"{node['Node Type']} on {node.get('Index Name', node.get('Relation Name'))}"
print(json.dumps(result))
"""


def profile_bulk(backend: str, ids: tuple[list[str], int]) -> dict[str, object]:
    """Where one bulk request's time goes in a PostgreSQL-backed server (see
    :data:`PROFILE_SCRIPT`), in a fresh process."""
    proc = subprocess.run(
        [sys.executable, "-c", PROFILE_SCRIPT, backend, json.dumps(ids[0])],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        return {}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict[str, object] = {}
    bench_http(results)
    path = OUT / "results_http.json"
    kept: dict[str, object] = {}
    with suppress(OSError, ValueError):
        kept = json.loads(path.read_text(encoding="utf-8"))  # rows this run did not measure
    path.write_text(json.dumps({**kept, **results}, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
