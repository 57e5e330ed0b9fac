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

from itwin_report.analysis.comparison import (
    compare,
    compare_sides,
    gate_error,
    regressions,
    side_from_dict,
)
from itwin_report.cli import main
from itwin_report.render.comparison import render_comparison
from itwin_report.util.errors import DataError, NothingMeasured, RegressionFound, ReportError


def _refuse(name: str) -> None:
    raise AssertionError(f"{name} written: not strict JSON")


def strict_json(text: str) -> Any:
    """``text`` parsed as RFC 8259 JSON: NaN or Infinity fail the test."""
    return json.loads(text, parse_constant=_refuse)


def _report(
    time: float = 10.0,
    runs: list[float] | None = None,
    efficiency: float = 0.8,
    throughput: float = 500.0,
    energy: float = 2.0,
    eff_ci: list[float] | None = None,
) -> dict[str, Any]:
    """A JSON report with one configuration, ddp on 8 workers (3 runs, or those given)."""
    epoch = {"strategy": "ddp", "workers": 8, "avg_epoch_time_s": time, "efficiency": efficiency}
    epoch["efficiency_ci"], epoch["runs"] = eff_ci, len(runs or [0, 0, 0])
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
    result = compare_sides(side, side)
    table = result.table
    assert len(table) == 4
    assert (table["change"] == 0).all()
    assert not table["regression"].any()
    assert regressions(result) == []


def test_slower_epochs_beyond_threshold_and_noise() -> None:
    base = side_from_dict(_report(10.0, [9.9, 10.0, 10.1]), "base")
    slow = side_from_dict(_report(11.0, [10.9, 11.0, 11.1]), "cur")
    result = compare_sides(base, slow)
    row = _row(result.table, "epoch_time")
    assert row["change"] == pytest.approx(0.10)
    assert row["noise_test"] == "welch" and row["beyond_noise"]
    assert result.family_size == 1  # only epoch time has per-run values here
    [found] = regressions(result)
    assert found.startswith("ddp-8 epoch time (+10.0%, welch p=") and found.endswith("<= 0.05)")


def test_a_change_within_noise_is_no_regression() -> None:
    base = side_from_dict(_report(10.0, [7.0, 10.0, 13.0]), "base")
    noisy = side_from_dict(_report(11.0, [8.0, 11.0, 14.0]), "cur")
    row = _row(compare(base, noisy), "epoch_time")
    assert row["worse"] and not row["regression"]
    assert row["beyond_noise"] is not None and not row["beyond_noise"]


def test_threshold_alone_without_per_run_values() -> None:
    base = side_from_dict(_report(throughput=500.0, energy=2.0, efficiency=0.8), "b")
    cur = side_from_dict(_report(throughput=485.0, energy=2.3, efficiency=0.7), "c")
    table = compare(base, cur, max_regression=0.05)
    assert not _row(table, "throughput")["regression"]  # -3 %: within the threshold
    assert _row(table, "energy_per_epoch")["regression"]  # +15 %
    assert _row(table, "epoch_time_efficiency")["regression"]  # -12.5 %, no interval
    assert _row(table, "epoch_time_efficiency")["change"] == pytest.approx(0.7 / 0.8 - 1)
    assert not compare(base, cur, max_regression=0.2)["regression"].any()


def test_efficiency_intervals_decide_noise_without_runs() -> None:
    """Without per-run epoch times the efficiency's own interval (3 runs: t(0.975, 2)) gives
    each side's standard error on the log scale."""
    base = side_from_dict(_report(efficiency=0.8, eff_ci=[0.7, 0.9]), "b")
    near = side_from_dict(_report(efficiency=0.75, eff_ci=[0.65, 0.85]), "c")
    separate = side_from_dict(_report(efficiency=0.5, eff_ci=[0.45, 0.55]), "d")
    row = _row(compare(base, near), "epoch_time_efficiency")
    assert row["noise_test"] == "welch-intervals" and row["worse"] and not row["regression"]
    se = [math.log(hi / lo) / 2 / 4.302652729911275 for lo, hi in ((0.7, 0.9), (0.65, 0.85))]
    t = math.log(0.8 / 0.75) / math.hypot(*se)
    assert 1.4 < t < 1.6 and row["p_value"] > 0.05  # one-sided p of t = 1.5 on ~4 df: 0.1
    assert _row(compare(base, separate), "epoch_time_efficiency")["regression"]


def test_formats() -> None:
    base = side_from_dict(_report(10.0, [9.9, 10.1]), "base|x")
    cur = side_from_dict(_report(12.0, [11.9, 12.1]), "cur")
    result = compare_sides(base, cur)
    md = render_comparison(result, "markdown")
    assert "base\\|x" in md and "| ddp-8 | Epoch time | 10.00 s | 12.00 s | +20.0% |" in md
    assert "| ddp-8 | Efficiency (epoch time) | 80.0 % | 80.0 % | +0.0% |" in md
    assert (
        "**Regression beyond 5% (one-sided Welch t-tests; Holm–Bonferroni over 1 tests holds "
        "the false-alarm rate at 5%): ddp-8 epoch time (+20.0%, welch p=" in md
    )
    plain = render_comparison(result, "table")
    assert "REGRESSION" in plain and "\x1b" not in plain
    data = strict_json(render_comparison(result, "json"))
    assert data["regressions"][0].startswith("ddp-8 epoch time (+20.0%, welch p=")
    assert data["family_size"] == 1 and data["family_alpha"] == 0.05
    assert (
        {r["metric"] for r in data["comparison"]}
        == set(data["metrics"])
        == {
            "epoch_time",
            "epoch_time_efficiency",
            "throughput",
            "energy_per_epoch",
        }
    )
    assert data["metrics"]["epoch_time_efficiency"]["compared"] == "epoch-time efficiency"
    smaller = strict_json(render_comparison(result, "benchmark-json"))
    assert [(b["name"], b["unit"], b["value"]) for b in smaller] == [
        ("ddp-8 epoch time", "s", 12.0),
        ("ddp-8 energy per epoch", "Wh", 2.0),
    ]
    half = 12.7062 * np.std([11.9, 12.1], ddof=1) / math.sqrt(2)  # t(0.975, 1)
    assert smaller[0]["range"] == f"± {half:.4g}"
    bigger = strict_json(render_comparison(result, "benchmark-json-bigger"))
    assert [b["name"] for b in bigger] == ["ddp-8 epoch-time efficiency", "ddp-8 throughput"]


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
        low, high = row["epoch_time_speedup_ci"]
        assert low <= row["epoch_time_speedup"] <= high
        assert row["epoch_time_efficiency_ci"] == pytest.approx(
            [low * 4 / row["workers"], high * 4 / row["workers"]]
        )


def test_identical_and_reseeded_runs_are_no_regression(analysis_store: tuple[str, Path]) -> None:
    uri, root = analysis_store
    base = str(_save_base(uri, root))
    same = _invoke("compare", base, base)
    assert same.exit_code == 0, same.output
    assert (
        "No regression beyond 5% and noise in epoch time, epoch-time efficiency, throughput and "
        "energy per epoch (one-sided Welch t-tests; Holm–Bonferroni over " in same.stdout
    )
    assert "no noise test" not in same.stdout  # three runs a side: every row is tested
    reseeded = _invoke("compare", base, "reseeded", "--tracking-uri", uri, "-q")
    assert reseeded.exit_code == 0, reseeded.output
    assert "REGRESSION" not in reseeded.output


def test_slowed_emulation_is_a_regression(analysis_store: tuple[str, Path]) -> None:
    uri, root = analysis_store
    base = str(_save_base(uri, root))
    result = _invoke("compare", base, "slowed", "--tracking-uri", uri, "-q", "--format", "markdown")
    assert result.exit_code == 4
    assert result.stderr.startswith("Error: regression beyond 5%: ")
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
    result = compare_sides(side_from_dict(hostile, "a"), side_from_dict(slow, "b"))
    plain = render_comparison(result, "table")
    assert "\x1b" not in plain and "evil\\x1b[31m|x-8" in plain
    md = render_comparison(result, "markdown")
    assert "\x1b" not in md and "evil\\\\x1b\\[31m\\|x-8" in md  # the backslash escaped too


# ---------------------------------------------------------------- values out of range


def _two_configs(**epoch_8: Any) -> dict[str, Any]:
    """ddp-4 (20 s) and ddp-8 (10 s, or the given epoch-time fields)."""
    doc = _report(10.0, [9.9, 10.1])
    four = {**doc["epoch_time"][0], "workers": 4, "avg_epoch_time_s": 20.0, "efficiency": 1.0}
    doc["epoch_time"] = [four, {**doc["epoch_time"][0], **epoch_8}]
    return doc


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("avg_epoch_time_s", -5.0, "avg_epoch_time_s -5 (not > 0 and <= 1e+09)"),
        ("avg_epoch_time_s", 1e400, "avg_epoch_time_s inf (not > 0 and <= 1e+09)"),
        ("avg_epoch_time_s", 0.0, "avg_epoch_time_s 0 (not > 0 and <= 1e+09)"),
        ("efficiency", -0.5, "efficiency -0.5 (not > 0 and <= 1e+15)"),
        ("workers", -4, "workers -4 (not 1..1,000,000)"),
        ("workers", 2_000_000, "workers 2000000 (not 1..1,000,000)"),
    ],
)
def test_values_out_of_range_are_left_out_with_one_warning(
    field: str, value: float, shown: str
) -> None:
    base = side_from_dict(_two_configs(), "base.json")
    bad = side_from_dict(_two_configs(**{field: value}), "bad.json")
    assert bad.warnings == [
        f"bad.json: left out 1 value(s) outside their valid range: epoch_time[1] {shown}"
    ]
    result = compare_sides(base, bad, allow_missing=True)
    rows = {(r.workers, r.metric) for r in result.table.itertuples()}
    assert (4, "epoch_time") in rows  # the valid row is still compared
    column = "epoch_time_efficiency" if field == "efficiency" else "epoch_time"
    assert (8, column) not in rows
    text = render_comparison(result, "table")
    assert "Warning: bad.json: left out 1 value(s)" in text
    table_part = text.split("\n\n")[1]  # title, table, verdict and warnings
    assert "-5.00 s" not in table_part and "inf" not in table_part and "ddp--4" not in text
    doc = strict_json(render_comparison(result, "json"))
    assert doc["warnings"] == bad.warnings
    if field == "workers":  # the whole row goes: ddp-8 is missing from the current side
        assert doc["missing"] == ["ddp-8"]


def test_a_ratio_too_large_for_a_float_is_not_compared() -> None:
    tiny = side_from_dict(_two_configs(avg_epoch_time_s=1e-310), "tiny.json")
    base = side_from_dict(_two_configs(), "base.json")
    assert tiny.warnings == []  # 1e-310 s is in the loader's range (> 0) ...
    result = compare_sides(tiny, base)  # ... but 10 / 1e-310 overflows
    assert (8, "epoch_time") not in {(r.workers, r.metric) for r in result.table.itertuples()}
    assert result.warnings == [
        "not compared, the relative change is not a finite number: ddp-8 epoch time (1e-310 -> 10)"
    ]
    doc = strict_json(render_comparison(result, "json"))  # no "change": Infinity
    assert all(math.isfinite(r["change"]) for r in doc["comparison"])
    assert "+inf%" not in render_comparison(result, "table")
    # the other way round the change is finite (-100.0 %) and an improvement
    table = compare(base, tiny)
    back = _row(table[table["workers"] == 8], "epoch_time")
    assert back["change"] == pytest.approx(-1.0) and not back["regression"]


def test_many_bad_values_make_one_line_that_counts_them() -> None:
    doc = _report(10.0)
    doc["epoch_time"] = [
        {"strategy": "ddp", "workers": w, "avg_epoch_time_s": -1.0, "efficiency": 0.5}
        for w in range(1, 8)
    ]
    side = side_from_dict(doc, "x.json")
    assert len(side.warnings) == 1
    assert side.warnings[0].startswith("x.json: left out 7 value(s) outside their valid range: ")
    assert side.warnings[0].endswith("; and 2 more")
    assert "\n" not in side.warnings[0]


def test_older_and_newer_efficiency_keys_are_both_read() -> None:
    old = _report(efficiency=0.8, eff_ci=[0.7, 0.9])
    new = json.loads(json.dumps(old))
    row = new["epoch_time"][0]
    row["epoch_time_efficiency"] = row.pop("efficiency")
    row["epoch_time_efficiency_ci"] = row.pop("efficiency_ci")
    a, b = side_from_dict(old, "old"), side_from_dict(new, "new")
    assert (
        a.values["epoch_time_efficiency"] == b.values["epoch_time_efficiency"] == {("ddp", 8): 0.8}
    )
    assert (
        a.intervals["epoch_time_efficiency"]
        == b.intervals["epoch_time_efficiency"]
        == {("ddp", 8): (0.7, 0.9, 3)}
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"epoch_time": [{"strategy": "ddp", "workers": 1e400, "avg_epoch_time_s": 1}]}',
         "workers inf is not an integer"),
        ('{"epoch_time": [{"strategy": "ddp", "workers": 4.5, "avg_epoch_time_s": 1}]}',
         "workers 4.5 is not an integer"),
        ('{"epoch_time": [{"strategy": "ddp", "workers": true, "avg_epoch_time_s": 1}]}',
         "workers is not a number: True"),
        ('{"epoch_time": [{"strategy": "ddp", "workers": 4, "avg_epoch_time_s": "fast"}]}',
         "avg_epoch_time_s is not a number: 'fast'"),
        ('{"epoch_time": [{"strategy": 7, "workers": 4}]}', "strategy is not text"),
        ('{"epoch_time": [], "runs": {"a": 1}}', "runs is not a list"),
        ('{"epoch_time": [{"strategy": "a", "workers": 4, "efficiency_ci": 3}]}',
         "efficiency_ci is not a pair"),
    ],
)  # fmt: skip
def test_malformed_values_are_errors_naming_the_file(text: str, message: str) -> None:
    with pytest.raises(DataError, match=r"x\.json: malformed JSON report") as info:
        side_from_dict(json.loads(text), "x.json")
    assert message in str(info.value)


def test_max_regression_must_be_finite() -> None:
    side = side_from_dict(_report(), "a")
    for bad in (math.nan, math.inf, -0.1):
        with pytest.raises(ReportError, match="finite number >= 0"):
            compare_sides(side, side, bad)


# ---------------------------------------------------------------- missing configurations


def test_missing_configurations_fail_unless_allowed() -> None:
    base = side_from_dict(_two_configs(), "base")
    only_four = _two_configs()
    only_four["epoch_time"] = only_four["epoch_time"][:1]
    cur = side_from_dict(only_four, "cur")
    strict = compare_sides(base, cur)
    assert strict.missing == [("ddp", 8)]
    error = gate_error(strict)
    assert isinstance(error, RegressionFound) and error.exit_code == 4
    assert str(error) == (
        "the current report lacks 1 configuration(s) of the baseline: ddp-8 "
        "(pass --allow-missing to compare the others)"
    )
    assert "Missing from the current report: ddp-8; this fails the comparison" in (
        render_comparison(strict, "table")
    )
    allowed = compare_sides(base, cur, allow_missing=True)
    assert gate_error(allowed) is None
    text = render_comparison(allowed, "table")
    assert "Missing from the current report (allowed by --allow-missing): ddp-8" in text
    assert strict_json(render_comparison(allowed, "json"))["missing"] == ["ddp-8"]


def test_an_empty_current_report_fails() -> None:
    base = side_from_dict(_two_configs(), "base")
    empty = side_from_dict({"epoch_time": []}, "empty")
    error = gate_error(compare_sides(base, empty))
    assert isinstance(error, RegressionFound) and "2 configuration(s)" in str(error)
    assert "ddp-4, ddp-8" in str(error)
    nothing = gate_error(compare_sides(base, empty, allow_missing=True))
    assert isinstance(nothing, NothingMeasured) and nothing.exit_code == 5
    assert str(nothing).startswith("nothing compared: ")


def test_a_regression_and_a_missing_configuration_are_named_together() -> None:
    base = side_from_dict(_two_configs(), "base")
    slow = _two_configs()
    slow["epoch_time"] = [{**slow["epoch_time"][0], "avg_epoch_time_s": 30.0}]
    error = gate_error(compare_sides(base, side_from_dict(slow, "cur")))
    assert isinstance(error, RegressionFound)
    assert str(error) == (
        "regression beyond 5%: ddp-4 epoch time (+50.0%, threshold alone: one run on a side); "
        "the current report lacks 1 configuration(s) of the baseline: ddp-8 "
        "(pass --allow-missing to compare the others)"
    )


# ---------------------------------------------------------------- the command: files and outputs


def _save(path: Path, doc: Any) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def test_command_missing_and_empty_current(tmp_path: Path) -> None:
    base = _save(tmp_path / "base.json", _two_configs())
    empty = _save(tmp_path / "empty.json", {"epoch_time": []})
    fails = _invoke("compare", base, empty)
    assert fails.exit_code == 4
    assert fails.stderr == (
        "Error: the current report lacks 2 configuration(s) of the baseline: ddp-4, ddp-8 "
        "(pass --allow-missing to compare the others)\n"
    )
    assert "Nothing compared" in fails.stdout
    allowed = _invoke("compare", base, empty, "--allow-missing")
    assert allowed.exit_code == 5
    assert allowed.stderr.startswith("Error: nothing compared: ")
    assert allowed.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"epoch_time": [{"strategy": "a", "workers": 1e400}]}', "workers inf is not an integer"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON (nested too deeply)"),
        ('{"epoch_time": [], "x": "Gr\u00fc\u00dfe"}'.encode("latin-1"),
         "not UTF-8 text (byte 0xfc at offset 27)"),
        (b'{"epoch_time": [], "x": NaN}', "not valid JSON (NaN is not a number JSON allows)"),
        (b"SQLite format 3\x00" + bytes(100), "is an SQLite database, not a saved JSON report"),
    ],
)  # fmt: skip
def test_unreadable_sides_are_one_line_errors(tmp_path: Path, content: bytes, message: str) -> None:
    bad = tmp_path / "side.db"
    bad.write_bytes(content)
    good = _save(tmp_path / "good.json", _two_configs())
    result = _invoke("compare", good, str(bad))
    assert result.exit_code == 1, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("Error: ")
    assert message in result.stderr and "unexpected" not in result.stderr
    assert bad.read_bytes() == content


def test_outputs_never_touch_the_store_or_a_side(
    analysis_store: tuple[str, Path], tmp_path: Path
) -> None:
    uri, root = analysis_store
    base = str(_save_base(uri, root))
    db = Path(uri.removeprefix("sqlite:///"))
    artifacts = root / "artifacts" / "base"
    assert artifacts.is_dir()
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    for target in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), Path(f"{db}-journal"),
                   artifacts / "x.md"):  # fmt: skip
        result = _invoke(
            "compare", base, "reseeded", "--tracking-uri", uri, "-q", "-o", str(target)
        )
        assert result.exit_code == 2, (target, result.output)
        assert result.stderr.count("\n") == 1
        assert "would write into the tracking store" in result.stderr
    side = _invoke("compare", base, base, "-o", base)
    assert side.exit_code == 2
    assert (
        side.stderr
        == f"Error: --output {base} would overwrite the input {base}; choose another path\n"
    )
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert after == before


def test_max_regression_nan_and_inf_are_bad_usage(tmp_path: Path) -> None:
    base = _save(tmp_path / "base.json", _two_configs())
    for value in ("nan", "inf", "-inf", "-1"):
        result = _invoke("compare", base, base, "--max-regression", value)
        assert result.exit_code == 2, (value, result.output)
        assert "is not >= 0 and finite" in result.stderr or "-1" in value


def test_json_output_is_strict_and_names_what_it_compares(tmp_path: Path) -> None:
    base = _save(tmp_path / "base.json", _two_configs())
    odd = _save(tmp_path / "odd.json", _two_configs(avg_epoch_time_s=1e-310, efficiency=1e-310))
    out = tmp_path / "cmp.json"
    result = _invoke("compare", odd, base, "--format", "json", "-o", str(out))
    assert result.exit_code == 0, result.output
    doc = strict_json(out.read_text())
    assert doc["summary"][0].startswith("No regression beyond 5% in epoch time")
    assert {r["metric"] for r in doc["comparison"]} == {
        "epoch_time", "epoch_time_efficiency", "throughput", "energy_per_epoch",
    }  # fmt: skip
    assert [r["workers"] for r in doc["comparison"] if r["metric"] == "epoch_time"] == [4]
    assert len(doc["warnings"]) == 1 and "ddp-8 epoch time (1e-310 -> 10)" in doc["warnings"][0]
