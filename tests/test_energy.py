"""Energy from the counter or the power samples, GPUs counted once, and the cost columns.

Every store is a real MLflow SQLite store written under tmp_path; every expected number is
worked out by hand in the comments.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import T0, bulk_worker_runs, cli_runner, new_sqlite_store

import itwin_report as ir
from itwin_report.cli import main
from itwin_report.util.errors import ReportError

REPORT = "generate-scalability-report"


def worker(
    name: str,
    strategy: str,
    workers: int,
    rank: int,
    metrics: dict[str, list[float]],
    parent: int | None = None,
    **params: Any,
) -> dict[str, Any]:
    """A worker run: ``metrics`` maps a key to its values at steps 0, 1, 2, ..."""
    points = [
        (key, float(v), T0 + 1000 * step, step)
        for key, values in metrics.items()
        for step, v in enumerate(values)
    ]
    base = {"strategy": strategy, "global_rank": rank, "global_world_size": workers}
    base["probing_interval"] = 1
    return {
        "name": name,
        "start": T0,
        "params": {**base, **params},
        "metrics": points,
        "parent": parent,
    }


def store(template: Path, tmp_path: Path, runs: list[dict[str, Any]]) -> str:
    uri = new_sqlite_store(template, tmp_path / "mlflow.db")
    bulk_worker_runs(uri, "energy", runs)
    return uri


def job(runs: list[dict[str, Any]], name: str, workers: list[dict[str, Any]]) -> None:
    """Append a job: its parent run, then its workers as children."""
    parent = len(runs)
    runs.append({"name": name, "start": T0, "params": {}, "metrics": []})
    for w in workers:
        runs.append({**w, "parent": parent})


def run_report(uri: str, *args: str) -> tuple[int, dict[str, Any], str]:
    result = cli_runner().invoke(
        main, [REPORT, "--tracking-uri", uri, "-q", "--no-plots", "--format", "json", *args]
    )
    doc = json.loads(result.stdout) if result.exit_code == 0 else {}
    return result.exit_code, doc, result.stderr


def gpu_row(doc: dict[str, Any], strategy: str, workers: int) -> dict[str, Any]:
    return next(r for r in doc["gpu"] if (r["strategy"], r["workers"]) == (strategy, workers))


def texts(doc: dict[str, Any]) -> list[str]:
    return [r["text"] for r in doc["warning_records"]]


def test_counter_difference_resets_and_source(sqlite_store_template: Path, tmp_path: Path) -> None:
    runs: list[dict[str, Any]] = []
    # rank 0: counter 1000 -> 3880 J: 2880 J = 0.8 Wh (its 4 power samples of 100 W, 400 J, are
    # not used); rank 1: 500, 860, reset, 100, 460: 360 + 100 + 360 = 820 J.
    # job energy 3700 J = 1.027777... Wh; 2 epochs -> 0.513888... Wh per epoch
    job(
        runs,
        "ctr-2",
        [
            worker(
                "w0",
                "ddp",
                2,
                0,
                {
                    "gpu_energy_J": [1000, 1360, 2080, 3880],
                    "gpu_power_W": [100] * 4,
                    "epoch_time_s": [5, 5],
                },
            ),
            worker("w1", "ddp", 2, 1, {"gpu_energy_J": [500, 860, 100, 460]}),
        ],
    )
    # power only: 2 ranks x 36 samples x 100 W x 1 s = 7200 J = 2 Wh, 4 epochs -> 0.5 Wh/epoch
    job(
        runs,
        "pow-2",
        [
            worker("v0", "fsdp", 2, 0, {"gpu_power_W": [100] * 36, "epoch_time_s": [1] * 4}),
            worker("v1", "fsdp", 2, 1, {"gpu_power_W": [100] * 36}),
        ],
    )
    code, doc, err = run_report(store(sqlite_store_template, tmp_path, runs))
    assert code == 0, err
    counted = gpu_row(doc, "ddp", 2)
    assert counted["energy_wh"] == pytest.approx(3700 / 3600, rel=1e-12)
    assert counted["energy_wh_per_epoch"] == pytest.approx(3700 / 3600 / 2, rel=1e-12)
    assert counted["energy_source"] == "energy counter"
    assert counted["energy_coverage"] == 1.0
    sampled = gpu_row(doc, "fsdp", 2)
    assert (
        sampled["energy_wh"] == pytest.approx(2.0) and sampled["energy_source"] == "power samples"
    )
    assert sampled["energy_wh_per_epoch"] == pytest.approx(0.5)
    warnings = texts(doc)
    assert any("gpu_energy_J went down 1 time in 1 worker run of ctr-2" in w for w in warnings)
    assert any("1 worker run that logged both gpu_energy_J and gpu_power_W" in w for w in warnings)
    kinds = {r["kind"] for r in doc["warning_records"] if r["table"] == "gpu"}
    assert {"reset", "source"} <= kinds


def test_a_gpu_reported_by_several_ranks_counts_once(
    sqlite_store_template: Path, tmp_path: Path
) -> None:
    runs: list[dict[str, Any]] = []
    watts = {0: 100, 1: 300, 2: 100, 3: 100}  # 36 samples of 1 s: 1 Wh per 100 W
    gpu = {0: ("n1", "0"), 1: ("n1", "0"), 2: ("n1", "1"), 3: ("n2", "0")}  # rank 1 = rank 0's
    job(
        runs,
        "host-4",
        [
            worker(
                f"w{r}",
                "ddp",
                4,
                r,
                {"gpu_power_W": [watts[r]] * 36, "epoch_time_s": [1, 1] if r == 0 else []},
                hostname=gpu[r][0],
                gpu_index=gpu[r][1],
            )
            for r in range(4)
        ],
    )
    # 3 distinct GPUs of 4: (1 + 1 + 1) Wh x 4 / 3 = 4 Wh (all four ranks summed would be 6 Wh)
    job(
        runs,
        "uuid-2",
        [
            worker(f"u{r}", "fsdp", 2, r, {"gpu_power_W": [(100, 300)[r]] * 36},
                   gpu_uuid="GPU-1b2c")
            for r in range(2)
        ],
    )  # fmt: skip
    # ranks 0 (100 W) and 1 (300 W) name one UUID: 1 Wh x 2 / 1 = 2 Wh (summed: 4 Wh)
    code, doc, err = run_report(store(sqlite_store_template, tmp_path, runs))
    assert code == 0, err
    row = gpu_row(doc, "ddp", 4)
    assert row["energy_wh"] == pytest.approx(4.0) and row["energy_coverage"] == pytest.approx(0.75)
    assert row["avg_power_w"] == pytest.approx(100.0)  # rank 1's 300 W samples left out
    uuid = gpu_row(doc, "fsdp", 2)
    assert uuid["energy_wh"] == pytest.approx(2.0) and uuid["energy_coverage"] == 0.5
    repeated = [r for r in doc["warning_records"] if r["kind"] == "duplicate"]
    assert len(repeated) == 1 and repeated[0]["table"] == "gpu"
    assert "GPU metrics of 2 worker runs of host-4; uuid-2 left out" in repeated[0]["text"]
    assert "each GPU counts once" in repeated[0]["text"]


def cost_store(template: Path, tmp_path: Path) -> str:
    runs: list[dict[str, Any]] = []
    # 4 ranks on 2 hosts, each 36 samples of 100 W: 4 Wh per run; epochs 10, 20, 20, 20 s
    job(
        runs,
        "cost-4",
        [
            worker(
                f"w{r}",
                "ddp",
                4,
                r,
                {"gpu_power_W": [100] * 36, "epoch_time_s": [10, 20, 20, 20] if r == 0 else []},
                hostname=f"node{r // 2}",
                gpu_index=r % 2,
                samples_per_epoch=2000,
            )
            for r in range(4)
        ],
    )
    return store(template, tmp_path, runs)


def test_cost_columns_by_hand(sqlite_store_template: Path, tmp_path: Path) -> None:
    uri = cost_store(sqlite_store_template, tmp_path)
    args = ["--pue", "1.5", "--carbon-intensity", "400", "--gpu-hour-price", "3"]
    code, doc, err = run_report(uri, *args, "--currency", "EUR")
    assert code == 0, err
    row = gpu_row(doc, "ddp", 4)
    assert row["energy_wh"] == pytest.approx(4.0) and row["energy_wh_per_epoch"] == 1.0
    assert row["gpu_hours_per_epoch"] == pytest.approx(4 * 20 / 3600)  # after 1 warm-up epoch
    assert row["gpu_hours_per_run"] == pytest.approx(4 * 70 / 3600)  # 10 + 20 + 20 + 20 s
    assert row["nodes"] == 2  # node0, node1
    assert row["node_hours_per_epoch"] == pytest.approx(2 * 20 / 3600)
    assert row["energy_wh_per_1k_samples"] == pytest.approx(1000 * 1.0 / 2000)
    assert row["facility_wh_per_epoch"] == pytest.approx(1.5)
    assert row["facility_wh_per_run"] == pytest.approx(6.0)
    assert row["co2e_g_per_epoch"] == pytest.approx(1.5 / 1000 * 400)  # 0.6 g
    assert row["co2e_g_per_run"] == pytest.approx(6.0 / 1000 * 400)  # 2.4 g
    assert row["cost_per_epoch"] == pytest.approx(4 * 20 / 3600 * 3)
    assert row["cost_per_run"] == pytest.approx(4 * 70 / 3600 * 3)
    assert doc["cost_factors"] == {
        "pue": 1.5,
        "carbon_intensity": 400.0,
        "gpu_hour_price": 3.0,
        "currency": "EUR",
        "gpus_per_node": None,
    }
    table = cli_runner().invoke(main, [REPORT, "--tracking-uri", uri, "-q", "--no-plots", *args])
    assert "Cost per epoch (EUR)" not in table.stdout  # no --currency this time
    assert "Cost per epoch" in table.stdout and "CO2e per run" in table.stdout
    assert "Price 3 per GPU-hour." in table.stdout


def test_no_factor_no_figure(sqlite_store_template: Path, tmp_path: Path) -> None:
    uri = cost_store(sqlite_store_template, tmp_path)
    code, doc, err = run_report(uri)
    assert code == 0, err
    row = gpu_row(doc, "ddp", 4)
    for key in ("facility_wh_per_epoch", "co2e_g_per_run", "cost_per_epoch", "cost_per_run"):
        assert row[key] is None
    assert set(doc["cost_factors"].values()) == {None, ""}
    out = cli_runner().invoke(main, [REPORT, "--tracking-uri", uri, "-q", "--no-plots"]).stdout
    assert "Cost per configuration" in out and "GPU-h per epoch" in out
    for word in ("Facility", "CO2e", "Cost per epoch", "Cost factors", "PUE"):
        assert word not in out
    md = (
        cli_runner()
        .invoke(main, [REPORT, "--tracking-uri", uri, "-q", "--no-plots", "--format", "markdown"])
        .stdout
    )
    assert "CO2e" not in md and "GPU-h per run" in md


def test_nodes_from_gpus_per_node_when_hosts_are_not_logged(
    sqlite_store_template: Path, tmp_path: Path
) -> None:
    runs: list[dict[str, Any]] = []
    job(
        runs, "six", [worker("w0", "ddp", 6, 0, {"gpu_power_W": [100] * 4, "epoch_time_s": [9, 9]})]
    )
    uri = store(sqlite_store_template, tmp_path, runs)
    code, doc, _ = run_report(uri)
    assert code == 0 and gpu_row(doc, "ddp", 6)["nodes"] is None  # nothing assumed
    code, doc, _ = run_report(uri, "--gpus-per-node", "4")
    row = gpu_row(doc, "ddp", 6)
    assert row["nodes"] == 2 and row["node_hours_per_epoch"] == pytest.approx(2 * 9 / 3600)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pue", "0.9"], "--pue"),
        (["--pue", "nan"], "--pue"),
        (["--pue", "40"], "--pue"),
        (["--carbon-intensity", "-1"], "--carbon-intensity"),
        (["--carbon-intensity", "1e9"], "--carbon-intensity"),
        (["--gpu-hour-price", "inf"], "--gpu-hour-price"),
        (["--gpu-hour-price", "-2"], "--gpu-hour-price"),
        (["--gpus-per-node", "0"], "--gpus-per-node"),
        (["--max-energy-per-speedup", "0"], "--max-energy-per-speedup"),
        (["--deadline-hours", "-1", "--epochs", "3"], "--deadline-hours"),
        (["--deadline-hours", "nan", "--epochs", "3"], "--deadline-hours"),
        (["--deadline-hours", "2", "--epochs", "0"], "--epochs"),
        (["--deadline-hours", "2"], "--deadline-hours and --epochs go together"),
        (["--currency", "EUR"], "--currency needs --gpu-hour-price"),
        (["--gpu-hour-price", "2", "--currency", "E U R"], "--currency"),
    ],
)
def test_bad_values_are_bad_usage(tmp_path: Path, args: list[str], message: str) -> None:
    missing = f"sqlite:///{tmp_path / 'absent.db'}"  # refused before any store is opened
    result = cli_runner().invoke(main, [REPORT, "--tracking-uri", missing, "-q", *args])
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0]
    assert "Traceback" not in result.stderr and not (tmp_path / "absent.db").exists()


def test_the_api_takes_the_same_options(sqlite_store_template: Path, tmp_path: Path) -> None:
    data = ir.load(cost_store(sqlite_store_template, tmp_path), "energy")
    report = ir.build(data, gpu_hour_price=3.0, currency="CHF", deadline_hours=1, epochs=10)
    assert report.gpu["cost_per_run"].iloc[0] == pytest.approx(4 * 70 / 3600 * 3)
    doc = report.to_dict()
    assert doc["recommendation"]["deadline"]["choice"] == {"strategy": "ddp", "workers": 4}
    with pytest.raises(ReportError) as bad:
        ir.build(data, pue=0.2)
    assert bad.value.exit_code == 2 and "--pue" in str(bad.value)
