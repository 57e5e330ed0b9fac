"""Trace reader and per-rank timelines: hand-written traces whose every number is worked out
below, emulated jobs checked against the emulator's own arithmetic, and bad files."""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

import pytest

from itwin_report.emulator import kineto
from itwin_report.traces.analyze import analyze_traces, find_traces, read_all
from itwin_report.traces.reader import (
    COMMUNICATION,
    COMPUTE,
    MEMORY,
    kernel_kind,
    operator_kind,
    read_trace,
)
from itwin_report.traces.timeline import analyse, merge
from itwin_report.util.errors import NothingMeasured, ReportError


def _host(name: str, ts: float, dur: float, corr: int | None = None, cat: str = "cuda_runtime"):
    args = {} if corr is None else {"correlation": corr}
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": 1,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def _kernel(name: str, ts: float, dur: float, corr: int, stream: int = 7, cat: str = "kernel"):
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 0,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {"device": 0, "stream": stream, "correlation": corr},
    }


# Three profiler steps at 0, 100, 200 µs; the kernels launched in the first two count.
#   c1 compute  10.2 + 19.9 -> rounded [11, 30]     (start up, end down: 30.1 -> 30)
#   c2 NCCL     [25, 45]
#   c3 memcpy   [50, 55]
#   c4 compute  [110, 140], c5 compute [120, 130] (under c4: counted once)
#   c6 compute  launched in the last step: left out; c7 has no host launch: left out
# merged: [11, 45] [50, 55] [110, 140] -> busy 34 + 5 + 30 = 69, span 140 - 11 = 129,
# idle 60, compute 19 + 30 = 49, communication 20, memory 5, overlap [25, 30] = 5 (25 % of
# the communication), exposed communication 15, non-compute 129 - 49 - 60 = 20.
HAND_EVENTS = [
    {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}},
    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 0, "dur": 400},
    _host("ProfilerStep#1", 0, 100, cat="user_annotation"),
    _host("ProfilerStep#2", 100, 100, cat="user_annotation"),
    _host("ProfilerStep#3", 200, 100, cat="user_annotation"),
    _host("cudaLaunchKernel", 1, 1, 1),
    _host("cudaLaunchKernel", 2, 1, 2),
    _host("cudaMemcpyAsync", 3, 1, 3),
    _host("cudaLaunchKernel", 101, 1, 4),
    _host("cudaLaunchKernel", 102, 1, 5),
    _host("cudaLaunchKernel", 201, 1, 6),
    _kernel("ampere_sgemm_128x64_tn", 10.2, 19.9, 1),
    _kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", 25, 20, 2, stream=20),
    _kernel("Memcpy HtoD (Pageable -> Device)", 50, 5, 3, cat="gpu_memcpy"),
    _kernel("void at::native::vectorized_elementwise_kernel<4>", 110, 30, 4),
    _kernel("void at::native::reduce_kernel<512, 1>", 120, 10, 5),
    _kernel("ampere_sgemm_128x64_tn", 210, 50, 6),
    _kernel("ampere_sgemm_128x64_tn", 60, 5, 999),
    {
        "ph": "X",
        "cat": "gpu_user_annotation",
        "name": "ProfilerStep#1",
        "pid": 0,
        "tid": 7,
        "ts": 0,
        "dur": 300,
        "args": {"External id": 1},  # as Kineto writes it: no stream
    },
    {"ph": "f", "id": 2, "pid": 0, "tid": 20, "ts": 25, "cat": "ac2g", "name": "ac2g"},
]
HAND_DOC = {
    "schemaVersion": 1,
    "deviceProperties": [{"id": 0, "name": "NVIDIA A100"}],
    "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 4},
    "traceEvents": HAND_EVENTS,
    "traceName": "worker_3",
    "baseTimeNanoseconds": 1_700_000_000_000_000_000,
}


def _write(path: Path, doc: object, gz: bool = False) -> Path:
    text = json.dumps(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_hand_written_trace_breaks_down_as_worked_out(tmp_path: Path, gz: bool) -> None:
    name = "worker_3.1.pt.trace.json" + (".gz" if gz else "")
    path = _write(tmp_path / name, HAND_DOC, gz)
    raw = read_trace(path)
    assert raw.meta["distributedInfo"]["rank"] == 3
    assert raw.meta["baseTimeNanoseconds"] == 1_700_000_000_000_000_000
    t = analyse(raw, str(path))
    assert (t.rank, t.world_size, t.device, t.steps) == (3, 4, "gpu", 2)
    assert t.span_s == pytest.approx(129e-6)
    assert t.compute_s == pytest.approx(49e-6)
    assert t.communication_s == pytest.approx(20e-6)
    assert t.memory_s == pytest.approx(5e-6)
    assert t.idle_s == pytest.approx(60e-6)
    assert t.exposed_communication_s == pytest.approx(15e-6)
    assert t.compute_pct == 37.98  # 49 / 129
    assert t.idle_pct == 46.51  # 60 / 129
    assert t.non_compute_pct == 15.5  # 20 / 129
    assert t.overlap_pct == 25.0  # 5 / 20
    assert t.compute_per_step_s == pytest.approx(24.5e-6)
    assert t.launch_lag_s == pytest.approx(2e-6)  # the all-reduce launched 2 µs into step 1


def test_kernels_of_negative_duration_are_dropped_with_a_note(tmp_path: Path) -> None:
    # the hand-written trace plus two impossible kernels launched in step 1 (a -500 µs one
    # would make compute negative): dropped, the breakdown is the hand-worked one
    events = [
        *HAND_EVENTS,
        _host("cudaLaunchKernel", 4, 1, 7),
        _host("cudaLaunchKernel", 5, 1, 8),
        _kernel("ampere_sgemm_128x64_tn", 60, -500, 7),
        _kernel("ampere_sgemm_128x64_tn", 70, -0.5, 8),
    ]
    path = _write(tmp_path / "worker_3.1.pt.trace.json", {**HAND_DOC, "traceEvents": events})
    t = analyse(read_trace(path), str(path))
    assert t.span_s == pytest.approx(129e-6) and t.compute_s == pytest.approx(49e-6)
    assert t.compute_pct == 37.98 and t.idle_pct == 46.51
    assert t.notes == ["dropped 2 GPU kernel(s) with a negative duration"]


def _device_step(n: int, ts: float, dur: float) -> dict[str, object]:
    """A device-side step annotation as Kineto writes it (no stream)."""
    event = {"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}", "pid": 0}
    return {**event, "tid": 7, "ts": ts, "dur": dur, "args": {"External id": n}}


def test_collective_launch_delay_is_counted_from_the_hosts_step(tmp_path: Path) -> None:
    """The host runs ahead of the GPU: each device-side step annotation starts 50-80 µs after
    the host's, and each all-reduce is launched after it. The delay is from the host's step
    start: step 1 launches at 60 (60 µs in), step 2 at 180 (80 µs in), a mean of 70 µs (from
    the device-side starts it would be 10 µs each). The last step (from 280, the device-side
    ProfilerStep#3) is left out; the compute launched at 205, before it, counts."""
    nccl = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
    events = [
        *(_host(f"ProfilerStep#{n}", 100 * (n - 1), 100, cat="user_annotation") for n in (1, 2, 3)),
        _device_step(1, 50, 110),
        _device_step(2, 170, 100),
        _device_step(3, 280, 50),
        *(_host("cudaLaunchKernel", t, 1, c) for t, c in ((5, 1), (60, 2), (105, 3), (180, 4))),
        _host("cudaLaunchKernel", 205, 1, 5),
        _kernel("ampere_sgemm_128x64_tn", 50, 60, 1),
        _kernel(nccl, 110, 50, 2, stream=20),
        _kernel("ampere_sgemm_128x64_tn", 170, 60, 3),
        _kernel(nccl, 230, 40, 4, stream=20),
        _kernel("ampere_sgemm_128x64_tn", 280, 50, 5),
    ]
    raw = read_trace(_write(tmp_path / "w.pt.trace.json", {"traceEvents": events}))
    assert raw.step_device.tolist() == [0, 0, 0, 1, 1, 1]
    t = analyse(raw, "w")
    assert t.launch_lag_s == pytest.approx(70e-6)
    # span 50 .. 330; compute 60 + 60 + 50 = 170; communication 50 + 40 = 90, none under compute
    assert t.steps == 2 and t.span_s == pytest.approx(280e-6)
    assert t.compute_s == pytest.approx(170e-6) and t.idle_s == pytest.approx(20e-6)


def test_one_step_trace_is_analysed_whole_with_a_note(tmp_path: Path) -> None:
    events = [e for e in HAND_EVENTS if e.get("name") not in ("ProfilerStep#2", "ProfilerStep#3")]
    t = analyse(read_trace(_write(tmp_path / "w.json", {"traceEvents": events})), "w")
    # c6 [210, 260] now counts; c7 has no launch but the window is not applied
    assert t.steps == 1
    assert t.span_s == pytest.approx((260 - 11) * 1e-6)
    assert t.compute_s == pytest.approx((19 + 30 + 50 + 5) * 1e-6)
    assert "one profiler step" in t.notes[0]
    assert t.rank is None and t.world_size is None


def test_kernel_and_operator_kinds() -> None:
    assert kernel_kind("ncclKernel_AllReduce_RING_LL_Sum_float") == COMMUNICATION
    assert kernel_kind("ncclDevKernel_AllGather_RING_LL(ncclDevComm*)") == COMMUNICATION
    assert kernel_kind("rccl_AllReduce") == COMMUNICATION
    assert kernel_kind("hcclAllReduce") == COMMUNICATION
    assert kernel_kind("Memcpy DtoH (Device -> Pinned)") == MEMORY
    assert kernel_kind("Memset (Device)") == MEMORY
    assert kernel_kind("dma_copy") == MEMORY
    assert kernel_kind("void at::native::nccl_like_name") == COMPUTE
    assert kernel_kind("volta_sgemm_128x64_nn") == COMPUTE
    assert operator_kind("gloo:all_reduce") == COMMUNICATION
    assert operator_kind("c10d::allreduce_") == COMMUNICATION
    assert operator_kind("record_param_comms") == COMMUNICATION
    assert operator_kind("aten::copy_") == MEMORY
    assert operator_kind("aten::addmm") == COMPUTE


def test_merge_counts_nested_and_touching_intervals_once() -> None:
    import numpy as np

    s, e = merge(np.array([5.0, 0.0, 2.0, 10.0]), np.array([8.0, 4.0, 3.0, 12.0]))
    assert s.tolist() == [0.0, 5.0, 10.0] and e.tolist() == [4.0, 8.0, 12.0]
    s, e = merge(np.array([0.0, 4.0]), np.array([4.0, 6.0]))  # touching: one group (HTA)
    assert s.tolist() == [0.0] and e.tolist() == [6.0]


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_emulated_ranks_match_the_emulators_arithmetic(tmp_path: Path, device: str) -> None:
    spec = kineto.RankSpec(rank=1, world_size=2, steps=6, overlap_us=700.0, device=device)
    path = kineto.write(spec, tmp_path)
    row = analyze_traces([path]).ranks[0].row()
    truth = kineto.truth(spec)
    assert row["device"] == device and row["steps"] == truth["steps"] == 5
    for key, value in truth.items():
        if key != "steps":
            assert row[key] == pytest.approx(value, abs=0.005 if key.endswith("pct") else 1e-9)
    if device == "gpu":
        # by hand: 5 steps of 10 ms, each busy 0.5 + 6 + (2 - 0.7) = 7.8 ms, and the last
        # step's 0.5 ms copy, launched 40 µs before the device-side ProfilerStep#6 starts
        assert row["span_s"] == pytest.approx(5 * 0.010 + 0.0005)
        assert row["memory_s"] == pytest.approx(6 * 0.0005)
        assert row["idle_s"] == pytest.approx(5 * (0.010 - 0.0078))
    else:  # no device-side annotation: the last step starts at the host's, before its copy
        assert row["span_s"] == pytest.approx(4 * 0.010 + 0.0078)
        assert row["memory_s"] == pytest.approx(5 * 0.0005)
    assert row["overlap_pct"] == 35.0


def test_eight_identical_ranks_name_no_straggler(tmp_path: Path) -> None:
    for spec in kineto.job(8):
        kineto.write(spec, tmp_path / "ddp-8" / "torch-traces", gz=spec.rank % 2 == 0)
    result = analyze_traces([tmp_path])
    assert [r.rank for r in result.ranks] == list(range(8))
    assert result.stragglers == [] and result.warnings == []


def test_a_rank_slowed_by_20_percent_is_named(tmp_path: Path) -> None:
    for spec in kineto.job(8, slow_rank=5):
        kineto.write(spec, tmp_path)
    result = analyze_traces([tmp_path])
    named = {(s["measure"], tuple(s["ranks"])) for s in result.stragglers}
    assert named == {("compute per step", (5,)), ("collective launch delay per step", (5,))}
    first = next(s for s in result.stragglers if s["measure"] == "compute per step")
    assert first["ratio"] == pytest.approx(1.2)  # 7.2 ms vs 6 ms of compute per step
    assert first["text"].startswith("rank 5: compute per step 1.20× the median of 8 ranks")


def test_repeated_jobs_in_one_folder_are_compared_apart(tmp_path: Path) -> None:
    folder = tmp_path / "ddp-4" / "torch-traces"
    for stamp, slow in ((1, None), (2, 2)):
        for spec in kineto.job(4, slow_rank=slow):
            kineto.write(spec, folder, stamp=stamp)
    result = analyze_traces([folder])
    assert len(result.ranks) == 8 and result.warnings == []
    assert {s["job"] for s in result.stragglers} == {f"{folder} (job 2 of 2)"}


def test_a_rank_twice_is_a_warning(tmp_path: Path) -> None:
    for spec in kineto.job(4):
        kineto.write(spec, tmp_path)
    kineto.write(kineto.RankSpec(rank=1, world_size=4), tmp_path, stamp=9)
    result = analyze_traces([tmp_path])
    assert len(result.ranks) == 5
    assert [w.kind for w in result.warnings] == ["duplicate"]
    assert "rank 1 appears 2 times" in result.warnings[0]
    assert "worker_1.9.pt.trace.json" in result.warnings[0]


def test_bad_traces_are_warnings_naming_the_file(tmp_path: Path) -> None:
    good = kineto.write(kineto.RankSpec(rank=0, world_size=2), tmp_path)
    gz = kineto.write(kineto.RankSpec(rank=1, world_size=2), tmp_path / "cut", gz=True)
    gz.write_bytes(gz.read_bytes()[:300])
    bad = {
        "truncated or corrupt gzip": gz,
        "not JSON": _raw(tmp_path / "w_2.pt.trace.json", b"<html>oops</html>"),
        "empty file": _raw(tmp_path / "w_3.pt.trace.json", b""),
        "truncated or malformed JSON": _raw(
            tmp_path / "w_4.pt.trace.json", good.read_bytes()[: good.stat().st_size // 2]
        ),
        "no GPU kernels or CPU operators": _write(
            tmp_path / "w_5.pt.trace.json", {"traceEvents": HAND_EVENTS[:3]}
        ),
    }
    result = analyze_traces([tmp_path])
    assert [r.file for r in result.ranks] == [str(good)]
    texts = [str(w) for w in result.warnings]
    for why, path in bad.items():
        assert any(t.startswith(f"{path}: {why}") for t in texts), (why, texts)
    assert all("\n" not in t for t in texts)


def _raw(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_fifo_and_a_2_gb_file_neither_hang_nor_crash(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "worker_0.1.pt.trace.json"
    os.mkfifo(fifo)
    huge = tmp_path / "worker_1.1.pt.trace.json"
    with open(huge, "wb") as fh:
        fh.truncate(2 << 30)  # sparse: 2 GiB of NUL bytes, not JSON
    kineto.write(kineto.RankSpec(rank=2, world_size=3), tmp_path)
    result = analyze_traces([tmp_path])
    assert [r.rank for r in result.ranks] == [2]
    texts = [str(w) for w in result.warnings]
    assert f"{fifo}: not a regular file" in texts
    assert any(t.startswith(f"{huge}: not JSON") for t in texts)


def test_nothing_to_analyse_and_missing_paths(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no such file or folder"):
        analyze_traces([tmp_path / "missing"])
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(NothingMeasured, match=r"no trace files"):
        analyze_traces([tmp_path])
    _raw(tmp_path / "worker_0.1.pt.trace.json", b"{")
    with pytest.raises(NothingMeasured, match=r"no trace could be analysed: .*worker_0"):
        analyze_traces([tmp_path])


def test_rank_from_the_file_name_when_the_trace_has_none(tmp_path: Path) -> None:
    doc = {k: v for k, v in HAND_DOC.items() if k != "distributedInfo"}
    path = _write(tmp_path / "worker_6.123.pt.trace.json", doc)
    other = _write(tmp_path / "trace.pt.trace.json", doc)
    result = analyze_traces([tmp_path])
    assert {r.file: r.rank for r in result.ranks} == {str(path): 6, str(other): None}
    # the hand-written NCCL kernel has no message sizes in its args: one note per file
    assert sorted(w.kind for w in result.warnings) == ["rank", "unsized", "unsized"]


def test_files_are_found_once_and_never_changed(tmp_path: Path) -> None:
    path = kineto.write(kineto.RankSpec(), tmp_path / "a" / "torch-traces", gz=True)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    assert find_traces([tmp_path, path, tmp_path / "a"]) == [path]
    analyze_traces([tmp_path])
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before


def test_parallel_reading_gives_the_serial_result(tmp_path: Path, monkeypatch) -> None:
    from itwin_report.traces import analyze

    paths = [kineto.write(s, tmp_path) for s in kineto.job(3, slow_rank=1)]
    serial = read_all(paths)
    monkeypatch.setattr(analyze, "PARALLEL_MIN_BYTES", 0)
    parallel = read_all(paths, jobs=2)
    assert [r.row() for r in parallel] == [r.row() for r in serial]  # type: ignore[union-attr]
    assert not math.isnan(parallel[0].span_s)  # type: ignore[union-attr]


def test_trace_text_is_counted_uncompressed_and_a_fifo_is_never_opened(tmp_path: Path) -> None:
    import os

    from itwin_report.traces.analyze import text_bytes

    text = json.dumps(kineto.document(kineto.RankSpec(steps=40))).encode()
    plain = _raw(tmp_path / "plain.pt.trace.json", text)
    packed = _raw(tmp_path / "packed.pt.trace.json.gz", gzip.compress(text))
    assert packed.stat().st_size < len(text) // 5  # the emulator's text packs well
    assert text_bytes(plain) == text_bytes(packed) == len(text)
    fifo = tmp_path / "fifo.pt.trace.json"
    os.mkfifo(fifo)
    assert text_bytes(fifo) == 0 and text_bytes(tmp_path / "missing") == 0


def test_a_pool_starts_only_for_enough_trace_text(tmp_path: Path, monkeypatch) -> None:
    from itwin_report.traces import analyze, workers

    made: list[int] = []

    def in_this_process(fn, items, count):  # type: ignore[no-untyped-def]
        made.append(count)
        return [fn(item) for item in items]

    monkeypatch.setattr(workers, "map_in_workers", in_this_process)
    paths = [kineto.write(s, tmp_path, gz=True) for s in kineto.job(3, steps=40)]
    text = sum(len(gzip.decompress(p.read_bytes())) for p in paths)
    disk = sum(p.stat().st_size for p in paths)
    monkeypatch.setattr(analyze, "PARALLEL_MIN_BYTES", text + 1)  # just too little text
    serial = read_all(paths, jobs=2)
    assert made == []
    monkeypatch.setattr(analyze, "PARALLEL_MIN_BYTES", text)  # far above the bytes on disk
    assert disk < text // 5
    parallel = read_all(paths, jobs=2)
    assert made == [2]
    assert [r.row() for r in parallel] == [r.row() for r in serial]  # type: ignore[union-attr]
    if sys.platform.startswith("linux"):  # forked from a server that imported the reader
        assert workers.pool_context().get_start_method() == "forkserver"
        assert "itwin_report.traces.analyze" in workers.PRELOAD
        assert workers.PRELOAD[0] == "itwin_report.traces.ignore_sigint"  # before anything


@pytest.mark.parametrize("gz", [False, True])
def test_the_emulator_streams_the_document_it_describes(tmp_path: Path, gz: bool) -> None:
    spec = kineto.RankSpec(rank=2, world_size=4, steps=3)
    path = kineto.write(spec, tmp_path, gz=gz)
    data = gzip.decompress(path.read_bytes()) if gz else path.read_bytes()
    assert json.loads(data) == kineto.document(spec)
