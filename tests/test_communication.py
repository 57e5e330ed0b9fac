"""The report's Communication table: collectives, bytes, exposed communication and busbw per
step of each traced configuration, worked out by hand on small traces matched to a real SQLite
store, and its verdicts on constructed rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import cli_runner
from test_traces_match import EXPERIMENT, T0, Job, S, write_store, write_traces

from itwin_report.cli import main
from itwin_report.emulator import kineto
from itwin_report.report.communication import profiled_steps, verdict

MiB = 1 << 20


def _report(uri: str, *args: str) -> tuple[int, str, str]:
    base = ["generate-scalability-report", "--tracking-uri", uri, "--no-plots", "-q"]
    result = cli_runner().invoke(main, [*base, "-e", EXPERIMENT, *args])
    return result.exit_code, result.stdout, result.stderr


def test_communication_rows_by_hand(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    four = Job("ddp-4", 4, T0, T0 + 60 * S, logged=(0, 1, 2, 3))  # hostnames node0: one node
    eight = Job("ddp-8", 8, T0 + 100 * S, T0 + 160 * S, logged=tuple(range(8)))  # node0, node1
    write_store(uri, [four, eight])
    root = tmp_path / "traces"
    # 4 workers: each step an all-reduce of 1 Mi fp32 elements (4 MiB, large) and one of 8,192
    # (32 KiB, small), 1 ms each (2 ms of communication, 1 ms of it under the compute)
    small = (("allreduce", MiB, MiB), ("allreduce", 8192, 8192))
    write_traces(root, four, kineto.job(4, messages=small))
    # 8 workers: one all-reduce of 4 Mi elements (16 MiB) in 4 ms, 3 ms of it exposed
    write_traces(
        root, eight, kineto.job(8, comm_us=4000.0, messages=(("allreduce", 4 * MiB, 4 * MiB),))
    )
    code, out, err = _report(uri, "--traces", str(root), "--format", "json")
    assert (code, err) == (0, "")
    rows = {r["workers"]: r for r in json.loads(out)["communication"]}
    assert set(rows[4]) == {
        *("strategy", "workers", "nodes", "runs", "collectives_per_step", "bytes_per_step"),
        *("exposed_comm_s_per_step", "exposed_comm_share", "small_time_share", "busbw_gbps"),
        *("busbw_inter_gbps", "busbw_intra_gbps", "link_beta_gbps", "verdict", "evidence"),
    }
    a = rows[4]
    # 5 profiled steps (4 analysed, HTA leaves out the last), 2 kernels each
    assert (a["nodes"], a["runs"], a["collectives_per_step"]) == (1, 1, 2.0)
    assert a["bytes_per_step"] == 4 * MiB + 4 * 8192
    # exposed: 1 ms a step over the 4 analysed steps; span 4 x 10 + 0.5 = 40.5 ms
    assert a["exposed_comm_s_per_step"] == pytest.approx(0.001)
    assert a["exposed_comm_share"] == pytest.approx(4 / 40.5)
    assert a["small_time_share"] == pytest.approx(0.5)  # 1 ms of the 2 ms
    # 4 MiB in 1 ms: algbw 4.194304 GB/s x 2 (4 - 1) / 4 = 6.291456 GB/s, on one node
    assert a["busbw_gbps"] == pytest.approx(4.194304 * 1.5)
    assert a["busbw_intra_gbps"] == pytest.approx(4.194304 * 1.5)
    assert a["busbw_inter_gbps"] is None and a["link_beta_gbps"] is None  # two sizes: no fit
    assert a["verdict"] == "undecided" and "no link fit" in a["evidence"]
    b = rows[8]
    assert (b["nodes"], b["collectives_per_step"], b["bytes_per_step"]) == (2, 1.0, 16 * MiB)
    assert b["exposed_comm_s_per_step"] == pytest.approx(0.003)
    assert b["small_time_share"] == 0.0
    # 16 MiB in 4 ms: 4.194304 GB/s x 2 (8 - 1) / 8; the world group of a two-node job
    assert b["busbw_inter_gbps"] == pytest.approx(4.194304 * 1.75)
    assert b["busbw_intra_gbps"] is None
    code, text, _ = _report(uri, "--traces", str(root))
    assert code == 0
    table = text.split("Communication\n=============\n")[1].split("\n\n")[0].splitlines()
    assert table[2].split()[:8] == ["torch-ddp", "4", "1", "1", "2.0", "4.2", "MB", "1.00"]
    assert "- torch-ddp-8: undecided (exposed communication 29.6 % of the device time" in text


def test_no_communication_table_without_traces(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    write_store(uri, [Job("ddp-4", 4, T0, T0 + 60 * S)])
    code, text, _ = _report(uri)
    assert code == 0 and "Communication\n====" not in text
    code, out, _ = _report(uri, "--format", "json")
    assert json.loads(out)["communication"] == []


def _row(**values: float) -> dict[str, float]:
    base = {
        "exposed_comm_share": 0.2,
        "small_time_share": 0.1,
        "busbw_gbps": 40.0,
        "link_beta_gbps": 50.0,
    }
    return {**base, **values}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"exposed_comm_share": 0.049}, "hidden behind compute"),
        ({"small_time_share": 0.6}, "latency-bound"),
        ({}, "bandwidth-bound"),  # 40 / 50 = 80 % of beta
        ({"busbw_gbps": 34.0}, "undecided"),  # 68 % of beta: neither
        ({"link_beta_gbps": math.nan}, "undecided"),
        ({"busbw_gbps": math.nan}, "undecided"),
        ({"exposed_comm_share": math.nan}, "undecided"),
    ],
)
def test_verdicts_on_constructed_rows(values: dict[str, float], expected: str) -> None:
    word, evidence = verdict(_row(**values))
    assert word == expected
    assert evidence  # always says what decided it, or what is missing


def test_verdict_evidence_quotes_the_rows_numbers() -> None:
    word, evidence = verdict(_row())
    assert word == "bandwidth-bound"
    assert evidence == (
        "exposed communication 20.0 % of the device time (the line: 5 %); small messages 10 % of "
        "the collectives' time (the line: 50 %); large messages' busbw 40.0 GB/s, 80 % of the "
        "link fit's 50.0 GB/s (the line: 70 %)"
    )
    assert verdict(_row(), has_collectives=False)[0] == "undecided"


def test_profiled_steps() -> None:
    # every ProfilerStep of the rank's traces counts, HTA's window (steps) aside; rows written
    # before the count was kept fall back on the analysed steps
    assert profiled_steps({"steps": 1, "profiled_steps": 2}) == 2
    assert profiled_steps({"steps": 4, "profiled_steps": 5}) == 5
    assert profiled_steps({"steps": 3}) == 3


def test_two_profiler_steps_are_two_steps(tmp_path: Path) -> None:
    """A trace of two profiler steps: HTA's window analyses the first alone, yet the kernels
    of both are counted, so per step they are counted over two steps, not one."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    four = Job("ddp-4", 4, T0, T0 + 60 * S, logged=(0, 1, 2, 3))
    write_store(uri, [four])
    root = tmp_path / "traces"
    small = (("allreduce", MiB, MiB), ("allreduce", 8192, 8192))
    write_traces(root, four, kineto.job(4, messages=small, steps=2))
    code, out, err = _report(uri, "--traces", str(root), "--format", "json")
    assert (code, err) == (0, "")
    row = json.loads(out)["communication"][0]
    # 2 steps x 2 kernels on each rank: 2 a step, 4 MiB + 32 KiB a step
    assert row["collectives_per_step"] == 2.0
    assert row["bytes_per_step"] == 4 * MiB + 4 * 8192


def test_an_exposed_share_within_its_noise_of_the_line_names_both() -> None:
    # 4.9 % exposed with a half-width of 0.5 points over the ranks holds the 5 % line
    word, evidence = verdict(_row(exposed_comm_share=0.049), half=0.005)
    assert word == "near the line: hidden behind compute or bandwidth-bound"
    assert evidence.startswith(
        "exposed communication 4.9 % of the device time (95 % interval 4.4–5.4 %; the line: 5 %)"
    )
    # a narrower interval decides it
    assert verdict(_row(exposed_comm_share=0.049), half=0.0005)[0] == "hidden behind compute"
