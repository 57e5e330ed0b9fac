"""Plots: plotted data equal the tables, ideal lines, labels, scales, colours, saved files."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_report_builders import make_data, metric, profile, run, smoothed

from itwin_report.errors import ReportError
from itwin_report.plots import PALETTE, make_figures, save_figures, strategy_colors
from itwin_report.report import build_report

R, G = "local_samples_per_sec", "avg_samples_per_sec"


def report():
    # two strategies, workers 4 and 8 (ddp also 16); ddp scales linearly, ds is 1.25x slower
    runs, metrics, profs = [], [], []
    for strategy, counts, t4 in (("ddp", [4, 8, 16], 40.0), ("ds", [4, 8], 50.0)):
        for w in counts:
            rid = f"{strategy}{w}"
            runs.append(run(rid, rid, strategy, w, samples_per_epoch=800))
            t = t4 * 4 / w if strategy == "ddp" else t4 * 4 / w * 1.25
            metrics += metric(rid, "epoch_time_s", [2 * t, t, t])
            metrics += metric(rid, "gpu_power_W", [100 * w] * 36)
            metrics += metric(rid, "gpu_utilization_percent", [90 - w] * 3)
            metrics += metric(rid, R, smoothed([5] + [10] * 11))
            metrics += metric(rid, G, [8] * 12)
            profs += profile(rid, [("aten::mm", 70), ("nccl:all_reduce", 20), ("other", 10)])
    return build_report(make_data(runs, metrics, profs))


def line_data(ax):
    return {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.get_lines()}


@pytest.fixture(scope="module")
def figs():
    rep = report()
    return rep, make_figures(rep)


def test_all_figures_present(figs) -> None:
    _, figures = figs
    assert list(figures) == [
        "epoch_time", "speedup", "efficiency", "computation",
        "gpu_energy", "gpu_utilization", "throughput", "rates",
    ]  # fmt: skip


def test_epoch_time_lines_equal_table(figs) -> None:
    _, figures = figs
    ax = figures["epoch_time"].axes[0]
    lines = line_data(ax)
    # ddp: 40*4/w = 40, 20, 10 s at 4, 8, 16; ds: 50*4/w*1.25 = 62.5, 31.25 s at 4, 8
    assert lines["ddp"] == ([4, 8, 16], [40.0, 20.0, 10.0])
    assert lines["ds"] == ([4, 8], [62.5, 31.25])
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "Workers (GPUs)" and "(s)" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4", "8", "16"]
    assert "first 1 epoch(s)" in ax.get_title()


def test_speedup_ideal_and_efficiency(figs) -> None:
    _, figures = figs
    lines = line_data(figures["speedup"].axes[0])
    assert lines["ideal (linear)"] == ([4, 16], [1.0, 4.0])
    assert lines["ddp"][1] == pytest.approx([1.0, 2.0, 4.0])
    eff = figures["efficiency"].axes[0]
    assert line_data(eff)["ddp"][1] == pytest.approx([1.0, 1.0, 1.0])
    assert line_data(eff)["ideal"][1] == [1.0, 1.0]


def test_bars_and_colours(figs) -> None:
    rep, figures = figs
    colors = strategy_colors(rep)
    assert colors == {"ddp": PALETTE[0], "ds": PALETTE[1]}
    energy = figures["gpu_energy"].axes[0]
    bars = energy.patches
    assert len(bars) == 5  # ddp 4/8/16 + ds 4/8
    # energy: 36 samples * 100*w W * 1 s / 3600 = w Wh
    assert sorted(b.get_height() for b in bars) == pytest.approx([4, 4, 8, 8, 16])
    from matplotlib.colors import to_hex

    assert {to_hex(b.get_facecolor()) for b in bars} == {PALETTE[0], PALETTE[1]}
    comp = figures["computation"].axes[0]
    assert len(comp.patches) == 15  # 5 configurations x (computation, communication, other)
    assert comp.get_ylim() == (0, 1)
    heights = [round(p.get_height(), 9) for p in comp.patches]
    assert heights[:5] == [0.7] * 5 and heights[5:10] == [0.2] * 5
    util = figures["gpu_utilization"].axes[0]
    assert sorted(b.get_height() for b in util.patches) == [74, 82, 82, 86, 86]
    ddp_line = line_data(figures["throughput"].axes[0])["ddp"]
    assert to_hex(figures["epoch_time"].axes[0].get_lines()[0].get_color()) == PALETTE[0]
    assert ddp_line[0] == [4, 8, 16]


def test_throughput_ideal_and_rates(figs) -> None:
    rep, figures = figs
    lines = line_data(figures["throughput"].axes[0])
    # rate source (preferred over epoch time): steady Rate 10/s per worker (after dropping
    # the 2 warm-up points: Rate 5, 8) * w workers = 40, 80, 160 -> ideal from 40 at 4 to 160 at 16
    assert set(rep.throughput["source"]) == {"rate metrics"}
    assert lines["ddp"][1] == pytest.approx([40, 80, 160])
    assert lines["ddp ideal"] == ([4, 16], [40.0, 160.0])
    rates = line_data(figures["rates"].axes[0])
    assert rep.rate_config == ("ddp", 4)
    assert rates["left out of steady rate"][1] == pytest.approx([5.0, 8.0])
    assert len(rates["Rate (smoothed)"][0]) == 12 and rates["GlobalRate"][1] == [8.0] * 12


MAGIC = {"png": (b"\x89PNG",), "pdf": (b"%PDF",), "svg": (b"<?xml", b"<svg")}


@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_saved_files(tmp_path: Path, fmt: str) -> None:
    figures = make_figures(report())
    paths = save_figures(figures, tmp_path / "plots", fmt)
    assert [p.name for p in paths] == [f"{n}.{fmt}" for n in figures]
    for p in paths:
        assert p.read_bytes().startswith(MAGIC[fmt])
    assert all(not f.axes for f in figures.values())  # cleared once written
    import matplotlib.pyplot as plt

    assert plt.get_fignums() == []


def test_empty_report_and_bad_format(tmp_path: Path) -> None:
    empty = build_report(make_data([run("a", "A", "ddp", 4)]))
    assert make_figures(empty) == {}
    with pytest.raises(ReportError, match="unknown plot format"):
        save_figures({}, tmp_path, "gif")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ReportError, match="cannot write plots"):
        save_figures(make_figures(report()), blocker / "sub")
