"""``analyze-traces`` on real CPU traces of a real gloo job (tests/fixtures/traces/gloo, written
by tools/gloo_traces.py): every number it gives for each rank is worked out again here, straight
from the JSON with plain loops, by the rules docs/traces.md states (the last profiler step left
out, times rounded to whole microseconds inwards, operators of one kind counted once where they
nest or overlap)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_runner

from itwin_report.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "traces" / "gloo"
COPIES = {"aten::copy_", "aten::_to_copy", "aten::to", "aten::contiguous", "aten::clone"}


def _kind(event: dict[str, Any]) -> str | None:
    """What an event is on a CPU timeline: the operators by name, gloo's own annotation of the
    all-reduce it runs on its thread; None for what is not an operator."""
    name, cat = event["name"], event["cat"]
    if cat == "user_annotation":
        return "communication" if name.startswith("gloo:") else None
    if cat != "cpu_op":
        return None
    if name.startswith(("c10d::", "gloo:")):
        return "communication"
    return "memory" if name in COPIES else "compute"


def _union(intervals: list[tuple[int, int]]) -> int:
    """Length covered by the intervals: sorted by start, one run while a start is not beyond
    the furthest end so far."""
    total = 0
    run_start = run_end = None
    for start, end in sorted(intervals):
        if run_end is not None and start <= run_end:
            run_end = max(run_end, end)
            continue
        if run_end is not None and run_start is not None:
            total += run_end - run_start
        run_start, run_end = start, end
    if run_end is not None and run_start is not None:
        total += run_end - run_start
    return total


def _expected(path: Path) -> dict[str, Any]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = [
        e
        for e in doc["traceEvents"]
        if "dur" in e and e.get("cat") is not None and e["cat"] != "Trace"
    ]
    step_starts = [e["ts"] for e in events if e["name"].startswith("ProfilerStep#")]
    step_names = {e["name"] for e in events if e["name"].startswith("ProfilerStep#")}
    cutoff = max(math.ceil(ts) for ts in step_starts)
    kept: list[tuple[int, int, str]] = []
    for event in events:
        kind = _kind(event)
        start = math.ceil(event["ts"])
        if kind is not None and start < cutoff:
            kept.append((start, math.floor(event["ts"] + event["dur"]), kind))
    span = max(end for _, end, _ in kept) - min(start for start, _, _ in kept)
    busy = _union([(s, e) for s, e, _ in kept])
    of_kind = {
        k: _union([(s, e) for s, e, kk in kept if kk == k])
        for k in ("compute", "communication", "memory")
    }
    both = _union([(s, e) for s, e, k in kept if k in ("compute", "communication")])
    overlap = of_kind["compute"] + of_kind["communication"] - both
    idle = span - busy
    info = doc["distributedInfo"]
    return {
        "rank": info["rank"],
        "world_size": info["world_size"],
        "device": "cpu",
        "steps": len(step_names) - 1,
        "span_s": span / 1e6,
        "compute_s": of_kind["compute"] / 1e6,
        "communication_s": of_kind["communication"] / 1e6,
        "memory_s": of_kind["memory"] / 1e6,
        "idle_s": idle / 1e6,
        "exposed_communication_s": (of_kind["communication"] - overlap) / 1e6,
        "compute_pct": round(100 * of_kind["compute"] / span, 2),
        "non_compute_pct": round(100 * (span - of_kind["compute"] - idle) / span, 2),
        "idle_pct": round(100 * idle / span, 2),
        "overlap_pct": round(100 * overlap / of_kind["communication"], 2),
    }


def _files() -> list[Path]:
    return sorted(FIXTURE.glob("worker_*.pt.trace.json.gz"))


def test_the_fixture_is_two_small_real_traces() -> None:
    files = _files()
    assert len(files) == 2
    assert sum(p.stat().st_size for p in files) < 1 << 20
    for path in files:
        doc = json.loads(gzip.decompress(path.read_bytes()))
        assert doc["distributedInfo"]["backend"] == "gloo"
        assert doc["deviceProperties"] == []
        names = {e.get("name") for e in doc["traceEvents"]}
        assert {"c10d::allreduce_", "gloo:all_reduce", "aten::addmm"} <= names


def test_every_number_is_worked_out_again_from_the_json() -> None:
    result = cli_runner().invoke(main, ["analyze-traces", str(FIXTURE), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    # recorded without shapes: gloo's all-reduces are counted, their sizes unknown
    assert [w.split(": ", 1)[1][:40] for w in body["warnings"]] == [
        "3 collectives without message sizes (a k"
    ] * 2
    rows = {Path(r["file"]).name: r for r in body["ranks"]}
    assert sorted(rows) == [p.name for p in _files()]
    for path in _files():
        row, expected = rows[path.name], _expected(path)
        assert set(row) == {"file", *expected}
        for key, value in expected.items():
            if isinstance(value, float):
                assert row[key] == pytest.approx(value, rel=1e-9, abs=1e-12), (path.name, key)
            else:
                assert row[key] == value, (path.name, key)
        # the operators did run and did talk: none of the shares is degenerate
        assert row["steps"] == 2 and row["compute_s"] > 0 and row["communication_s"] > 0


def test_the_two_ranks_are_rank_0_and_1_of_2_from_distributed_info(tmp_path: Path) -> None:
    # renamed so that the file names say nothing: the ranks come from distributedInfo
    for i, path in enumerate(_files()):
        (tmp_path / f"trace_{1 - i}.pt.trace.json.gz").write_bytes(path.read_bytes())
    result = cli_runner().invoke(main, ["analyze-traces", str(tmp_path), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    ranks = json.loads(result.stdout)["ranks"]
    assert [(r["rank"], r["world_size"], r["device"]) for r in ranks] == [
        (0, 2, "cpu"),
        (1, 2, "cpu"),
    ]
    assert [Path(r["file"]).name for r in ranks] == [
        "trace_1.pt.trace.json.gz",
        "trace_0.pt.trace.json.gz",
    ]


def test_the_table_shows_the_same_numbers() -> None:
    result = cli_runner().invoke(main, ["analyze-traces", str(FIXTURE)])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    for path in _files():
        expected = _expected(path)
        line = next(x for x in lines if x.rstrip().endswith(path.name))
        cells = line.split()
        assert cells[:3] == [str(expected["rank"]), "cpu", str(expected["steps"])]
        for key in ("compute_pct", "non_compute_pct", "idle_pct", "overlap_pct"):
            assert f"{expected[key]:.2f}" in cells, key


def test_gloos_all_reduces_are_the_collectives_of_a_cpu_trace() -> None:
    result = cli_runner().invoke(main, ["analyze-traces", str(FIXTURE), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    body = json.loads(result.stdout)
    for path in _files():
        doc = json.loads(gzip.decompress(path.read_bytes()))
        ops = [e for e in doc["traceEvents"] if e.get("name") == "gloo:all_reduce"]
        rank = doc["distributedInfo"]["rank"]
        rows = [r for r in body["collectives"] if r["rank"] == rank]
        # every gloo op of the trace (the window aside), the group the world of 2
        assert [(r["collective"], r["group_size"], r["count"], r["bytes"]) for r in rows] == [
            ("all_reduce", 2, len(ops), None)
        ]
        assert rows[0]["time_s"] == pytest.approx(sum(e["dur"] for e in ops) / 1e6, rel=1e-12)
