"""The decision: Pareto front, knee, deadline and noise, on stores whose front is known by
construction; the Pareto plot's content; the emulator's energy counter read both ways."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_runner
from test_energy import job, store, worker

import itwin_report as ir
from itwin_report.analysis.pareto import Point, front, knee, needed_s, walk, within_deadline
from itwin_report.cli import main
from itwin_report.plots.decisions import pareto_figure

REPORT = "generate-scalability-report"


def flat_job(runs: list[dict[str, Any]], strategy: str, workers: int, t: float, watts: float,
             name: str = "") -> None:  # fmt: skip
    """A job whose rank 0 logs 3 epochs of ``t`` s and 36 one-second power samples of
    ``watts``: the energy, scaled to all GPUs, is workers x watts x 36 / 3600 Wh, so the
    energy per epoch is workers x watts / 300 Wh."""
    metrics = {"epoch_time_s": [t, t, t], "gpu_power_W": [watts] * 36}
    job(runs, name or f"{strategy}-{workers}", [worker("w0", strategy, workers, 0, metrics)])


def decision_json(uri: str, *args: str) -> dict[str, Any]:
    result = cli_runner().invoke(
        main, [REPORT, "--tracking-uri", uri, "-q", "--no-plots", "--format", "json", *args]
    )
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def knee_store(sqlite_store_template: Path, tmp_path: Path) -> str:
    runs: list[dict[str, Any]] = []
    flat_job(runs, "b", 1, 100.0, 300.0)  # 100 s, 1.0 Wh per epoch, 100/3600 GPU-h
    flat_job(runs, "b", 2, 55.0, 165.0)  # 55 s, 1.1 Wh, 110/3600 GPU-h
    flat_job(runs, "b", 4, 50.0, 150.0)  # 50 s, 2.0 Wh, 200/3600 GPU-h
    flat_job(runs, "c", 2, 80.0, 240.0)  # 80 s, 1.6 Wh: dominated by b-2 (faster, less energy)
    return store(sqlite_store_template, tmp_path, runs)


def test_front_knee_and_sentences(knee_store: str) -> None:
    doc = decision_json(knee_store)
    assert [(r["strategy"], r["workers"]) for r in doc["pareto"]] == [("b", 4), ("b", 2), ("b", 1)]
    first = doc["pareto"][0]
    assert first["epoch_time_s"] == 50.0 and first["energy_wh_per_epoch"] == pytest.approx(2.0)
    assert first["gpu_hours_per_epoch"] == pytest.approx(200 / 3600)
    rec = doc["recommendation"]
    assert rec["fastest"] == {"strategy": "b", "workers": 4}
    assert rec["most_frugal"] == {"strategy": "b", "workers": 1}
    # b-1 -> b-2: 100/55 - 1 = 81.8 % speed for 10 % energy (ratio 0.12): taken;
    # b-2 -> b-4: 55/50 - 1 = 10 % speed for 2.0/1.1 - 1 = 81.8 % energy (ratio 8.2): refused
    assert rec["knee"] == {"strategy": "b", "workers": 2}
    assert rec["max_energy_per_speedup"] == 1.0 and rec["deadline"] is None
    assert (
        "Knee: b on 2 GPUs: 1.8x faster than b on 1 GPU for 1.1x the energy; going to b on 4 GPUs "
        "adds 10 % speed for 82 % more energy" in " ".join(rec["sentences"])
    )
    # b-4 and b-2 log power on rank 0 only (1 of 4, 1 of 2 GPUs): their energy is an estimate
    assert "Fastest: b on 4 GPUs, 50.00 s per epoch for ~2.00 Wh." in rec["sentences"]
    assert "Most frugal: b on 1 GPU, 1.00 Wh per epoch in 100.00 s." in rec["sentences"]
    # a generous threshold walks to the fastest
    loose = decision_json(knee_store, "--max-energy-per-speedup", "10")["recommendation"]
    assert loose["knee"] == {"strategy": "b", "workers": 4}
    assert any("it is also the fastest" in s for s in loose["sentences"])


@pytest.mark.parametrize(
    ("hours", "choice", "words"),
    [
        # 100 epochs: b-1 10000 s (2.78 h, 2.78 GPU-h), b-2 5500 s (3.06 GPU-h), b-4 5000 s
        ("3", ("b", 1), "Cheapest to finish 100 epochs within 3 h: b on 1 GPU, 2.78 GPU-hours"),
        ("2", ("b", 2), "Cheapest to finish 100 epochs within 2 h: b on 2 GPUs, 3.06 GPU-hours"),
        ("1", None, "No configuration finishes 100 epochs within 1 h; the fastest, b on 4 GPUs, "
                    "needs 1.39 h"),
    ],
)  # fmt: skip
def test_deadline(knee_store: str, hours: str, choice: tuple[str, int] | None, words: str) -> None:
    rec = decision_json(knee_store, "--deadline-hours", hours, "--epochs", "100")["recommendation"]
    expected = None if choice is None else {"strategy": choice[0], "workers": choice[1]}
    assert rec["deadline"] == {
        "hours": float(hours),
        "epochs": 100,
        "samples_per_epoch": None,
        "choice": expected,
    }
    # no performance.json: no wall time, so no set-up to add, and the sentence says so
    assert any("(set-up not measured, not included)" in s for s in rec["sentences"])
    assert any(words in s for s in rec["sentences"]), rec["sentences"]


def test_largest_count_is_also_the_most_frugal(sqlite_store_template: Path, tmp_path: Path) -> None:
    runs: list[dict[str, Any]] = []
    flat_job(runs, "a", 1, 100.0, 300.0)  # 1.0 Wh per epoch
    flat_job(runs, "a", 2, 50.0, 120.0)  # 0.8 Wh
    flat_job(runs, "a", 4, 20.0, 45.0)  # 0.6 Wh: fastest and most frugal
    doc = decision_json(store(sqlite_store_template, tmp_path, runs))
    assert [(r["strategy"], r["workers"]) for r in doc["pareto"]] == [("a", 4)]
    rec = doc["recommendation"]
    assert rec["fastest"] == rec["most_frugal"] == rec["knee"] == {"strategy": "a", "workers": 4}
    assert rec["sentences"][0] == (
        "a on 4 GPUs is both the fastest and the most frugal configuration: 20.00 s and ~0.60 Wh "
        "per epoch."
    )


def test_two_strategies_tie_within_noise(sqlite_store_template: Path, tmp_path: Path) -> None:
    runs: list[dict[str, Any]] = []
    # two runs each: c-2 at 50 and 52 s, d-2 at 51 and 53 s (t intervals overlap widely);
    # energy per epoch c: 2 x 150/300 = 1.0 and 1.04 Wh; d: 1.02 and 1.06 Wh
    for t, w in ((50.0, 150.0), (52.0, 156.0)):
        flat_job(runs, "c", 2, t, w, name=f"c-2-{t:g}")
    for t, w in ((51.0, 153.0), (53.0, 159.0)):
        flat_job(runs, "d", 2, t, w, name=f"d-2-{t:g}")
    doc = decision_json(store(sqlite_store_template, tmp_path, runs))
    rec = doc["recommendation"]
    assert rec["fastest"] == rec["most_frugal"] == {"strategy": "c", "workers": 2}
    assert rec["fastest_within_noise_of"] == [{"strategy": "d", "workers": 2}]
    assert rec["most_frugal_within_noise_of"] == [{"strategy": "d", "workers": 2}]
    assert any(
        "c on 2 GPUs and d on 2 GPUs (52.00 s) are within noise on time per epoch" in s
        for s in rec["sentences"]
    )
    row = next(r for r in doc["gpu"] if r["strategy"] == "c")
    low, high = row["energy_wh_per_epoch_ci"]  # mean 1.02, s = 0.0283, t(0.975, 1) = 12.706
    half = 12.706204736 * math.sqrt(((1.0 - 1.02) ** 2 + (1.04 - 1.02) ** 2) / 1) / math.sqrt(2)
    assert (low, high) == pytest.approx((1.02 - half, 1.02 + half), rel=1e-6)


def test_every_format_carries_the_decision(knee_store: str) -> None:
    base = [REPORT, "--tracking-uri", knee_store, "-q", "--no-plots"]
    for fmt in ("table", "markdown"):
        out = cli_runner().invoke(main, [*base, "--format", fmt]).stdout
        assert "Time–energy Pareto front" in out and "Knee: b on 2 GPUs" in out
    page = cli_runner().invoke(main, [*base, "--format", "html"]).stdout
    summary = page.split('id="summary"')[1].split("</section>")[0]
    assert "Use b on 2 GPUs: 55.00 s and ~1.10 Wh per epoch, the knee" in summary
    assert "Time–energy Pareto front" in page and "<svg" in page.split("Pareto front")[1]
    csv = cli_runner().invoke(main, [*base, "--format", "csv"]).stdout
    assert "gpu_hours_per_epoch" in csv.splitlines()[0]


def test_pareto_plot_content(knee_store: str) -> None:
    report = ir.build(ir.load(knee_store, "energy"))
    fig = pareto_figure(report)
    assert fig is not None
    ax = fig.axes[0]
    assert ax.get_xlabel() == "Epoch time after warm-up (s)"
    assert ax.get_ylabel() == "Energy per epoch (Wh, all GPUs; ~ estimated)"
    points = {
        (round(float(x), 6), round(float(y), 6))
        for coll in ax.collections[:2]
        for x, y in coll.get_offsets()
    }
    assert points == {(100.0, 1.0), (55.0, 1.1), (50.0, 2.0), (80.0, 1.6)}
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == "time–energy front"]
    assert list(line.get_xdata()) == [50.0, 55.0, 100.0]
    assert [round(y, 9) for y in line.get_ydata()] == [2.0, 1.1, 1.0]
    labels = {t.get_text() for t in ax.texts}
    assert labels == {"b×1", "~b×2", "~b×4", "~c×2"}  # rank 0 of 2 or 4 GPUs logged: estimated
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["b", "c", "time–energy front", "knee: b×2"]
    knee_ring = ax.collections[-1]
    assert [tuple(p) for p in knee_ring.get_offsets()] == [pytest.approx((55.0, 1.1))]


def test_front_rules() -> None:
    a = Point("s", 1, 100.0, 1.0)
    b = Point("s", 2, 55.0, 1.1)
    c = Point("s", 4, 50.0, 2.0)
    dominated = Point("t", 2, 80.0, 1.6)
    same = Point("t", 4, 50.0, 2.0)  # equal to c: the one listed first by workers, then name
    unknown = Point("u", 8, math.nan, 1.0)
    pts = [dominated, c, a, b, same, unknown]
    assert front(pts) == [c, b, a]
    assert knee(pts) == b and knee(pts, 10.0) == c and knee([]) is None
    steps = walk(pts)
    assert [s.taken for s in steps] == [True, False]
    assert steps[0].speed_gain == pytest.approx(100 / 55 - 1)
    assert steps[1].energy_added == pytest.approx(2.0 / 1.1 - 1)
    # both intervals overlap: the step is noise and is taken whatever its ratio
    wide = [
        Point("s", 1, 100.0, 1.0, time_ci=(90, 110), energy_ci=(0.9, 1.5)),
        Point("s", 2, 99.0, 1.4, time_ci=(89, 109), energy_ci=(1.2, 1.6)),
    ]
    assert knee(wide).workers == 2 and walk(wide)[0].noise
    # the deadline takes the fewest GPU-hours, set-up included: 10 epochs within 100 s
    one = Point("s", 1, 9.0, 1.0, setup_s=20.0)  # 20 + 90 = 110 s: late (90 s without set-up)
    two = Point("s", 2, 4.5, 0.9, setup_s=20.0)  # 20 + 45 = 65 s, 130 GPU-s
    four = Point("s", 4, 2.0, 2.0, setup_s=20.0)  # 20 + 20 = 40 s, 160 GPU-s
    assert within_deadline([one, two, four], 100.0, 10) == two
    assert within_deadline([one, two, four], 39.0, 10) is None
    assert needed_s(one, 10) == 110.0 and needed_s(Point("s", 1, 9.0, 1.0), 10) == 90.0
    # equal GPU-seconds: less energy first
    same = Point("t", 2, 4.5, 0.5, setup_s=20.0)
    assert within_deadline([one, two, four, same], 100.0, 10) == same


def test_emulated_counter_read_both_ways(tmp_path: Path) -> None:
    """emulate --energy-counter: the report reads the counter; without the counter points the
    same runs give the same energy from the power samples; both agree with the store's raw
    points summed here (last - first of each counter, sum(power) x interval)."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    args = ["emulate", "-q", "--tracking-uri", uri, "--strategies", "torch-ddp"]
    args += ["--workers", "1,2", "--epochs", "3", "--repeats", "1", "--energy-counter"]
    assert cli_runner().invoke(main, args).exit_code == 0
    data = ir.load(uri, "emulated-cluster")
    counted = ir.build(data)
    assert set(counted.gpu["energy_source"]) == {"energy counter"}
    without = data.metrics[data.metrics["key"] != "gpu_energy_J"].reset_index(drop=True)
    data.metrics = without
    sampled = ir.build(data)
    assert set(sampled.gpu["energy_source"]) == {"power samples"}
    assert list(counted.gpu["energy_wh"]) == pytest.approx(list(sampled.gpu["energy_wh"]), 1e-9)
    db = sqlite3.connect(tmp_path / "m.db")
    rows = db.execute(
        "SELECT p.value, m.run_uuid, m.key, m.value FROM metrics m JOIN params p "
        "ON p.run_uuid = m.run_uuid AND p.key = 'global_world_size' "
        "WHERE m.key IN ('gpu_energy_J', 'gpu_power_W') ORDER BY m.run_uuid, m.key, m.step"
    ).fetchall()
    db.close()
    runs: dict[str, dict[str, list[float]]] = {}
    size_of: dict[str, int] = {}
    for size, run, key, value in rows:
        runs.setdefault(run, {}).setdefault(key, []).append(value)
        size_of[run] = int(size)
    per_size = {1: 0.0, 2: 0.0}
    for run, series in runs.items():
        joules, watts = series["gpu_energy_J"], series["gpu_power_W"]
        assert len(joules) == len(watts) + 1  # one reading before the first sample
        assert joules[-1] - joules[0] == pytest.approx(sum(watts) * 1.0, rel=1e-12)
        per_size[size_of[run]] += (joules[-1] - joules[0]) / 3600
    energy = dict(zip(counted.gpu["workers"], counted.gpu["energy_wh"], strict=True))
    assert energy == pytest.approx(per_size, rel=1e-12)
    params = data.runs.sort_values("rank")
    assert list(params.loc[params["workers"] == 2, "gpu_index"]) == ["0", "1"]
    assert set(params["hostname"]) == {"node0000"}
