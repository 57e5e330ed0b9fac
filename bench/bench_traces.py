"""Trace analysis: ``analyze-traces`` beside Holistic Trace Analysis (HTA) on the same traces.

Writes ``RANKS`` emulated GPU traces of about ``MB`` MB each (plain JSON, the last rank's compute
slowed by 20 %) under ``bench/out/traces/`` once, shaped as PyTorch writes real ones: its layout
(a key per line), a ``cpu_op`` around each launch, kernels with their arguments, and a few
profiler steps with thousands of kernels each: the emulator's steps grouped ``STEPS`` to a
trace (HTA's step lookup costs events × steps, so thousands of tiny steps would make it look
slower than it is).

Then, each as a fresh process, best of ``REPEAT`` runs per side: ``itwin-report analyze-traces``
and, with ``HTA_PYTHON`` naming a Python with HolisticTraceAnalysis installed (``make bench`` uses
``.venv-hta``), HTA's temporal breakdown and communication-computation overlap. For each: wall
time, CPU time (the process's and its workers'), peak resident memory (the largest of the process
and any worker, from ``wait4``; on Linux this process adopts what a command leaves behind, such
as the fork server analyze-traces starts its workers from, and waits for it too). Printed: both,
the ratio (goal: ours at least 5× faster), our peak as a multiple of the largest trace (goal: at
most 3×) and the largest difference between the two tools' percentages. Then what reading the
collectives' sizes adds (goal: at most 10 %), in one process, with and without it; and with
``BENCH_TRACE_BASELINE`` naming a git revision, the command from this tree against it. Results
go to ``bench/out/traces.json``.

    .venv/bin/python bench/bench_traces.py            # 2 ranks of about 200 MB
    BENCH_TRACE_BASELINE=main .venv/bin/python bench/bench_traces.py  # and against main
    HTA_PYTHON=.venv-hta/bin/python BENCH_TRACE_MB=50 BENCH_TRACE_RANKS=4 \
        .venv/bin/python bench/bench_traces.py
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "out"
BIN = Path(sys.executable).parent
MB = float(os.environ.get("BENCH_TRACE_MB", "200"))
RANKS = int(os.environ.get("BENCH_TRACE_RANKS", "2"))
STEPS = int(os.environ.get("BENCH_TRACE_STEPS", "8"))  # profiler steps per trace
REPEAT = int(os.environ.get("BENCH_TRACE_REPEAT", "3"))
SPEED_GOAL, MEMORY_GOAL = 5.0, 3.0
METRICS = ("compute_pct", "non_compute_pct", "idle_pct", "overlap_pct")

HTA_SCRIPT = r"""
import json, logging, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=sys.argv[1])
b = analyzer.get_temporal_breakdown(visualize=False).set_index("rank")
o = analyzer.get_comm_comp_overlap(visualize=False).set_index("rank")
print(json.dumps({int(r): {
    "compute_pct": float(b.loc[r, "compute_time_pctg"]),
    "non_compute_pct": float(b.loc[r, "non_compute_time_pctg"]),
    "idle_pct": float(b.loc[r, "idle_time_pctg"]),
    "overlap_pct": float(o.loc[r, "comp_comm_overlap_pctg"]),
} for r in b.index}))
"""


KERNEL_ARGS = {  # what Kineto writes for a kernel besides its links
    "queued": 0,
    "device": 0,
    "context": 1,
    "registers per thread": 128,
    "shared memory": 49152,
    "blocks per SM": 2.5,
    "warps per SM": 10.0,
    "grid": [264, 1, 1],
    "block": [128, 1, 1],
    "est. achieved occupancy %": 25,
}


def kineto_text(event: dict[str, Any]) -> str:
    """One event as PyTorch's profiler writes it: a key per line, ``args`` last."""
    lines = [f'    "{k}": {json.dumps(v)}' for k, v in event.items() if k != "args"]
    text = "  {\n" + ",\n".join(lines)
    if "args" in event:
        inner = ", ".join(f'"{k}": {json.dumps(v)}' for k, v in event["args"].items())
        text += f'\n    ,\n    "args": {{\n      {inner}\n    }}'
    return text + "\n  }"


def realistic(
    event: dict[str, Any], step: int, group: int, spec: Any, comms: frozenset[int] = frozenset()
) -> list[dict[str, Any]]:
    """An emulated event as it would be in a real trace: the emulator's steps grouped into one
    ``ProfilerStep`` (host and device side); each launch inside the ``cpu_op`` that made it,
    with a flow start (a collective's, whose correlation is in ``comms``, inside
    ``record_param_comms`` with its input's shape, as PyTorch 2.x records it); kernels with
    their arguments."""
    name, cat, args = str(event.get("name")), event.get("cat"), event.get("args", {})
    if "ProfilerStep" in name:
        if step % group:
            return []
        n = step // group + 1
        dur = min(group, spec.steps - step) * spec.step_us
        return [{**event, "name": f"ProfilerStep#{n}", "dur": dur}]
    if cat == "cuda_runtime":
        corr = args["correlation"]
        op = "aten::copy_" if name == "cudaMemcpyAsync" else "aten::addmm"
        op = "record_param_comms" if corr in comms else op
        parent = {**event, "cat": "cpu_op", "name": op, "ts": event["ts"] - 3.0}
        parent |= {"dur": event["dur"] + 6.0}
        parent["args"] = {"External id": corr, "Record function id": 0, "Ev Idx": corr}
        if corr in comms:
            parent["args"] |= {"Input Dims": [[6_250_000], [], []]}
            parent["args"] |= {"Input type": ["float", "Int", "Int"]}
        launch = {**event, "args": {"External id": corr, "cbid": 211, "correlation": corr}}
        flow = {"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": event["ts"]}
        return [parent, launch, {**flow, "cat": "ac2g", "name": "ac2g"}]
    if cat in ("kernel", "gpu_memcpy"):
        return [{**event, "args": {**args, **KERNEL_ARGS}}]
    return [event]


def write_trace(spec: Any, folder: Path, group: int) -> Path:
    """One rank's trace in PyTorch's own layout (see :func:`realistic`)."""
    from itwin_report.emulator import kineto

    path = folder / f"worker_{spec.rank}.1.pt.trace.json"
    head = kineto.document_meta(spec)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(head, indent=2)[:-2] + ',\n  "traceEvents": [\n')
        sep = ""
        for step in range(-1, spec.steps):
            events = kineto.step_events(spec, step)
            comms = frozenset(
                e["args"]["correlation"]
                for e in events
                if e.get("cat") == "kernel" and str(e.get("name")).startswith("nccl")
            )
            for emulated in events:
                for event in realistic(emulated, step, group, spec, comms):
                    fh.write(sep + kineto_text(event))
                    sep = ",\n"
        fh.write(f'\n  ],"traceName": "worker_{spec.rank}" }}')
    return path


def traces() -> Path:
    """The generated traces (written once, kept between runs)."""
    from itwin_report.emulator import kineto

    folder = OUT / "traces" / f"{RANKS}x{int(MB)}MB-{STEPS}steps-kineto-comms"
    probe = kineto.RankSpec(steps=1)
    per_step = sum(
        len(kineto_text(e)) + 2
        for e in kineto.step_events(probe, 0)
        for e in realistic(e, 1, 2, probe)
    )
    steps = int(MB * 1e6 / per_step)
    group = max(1, math.ceil(steps / STEPS))
    if len(list(folder.glob("*.pt.trace.json"))) != RANKS:
        folder.mkdir(parents=True, exist_ok=True)
        slow = RANKS - 1 if RANKS >= 3 else None
        for spec in kineto.job(RANKS, slow_rank=slow, steps=steps):
            write_trace(spec, folder, group)
    return folder


def adopt_orphans() -> None:
    """Become the parent of the processes a command leaves running when it exits (Linux's
    child subreaper), so that :func:`run_once` waits for them and counts their time: a fork
    server, and the workers it forked and waited for, outlive the command by a moment."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def run_once(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Wall seconds of ``cmd``; CPU seconds and peak resident memory (MiB) of it and of every
    process it started (its workers, a fork server and the workers forked from it)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        cpu, peak = usage.ru_utime + usage.ru_stime, usage.ru_maxrss
        while True:  # what it left behind, adopted (see adopt_orphans)
            try:
                _, _, more = os.wait4(-1, 0)
            except ChildProcessError:
                break
            cpu, peak = cpu + more.ru_utime + more.ru_stime, max(peak, more.ru_maxrss)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise SystemExit(f"{cmd[0]} failed: {err.read().decode()[-2000:]}")
        return {
            "wall_s": wall,
            "cpu_s": cpu,
            "peak_rss_mib": peak / 1024,
            "stdout": out.read().decode(),
        }


def best_of(cmd: list[str], label: str) -> dict[str, Any]:
    """Best wall and CPU time of ``REPEAT`` runs; the peak memory is the largest of them."""
    runs = []
    for i in range(REPEAT):
        runs.append(run_once(cmd))
        print(f"  {label} run {i + 1}: {runs[-1]['wall_s']:.1f} s wall", file=sys.stderr)
    return {
        "wall_s": min(r["wall_s"] for r in runs),
        "cpu_s": min(r["cpu_s"] for r in runs),
        "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        "runs": [{k: v for k, v in r.items() if k != "stdout"} for r in runs],
        "stdout": runs[-1]["stdout"],
    }


def against_baseline(folder: Path, rev: str) -> dict[str, Any]:
    """Wall and CPU time of ``analyze-traces`` from this tree and from git revision ``rev``
    (exported to a temporary folder), run in turn ``REPEAT`` times each, best of each side."""
    root = Path(__file__).resolve().parent.parent
    cmd = [sys.executable, "-m", "itwin_report", "analyze-traces", str(folder), "--format", "json"]
    runs: dict[str, list[dict[str, Any]]] = {"this tree": [], rev: []}
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", rev], check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        trees = {"this tree": str(root), rev: tmp}
        for i in range(REPEAT):
            for label, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": tree}
                runs[label].append(run_once(cmd, env))
                print(f"  {label} run {i + 1}: {runs[label][-1]['wall_s']:.2f} s", file=sys.stderr)
    best = {k: {m: min(r[m] for r in v) for m in ("wall_s", "cpu_s")} for k, v in runs.items()}
    return {
        "baseline": rev,
        "best": best,
        "wall_ratio": best["this tree"]["wall_s"] / best[rev]["wall_s"],
        "cpu_ratio": best["this tree"]["cpu_s"] / best[rev]["cpu_s"],
    }


def size_share(path: Path) -> dict[str, float]:
    """What reading the collectives' sizes costs: ``read_one`` (read and analyse one trace) in
    this process, in turn with and without the size handling (the kernels' size args left out
    of pyarrow's schema; no comms ops looked for; no collectives tables), ``REPEAT`` x 3 times
    each; the best CPU time of each and their ratio."""
    import pyarrow as pa

    from itwin_report.traces import analyze, collectives, columns, pieces

    read_one = analyze.read_one
    read_one(path)  # imports, caches, the schema built
    full = pieces.ARROW_SCHEMA
    bare = pa.schema(
        [(f.name, f.type) for f in full if f.name != "args"]
        + [("args", pa.struct(list(full.field("args").type)[:2]))]
    )
    saved = (
        columns.Columns._table_collectives,
        columns.Columns.add_ops_text,
        collectives.rows,
        collectives.size_classes,
        collectives.link_fit,
    )
    off = (lambda *a: None, lambda *a: None, lambda k: [], lambda k: [], lambda k: None)
    best = {"with": math.inf, "without": math.inf}
    for _ in range(REPEAT * 3):
        for label, schema, patches in (("with", full, saved), ("without", bare, off)):
            pieces.ARROW_SCHEMA = schema
            columns.Columns._table_collectives, columns.Columns.add_ops_text = patches[:2]
            collectives.rows, collectives.size_classes, collectives.link_fit = patches[2:]
            start = time.process_time()
            read_one(path)
            best[label] = min(best[label], time.process_time() - start)
    pieces.ARROW_SCHEMA = full
    columns.Columns._table_collectives, columns.Columns.add_ops_text = saved[:2]
    collectives.rows, collectives.size_classes, collectives.link_fit = saved[2:]
    return {
        "with_s": best["with"],
        "without_s": best["without"],
        "ratio": best["with"] / best["without"],
    }


def agreement(ours: str, theirs: str) -> dict[str, float]:
    """Per metric, the largest difference (percentage points) between the two tools' ranks."""
    mine = {r["rank"]: r for r in json.loads(ours)["ranks"]}
    hta = {int(k): v for k, v in json.loads(theirs.strip().splitlines()[-1]).items()}
    return {m: max(abs(mine[r][m] - hta[r][m]) for r in hta) for m in METRICS}


def main() -> None:
    adopt_orphans()
    folder = traces()
    files = sorted(folder.glob("*.pt.trace.json"))
    sizes = [p.stat().st_size / 1e6 for p in files]
    largest_mib = max(p.stat().st_size for p in files) / 2**20
    cmd = [str(BIN / "itwin-report"), "analyze-traces", str(folder), "--format", "json"]
    ours = best_of(cmd, "analyze-traces")
    result: dict[str, Any] = {
        "ranks": len(files),
        "profiler_steps_per_trace": STEPS,
        "largest_trace_mb": max(sizes),
        "total_mb": sum(sizes),
        "repeat": REPEAT,
        "analyze_traces": {k: v for k, v in ours.items() if k != "stdout"},
        "seconds_per_mb": ours["wall_s"] / sum(sizes),
        "peak_over_largest_trace": ours["peak_rss_mib"] / largest_mib,
    }
    hta = os.environ.get("HTA_PYTHON")
    if hta:
        theirs = best_of([hta, "-c", HTA_SCRIPT, str(folder)], "HTA")
        result["hta"] = {k: v for k, v in theirs.items() if k != "stdout"}
        result["speedup_vs_hta"] = theirs["wall_s"] / ours["wall_s"]
        result["cpu_ratio_vs_hta"] = theirs["cpu_s"] / ours["cpu_s"]
        result["largest_difference_pp"] = agreement(ours["stdout"], theirs["stdout"])
    print(
        f"analyze-traces: {len(files)} traces, largest {max(sizes):.0f} MB, "
        f"best of {REPEAT}: {ours['wall_s']:.1f} s wall "
        f"({result['seconds_per_mb'] * 1000:.1f} ms/MB), {ours['cpu_s']:.1f} s CPU, "
        f"peak {ours['peak_rss_mib']:.0f} MiB = {result['peak_over_largest_trace']:.2f}x the "
        f"largest trace (goal <= {MEMORY_GOAL:g}x: "
        f"{'met' if result['peak_over_largest_trace'] <= MEMORY_GOAL else 'NOT met'})"
    )
    if hta:
        h = result["hta"]
        print(
            f"HTA 0.5.0 on the same traces, best of {REPEAT}: {h['wall_s']:.1f} s wall, "
            f"{h['cpu_s']:.1f} s CPU, peak {h['peak_rss_mib']:.0f} MiB"
        )
        print(
            f"analyze-traces is {result['speedup_vs_hta']:.1f}x faster than HTA "
            f"({result['cpu_ratio_vs_hta']:.1f}x less CPU) (goal >= {SPEED_GOAL:g}x: "
            f"{'met' if result['speedup_vs_hta'] >= SPEED_GOAL else 'NOT met'}); largest "
            "difference in percentage points: "
            + ", ".join(f"{k} {v:.2f}" for k, v in result["largest_difference_pp"].items())
        )
    share = result["size_handling"] = size_share(files[0])
    print(
        f"the collectives' sizes: reading and analysing {files[0].name} takes "
        f"{share['with_s']:.3f} s CPU with them, {share['without_s']:.3f} s without "
        f"({share['ratio']:.3f}x; goal <= 1.10x: {'met' if share['ratio'] <= 1.1 else 'NOT met'})"
    )
    rev = os.environ.get("BENCH_TRACE_BASELINE")
    if rev:
        result["against_baseline"] = base = against_baseline(folder, rev)
        print(
            f"analyze-traces from this tree vs {rev}, best of {REPEAT} each: "
            f"{base['best']['this tree']['wall_s']:.2f} s vs {base['best'][rev]['wall_s']:.2f} s "
            f"wall ({base['wall_ratio']:.3f}x), CPU {base['cpu_ratio']:.3f}x"
        )
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "traces.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
