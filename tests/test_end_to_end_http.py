"""End to end over HTTP: emulate into a real ``mlflow server``, report from it with the CLI."""

from __future__ import annotations

import json

import pytest
from conftest import assert_billed_on_epochs_alone, cli_runner

from itwin_report.cli import main
from itwin_report.emulator import EmulationOptions, expected_truth, run_emulation

pytestmark = pytest.mark.server


def test_emulate_and_report_through_a_server(mlflow_server: tuple[str, str], tmp_path) -> None:
    url, backend = mlflow_server
    options = EmulationOptions(
        strategies=("horovod", "torch-ddp"),
        workers=(2, 4),
        epochs=3,
        repeats=1,
        seed=5,
        overrides=("noise=0",),
        experiment_name="e2e-http",
    )
    run_emulation(options, url)  # written through the server's REST API
    truth = {(c["strategy"], c["workers"]): c for c in expected_truth(options)["configurations"]}

    runner = cli_runner()
    args = ["generate-scalability-report", "-e", "e2e-http", "--format", "json", "-q"]
    over_http = runner.invoke(
        main, [*args, "--tracking-uri", url, "--plot-dir", str(tmp_path / "plots")]
    )
    assert over_http.exit_code == 0, over_http.stderr
    doc = json.loads(over_http.stdout)
    assert doc["tracking_uri"] == url
    # artifacts (profiles, performance.json) came through the server's artifact proxy
    assert len(doc["computation"]) == 4 and len(doc["throughput"]) == 4
    assert {r["source"] for r in doc["throughput"]} == {"performance.json"}
    for row in doc["epoch_time"]:
        expected = truth[(row["strategy"], row["workers"])]
        assert row["avg_epoch_time_s"] == pytest.approx(expected["mean_epoch_time_after_warmup_s"])
    for row in doc["gpu"]:
        expected = truth[(row["strategy"], row["workers"])]
        assert row["energy_wh"] == pytest.approx(expected["energy_wh"])
    for row in doc["computation"]:
        expected = truth[(row["strategy"], row["workers"])]
        assert row["computation_fraction"] == pytest.approx(expected["computation_fraction"])
    assert sorted(p.name for p in (tmp_path / "plots").iterdir())[0] == "computation.png"

    # the server's own database read directly gives the same epoch and GPU tables; its
    # artifacts live behind the server (mlflow-artifacts:/), which the report says
    direct = runner.invoke(main, [*args, "--tracking-uri", backend, "--no-plots"])
    assert direct.exit_code == 0, direct.stderr
    same = json.loads(direct.stdout)
    assert same["epoch_time"] == doc["epoch_time"]
    # GPU-hours per run are billed on the job's wall time, performance.json's total_time: an
    # artifact the direct read cannot reach, so it counts the epochs alone (set-up left out)
    assert_billed_on_epochs_alone(same["gpu"], doc["gpu"])
    assert same["computation"] == []
    assert any("artifacts of 12 worker runs are not on this machine" in w for w in same["warnings"])
