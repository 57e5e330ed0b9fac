"""``analyze-traces`` through the command line: formats, exit codes, stdout and stderr apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import cli_runner

from itwin_report.cli import main
from itwin_report.emulator import kineto


def _run(*args: str) -> tuple[int, str, str]:
    result = cli_runner().invoke(main, ["analyze-traces", *args])
    return result.exit_code, result.stdout, result.stderr


def test_table_json_and_markdown(tmp_path: Path) -> None:
    for spec in kineto.job(4, slow_rank=2):
        kineto.write(spec, tmp_path / "ddp-4" / "torch-traces", gz=True)
    code, out, err = _run(str(tmp_path))
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "Where the device time goes, per rank"
    assert "- rank 2: compute per step 1.20× the median of 4 ranks" in out
    code, out, _ = _run(str(tmp_path), "--format", "json")
    body = json.loads(out)
    assert code == 0 and body["schema_version"] == "itwin-report-traces/1"
    assert [r["rank"] for r in body["ranks"]] == [0, 1, 2, 3] and body["warnings"] == []
    truth = kineto.truth(kineto.job(4, slow_rank=2)[0])
    assert body["ranks"][0]["idle_pct"] == round(truth["idle_pct"], 2)
    code, out, _ = _run(str(tmp_path), "--format", "markdown")
    assert code == 0 and "| Rank | Device |" in out and "worker\\_0.1.pt.trace.json.gz" in out


def test_errors_are_one_line_with_their_exit_code(tmp_path: Path) -> None:
    code, out, err = _run(str(tmp_path / "missing"))
    assert (code, out) == (1, "") and err.startswith("Error: no such file or folder")
    code, out, err = _run(str(tmp_path))
    assert (code, out) == (5, "") and err.startswith("Error: no trace files")
    (tmp_path / "worker_0.1.pt.trace.json").write_bytes(b"\x1b[31mnot json")
    code, out, err = _run(str(tmp_path))
    assert code == 5 and "not JSON" in err and err.count("\n") == 1


def test_a_control_character_in_a_file_name_is_escaped(tmp_path: Path) -> None:
    path = kineto.write(kineto.RankSpec(), tmp_path)
    odd = path.with_name("worker_0.\x1b[2J.pt.trace.json")
    path.rename(odd)
    code, out, _ = _run(str(tmp_path))
    assert code == 0 and "\x1b" not in out and "\\x1b[2J" in out


def test_the_installed_command_runs(tmp_path: Path) -> None:
    kineto.write(kineto.RankSpec(device="cpu"), tmp_path)
    exe = Path(sys.executable).parent / "itwin-report"
    done = subprocess.run(
        [str(exe), "analyze-traces", str(tmp_path), "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ranks"][0]["device"] == "cpu"
