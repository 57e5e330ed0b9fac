"""``analyze-traces`` against Holistic Trace Analysis itself (``make test-hta``).

HTA 0.5.0 runs in its own venv (``.venv-hta``, named by ``ITWIN_HTA_PYTHON``) as a subprocess on
the same files as ``itwin-report analyze-traces --format json``: per rank, the compute, non-compute
and idle percentages must be within one percentage point of HTA's ``get_temporal_breakdown``,
and the overlap within one point of its ``get_comm_comp_overlap``. The trace sets: emulated GPU
jobs (NCCL under compute, copies, idle gaps, a slow rank) and small hand-written traces that each
exercise one of HTA's rules (the window without the last step, the device-side step annotation,
rounding, synchronisation and oddly named kernels, several streams, a single step).

Each set is analysed by HTA apart (its symbol table spans all ranks of a folder). The
hand-written sets are also checked against numbers worked out by hand, in the default suite.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from itwin_report.emulator import kineto

METRICS = ("compute_pct", "non_compute_pct", "idle_pct", "overlap_pct")
TOLERANCE = 1.0  # percentage points

HTA_SCRIPT = r"""
import json, logging, math, sys
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis

def pct(frame, column, rank):
    value = float(frame.loc[frame["rank"] == rank, column].iloc[0])
    return None if math.isnan(value) else value

out = {}
for folder in sys.argv[1:]:
    analyzer = TraceAnalysis(trace_dir=folder)
    breakdown = analyzer.get_temporal_breakdown(visualize=False)
    try:
        overlap = analyzer.get_comm_comp_overlap(visualize=False)
    except Exception:  # no communication kernel at all
        overlap = None
    ranks = {}
    for rank in breakdown["rank"]:
        rank = int(rank)
        ranks[rank] = {
            "compute_pct": pct(breakdown, "compute_time_pctg", rank),
            "non_compute_pct": pct(breakdown, "non_compute_time_pctg", rank),
            "idle_pct": pct(breakdown, "idle_time_pctg", rank),
            "overlap_pct": None if overlap is None
            else pct(overlap, "comp_comm_overlap_pctg", rank),
        }
    out[folder] = ranks
print("HTA-RESULT " + json.dumps(out))
"""


def _hta_python() -> str:
    """HTA's Python: skipped where no venv is named (a run selecting by other markers), failed
    where the one named is missing."""
    path = os.environ.get("ITWIN_HTA_PYTHON", "")
    if not path:
        pytest.skip("ITWIN_HTA_PYTHON names no Python with HTA: run make test-hta")
    if not os.access(path, os.X_OK):
        pytest.fail(f"ITWIN_HTA_PYTHON={path} is not an executable: run make test-hta")
    return path


def _hta(folders: list[Path]) -> dict[str, dict[int, dict[str, float | None]]]:
    done = subprocess.run(
        [_hta_python(), "-c", HTA_SCRIPT, *map(str, folders)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("HTA-RESULT "))
    raw = json.loads(line.removeprefix("HTA-RESULT "))
    return {k: {int(r): v for r, v in ranks.items()} for k, ranks in raw.items()}


def _ours(folders: list[Path]) -> dict[str, dict[int, dict[str, Any]]]:
    command = [sys.executable, "-m", "itwin_report", "analyze-traces", *map(str, folders)]
    done = subprocess.run(
        [*command, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for row in json.loads(done.stdout)["ranks"]:
        out.setdefault(str(Path(row["file"]).parent), {})[row["rank"]] = row
    return out


def _write(folder: Path, rank: int, doc: dict[str, Any], gz: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"worker_{rank}.1.pt.trace.json"
    text = json.dumps(doc)
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def _emulated(folder: Path, specs: list[kineto.RankSpec]) -> None:
    for spec in specs:
        _write(folder, spec.rank, kineto.document(spec), gz=spec.rank % 2 == 1)


def _host(name: str, ts: float, dur: float, corr: int | None = None, cat: str = "cuda_runtime"):
    args = {} if corr is None else {"correlation": corr}
    event = {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}
    return {**event, "args": args}


def _kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7, cat: str = "kernel"):
    args = {"device": 0, "stream": stream, "correlation": corr, "External id": corr}
    event = {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur}
    return {**event, "args": args}


def _step(n: int, ts: float, dur: float, device: bool = False) -> dict[str, Any]:
    if device:  # as Kineto writes it: on the device's row, no stream in its args
        event = {"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}", "pid": 0}
        return {**event, "tid": 7, "ts": ts, "dur": dur, "args": {"External id": n}}
    return _host(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")


def _doc(events: list[dict[str, Any]], rank: int = 0, world: int = 1) -> dict[str, Any]:
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100"}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "ts": 0, "args": {}},
            {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 0, "dur": 900},
            *events,
        ],
        "traceName": f"worker_{rank}",
    }


NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1"


def _window_and_rounding() -> list[dict[str, Any]]:
    """Three steps; fractional times; the device-side annotation of the last step starts after
    the host's, so a kernel launched in between still counts; a launch in the same microsecond
    as the last step's start (rounded up) does not; a kernel with no launch does not."""
    return [
        _step(1, 0.4, 100.2),
        _step(2, 100.6, 100.1),
        _step(3, 200.7, 100.0),
        _step(1, 5.3, 95.0, device=True),
        _step(2, 108.1, 90.0, device=True),
        _step(3, 215.2, 60.0, device=True),
        _host("cudaLaunchKernel", 1.2, 3.1, 1),
        _host("cudaLaunchKernel", 2.5, 3.0, 2),
        _host("cudaMemcpyAsync", 3.9, 2.2, 3),
        _host("cudaLaunchKernel", 101.3, 2.0, 4),
        _host("cudaLaunchKernel", 102.9, 2.0, 5),
        _host("cudaMemsetAsync", 103.4, 1.0, 6),
        _host("cudaLaunchKernel", 201.5, 2.0, 7),  # after the host's last step, before the device's
        _host("cudaLaunchKernel", 215.1, 1.0, 8),  # rounds up to the device's last step: out
        _host("cudaLaunchKernel", 230.0, 2.0, 9),
        _kernel(GEMM, 5.3, 30.45, 1),
        _kernel(NCCL, 25.6, 20.2, 2, stream=20),
        _kernel("Memcpy HtoD (Pageable -> Device)", 50.5, 5.7, 3, cat="gpu_memcpy"),
        _kernel("void at::native::vectorized_elementwise_kernel<4>", 108.1, 30.3, 4),
        _kernel("void at::native::reduce_kernel<512, 1>", 120.2, 10.1, 5, stream=13),
        _kernel("Memset (Device)", 150.2, 3.3, 6, cat="gpu_memset"),
        _kernel(GEMM, 215.2, 10.0, 7),
        _kernel(NCCL, 226.0, 14.0, 8, stream=20),
        _kernel(GEMM, 240.0, 50.0, 9),
        _kernel(GEMM, 60.0, 5.0, 999),  # no launch in the trace
    ]


def _odd_kernels() -> list[dict[str, Any]]:
    """Kernels HTA counts as neither compute nor communication nor memory (``Sync`` or
    ``Memcpy`` inside the name, a stream synchronisation), NCCL on two streams, a DMA copy."""
    return [
        _step(1, 0.0, 100.0),
        _step(2, 100.0, 100.0),
        _step(3, 200.0, 100.0),
        *[_host("cudaLaunchKernel", 1.0 + i, 0.5, 10 + i) for i in range(8)],
        _kernel(GEMM, 10.0, 40.0, 10),
        _kernel("void cudnn::bn_fw_tr_1C11_SyncBatchNorm_kernel<float>", 50.0, 10.0, 11),
        _kernel("void at::native::unrolled_elementwise_kernel_Memcpy<float>", 60.0, 8.0, 12),
        {**_kernel("Stream Sync", 68.0, 6.0, 13), "cat": "cuda_sync"},
        _kernel(NCCL, 30.0, 25.0, 14, stream=20),
        _kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)", 45.0, 30.0, 15, stream=21),
        _kernel("dma_copy_h2d", 80.0, 4.0, 16, cat="gpu_memcpy"),
        _kernel(GEMM, 90.0, 5.0, 17),
    ]


def _whole_microseconds() -> list[dict[str, Any]]:
    """Every timestamp a whole number (so HTA does not round), fractional durations."""
    return [
        _step(1, 0, 50),
        _step(2, 50, 50),
        _step(3, 100, 50),
        *[_host("cudaLaunchKernel", 1 + i, 1, 20 + i) for i in range(4)],
        _host("cudaLaunchKernel", 51, 1, 24),
        _kernel(GEMM, 3, 10.5, 20),
        _kernel(GEMM, 13, 4.25, 21),  # overlaps the first: 3 .. 17.25, unrounded
        _kernel(NCCL, 15, 9.5, 22, stream=20),
        _kernel("Memcpy DtoH (Device -> Pinned)", 30, 2.5, 23, cat="gpu_memcpy"),
        _kernel(GEMM, 60, 20.75, 24),
    ]


def _one_step() -> list[dict[str, Any]]:
    """A single profiler step: HTA analyses the whole trace, kernels without a launch too."""
    return [
        _step(1, 0.0, 100.0),
        _host("cudaLaunchKernel", 1.0, 1.0, 30),
        _host("cudaLaunchKernel", 2.0, 1.0, 31),
        _kernel(GEMM, 10.5, 30.0, 30),
        _kernel(NCCL, 20.0, 40.0, 31, stream=20),
        _kernel(GEMM, 120.0, 10.0, 99),
    ]


HAND_SETS = {
    "window-rounding": _window_and_rounding,
    "odd-kernels": _odd_kernels,
    "whole-us": _whole_microseconds,
    "one-step": _one_step,
}

# each hand-written set worked out by hand (µs): merged intervals, kinds, window
#   window-rounding: kernels 1-7 rounded: c[6,35] n[26,45] m[51,56] c[109,138] c[121,130]
#     m[151,153] c[216,225]; busy 39+5+29+2+9 = 84 of the span 219, compute 29+29+9 = 67,
#     communication 19, memory 7, overlap [26,35] = 9
#   odd-kernels: c[10,50] o[50,60] o[60,68] o[68,74] n[30,55] n[45,75] m[80,84] c[90,95]; busy
#     65+4+5 = 74 of 85, compute 45, communication [30,75] 45, memory 4, overlap [30,50] = 20
#   whole-us (not rounded): c[3,13.5] c[13,17.25] n[15,24.5] m[30,32.5] c[60,80.75]; busy
#     21.5+2.5+20.75 = 44.75 of 77.75, compute 14.25+20.75 = 35, communication 9.5, memory
#     2.5, overlap [15,17.25] = 2.25
#   one-step (all kernels): c[11,40] n[20,60] c[120,130]; busy 49+10 = 59 of 119, compute 39,
#     communication 40, overlap 20
WORKED_OUT = {  # steps, span, compute, communication, memory, idle (µs)
    "window-rounding": (2, 219, 67, 19, 7, 135),
    "odd-kernels": (2, 85, 45, 45, 4, 11),
    "whole-us": (2, 77.75, 35, 9.5, 2.5, 33),
    "one-step": (1, 119, 39, 40, 0, 60),
}
OVERLAP = {"window-rounding": 9, "odd-kernels": 20, "whole-us": 2.25, "one-step": 20}


@pytest.mark.parametrize("name", sorted(HAND_SETS))
def test_hand_written_sets_break_down_as_worked_out(tmp_path: Path, name: str) -> None:
    from itwin_report.traces.analyze import analyze_traces

    path = _write(tmp_path, 0, _doc(HAND_SETS[name]()), gz=name == "odd-kernels")
    row = analyze_traces([path]).ranks[0].row()
    steps, span, compute, comm, memory, idle = WORKED_OUT[name]
    assert row["steps"] == steps
    for key, value in zip(
        ("span_s", "compute_s", "communication_s", "memory_s", "idle_s"),
        (span, compute, comm, memory, idle),
        strict=True,
    ):
        assert row[key] == pytest.approx(value * 1e-6, abs=1e-12), key
    assert row["compute_pct"] == round(100 * compute / span, 2)
    assert row["idle_pct"] == round(100 * idle / span, 2)
    assert row["non_compute_pct"] == round(100 * (span - compute - idle) / span, 2)
    assert row["overlap_pct"] == round(100 * OVERLAP[name] / comm, 2)


EMULATED_SETS = {
    "ddp-slow-rank": kineto.job(4, slow_rank=2, steps=8),
    "no-overlap": kineto.job(2, steps=6, overlap_us=0.0, step_us=12_000.0),
    "hidden": kineto.job(2, steps=6, overlap_us=2_500.0, comm_us=2_000.0, copy_us=900.0),
    "busy": kineto.job(3, steps=5, step_us=9_000.0, compute_us=7_000.0, comm_us=1_600.0),
    # a step shorter than the host's lead: the last step's copy, three of its four kernels and
    # its all-reduce are launched before its device-side annotation starts, so they count
    "short-copy": kineto.job(
        2, steps=5, step_us=400.0, copy_us=10.0, compute_us=40.0, comm_us=30.0, overlap_us=25.0
    ),
}


def test_emulated_sets_break_down_as_their_truth(tmp_path: Path) -> None:
    from itwin_report.traces.analyze import analyze_traces

    for name, specs in EMULATED_SETS.items():
        _emulated(tmp_path / name, specs)
        rows = {r.rank: r.row() for r in analyze_traces([tmp_path / name]).ranks}
        for spec in specs:
            for key, value in kineto.truth(spec).items():
                got = rows[spec.rank][key]
                where = f"{name} rank {spec.rank} {key}"
                if key.endswith("pct"):
                    assert got == pytest.approx(round(value, 2), abs=1e-9), where
                else:
                    assert got == pytest.approx(value, abs=1e-12), where


def test_a_short_step_is_worked_out_by_hand() -> None:
    """The short-copy set by hand (µs): 4 steps of 400 analysed, each busy 10 + 40 + 5 = 55;
    of the last step (at 1600) the kernels starting before 40 count: the copy [0, 10], compute
    [10, 40] (three of the four 10-µs kernels), the all-reduce [25, 55] (15 of it under that
    compute): span 1600 + 55, compute 4 x 40 + 30, communication 5 x 30, overlap 4 x 25 + 15."""
    truth = kineto.truth(EMULATED_SETS["short-copy"][0])
    assert truth["steps"] == 4
    assert truth["span_s"] == pytest.approx(1655e-6)
    assert truth["compute_s"] == pytest.approx(190e-6)
    assert truth["communication_s"] == pytest.approx(150e-6)
    assert truth["memory_s"] == pytest.approx(50e-6)
    assert truth["idle_s"] == pytest.approx(4 * (400 - 55) * 1e-6)
    assert truth["exposed_communication_s"] == pytest.approx((150 - 115) * 1e-6)
    assert truth["overlap_pct"] == pytest.approx(100 * 115 / 150)


@pytest.fixture(scope="module")
def trace_sets(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    _hta_python()
    root = tmp_path_factory.mktemp("hta")
    folders = []
    for name, specs in EMULATED_SETS.items():
        _emulated(root / name, specs)
        folders.append(root / name)
    for name, events in HAND_SETS.items():
        _write(root / name, 0, _doc(events()), gz=name == "odd-kernels")
        folders.append(root / name)
    return folders


@pytest.fixture(scope="module")
def hta_results(trace_sets: list[Path]) -> dict[str, dict[int, dict[str, float | None]]]:
    return _hta(trace_sets)


@pytest.mark.hta
def test_breakdown_and_overlap_agree_with_hta(
    trace_sets: list[Path], hta_results: dict[str, dict[int, dict[str, float | None]]]
) -> None:
    theirs, ours = hta_results, _ours(trace_sets)
    worst = dict.fromkeys(METRICS, 0.0)
    for folder in map(str, trace_sets):
        assert sorted(ours[folder]) == sorted(theirs[folder]), folder
        for rank, hta_row in theirs[folder].items():
            row = ours[folder][rank]
            for metric in METRICS:
                mine, reference = row[metric], hta_row[metric]
                where = f"{Path(folder).name} rank {rank} {metric}: ours {mine}, HTA {reference}"
                if reference is None or math.isnan(reference):
                    assert mine is None, where
                    continue
                assert mine is not None, where
                assert abs(mine - reference) <= TOLERANCE, where
                worst[metric] = max(worst[metric], abs(mine - reference))
    print("largest difference from HTA, percentage points:", worst)


@pytest.mark.hta
def test_the_emulators_truth_is_what_hta_finds(
    hta_results: dict[str, dict[int, dict[str, float | None]]],
) -> None:
    """kineto.truth states what HTA itself finds on the emulated traces (to its rounding)."""
    for folder, ranks in hta_results.items():
        if Path(folder).name not in EMULATED_SETS:
            continue
        specs = {s.rank: s for s in EMULATED_SETS[Path(folder).name]}
        assert sorted(ranks) == sorted(specs), folder
        for rank, hta_row in ranks.items():
            truth = kineto.truth(specs[rank])
            for metric in METRICS:
                where = f"{Path(folder).name} rank {rank} {metric}"
                reference = hta_row[metric]
                if truth[metric] != truth[metric]:
                    assert reference is None or math.isnan(reference), where
                else:
                    assert reference == pytest.approx(truth[metric], abs=0.005), where


LAYOUTS = {  # how a trace's text may be laid out: PyTorch's, json.dump's, Windows line ends
    "one-line": lambda doc: json.dumps(doc),
    "indented": lambda doc: json.dumps(doc, indent=2),
    "pytorch": lambda doc: _pytorch_layout(doc),
    "crlf": lambda doc: _pytorch_layout(doc).replace("\n", "\r\n"),
    "a-line-each": lambda doc: (
        json.dumps({k: v for k, v in doc.items() if k != "traceEvents"})[:-1]
        + ', "traceEvents": ['
        + ",\n".join(json.dumps(e) for e in doc["traceEvents"])
        + "]}"
    ),
}


def _pytorch_layout(doc: dict[str, Any]) -> str:
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    body = ",\n".join(
        "  " + json.dumps(e, indent=2).replace("\n", "\n  ") for e in doc["traceEvents"]
    )
    return json.dumps(head)[:-1] + ', "traceEvents": [\n' + body + '\n  ],"traceName": "w" }'


def _odd_values() -> dict[str, Any]:
    doc = _doc(_window_and_rounding())
    events = doc["traceEvents"]
    events[5]["name"] = 'a "quoted" \\ name, é, ProfilerStep'
    events[6]["args"] = None
    events[7].pop("args")
    events[8]["args"]["nested"] = [{"a": 1}, {"b": [1, 2]}]
    return doc


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_piecewise_and_streaming_reads_keep_the_same(tmp_path: Path, layout: str) -> None:
    """The fast read (pieces through pyarrow) keeps exactly what the streaming read (ijson)
    keeps, or declines and leaves the file to it (all events on one line)."""
    from itwin_report.traces.columns import Columns
    from itwin_report.traces.pieces import read_pieces
    from itwin_report.traces.source import Edges, open_trace
    from itwin_report.traces.streaming import read_streaming

    docs = {name: _doc(events()) for name, events in HAND_SETS.items()}
    docs["gpu"] = kineto.document(kineto.RankSpec(steps=4))
    docs["cpu"] = kineto.document(kineto.RankSpec(steps=4, device="cpu"))
    docs["odd"] = _odd_values()
    nan = _doc(_one_step())
    nan["traceEvents"][2]["name"] = "NaN loss"
    docs["nan"] = nan
    keys = [k for k in vars(Columns()) if k[:2] in ("k_", "h_", "s_", "o_")]
    for name, doc in docs.items():
        for gz in (False, True):
            path = tmp_path / f"{name}.pt.trace.json{'.gz' if gz else ''}"
            text = LAYOUTS[layout](doc).encode()
            path.write_bytes(gzip.compress(text) if gz else text)
            with open_trace(path) as fh:
                slow, slow_edges = Columns(), Edges()
                slow_read = read_streaming(path, fh, slow, slow_edges)
            with open_trace(path) as fh:
                fast, fast_edges = Columns(), Edges()
                fast_read = read_pieces(fh, fast, fast_edges)
            declines = layout == "one-line"
            assert (fast_read is None) == declines, (name, gz)
            if declines:
                continue
            assert fast_read == slow_read == len(text)
            for key in keys:
                assert bytes(getattr(fast, key)) == bytes(getattr(slow, key)), (name, key)
            assert (fast.events, fast.whole_ts) == (slow.events, slow.whole_ts)
            assert fast_edges.meta() == slow_edges.meta()
