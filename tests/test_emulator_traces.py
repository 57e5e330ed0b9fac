"""``emulate --traces``: itwinai's trace layout, traces inside their runs, the traces' truth and
what bounds each configuration, checked against values worked out by hand."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_runner

from itwin_report.cli import main
from itwin_report.emulator import bounds
from itwin_report.emulator.options import EmulationOptions
from itwin_report.emulator.truth import expected_truth
from itwin_report.report import breakdown

NAME = re.compile(r"worker_(\d+)\.(\d+)\.pt\.trace\.json(\.gz)?")
# torch-ddp on 1, 8 and 16 GPUs, two repeats, a small and fast workload; rank 9 computes 20 %
# slower, so only the 16-GPU jobs have a straggler and the 8-GPU jobs have 8 identical ranks
SMALL = ("--strategies", "torch-ddp", "--workers", "1,8,16", "--repeats", "2", "--epochs", "2",
         "--set", "samples_per_epoch=4096", "--set", "straggler_factor=1.2",
         "--set", "straggler_rank=9", "-q")  # fmt: skip


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One emulation with --traces and --truth, shared by the tests that only read it."""
    tmp = tmp_path_factory.mktemp("traces")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    args = ["emulate", *SMALL, "--tracking-uri", uri, "--traces", str(tmp / "traces")]
    result = cli_runner().invoke(main, [*args, "--truth", str(tmp / "truth.json")])
    assert result.exit_code == 0, result.stderr
    truth = json.loads((tmp / "truth.json").read_text())
    return {"root": tmp / "traces", "db": tmp / "mlflow.db", "truth": truth, "out": result.stdout}


def _load(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.name.endswith(".gz") else data)


def _config(truth: dict[str, Any], workers: int) -> dict[str, Any]:
    return next(c for c in truth["configurations"] if c["workers"] == workers)


def test_itwinai_layout_and_file_names(emulated: dict[str, Any]) -> None:
    root: Path = emulated["root"]
    assert sorted(p.name for p in root.iterdir()) == [
        "non-distributed-1",
        "torch-ddp-16",
        "torch-ddp-8",
    ]
    for run_name, workers in (("non-distributed-1", 1), ("torch-ddp-8", 8), ("torch-ddp-16", 16)):
        folder = root / run_name / "torch-traces"
        names = sorted(p.name for p in folder.iterdir())
        matches = [NAME.fullmatch(n) for n in names]
        assert all(matches), names
        # two jobs of the same run name: one trace per rank each, the second repeat's gzipped
        by_rank: dict[int, list[bool]] = {}
        for m in matches:
            assert m is not None
            by_rank.setdefault(int(m[1]), []).append(bool(m[3]))
        assert sorted(by_rank) == list(range(workers))
        assert all(sorted(gz) == [False, True] for gz in by_rank.values())
        for path in folder.iterdir():
            doc = _load(path)
            rank = int(NAME.fullmatch(path.name)[1])  # type: ignore[index]
            if workers == 1:  # a 1-worker job never starts torch.distributed
                assert "distributedInfo" not in doc
            else:
                assert doc["distributedInfo"]["rank"] == rank
                assert doc["distributedInfo"]["world_size"] == workers
            assert doc["traceName"] == f"worker_{rank}"
    assert "traces:        50 files" in emulated["out"]  # (1 + 8 + 16) ranks x 2 repeats
    total = sum(p.stat().st_size for p in root.rglob("*.pt.trace.json*"))
    assert total < 1_000_000


def _jobs(db: Path) -> list[tuple[str, int, int, set[str]]]:
    """(run name, start ms, end ms, worker run names) of every top-level run, read with sqlite3."""
    con = sqlite3.connect(db)
    try:
        runs = con.execute("SELECT run_uuid, name, start_time, end_time FROM runs").fetchall()
        parents = dict(
            con.execute("SELECT run_uuid, value FROM tags WHERE key = 'mlflow.parentRunId'")
        )
    finally:
        con.close()
    out = []
    for run_id, name, _, _ in runs:
        if run_id in parents:
            continue
        workers = [(n, s, e) for r, n, s, e in runs if parents.get(r) == run_id]
        start, end = {w[1] for w in workers}, {w[2] for w in workers}
        assert len(start) == len(end) == 1  # every worker run of a job shares its times
        out.append((name, start.pop(), end.pop(), {w[0] for w in workers}))
    return out


def test_each_trace_lies_inside_one_of_its_runs(emulated: dict[str, Any]) -> None:
    jobs = _jobs(emulated["db"])
    assert len(jobs) == 6
    seen: dict[tuple[str, int], set[int]] = {}
    for path in emulated["root"].rglob("*.pt.trace.json*"):
        run_name = path.parent.parent.name
        m = NAME.fullmatch(path.name)
        assert m is not None
        rank, stamp = int(m[1]), int(m[2])
        doc = _load(path)
        events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        first = doc["baseTimeNanoseconds"] + min(e["ts"] for e in events) * 1000
        last = doc["baseTimeNanoseconds"] + max(e["ts"] + e["dur"] for e in events) * 1000
        assert first < last <= stamp
        inside = [
            i
            for i, (name, start, end, _) in enumerate(jobs)
            if name == run_name and start * 1_000_000 <= first and stamp <= end * 1_000_000
        ]
        assert len(inside) == 1, (path, inside)
        worker = "worker_0 (main)" if rank == 0 else f"worker_{rank}"
        assert worker in jobs[inside[0]][3]
        seen.setdefault((run_name, rank), set()).add(inside[0])
    # the two traces of every rank belong to the two different jobs of its run name
    assert len(seen) == 25 and all(len(jobs_of) == 2 for jobs_of in seen.values())


def _analyze(*paths: Path) -> dict[str, Any]:
    result = cli_runner().invoke(main, ["analyze-traces", *map(str, paths), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_analyze_traces_finds_the_truths_per_rank_numbers(emulated: dict[str, Any]) -> None:
    body = _analyze(emulated["root"])
    assert len(body["ranks"]) == 50
    for row in body["ranks"]:
        workers = int(Path(row["file"]).parent.parent.name.rsplit("-", 1)[1])
        rank = 0 if row["rank"] is None else row["rank"]
        truth = _config(emulated["truth"], workers)["trace_ranks"][rank]
        assert truth["rank"] == rank and row["steps"] == truth["steps"] == 3
        for key in ("compute_pct", "non_compute_pct", "idle_pct", "overlap_pct"):
            if truth[key] != truth[key]:  # no communication on one GPU
                assert row[key] is None
            else:
                assert row[key] == pytest.approx(truth[key], abs=0.1), (key, row["file"])
        for key in ("span_s", "compute_s", "communication_s", "idle_s", "exposed_communication_s"):
            assert row[key] == pytest.approx(truth[key], abs=1e-6), key


def test_a_planted_straggler_is_named_and_identical_ranks_name_none(
    emulated: dict[str, Any],
) -> None:
    root: Path = emulated["root"]
    assert _analyze(root / "torch-ddp-8")["stragglers"] == []
    named = _analyze(root / "torch-ddp-16")["stragglers"]
    assert {tuple(s["ranks"]) for s in named} == {(9,)}
    compute = next(s for s in named if s["measure"] == "compute per step")
    assert compute["text"].startswith("rank 9: compute per step 1.20× the median of 16 ranks")
    truth = emulated["truth"]
    assert _config(truth, 16)["bound_by"] == "a straggler"
    assert _config(truth, 16)["time_breakdown"]["straggler_ranks"] == [9]
    assert _config(truth, 8)["time_breakdown"]["straggler_ranks"] == []


def test_the_thresholds_are_the_reports() -> None:
    assert bounds.OVERHEAD_SHARE == breakdown.OVERHEAD_SHARE
    assert bounds.EXPOSED_SHARE == breakdown.EXPOSED_SHARE


def _truth(workers: tuple[int, ...], strategy: str = "torch-ddp", *sets: str) -> dict[str, Any]:
    options = EmulationOptions(strategies=(strategy,), workers=workers, overrides=sets)
    return expected_truth(options)


def test_default_preset_verdicts_worked_out_by_hand() -> None:
    truth = _truth((16, 32))
    ddp16, ddp32 = truth["configurations"]
    # torch-ddp on 16 GPUs (4 nodes, 200 Gb/s = 25e9 B/s, 12 us per ring step):
    #   compute 32 / 250 + 0.004 = 0.132 s; all-reduce 2 * 15/16 * 102e6 / 25e9 = 0.00765 s plus
    #   5 buckets x (30 x 12 us + 30 us) = 0.00195 s -> 0.0096 s, 80 % of it hidden (0.00768 s)
    #   step 0.132 + 0.00192 = 0.13392 s; input 32 / min(4000 / 4, 5000 / 16) = 0.1024 s: not bound
    step = 0.132 + 0.0096 * 0.2
    # 49 steps per epoch, 3 s overhead; + 8 s warm-up, 2 checkpoints of 4 s; 12 s set-up
    wall = 12 + 5 * (49 * step + 3) + 8 + 2 * 4
    steady = 5 * 25_000 * step / (16 * 32)
    b = ddp16["time_breakdown"]
    assert b["wall_s"] == pytest.approx(wall) and b["steady_s"] == pytest.approx(steady)
    assert b["outside_steady_share"] == pytest.approx(1 - steady / wall)  # 56.9 %
    assert 1 - steady / wall > 0.25 and ddp16["bound_by"] == "fixed per-epoch overhead"
    # 32 GPUs (8 nodes): all-reduce 2 * 31/32 * 102e6 / 25e9 + 5 x (62 x 12 + 30) us
    # = 0.011775 s, 20 % exposed: step 0.134355 s < input 32 / (5000 / 32) = 0.2048 s
    busy = 0.132 + 0.2 * (1.9375 * 102e6 / 25e9 + 5 * 774e-6)
    assert ddp32["bound_by"] == "the input pipeline"
    assert ddp32["time_breakdown"]["loader_wait_share"] == pytest.approx(1 - busy / 0.2048)


def test_deepspeed_on_one_node_is_bound_by_computation() -> None:
    (ds4,) = _truth((4,), "deepspeed")["configurations"]
    # compute 32 / 250 * 1.02 + 0.004 / 4 = 0.13156 s; ring on one node (150 GB/s, 5 us):
    # 1.5 * 102e6 / 150e9 + 6 * 5e-6 = 0.00105 s, half hidden; + 2 ms partitioning
    step = 0.13156 + 0.00105 / 2 + 0.002
    wall = 12 + 5 * (196 * step + 3) + 8 + 8
    steady = 5 * 25_000 * step / (4 * 32)
    assert 1 - steady / wall == pytest.approx(0.2492, abs=1e-4)  # just under 25 %
    b = ds4["time_breakdown"]
    assert b["outside_steady_share"] == pytest.approx(1 - steady / wall)
    assert ds4["bound_by"] == "computation" and b["bound_by_without_traces"] == "undecided"
    assert b["exposed_communication_pct"] < 20


def test_a_slow_network_with_long_epochs_is_bound_by_communication() -> None:
    sets = ("inter_gbit_per_s=10", "samples_per_epoch=200000", "setup_s=0", "warmup_s=0",
            "checkpoint_every=0", "epoch_overhead_s=0")  # fmt: skip
    (ddp8,) = _truth((8,), "torch-ddp", *sets)["configurations"]
    # 2 nodes at 10 Gb/s = 1.25e9 B/s: 1.75 * 102e6 / 1.25e9 = 0.1428 s + 5 x (14 x 12 + 30) us
    comm = 0.1428 + 5 * 198e-6
    hidden = 0.65 * 0.128  # 80 % of comm is more than the backward pass (0.0832 s)
    step = 0.132 + comm - hidden
    steady = 5 * 200_000 * step / (8 * 32)
    wall = 5 * 782 * step  # ceil(200000 / 256) = 782 steps per epoch, nothing else
    b = ddp8["time_breakdown"]
    assert b["outside_steady_share"] == pytest.approx(1 - steady / wall)  # 0.1 %
    # a trace step (us): copies 1600 + 340, compute 132000, collective 143790 + 18000 of spin,
    # 83200 + 18000 of it under the compute: exposed 60590 per step, no idle; 3 steps analysed
    # and the copies of the last step (launched before its device-side annotation starts)
    exposed = 143_790 - 83_200
    span = 3 * (1_940 + 132_000 + exposed) + 1_940
    assert b["exposed_communication_pct"] == pytest.approx(100 * 3 * exposed / span)  # 31.1 %
    assert b["idle_pct"] == 0 and ddp8["bound_by"] == "communication"


def test_traces_option_errors_are_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "a-file"
    afile.write_text("x")
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    result = cli_runner().invoke(main, ["emulate", "--tracking-uri", uri, "--traces", str(afile)])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == f"Error: --traces {afile}: not a folder\n"
    inside = tmp_path / "artifacts" / "traces"  # where the new store keeps its artifacts
    result = cli_runner().invoke(main, ["emulate", "--tracking-uri", uri, "--traces", str(inside)])
    assert (
        result.exit_code == 2 and "--traces" in result.stderr and "tracking store" in result.stderr
    )
    bad = cli_runner().invoke(main, ["emulate", "--set", "straggler_factor=0.5", "-q"])
    assert bad.exit_code == 2 and "straggler_factor must be >= 1" in bad.stderr
    assert not (tmp_path / "m.db").exists()


def test_a_slow_node_slows_its_ranks_and_the_step(tmp_path: Path) -> None:
    sets = ("straggler_factor=1.2", "straggler_rank=5", "straggler_node=1")
    options = EmulationOptions(
        strategies=("torch-ddp",), workers=(4, 16), overrides=sets, traces=str(tmp_path)
    )
    ddp4, ddp16 = expected_truth(options)["configurations"]
    # 4 GPUs per node: rank 5's node holds ranks 4-7; a 4-GPU job has no rank 5
    assert ddp16["time_breakdown"]["straggler_ranks"] == [4, 5, 6, 7]
    assert ddp4["time_breakdown"]["straggler_ranks"] == [] and ddp4["bound_by"] != "a straggler"
    # compute 0.132 s per step, 0.1584 s on the slow node; 3 steps analysed
    compute = {r["rank"]: r["compute_s"] for r in ddp16["trace_ranks"]}
    assert {r for r, c in compute.items() if c == pytest.approx(3 * 0.1584)} == {4, 5, 6, 7}
    assert {r for r, c in compute.items() if c == pytest.approx(3 * 0.132)} == (
        set(range(16)) - {4, 5, 6, 7}
    )
    # the others wait 0.0264 s per step in their all-reduce: the step and the epochs grow
    step = 0.132 + 0.0096 * 0.2 + 0.132 * 0.2
    wall = 12 + 5 * (49 * step + 3) + 8 + 2 * 4
    assert ddp16["time_breakdown"]["wall_s"] == pytest.approx(wall)
    assert ddp16["bound_by"] == "a straggler"
    assert ddp16["time_breakdown"]["bound_by_without_traces"] == "fixed per-epoch overhead"
