"""Collectives from traces: bytes, kernel time, algbw and busbw per rank and collective, worked
out by hand from each kernel's args, in both parsing paths; kernels without sizes counted as
unknown; the emulator's traces carry the args of PyTorch 2.x."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from itwin_report.emulator import kineto, tracing
from itwin_report.emulator.params import ModelParams
from itwin_report.render.traces import write
from itwin_report.traces.analyze import analyze_traces
from itwin_report.traces.columns import Columns
from itwin_report.traces.pieces import read_pieces
from itwin_report.traces.source import Edges, open_trace

CORR = iter(range(1, 10_000))


def _comm(name: str, ts: float, dur: float, **said: object) -> list[dict[str, object]]:
    """A communication kernel (with ``said`` in its args under PyTorch's names) and its
    host launch."""
    corr = next(CORR)
    names = {
        "coll": "Collective name",
        "n_in": "In msg nelems",
        "n_out": "Out msg nelems",
        "dtype": "dtype",
        "group": "Group size",
    }
    args = {"device": 0, "stream": 20, "correlation": corr}
    args.update({names[k]: v for k, v in said.items()})
    launch = {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": 1,
        "ts": ts - 5,
        "dur": 2,
        "args": {"correlation": corr},
    }
    kernel = {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 20,
        "ts": ts,
        "dur": dur,
        "args": args,
    }
    return [launch, kernel]


# (collective as PyTorch names it, in, out elements, dtype, group size, kernel µs), and the
# row expected, worked out by hand: bytes = max(in, out) x the dtype's bytes; algbw = bytes /
# time / 1e9; busbw = algbw x factor (all-reduce 2(n-1)/n; all-gather, reduce-scatter,
# all-to-all (n-1)/n; broadcast, reduce, send, recv 1)
KERNELS = [
    (
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        "allreduce",
        1_048_576,
        1_048_576,
        "Float",
        4,
        1000,
    ),
    (
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        "allreduce",
        1_048_576,
        1_048_576,
        "Float",
        4,
        3000,
    ),
    ("ncclDevKernel_AllGather_RING_LL", "_allgather_base", 262_144, 1_048_576, "BFloat16", 4, 500),
    ("ncclDevKernel_ReduceScatter_Sum", "_reduce_scatter_base", 1_048_576, 262_144, "Half", 4, 250),
    ("ncclDevKernel_SendRecv", "all_to_all", 65_536, 65_536, "Float", 8, 100),
    ("ncclDevKernel_Broadcast_RING_LL", "broadcast", 1_000_000, 1_000_000, "Double", 4, 2000),
    ("ncclDevKernel_Reduce_Sum_i32", "reduce", 500_000, 500_000, "Int", 4, 1000),
    ("ncclDevKernel_SendRecv", "send", 131_072, 131_072, "Byte", 2, 64),
    ("ncclDevKernel_SendRecv", "recv", 131_072, 131_072, "Long", 2, 128),
]
# (collective, group size) -> (kernels, bytes, seconds, algbw GB/s, busbw GB/s)
EXPECTED = {
    # 2 x 1,048,576 x 4 = 8,388,608 bytes in 4,000 µs: 2.097152 GB/s, x 2*3/4
    ("all_reduce", 4): (2, 8_388_608, 0.004, 2.097152, 2.097152 * 1.5),
    # 1,048,576 x 2 = 2,097,152 bytes (the gathered output) in 500 µs: 4.194304, x 3/4
    ("all_gather", 4): (1, 2_097_152, 0.0005, 4.194304, 3.145728),
    # the input: 1,048,576 x 2 = 2,097,152 bytes in 250 µs: 8.388608, x 3/4
    ("reduce_scatter", 4): (1, 2_097_152, 0.00025, 8.388608, 6.291456),
    # 65,536 x 4 = 262,144 bytes in 100 µs: 2.62144, x 7/8
    ("all_to_all", 8): (1, 262_144, 0.0001, 2.62144, 2.29376),
    # 1,000,000 x 8 bytes in 2 ms: 4 GB/s, x 1
    ("broadcast", 4): (1, 8_000_000, 0.002, 4.0, 4.0),
    ("reduce", 4): (1, 2_000_000, 0.001, 2.0, 2.0),
    ("send", 2): (1, 131_072, 0.000064, 2.048, 2.048),
    ("recv", 2): (1, 1_048_576, 0.000128, 8.192, 8.192),
}


def _events() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    ts = 100.0
    for kernel, coll, n_in, n_out, dtype, group, dur in KERNELS:
        out += _comm(kernel, ts, dur, coll=coll, n_in=n_in, n_out=n_out, dtype=dtype, group=group)
        ts += dur + 10
    # launched before the profiling window: no args but stream and correlation
    out += _comm("ncclDevKernel_AllReduce_Sum_f32_RING_LL", ts, 40)
    # an unknown dtype: its size cannot be worked out
    out += _comm("ncclDevKernel_AllReduce", ts + 50, 10, coll="allreduce", n_in=8, dtype="Quux")
    return out


def _write(path: Path, events: list[dict[str, object]], pytorch_layout: bool) -> Path:
    """A trace with PyTorch's layout (an event a line: the fast read) or on one line (ijson)."""
    info = {"backend": "nccl", "rank": 1, "world_size": 4}
    if pytorch_layout:
        body = ",\n  ".join(json.dumps(e) for e in events)
        text = '{\n  "distributedInfo": ' + json.dumps(info)
        text += ',\n  "traceEvents": [\n  ' + body + "\n  ]\n}\n"
    else:
        text = json.dumps({"distributedInfo": info, "traceEvents": events})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("pytorch_layout", [True, False])
def test_each_collective_bytes_time_and_bandwidth_by_hand(
    tmp_path: Path, pytorch_layout: bool
) -> None:
    path = _write(tmp_path / "worker_1.1.pt.trace.json", _events(), pytorch_layout)
    with open_trace(path) as fh:  # the layout decides which parser reads it
        fast = read_pieces(fh, Columns(), Edges())
    assert (fast is not None) == pytorch_layout
    result = analyze_traces([path])
    rows = result.collectives()
    sized = {(r["collective"], r["group_size"]): r for r in rows if r["bytes"] is not None}
    assert set(sized) == set(EXPECTED)
    for key, (count, size, seconds, algbw, busbw) in EXPECTED.items():
        row = sized[key]
        assert row["rank"] == 1 and row["count"] == count and row["bytes"] == size, key
        assert math.isclose(row["time_s"], seconds, rel_tol=1e-12), key
        assert math.isclose(row["algbw_gbps"], algbw, rel_tol=1e-9), key
        assert math.isclose(row["busbw_gbps"], busbw, rel_tol=1e-9), key
    unknown = [r for r in rows if r["bytes"] is None]
    # the kernel without args is named by its kernel name, with no group size; the unknown
    # dtype keeps its group unknown too: both in one unsized all-reduce row
    assert [(r["collective"], r["group_size"], r["count"]) for r in unknown] == [
        ("all_reduce", None, 2)
    ]
    assert math.isclose(unknown[0]["time_s"], 50e-6, rel_tol=1e-12)
    assert unknown[0]["algbw_gbps"] is None and unknown[0]["busbw_gbps"] is None
    assert [w.kind for w in result.warnings] == ["window", "unsized"]
    assert "2 collectives without message sizes" in str(result.warnings[1])
    body = json.loads(write(result, "json"))
    assert list(body["collectives"][0]) == [
        "rank",
        "collective",
        "group_size",
        "count",
        "bytes",
        "time_s",
        "algbw_gbps",
        "busbw_gbps",
    ]
    assert len(body["collectives"]) == len(EXPECTED) + 1
    table = write(result, "table")
    assert "Collectives, per rank" in table
    line = next(x for x in table.splitlines() if "all_reduce" in x and "8388608" in x)
    assert "2.10" in line and "3.15" in line  # algbw, busbw to two decimals


def test_a_trace_without_any_size_counts_its_collectives_as_unknown(tmp_path: Path) -> None:
    events: list[dict[str, object]] = []
    for i in range(3):
        events += _comm("ncclKernel_AllGather_RING_LL_Sum_float", 100 + 100 * i, 20)
    for layout in (True, False):
        path = _write(tmp_path / f"l{layout}" / "worker_0.1.pt.trace.json", events, layout)
        result = analyze_traces([path])
        assert result.collectives() == [
            {
                "rank": 1,
                "collective": "all_gather",
                "group_size": None,
                "count": 3,
                "bytes": None,
                "time_s": 60e-6,
                "algbw_gbps": None,
                "busbw_gbps": None,
            }
        ]
        assert "n/a" in write(result, "table")


def test_the_emulators_collectives_carry_the_models_gradient(tmp_path: Path) -> None:
    p = ModelParams()
    specs = tracing.rank_specs(p, "torch-ddp", 8)
    spec = specs[0]
    for one in specs[:2]:
        kineto.write(one, tmp_path)
    result = analyze_traces([tmp_path])
    rows = [r for r in result.collectives() if r["rank"] == 0]
    assert len(rows) == 1
    row = rows[0]
    # by hand, from the parameters: the 102 MB fp32 gradient in DDP's 25 MB buckets (4 full
    # and 2 MB), then the loss (1 float) and 1,024 metrics: 7 all-reduces per step, every step
    # of the trace counted (the window aside)
    assert (p.grad_mb, p.ddp_bucket_mb, p.gpus_per_node) == (102.0, 25.0, 4)
    assert spec.messages == (
        *[("allreduce", 6_250_000, 6_250_000)] * 4,
        ("allreduce", 500_000, 500_000),
        ("allreduce", 1, 1),
        ("allreduce", 1024, 1024),
    )
    per_step = 102_000_000 + 4 + 4096
    assert row["collective"] == "all_reduce" and row["group_size"] == 8
    assert row["count"] == 7 * spec.steps
    assert row["bytes"] == per_step * spec.steps
    assert math.isclose(row["time_s"], spec.comm_us * spec.steps / 1e6, rel_tol=1e-12)
    # 8 GPUs on two nodes: the inter-node link, 200 Gb/s = 25 GB/s and 12 µs per ring step;
    # each kernel 2*7*12 + 30 (DDP's launch) = 198 µs + bus bytes (x 2*7/8) / 25 GB/s, the
    # rest of the step's communication time (the model's spin) spread evenly over the 7
    link_us = [198 + round(1.75 * 4 * e / 25e9 * 1e6) for _, e, _ in spec.messages]
    assert link_us == [1948] * 4 + [338, 198, 198]
    left = spec.comm_us - sum(link_us)
    waits = [b - a for a, b in zip(link_us, spec.kernel_us, strict=True)]
    assert sum(waits) == left and max(waits) - min(waits) <= 1
    assert not [w for w in result.warnings if w.kind == "unsized"]
    # large (>= 1 MiB) and small apart; every large kernel's busbw by hand: the median is a
    # full bucket's, 43.75 MB over its kernel time
    sizes = {r["size_class"]: r for r in result.collective_sizes() if r["rank"] == 0}
    assert set(sizes) == {"large", "small"}
    assert (sizes["large"]["count"], sizes["small"]["count"]) == (5 * spec.steps, 2 * spec.steps)
    bucket = 43.75e6 / (spec.kernel_us[0] * 1e-6) / 1e9
    assert math.isclose(sizes["large"]["busbw_median_gbps"], bucket, rel_tol=1e-9)
    truth = tracing.communication_truth(p, "torch-ddp", 8)
    assert truth["collectives_per_step"] == 7 and truth["bytes_per_step"] == per_step
    assert (truth["link"], truth["link_beta_gbps"], truth["link_alpha_s"]) == ("inter", 25.0, 12e-6)
    assert math.isclose(truth["busbw_gbps"], bucket, rel_tol=1e-9)
    assert math.isclose(truth["kernel_alpha_s"], 198e-6, rel_tol=1e-12)
    # the link fit finds the link's bandwidth, and the fixed time with the spin's share
    fit = result.ranks[0].link_fit
    assert fit is not None
    assert math.isclose(fit["beta_gbps"], 25.0, rel_tol=0.005)
    assert abs(fit["alpha_s"] - (198 + left / 7) * 1e-6) < 2e-6
    assert abs(fit["alpha_s"] - truth["fit_alpha_s"]) < 2e-6


@pytest.mark.parametrize(
    ("strategy", "workers", "link", "beta", "count"),
    [
        ("torch-ddp", 4, "intra", 150.0, 7),
        ("horovod", 16, "inter", 25.0, 4),
        ("deepspeed", 8, "inter", 25.0, 4),
    ],
)
def test_the_emulators_truth_is_what_its_traces_give(
    tmp_path: Path, strategy: str, workers: int, link: str, beta: float, count: int
) -> None:
    p = ModelParams()
    truth = tracing.communication_truth(p, strategy, workers)
    # one node: NVLink-like, 150 GB/s; more: the network, 200 Gb/s. Horovod's 102 MB in 64 MB
    # fusion buffers (2) and DeepSpeed's reduce-scatter and all-gather, each with 2 small
    assert (truth["link"], truth["link_beta_gbps"], truth["collectives_per_step"]) == (
        link,
        beta,
        count,
    )
    specs = tracing.rank_specs(p, strategy, workers)
    kineto.write(specs[0], tmp_path)
    result = analyze_traces([tmp_path])
    rows = result.collectives()
    steps = specs[0].steps
    assert sum(r["count"] for r in rows) == count * steps
    assert sum(r["bytes"] for r in rows) == truth["bytes_per_step"] * steps
    large = [r for r in result.collective_sizes() if r["size_class"] == "large"]
    medians = sorted(r["busbw_median_gbps"] for r in large)
    # every rank's kernels alike (no straggler): the truth's median is among the trace's
    assert any(math.isclose(m, truth["busbw_gbps"], rel_tol=1e-9) for m in medians)
    fit = result.ranks[0].link_fit
    assert fit is not None
    assert math.isclose(fit["beta_gbps"], beta, rel_tol=0.01)
    assert abs(fit["alpha_s"] - truth["fit_alpha_s"]) < 2e-6


def test_the_emulators_deepspeed_step_is_a_reduce_scatter_then_an_all_gather() -> None:
    p = ModelParams()
    elems = round(p.grad_mb * 1e6 / 4)
    shard = elems // 4
    assert tracing.messages(p, "deepspeed", 4, 2) == (
        ("reduce_scatter", shard * 4, shard),
        ("allgather", shard, shard * 4),
    )
    assert tracing.messages(p, "torch-ddp", 1, 0) == ()


# size classes: all-reduce over 4 ranks of Float (4 bytes), (elements, kernel µs); each
# kernel's busbw = bytes / time / 1e9 x 2*3/4, worked out below by hand
SIZED = [
    (1_048_576, 1000),  # 4 MiB: large; 4,194,304 B / 1 ms = 4.194304 GB/s, busbw 6.291456
    (1_048_576, 2000),  # busbw 3.145728
    (1_048_576, 4000),  # busbw 1.572864
    (262_144, 500),  # exactly 1 MiB: large; 2.097152 GB/s, busbw 3.145728
    (16_384, 100),  # exactly 64 KiB: medium; 0.65536 GB/s, busbw 0.98304
    (16_383, 10),  # 65,532 B, just under 64 KiB: small; busbw 6.5532 x 1.5 = 9.8298
    (1_024, 30),  # 4,096 B: small; 0.136533 GB/s, busbw 0.2048
]


def test_large_medium_and_small_messages_apart_with_busbw_quartiles(tmp_path: Path) -> None:
    events: list[dict[str, object]] = []
    ts = 100.0
    for elems, dur in SIZED:
        said = {"coll": "allreduce", "n_in": elems, "n_out": elems, "dtype": "Float", "group": 4}
        events += _comm("ncclDevKernel_AllReduce_Sum_f32_RING_LL", ts, dur, **said)
        ts += dur + 10
    events += _comm("ncclDevKernel_AllReduce_Sum_f32_RING_LL", ts, 7)  # no args: unknown
    for layout in (True, False):
        path = _write(tmp_path / f"l{layout}" / "worker_1.1.pt.trace.json", events, layout)
        rows = {
            (r["size_class"], r["group_size"]): r for r in analyze_traces([path]).collective_sizes()
        }
        assert set(rows) == {("large", 4), ("medium", 4), ("small", 4), ("unknown", None)}
        large = rows[("large", 4)]
        assert large["count"] == 4 and large["bytes"] == 3 * 4_194_304 + 1_048_576
        assert math.isclose(large["time_s"], 0.0075, rel_tol=1e-12)
        # busbw sorted: 1.572864, 3.145728, 3.145728, 6.291456; numpy's linear quartiles at
        # positions 0.75, 1.5, 2.25
        assert math.isclose(large["busbw_median_gbps"], 3.145728, rel_tol=1e-9)
        assert math.isclose(large["busbw_p25_gbps"], 1.572864 + 0.75 * 1.572864, rel_tol=1e-9)
        assert math.isclose(large["busbw_p75_gbps"], 3.145728 + 0.25 * 3.145728, rel_tol=1e-9)
        medium = rows[("medium", 4)]
        assert (medium["count"], medium["bytes"]) == (1, 65_536)
        assert math.isclose(medium["busbw_median_gbps"], 0.98304, rel_tol=1e-9)
        assert medium["busbw_p25_gbps"] == medium["busbw_p75_gbps"] == medium["busbw_median_gbps"]
        small = rows[("small", 4)]
        assert (small["count"], small["bytes"]) == (2, 65_532 + 4_096)
        assert math.isclose(small["busbw_median_gbps"], (9.8298 + 0.2048) / 2, rel_tol=1e-9)
        assert math.isclose(small["busbw_p25_gbps"], 0.2048 + 0.25 * 9.625, rel_tol=1e-9)
        unknown = rows[("unknown", None)]
        assert (unknown["count"], unknown["bytes"], unknown["busbw_median_gbps"]) == (1, None, None)
        assert math.isclose(unknown["time_s"], 7e-6, rel_tol=1e-12)
    body = json.loads(write(analyze_traces([path]), "json"))
    assert list(body["collective_sizes"][0]) == [
        "rank",
        "collective",
        "group_size",
        "size_class",
        "count",
        "bytes",
        "time_s",
        "busbw_median_gbps",
        "busbw_p25_gbps",
        "busbw_p75_gbps",
    ]
    table = write(analyze_traces([path]), "table")
    assert "Collectives by message size" in table
    line = next(x for x in table.splitlines() if " large " in x)
    assert "3.15" in line and "2.75" in line and "3.93" in line


# the link fit: 4 all-gather kernels over 4 ranks (factor 3/4) of Float, (out elements, µs)
FIT = [(250_000, 40.0), (500_000, 70.0), (1_000_000, 125.0), (2_000_000, 260.0)]
T_975_DF2 = 4.302652729911275  # Student's t, two-sided 95 %, 2 degrees of freedom (tables)


def test_the_link_fit_against_a_hand_least_squares(tmp_path: Path) -> None:
    events: list[dict[str, object]] = []
    ts = 100.0
    for elems, dur in FIT:
        said = {"coll": "allgather", "n_in": elems // 4, "n_out": elems, "dtype": "Float"}
        events += _comm("ncclDevKernel_AllGather_RING_LL", ts, dur, group=4, **said)
        ts += dur + 10
    events += _comm("ncclDevKernel_AllGather_RING_LL", ts, 5)  # unsized: not in the fit
    path = _write(tmp_path / "worker_0.1.pt.trace.json", events, True)
    fit = analyze_traces([path]).ranks[0].link_fit
    assert fit is not None
    # by hand: x = bus bytes = elements x 4 x 3/4, y = seconds
    xs = [e * 4 * 0.75 for e, _ in FIT]
    ys = [d / 1e6 for _, d in FIT]
    n = 4
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    a = my - b * mx
    s2 = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys, strict=True)) / (n - 2)
    half_b = T_975_DF2 * math.sqrt(s2 / sxx)
    half_a = T_975_DF2 * math.sqrt(s2 * (1 / n + mx * mx / sxx))
    assert fit["kernels"] == 4
    assert math.isclose(fit["alpha_s"], a, rel_tol=1e-9)
    assert math.isclose(fit["beta_gbps"], 1 / b / 1e9, rel_tol=1e-9)
    assert fit["alpha_ci"] == pytest.approx([a - half_a, a + half_a], rel=1e-6)
    assert fit["beta_ci"] == pytest.approx(
        [1 / (b + half_b) / 1e9, 1 / (b - half_b) / 1e9], rel=1e-6
    )
    # about 6 µs of latency and 24 GB/s of bus bandwidth
    assert 5e-6 < fit["alpha_s"] < 20e-6 and 20 < fit["beta_gbps"] < 30
    body = json.loads(write(analyze_traces([path]), "json"))
    assert body["link_fits"] == [{"rank": 1, **fit}]
    assert "Link fit, per rank" in write(analyze_traces([path]), "table")


def test_no_link_fit_with_fewer_than_three_distinct_sizes(tmp_path: Path) -> None:
    events: list[dict[str, object]] = []
    for i, elems in enumerate((1000, 1000, 2000, 2000, 2000)):
        said = {"coll": "allreduce", "n_in": elems, "n_out": elems, "dtype": "Float"}
        events += _comm("ncclDevKernel_AllReduce", 100 + 100 * i, 10 + i, group=2, **said)
    path = _write(tmp_path / "worker_0.1.pt.trace.json", events, True)
    result = analyze_traces([path])
    assert result.ranks[0].link_fit is None and result.link_fits() == []
    assert "No rank has collectives of three or more" in write(result, "table")


def _op(name: str, ts: float, dur: float, tid: int, cat: str = "cpu_op", **args: object) -> dict:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def _older_trace() -> list[dict[str, object]]:
    """A trace as PyTorch 1.x / early 2.x writes it: no sizes in the kernels' args, the shapes
    on the CPU-side comms ops (recorded with record_shapes) around each launch."""
    events = [
        # the tensor list of c10d's dispatch op says nothing; the op inside it is larger than
        # the innermost one, which the kernel takes
        _op(
            "c10d::allreduce_",
            100,
            200,
            1,
            **{"Input Dims": [[[1024, 256]], []], "Input type": ["GenericList", "Int"]},
        ),
        _op(
            "record_param_comms",
            110,
            150,
            1,
            **{"Input Dims": [[2048, 256], []], "Input type": ["float", "Int"]},
        ),
        _op(
            "nccl:all_reduce",
            120,
            100,
            1,
            **{"Input Dims": [[1024, 256], []], "Input type": ["float", "Int"]},
        ),
        # an all-gather's output and input: the larger is its message
        _op(
            "nccl:_all_gather_base",
            400,
            50,
            1,
            **{"Input Dims": [[4096], [1024]], "Input type": ["c10::BFloat16", "c10::BFloat16"]},
        ),
        _op("aten::addmm", 600, 50, 1),
        # gloo's own op on its thread, a broadcast with its group in its args
        _op(
            "gloo:broadcast",
            1000,
            40,
            2,
            cat="user_annotation",
            **{"Input Dims": [[100, 10]], "Input type": ["double"], "Group size": 2},
        ),
    ]
    kernels = [  # (kernel, launch time, kernel start, duration); no sizes in their args
        ("ncclKernel_AllReduce_RING_LL_Sum_float", 150, 300, 100),
        ("ncclKernel_AllGather_RING_LL_Sum_bfloat16", 420, 460, 8),
        ("ncclKernel_AllReduce_RING_LL_Sum_float", 620, 700, 30),  # launched in aten::addmm
    ]
    for kernel, launch, start, dur in kernels:
        launched = _comm(kernel, start, dur)
        launched[0]["ts"] = launch
        events += launched
    events += _comm("ncclKernel_AllReduce_RING_LL_Sum_float", 900, 20)[1:]  # before the window
    return events


def test_an_older_trace_takes_its_sizes_from_the_cpu_op_around_the_launch(tmp_path: Path) -> None:
    for layout in (True, False):
        path = _write(tmp_path / f"l{layout}" / "worker_1.1.pt.trace.json", _older_trace(), layout)
        rows = {(r["collective"], r["group_size"]): r for r in analyze_traces([path]).collectives()}
        assert set(rows) == {
            ("all_reduce", 4),
            ("all_gather", 4),
            ("all_reduce", None),
            ("broadcast", 2),
        }
        # 1024 x 256 floats in 100 µs: 10.48576 GB/s, busbw x 2*3/4 (the world of 4: the op
        # names no group)
        reduce = rows[("all_reduce", 4)]
        assert (reduce["count"], reduce["bytes"]) == (1, 1_048_576)
        assert math.isclose(reduce["algbw_gbps"], 10.48576, rel_tol=1e-9)
        assert math.isclose(reduce["busbw_gbps"], 15.72864, rel_tol=1e-9)
        # 4096 bf16 = 8192 bytes in 8 µs: 1.024 GB/s, busbw x 3/4
        gather = rows[("all_gather", 4)]
        assert (gather["count"], gather["bytes"]) == (1, 8192)
        assert math.isclose(gather["busbw_gbps"], 0.768, rel_tol=1e-9)
        # gloo's broadcast: 100 x 10 doubles in 40 µs, 0.2 GB/s, factor 1
        cast = rows[("broadcast", 2)]
        assert (cast["count"], cast["bytes"]) == (1, 8000)
        assert math.isclose(cast["busbw_gbps"], 0.2, rel_tol=1e-9)
        # launched outside a comms op, and launched before the window: unknown
        unknown = rows[("all_reduce", None)]
        assert (unknown["count"], unknown["bytes"]) == (2, None)


def test_an_ops_message_is_its_largest_tensor_input() -> None:
    from itwin_report.traces.comm_ops import input_message

    assert input_message({"Input Dims": [[3, 4], [10]], "Input type": ["double", "c10::Half"]}) == (
        12,
        "double",
    )
    assert input_message(
        {"Input Dims": [[8], [10]], "Input type": ["long int", "unsigned char"]}
    ) == (8, "long int")
    # scalars, tensor lists, unknown types, shapes that are not whole numbers: none
    nothing = {
        "Input Dims": [[], [[4, 4]], [5], [2.5], [-1], "x"],
        "Input type": ["Int", "GenericList", "Quux", "float", "float", "float"],
    }
    assert input_message(nothing) == (-1, "")
    assert input_message({"Input Dims": "x"}) == (-1, "")


def _kept(path: Path) -> dict[str, object]:
    """What the reader keeps of the collectives of ``path``, names decoded."""
    from itwin_report.traces.reader import read_trace

    k = read_trace(path).collectives
    assert k is not None
    return {
        "dur": k.dur_us.tolist(),
        "corr": None if k.corr is None else k.corr.tolist(),
        "collective": [k.names[c] for c in k.collective],
        "group": k.group.tolist(),
        "in": k.in_elems.tolist(),
        "out": k.out_elems.tolist(),
        "dtype": [k.names[c] for c in k.dtype],
    }


def test_the_fast_and_the_streaming_read_keep_the_same_collectives(tmp_path: Path) -> None:
    events = _older_trace() + _events()
    events[2]["name"] = 'nccl:all_reduce "quoted" é'  # escaped when written: found anyway
    launched = _comm("ncclKernel_Broadcast_RING_LL", 5100, 10)
    launched[0]["ts"] = 5010
    said = {"Input Dims": [[2]], "Input type": ["float"]}
    events += [*launched, _op("nccl:broadcast", 5000, 50, 1, **said)]  # the file's last event
    fast = _write(tmp_path / "fast" / "worker_1.1.pt.trace.json", events, True)
    slow = _write(tmp_path / "slow" / "worker_1.1.pt.trace.json", events, False)
    with open_trace(fast) as fh:
        assert read_pieces(fh, Columns(), Edges()) is not None  # the fast read takes it
    with open_trace(slow) as fh:
        assert read_pieces(fh, Columns(), Edges()) is None  # one line: the streaming read
    kept = _kept(fast)
    assert kept == _kept(slow)
    assert len(kept["dur"]) == 4 + len(KERNELS) + 2 + 1 + 1  # and gloo's broadcast, last
    # the renamed innermost op sizes the all-reduce (not the record_param_comms around it),
    # the last event of the file its broadcast
    assert (kept["in"][0], kept["dtype"][0]) == (1024 * 256, "float")
    assert (kept["collective"][-2], kept["in"][-2], kept["group"][-2]) == ("broadcast", 2, 4)
