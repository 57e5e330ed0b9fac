"""One truth per report, on the stores most users have: itwinai's defaults and plain runs.

Every expected number is worked out here from the emulator's noise-free truth file or by hand,
never with the report's own functions.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_runner

from itwin_report.cli import main

REPORT = "generate-scalability-report"
BASE = ("non-distributed", 1)
NOISE_FREE = ["--set", "noise=0", "--set", "sigma_run=0"]


def _emulate(uri: str, exp: str, truth: Path, *extra: str) -> dict[tuple[str, int], Any]:
    args = ["emulate", "--tracking-uri", uri, "--experiment-name", exp, "--truth", str(truth)]
    result = cli_runner().invoke(main, [*args, *extra])
    assert result.exit_code == 0, result.output
    configs = json.loads(truth.read_text())["configurations"]
    return {(c["strategy"], c["workers"]): c for c in configs}


def _report(uri: str, exp: str, *extra: str) -> dict[str, Any]:
    args = [REPORT, "-e", exp, "--tracking-uri", uri, "-q", "--no-plots", "--format", "json"]
    result = cli_runner().invoke(main, [*args, *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def itwinai_default(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict, dict]:
    """itwinai's defaults: a 1-GPU non-distributed run, GPU metrics on rank 0 only."""
    d = tmp_path_factory.mktemp("itwinai-default")
    uri = f"sqlite:///{d}/mlflow.db"
    truth = _emulate(
        uri,
        "itw",
        d / "truth.json",
        *("--itwinai-only", "--log-on-workers", "0", "--strategies", "torch-ddp,deepspeed"),
        *("--workers", "1,2,4,8", "--epochs", "3", *NOISE_FREE),
    )
    report = _report(uri, "itw", "--predict", "16", "--warmup-epochs", "1")
    return uri, truth, report


def _t(truth: dict, config: tuple[str, int]) -> float:
    return float(truth[config]["mean_epoch_time_after_warmup_s"])


def test_every_speedup_of_a_configuration_is_the_same_number(itwinai_default: Any) -> None:
    _, truth, report = itwinai_default
    t_base = _t(truth, BASE)
    distributed = [c for c in truth if c != BASE]
    rows = {(r["strategy"], r["workers"]): r for r in report["epoch_time"]}
    thr = {(r["strategy"], r["workers"]): r for r in report["throughput"]}
    for config in distributed:
        speedup = t_base / _t(truth, config)  # by hand from the truth file
        row = rows[config]
        assert (row["base_strategy"], row["base_workers"]) == BASE
        assert row["epoch_time_speedup"] == pytest.approx(speedup, rel=1e-6)
        assert row["epoch_time_efficiency"] == pytest.approx(speedup / config[1], rel=1e-6)
        # two runs each: the interval exists (the 1-GPU base's runs take part) and holds it
        low, high = row["epoch_time_speedup_ci"]
        assert low <= row["epoch_time_speedup"] <= high
        assert (thr[config]["base_strategy"], thr[config]["base_workers"]) == BASE
    # the models use the 1-GPU point: 1, 2, 4 and 8 workers
    for model in report["scaling_models"]:
        assert model["points"] == 4
        assert (model["base_strategy"], model["base_workers"]) == BASE
    # Karp–Flatt against the same base: e = (1/S - 1/n) / (1 - 1/n), n = workers
    for kf in report["karp_flatt"]:
        config = (kf["strategy"], kf["workers"])
        s, n = t_base / _t(truth, config), kf["workers"]
        assert kf["karp_flatt"] == pytest.approx((1 / s - 1 / n) / (1 - 1 / n), rel=1e-6)
        assert (kf["base_strategy"], kf["base_workers"]) == BASE
    # predictions: speedup against the same 1-GPU time
    assert {p["strategy"] for p in report["predictions"]} == {"torch-ddp", "deepspeed"}
    for p in report["predictions"]:
        assert (p["base_strategy"], p["base_workers"]) == BASE
        if p["avg_epoch_time_s"] is not None:
            assert p["speedup"] == pytest.approx(t_base / p["avg_epoch_time_s"], rel=1e-9)
            assert p["efficiency"] == pytest.approx(p["speedup"] / 16, rel=1e-9)
        else:
            assert p["note"].startswith("no scaling model: ")


def test_rank_zero_energy_is_scaled_to_the_job_and_marked(itwinai_default: Any) -> None:
    uri, truth, report = itwinai_default
    for row in report["gpu"]:
        config = (row["strategy"], row["workers"])
        assert row["energy_coverage"] == pytest.approx(1 / row["workers"])
        # the truth file holds the energy of the GPUs that logged (rank 0's); the job has
        # ``workers`` GPUs running the same timeline
        job = truth[config]["energy_wh"] * row["workers"]
        assert row["energy_wh"] == pytest.approx(job, rel=0.05)
    text = cli_runner().invoke(main, [REPORT, "-e", "itw", "--tracking-uri", uri, "--no-plots"])
    gpu_part = text.stdout.split("GPU energy and utilization")[1].split("Computation")[0]
    lines = gpu_part.splitlines()
    ddp8 = next(x for x in lines if x.startswith("torch-ddp") and " 8 " in x)
    assert ddp8.count("~") == 2  # energy per run and per epoch are estimates, marked
    one = next(x for x in lines if x.startswith("non-distributed"))
    assert "~" not in one


def _flat_store(tmp_path: Path, epochs: dict[int, list[float]], status: str = "FINISHED") -> str:
    """Plain MLflow runs: params backend and world_size, no rank param, one epoch_time_s."""
    from mlflow.entities import Metric, Param, RunStatus
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/flat.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("flat")
    for workers, times in epochs.items():
        run = client.create_run(exp, run_name=f"nccl-{workers}")
        rid = run.info.run_id
        metrics = [Metric("epoch_time_s", t, 1_700_000_000_000 + i, i) for i, t in enumerate(times)]
        params = [Param("backend", "nccl"), Param("world_size", str(workers))]
        client.log_batch(rid, metrics=metrics, params=params)
        client.set_terminated(rid, status=RunStatus.to_string(RunStatus.from_string(status)))
    return uri


def test_flat_runs_without_a_rank_param(tmp_path: Path) -> None:
    uri = _flat_store(tmp_path, {2: [10.0, 8.0, 8.0], 4: [10.0, 5.0, 5.0]})
    report = _report(uri, "flat", "--strategy-param", "backend", "--workers-param", "world_size")
    rows = {r["workers"]: r for r in report["epoch_time"]}
    # warm-up 1: means 8 s and 5 s; speedup 8/5 = 1.6 against 2 workers; efficiency 1.6*2/4
    assert rows[2]["avg_epoch_time_s"] == pytest.approx(8.0)
    assert rows[4]["avg_epoch_time_s"] == pytest.approx(5.0)
    assert rows[4]["epoch_time_speedup"] == pytest.approx(1.6)
    assert rows[4]["epoch_time_efficiency"] == pytest.approx(0.8)
    assert (rows[4]["base_strategy"], rows[4]["base_workers"]) == ("nccl", 2)


@pytest.mark.parametrize(
    ("case", "epochs", "status", "extra"),
    [
        ("all-warm-up", {2: [10.0], 4: [6.0]}, "FINISHED", []),
        ("all-failed", {2: [10.0, 8.0], 4: [6.0, 5.0]}, "FAILED", []),
        ("gate-on-nothing", {2: [10.0], 4: [6.0]}, "FINISHED", ["--fail-under-efficiency", "0.9"]),
    ],
)
def test_nothing_measured_is_exit_5(
    tmp_path: Path, case: str, epochs: dict, status: str, extra: list[str]
) -> None:
    uri = _flat_store(tmp_path, epochs, status)
    args = [REPORT, "-e", "flat", "--tracking-uri", uri, "-q", "--no-plots"]
    args += ["--strategy-param", "backend", "--workers-param", "world_size", *extra]
    result = cli_runner().invoke(main, args)
    lines = result.stderr.strip().splitlines()
    assert (result.exit_code, len(lines)) in {(5, 1), (1, 1)}, (case, result.stderr)
    assert "unexpected" not in result.stderr and result.stdout == ""
    assert result.exit_code == 5 and "nothing to report" in lines[0]
    why = {
        "all-warm-up": "is within the 1 warm-up epoch(s)",
        "all-failed": "skipped 2 unfinished runs",
        "gate-on-nothing": "is within the 1 warm-up epoch(s)",
    }[case]
    assert why in lines[0]


def test_gate_fails_on_what_it_cannot_check_and_names_the_efficiency(tmp_path: Path) -> None:
    # nccl: 2 and 4 workers (eff 0.8); gloo: one configuration only, no throughput
    uri = _flat_store(tmp_path, {2: [10.0, 8.0, 8.0], 4: [10.0, 5.0, 5.0]})
    base = [REPORT, "-e", "flat", "--tracking-uri", uri, "-q", "--no-plots"]
    base += ["--strategy-param", "backend", "--workers-param", "world_size"]
    ok = cli_runner().invoke(main, [*base, "--fail-under-efficiency", "0.75", "--format", "json"])
    assert ok.exit_code == 0, ok.stderr
    gate = json.loads(ok.stdout)["gate"]
    assert gate["passed"] and gate["on"] == "epoch-time" and "epoch-time efficiency" in gate["text"]
    bad = cli_runner().invoke(
        main, [*base, "--fail-under-efficiency", "0.85", "--format", "markdown"]
    )
    assert bad.exit_code == 3
    assert "Gate failed: epoch-time efficiency below 0.85: nccl-4 (0.80)" in bad.stdout
    assert bad.stderr.strip().splitlines() == [
        "Error: Gate failed: epoch-time efficiency below 0.85: nccl-4 (0.80)."
    ]
    # no samples per epoch: no throughput efficiency to check, so the throughput gate fails
    thr = cli_runner().invoke(
        main, [*base, "--fail-under-efficiency", "0.1", "--gate-on", "throughput"]
    )
    assert thr.exit_code == 3 and "no end-to-end throughput efficiency to check" in thr.stderr
    pct = cli_runner().invoke(main, [*base, "--fail-under-efficiency", "70"])
    assert pct.exit_code == 2 and "did you mean 0.70?" in pct.stderr


@pytest.mark.parametrize("preset", ["default", "input-bound"])
def test_weak_scaling_verdicts_agree_with_the_truth(tmp_path: Path, preset: str) -> None:
    uri = f"sqlite:///{tmp_path}/weak.db"
    truth = _emulate(
        uri,
        "weak",
        tmp_path / "truth.json",
        *("--scaling", "weak", "--preset", preset, "--strategies", "torch-ddp", "--repeats", "1"),
    )
    report = _report(uri, "weak")
    got = {(r["strategy"], r["workers"]): r["input_bound"] for r in report["throughput"]}
    assert got == {c: bool(v["input_bound"]) for c, v in truth.items()}
    assert any(got.values())  # the 32-GPU job is input-bound in both presets


def test_predictions_are_capped_by_a_measured_input_ceiling(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/ib.db"
    truth = _emulate(
        uri, "ib", tmp_path / "truth.json", "--strategies", "torch-ddp", "--repeats", "2"
    )
    bound = sorted(w for (_, w), c in truth.items() if c["input_bound"])
    assert bound, "the default preset is input-bound at its largest count"
    report = _report(uri, "ib", "--predict", "64,128")
    floor = min(_t(truth, ("torch-ddp", w)) for w in bound)
    for p in report["predictions"]:
        assert p["avg_epoch_time_s"] is not None, p["note"]
        assert p["note"].startswith("capped by the input pipeline: input-bound from ")
        # never below the measured floor, and the truth at 64 and 128 is that floor
        assert p["avg_epoch_time_s"] == pytest.approx(floor, rel=0.05)
        assert not math.isnan(p["speedup"])


def test_the_prediction_plot_shows_the_ceiling(tmp_path: Path) -> None:
    """Measured input-bound points are drawn hollow; the fitted curve never dips below the
    measured floor the predictions are capped at."""
    import matplotlib.pyplot as plt

    import itwin_report as ir

    uri = f"sqlite:///{tmp_path}/ib.db"
    truth = _emulate(uri, "ib", tmp_path / "t.json", "--strategies", "deepspeed", *NOISE_FREE)
    report = ir.build(ir.load(uri, "ib"), predict=[64, 128])
    bound = [w for (_, w), c in truth.items() if c["input_bound"]]
    floor = min(_t(truth, ("deepspeed", w)) for w in bound)
    fig = report.figures()["prediction"]
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    hollow = lines["deepspeed measured, input-bound (not fitted)"]
    assert list(hollow.get_xdata()) == sorted(bound) and hollow.get_markerfacecolor() == "none"
    fitted = next(line for name, line in lines.items() if name.endswith("fit"))
    assert min(fitted.get_ydata()) >= floor * (1 - 1e-9)
    plt.close("all")
