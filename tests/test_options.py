"""One module of option rules (itwin_report/options.py) for the command line and the API: the
same values refused with the same words, as bad usage (exit code 2), and the numeric ranges
those the loader gives the same quantities read as run params."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_runner

import itwin_report as ir
from itwin_report import options
from itwin_report.analysis.scaling_mode import MODES
from itwin_report.cli import main
from itwin_report.data import validate
from itwin_report.report.baseline import BASELINES
from itwin_report.report.throughput import SOURCE_NAMES
from itwin_report.util.errors import BadOption, ReportError

REPORT = "generate-scalability-report"
# (command-line arguments, the API's keywords, the problem both must word alike)
SAME = [
    (["--fail-under-efficiency", "70"], {"fail_under_efficiency": 70},
     "70 is above 1: efficiency is a fraction from 0 to 1; did you mean 0.70?"),
    (["--fail-under-efficiency", "nan"], {"fail_under_efficiency": math.nan},
     "nan is not >= 0 and <= 1 (efficiency, a fraction)"),
    (["--gate-on", "x"], {"gate_on": "x"},
     "'x' is not one of epoch-time, throughput, time-to-target"),
    (["--baseline", "x"], {"baseline": "x"}, "'x' is not one of auto, single-gpu, per-strategy"),
    (["--scaling", "x"], {"scaling": "x"}, "'x' is not one of auto, strong, weak"),
    (["--throughput-source", "x"], {"throughput_source": "x"},
     "'x' is not one of auto, performance, rates, epochs"),
    (["--predict", "6,x"], {"predict": "6,x"}, options.WORKER_COUNTS),
    (["--predict", "0"], {"predict": [0]}, options.WORKER_COUNTS),
    (["--predict", "2000000"], {"predict": 2_000_000}, options.WORKER_COUNTS),
    (["--rate-config", "ddp:0"], {"rate_config": ("ddp", 0)}, options.RATE_CONFIG),
    (["--warmup-epochs", "-1"], {"warmup_epochs": -1}, "-1 is not >= 0 and <= 1e+09 (epochs)"),
    (["--warmup-epochs", "1.5"], {"warmup_epochs": 1.5}, "1.5 is not a whole number"),
    (["--samples-per-epoch", "2e15"], {"samples_per_epoch": 2e15},
     "2e+15 is not > 0 and <= 1e+15 (samples, as the samples_per_epoch param)"),
    (["--samples-per-epoch", "inf"], {"samples_per_epoch": math.inf},
     "inf is not > 0 and <= 1e+15 (samples, as the samples_per_epoch param)"),
    (["--pue", "0.5"], {"pue": 0.5},
     "0.5 is not >= 1 and <= 5 (a power usage effectiveness, facility / IT energy)"),
    (["--gpus-per-node", "2.5"], {"gpus_per_node": 2.5}, "2.5 is not a whole number"),
    (["--epochs", "0", "--deadline-hours", "1"], {"epochs": 0, "deadline_hours": 1},
     "0 is not >= 1 and <= 1e+09 (epochs)"),
    (["--pue", "abc"], {"pue": "abc"}, "expected a number, got 'abc'"),
]  # fmt: skip


@pytest.fixture(scope="module")
def data(scaling_sqlite: tuple[str, dict[str, Any]]) -> Any:
    return ir.load(scaling_sqlite[0], "scaling")


@pytest.mark.parametrize(("args", "keywords", "problem"), SAME)
def test_the_command_and_the_api_refuse_alike(
    data: Any, tmp_path: Path, args: list[str], keywords: dict[str, Any], problem: str
) -> None:
    missing = f"sqlite:///{tmp_path / 'absent.db'}"  # refused before any store is opened
    result = cli_runner().invoke(main, [REPORT, "--tracking-uri", missing, "-q", *args])
    assert result.exit_code == 2, result.stderr
    option = args[0]
    line = f"Error: Invalid value for '{option}': {problem} (see "
    assert result.stderr.startswith(line) and result.stderr.count("\n") == 1, result.stderr
    assert not (tmp_path / "absent.db").exists()
    with pytest.raises(BadOption) as bad:
        ir.build(data, **keywords)
    assert bad.value.exit_code == 2 and str(bad.value) == f"{option}: {problem}"


def test_the_api_refuses_what_the_issue_found(data: Any) -> None:
    """What it took before: fail_under_efficiency=70 or nan (a gate passing "at least nan"),
    gate_on="x" (KeyError), build(None) (AttributeError)."""
    for bad in (
        {"fail_under_efficiency": 70},
        {"fail_under_efficiency": math.nan},
        {"gate_on": "x"},
        {"predict": "64,x"},
        {"currency": "EUR"},  # without a price
        {"deadline_hours": 2},  # without epochs
        {"max_energy_per_speedup": 0},
    ):
        with pytest.raises(BadOption):
            ir.build(data, **bad)
    for nothing in (None, {}, "runs"):
        with pytest.raises(BadOption, match=r"^data: expected the runs ir\.load returned, got "):
            ir.build(nothing)  # type: ignore[arg-type]


def test_text_arguments_mean_what_the_command_line_means(
    data: Any, scaling_sqlite: tuple[str, dict[str, Any]]
) -> None:
    """predict="64" predicts at 64 workers (not at 6 and 4); run_names="ddp-8" is one name
    (not its characters), "ddp-4,ddp-8" two, as -r takes them."""
    report = ir.build(data, predict="64")
    assert sorted(set(report.analysis.predictions["workers"])) == [64]
    assert ir.build(data, predict=64).analysis.predictions.equals(report.analysis.predictions)
    one = ir.load(scaling_sqlite[0], "scaling", run_names="ddp-8")
    assert set(one.runs["run_name"]) == {"ddp-8"}
    two = ir.load(scaling_sqlite[0], "scaling", run_names="ddp-4,ddp-8")
    assert set(two.runs["run_name"]) == {"ddp-4", "ddp-8"}
    for bad in (
        {"run_names": ["ddp-8", 3]},
        {"include_unfinished": "no"},
        {"progress": 1},
        {"cache": "no"},  # it was taken as true
        {"cache_dir": 3},  # a TypeError
    ):
        with pytest.raises(BadOption):
            ir.load(scaling_sqlite[0], "scaling", **bad)
    with pytest.raises(BadOption, match=r"^--experiment-name: expected a non-blank text"):
        ir.load(scaling_sqlite[0], 5)  # type: ignore[arg-type]


def test_compare_checks_its_arguments(tmp_path: Path) -> None:
    side = {"epoch_time": [], "throughput": [], "gpu": [], "runs": []}
    for bad, message in (
        ({"max_regression": -1}, "--max-regression: -1 is not >= 0 and finite"),
        ({"max_regression": math.nan}, "--max-regression: nan is not >= 0 and finite"),
        ({"allow_missing": "yes"}, "--allow-missing: expected True or False, got 'yes'"),
    ):
        with pytest.raises(BadOption) as err:
            ir.compare(side, side, **bad)
        assert str(err.value).startswith(message)
    with pytest.raises(BadOption, match=r"^BASELINE: expected a report, a JSON object or"):
        ir.compare(None, side)  # type: ignore[arg-type]
    result = cli_runner().invoke(main, ["compare", "a.json", "b.json", "--max-regression", "-1"])
    assert result.exit_code == 2
    assert "Invalid value for '--max-regression': -1 is not >= 0 and finite" in result.stderr


def test_bad_options_are_report_errors_of_bad_usage() -> None:
    assert issubclass(BadOption, ReportError) and BadOption.exit_code == 2


def test_option_ranges_are_the_run_params_ranges() -> None:
    ranges = {name: valid for name, (valid, _) in options.OPTION_RANGES.items()}
    assert ranges["samples_per_epoch"] == validate.RUN_VALUES["samples_per_epoch"]
    workers = options.Range(1.0, float(validate.MAX_WORKERS))
    assert ranges["predict"] == ranges["gpus_per_node"] == workers
    assert validate.Range is options.Range and validate.POSITIVE is options.POSITIVE
    assert options.CHOICES["baseline"] == BASELINES
    assert options.CHOICES["scaling"] == MODES
    assert options.CHOICES["throughput_source"] == ("auto", *SOURCE_NAMES)
    # the same range refuses the same value as a run param and as an option
    for value in (0.0, -1.0, 1e15, 1.5e15, math.nan, math.inf):
        as_param = bool(validate.RUN_VALUES["samples_per_epoch"].ok([value])[0])
        as_option = options.number_problem("samples_per_epoch", value) == ""
        assert as_param == as_option, value
