"""The Python API, through the example of docs/python-api.md, against a real store."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
from conftest import cli_runner

import itwin_report as ir
from itwin_report.cli import main

DOC = Path(__file__).parent.parent / "docs" / "python-api.md"


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("api")
    args = ["emulate", "--tracking-uri", f"sqlite:///{root}/demo.db", "--strategies", "torch-ddp"]
    result = cli_runner().invoke(main, [*args, "--epochs", "3"])
    assert result.exit_code == 0, result.output
    return root


def test_the_documented_example_runs(demo_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert code is not None
    monkeypatch.chdir(demo_store)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), str(DOC), "exec"), {})
    text = out.getvalue()
    assert "Gate passed" in text or "Gate failed" in text
    assert "'efficiency'" in text and "'prediction'" in text
    assert "epoch_time" in text  # the comparison's metric column


def test_api_matches_the_command(demo_store: Path) -> None:
    uri = f"sqlite:///{demo_store}/demo.db"
    report = ir.build(ir.load(uri, "emulated-cluster"))
    args = ["generate-scalability-report", "--tracking-uri", uri, "-q", "--no-plots"]
    cli = cli_runner().invoke(main, [*args, "--format", "json"])
    assert cli.exit_code == 0
    ours, theirs = json.loads(report.to_json()), json.loads(cli.stdout)
    assert ours["epoch_time"] == theirs["epoch_time"]
    # the 8-worker speedup by hand from the table's own means and its base
    rows = {r["workers"]: r for r in ours["epoch_time"]}
    assert rows[8]["epoch_time_speedup"] == pytest.approx(
        rows[4]["avg_epoch_time_s"] / rows[8]["avg_epoch_time_s"]
    )


def test_notebook_display_is_escaped(demo_store: Path) -> None:
    uri = f"sqlite:///{demo_store}/demo.db"
    report = ir.build(ir.load(uri, "emulated-cluster"))
    report.experiment = "<script>x</script>"
    html = report._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert html.count("<table>") >= 4  # the four main tables all have rows
    row8 = report.epoch_time[report.epoch_time["workers"] == 8].iloc[0]
    assert f"{row8['speedup']:.2f}x" in html
    assert "<h4>Epoch time</h4>" in html
