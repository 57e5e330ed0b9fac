"""Ctrl-C from the start: one line and exit 130 even while the command is still importing."""

from __future__ import annotations

import os
import signal
import sys
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
