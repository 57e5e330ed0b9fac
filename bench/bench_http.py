"""The report through ``mlflow server`` against the same store read directly.

The 10,000-run store of ``bench.py`` (500 jobs x 20 ranks x 200 samples x 2 GPU keys, 10 epochs
on rank 0: 4 M points) and a 2,000-run one of the same layout, each served by
``mlflow server --backend-store-uri sqlite:///...`` with its default workers (4 under uvicorn
in MLflow 3.x) on 127.0.0.1. Each side runs as a fresh process (``bench.measure``); the HTTP
side also reports the server's CPU time (its worker processes, from ``/proc``) and the requests
its access log shows. The direct side is the best of ``BENCH_REPEATS`` runs; the HTTP side too,
unless one run takes minutes (``LONG_S``): then it runs once and says so.

``bench_http(results)`` prints its rows and adds them to ``results``; run alone with
``python bench/bench_http.py`` (``BENCH_HTTP_RUNS=2000`` for one size only;
``BENCH_HTTP_ANALYZE=1`` adds a server on a copy of each store with SQLite's statistics).
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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stores import OUT, uri_of, write_layout

from bench import BIN, REPEATS, REPORT, Measure, best_of, line, measure

# runs -> (cached store, jobs of 20 ranks)
STORES = {2_000: ("runs2k.db", 100), 10_000: ("runs10k.db", 500)}
LONG_S = 120.0  # an HTTP run longer than this is not repeated
GOAL = 3.0  # HTTP wall time / direct wall time
# MLflow's request timeout for the HTTP side: a loaded machine must not fail the benchmark
HTTP_ENV = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "60"}


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
def mlflow_server(db: Path) -> Iterator[Server]:
    """``mlflow server`` on ``db`` with its default workers, answering and warmed up."""
    folder = db.parent / f"{db.stem}-server"
    folder.mkdir(exist_ok=True)
    port = _free_port()
    cmd = [str(BIN / "mlflow"), "server", "--backend-store-uri", uri_of(db)]
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


def one_run_request(server: Server, db: Path, repeats: int = 5) -> float:
    """Server CPU seconds of a bulk request for one run's ``gpu_power_W`` (200 points).

    On SQLite that is mostly the scan of every point of the key that answers each request.
    """
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
        (run,) = con.execute(
            "SELECT run_uuid FROM latest_metrics WHERE key = 'gpu_power_W'"
        ).fetchone()
    path = "/ajax-api/2.0/mlflow/metrics/get-history-bulk"
    url = f"{server.url}{path}?run_id={run}&metric_key=gpu_power_W"
    pids = server.workers()
    cpu = cpu_seconds(pids)
    for _ in range(repeats):
        _answers(url, 120)
    return (cpu_seconds(pids) - cpu) / repeats


def through_server(
    db: Path, repeats: int = REPEATS
) -> tuple[Measure, int, float, Counter[str], float]:
    """(best report through the server, runs made, server CPU s and requests of that run,
    server CPU s of a one-run request)."""
    with mlflow_server(db) as server:
        cmd = [*REPORT, "bench", "--tracking-uri", server.url, "-q", "--no-plots"]
        best: tuple[Measure, float, Counter[str]] | None = None
        made = 0
        while made < repeats:
            pids, asked = server.workers(), server.requests()
            cpu = cpu_seconds(pids)
            got = measure(cmd, env=HTTP_ENV)[0]
            time.sleep(1)  # the access log's last lines
            used, sent = cpu_seconds(pids) - cpu, server.requests() - asked
            made += 1
            if best is None or got.wall_s < best[0].wall_s:
                best = (got, used, sent)
            if got.wall_s > LONG_S:
                break
        single = one_run_request(server, db)
    assert best is not None
    return best[0], made, best[1], best[2], single


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
    got, _, server_cpu, _, single = through_server(copy, repeats=1)
    return copy, got, server_cpu, single


def bench_http(results: dict[str, object]) -> None:
    """2,000 and 10,000 worker runs through ``mlflow server`` vs the same store read directly."""
    chosen = os.environ.get("BENCH_HTTP_RUNS", "")  # e.g. "2000": only that size
    for runs in sorted(STORES):
        if chosen and str(runs) not in chosen.split(","):
            continue
        db = store(runs)
        n = points(db)
        over_http, made, server_cpu, sent, single = through_server(db)
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
        }


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict[str, object] = {}
    bench_http(results)
    (OUT / "results_http.json").write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
