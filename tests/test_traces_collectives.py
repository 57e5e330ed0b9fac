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
    assert "2 collective kernels without message sizes" in str(result.warnings[1])
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
    # the fp32 gradient (grad_mb MB) all-reduced in ceil(grad_mb / bucket) buckets per step,
    # every step of the trace counted (the window aside)
    buckets = math.ceil(p.grad_mb / p.ddp_bucket_mb)
    assert row["collective"] == "all_reduce" and row["group_size"] == 8
    assert row["count"] == buckets * spec.steps
    assert row["bytes"] == round(p.grad_mb * 1e6) * spec.steps
    assert math.isclose(row["time_s"], spec.comm_us * spec.steps / 1e6, rel_tol=1e-12)
    algbw = p.grad_mb * 1e6 / (spec.comm_us / 1e6) / 1e9
    assert math.isclose(row["algbw_gbps"], algbw, rel_tol=1e-9)
    assert math.isclose(row["busbw_gbps"], algbw * 2 * 7 / 8, rel_tol=1e-9)
    assert not [w for w in result.warnings if w.kind == "unsized"]


def test_the_emulators_deepspeed_step_is_a_reduce_scatter_then_an_all_gather() -> None:
    p = ModelParams()
    elems = round(p.grad_mb * 1e6 / 4)
    shard = elems // 4
    assert tracing.messages(p, "deepspeed", 4, 2) == (
        ("reduce_scatter", shard * 4, shard),
        ("allgather", shard, shard * 4),
    )
    assert tracing.messages(p, "torch-ddp", 1, 0) == ()
