"""Drawing a report's figures on two cores: a helper process, started before the store is read,
imports matplotlib and loads its fonts while the main process loads and aggregates; then both
take figures from one shared counter until none is left.

The figures are the same definitions (:data:`~itwin_report.plots.output.FIGURES`) drawn by the
same code, so the bytes are the same as drawing them in one process. Whatever goes wrong with
the helper (no second core, it could not start, it died, the report could not be sent), the main
process draws the figures the helper did not return.

``ITWIN_REPORT_PLOT_HELPER=0`` draws everything in the main process.
Light module: matplotlib is imported inside functions.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from itwin_report.plots.output import (
    _ON_REQUEST,
    DPI,
    FIGURES,
    _metadata,
    figure_svg,
    missing_reason,
    quiet_library,
)

if TYPE_CHECKING:
    from itwin_report.report import Report

ENV = "ITWIN_REPORT_PLOT_HELPER"
OFF = {"0", "false", "no", "off"}
# what a figure drawn in either process comes back as: (file bytes or None, inline SVG or None)
Drawn1 = tuple[bytes | None, str | None]


@dataclass
class Drawn:
    """Figures drawn for a command: file bytes in ``fmt`` and inline SVG, per figure name
    (in :data:`FIGURES` order), and why each missing figure is missing."""

    fmt: str | None
    files: dict[str, bytes] = field(default_factory=dict)
    svg: dict[str, str] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def wanted() -> bool:
    """Whether a helper process is worth starting: allowed, a second core to run on, and file
    locks (``fcntl``) for the shared counter."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return False
    return os.environ.get(ENV, "1").strip().lower() not in OFF and _cores() > 1


class Helper:
    """A drawing process and the counter file both sides take figures from.

    The process is a fresh interpreter (never a re-run of the caller's ``__main__``) in a
    session of its own, so Ctrl-C at the terminal reaches only the main process; its stderr
    goes nowhere, and it ends when its input closes.
    """

    def __init__(self) -> None:
        import subprocess
        import sys
        import tempfile

        fd, name = tempfile.mkstemp(prefix="itwin-report-figures-")
        self._counter = fd
        os.unlink(name)  # the helper inherits the open file, nobody else sees it
        os.pwrite(fd, b"0", 0)
        package = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(package), *_python_path()])}
        self._proc = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(fd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            pass_fds=(fd,),
            start_new_session=True,
            env=env,
        )
        self._sender: threading.Thread | None = None

    def take(self, count: int) -> int | None:
        """The next figure's position, None when all ``count`` are taken."""
        return take_next(self._counter, count)

    def send(self, job: tuple[Any, ...]) -> bool:
        """Hand the helper its job (written by a thread: the helper may still be starting);
        False when it cannot take it."""
        import pickle

        try:
            data = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            return False
        stdin = self._proc.stdin
        if stdin is None:
            return False

        def write() -> None:
            with contextlib.suppress(OSError, ValueError):
                stdin.write(data)
                stdin.close()

        self._sender = threading.Thread(target=write, name="itwin-report-plots", daemon=True)
        self._sender.start()
        return True

    def result(self) -> dict[str, Drawn1 | None]:
        """What the helper drew (name -> figure, None when it has no data); {} when it failed."""
        import pickle

        stdout = self._proc.stdout
        if stdout is None:
            return {}
        try:
            got = pickle.loads(stdout.read())
        except Exception:
            return {}
        return got if isinstance(got, dict) else {}

    def close(self) -> None:
        """Stop the helper (at once, whatever it is doing) and release its pipes and file."""
        with contextlib.suppress(Exception):
            if self._proc.poll() is None:
                self._proc.kill()
            self._proc.wait(5)
        for stream in (self._proc.stdin, self._proc.stdout):
            with contextlib.suppress(Exception):
                if stream is not None:
                    stream.close()
        with contextlib.suppress(OSError):
            os.close(self._counter)
        self._counter = -1


def _python_path() -> list[str]:
    given = os.environ.get("PYTHONPATH", "")
    return [p for p in given.split(os.pathsep) if p]


def take_next(fd: int, count: int) -> int | None:
    """Take the next position from the counter file ``fd`` (locked while read and written)."""
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        at = int(os.pread(fd, 32, 0) or b"0")
        if at >= count:
            return None
        os.pwrite(fd, str(at + 1).encode().ljust(32), 0)
        return at
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def start_helper() -> Helper | None:
    """A helper process when :func:`wanted`, else None (also when it cannot start)."""
    if not wanted():
        return None
    try:
        return Helper()
    except Exception:
        return None


def draw_one(report: Report, name: str, fmt: str | None, svg: bool) -> Drawn1 | None:
    """Figure ``name`` of ``report`` as file bytes (``fmt``) and/or inline SVG; None without
    data. The SVG is drawn first, then the file (which clears the figure)."""
    fig = FIGURES[name](report)
    if fig is None:
        return None
    text = figure_svg(fig, name) if svg else None
    data = None
    if fmt is not None:
        buf = io.BytesIO()
        if fmt == "png":  # the fastest zlib level: a tenth faster, files about 12 % larger
            fig.savefig(buf, format=fmt, dpi=DPI, pil_kwargs={"compress_level": 1})
        else:
            fig.savefig(buf, format=fmt, dpi=DPI, metadata=_metadata(fmt))
        data = buf.getvalue()
    fig.clear()
    return data, text


def _draw_taken(
    report: Report, names: list[str], fmt: str | None, svg: bool, take: Any
) -> dict[str, Drawn1 | None]:
    out: dict[str, Drawn1 | None] = {}
    with quiet_library():
        while (at := take(len(names))) is not None:
            out[names[at]] = draw_one(report, names[at], fmt, svg)
    return out


def draw_report(report: Report, fmt: str | None, svg: bool, helper: Helper | None = None) -> Drawn:
    """Every figure of ``report`` that has data, as files in ``fmt`` (None: no files) and/or
    inline SVG, shared with ``helper`` when there is one; the others' reasons."""
    names = list(FIGURES)
    counter = {"next": 0}

    def take_here(count: int) -> int | None:
        at = counter["next"]
        counter["next"] += 1
        return at if at < count else None

    take = take_here
    sent = False
    if helper is not None:
        sent = helper.send((_without_data(report), names, fmt, svg))
        if sent:
            take = helper.take
    got = _draw_taken(report, names, fmt, svg, take)
    if sent and helper is not None:
        got.update(helper.result())
        left = [n for n in names if n not in got]  # taken by a helper that did not return them
        with quiet_library():
            got.update({n: draw_one(report, n, fmt, svg) for n in left})
    out = Drawn(fmt)
    for name in names:
        drawn = got[name]
        if drawn is None:
            if name not in _ON_REQUEST:
                out.missing[name] = missing_reason(report, name)
            continue
        data, text = drawn
        if data is not None:
            out.files[name] = data
        if text is not None:
            out.svg[name] = text
    return out


def _without_data(report: Report) -> Report:
    """The report without the loaded data it keeps for the page (no figure reads it)."""
    import dataclasses

    return dataclasses.replace(report, data=None) if report.data is not None else report


SERVE = "from itwin_report.plots.drawing import serve; serve()"


def serve() -> None:
    """The helper's main: warm up, read one job from stdin, draw the figures it takes from the
    counter file (``sys.argv[1]``) and write them to stdout."""
    import pickle
    import sys

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fd = int(sys.argv[1])
    try:
        _warm_up()
        report, names, fmt, svg = pickle.loads(sys.stdin.buffer.read())
        got = _draw_taken(report, names, fmt, svg, lambda count: take_next(fd, count))
        sys.stdout.buffer.write(pickle.dumps(got, protocol=pickle.HIGHEST_PROTOCOL))
        sys.stdout.buffer.flush()
    except BaseException:  # the main process draws what is not returned
        os._exit(1)


def _warm_up() -> None:
    """Import what drawing needs and load the fonts, before the report arrives."""
    import pandas  # noqa: F401  (the report's frames)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    import itwin_report.report  # noqa: F401

    fig = Figure(figsize=(1, 1))
    FigureCanvasAgg(fig)
    fig.add_subplot().set_title("warm-up")
    with quiet_library():
        fig.savefig(io.BytesIO(), format="png", dpi=10)
