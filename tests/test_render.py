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
from itwin_report.report.specs import TABLES

GOLDEN = Path(__file__).parent / "golden"
NAN = math.nan


def hand_report() -> Report:
    epoch = pd.DataFrame(
        {
            "strategy": ["ddp", "ddp", "deepspeed"],
            "workers": [4, 8, 4],
            "nodes": [1.0, 2.0, 1.0],
            "runs": [2, 1, 1],
            "epochs": [6, 3, 3],
            "avg_epoch_time_s": [12.0, 7.5, 10.0],
            "std_epoch_time_s": [0.5, NAN, NAN],
            "speedup": [1.0, 1.6, 1.0],  # 12 / 7.5
            "efficiency": [1.0, 0.8, 1.0],  # 1.6 * 4 / 8
            "base_strategy": ["ddp", "ddp", "deepspeed"],
            "base_workers": [4.0, 4.0, 4.0],
            "speedup_ci_low": [1.0, NAN, NAN],  # the base: [1, 1]; one run: no interval
            "speedup_ci_high": [1.0, NAN, NAN],
            "efficiency_ci_low": [1.0, NAN, NAN],
            "efficiency_ci_high": [1.0, NAN, NAN],
        }
    )
    gpu = pd.DataFrame(
        {
            "strategy": ["ddp", "ddp"],
            "workers": [4, 8],
            "runs": [2, 1],
            "energy_wh": [41.25, 44.0],
            "energy_wh_per_epoch": [13.75, NAN],
            "energy_coverage": [1.0, 0.25],  # 8 workers, 2 measured: 44 Wh is an estimate (~)
            "energy_source": ["power samples", "energy counter"],
            "utilization_pct": [93.5, 71.0],
            "avg_power_w": [250.0, 240.5],
            "gpu_hours_per_epoch": [0.0125, 0.0133],
            "gpu_hours_per_run": [0.05, 0.04],
            "nodes": [1.0, 2.0],
            "node_hours_per_epoch": [0.0031, 0.0033],
            "energy_wh_per_1k_samples": [0.55, NAN],
        }
    ).reindex(columns=next(s for s in TABLES if s.name == "gpu").names)
    throughput = pd.DataFrame(
        {
            "strategy": ["ddp", "ddp"],
            "workers": [4, 8],
            "runs": [2, 1],
            "samples_per_sec": [400.0, 640.0],
            "samples_per_sec_ci_low": [380.0, NAN],  # two runs: an interval; one run: none
            "samples_per_sec_ci_high": [420.0, NAN],
            "samples_per_sec_per_gpu": [100.0, 80.0],
            "speedup": [1.0, 1.6],
            "efficiency": [1.0, 0.8],
            "base_strategy": ["ddp", "ddp"],
            "base_workers": [4.0, 4.0],
            "est_samples_per_sec": [500.0, NAN],
            "achieved_fraction": [0.8, NAN],
            "input_bound": pd.Series([False, None], dtype="object"),
            "source": ["performance.json", "performance.json"],
            "evidence": ["80% of estimate; GPU idle 6%", "no evidence"],
        }
    ).reindex(columns=next(s for s in TABLES if s.name == "throughput").names)
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
    assert re.search(r"ddp\s+8\s+2\s+1\s+3\s+7\.50 s\s+n/a\s+1\.60x\s+80\.0 %", text)
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
    tables = [r["table"] for r in rows if r["table"] != "summary"]
    assert tables == ["epoch_time"] * 3 + ["gpu"] * 2 + ["throughput"] * 2
    # the summary's lines follow the tables, each with what it answers and its section
    summary = [(r["kind"], r["section"], r["text"]) for r in rows if r["table"] == "summary"]
    assert summary == [
        (x["kind"], x["table"], x["text"]) for x in report_to_dict(hand_report())["summary"]
    ]
    assert rows[1]["efficiency"] == "0.8" and rows[1]["workers"] == "8" and rows[1]["epochs"] == "3"
    assert rows[0]["energy_wh"] == ""
    obj = json.loads(render(hand_report(), "json"))
    assert obj == report_to_dict(hand_report())
    assert set(obj) == {
        "tool", "schema_version", "experiment", "tracking_uri", "warmup_epochs", "epoch_time",
        "gpu", "computation", "throughput", "time_breakdown", "communication", "baseline",
        "warnings", "warning_records", "gate", "stragglers", "trace_ranks", "summary",
    }  # fmt: skip
    assert obj["gate"] is None and obj["schema_version"] == 4
    assert obj["epoch_time"][1]["std_epoch_time_s"] is None
    assert obj["throughput"][0]["input_bound"] is False
    assert obj["throughput"][1]["input_bound"] is None
    assert obj["computation"] == []
    assert isinstance(obj["gpu"][0]["workers"], int)


def test_unknown_format() -> None:
    from itwin_report.util.errors import ReportError

    with pytest.raises(ReportError, match="unknown format"):
        render(hand_report(), "xml")


def test_one_definition_per_table() -> None:
    # the hand-built frames, the plain table's headers and JSON keys all follow the specs
    report = hand_report()
    text = render(report, "table")
    obj = report_to_dict(report)
    for spec in TABLES:
        frame = getattr(report, spec.name)
        assert list(frame.columns) == spec.names, spec.name
        # JSON pairs the interval bounds: epoch_time_speedup_ci = [low, high], and so on
        keys = [c.key for c in spec.columns if not c.key.endswith(("_ci_low", "_ci_high"))]
        keys += {
            "epoch_time": ["epoch_time_speedup_ci", "epoch_time_efficiency_ci"],
            "gpu": ["energy_wh_per_epoch_ci", "gpu_hours_per_epoch_ci"],
            "throughput": ["samples_per_sec_ci"],
        }.get(spec.name, [])
        for row in obj[spec.name]:
            assert list(row) == keys
        if len(frame):
            header_line = text.split(f"{spec.heading}\n{'=' * len(spec.heading)}\n")[1]
            header_line = header_line.splitlines()[0]
            assert header_line.split("  ")[0] == "Strategy"
            headers = re.split(r"\s{2,}", header_line.strip())
            # an optional column (e.g. peak GPU memory) only when some row has a value
            shown = [c for c in spec.shown if not c.optional or frame[c.name].notna().any()]
            assert headers == [c.header for c in shown]


def test_builders_return_the_spec_columns_and_dtypes() -> None:
    from itwin_report.data.rundata import RunData
    from itwin_report.report import build_report

    report = build_report(RunData(experiment="e", tracking_uri="sqlite:///x.db"))
    for spec in TABLES:
        frame = getattr(report, spec.name)
        assert list(frame.columns) == spec.names
        for col in spec.columns:
            want = col.dtype
            got = str(frame[col.name].dtype)
            assert got == want or (want == "str" and got in ("object", "str")), col.name


# ---- store values are text: escaped per format, never markup, never a secret ----

ESC_RED = "\x1b[31mred"
LINK = "[link=https://evil.example]deepspeed[/link]"
FAKE_ROW = "evil\nddp 99 1 3 1.00 s"
BIDI = "x\u202egnp.exe"
FORMULAS = ["=HYPERLINK(1)", "+1", "-2", "@SUM(A1)", "\tTAB", "<b>&|\\"]
SECRET = "s3cr3t-pw"


def hostile_report() -> Report:
    names = [ESC_RED, LINK, "[/bold]", FAKE_ROW, BIDI, *FORMULAS]
    n = len(names)
    epoch = pd.DataFrame(
        {
            "strategy": names,
            "workers": list(range(1, n + 1)),
            "runs": [1] * n,
            "epochs": [2] * n,
            "avg_epoch_time_s": [10.0] * n,
            "std_epoch_time_s": [NAN] * n,
            "speedup": [-1.5] * n,  # impossible, but a number: never protected as a formula
            "efficiency": [1.0] * n,
            **{c: [NAN] * n for c in ("speedup_ci_low", "speedup_ci_high")},
            **{c: [NAN] * n for c in ("efficiency_ci_low", "efficiency_ci_high")},
        }
    )
    report = hand_report()
    report.experiment = f"exp\x07{ESC_RED}"
    report.tracking_uri = f"http://alice:{SECRET}@host:5000/?token=tok{SECRET}"
    report.epoch_time = epoch
    report.warnings = [f"run on http://bob:{SECRET}@db/x failed", f"name {ESC_RED}\nfake line"]
    return report


def test_plain_table_escapes_control_and_bidi_characters() -> None:
    text = render(hostile_report(), "table")
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b[31mred" in text and "\\u202egnp.exe" in text and "\\x07" in text
    assert "evil\\nddp 99" in text
    # a newline in a name adds no row: 11 strategies -> 11 lines between the dashes and the blank
    section = text.split("Epoch time\n==========\n")[1].split("\n\n")[0].splitlines()
    assert len(section) == 2 + 11
    assert not any(line.startswith("ddp 99") for line in text.splitlines())
    assert SECRET not in text and "alice:***@host" in text


def test_styled_table_never_interprets_markup() -> None:
    text = render(hostile_report(), "table", styled=True)  # "[/bold]" would raise MarkupError
    assert LINK in text and "[/bold]" in text
    assert "\x1b]8;" not in text  # no hyperlink escape sequence
    assert "\\x1b[31mred" in text and ESC_RED not in text
    assert "\u202e" not in text and SECRET not in text


def test_markdown_escapes_cells_and_html() -> None:
    md = render(hostile_report(), "markdown")
    rows = [line for line in md.splitlines() if line.startswith("| ")]
    # header + rows: epoch, gpu, its cost columns, throughput
    assert len(rows) == (1 + 11) + (1 + 2) + (1 + 2) + (1 + 2)
    epoch_rows = rows[1:12]
    assert all(line.count(" | ") == 7 for line in epoch_rows)  # 8 cells, no | from a value
    assert "&lt;b&gt;&amp;\\|\\\\" in md and "<b>" not in md
    assert "\\[link=https://evil.example\\]deepspeed\\[/link\\]" in md
    assert "evil\\\\nddp 99" in md  # newline shown as \n, the backslash escaped for markdown
    assert "\x1b" not in md and SECRET not in md and "`http://alice:***@host:5000/" in md
    assert "token=***" in md


def test_csv_protects_text_cells_not_numbers() -> None:
    rows = list(csv.DictReader(io.StringIO(render(hostile_report(), "csv"))))
    strategies = [r["strategy"] for r in rows if r["table"] == "epoch_time"]
    assert strategies[5:] == ["'=HYPERLINK(1)", "'+1", "'-2", "'@SUM(A1)", "'\\tTAB", "<b>&|\\"]
    # control characters are escaped as in the other text formats: one line per row
    assert strategies[:5] == [
        "\\x1b[31mred",
        LINK,
        "[/bold]",
        "evil\\nddp 99 1 3 1.00 s",
        "x\\u202egnp.exe",
    ]
    assert all(r["speedup"] == "-1.5" for r in rows if r["table"] == "epoch_time")
    throughput = [r for r in rows if r["table"] == "throughput"]
    assert throughput[-1]["source"] == "performance.json"


def test_json_keeps_raw_values_but_masks_secrets() -> None:
    obj = json.loads(render(hostile_report(), "json"))
    assert [r["strategy"] for r in obj["epoch_time"]][:5] == [
        ESC_RED,
        LINK,
        "[/bold]",
        FAKE_ROW,
        BIDI,
    ]
    assert obj["tracking_uri"] == "http://alice:***@host:5000/?token=***"
    assert obj["warnings"][0] == "run on http://bob:***@db/x failed"
    assert SECRET not in json.dumps(obj)


def test_csv_holds_no_control_character() -> None:
    """A terminal title sequence (ESC ] 0 ; ... BEL) in a name reaches the CSV escaped."""
    report = hostile_report()
    report.epoch_time.loc[0, "strategy"] = "\x1b]0;owned\x07ddp"
    text = render(report, "csv")
    assert not any(c in text for c in "\x1b\x07\u202e\r")
    assert "\\x1b]0;owned\\x07ddp" in text
    # one physical line per record: no newline from a value splits a row
    assert len(text.splitlines()) == 1 + len(list(csv.DictReader(io.StringIO(text))))


def long_name_report(name: str) -> Report:
    report = hand_report()
    report.epoch_time.loc[0, "strategy"] = name
    report.experiment = name
    report.warnings = [f"no GPU data for {name}-4"]
    return report


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_long_values_are_shortened_in_text_formats(fmt: str) -> None:
    from itwin_report.util.escape import ELLIPSIS, MAX_LINE, MAX_SHOWN

    name = "n" * 100_000
    text = render(long_name_report(name), fmt)
    runs = [len(m) for m in re.findall(r"n{50,}" + ELLIPSIS, text)]
    # the cell and the title show MAX_SHOWN characters, the ellipsis included
    assert runs.count(MAX_SHOWN) >= 2, runs
    assert max(len(line) for line in text.splitlines()) <= MAX_LINE + 40
    assert "n" * MAX_SHOWN not in text.split("Warnings")[0]


def test_long_values_stay_whole_in_json_and_csv() -> None:
    name = "n" * 20_000
    report = long_name_report(name)
    assert json.loads(render(report, "json"))["epoch_time"][0]["strategy"] == name
    rows = list(csv.DictReader(io.StringIO(render(report, "csv"))))
    assert rows[0]["strategy"] == name


def test_shorten_and_plural() -> None:
    from itwin_report.util.escape import shorten
    from itwin_report.util.text import plural

    assert shorten("abc", 3) == "abc"
    assert shorten("abcd", 3) == "ab\u2026" and len(shorten("x" * 500)) == 200
    assert plural(1, "worker") == "1 worker" and plural(2, "worker") == "2 workers"
    assert plural(1.0, "GPU") == "1 GPU" and plural(0.5, "worker") == "0.5 workers"
    assert plural(3, "run", "runs of it") == "3 runs of it"


def test_styled_table_cuts_no_cell_at_120_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 120 columns the widest table (throughput, 11 columns) fits: headers wrap at spaces,
    no value ends in an ellipsis. Narrower than its words, a column folds, never cuts."""
    ansi = re.compile(r"\x1b\[[0-9;]*m")
    report = hand_report()
    report.throughput.loc[:, "strategy"] = "non-distributed"
    for columns in (120, 100):
        monkeypatch.setenv("COLUMNS", str(columns))
        text = ansi.sub("", render(report, "table", styled=True))
        assert "\u2026" not in text
        assert max(len(line.rstrip()) for line in text.splitlines()) <= columns
    monkeypatch.setenv("COLUMNS", "120")
    text = ansi.sub("", render(report, "table", styled=True))
    assert "performance.json" in text and "non-distributed" in text
    for header in ("Efficiency", "Input-bound", "Samples/s", "Estimate", "Achieved"):
        assert header in text, header


def test_column_widths_give_each_column_its_longest_word() -> None:
    """Each column gets at least its narrowest (longest word, or whole number cell), then the
    room left goes to whole cells first, then to whole headers."""
    from itwin_report.render.styled import widths_for

    # (narrowest, cells whole, natural): a name of 16, "Efficiency (throughput)" over "90.3 %"
    limits = [(16, 16, 16), (12, 12, 23)]
    assert widths_for(limits, 39) == [16, 23]  # fits as it is
    assert widths_for(limits, 30) == [16, 14]  # the header folds
    assert widths_for(limits, 27) is None  # even the narrowest do not fit
    # a text cell wraps only when the room is short: cells whole before headers
    assert widths_for([(5, 13, 13), (8, 8, 20)], 25) == [13, 12]


# ---- help texts a pip user reads ----


def test_main_help_lists_every_exit_code_from_errors() -> None:
    from conftest import cli_runner

    from itwin_report.cli import main
    from itwin_report.util.errors import EXIT_CODES, EXIT_EMPTY, EXIT_REGRESSION

    out = cli_runner().invoke(main, ["--help"]).stdout
    listed = out.split("Exit codes:")[1].split("Options:")[0]
    codes = [int(line.split()[0]) for line in listed.strip().splitlines()]
    assert codes == list(EXIT_CODES) and {EXIT_REGRESSION, EXIT_EMPTY} <= set(codes)
    for code, meaning in EXIT_CODES.items():
        assert f"{code:<4} {meaning}" in listed


def test_report_help_examples_run_as_written_after_emulate() -> None:
    """One command per line, no gap left by a line continuation, each on the experiment that
    ``itwin-report emulate`` writes (or on the only experiment there is)."""
    from conftest import cli_runner

    from itwin_report.cli import main

    out = cli_runner().invoke(main, ["generate-scalability-report", "--help"]).stdout
    examples = out.split("Examples")[1].split("Options:")[0].split("):\n", 1)[1].splitlines()
    commands = [line.strip() for line in examples if line.strip()]
    assert len(commands) >= 8
    for command in commands:
        assert command.startswith("itwin-report generate-scalability-report"), command
        assert "  " not in command and not command.endswith("\\"), command
        assert "-e emulated-cluster" in command or " -e " not in command, command
        assert "my-exp" not in command and "$" not in command, command


def test_markdown_escapes_every_special_character_of_a_store_value() -> None:
    """Each of markdown's specials in a strategy name is backslash-escaped in the cell."""
    report = hand_report()
    report.epoch_time.loc[2, "strategy"] = "a*b_c`d[e]f#g\\h"
    md = render(report, "markdown")
    row = next(line for line in md.splitlines() if line.startswith("| a"))
    assert row.startswith("| a\\*b\\_c\\`d\\[e\\]f\\#g\\\\h |"), row
