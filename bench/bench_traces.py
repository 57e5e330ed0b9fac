"""Trace analysis: time and peak memory of ``analyze-traces`` on large generated traces.

Writes ``RANKS`` emulated GPU traces of about ``MB`` MB each (plain JSON, one rank slowed by 20 %)
under ``bench/out/traces/`` once, then runs ``itwin-report analyze-traces`` on them as a fresh
process: its wall time, CPU time (its own and its workers') and peak memory (the largest resident
set of the process or of any worker, from ``wait4``). With ``HTA_PYTHON`` naming a Python that has
HolisticTraceAnalysis installed, HTA's temporal breakdown and overlap run on the same files and
the ratio is printed. Results go to ``bench/out/traces.json``.

    .venv/bin/python bench/bench_traces.py            # 2 ranks of about 200 MB
    BENCH_TRACE_MB=50 BENCH_TRACE_RANKS=4 .venv/bin/python bench/bench_traces.py
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).resolve().parent / "out"
BIN = Path(sys.executable).parent
MB = float(os.environ.get("BENCH_TRACE_MB", "200"))
RANKS = int(os.environ.get("BENCH_TRACE_RANKS", "2"))
BYTES_PER_STEP = 3200  # an emulated GPU step is about this many bytes of JSON

HTA_SCRIPT = r"""
import sys
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
print(analyzer.get_temporal_breakdown(visualize=False).to_string())
print(analyzer.get_comm_comp_overlap(visualize=False).to_string())
"""


def traces() -> Path:
    """The generated traces (written once, kept between runs)."""
    from itwin_report.emulator import kineto

    folder = OUT / "traces" / f"{RANKS}x{int(MB)}MB"
    steps = int(MB * 1e6 / BYTES_PER_STEP)
    if len(list(folder.glob("*.pt.trace.json"))) != RANKS:
        for spec in kineto.job(RANKS, slow_rank=RANKS - 1 if RANKS >= 3 else None, steps=steps):
            kineto.write(spec, folder)
    return folder


def measure(cmd: list[str]) -> dict[str, float]:
    """Wall and CPU seconds and peak resident memory (MB) of ``cmd`` and its children."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"{cmd[0]} failed: {err.decode()[-2000:]}")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "wall_s": wall,
        "cpu_s": children.ru_utime + children.ru_stime,
        "peak_rss_mb": children.ru_maxrss / 1024,
        "output": out.decode()[-400:],
    }


def main() -> None:
    folder = traces()
    files = sorted(folder.glob("*.pt.trace.json"))
    sizes = [p.stat().st_size / 1e6 for p in files]
    ours = measure([str(BIN / "itwin-report"), "analyze-traces", str(folder), "--format", "json"])
    result = {
        "ranks": len(files),
        "largest_trace_mb": max(sizes),
        "total_mb": sum(sizes),
        "analyze_traces": ours,
        "seconds_per_mb": ours["wall_s"] / sum(sizes),
        "peak_over_largest_trace": ours["peak_rss_mb"] * 1.048576 / max(sizes),
    }
    hta = os.environ.get("HTA_PYTHON")
    if hta:
        theirs = measure([hta, "-c", HTA_SCRIPT, str(folder)])
        result["hta"] = theirs
        result["speedup_vs_hta"] = theirs["wall_s"] / ours["wall_s"]
    print(
        f"analyze-traces: {len(files)} traces, largest {max(sizes):.0f} MB, "
        f"{ours['wall_s']:.1f} s wall ({result['seconds_per_mb'] * 1000:.1f} ms/MB), "
        f"{ours['cpu_s']:.1f} s CPU, peak {ours['peak_rss_mb']:.0f} MiB "
        f"({result['peak_over_largest_trace']:.2f}x the largest trace)"
    )
    if "hta" in result:
        print(f"HTA: {result['hta']['wall_s']:.1f} s wall: {result['speedup_vs_hta']:.1f}x slower")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "traces.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
