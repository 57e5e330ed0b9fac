"""Where the time goes per configuration, its verdict, and stragglers from metrics and traces,
on run data written by hand and on real SQLite stores with traces in itwinai's layout (every
expected number worked out in the comments)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from conftest import cli_runner
from test_traces_match import EXPERIMENT, T0, Job, S, write_store, write_traces

from itwin_report.analysis.outliers import lagging
from itwin_report.cli import main
from itwin_report.data.rundata import EPOCH_TIME, GPU_UTIL, RATE, RunData
from itwin_report.emulator import kineto, mlflow_writer
from itwin_report.report import build_report
from itwin_report.report.breakdown import merged_stragglers, time_breakdown
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
    assert a["evidence"] == (
        "40.0 % of the wall time (50.0 s) is outside steady-state steps (one run: no interval; "
        "the line: 25 %): 18.0 s outside the epochs (set-up, teardown), 2.0 s inside them "
        "(validation, checkpoints, warm-up)"
    )


def test_verdicts_from_traces_input_and_stragglers() -> None:
    data = _data()
    # job b: 3 % outside steady steps; without traces the steps stay undecided
    b = time_breakdown(data).iloc[1]
    assert (b["workers"], b["bound_by"]) == (8, "undecided")
    assert b["evidence"].startswith("3.2 % of the wall time (31.0 s) is outside steady-state")
    assert "no traces to split the steady steps" in b["evidence"]
    # traces: exposed communication 4 of 20 ms = 20 % on both ranks (no noise) -> communication
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
    b = time_breakdown(data, traces=traces).iloc[1]
    assert b["exposed_communication_pct"] == pytest.approx(20.0)
    assert b["compute_pct"] == 75.0 and b["bound_by"] == "communication"
    assert (
        "exposed communication is 20.0 % of the device time (95 % interval 20.0–20.0 %"
        in (b["evidence"])
    )
    traces["exposed_communication_s"] = 0.001
    b = time_breakdown(data, traces=traces).iloc[1]
    assert b["bound_by"] == "computation" and "exposed communication is 5.0 %" in b["evidence"]
    # 3 and 5 ms of 20 ms: 15 and 25 %, sd 7.071 %; 20 % ± t(0.975, 1) 12.706 x 7.071 / sqrt(2)
    # = ±63.5 % holds the line
    traces["exposed_communication_s"] = [0.003, 0.005]
    b = time_breakdown(data, traces=traces).iloc[1]
    assert b["bound_by"] == "near the line: communication or computation"
    assert "95 % interval -43.5–83.5 %" in b["evidence"]
    thr = pd.DataFrame({"strategy": ["ddp"], "workers": [8], "input_bound": [True]})
    assert time_breakdown(data, thr, traces).iloc[1]["bound_by"] == "the input pipeline"
    slow = pd.DataFrame({"strategy": ["ddp"], "workers": [8], "text": ["rank 5: …"]})
    b = time_breakdown(data, thr, traces, slow).iloc[1]
    assert (b["bound_by"], b["evidence"]) == ("a straggler", "rank 5: …")


def _two_jobs(walls: tuple[float, float], rate: float = 25.0) -> RunData:
    """Two 4-worker jobs of 3 x 1000 samples at ``rate`` per worker (steady 30 s at 25/s)."""
    runs, metrics, perf = [], [], []
    for job, wall in zip(("a", "c"), walls, strict=True):
        runs += [_run(job, 4, r, f"node{r // 2}") for r in range(4)]
        metrics += _points(f"{job}-0", EPOCH_TIME, [10, 10, 10])
        metrics += _points(f"{job}-0", RATE, [rate] * 6)
        perf.append(_perf(f"{job}-0", wall))
    return RunData(
        experiment="x",
        tracking_uri="sqlite:///x.db",
        runs=pd.DataFrame(runs),
        metrics=pd.DataFrame(metrics),
        performance=pd.DataFrame(perf),
    )


def test_a_share_within_its_noise_of_the_line_names_both_candidates() -> None:
    # steady 30 s; walls 39 and 41 s: shares 1 - 30/39 = 23.08 % and 1 - 30/41 = 26.83 %,
    # mean 24.95 %, sd 2.652 %, half-width t(0.975, 1) = 12.706 x 2.652 / sqrt(2) = 23.8 %
    row = time_breakdown(_two_jobs((39.0, 41.0))).iloc[0]
    assert row["wall_s"] == 40.0 and row["steady_s"] == pytest.approx(30.0)
    assert row["bound_by"] == "near the line: fixed per-epoch overhead or steady steps"
    shares = [1 - 30 / 39, 1 - 30 / 41]
    half = 12.7062 * abs(shares[0] - shares[1]) / 2**0.5 / 2**0.5
    assert (
        f"(95 % interval {100 * (0.25 - half):.1f}–{100 * (0.25 + half):.1f} %" in (row["evidence"])
    )
    # the same mean share with no noise between the jobs: decided, on either side
    assert time_breakdown(_two_jobs((40.5, 40.5))).iloc[0]["bound_by"] == (
        "fixed per-epoch overhead"  # 1 - 30 / 40.5 = 25.9 %
    )
    assert time_breakdown(_two_jobs((39.5, 39.5))).iloc[0]["bound_by"] == "undecided"  # 24.1 %


def test_without_a_wall_time_split_the_verdict_is_undecided() -> None:
    data = _data()
    data.performance = data.performance.iloc[0:0]  # no performance.json: no wall time
    epoch = time_breakdown(data)
    assert epoch["bound_by"].tolist() == ["undecided", "undecided"]
    assert epoch["evidence"].iloc[1] == (
        "no wall-time split to decide from: it needs the runs' wall time (total_time of "
        "performance.json); traces (--traces) would then split the steady steps; whether the "
        "input pipeline bounds it is undecided too (the throughput table)"
    )
    thr = pd.DataFrame({"strategy": ["ddp"] * 2, "workers": [4, 8], "input_bound": [False] * 2})
    assert "input pipeline" not in time_breakdown(data, thr).iloc[1]["evidence"]


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


def test_a_rank_named_by_traces_and_metrics_is_one_straggler() -> None:
    steady = {f"a-{r}": [95.0, 95.0] for r in range(4)}
    metrics = metric_stragglers(_data({**steady, "a-3": [60.0, 60.0]}))
    traced = {
        "strategy": "ddp",
        "workers": 4,
        "job_id": "a",
        "scope": "rank",
        "ranks": [3],
        "node": "node1",
        "measure": "compute per step",
        "ratio": 1.2,
        "text": "rank 3 (node1): compute per step 1.20× the median of 4 ranks (…)",
    }
    other = {**traced, "ranks": [1], "text": "rank 1: …"}
    merged = merged_stragglers(metrics, [traced, other, dict(traced)])  # rank 3 twice
    assert merged["ranks"].tolist() == [[1], [3]]
    three = merged.iloc[1]
    assert (three["source"], three["measure"]) == (
        "traces, metrics",
        "compute per step, GPU utilization",
    )
    assert three["text"] == (
        "rank 3 (node1): compute per step 1.20× the median of 4 ranks (…); "
        "rank 3 (node1): GPU utilization 0.63× the median of 4 ranks (60 % vs 95 %)"
    )


def test_lagging_rule_by_hand() -> None:
    same = dict.fromkeys(range(8), 10.0)
    assert lagging(same, "x") == []
    one = {**same, 5: 12.0}  # 20 % slower, the others' spread 0
    (found,) = lagging(one, "compute per step")
    assert (found.ranks, found.ratio, found.count) == ((5,), 1.2, 8)
    jitter = {r: 10.0 + 0.1 * (r % 3) for r in range(8)}  # spread 0.2 around 10.1
    assert lagging({**jitter, 5: 10.4}, "x") == []  # 0.3 above: within 2 x spread
    assert lagging({0: 1.0, 1: 2.0}, "x") == []  # two ranks: never named


# ---------------------------------------------------------------- the report with traces


def _report(uri: str, *args: str) -> tuple[int, str, str]:
    base = ["generate-scalability-report", "--tracking-uri", uri, "--no-plots", "-q"]
    result = cli_runner().invoke(main, [*base, *args])
    return result.exit_code, result.stdout, result.stderr


def test_report_with_traces_worked_out_by_hand(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ddp4 = Job("ddp-4", 4, T0, T0 + 60 * S)
    ddp8 = Job("ddp-8", 8, T0 + 100 * S, T0 + 160 * S)
    ds8 = Job("ds-8", 8, T0 + 200 * S, T0 + 260 * S, strategy="deepspeed", logged=tuple(range(8)))
    write_store(uri, [ddp4, ddp8, ds8])
    root = tmp_path / "traces"
    # RankSpec's defaults: 5 steps of 10 ms (the last left out: 4 analysed, and the last step's
    # copy, launched before its device-side annotation starts); a step is a 0.5 ms copy, 6 ms of
    # compute, a 2 ms all-reduce starting 1 ms before the compute ends
    write_traces(root, ddp4)
    # 8 identical ranks, a 4 ms all-reduce: 3 ms of it exposed per step
    write_traces(root, ddp8, kineto.job(8, comm_us=4_000.0), gz=True)
    # rank 5 computes 7.2 ms; the others' all-reduce waits 1.2 ms longer for it (3.2 ms)
    write_traces(root, ds8, kineto.job(8, slow_rank=5))
    code, out, err = _report(uri, "-e", EXPERIMENT, "--traces", str(root), "--format", "json")
    assert (code, err) == (0, "")
    body = json.loads(out)
    rows = {(r["strategy"], r["workers"]): r for r in body["time_breakdown"]}
    # ddp-4, each rank: span 4 x 10 ms + 0.5 ms = 40.5 ms; compute 4 x 6 = 24 ms; exposed
    # 4 x 1 = 4 ms; idle 40.5 - 4 x 7.5 - 0.5 = 10 ms (HTA rounds each rank's percentages)
    four = rows[("torch-ddp", 4)]
    assert four["compute_pct"] == pytest.approx(round(100 * 24 / 40.5, 2))  # 59.26 %
    assert four["exposed_communication_pct"] == pytest.approx(100 * 4 / 40.5)  # 9.9 %
    assert four["idle_pct"] == pytest.approx(round(100 * 10 / 40.5, 2))  # 24.69 %
    # no performance.json or Rate metrics: no wall-time split, so the overhead rule cannot be
    # weighed; the traces' reading of the steps is given, undecided
    assert four["bound_by"] == "undecided"
    assert four["evidence"] == (
        "no wall-time split to decide from: it needs the runs' wall time (total_time of "
        "performance.json), and the steady-state rate (Rate metrics) with samples per epoch; "
        "the traced steps alone read computation (exposed communication is 9.9 % of the device "
        "time (95 % interval 9.9–9.9 %; the line: 20 %), compute 59.3 %, idle 24.7 %); whether "
        "the input pipeline bounds it is undecided too (the throughput table)"
    )
    # ddp-8: busy 0.5 + 6 + 3 = 9.5 ms a step; span 40 + 0.5 = 40.5 ms; exposed 4 x 3 = 12 ms;
    # idle 40.5 - 4 x 9.5 - 0.5 = 2 ms; compute 24 ms
    eight = rows[("torch-ddp", 8)]
    assert eight["compute_pct"] == pytest.approx(round(100 * 24 / 40.5, 2))  # 59.26 %
    assert eight["exposed_communication_pct"] == pytest.approx(100 * 12 / 40.5)  # 29.6 %
    assert eight["idle_pct"] == pytest.approx(round(100 * 2 / 40.5, 2))  # 4.94 %
    assert eight["bound_by"] == "undecided" and "alone read communication" in eight["evidence"]
    # deepspeed-8: every rank busy 8.7 ms a step (rank 5: 0.5 + 7.2 + 1; the others 0.5 + 6 +
    # 2.2), span 40 + 0.5 = 40.5 ms; compute 28.8 ms on rank 5, 24 ms on the others
    ds = rows[("deepspeed", 8)]
    mean_compute = (round(100 * 28.8 / 40.5, 2) + 7 * round(100 * 24 / 40.5, 2)) / 8
    assert ds["compute_pct"] == pytest.approx(mean_compute)  # 60.74 %
    assert ds["exposed_communication_pct"] == pytest.approx(100 * (4 + 7 * 8.8) / 8 / 40.5)
    assert ds["bound_by"] == "a straggler"
    assert ds["evidence"].startswith(
        "rank 5 (node1): compute per step 1.20× the median of 8 ranks (0.0072 s vs 0.006 s)"
    )
    # the stragglers: rank 5 of deepspeed-8 only; eight identical ranks (ddp-8) name none
    (slow,) = body["stragglers"]
    assert (slow["strategy"], slow["workers"], slow["ranks"], slow["node"]) == (
        "deepspeed",
        8,
        [5],
        "node1",
    )
    assert slow["job_id"] == ds8.top and slow["source"] == "traces"
    assert slow["measure"] == "compute per step, collective launch delay per step"
    # per rank: 4 + 8 + 8 rows; the computation table gives the traces' compute share
    assert len(body["trace_ranks"]) == 20
    first = {(r["strategy"], r["workers"]): r for r in body["trace_ranks"] if r["rank"] == 0}
    assert {k: r["compute_pct"] for k, r in first.items()} == {
        ("torch-ddp", 4): 59.26,
        ("torch-ddp", 8): 59.26,
        ("deepspeed", 8): 59.26,  # 24 / 40.5
    }
    assert [r["workers"] for r in body["trace_ranks"]] == [8] * 8 + [4] * 4 + [8] * 8
    comp = {(r["strategy"], r["workers"]): r for r in body["computation"]}
    assert comp[("torch-ddp", 4)]["trace_compute_fraction"] == pytest.approx(0.5926)
    assert comp[("torch-ddp", 4)]["computation_fraction"] is None
    assert [w for w in body["warning_records"] if w["table"] == "time_breakdown"] == []
    code, out, _ = _report(uri, "-e", EXPERIMENT, "--traces", str(root))
    table = out[out.index("Where the time goes\n") :]
    assert "Compute  Exposed comm    Idle" in table
    row = next(line for line in table.splitlines() if line.startswith("torch-ddp        4"))
    assert row.split()[-7:] == ["59.3", "%", "9.9", "%", "24.7", "%", "undecided"]
    assert (
        f"- straggler in deepspeed-8 (job {ds8.top[:8]}): rank 5 (node1): compute per step 1.20×"
    ) in table
    computation = out[out.index("Computation vs other") : out.index("Throughput")]
    assert "Compute (traces)" in computation and "59.3 %" in computation
    assert "Compute (traces) is the share of the device span with a compute kernel" in computation


def test_without_traces_the_computation_table_says_it_counts_overlap_twice(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    job = Job("ddp-4", 4, T0, T0 + 60 * S)
    write_store(uri, [job])
    assert job.runs is not None
    csv = "name,self_cuda_time_total\naten::mm,600\nnccl:all_reduce,300\nProfilerStep*,1000\n"
    path = "torch_profiling_averages/torch_profiling_averages.csv"
    mlflow_writer.RunWriter(uri).log_text(job.runs[0], csv, path)
    code, out, _ = _report(uri, "-e", EXPERIMENT)
    computation = out[out.index("Computation vs other") : out.index("Throughput")]
    assert code == 0 and "Compute (traces)" not in computation  # no trace: no column
    assert (
        "- torch-ddp-4: from the profiler averages (self_cuda_time_total summed), which count "
        "communication that overlaps computation twice, so the computation fraction "
        "understates computation"
    ) in computation


def test_emulated_traces_give_the_truths_verdicts(tmp_path: Path) -> None:
    """emulate --traces, then the report with --traces: every configuration's verdict is the
    one the emulator's truth worked out from its noise-free model."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    traces, truth = tmp_path / "traces", tmp_path / "truth.json"
    emulate = [
        *("emulate", "--tracking-uri", uri, "--traces", str(traces), "--truth", str(truth)),
        *("--strategies", "torch-ddp,deepspeed", "--workers", "1,8,16", "--repeats", "2"),
        *("--epochs", "2", "--set", "samples_per_epoch=4096", "--set", "noise=0"),
        *("--set", "straggler_factor=1.2", "--set", "straggler_rank=9", "-q"),
    ]
    result = cli_runner().invoke(main, emulate)
    assert result.exit_code == 0, result.stderr
    code, out, err = _report(uri, "--traces", str(traces), "--format", "json")
    assert (code, err) == (0, "")
    got = {(r["strategy"], r["workers"]): r["bound_by"] for r in json.loads(out)["time_breakdown"]}
    expected = {
        (c["strategy"], c["workers"]): c["bound_by"]
        for c in json.loads(truth.read_text())["configurations"]
    }
    assert got == expected
    assert expected[("torch-ddp", 16)] == "a straggler"  # the truth names what was planted
    # both repeats of torch-ddp-16 name rank 9 with the same (noise-free) evidence: one line
    code, out, _ = _report(uri, "--traces", str(traces))
    assert code == 0 and out.count("- straggler in torch-ddp-16") == 1
    assert "- straggler in torch-ddp-16 (2 jobs): rank 9: compute per step 1.20× the median" in out


def test_epochs_longer_than_the_wall_time_are_dropped_with_a_warning() -> None:
    data = _data()
    # job a's epochs logged again at steps 3-5: 12 + 10 + 10 twice = 64 s in a 50 s wall time
    again = pd.DataFrame(_points("a-0", EPOCH_TIME, [0, 0, 0, 12, 10, 10])[3:])
    data.metrics = pd.concat([data.metrics, again], ignore_index=True)
    warnings: list[str] = []
    table = time_breakdown(data, warnings=warnings)
    a, b = table.iloc[0], table.iloc[1]
    # without the check: set-up 50 - 64 = -14 s; now no split, undecided, and one warning
    assert math.isnan(a["outside_s"]) and math.isnan(a["wall_s"]) and a["bound_by"] == "undecided"
    assert warnings == [
        "dropped the wall-time split of run a (job a): its epochs sum to 64.0 s, more than its "
        "wall time (50.0 s); duplicated epoch_time_s steps?"
    ]
    assert b["outside_s"] == 0.0  # job b (31 s in 31 s) keeps its split
    report = build_report(data)
    assert [(w.table, w.kind) for w in report.warnings if "wall-time split" in w] == [
        ("time_breakdown", "dropped")
    ]
