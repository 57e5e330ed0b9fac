"""``compare``: deltas, the noise test, exit code 4, and the output formats.

Unit tests start from hand-written JSON reports; the command tests read emulated experiments
from a real SQLite store: the same model with another seed is no regression, a slower
inter-node link (a larger all-reduce cost) is.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import cli_runner

from itwin_report.cli import main
from itwin_report.compare import compare, regressions, render_comparison, side_from_dict
from itwin_report.errors import DataError


def _report(
    time: float = 10.0,
    runs: list[float] | None = None,
    efficiency: float = 0.8,
    throughput: float = 500.0,
    energy: float = 2.0,
    eff_ci: list[float] | None = None,
) -> dict[str, Any]:
    """A JSON report with one configuration, ddp on 8 workers."""
    epoch = {"strategy": "ddp", "workers": 8, "avg_epoch_time_s": time, "efficiency": efficiency}
    epoch["efficiency_ci"] = eff_ci
    return {
        "epoch_time": [epoch],
        "throughput": [{"strategy": "ddp", "workers": 8, "samples_per_sec": throughput}],
        "gpu": [{"strategy": "ddp", "workers": 8, "energy_wh_per_epoch": energy}],
        "runs": [
            {"strategy": "ddp", "workers": 8, "job_id": str(i), "avg_epoch_time_s": v}
            for i, v in enumerate(runs or [])
        ],
    }


def _row(table: Any, metric: str) -> dict[str, Any]:
    return dict(table[table["metric"] == metric].iloc[0])


def test_identical_reports_have_no_change() -> None:
    side = side_from_dict(_report(runs=[9.8, 10.2]), "a")
    table = compare(side, side)
    assert len(table) == 4
    assert (table["change"] == 0).all()
    assert not table["regression"].any()
    assert regressions(table) == []


def test_slower_epochs_beyond_threshold_and_noise() -> None:
    base = side_from_dict(_report(10.0, [9.9, 10.0, 10.1]), "base")
    slow = side_from_dict(_report(11.0, [10.9, 11.0, 11.1]), "cur")
    table = compare(base, slow)
    row = _row(table, "epoch_time")
    assert row["change"] == pytest.approx(0.10)
    assert row["noise_test"] == "welch" and row["beyond_noise"]
    assert regressions(table) == ["ddp-8 epoch time (+10.0%)"]


def test_a_change_within_noise_is_no_regression() -> None:
    base = side_from_dict(_report(10.0, [7.0, 10.0, 13.0]), "base")
    noisy = side_from_dict(_report(11.0, [8.0, 11.0, 14.0]), "cur")
    row = _row(compare(base, noisy), "epoch_time")
    assert row["worse"] and row["beyond_noise"] is False and not row["regression"]


def test_threshold_alone_without_per_run_values() -> None:
    base = side_from_dict(_report(throughput=500.0, energy=2.0, efficiency=0.8), "b")
    cur = side_from_dict(_report(throughput=485.0, energy=2.3, efficiency=0.7), "c")
    table = compare(base, cur, max_regression=0.05)
    assert not _row(table, "throughput")["regression"]  # -3 %: within the threshold
    assert _row(table, "energy_per_epoch")["regression"]  # +15 %
    assert _row(table, "efficiency")["regression"]  # -12.5 %, no interval
    assert _row(table, "efficiency")["change"] == pytest.approx(0.7 / 0.8 - 1)
    assert not compare(base, cur, max_regression=0.2)["regression"].any()


def test_efficiency_intervals_decide_noise() -> None:
    base = side_from_dict(_report(efficiency=0.8, eff_ci=[0.7, 0.9]), "b")
    overlapping = side_from_dict(_report(efficiency=0.7, eff_ci=[0.6, 0.8]), "c")
    separate = side_from_dict(_report(efficiency=0.5, eff_ci=[0.45, 0.55]), "d")
    assert not _row(compare(base, overlapping), "efficiency")["regression"]
    assert _row(compare(base, separate), "efficiency")["regression"]


def test_formats() -> None:
    base = side_from_dict(_report(10.0, [9.9, 10.1]), "base|x")
    cur = side_from_dict(_report(12.0, [11.9, 12.1]), "cur")
    table = compare(base, cur)
    md = render_comparison(table, base, cur, "markdown", 0.05)
    assert "base\\|x" in md and "| ddp-8 | Epoch time | 10.00 s | 12.00 s | +20.0% |" in md
    assert "**Regression beyond 5% and noise: ddp-8 epoch time (+20.0%)" in md
    plain = render_comparison(table, base, cur, "table", 0.05)
    assert "REGRESSION" in plain and "\x1b" not in plain
    data = json.loads(render_comparison(table, base, cur, "json", 0.05))
    assert data["regressions"] == ["ddp-8 epoch time (+20.0%)"]
    assert {r["metric"] for r in data["comparison"]} == {
        "epoch_time",
        "efficiency",
        "throughput",
        "energy_per_epoch",
    }
    smaller = json.loads(render_comparison(table, base, cur, "benchmark-json", 0.05))
    assert [(b["name"], b["unit"], b["value"]) for b in smaller] == [
        ("ddp-8 epoch time", "s", 12.0),
        ("ddp-8 energy per epoch", "Wh", 2.0),
    ]
    half = 12.7062 * np.std([11.9, 12.1], ddof=1) / math.sqrt(2)  # t(0.975, 1)
    assert smaller[0]["range"] == f"± {half:.4g}"
    bigger = json.loads(render_comparison(table, base, cur, "benchmark-json-bigger", 0.05))
    assert [b["name"] for b in bigger] == ["ddp-8 efficiency", "ddp-8 throughput"]


def test_malformed_reports() -> None:
    with pytest.raises(DataError, match="not a JSON report"):
        side_from_dict({"gpu": []}, "x.json")
    with pytest.raises(DataError, match="malformed"):
        side_from_dict({"epoch_time": [{"strategy": "a"}]}, "x.json")


# ---------------------------------------------------------------- through the command


def _invoke(*args: str) -> Any:
    return cli_runner().invoke(main, list(args))


def _save_base(uri: str, root: Path) -> Path:
    path = root / "base.json"
    if not path.exists():
        result = _invoke(
            "generate-scalability-report", "-e", "base", "--tracking-uri", uri,
            "--format", "json", "-o", str(path), "--no-plots", "-q",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
    return path


def test_saved_report_carries_runs_and_intervals(analysis_store: tuple[str, Path]) -> None:
    uri, root = analysis_store
    data = json.loads(_save_base(uri, root).read_text())
    assert sorted({(r["workers"]) for r in data["runs"]}) == [4, 8, 16, 32]
    assert all(len([r for r in data["runs"] if r["workers"] == w]) == 3 for w in (4, 8, 16, 32))
    for row in data["epoch_time"]:
        mine = [r["avg_epoch_time_s"] for r in data["runs"] if r["workers"] == row["workers"]]
        assert row["avg_epoch_time_s"] == pytest.approx(np.mean(mine))  # equal epoch counts
        low, high = row["speedup_ci"]
        assert low <= row["speedup"] <= high
        assert row["efficiency_ci"] == pytest.approx(
            [low * 4 / row["workers"], high * 4 / row["workers"]]
        )


def test_identical_and_reseeded_runs_are_no_regression(analysis_store: tuple[str, Path]) -> None:
    uri, root = analysis_store
    base = str(_save_base(uri, root))
    same = _invoke("compare", base, base)
    assert same.exit_code == 0, same.output
    assert "No regression beyond 5% and noise." in same.output
    reseeded = _invoke("compare", base, "reseeded", "--tracking-uri", uri, "-q")
    assert reseeded.exit_code == 0, reseeded.output
    assert "REGRESSION" not in reseeded.output


def test_slowed_emulation_is_a_regression(analysis_store: tuple[str, Path]) -> None:
    uri, root = analysis_store
    base = str(_save_base(uri, root))
    result = _invoke("compare", base, "slowed", "--tracking-uri", uri, "-q", "--format", "markdown")
    assert result.exit_code == 4
    assert result.stderr.startswith("Error: regression beyond 5% and noise: ")
    for workers in (8, 16, 32):
        assert f"torch-ddp-{workers} epoch time (+" in result.stderr
    assert "torch-ddp-4 epoch time" not in result.stderr  # one node: no inter-node link
    assert "| torch-ddp-8 | Epoch time |" in result.stdout
    loose = _invoke(
        "compare", base, "slowed", "--tracking-uri", uri, "-q", "--max-regression", "0.8"
    )
    assert loose.exit_code == 0


def test_compare_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    result = _invoke("compare", str(bad), str(bad))
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and "not valid JSON" in result.stderr
    assert "Traceback" not in result.output
    missing = _invoke("compare", str(tmp_path / "nope.json"), str(bad))
    assert missing.exit_code == 1 and "no such report file" in missing.stderr
    usage = _invoke("compare", str(bad), str(bad), "--max-regression", "-1")
    assert usage.exit_code == 2


def test_names_from_the_store_are_escaped() -> None:
    hostile = _report(10.0, [9.9, 10.1])
    for table in ("epoch_time", "throughput", "gpu"):
        hostile[table][0]["strategy"] = "evil\x1b[31m|x"
    for row in hostile["runs"]:
        row["strategy"] = "evil\x1b[31m|x"
    slow = json.loads(json.dumps(hostile))
    slow["epoch_time"][0]["avg_epoch_time_s"] = 20.0
    for row in slow["runs"]:
        row["avg_epoch_time_s"] += 10.0
    a, b = side_from_dict(hostile, "a"), side_from_dict(slow, "b")
    table = compare(a, b)
    plain = render_comparison(table, a, b, "table", 0.05)
    assert "\x1b" not in plain and "evil\\x1b[31m|x-8" in plain
    md = render_comparison(table, a, b, "markdown", 0.05)
    assert "\x1b" not in md and "evil\\\\x1b\\[31m\\|x-8" in md  # the backslash escaped too
