"""Plots: plotted data equal the tables, ideal lines, labels, scales, colours, saved files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_report_builders import make_data, metric, profile, run, smoothed

from itwin_report.plots import (
    PALETTE,
    figure_svg,
    make_figures,
    plot_report,
    save_figures,
    strategy_colors,
)
from itwin_report.report import build_report
from itwin_report.util.errors import ReportError

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
        "gpu_energy", "gpu_utilization", "throughput", "rates", "pareto",
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
    # energy: 36 samples * 100*w W * 1 s / 3600 = w Wh on rank 0's GPU, scaled to the job's
    # w GPUs: w * w Wh, each bar hatched as an estimate
    assert sorted(b.get_height() for b in bars) == pytest.approx([16, 16, 64, 64, 256])
    assert {b.get_hatch() for b in bars} == {"//"}
    assert "hatched: estimated" in energy.get_title()
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


def two_bases_report():
    # ddp at 4, 8, 16 and hvd at 8, 16 only; both scale linearly from their own base
    runs, metrics = [], []
    for strategy, counts in (("ddp", [4, 8, 16]), ("hvd", [8, 16])):
        for w in counts:
            rid = f"{strategy}{w}"
            runs.append(run(rid, rid, strategy, w))
            metrics += metric(rid, "epoch_time_s", [160.0 / w] * 3)
    return build_report(make_data(runs, metrics))


def test_speedup_ideal_per_base_agrees_with_table() -> None:
    rep = two_bases_report()
    table = rep.epoch_time.set_index(["strategy", "workers"])
    # each strategy against its own base: hvd at 8 workers is speedup 1, efficiency 100 %
    assert table.loc[("hvd", 8), "speedup"] == pytest.approx(1.0)
    assert table.loc[("hvd", 8), "efficiency"] == pytest.approx(1.0)
    lines = line_data(make_figures(rep)["speedup"].axes[0])
    # ideal speedup = workers / base: from 4 -> 1, 2, 4 at 4..16; from 8 -> 1, 2 at 8, 16
    assert lines["ideal from 4 workers"] == ([4, 16], [1.0, 4.0])
    assert lines["ideal from 8 workers"] == ([8, 16], [1.0, 2.0])
    # a row at 100 % efficiency lies on the ideal of its own base
    hvd_x, hvd_y = lines["hvd"]
    assert hvd_x == [8, 16] and hvd_y == pytest.approx([1.0, 2.0])


def test_one_layout_pass_and_no_layout_engine(tmp_path: Path) -> None:
    figures = make_figures(report())
    draws = []
    for fig in figures.values():
        assert fig.get_layout_engine() is None
        fig.canvas.mpl_connect("draw_event", lambda event: draws.append(event))
    save_figures(figures, tmp_path, "png")
    assert len(draws) == len(figures)  # each figure drawn exactly once


HOSTILE = ["<script>alert(1)</script>", "$x^2$ ../../etc/passwd", "a&b \"q\" 'q'"]


def hostile_report():
    runs, metrics = [], []
    for i, strategy in enumerate(HOSTILE):
        for w in (2, 4):
            rid = f"r{i}-{w}"
            runs.append(run(rid, rid, strategy, w))
            metrics += metric(rid, "epoch_time_s", [10.0 / w] * 3)
            metrics += metric(rid, "gpu_power_W", [50.0] * 4)
    return build_report(make_data(runs, metrics))


def test_store_values_never_name_files_and_stay_literal(tmp_path: Path) -> None:
    rep = hostile_report()
    figures = make_figures(rep)
    legend = [t.get_text() for t in figures["epoch_time"].axes[0].get_legend().get_texts()]
    paths = save_figures(figures, tmp_path / "plots", "svg")
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(p.name for p in paths)
    stems = {"epoch_time", "speedup", "efficiency", "gpu_energy", "pareto"}
    assert {p.stem for p in paths} == stems
    assert [p.parent for p in paths] == [tmp_path / "plots"] * 5
    # "$" escaped so matplotlib shows it instead of starting mathtext
    assert sorted(legend) == sorted(h.replace("$", "\\$") for h in HOSTILE)


def test_missing_plots_say_why() -> None:
    runs, metrics, profs = [], [], []
    for w in (1, 2):
        rid = f"cpu{w}"
        runs.append(run(rid, rid, "ddp", w))
        metrics += metric(rid, "epoch_time_s", [4.0 / w] * 2)
        # a profile recorded without a GPU: zero device time in every row
        profs += profile(rid, [("aten::mm", 0), ("gloo:all_reduce", 0)])
    plots = plot_report(build_report(make_data(runs, metrics, profs)))
    assert list(plots.figures) == ["epoch_time", "speedup", "efficiency"]
    assert plots.missing == {
        "computation": "the profiles hold no GPU time (recorded without a GPU)",  # the report's
        "gpu_energy": "no GPU metrics",
        "gpu_utilization": "no GPU metrics",
        "throughput": "no throughput data",
        "rates": "no run logged Rate/GlobalRate metrics",
        "pareto": "no GPU metrics",
        "time_breakdown": "no run's wall time (total_time of performance.json)",
    }


def test_svg_keeps_text_as_escaped_text() -> None:
    import xml.etree.ElementTree as ET

    rep = hostile_report()
    fig = make_figures(rep)["epoch_time"]
    svg = figure_svg(fig, "epoch_time")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "<script" not in svg and "<path d" in svg
    root = ET.fromstring(svg)  # well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    texts = ["".join(t.itertext()) for t in root.iter(f"{ns}text")]
    assert "Workers (GPUs)" in texts
    assert set(HOSTILE) <= set(texts)  # names as literal text, "$" shown as itself
    assert not [e for e in root.iter() if e.tag.endswith(("script", "foreignObject"))]
    other = figure_svg(make_figures(rep)["speedup"], "speedup")
    ids = set(re.findall(r'id="([^"]+)"', svg))
    assert ids and not ids & set(re.findall(r'id="([^"]+)"', other))


def test_throughput_ideal_agrees_with_table_efficiency(figs) -> None:
    rep, figures = figs
    lines = line_data(figures["throughput"].axes[0])
    for rec in rep.throughput.to_dict("records"):
        xs, ys = lines[f"{rec['strategy']} ideal"]
        if rec["workers"] == xs[-1]:
            # the table's efficiency = measured / ideal at the same worker count
            assert rec["samples_per_sec"] / ys[-1] == pytest.approx(rec["efficiency"])


# ---- every text that reaches matplotlib is literal, short, and quiet ----

MATH_NAMES = ["$\\notacommand{x}$", "$x^{2}$", "a\\$b$", "back\\slash$"]


def scaling_report(names: list[str], counts=(2, 4, 8, 16), predict: list[int] | None = None):
    """Strategies with Amdahl-like epoch times (serial 2 s + 60 s / workers) and GPU power."""
    runs, metrics, profs = [], [], []
    for i, strategy in enumerate(names):
        for w in counts:
            rid = f"s{i}-{w}"
            runs.append(run(rid, rid, strategy, w, samples_per_epoch=800))
            t = 2.0 + 60.0 / w + 0.1 * i
            metrics += metric(rid, "epoch_time_s", [t * 1.5, t, t * 1.01, t * 0.99])
            metrics += metric(rid, "gpu_power_W", [100.0] * 4)
            metrics += metric(rid, R, smoothed([5] + [10] * 11))
            profs += profile(rid, [("aten::mm", 70), ("nccl:all_reduce", 20)])
    return build_report(make_data(runs, metrics, profs), predict_workers=predict or [])


def all_texts(fig) -> list[str]:
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def test_no_store_value_is_read_as_mathtext(tmp_path: Path) -> None:
    """Titles, legends, tick labels and annotations of every figure, the prediction plot
    included, go through one escaping function: nothing is mathtext, nothing fails to draw."""
    from matplotlib.cbook import is_math_text

    rep = scaling_report(MATH_NAMES, predict=[64])
    plots = plot_report(rep)
    assert "prediction" in plots.figures and "computation" in plots.figures
    texts = {name: all_texts(fig) for name, fig in plots.figures.items()}
    for name, found in texts.items():
        assert not [t for t in found if is_math_text(t)], name
    legend = [t.get_text() for t in plots.figures["prediction"].axes[0].get_legend().get_texts()]
    assert "\\$x^{2}\\$ (Amdahl)" in legend and "\\$\\notacommand{x}\\$ (Amdahl)" in legend
    svg = figure_svg(plots.figures["prediction"], "prediction")
    assert "$x^{2}$ (Amdahl)" in svg and "$\\notacommand{x}$ (Amdahl)" in svg
    assert "a\\$b$ (Amdahl)" in svg  # drawn as typed: the backslash stays
    paths = save_figures(plots.figures, tmp_path, "png")  # drawing parses every text
    assert len(paths) == len(plots.figures)


def test_long_names_are_shortened_in_every_figure() -> None:
    from itwin_report.plots import label
    from itwin_report.util.escape import ELLIPSIS, MAX_SHOWN

    long = "q" * 100_000
    rep = scaling_report([long, "ddp"], predict=[64])
    plots = plot_report(rep)
    for name, fig in plots.figures.items():
        longest = max(len(t) for t in all_texts(fig))
        assert longest <= MAX_SHOWN + 40, (name, longest)
    legend = [t.get_text() for t in plots.figures["epoch_time"].axes[0].get_legend().get_texts()]
    assert "q" * (MAX_SHOWN - 1) + ELLIPSIS in legend
    assert label("x" * 10) == "x" * 10 and len(label("x" * 1000)) == MAX_SHOWN


def test_many_strategies_draw_without_library_warnings(tmp_path: Path, capfd) -> None:
    import warnings

    rep = scaling_report([f"s{i:03d}" for i in range(40)], counts=(2, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plots = plot_report(rep)
        save_figures(plots.figures, tmp_path, "png")
    assert not caught, [str(w.message) for w in caught]
    assert capfd.readouterr().err == ""


def test_missing_reasons_state_the_real_cause() -> None:
    from itwin_report.plots import missing_reason

    # --rate-config naming a configuration that does not exist
    runs = [run(f"r{w}", f"r{w}", "ddp", w) for w in (2, 4)]
    metrics = [m for w in (2, 4) for m in metric(f"r{w}", "epoch_time_s", [9.0, 8.0 / w])]
    metrics += metric("r2", R, smoothed([5] + [10] * 11))
    data = make_data(runs, metrics)
    rep = build_report(data, rate_config=("ddp", 64))
    assert missing_reason(rep, "rates") == (
        "--rate-config names ddp with 64 workers, a configuration the report does not have"
    )
    rep = build_report(data, rate_config=("ddp", 4))
    assert missing_reason(rep, "rates") == (
        "no Rate/GlobalRate metrics for ddp with 4 workers (--rate-config)"
    )
    assert build_report(data).rate_config == ("ddp", 2)
    no_rates = make_data(runs, [m for m in metrics if m["key"] == "epoch_time_s"])
    assert missing_reason(build_report(no_rates), "rates") == (
        "no run logged Rate/GlobalRate metrics"
    )
    # weak scaling: speedup of epoch time is not defined, there is a baseline run
    weak = build_report(no_rates, scaling="weak")
    assert weak.epoch_time["speedup"].isna().all()
    assert missing_reason(weak, "speedup").startswith("weak scaling: ")
    assert "baseline" not in missing_reason(weak, "speedup")


def test_rates_title_says_one_worker() -> None:
    runs = [run("r1", "r1", "ddp", 1)]
    metrics = metric("r1", "epoch_time_s", [9.0, 8.0]) + metric("r1", R, smoothed([5] + [10] * 11))
    fig = make_figures(build_report(make_data(runs, metrics)))["rates"]
    assert fig.axes[0].get_title() == "Per-worker rates: ddp, 1 worker"


def test_stale_plots_are_only_this_tools_names(tmp_path: Path) -> None:
    from itwin_report.plots import stale_plots

    for name in ("prediction.png", "speedup.png", "rates.svg", "notes.png", "my.png"):
        (tmp_path / name).write_text("x")
    (tmp_path / "epoch_time.png").mkdir()  # a folder is never removed
    found = stale_plots(tmp_path, ["speedup"], "png")
    assert sorted(p.name for p in found) == ["prediction.png"]
