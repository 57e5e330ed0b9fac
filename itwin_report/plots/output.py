"""Which figures a report has, why the others are missing, and writing figures out.

File names are the fixed figure names (``speedup.png``), never store values. The same figure
definitions serve the PNG/SVG/PDF files and the inline SVG of the HTML page.

Light module: matplotlib is imported inside functions.
"""

from __future__ import annotations

import io
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from itwin_report.plots import breakdown, convergence, decisions
from itwin_report.plots import figures as f
from itwin_report.util.errors import ReportError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from itwin_report.report import Report

SAVE_FORMATS = ("png", "svg", "pdf")
DPI = f.DPI

FIGURES: dict[str, Callable[[Report], Figure | None]] = {
    "epoch_time": f.epoch_time_figure,
    "speedup": f.speedup_figure,
    "efficiency": f.efficiency_figure,
    "computation": f.computation_figure,
    "gpu_energy": f.gpu_energy_figure,
    "gpu_utilization": f.gpu_utilization_figure,
    "throughput": f.throughput_figure,
    "rates": f.rates_figure,
    "prediction": decisions.prediction_figure,
    "pareto": decisions.pareto_figure,
    "time_breakdown": breakdown.breakdown_figure,
    "convergence": convergence.convergence_figure,
    "time_to_target_speedup": convergence.target_speedup_figure,
}
# figures drawn only when asked for (``--predict``, ``--target``): their absence needs no reason
_ON_REQUEST = ("prediction", "convergence", "time_to_target_speedup")

# figure -> (table, column it plots, reason when the table is empty, reason when the column is)
_SOURCES: dict[str, tuple[str, str, str, str]] = {
    "epoch_time": ("epoch_time", "avg_epoch_time_s", "no epoch times", "no epoch times"),
    "speedup": ("epoch_time", "speedup", "no epoch times", "no speedup (no baseline run)"),
    "efficiency": ("epoch_time", "efficiency", "no epoch times", "no efficiency (no baseline)"),
    "computation": (
        "computation",
        "computation_fraction",
        "no profiler data",
        "profiles hold no GPU time (recorded without a GPU?)",
    ),
    "gpu_energy": ("gpu", "energy_wh", "no GPU metrics", "no GPU power readings"),
    "gpu_utilization": (
        "gpu",
        "utilization_pct",
        "no GPU metrics",
        "no GPU utilization readings",
    ),
    "throughput": ("throughput", "samples_per_sec", "no throughput data", "no throughput data"),
    "pareto": (
        "gpu",
        "energy_wh_per_epoch",
        "no GPU metrics",
        "no configuration has both an epoch time and an energy per epoch",
    ),
}


@dataclass
class PlotSet:
    """The figures a report has (name -> figure) and, for the others, why not (name -> reason)."""

    figures: dict[str, Figure] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def missing_reason(report: Report, name: str) -> str:
    """Why figure ``name`` has no data, in a few words: the real cause, not a guess."""
    if name == "rates":
        return _rates_reason(report)
    if name == "time_breakdown":
        return breakdown.missing_reason(report)
    table, _column, if_empty, if_nan = _SOURCES[name]
    frame = getattr(report, table)
    if frame.empty:
        return if_empty
    if name == "speedup" and _scaling(report) == "weak":
        return "weak scaling: epoch time is not expected to fall, so speedup is not defined"
    return report.reasons.get(table, if_nan) if name == "computation" else if_nan


def _scaling(report: Report) -> str | None:
    analysis = getattr(report, "analysis", None)
    return None if analysis is None else str(analysis.scaling)


def _rates_reason(report: Report) -> str:
    """No Rate metrics anywhere, or none for the configuration ``--rate-config`` names."""
    from itwin_report.util.text import plural

    if report.rate_config is None:
        return "no run logged Rate/GlobalRate metrics"
    strategy, workers = report.rate_config
    name = label_text(f"{strategy} with {plural(workers, 'worker')}")
    known = {
        (str(s), int(w))
        for frame in (report.epoch_time, report.gpu, report.throughput, report.computation)
        for s, w in zip(frame["strategy"], frame["workers"], strict=True)
    }
    if (str(strategy), int(workers)) not in known:
        return f"--rate-config names {name}, a configuration the report does not have"
    return f"no Rate/GlobalRate metrics for {name} (--rate-config)"


def label_text(text: str) -> str:
    """A reason's store values as shown in messages: masked and shortened."""
    from itwin_report.util.escape import shorten
    from itwin_report.util.masking import mask_text

    return shorten(mask_text(text))


@contextmanager
def quiet_library() -> Iterator[None]:
    """No library warning reaches stderr while figures are built or drawn (a legend with
    thousands of entries makes matplotlib warn that placing it is slow)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def plot_report(report: Report) -> PlotSet:
    """Every figure that has data, and the reason each other one is missing."""
    out = PlotSet()
    with quiet_library():
        for name, build in FIGURES.items():
            fig = build(report)
            if fig is None:
                if name not in _ON_REQUEST:
                    out.missing[name] = missing_reason(report, name)
            else:
                out.figures[name] = fig
    return out


def make_figures(report: Report) -> dict[str, Figure]:
    """Name -> figure, only for plots that have data."""
    return plot_report(report).figures


def save_figures(figures: dict[str, Figure], plot_dir: Path, fmt: str = "png") -> list[Path]:
    """Write each figure to ``plot_dir/<name>.<fmt>``; figures are cleared once written."""
    if fmt not in SAVE_FORMATS:
        raise ReportError(f"unknown plot format {fmt!r}; use one of {', '.join(SAVE_FORMATS)}")
    unknown = [name for name in figures if name not in FIGURES]
    if unknown:
        raise ReportError(f"unknown figure names: {', '.join(map(repr, unknown))}")
    plot_dir = Path(plot_dir)
    paths = []
    try:
        plot_dir.mkdir(parents=True, exist_ok=True)
        with quiet_library():
            paths = [_save(fig, plot_dir / f"{name}.{fmt}", fmt) for name, fig in figures.items()]
    except OSError as exc:
        raise ReportError(f"cannot write plots to {plot_dir}: {exc.strerror or exc}") from None
    return paths


def _save(fig: Figure, path: Path, fmt: str) -> Path:
    """Draw ``fig`` into ``path``, then clear it."""
    if fmt == "png":  # the fastest zlib level: a tenth faster, files about 12 % larger
        fig.savefig(path, format=fmt, dpi=DPI, pil_kwargs={"compress_level": 1})
    else:
        fig.savefig(path, format=fmt, dpi=DPI, metadata=_metadata(fmt))
    fig.clear()
    return path


def write_figure(data: bytes, path: Path) -> Path:
    """Write a figure drawn to bytes (:mod:`~itwin_report.plots.drawing`) to ``path``."""
    path.write_bytes(data)
    return path


def stale_plots(plot_dir: Path, drawn: list[str], fmt: str) -> list[Path]:
    """Plots of an earlier report in ``plot_dir``: files named after a figure this tool draws
    (``prediction.png``), in ``fmt``, that the new report did not draw. No other file."""
    keep = set(drawn)
    return [
        path
        for name in FIGURES
        if name not in keep and (path := Path(plot_dir) / f"{name}.{fmt}").is_file()
    ]


def _metadata(fmt: str) -> dict[str, str | None]:
    """No creation date in the files, so the same report gives the same bytes."""
    return {"Date": None} if fmt in ("svg", "pdf") else {}


_XML_PROLOGUE = re.compile(r"\A.*?(?=<svg\b)", re.DOTALL)
_METADATA = re.compile(r"\s*<metadata>.*?</metadata>", re.DOTALL)
_ID_REF = re.compile(r'(\bid="|url\(#|xlink:href="#)([^"()]+)')
_SAFE_NAME = re.compile(r"[a-z][a-z0-9_]*")


def figure_svg(fig: Figure, name: str) -> str:
    """``fig`` as an ``<svg>`` element to inline in HTML: text kept as text, unique ids.

    Matplotlib escapes every text it writes (``<``, ``>``, ``&``, quotes). The XML prologue,
    doctype and RDF metadata are dropped, and every id (and reference to one) is prefixed with
    ``name``, so several figures can share one page; the figure is left as it was.
    """
    from matplotlib import rc_context

    if not _SAFE_NAME.fullmatch(name):
        raise ValueError(f"figure name must be a plain identifier, got {name!r}")
    buf = io.StringIO()
    with (
        quiet_library(),
        rc_context({"svg.fonttype": "none", "svg.hashsalt": f"itwin-report-{name}"}),
    ):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = _METADATA.sub("", _XML_PROLOGUE.sub("", buf.getvalue(), count=1), count=1).strip()
    return _ID_REF.sub(lambda m: f"{m.group(1)}{name}-{m.group(2)}", svg)
