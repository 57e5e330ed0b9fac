"""Ctrl-C from the start: one line and exit 130 even while the command is still importing."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import start_from_terminal

Store = tuple[str, dict[str, Any]]
CONSOLE_SCRIPT = Path(sys.executable).parent / "itwin-report"


def _imported(line: str, module: str) -> bool:
    """Whether ``line`` is Python's report that ``module`` was imported."""
    return line.startswith("import time:") and line.rsplit("|", 1)[-1].strip() == module


@pytest.mark.parametrize(
    "entry",
    [[sys.executable, "-m", "itwin_report"], [str(CONSOLE_SCRIPT)]],
    ids=["python-m", "console-script"],
)
def test_ctrl_c_while_importing_is_one_line_and_130(
    scaling_sqlite: Store, tmp_path: Path, entry: list[str]
) -> None:
    """SIGINT as soon as click is imported: the CLI's own modules are still loading.

    Python reports every import on stderr (``PYTHONPROFILEIMPORTTIME``), which tells the test
    when to send the signal; those lines are left out of the comparison.
    """
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1", "MLFLOW_TRACKING_URI": ""}
    cmd = [*entry, "generate-scalability-report", "-e", "scaling", "-q", "--no-plots",
           "--tracking-uri", scaling_sqlite[0], "-o", str(tmp_path / "report.txt")]  # fmt: skip
    proc = start_from_terminal(cmd, env)
    assert proc.stderr is not None
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if _imported(line, "click"):
                proc.send_signal(signal.SIGINT)
                break
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert any(_imported(line, "click") for line in seen)
    lines = [line for line in err.splitlines() if not line.startswith("import time:")]
    assert (proc.returncode, lines, out) == (130, ["Error: interrupted by SIGINT"], "")
    assert not (tmp_path / "report.txt").exists()


def _first_own_module(line: str) -> bool:
    return line.startswith("import time:") and " itwin_report" in line.rsplit("|", 1)[-1]


@pytest.mark.parametrize(
    "entry",
    [[sys.executable, "-m", "itwin_report"], [str(CONSOLE_SCRIPT)]],
    ids=["python-m", "console-script"],
)
def test_ctrl_c_right_after_the_package_starts_importing(
    scaling_sqlite: Store, tmp_path: Path, entry: list[str]
) -> None:
    """SIGINT once the first of the package's own modules is imported (the package's first
    lines have run, nothing of the command yet): one line and 130, from the whole group."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1", "MLFLOW_TRACKING_URI": ""}
    cmd = [*entry, "generate-scalability-report", "-q", "--no-plots",
           "--tracking-uri", scaling_sqlite[0], "-o", str(tmp_path / "report.txt")]  # fmt: skip
    proc = start_from_terminal(cmd, env, group=True)
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if _first_own_module(line):
                os.killpg(proc.pid, signal.SIGINT)
                break
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = [line for line in err.splitlines() if not line.startswith("import time:")]
    assert (proc.returncode, lines, out) == (130, ["Error: interrupted by SIGINT"], "")


SWALLOWING = """
import os, time

if os.environ.get("ITWIN_TEST_READY"):
    import itwin_report.report as report

    real = report.build_report

    class Finalizer:
        def __del__(self):  # a KeyboardInterrupt here is "Exception ignored" by Python
            time.sleep(60)

    def build_report(*args, **kwargs):
        open(os.environ["ITWIN_TEST_READY"], "w").close()
        if os.environ["ITWIN_TEST_HOW"] == "except":
            try:
                time.sleep(60)
            except KeyboardInterrupt:
                pass  # a library that swallows it
        else:
            Finalizer()
        return real(*args, **kwargs)

    report.build_report = build_report
"""


def _wait_for(path: Path, proc: Any) -> None:
    deadline = time.monotonic() + 120
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert path.exists(), proc.communicate(timeout=5)


@pytest.mark.parametrize("how", ["except", "finalizer"])
def test_a_ctrl_c_some_code_swallows_still_ends_the_command(
    scaling_sqlite: Store, tmp_path: Path, how: str
) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SWALLOWING)
    ready = tmp_path / "ready"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")]),
        "ITWIN_TEST_READY": str(ready),
        "ITWIN_TEST_HOW": how,
        "MLFLOW_TRACKING_URI": "",
    }
    cmd = [sys.executable, "-m", "itwin_report", "generate-scalability-report", "-q",
           "--no-plots", "--tracking-uri", scaling_sqlite[0], "-e", "scaling"]  # fmt: skip
    proc = start_from_terminal(cmd, env, group=True)
    try:
        _wait_for(ready, proc)
        time.sleep(0.2)  # inside the sleep
        os.killpg(proc.pid, signal.SIGINT)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert (proc.returncode, err) == (130, "Error: interrupted by SIGINT\n")


SLOW_WORKERS = """
import os, time

if os.environ.get("ITWIN_TEST_READY"):
    import itwin_report.traces.analyze as analyze

    analyze.PARALLEL_MIN_BYTES = 0  # a pool for any set of traces

    def slow_read(path):
        with open(os.environ["ITWIN_TEST_READY"], "a") as fh:
            fh.write(f"{os.getpid()}\\n")
        time.sleep(60)
        return analyze.read_trace(path)

    analyze.read_one = slow_read
"""


def _live_members(group: int) -> list[int]:
    """Processes of the process group ``group`` that are not zombies."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == group and fields[0] != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_during_a_parallel_trace_read_is_one_line_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """Ctrl-C to the whole group, as a terminal sends it, while workers read: the workers
    ignore it, the command stops them and their fork server, and says one line."""
    from itwin_report.emulator import kineto

    for spec in kineto.job(3):
        kineto.write(spec, tmp_path / "traces")
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SLOW_WORKERS)
    ready = tmp_path / "ready"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")]),
        "ITWIN_TEST_READY": str(ready),
    }
    cmd = [sys.executable, "-m", "itwin_report", "analyze-traces", str(tmp_path / "traces")]
    proc = start_from_terminal(cmd, env, group=True)
    try:
        _wait_for(ready, proc)
        time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert (proc.returncode, err, out) == (130, "Error: interrupted by SIGINT\n", "")
    deadline = time.monotonic() + 60  # the command waited for them: they are gone already
    while _live_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _live_members(proc.pid) == []
