"""Rendering: golden outputs for one hand-built report, plus inline checks."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from itwin_report.render import FORMATS, render, report_to_dict
from itwin_report.report import Report
from itwin_report.report.common import empty_table
from itwin_report.report.computation import COLUMNS as COMPUTATION_COLUMNS

GOLDEN = Path(__file__).parent / "golden"
NAN = math.nan


def hand_report() -> Report:
    epoch = pd.DataFrame(
        {
            "strategy": ["ddp", "ddp", "deepspeed"],
            "workers": [4, 8, 4],
            "runs": [2, 1, 1],
            "epochs": [6, 3, 3],
            "avg_epoch_time_s": [12.0, 7.5, 10.0],
            "std_epoch_time_s": [0.5, NAN, NAN],
            "speedup": [1.0, 1.6, 1.0],  # 12 / 7.5
            "efficiency": [1.0, 0.8, 1.0],  # 1.6 * 4 / 8
        }
    )
    gpu = pd.DataFrame(
        {
            "strategy": ["ddp", "ddp"],
            "workers": [4, 8],
            "runs": [2, 1],
            "energy_wh": [41.25, 44.0],
            "energy_wh_per_epoch": [13.75, NAN],
            "utilization_pct": [93.5, 71.0],
            "avg_power_w": [250.0, 240.5],
        }
    )
    throughput = pd.DataFrame(
        {
            "strategy": ["ddp", "ddp"],
            "workers": [4, 8],
            "runs": [2, 1],
            "samples_per_sec": [400.0, 640.0],
            "samples_per_sec_per_gpu": [100.0, 80.0],
            "speedup": [1.0, 1.6],
            "efficiency": [1.0, 0.8],
            "est_samples_per_sec": [500.0, NAN],
            "achieved_fraction": [0.8, NAN],
            "input_bound": pd.Series([False, None], dtype="object"),
            "source": ["performance.json", "performance.json"],
            "evidence": ["80% of estimate; GPU idle 6%", "no evidence"],
        }
    )
    return Report(
        experiment="demo",
        tracking_uri="sqlite:///mlflow.db",
        warmup_epochs=1,
        epoch_time=epoch,
        gpu=gpu,
        computation=empty_table(COMPUTATION_COLUMNS),
        throughput=throughput,
        rate_series=pd.DataFrame(),
        rate_config=None,
        warnings=["no GPU data for deepspeed with 4 workers", "a | pipe"],
    )


SUFFIX = {"table": "txt", "markdown": "md", "csv": "csv", "json": "json"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_golden(fmt: str) -> None:
    text = render(hand_report(), fmt)
    path = GOLDEN / f"report.{SUFFIX[fmt]}"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8")


def test_plain_table_content() -> None:
    text = render(hand_report(), "table")
    assert "\x1b" not in text
    for heading in (
        "Epoch time",
        "GPU energy and utilization",
        "Computation vs other",
        "Throughput",
    ):
        assert heading in text
    assert "No profiler data found." in text
    assert re.search(r"ddp\s+8\s+1\s+3\s+7\.50 s\s+n/a\s+1\.60x\s+80\.0 %", text)
    assert "41.2 Wh" in text and "93.5 %" in text and "250.0 W" in text
    assert text.rstrip().endswith("First 1 epoch(s) of every run left out of epoch times.")
    assert text.index("Warnings:") < text.index("First 1 epoch(s)")


def test_warmup_zero_line_and_styled() -> None:
    report = hand_report()
    report.warmup_epochs = 0
    assert "All epochs included in epoch times." in render(report, "table")
    styled = render(report, "table", styled=True)
    assert "\x1b[" in styled and "Epoch time" in styled and "1.60x" in styled


def test_markdown_csv_json() -> None:
    md = render(hand_report(), "markdown")
    assert "## Epoch time" in md and "|---|---:|" in md and "- a \\| pipe" not in md
    assert "- a | pipe" in md  # list items need no escaping
    rows = list(csv.DictReader(io.StringIO(render(hand_report(), "csv"))))
    assert [r["table"] for r in rows] == ["epoch_time"] * 3 + ["gpu"] * 2 + ["throughput"] * 2
    assert rows[1]["efficiency"] == "0.8" and rows[1]["workers"] == "8" and rows[1]["epochs"] == "3"
    assert rows[0]["energy_wh"] == ""
    obj = json.loads(render(hand_report(), "json"))
    assert obj == report_to_dict(hand_report())
    assert set(obj) == {
        "experiment", "tracking_uri", "warmup_epochs", "epoch_time", "gpu",
        "computation", "throughput", "warnings",
    }  # fmt: skip
    assert obj["epoch_time"][1]["std_epoch_time_s"] is None
    assert obj["throughput"][0]["input_bound"] is False
    assert obj["throughput"][1]["input_bound"] is None
    assert obj["computation"] == []
    assert isinstance(obj["gpu"][0]["workers"], int)


def test_unknown_format() -> None:
    from itwin_report.errors import ReportError

    with pytest.raises(ReportError, match="unknown format"):
        render(hand_report(), "xml")
