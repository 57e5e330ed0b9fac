"""The "Where the time goes" figure: one stacked bar per configuration, heights checked against
numbers worked out by hand from the runs, its verdict labels, the file and the page."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import cli_runner
from test_report_builders import make_data, metric, perf, run

from itwin_report.plots import plot_report, save_figures
from itwin_report.render.html import PageContext, page_plots, render_html
from itwin_report.report import Report, build_report

R = "local_samples_per_sec"
OVERHEAD, NEAR = (
    "fixed per-epoch overhead",
    "near the line: fixed per-epoch overhead or steady steps",
)


def _job(job: str, strategy: str, workers: int, epochs: list[float], wall: float, rate: float):
    rid = f"{job}-0"
    row = run(rid, job, strategy, workers, samples_per_epoch=800)
    points = metric(rid, "epoch_time_s", epochs) + metric(rid, R, [rate] * 12)
    return row, points, perf(rid, 2400, wall)


def report() -> Report:
    # ddp-4, two jobs: epochs 30 + 20 + 20 = 70 s, walls 90 and 94 s -> mean 92 s, 22 s outside;
    #   10 samples/s per worker x 4 = 40/s: 3 epochs x 800 samples / 40 = 60 s steady, 10 s rest
    #   1 - 60 / 92 = 35 % outside steady steps; per job 33.3 % and 36.2 %: 95 % interval
    #   ± 12.706 x 2.04 / sqrt(2) = ± 18.3 % holds 25 %: near the line
    # ddp-8: epochs 18 + 10 + 10 = 38 s, wall 50 s (12 outside); 2400 / 80 = 30 s steady, 8 rest;
    #   1 - 30 / 50 = 40 %: fixed per-epoch overhead
    # ds-4: epochs 18 + 16 + 16 = 50 s, wall 54 s (4 outside); 2400 / 50 = 48 s steady, 2 rest;
    #   1 - 48 / 54 = 11 %: the steps, which no trace splits: undecided
    jobs = [
        _job("a1", "ddp", 4, [30, 20, 20], 90.0, 10.0),
        _job("a2", "ddp", 4, [30, 20, 20], 94.0, 10.0),
        _job("b", "ddp", 8, [18, 10, 10], 50.0, 10.0),
        _job("c", "ds", 4, [18, 16, 16], 54.0, 12.5),
    ]
    data = make_data(
        [j[0] for j in jobs], [p for j in jobs for p in j[1]], performance=[j[2] for j in jobs]
    )
    return build_report(data)


# bottom to top per bar (ddp-4, ddp-8, ds-4): outside, steady, rest, and the verdicts
OUTSIDE, STEADY, REST = [22.0, 12.0, 4.0], [60.0, 30.0, 48.0], [10.0, 8.0, 2.0]
VERDICTS = [NEAR, OVERHEAD, "undecided"]


def _bars(fig) -> dict[str, list[tuple[float, float, float]]]:
    """Legend text -> (x, bottom, height) of each bar of that segment."""
    ax = fig.axes[0]
    return {
        c.get_label(): [(r.get_x() + r.get_width() / 2, r.get_y(), r.get_height()) for r in c]
        for c in ax.containers
    }


def test_stacked_bars_equal_the_hand_worked_breakdown() -> None:
    rep = report()
    fig = plot_report(rep).figures["time_breakdown"]
    ax = fig.axes[0]
    bars = _bars(fig)
    assert list(bars) == [
        "outside the epochs\n(set-up, teardown)",
        "steady-state steps",
        "rest of the epochs\n(validation, checkpoints,\nwarm-up)",
    ]
    outside, steady, rest = bars.values()
    assert [h for _, _, h in outside] == pytest.approx(OUTSIDE)
    assert [h for _, _, h in steady] == pytest.approx(STEADY)
    assert [h for _, _, h in rest] == pytest.approx(REST)
    assert [b for _, b, _ in outside] == [0.0, 0.0, 0.0]
    assert [b for _, b, _ in steady] == pytest.approx(OUTSIDE)
    below_rest = [o + s for o, s in zip(OUTSIDE, STEADY, strict=True)]
    assert [b for _, b, _ in rest] == pytest.approx(below_rest)
    # every bar is the configuration's mean wall time
    tops = [b + h for _, b, h in rest]
    assert tops == pytest.approx([92.0, 50.0, 54.0])
    # one bar per configuration, a gap between strategies
    xs = [x for x, _, _ in outside]
    assert len(xs) == 3 and xs[1] - xs[0] == 1.0 and xs[2] - xs[1] == 2.0
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4", "8", "4"]
    texts = [t.get_text() for t in ax.texts]
    assert "ddp" in texts and "ds" in texts
    # each bar labelled with its verdict, just above it
    from matplotlib.text import Annotation

    labels = [
        (a.get_text(), a.xy)
        for a in ax.texts
        if isinstance(a, Annotation) and a.get_rotation() == 90  # not the strategies' names
    ]
    assert [t for t, _ in labels] == VERDICTS
    above = [pytest.approx((x, top)) for x, top in zip(xs, tops, strict=True)]
    assert [xy for _, xy in labels] == above
    assert ax.get_ylabel() == "Seconds per run"
    assert ax.get_xlabel().startswith("Workers (GPUs)")
    assert ax.get_title().startswith("Where the wall time goes")
    assert ax.get_ylim()[1] > 92.0
    shown = ax.get_legend()
    assert shown is not None
    legend = [t.get_text() for t in shown.get_texts()]
    assert legend == list(bars)[::-1]  # top to bottom, as stacked


def test_the_steady_part_is_split_by_the_trace_shares() -> None:
    rep = report()
    table = rep.time_breakdown.copy()
    # ddp-8 has trace shares: compute 65 %, exposed communication 16 %, idle 8 % of its 30 s
    # of steady steps -> 19.5, 4.8 and 2.4 s, the other 11 % (3.3 s) other device time
    row = table.index[(table["strategy"] == "ddp") & (table["workers"] == 8)][0]
    table.loc[row, ["compute_pct", "exposed_communication_pct", "idle_pct"]] = [65.0, 16.0, 8.0]
    fig = plot_report(dataclasses.replace(rep, time_breakdown=table)).figures["time_breakdown"]
    bars = _bars(fig)
    heights = {name.replace("\n", " "): [h for _, _, h in b] for name, b in bars.items()}
    assert heights["steady-state steps"] == pytest.approx([60.0, 0.0, 48.0])
    assert heights["steady steps: compute"] == pytest.approx([0.0, 19.5, 0.0])
    assert heights["steady steps: exposed communication"] == pytest.approx([0.0, 4.8, 0.0])
    assert heights["steady steps: idle (input wait)"] == pytest.approx([0.0, 2.4, 0.0])
    assert heights["steady steps: other device time"] == pytest.approx([0.0, 3.3, 0.0])
    # the split bar still stacks to the wall time: 12 + 19.5 + 4.8 + 2.4 + 3.3 + 8 = 50 s
    top = max(b + h for b_list in bars.values() for x, b, h in [b_list[1]])
    assert top == pytest.approx(50.0)


def test_without_a_wall_time_or_epochs_the_reason_is_listed() -> None:
    rep = report()
    no_wall = rep.time_breakdown.assign(wall_s=float("nan"))
    plots = plot_report(dataclasses.replace(rep, time_breakdown=no_wall))
    assert "time_breakdown" not in plots.figures
    assert plots.missing["time_breakdown"] == "no run's wall time (total_time of performance.json)"
    empty = build_report(make_data([run("a", "A", "ddp", 4)]))
    assert plot_report(empty).missing["time_breakdown"] == "no epoch times"
    none = dataclasses.replace(rep, time_breakdown=rep.time_breakdown.iloc[:0])
    plots = plot_report(none)
    assert plots.missing["time_breakdown"] == "no configuration has epoch times"
    when = datetime(2026, 1, 1, tzinfo=UTC)
    page = render_html(none, PageContext("1", when), page_plots(plots))
    assert "Plot time breakdown not drawn: no configuration has epoch times." in page


def test_saved_as_a_file_and_shown_on_the_page(tmp_path: Path) -> None:
    rep = report()
    paths = save_figures(plot_report(rep).figures, tmp_path, "png")
    saved = tmp_path / "time_breakdown.png"
    assert saved in paths and saved.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    rep = report()
    page = render_html(rep, PageContext("1", datetime(2026, 1, 1, tzinfo=UTC)), page_plots(rep))
    section = page[page.index('id="time_breakdown"') :]
    assert section.index('<figure class="plot" id="plot-time_breakdown"><svg') < section.index(
        "</section>"
    )


def test_the_report_command_draws_it_for_an_emulated_store(tmp_path: Path) -> None:
    from itwin_report.cli import main

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    emulate = ["emulate", "--tracking-uri", uri, "--strategies", "torch-ddp", "--workers",
               "4,8", "--repeats", "1", "--epochs", "2", "--set", "samples_per_epoch=4096",
               "-q"]  # fmt: skip
    assert cli_runner().invoke(main, emulate).exit_code == 0
    report_args = ["generate-scalability-report", "--tracking-uri", uri,
                   "-e", "emulated-cluster", "--plot-dir", str(tmp_path / "plots"),
                   "--html", str(tmp_path / "r.html")]  # fmt: skip
    result = cli_runner().invoke(main, [*report_args, "-q"])
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "plots" / "time_breakdown.png").read_bytes().startswith(b"\x89PNG")
    assert 'id="plot-time_breakdown"' in (tmp_path / "r.html").read_text(encoding="utf-8")
