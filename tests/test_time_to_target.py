"""Time to target: the target parser, the table's numbers worked out by hand, the warnings, the
formats, the gate and the sentence, through the API and the command on real MLflow stores."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from conftest import cli_runner
from test_report_builders import make_data, metric, run

from itwin_report.cli import main
from itwin_report.options import BadTarget, Target, parse_target
from itwin_report.report import build_report
from itwin_report.util.errors import EXIT_USAGE

T0 = 1_700_000_000_000
# t(0.975) quantiles, from tables: df 2 and 3
T_2, T_3 = 4.302652729911275, 3.182446305284263

# job -> (workers, epoch time, [(val_accuracy, seconds after start, step)], batch_size)
JOBS: dict[str, tuple[int, float, list[tuple[float, float, int]]]] = {
    "a1": (1, 10.0, [(0.5, 100, 1), (0.7, 200, 2), (0.77, 300, 3), (0.8, 400, 4)]),
    "a2": (1, 10.2, [(0.6, 110, 1), (0.75, 220, 2), (0.76, 330, 3), (0.74, 440, 4)]),
    "a3": (1, 9.8, [(0.5, 90, 1), (0.8, 180, 2), (0.9, 270, 3)]),
    # evaluations between epoch boundaries: a step and a time of their own
    "b1": (4, 3.0, [(0.5, 100, 3), (0.77, 150.5, 6)]),
    "b2": (4, 3.1, [(0.5, 100, 3), (0.77, 120, 5)]),
    "b3": (4, 2.9, [(0.5, 60, 3), (0.77, 89.5, 4)]),
    "b4": (4, 3.0, [(0.5, 60, 3), (0.75, 90, 4)]),  # never reaches 0.76
}
TARGET = "val_accuracy>=0.76"
# by hand: the first point >= 0.76 of each run, its time after the run's start
REACHED_1 = [300.0, 330.0, 180.0]  # a1 (0.77), a2 (0.76 counts: >=), a3 (0.8)
REACHED_4 = [150.5, 120.0, 89.5]  # b4 never: 3 of 4


def _data(jobs: dict[str, Any] = JOBS, key: str = "val_accuracy") -> Any:
    runs, points = [], []
    for job, (workers, seconds, evals) in jobs.items():
        rid = f"{job}-r0"
        runs.append(run(rid, job, "torch-ddp", workers) | {"start_time": float(T0)})
        runs[-1]["batch_size"] = 32.0
        points += metric(rid, "epoch_time_s", [seconds] * 3)
        points += [
            {"run_id": rid, "key": key, "step": s, "value": v, "timestamp": T0 + int(t * 1000)}
            for v, t, s in evals
        ]
    return make_data(runs, points)


def _ci(values: list[float], t: float) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean - t * sd / math.sqrt(n), mean + t * sd / math.sqrt(n)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("val_accuracy>=0.76", Target("val_accuracy", ">=", 0.76)),
        (" val_loss <= 0.3 ", Target("val_loss", "<=", 0.3)),
        ("eval/top1>=75", Target("eval/top1", ">=", 75.0)),
    ],
)
def test_target_is_read(text: str, expected: Target) -> None:
    assert parse_target(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("val_accuracy", "has no bound"),
        ("val_accuracy>=", "has no bound"),
        ("val_accuracy>0.7", "unknown operator '>'"),
        ("val_accuracy==0.7", "unknown operator '=='"),
        ("val_accuracy>=nan", "finite"),
        ("val_accuracy>=inf", "finite"),
        ("val_accuracy>=high", "not a number"),
        (">=0.7", "names no metric"),
        ("../x>=1", "not an MLflow metric name"),
    ],
)
def test_bad_target_is_bad_usage(text: str, words: str) -> None:
    with pytest.raises(BadTarget, match=words) as caught:
        parse_target(text)
    assert caught.value.exit_code == EXIT_USAGE


def test_table_numbers_by_hand() -> None:
    report = build_report(_data(), target=TARGET)
    rows = {int(r["workers"]): r for r in report.time_to_target.to_dict("records")}
    one, four = rows[1], rows[4]
    assert (one["runs"], one["runs_reached"]) == (3, 3)
    assert (four["runs"], four["runs_reached"]) == (4, 3)
    assert one["avg_time_to_target_s"] == pytest.approx(270.0)
    assert four["avg_time_to_target_s"] == pytest.approx(120.0)  # b4 left out, not a zero
    low, high = _ci(REACHED_1, T_2)
    assert (one["time_to_target_ci_low"], one["time_to_target_ci_high"]) == pytest.approx(
        (low, high), rel=1e-6
    )
    assert one["epochs_to_target"] == pytest.approx((3 + 3 + 2) / 3)
    assert four["epochs_to_target"] == pytest.approx((6 + 5 + 4) / 3)
    assert (one["global_batch_size"], four["global_batch_size"]) == (32.0, 128.0)
    assert four["speedup"] == pytest.approx(270.0 / 120.0)
    assert four["efficiency"] == pytest.approx(270.0 / 120.0 / 4)
    assert (four["base_strategy"], four["base_workers"]) == ("torch-ddp", 1)
    outcomes = report.time_to_target_runs.set_index("job_id")
    assert not outcomes.loc["b4", "reached"] and math.isnan(outcomes.loc["b4", "time_to_target_s"])


def test_first_point_is_first_in_time_not_in_step_or_row() -> None:
    """The points of a run out of order: the earliest point meeting the target decides."""
    jobs = {"a1": (1, 10.0, [(0.9, 500, 9), (0.8, 250, 2), (0.5, 100, 1), (0.77, 300, 1)])}
    report = build_report(_data(jobs), target=TARGET)
    row = report.time_to_target.iloc[0]
    assert row["avg_time_to_target_s"] == pytest.approx(250.0)
    assert row["epochs_to_target"] == 2.0


def test_lower_is_better_target() -> None:
    jobs = {"a1": (1, 10.0, [(0.9, 100, 1), (0.31, 200, 2), (0.3, 300, 3), (0.1, 400, 4)])}
    report = build_report(_data(jobs, key="val_loss"), target="val_loss<=0.3")
    assert report.time_to_target.iloc[0]["avg_time_to_target_s"] == pytest.approx(300.0)


def test_global_batch_param_wins_over_batch_size() -> None:
    data = _data({"a1": JOBS["a1"]})
    data.runs["global_batch_size"] = 1000.0
    report = build_report(data, target=TARGET)
    assert report.time_to_target.iloc[0]["global_batch_size"] == 1000.0


def test_never_reached_gives_rows_with_zero_reached() -> None:
    report = build_report(_data(), target="val_accuracy>=0.99")
    table = report.time_to_target
    assert list(table["runs"]) == [3, 4] and list(table["runs_reached"]) == [0, 0]
    assert table["avg_time_to_target_s"].isna().all() and table["efficiency"].isna().all()
    assert any("reached val_accuracy>=0.99" in w for w in report.warnings)


def test_metric_nobody_logged_is_a_warning_naming_the_keys() -> None:
    report = build_report(_data(), target="val_top1>=0.5")
    assert report.time_to_target.empty
    (note,) = [w for w in report.warnings if "val_top1" in w]
    assert "epoch_time_s, val_accuracy" in note
    assert note.table == "time_to_target"


def test_base_moves_with_the_report_baseline() -> None:
    """per-strategy: the same base here (the only strategy's smallest count); a strategy
    without a 1-worker run is measured against the single-GPU run of another under auto."""
    jobs = dict(JOBS)
    jobs["c1"] = (2, 5.0, [(0.8, 200, 3)])
    data = _data(jobs)
    data.runs.loc[data.runs["job_id"] == "c1", "strategy"] = "deepspeed"
    report = build_report(data, target=TARGET)
    row = report.time_to_target[report.time_to_target["strategy"] == "deepspeed"].iloc[0]
    assert (row["base_strategy"], row["base_workers"]) == ("torch-ddp", 1)
    assert row["speedup"] == pytest.approx(270.0 / 200.0)
    assert row["efficiency"] == pytest.approx(270.0 / 200.0 / 2)
    own = build_report(data, target=TARGET, baseline="per-strategy").time_to_target
    row = own[own["strategy"] == "deepspeed"].iloc[0]
    assert (row["base_strategy"], row["base_workers"], row["speedup"]) == ("deepspeed", 2, 1.0)


# tight runs: the 8-worker job needs 40 epochs where the 1-worker needs 35
SLOW = {
    **{f"s{i}": (1, 10.0 + d, [(0.8, 350 + 10 * d, 35)]) for i, d in enumerate((0.0, 0.1, -0.1))},
    **{f"f{i}": (8, 1.3 + d, [(0.8, 70 + 10 * d, 40)]) for i, d in enumerate((0.0, 0.1, -0.1))},
}


def test_sentence_names_the_configuration_and_why() -> None:
    from itwin_report.render import render

    data = _data(SLOW)
    data.runs["global_batch_size"] = data.runs["workers"].map({1: 3264.0, 8: 6144.0})
    report = build_report(data, target=TARGET)
    row = report.time_to_target.set_index("workers").loc[8]
    assert row["efficiency"] == pytest.approx(350 / 70 / 8)  # 62.5 % against 96 % per epoch
    text = render(report, "table")
    assert "torch-ddp-8 (62.5 % vs 96.2 % per epoch" in text
    assert "needs 40 epochs where the base needs 35: global batch 6,144 vs 3,264" in text
    # the same runs where time to target scales as well as epochs: no sentence
    even = {**SLOW, **{f"f{i}": (8, 1.3, [(0.8, t, 35)]) for i, t in enumerate((45.5, 46, 45))}}
    assert "Time-to-target efficiency is below" not in render(
        build_report(_data(even), target=TARGET), "table"
    )


def test_gate_on_time_to_target() -> None:
    from itwin_report.util.errors import BadOption

    report = build_report(_data(), target=TARGET, gate=(0.6, "time-to-target"))
    assert report.gate is not None and not report.gate.passed
    assert "torch-ddp-4 (0.56)" in report.gate.line
    passed = build_report(_data(), target=TARGET, gate=(0.5, "time-to-target"))
    assert passed.gate is not None and passed.gate.passed
    with pytest.raises(BadOption, match="needs --target"):
        build_report(_data(), gate=(0.5, "time-to-target"))


# --- the command and the API on real stores -------------------------------------------------


def _write_store(uri: str) -> str:
    """JOBS as itwinai logs them: a top-level run per job, rank 0's worker run logs the
    validation metric; a second rank (of b1) logs a different one, never read."""
    from itwin_report.emulator import mlflow_writer

    w = mlflow_writer.RunWriter(uri)
    exp = w.experiment_id("ttt", mlflow_writer.artifact_location(uri, "ttt"))
    for job, (workers, seconds, evals) in JOBS.items():
        top = w.create_run(exp, f"ddp-{workers}", T0)
        ids = []
        for rank in range(min(workers, 2) if job == "b1" else 1):
            worker = w.create_run(exp, f"worker_{rank}", T0, parent_run_id=top)
            points: list[Any] = [("epoch_time_s", seconds, T0 + e, e) for e in range(3)]
            shift = 0.0 if rank == 0 else -80.0  # rank 1 "reaches" earlier: never read
            points += [("val_accuracy", v, T0 + int((t + shift) * 1000), s) for v, t, s in evals]
            params = {"strategy": "torch-ddp", "global_rank": rank, "global_world_size": workers}
            w.log_batch(worker, points, {**params, "batch_size": 32})
            ids.append(worker)
        for run_id in [*ids, top]:
            w.end_run(run_id, T0 + 600_000)
    return uri


@pytest.fixture(scope="module")
def sqlite_ttt(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _write_store(f"sqlite:///{tmp_path_factory.mktemp('ttt') / 'mlflow.db'}")


@pytest.fixture(scope="module", params=["sqlite", "file"])
def store(request: pytest.FixtureRequest, sqlite_ttt: str, tmp_path_factory: Any) -> str:
    """The store in SQLite (the readers' SQL path) and in a file store (itwinai's default)."""
    if request.param == "sqlite":
        return sqlite_ttt
    return _write_store(str(tmp_path_factory.mktemp("ttt-file") / "mlflow"))


def _cli(uri: str, *args: str) -> Any:
    return cli_runner().invoke(
        main,
        ["generate-scalability-report", "--tracking-uri", uri, "-e", "ttt", "--no-plots", "-q",
         *args],
    )  # fmt: skip


def test_command_json_rows(store: str) -> None:
    result = _cli(store, "--format", "json", "--target", TARGET)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["target"] == {"metric": "val_accuracy", "op": ">=", "value": 0.76, "text": TARGET}
    one, four = out["time_to_target"]
    assert set(four) == {
        *("strategy", "workers", "nodes", "runs", "runs_reached", "avg_time_to_target_s"),
        *("time_to_target_ci", "epochs_to_target", "global_batch_size"),
        *("time_to_target_speedup", "time_to_target_efficiency", "base_strategy"),
        "base_workers",
    }
    assert (four["runs"], four["runs_reached"]) == (4, 3)
    assert one["avg_time_to_target_s"] == pytest.approx(sum(REACHED_1) / 3, rel=1e-9)
    assert four["avg_time_to_target_s"] == pytest.approx(sum(REACHED_4) / 3, rel=1e-9)
    assert four["time_to_target_ci"] == pytest.approx(list(_ci(REACHED_4, T_2)), rel=1e-6)
    assert four["time_to_target_efficiency"] == pytest.approx(270.0 / 120.0 / 4, rel=1e-9)
    assert (four["base_strategy"], four["base_workers"]) == ("torch-ddp", 1)


def test_command_text_csv_markdown(sqlite_ttt: str) -> None:
    store = sqlite_ttt
    text = _cli(store, "--target", TARGET)
    assert text.exit_code == 0, text.output
    assert "Time to target (val_accuracy>=0.76)" in text.stdout
    assert "3 of 4" in text.stdout and "120.00 s" in text.stdout and "56.2 %" in text.stdout
    csv = _cli(store, "--format", "csv", "--target", TARGET).stdout.splitlines()
    rows = [line for line in csv if line.startswith("time_to_target,")]
    assert len(rows) == 2 and ",3,120.0," in rows[1]
    md = _cli(store, "--format", "markdown", "--target", TARGET).stdout
    assert "| torch-ddp | 4 | 3 of 4 | 120.00 s |" in md
    plain = _cli(store).stdout
    assert "Time to target" not in plain


def test_command_unknown_metric_and_bad_target(sqlite_ttt: str) -> None:
    store = sqlite_ttt
    result = _cli(store, "--format", "json", "--target", "val_top5>=0.9")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["time_to_target"] == []
    (text,) = [r["text"] for r in out["warning_records"] if r["table"] == "time_to_target"]
    assert "no worker run logged val_top5" in text and "epoch_time_s, val_accuracy" in text
    bad = _cli(store, "--target", "val_accuracy")
    assert bad.exit_code == EXIT_USAGE
    assert bad.stderr.count("\n") == 1 and "has no bound" in bad.stderr
    assert _cli(store, "--target", "val_accuracy>0.7").exit_code == EXIT_USAGE
    assert _cli(store, "--target", "val_accuracy>=nan").exit_code == EXIT_USAGE


def test_command_never_reached_exits_0(sqlite_ttt: str) -> None:
    store = sqlite_ttt
    result = _cli(store, "--format", "json", "--target", "val_accuracy>=0.999")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["time_to_target"]
    assert [(r["runs"], r["runs_reached"]) for r in rows] == [(3, 0), (4, 0)]


def test_command_gate(sqlite_ttt: str) -> None:
    store = sqlite_ttt
    failed = _cli(store, "--target", TARGET, "--fail-under-efficiency", "0.6", "--gate-on",
                  "time-to-target")  # fmt: skip
    assert failed.exit_code == 3
    assert "time-to-target efficiency below 0.6: torch-ddp-4 (0.56)" in failed.stderr
    assert (
        _cli(store, "--fail-under-efficiency", "0.6", "--gate-on", "time-to-target").exit_code == 2
    )


def test_api_loads_the_metric_it_is_asked_for(store: str) -> None:
    import itwin_report as ir

    data = ir.load(store, "ttt", metrics=["val_accuracy"])
    report = ir.build(data, target=TARGET)
    assert list(report.time_to_target["runs_reached"]) == [3, 3]
    bare = ir.build(ir.load(store, "ttt"), target=TARGET)
    assert bare.time_to_target.empty
    assert any("metrics=['val_accuracy']" in w for w in bare.warnings)
    with pytest.raises(BadTarget):
        ir.build(data, target="val_accuracy=>0.7")


# --- plots ------------------------------------------------------------------------------------


def test_convergence_plot_one_line_per_run_and_the_target() -> None:
    from itwin_report.plots import make_figures

    report = build_report(_data(), target=TARGET)
    figures = make_figures(report)
    fig = figures["convergence"]
    panels = fig.get_axes()
    assert [ax.get_title() for ax in panels] == [
        "torch-ddp-1 (3 of 3 reached)",
        "torch-ddp-4 (3 of 4 reached)",
    ]
    for ax, jobs in zip(panels, (["a1", "a2", "a3"], ["b1", "b2", "b3", "b4"]), strict=True):
        runs = [line for line in ax.get_lines() if line.get_label() != "target"]
        assert len(runs) == len(jobs)
        for line, job in zip(runs, jobs, strict=True):
            _, _, evals = JOBS[job]
            assert list(line.get_xdata()) == pytest.approx([t for _, t, _ in evals])
            assert list(line.get_ydata()) == pytest.approx([v for v, _, _ in evals])
        (target,) = [line for line in ax.get_lines() if line.get_label() == "target"]
        assert list(target.get_ydata()) == [0.76, 0.76]
    speed = figures["time_to_target_speedup"].get_axes()[0]
    lines = {line.get_label(): line for line in speed.get_lines()}
    assert list(lines["torch-ddp: target"].get_ydata()) == pytest.approx([1.0, 270 / 120])
    assert list(lines["torch-ddp: epoch time"].get_ydata()) == pytest.approx([1.0, 10 / 3])
    assert list(lines["ideal (linear)"].get_ydata()) == [1.0, 4.0]
    assert "convergence" not in make_figures(build_report(_data()))


def test_runs_with_only_a_validation_metric_are_reported(tmp_path: Any) -> None:
    """Logs converted from a benchmark: no epoch_time_s, evaluations between epoch boundaries
    (steps 3, 7 of a 1-worker run, 2, 5 of an 8-worker one), a run that never reaches it. The
    base is the strategy's smallest count with a time to target; exit 0."""
    from itwin_report.emulator import mlflow_writer

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    w = mlflow_writer.RunWriter(uri)
    exp = w.experiment_id("bench", mlflow_writer.artifact_location(uri, "bench"))
    runs = [(8, [(0.6, 40.0, 2), (0.8, 95.25, 5)]), (8, [(0.6, 40.0, 2), (0.79, 100.75, 5)])]
    runs += [(1, [(0.5, 300.0, 3), (0.78, 640.5, 7)]), (1, [(0.5, 300.0, 3), (0.7, 700.0, 7)])]
    for workers, evals in runs:
        run = w.create_run(exp, f"sys-{workers}", T0 + 1000)
        points = [("eval_accuracy", v, T0 + 1000 + int(t * 1000), s) for v, t, s in evals]
        params = {"strategy": "mlperf", "global_rank": 0, "global_world_size": workers}
        w.log_batch(run, points, {**params, "global_batch_size": 256 * workers})
        w.end_run(run, T0 + 900_000)
    result = cli_runner().invoke(
        main,
        ["generate-scalability-report", "--tracking-uri", uri, "-e", "bench", "--no-plots", "-q",
         "--format", "json", "--target", "eval_accuracy>=0.75"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    one, eight = json.loads(result.stdout)["time_to_target"]
    assert (one["runs"], one["runs_reached"], eight["runs_reached"]) == (2, 1, 2)
    assert one["avg_time_to_target_s"] == pytest.approx(640.5)
    assert eight["avg_time_to_target_s"] == pytest.approx((95.25 + 100.75) / 2)
    assert eight["epochs_to_target"] == 5.0 and eight["global_batch_size"] == 2048
    assert eight["time_to_target_efficiency"] == pytest.approx(640.5 / 98.0 / 8)
    assert (eight["base_strategy"], eight["base_workers"]) == ("mlperf", 1)
