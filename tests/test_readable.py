"""Figures a person reads, measured in the drawn figure (display pixels after drawing): each
point's label beside its own point, no text cut at the figure's edges or run into another,
one colour per strategy whatever else the report holds, log axes labelled across their range,
the prediction legend clear of its bands. Drawn from an emulated store with a non-distributed
run, as itself and with 30-character strategy names."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_runner

import itwin_report as ir
from itwin_report.cli import main
from itwin_report.data.rundata import RunData
from itwin_report.plots import PALETTE, make_figures, strategy_colors
from itwin_report.plots.fit import log_ticks

LONG = {  # 30-character strategy names
    "deepspeed": "deepspeed-zero3-offload-nvme-x2",
    "horovod": "horovod-tensor-fusion-64mb-x02",
    "torch-ddp": "torch-ddp-bucket-cap-25mb-nccl2",
}


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> RunData:
    """Three strategies on 2, 4 and 8 GPUs and the non-distributed run; GPU metrics on rank 0
    only, so that the energy is an estimate (hatched, with the long title that says so)."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('readable')}/mlflow.db"
    args = ["emulate", "-q", "--tracking-uri", uri, "--workers", "1,2,4,8", "--repeats", "1"]
    result = cli_runner().invoke(main, [*args, "--epochs", "3", "--log-on-workers", "0"])
    assert result.exit_code == 0, result.output
    return ir.load(uri, "emulated-cluster")


def renamed(data: RunData, names: dict[str, str]) -> RunData:
    runs = data.runs.copy()
    runs["strategy"] = runs["strategy"].map(lambda s: names.get(s, s))
    return dataclasses.replace(data, runs=runs)


@pytest.fixture(scope="module")
def reports(emulated: RunData) -> dict[str, Any]:
    return {
        "short": ir.build(emulated, predict=[16, 32]),
        "long": ir.build(renamed(emulated, LONG), predict=[16, 32]),
    }


def drawn(fig: Any) -> Any:
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def texts(fig: Any) -> list[Any]:
    """The texts drawn: tick labels only where their tick is inside the view (matplotlib keeps
    others it does not draw)."""
    from matplotlib.text import Text

    ticks, shown = set(), []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks():
                ticks |= {id(tick.label1), id(tick.label2)}
                if low - 1e-9 * abs(low) <= tick.get_loc() <= high + 1e-9 * abs(high):
                    shown += [tick.label1, tick.label2]
    shown += [t for t in fig.findobj(Text) if id(t) not in ticks]
    return [t for t in shown if t.get_visible() and t.get_text().strip()]


def text_box(text: Any, render: Any) -> Any:
    """A text's own box (an annotation's leader line left out)."""
    from matplotlib.text import Text

    return Text.get_window_extent(text, render)


def gap(a: Any, b: Any) -> float:
    """Pixels between two boxes (0 when they touch or overlap)."""
    dx = max(a.x0 - b.x1, b.x0 - a.x1, 0.0)
    dy = max(a.y0 - b.y1, b.y0 - a.y1, 0.0)
    return math.hypot(dx, dy)


def meet(a: Any, b: Any) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def point_distance(x: float, y: float, box: Any) -> float:
    return math.hypot(max(box.x0 - x, 0.0, x - box.x1), max(box.y0 - y, 0.0, y - box.y1))


@pytest.mark.parametrize("which", ["short", "long"])
def test_each_pareto_label_sits_beside_its_own_point(reports: dict[str, Any], which: str) -> None:
    """Every configuration with an energy is labelled; its label's text names the point the
    tables give (epoch time, energy per epoch); in the drawn figure the label is inside the
    figure, over no other label, within 50 points of its own point (farther than 10 points a
    leader line joins them) and, with itwinai's names, no other point is nearer to it (beyond
    a marker's radius). With 30-character names in a crowded corner a label may have to go
    where another point is nearer: its leader line says whose it is."""
    report = reports[which]
    fig = make_figures(report)["pareto"]
    render = drawn(fig)
    ax = fig.axes[0]
    labels = [t for t in ax.texts if "×" in t.get_text()]
    epoch = {(r["strategy"], r["workers"]): r for r in report.epoch_time.to_dict("records")}
    energy = {(r["strategy"], r["workers"]): r for r in report.gpu.to_dict("records")}
    expected = {
        f"{s}×{w}": (epoch[(s, w)]["avg_epoch_time_s"], energy[(s, w)]["energy_wh_per_epoch"])
        for s, w in epoch
        if (s, w) in energy
        and energy[(s, w)]["energy_wh_per_epoch"] == energy[(s, w)]["energy_wh_per_epoch"]
    }
    assert len(expected) == 10
    # an estimated energy (coverage < 1) keeps its ~ before the label
    marked = {f"{s}×{w}": ("~" if r["energy_coverage"] < 1 else "") for (s, w), r in energy.items()}
    shown = [t.get_text().replace("\n", "") for t in labels]
    assert sorted(shown) == sorted(marked[n] + n for n in expected)
    points = {name: ax.transData.transform(xy) for name, xy in expected.items()}
    radius = 4.0 * fig.dpi / 72
    figure = fig.bbox
    boxes = {}
    for text in labels:
        name = text.get_text().replace("\n", "").lstrip("~")  # a long name may take two lines
        assert tuple(text.xy) == pytest.approx(expected[name], rel=1e-3)  # the point it names
        box = text_box(text, render)
        boxes[name] = box
        assert figure.x0 <= box.x0 and box.x1 <= figure.x1, name
        assert figure.y0 <= box.y0 and box.y1 <= figure.y1, name
        own = point_distance(*points[name], box)
        assert own <= 50 * fig.dpi / 72, (name, own)
        if own > 10 * fig.dpi / 72:
            assert text.arrow_patch is not None, name
        for other, (x, y) in points.items():
            if other != name and which == "short":
                assert point_distance(x, y, box) >= own - radius, (name, other)
    names = sorted(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not meet(boxes[a], boxes[b]), (a, b)


@pytest.mark.parametrize("which", ["short", "long"])
def test_no_text_is_cut_at_the_edges_or_runs_into_another(
    reports: dict[str, Any], which: str
) -> None:
    """In every figure every text (titles, legends, tick and group labels, annotations) lies
    inside the figure; the strategies' names under bar groups keep at least 5 pixels apart,
    and titles, legends and axis labels meet nothing."""
    from matplotlib.text import Annotation

    figures = make_figures(reports[which])
    assert {"computation", "gpu_energy", "pareto", "prediction", "time_breakdown"} <= set(figures)
    for name, fig in figures.items():
        render = drawn(fig)
        found = texts(fig)
        for text in found:
            box = text_box(text, render)
            inside = (
                box.x0 >= -0.5
                and box.y0 >= -0.5
                and box.x1 <= fig.bbox.width + 0.5
                and box.y1 <= fig.bbox.height + 0.5
            )
            assert inside, (name, text.get_text(), box)
        ax = fig.axes[0]
        groups = [
            t.get_window_extent(render)
            for t in ax.texts
            if isinstance(t, Annotation) and t.get_fontweight() == "bold"
        ]
        for i, a in enumerate(groups):
            for b in groups[i + 1 :]:
                assert gap(a, b) >= 5, (name, a, b)
        legend = ax.get_legend()
        frames = [ax.title.get_window_extent(render), ax.xaxis.label.get_window_extent(render)]
        if legend is not None:
            frames.append(legend.get_window_extent(render))
        for i, a in enumerate(frames):
            for b in frames[i + 1 :]:
                assert not meet(a, b), name
        for box in groups:
            assert not any(meet(box, f) for f in frames), name
    title = figures["gpu_energy"].axes[0].get_title()
    assert "GPU energy" in title and "hatched" in title  # all of it, wrapped, not cut


def test_group_labels_of_the_computation_plot_name_every_strategy(reports: dict[str, Any]) -> None:
    from matplotlib.text import Annotation

    for which, names in (("short", ["deepspeed", "horovod", "non-distributed", "torch-ddp"]),
                         ("long", [*LONG.values(), "non-distributed"])):  # fmt: skip
        ax = make_figures(reports[which])["computation"].axes[0]
        shown = [
            t.get_text().replace("\n", "")
            for t in ax.texts
            if isinstance(t, Annotation) and t.get_fontweight() == "bold"
        ]
        assert sorted(shown) == sorted(names)  # every name whole (only cut into lines)


def used_colors(report: Any) -> dict[str, set[str]]:
    """Strategy -> the colours its marks have in the drawn epoch-time, energy and Pareto
    figures (lines, bars, scatter points)."""
    from matplotlib.colors import to_hex

    figures = make_figures(report)
    out: dict[str, set[str]] = {}
    for line in figures["epoch_time"].axes[0].get_lines():
        out.setdefault(line.get_label(), set()).add(to_hex(line.get_color()))
    for bar in figures["gpu_energy"].axes[0].containers:
        out.setdefault(bar.get_label(), set()).add(to_hex(bar.patches[0].get_facecolor()))
    for dots in figures["pareto"].axes[0].collections:
        if dots.get_label() in out:
            out[dots.get_label()].add(to_hex(dots.get_facecolor()[0]))
    return out


def test_a_strategy_keeps_its_colour_from_one_report_to_the_next(emulated: RunData) -> None:
    """The same strategies give the same colours whatever else differs (row order, options,
    predictions); itwinai's strategies keep theirs when other strategies come and go; within
    a report every strategy has a colour of its own, the same in every figure."""
    full = ir.build(emulated)
    shuffled = dataclasses.replace(
        emulated, runs=emulated.runs.sample(frac=1.0, random_state=3).reset_index(drop=True)
    )
    other = ir.build(shuffled, warmup_epochs=0, predict=[16], baseline="per-strategy")
    first, second = used_colors(full), used_colors(other)
    assert first == second
    assert all(len(c) == 1 for c in first.values())  # one colour per strategy in all figures
    assert len({c for cs in first.values() for c in cs}) == len(first) == 4
    ddp_only = emulated.runs[emulated.runs["strategy"] == "torch-ddp"]
    alone = ir.build(dataclasses.replace(emulated, runs=ddp_only))
    assert strategy_colors(alone) == {"torch-ddp": strategy_colors(full)["torch-ddp"]}
    renamed_report = ir.build(renamed(emulated, {"horovod": "aaa"}))  # sorts first
    colors = strategy_colors(renamed_report)
    assert colors["deepspeed"] == strategy_colors(full)["deepspeed"]
    assert len(set(colors.values())) == 4 and set(colors.values()) <= set(PALETTE)


@pytest.mark.parametrize(
    ("low", "high", "ticks"),
    [
        (12.0, 45.0, [15, 20, 30, 40]),  # 1-2-5 alone would give 20 only
        (17.0, 115.0, [20, 30, 50, 100]),
        (8.0, 45.0, [8, 10, 15, 20, 30, 40]),
        (1.0, 1000.0, [1, 10, 100, 1000]),
        (18.0, 19.5, [18, 18.5, 19, 19.5]),  # too narrow for round log ticks: evenly spaced
    ],
)
def test_log_ticks_cover_the_range(low: float, high: float, ticks: list[float]) -> None:
    assert log_ticks(low, high) == ticks
    assert log_ticks(0.9, 8.5, base=2) == [1, 2, 4, 8]


def test_log_axes_are_labelled_across_the_data(reports: dict[str, Any], emulated: RunData) -> None:
    """The epoch-time, prediction and throughput axes: at least three labelled ticks inside the
    view, the lowest in the data's lowest third and the highest in its highest third (log
    scale), also for a narrow range (2 to 8 GPUs only: about 18 to 60 s)."""
    narrow = emulated.runs[emulated.runs["workers"] > 1]
    small = ir.build(dataclasses.replace(emulated, runs=narrow))
    for report in (reports["short"], small):
        figures = make_figures(report)
        for name in ("epoch_time", "throughput", "prediction"):
            if name not in figures:
                continue
            fig = figures[name]
            render = drawn(fig)
            ax = fig.axes[0]
            data = [y for line in ax.get_lines() for y in line.get_ydata() if y == y and y > 0]
            low, high = min(data), max(data)
            view = sorted(ax.get_ylim())
            labelled = [
                float(t.get_text())
                for t in ax.get_yticklabels()
                if t.get_text() and view[0] <= t.get_position()[1] <= view[1]
            ]
            assert len(labelled) >= 3, (name, labelled)
            third = math.log(high / low) / 3
            assert math.log(min(labelled) / low) <= third, (name, labelled, low, high)
            assert math.log(high / max(labelled)) <= third, (name, labelled, low, high)
            assert all(t.get_window_extent(render).width > 0 for t in ax.get_yticklabels())


def test_the_prediction_legend_leaves_the_bands_clear(reports: dict[str, Any]) -> None:
    from matplotlib.collections import PolyCollection

    for which in ("short", "long"):
        fig = make_figures(reports[which])["prediction"]
        render = drawn(fig)
        ax = fig.axes[0]
        legend = ax.get_legend().get_window_extent(render)
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        assert bands
        for band in bands:
            assert not meet(legend, band.get_window_extent(render)), which
        assert legend.x1 <= fig.bbox.width and legend.y0 >= 0
        entries = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "95 % prediction band" in entries and "measured" in entries


def test_plots_of_a_report_are_written(reports: dict[str, Any], tmp_path: Path) -> None:
    from itwin_report.plots import save_figures

    paths = save_figures(make_figures(reports["long"]), tmp_path, "png")
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


# ---- tables on a terminal of 80, 100 or 120 columns ----

ANSI = re.compile(r"\x1b\[[0-9;]*m")
NUMBER_AND_UNIT = re.compile(r"^[-+]?[\d.,–]+[x%]? \S+$")  # "134.04 s", "10.54–12.73 s", "4.3 g"


def on_terminal(report: Any, width: int) -> str:
    from itwin_report.render import layout
    from itwin_report.render.styled import write

    return ANSI.sub("", write(layout(report), width))


def tables(report: Any) -> list[Any]:
    from itwin_report.render import layout
    from itwin_report.render.layout import Table

    return [b for b in layout(report).blocks if isinstance(b, Table) and b.rows]


@pytest.mark.parametrize("width", [80, 100, 120])
@pytest.mark.parametrize("which", ["short", "long"])
def test_tables_fit_the_terminal_and_keep_every_value(
    reports: dict[str, Any], which: str, width: int
) -> None:
    """Every line within the width; every number cell whole on one line (a number never
    apart from its unit), every word of a text cell whole; a header either shown (its words)
    or named under its table as a column with no value in any row, whose cells are all n/a
    or empty."""
    report = reports[which]
    text = on_terminal(report, width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    words = set(re.split(r"[\s│]+", text))
    for table in tables(report):
        assert table.heading.split()[0] in words
        for i, header in enumerate(table.headers):
            cells = [row[i] for row in table.rows]
            named = any(line.startswith("Not shown") and header in line for line in lines)
            if named and all(c in ("", "n/a") for c in cells):
                continue  # left out, and said so
            assert all(w in words for w in header.split()), (table.name, header, width)
            for cell in cells:
                if table.right[i] or NUMBER_AND_UNIT.match(cell):
                    assert any(cell in line for line in lines), (table.name, header, cell)
                else:
                    assert all(w in words for w in cell.split()), (table.name, header, cell)


def test_tables_are_narrower_than_before_on_80_columns(reports: dict[str, Any]) -> None:
    """The width used to be at least 100 columns: at 80 every line wrapped. Now the widest
    table (throughput) is split in two, each part repeating strategy and workers, and the
    columns without a value (the trace shares of the time breakdown) are named, not drawn."""
    text = on_terminal(reports["short"], 80)
    assert max(len(line) for line in text.splitlines()) == 80
    assert "Throughput (1 of 2)" in text and "Throughput (2 of 2)" in text
    second = text.split("Throughput (2 of 2)")[1].splitlines()[1]
    assert re.split(r"[\s│]+", second)[:2] == ["Strategy", "Workers"]
    assert "Not shown, no value in any row: Compute, Exposed comm, Idle." in text
    assert on_terminal(reports["short"], 200).count("Throughput") == 1  # wide: one table


def test_piped_output_does_not_depend_on_the_terminal(
    reports: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from itwin_report.render import render

    monkeypatch.setenv("COLUMNS", "80")
    narrow = render(reports["short"], "table")
    monkeypatch.setenv("COLUMNS", "300")
    assert render(reports["short"], "table") == narrow
    assert "Throughput\n==========" in narrow and "(1 of 2)" not in narrow
    assert max(len(line) for line in narrow.splitlines()) > 120  # as wide as it is


def test_fitting_a_table_by_hand() -> None:
    """Drop the column with no value, fold headers, split beside the keys, fall back to the
    plain layout when the keys alone are too wide."""
    from itwin_report.render.styled import fit

    headers = ["Strategy", "Workers", "Epoch time", "Std", "Bound by", "Source"]
    rows = [
        ["torch-ddp", "4", "134.04 s", "n/a", "fixed per-epoch overhead", "performance.json"],
        ["deepspeed", "16", "9.50 s", "n/a", "computation", "rates"],
    ]
    right = [False, True, True, True, False, False]
    # natural widths 9 7 10 3 24 16 = 69, + 5 gaps of 3 = 84
    whole = fit(headers, rows, right, 84)
    assert whole.dropped == [] and [p.columns for p in whole.parts] == [[0, 1, 2, 3, 4, 5]]
    # at 80: Std (n/a in every row) goes: 9 7 10 24 16 = 66 + 4 x 3 = 78 fits, roomy
    dropped = fit(headers, rows, right, 80)
    assert dropped.dropped == [3] and dropped.parts[0].padding == 1
    assert dropped.parts[0].widths == [9, 7, 10, 24, 16]
    # at 55 nothing fits in one part with whole cells (9 7 8 24 16 = 64, + 4 tight gaps = 68):
    # split beside the keys (9 + 7): roomy takes 3 parts, tight 2 (Epoch time and Bound by:
    # 48 + 3 = 51, then Source)
    two = fit(headers, rows, right, 55)
    assert [p.columns for p in two.parts] == [[0, 1, 2, 4], [0, 1, 5]]
    assert [p.padding for p in two.parts] == [0, 0] and two.dropped == [3]
    assert two.parts[0].widths == [9, 7, 10, 24]  # the spare 4: Epoch time's header whole
    # at 40 Bound by cannot be whole beside the keys: a part of its own, wrapped between words
    three = fit(headers, rows, right, 40)
    assert [p.columns for p in three.parts] == [[0, 1, 2], [0, 1, 4], [0, 1, 5]]
    assert three.parts[1].widths[2] == 40 - 16 - 6  # room left to it: 18 of its 24
    for part in three.parts:
        assert sum(part.widths) + 3 * (len(part.columns) - 1) <= 40
    assert fit(headers, rows, right, 20).parts == []  # keys and one column do not fit


def test_a_terminal_too_narrow_gets_the_plain_table(reports: dict[str, Any]) -> None:
    from itwin_report.render import render

    text = on_terminal(reports["long"], 30)
    plain = render(reports["long"], "table")
    row = next(line for line in plain.splitlines() if line.startswith("non-distributed  "))
    assert row in text.splitlines()  # the plain layout's line, whole
