"""Promises about time that the test suite checks as bounds on work, measured here in seconds.

The suite never asserts a wall time (it must pass on a machine with a load average of 20); it
checks the work behind each promise instead (text scanned, requests sent). This measures the
seconds themselves, best of N, against the README's goals:

* the page of a report with a 100 kB strategy name (tables, plots, summary): about a second,
  goal <= 10 s;
* a report against an HTTP server that nobody listens on: one line, goal <= 10 s;
* a report against a PostgreSQL server that nobody listens on: one line, goal <= 30 s.

    python bench/bench_limits.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

GOALS_S = {
    "page with a 100 kB name": 10.0,
    "unreachable http": 10.0,
    "unreachable postgresql": 30.0,
}


def long_name_page() -> None:
    from test_report_builders import make_data, metric, run

    from itwin_report.render.html import page_context, page_plots, render_html
    from itwin_report.report import build_report

    name = "n" * 100_000
    runs, metrics = [], []
    for strategy in (name, "ddp"):
        for w in (2, 4, 8):
            rid = f"{strategy[:3]}{w}"
            runs.append(run(rid, rid, strategy, w))
            metrics += metric(rid, "epoch_time_s", [9.0, 8.0 / w, 8.0 / w])
            metrics += metric(rid, "gpu_power_W", [100.0] * 4)
    data = make_data(runs, metrics)
    rep = build_report(data, predict_workers=[32])
    from datetime import UTC, datetime

    render_html(rep, page_context(data, "1", datetime.now(UTC)), page_plots(rep))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unreachable(scheme: str) -> Callable[[], None]:
    def go() -> None:
        uri = f"{scheme}://user:pw@127.0.0.1:{_closed_port()}/mlflow"
        cmd = [sys.executable, "-m", "itwin_report", "generate-scalability-report", "-q",
               "--no-plots", "--tracking-uri", uri]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr

    return go


def best(call: Callable[[], None], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    calls = {
        "page with a 100 kB name": long_name_page,
        "unreachable http": unreachable("http"),
        "unreachable postgresql": unreachable("postgresql"),
    }
    missed = 0
    for name, call in calls.items():
        seconds = best(call, args.repeat)
        goal = GOALS_S[name]
        verdict = "ok" if seconds <= goal else "MISSED"
        missed += seconds > goal
        print(f"{name:<26} {seconds:6.2f} s  (goal <= {goal:g} s)  {verdict}", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
