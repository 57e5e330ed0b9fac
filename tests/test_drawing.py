"""Figures drawn on two cores are the figures drawn in one process, byte for byte."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from test_plots import report

from itwin_report.plots import FIGURES, drawing, figure_svg, plot_report
from itwin_report.plots.output import DPI


def _one_process(rep: object) -> tuple[dict[str, bytes], dict[str, str], dict[str, str]]:
    """PNG bytes and SVG of every figure, drawn the way the Python API draws them."""
    plots = plot_report(rep)  # type: ignore[arg-type]
    svg = {name: figure_svg(fig, name) for name, fig in plots.figures.items()}
    png = {}
    for name, fig in plots.figures.items():
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=DPI, pil_kwargs={"compress_level": 1})
        png[name] = buf.getvalue()
    return png, svg, plots.missing


def test_the_helper_draws_the_same_bytes() -> None:
    rep = report()
    helper = drawing.Helper()
    try:
        drawn = drawing.draw_report(rep, "png", True, helper)
    finally:
        helper.close()
    png, svg, missing = _one_process(rep)
    assert list(drawn.files) == list(png) == [n for n in FIGURES if n in png]
    assert drawn.files == png
    assert drawn.svg == svg
    assert drawn.missing == missing


def test_a_helper_that_dies_leaves_its_figures_to_the_main_process() -> None:
    rep = report()
    helper = drawing.Helper()
    helper._proc.kill()  # gone before the report reaches it
    helper._proc.wait()
    try:
        drawn = drawing.draw_report(rep, "png", False, helper)
    finally:
        helper.close()
    alone = drawing.draw_report(rep, "png", False, None)
    assert drawn.files == alone.files and len(alone.files) >= 7


def test_the_counter_hands_each_figure_out_once(tmp_path: Path) -> None:
    import os

    fd = os.open(tmp_path / "counter", os.O_RDWR | os.O_CREAT)
    os.pwrite(fd, b"0", 0)
    taken = [drawing.take_next(fd, 3) for _ in range(5)]
    os.close(fd)
    assert taken == [0, 1, 2, None, None]


@pytest.mark.parametrize("value", ["0", "off"])
def test_the_helper_can_be_switched_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(drawing.ENV, value)
    assert drawing.start_helper() is None


def test_the_command_writes_the_same_plots_with_and_without_the_helper(
    scaling_sqlite: tuple[str, dict[str, object]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from itwin_report.cli import main

    got = {}
    for value in ("1", "0"):
        monkeypatch.setenv(drawing.ENV, value)
        out = tmp_path / value
        args = ["generate-scalability-report", "-e", "scaling", "--tracking-uri"]
        args += [scaling_sqlite[0], "-q", "--plot-dir", str(out), "-o", str(tmp_path / "r.txt")]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        got[value] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    assert got["1"] == got["0"] and len(got["0"]) >= 5
