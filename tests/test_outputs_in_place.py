"""Outputs respect what they point at, and never land on what a command reads.

A regular file (or a new path) is replaced whole; a device, a FIFO, a socket or a link to an
open file descriptor is written where it is and survives, errors included. An output that is
an input of the command (a trace, a folder of traces, a compare side, a merge input, the
store's files and artifact folders), through links and hard links too, is refused with exit
code 2 before anything is read. Every device, FIFO and link here is a private copy under
``tmp_path``, never ``/dev`` itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_runner

from itwin_report.cli import main
from itwin_report.emulator import kineto
from itwin_report.util import atomic

ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
SIDE = {
    "epoch_time": [
        {"strategy": "ddp", "workers": 4, "avg_epoch_time_s": 20.0, "efficiency": 1.0},
        {"strategy": "ddp", "workers": 8, "avg_epoch_time_s": 10.0, "efficiency": 1.0},
    ],
    "throughput": [],
    "gpu": [],
    "runs": [],
}
RECORD = {
    "total_samples": 100.0,
    "total_time": 2.0,
    "samples_per_sec": 50.0,
    "compile_time": 1.0,
    "programming_time": 2.0,
    "est_samples_per_sec": 500.0,
    "suspected_input_bottleneck": False,
}


def _invoke(*args: str) -> tuple[int, str, str]:
    result = cli_runner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """A saved report side, two performance records and a folder of two traces."""
    side = tmp_path / "side.json"
    side.write_text(json.dumps(SIDE))
    perf = []
    for rank in (0, 1):
        path = tmp_path / f"w{rank}" / "performance.json"
        path.parent.mkdir()
        path.write_text(json.dumps(RECORD))
        perf.append(path)
    traces = tmp_path / "traces" / "ddp-2" / "torch-traces"
    for rank in (0, 1):
        kineto.write(kineto.RankSpec(rank=rank, world_size=2, steps=3), traces)
    return {"side": side, "perf0": perf[0], "perf1": perf[1], "traces": tmp_path / "traces"}


def _commands(uri: str, got: dict[str, Path]) -> dict[str, Callable[[str], tuple[str, ...]]]:
    """Each command with each of its outputs, as a function of the output's path."""
    report = ("generate-scalability-report", "--tracking-uri", uri, "-e", "scaling", "-q")
    return {
        "report -o": lambda out: (*report, "--no-plots", "-o", out),
        "report --html": lambda out: (*report, "--no-plots", "--html", out),
        "report --format html -o": lambda out: (
            *report,
            "--no-plots",
            "--format",
            "html",
            "-o",
            out,
        ),
        "compare -o": lambda out: ("compare", str(got["side"]), str(got["side"]), "-o", out),
        "analyze-traces -o": lambda out: ("analyze-traces", str(got["traces"]), "-o", out),
        "merge-performance -o": lambda out: (
            "merge-performance",
            str(got["perf0"]),
            str(got["perf1"]),
            "-o",
            out,
        ),
    }


# what each output starts with; only --html leaves the report on stdout as well
STARTS = {
    "report -o": "Scalability report",
    "report --html": "<!DOCTYPE html>",
    "report --format html -o": "<!DOCTYPE html>",
    "compare -o": "Scaling comparison",
    "analyze-traces -o": "Where the device time goes",
    "merge-performance -o": "{",
}
COMMANDS = list(STARTS)
# the page draws its plots (seconds each): one page per kind of output is enough, as every
# output of a command goes through the same writer
NOT_HTML = [name for name in COMMANDS if "html" not in name]


def _written(name: str, code: int, out: str, err: str, got: list[bytes]) -> None:
    assert (code, err) == (0, ""), err
    assert (out != "") == (name == "report --html")
    assert got and got[0].decode().startswith(STARTS[name]), got[:1]


def _report_args(run: Any) -> tuple[str, ...]:
    """The report command on the fixture's store, quiet (its plots on)."""
    return ("generate-scalability-report", "--tracking-uri", run.uri, "-e", "scaling", "-q")


@pytest.fixture
def run(
    scaling_sqlite: tuple[str, dict[str, Any]], inputs: dict[str, Path]
) -> Callable[[str, Path], tuple[int, str, str]]:
    def go(name: str, out: Path) -> tuple[int, str, str]:
        return _invoke(*_commands(scaling_sqlite[0], inputs)[name](str(out)))

    go.uri = scaling_sqlite[0]  # type: ignore[attr-defined]
    return go


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[list[bytes]]:
    """A thread reading ``path`` (a FIFO or a pipe's end) to its end while the block runs."""
    got: list[bytes] = []

    def read() -> None:
        with open(path, "rb") as handle:
            got.append(handle.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        if stat.S_ISFIFO(os.stat(path).st_mode):  # a writer that never came: end the reader
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(timeout=60)  # a FIFO replaced by a file: its reader waits on, got stays []


@pytest.mark.parametrize("name", [*NOT_HTML, "report --format html -o"])
def test_a_fifo_is_written_into_and_stays(name: str, run: Any, tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    with _reading(fifo) as got:
        code, out, err = run(name, fifo)
    _written(name, code, out, err, got)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("name", NOT_HTML)
def test_a_link_to_an_open_descriptor_is_written_through(
    name: str, run: Any, tmp_path: Path
) -> None:
    """``-o /dev/stdout`` as a private link to /proc/self/fd/N: the link stays, the pipe behind
    it gets the output."""
    read_end, write_end = os.pipe()
    link = tmp_path / "stdout"
    link.symlink_to(f"/proc/self/fd/{write_end}")
    reader = tmp_path / "reader"
    reader.symlink_to(f"/proc/self/fd/{read_end}")
    try:
        with _reading(reader) as got:
            code, out, err = run(name, link)
            os.close(write_end)
    finally:
        os.close(read_end)
    _written(name, code, out, err, got)
    assert os.readlink(link) == f"/proc/self/fd/{write_end}"


def test_a_descriptor_link_to_a_file_is_appended_to(run: Any, tmp_path: Path) -> None:
    """``cmd -o /dev/stdout >> log``: what the log held stays, the output follows it."""
    log = tmp_path / "log"
    log.write_text("earlier line\n")
    with open(log, "a") as handle:
        link = tmp_path / "stdout"
        link.symlink_to(f"/proc/self/fd/{handle.fileno()}")
        code, _, err = run("compare -o", link)
    assert (code, err) == (0, "")
    text = log.read_text()
    assert text.startswith("earlier line\nScaling comparison") and link.is_symlink()


def test_a_link_to_a_regular_file_stays_a_link(run: Any, tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    code, _, err = run("compare -o", link)
    assert (code, err) == (0, "")
    assert link.is_symlink() and real.read_text().startswith("Scaling comparison")


@pytest.mark.skipif(not ROOT, reason="mknod of a character device needs root (CI runs as root)")
@pytest.mark.parametrize("name", [*NOT_HTML, "report --html"])
def test_a_character_device_stays_a_device(name: str, run: Any, tmp_path: Path) -> None:
    """A private copy of /dev/null (1, 3): written into, never replaced by a file."""
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    code, out, err = run(name, null)
    assert (code, err) == (0, "") and (out != "") == (name == "report --html")
    st = os.lstat(null)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    # a failing command (a store that is not there) leaves it there too
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    code, _, err = _invoke(
        "generate-scalability-report", "--tracking-uri", missing, "-o", str(null), "--no-plots"
    )
    assert code == 1 and err.startswith("Error: no MLflow database")
    assert stat.S_ISCHR(os.lstat(null).st_mode)


def test_a_socket_is_an_error_of_one_line_and_stays(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "out.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        code, out, err = run("compare -o", path)
    assert code == 1 and out == ""
    assert err.startswith(f"Error: cannot write {path}: ") and err.count("\n") == 1
    assert stat.S_ISSOCK(os.lstat(path).st_mode)


def test_in_place_decisions(tmp_path: Path) -> None:
    regular = tmp_path / "f"
    regular.write_text("x")
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    link = tmp_path / "l"
    link.symlink_to(regular)
    fd_link = tmp_path / "fd"
    fd_link.symlink_to("/dev/fd/0")
    assert not atomic.in_place(regular) and not atomic.in_place(tmp_path / "new")
    assert not atomic.in_place(link) and atomic.target(link) == regular.resolve()
    assert atomic.in_place(fifo) and atomic.in_place(fd_link)
    assert atomic.in_place(Path("/proc/self/fd/0"))


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _refused(args: tuple[str, ...], message: str, before: dict[str, bytes], folder: Path) -> None:
    """Exit 2 with one line naming the conflict, nothing written, nothing read."""
    code, out, err = _invoke(*args)
    assert (code, out) == (2, ""), err
    assert err.startswith("Error: ") and message in err and err.count("\n") == 1, err
    assert _tree(folder) == before


def test_outputs_over_traces_are_refused(
    scaling_sqlite: tuple[str, dict[str, Any]], inputs: dict[str, Path], tmp_path: Path
) -> None:
    """A trace, a new file in a folder of traces, a link or a hard link to a trace: refused by
    analyze-traces and by the report's -o, --html and --plot-dir. A trace that cannot be read
    lies in the folder: reading anything would add a warning to stderr."""
    traces = inputs["traces"]
    (traces / "ddp-2" / "torch-traces" / "worker_7.1.pt.trace.json").write_text("{not json")
    trace = next(traces.rglob("worker_0.*"))
    (tmp_path / "soft.json").symlink_to(trace)
    os.link(trace, tmp_path / "hard.json")
    before = _tree(tmp_path)
    report = ("generate-scalability-report", "--tracking-uri", scaling_sqlite[0], "-e", "scaling")
    cases = {
        str(trace): f"would overwrite the input {trace}",
        str(traces / "new.txt"): f"would write into the input folder {traces}",
        str(tmp_path / "soft.json"): f"would overwrite the input {trace}",
        str(tmp_path / "hard.json"): f"would overwrite the input {trace}",
    }
    for out, message in cases.items():
        _refused(("analyze-traces", str(traces), "-o", out), message, before, tmp_path)
        if "overwrite" in message:  # the trace named alone
            _refused(("analyze-traces", str(trace), "-o", out), message, before, tmp_path)
        for option in ("-o", "--html"):
            args = (*report, "--traces", str(traces), option, out, "--no-plots")
            named = "--output" if option == "-o" else option
            _refused(args, f"{named} {out} {message}", before, tmp_path)
    plot_dir = traces / "ddp-2" / "plots"
    _refused((*report, "--traces", str(traces), "--plot-dir", str(plot_dir)),
             f"--plot-dir {plot_dir} would write into the input folder {traces}", before,
             tmp_path)  # fmt: skip


def test_outputs_over_sides_records_and_the_store_are_refused(
    inputs: dict[str, Path], tmp_path: Path, sqlite_store_template: Path
) -> None:
    """compare onto a side (also through a hard link) or into the artifact folder beside a
    SQLite store; merge-performance onto one of its records."""
    from conftest import new_sqlite_store

    side, perf = inputs["side"], inputs["perf0"]
    os.link(side, tmp_path / "side-hard.json")
    os.link(perf, tmp_path / "perf-hard.json")
    store = tmp_path / "store"
    uri = new_sqlite_store(sqlite_store_template, store / "m.db")
    (store / "artifacts").mkdir()
    before = _tree(tmp_path)
    compare = ("compare", str(side), str(side), "--tracking-uri", uri, "-o")
    _refused((*compare, str(side)), f"would overwrite the input {side}", before, tmp_path)
    hard = tmp_path / "side-hard.json"
    _refused((*compare, str(hard)), f"would overwrite the input {side}", before, tmp_path)
    into = store / "artifacts" / "cmp.txt"
    _refused((*compare, str(into)), "would write into the tracking store", before, tmp_path)
    merge = ("merge-performance", str(perf), str(inputs["perf1"]), "-o")
    for out in (perf, tmp_path / "perf-hard.json"):
        _refused((*merge, str(out)), f"would overwrite the input {perf}", before, tmp_path)


def test_plots_named_by_a_fifo_are_written_into_it(run: Any, tmp_path: Path) -> None:
    """In --plot-dir a FIFO under a plot's name gets that plot; one under the name of a plot
    this report does not draw (prediction.svg, without --predict) is left alone, never removed
    as an earlier report's plot would be."""
    plots = tmp_path / "plots"
    plots.mkdir()
    drawn, stale = plots / "epoch_time.svg", plots / "prediction.svg"
    os.mkfifo(drawn)
    os.mkfifo(stale)
    (plots / "speedup.svg").write_text("an earlier report's plot")
    with _reading(drawn) as got:
        code, _, err = _invoke(*_report_args(run), "--plot-dir", str(plots), "--plot-format", "svg")
    assert (code, err) == (0, "")
    assert got and got[0].startswith(b"<?xml") and b"</svg>" in got[0]
    assert stat.S_ISFIFO(os.lstat(drawn).st_mode) and stat.S_ISFIFO(os.lstat(stale).st_mode)
    assert (plots / "speedup.svg").read_text().startswith("<?xml")  # replaced whole
    assert not [p.name for p in plots.iterdir() if p.name.startswith(".")]
