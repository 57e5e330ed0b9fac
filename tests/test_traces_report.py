"""Where the time goes per configuration, its verdict, and stragglers from metrics, on run data
written by hand (every expected number worked out in the comments)."""

from __future__ import annotations

import pandas as pd
import pytest

from itwin_report.analysis.outliers import lagging
from itwin_report.data.rundata import EPOCH_TIME, GPU_UTIL, RATE, RunData
from itwin_report.report.breakdown import time_breakdown
from itwin_report.report.stragglers import metric_stragglers


def _run(job: str, workers: int, rank: int, host: str) -> dict:
    return {
        "run_id": f"{job}-{rank}",
        "job_id": job,
        "run_name": job,
        "strategy": "ddp",
        "workers": workers,
        "rank": rank,
        "probing_interval": 1.0,
        "samples_per_epoch": 1000.0,
        "batch_size": 10.0,
        "status": "FINISHED",
        "hostname": host,
        "gpu_index": str(rank % 2),
        "gpu_uuid": "",
    }


def _points(run: str, key: str, values: list[float]) -> list[dict]:
    return [
        {"run_id": run, "key": key, "step": i, "value": v, "timestamp": 1000 * i}
        for i, v in enumerate(values)
    ]


def _perf(run: str, total_time: float) -> dict:
    return {
        "run_id": run,
        "total_samples": 3000.0,
        "total_time": total_time,
        "samples_per_sec": 3000.0 / total_time,
        "compile_time": 0.0,
        "programming_time": 0.0,
        "est_samples_per_sec": 120.0,
        "suspected_input_bottleneck": False,
        "records": 1,
    }


def _data(utils: dict[str, list[float]] | None = None) -> RunData:
    # job a: 4 workers on two nodes; epochs 12 + 10 + 10 = 32 s, wall 50 s, 25 samples/s per
    #   worker (steady: constant) x 4 = 100/s
    #   -> steady 3 x 1000 / 100 = 30 s, outside 50 - 32 = 18 s, rest 32 - 30 = 2 s,
    #      1 - 30 / 50 = 40 % outside steady steps: fixed per-epoch overhead
    # job b: 8 workers; epochs 11 + 10 + 10 = 31 s, wall 31 s, 12.5/s x 8 -> steady 30 s,
    #   1 - 30 / 31 = 3 % overhead only
    runs = [_run("a", 4, r, f"node{r // 2}") for r in range(4)]
    runs += [_run("b", 8, r, f"node{r // 2}") for r in range(8)]
    metrics = _points("a-0", EPOCH_TIME, [12, 10, 10]) + _points("a-0", RATE, [25.0] * 6)
    metrics += _points("b-0", EPOCH_TIME, [11, 10, 10]) + _points("b-0", RATE, [12.5] * 6)
    for run, values in (utils or {}).items():
        metrics += _points(run, GPU_UTIL, values)
    return RunData(
        experiment="x",
        tracking_uri="sqlite:///x.db",
        runs=pd.DataFrame(runs),
        metrics=pd.DataFrame(metrics),
        performance=pd.DataFrame([_perf("a-0", 50.0), _perf("b-0", 31.0)]),
    )


def test_time_breakdown_and_overhead_verdict() -> None:
    table = time_breakdown(_data())
    a = table[table["workers"] == 4].iloc[0]
    assert (a["wall_s"], a["epochs_s"], a["outside_s"]) == (50.0, 32.0, 18.0)
    assert a["steady_s"] == pytest.approx(30.0) and a["rest_s"] == pytest.approx(2.0)
    assert a["bound_by"] == "fixed per-epoch overhead"
    assert a["evidence"].startswith("40 % of the wall time (50.0 s) is outside steady-state")
    assert "18.0 s outside the epochs" in a["evidence"] and "2.0 s inside" in a["evidence"]


def test_verdicts_from_efficiency_traces_input_and_stragglers() -> None:
    data = _data()
    epoch = pd.DataFrame({"strategy": ["ddp"] * 2, "workers": [4, 8], "efficiency": [1.0, 0.6]})
    b = time_breakdown(data, epoch=epoch).iloc[1]
    assert (b["workers"], b["bound_by"]) == (8, "communication")
    assert "epoch-time efficiency 60 %" in b["evidence"]
    # traces: exposed communication 4 of 20 ms = 20 % -> communication; 1 of 20 ms -> computation
    traces = pd.DataFrame(
        {
            "strategy": ["ddp"] * 2,
            "workers": [8, 8],
            "span_s": [0.020, 0.020],
            "exposed_communication_s": [0.004, 0.004],
            "compute_pct": [70.0, 80.0],
            "idle_pct": [5.0, 5.0],
        }
    )
    b = time_breakdown(data, epoch=epoch, traces=traces).iloc[1]
    assert b["exposed_communication_pct"] == pytest.approx(20.0)
    assert b["compute_pct"] == 75.0 and b["bound_by"] == "communication"
    traces["exposed_communication_s"] = 0.001
    b = time_breakdown(data, epoch=epoch, traces=traces).iloc[1]
    assert b["bound_by"] == "computation" and "exposed communication 5.0 %" in b["evidence"]
    thr = pd.DataFrame({"strategy": ["ddp"], "workers": [8], "input_bound": [True]})
    assert time_breakdown(data, thr, epoch, traces).iloc[1]["bound_by"] == "the input pipeline"
    slow = pd.DataFrame({"strategy": ["ddp"], "workers": [8], "text": ["rank 5: …"]})
    b = time_breakdown(data, thr, epoch, traces, slow).iloc[1]
    assert (b["bound_by"], b["evidence"]) == ("a straggler", "rank 5: …")


def test_metric_stragglers_name_a_rank_a_node_or_none() -> None:
    steady = {f"a-{r}": [95.0, 95.0] for r in range(4)}
    assert metric_stragglers(_data(steady)).empty
    slow = {**steady, "a-3": [60.0, 60.0]}
    found = metric_stragglers(_data(slow))
    assert found["ranks"].tolist() == [[3]] and found["node"].tolist() == ["node1"]
    assert found["text"].iloc[0] == (
        "rank 3 (node1): GPU utilization 0.63× the median of 4 ranks (60 % vs 95 %)"
    )
    # job b: node 2 (ranks 4 and 5) at 60 % among 95 %: the node, not a rank
    node = {f"b-{r}": [60.0 if r in (4, 5) else 95.0] for r in range(8)}
    found = metric_stragglers(_data(node))
    assert found[["scope", "node"]].values.tolist() == [["node", "node2"]]
    assert found["ranks"].tolist() == [[4, 5]]


def test_lagging_rule_by_hand() -> None:
    same = dict.fromkeys(range(8), 10.0)
    assert lagging(same, "x") == []
    one = {**same, 5: 12.0}  # 20 % slower, the others' spread 0
    (found,) = lagging(one, "compute per step")
    assert (found.ranks, found.ratio, found.count) == ((5,), 1.2, 8)
    jitter = {r: 10.0 + 0.1 * (r % 3) for r in range(8)}  # spread 0.2 around 10.1
    assert lagging({**jitter, 5: 10.4}, "x") == []  # 0.3 above: within 2 x spread
    assert lagging({0: 1.0, 1: 2.0}, "x") == []  # two ranks: never named
