"""Where a command's results go: stdout or files, written whole, as one set; the terminal
decides styling, never content."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from itwin_report import __version__
from itwin_report.cli import env
from itwin_report.util.errors import ReportError
from itwin_report.util.masking import mask_text


def styled(fmt: str, output: Path | None) -> bool:
    """Rich styling only for a table on a terminal, and never with NO_COLOR set."""
    return env.current().styled(fmt, output is not None)


def check_writable(outputs: dict[str, Path | None]) -> None:
    """Refuse, before the store is read, an output whose folder is missing or read-only (or,
    for an output written in place, such as a device or a FIFO, that cannot be written)."""
    from itwin_report.util.atomic import in_place

    for option, path in outputs.items():
        if path is None:
            continue
        if option != "--plot-dir" and in_place(path):
            if not os.access(path, os.W_OK):
                raise ReportError(f"cannot write {option} {path}: permission denied")
            continue
        folder = path if option == "--plot-dir" else path.parent
        while option == "--plot-dir" and not folder.exists() and folder != folder.parent:
            folder = folder.parent  # a missing plot folder is created: check its nearest parent
        folder = folder if str(folder) else Path(".")
        if not folder.is_dir():
            raise ReportError(f"cannot write {option} {path}: folder {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ReportError(f"cannot write {option} {path}: folder {folder} is not writable")


def emit(text: str, output: Path | None) -> None:
    """Print ``text`` or write it to ``output`` (whole or not at all)."""
    from itwin_report.util import atomic

    if output is None:
        atomic.write_stdout(text)
        return
    try:
        atomic.write_text(output, text)
    except OSError as exc:
        raise ReportError(f"cannot write {output}: {exc.strerror or exc}") from None


def start_plots(wanted: bool) -> Any:
    """A process that readies itself to draw figures while the store is read (None when no
    figure is wanted, or no second core is there to draw on)."""
    if not wanted:
        return None
    from itwin_report.plots.drawing import start_helper

    return start_helper()


def make_plots(report: Any, helper: Any, plot_format: str | None, svg: bool) -> Any:
    """The report's figures, drawn once for the page (``svg``) and the plot files
    (``plot_format``; None: no files), on two cores when ``helper`` is there."""
    from itwin_report.plots.drawing import draw_report

    try:
        return draw_report(report, plot_format, svg, helper)
    finally:
        if helper is not None:
            helper.close()


def html_page(report: Any, data: Any, plots: Any) -> str:
    from itwin_report.render.html import PagePlots, page_context, render_html

    context = page_context(data, __version__, env.current().now())
    page_plots = PagePlots(svg=dict(plots.svg), missing=dict(plots.missing))
    return render_html(report, context, page_plots)


def publish(
    text: str,
    output: Path | None,
    page: str,
    html_path: Path | None,
    plots: Any,
    plot_dir: Path,
    plot_format: str,
    quiet: bool,
) -> None:
    """The report's files as one set: each written beside its target and moved into place only
    when all are complete, with the plots of an earlier report that this one does not draw
    removed; then the report on stdout (without ``--output``) and the plots line on stderr."""
    from itwin_report.util import atomic

    with atomic.output_set() as outputs:
        for path, content in ((output, text), (html_path, page)):
            if path is not None:
                try:
                    outputs.text(path, content)
                except OSError as exc:
                    raise ReportError(f"cannot write {path}: {exc.strerror or exc}") from None
        paths = [] if plots is None else save_plots(outputs, plots, plot_dir, plot_format)
        outputs.commit()
    if output is None:
        atomic.write_stdout(text)
    if plots is not None and not quiet:
        missing = "; ".join(f"{name}: {why}" for name, why in plots.missing.items())
        tail = f"; not drawn: {missing}" if missing else ""
        count = "1 plot" if len(paths) == 1 else f"{len(paths)} plots"
        line = f"Wrote {count} to {plot_dir}/ ({plot_format}){tail}"
        click.echo(mask_text(line), err=True)


def save_plots(outputs: Any, plots: Any, plot_dir: Path, plot_format: str) -> list[Path]:
    """Draw the plots into a staging folder inside ``plot_dir``; stage them, and the removal
    of the plots of an earlier report (fixed names only) that this report does not draw."""
    from itwin_report.plots.output import stale_plots, write_figure

    try:
        staging = outputs.folder(plot_dir)
        drawn = [
            write_figure(data, staging / f"{name}.{plot_format}")
            for name, data in plots.files.items()
        ]
        paths = outputs.files(drawn, plot_dir)
    except OSError as exc:
        raise ReportError(f"cannot write plots to {plot_dir}: {exc.strerror or exc}") from None
    outputs.remove(stale_plots(plot_dir, list(plots.files), plot_format))
    return paths
