"""The communication model of predictions: the ring all-reduce per step against compute per
step, where they cross and its interval, worked out by hand; and, on emulated traces, the model
at its own configuration against the emulator's truth."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import cli_runner

from itwin_report.analysis.comm_model import CommModel, Link
from itwin_report.cli import main
from itwin_report.emulator import EmulationOptions, expected_truth, model, run_emulation
from itwin_report.emulator.params import ModelParams


def _model(**kw: object) -> CommModel:
    base = {
        "strategy": "ddp",
        "base_workers": 8,
        "gradient_bytes": 1e9,
        "collectives": 4.0,
        "compute_s": 1.0,
        "compute_ci": (0.9, 1.1),
        "link": Link(8, 0.0, 10.0, (0.0, 0.0), (8.0, 12.5)),
        "inter_node": True,
        "fixed_global_batch": True,
    }
    return CommModel(**{**base, **kw})  # type: ignore[arg-type]


def test_ring_allreduce_and_crossing_by_hand() -> None:
    m = _model()
    # 2 (n - 1) / n x 1 GB / 10 GB/s: 0.175 s at 8, 0.2 (63/64) at 64
    assert m.comm_s(8) == pytest.approx(2 * 7 / 8 * 0.1)
    assert m.comm_s(64) == pytest.approx(2 * 63 / 64 * 0.1)
    assert m.comm_s(1) == 0.0
    # compute 1 s at 8 workers, 8 / n s at n: 0.2 (n - 1) / n = 8 / n at n = 41
    n, low, high = m.crossing()
    assert n == pytest.approx(41.0, rel=1e-6)
    # sooner with the slow end of beta (8 GB/s) and the fast compute (0.9 s):
    # 0.25 (n - 1) = 7.2 -> n = 29.8; later with 12.5 GB/s and 1.1 s: 0.16 (n - 1) = 8.8 -> 56
    assert low == pytest.approx(29.8, rel=1e-6)
    assert high == pytest.approx(56.0, rel=1e-6)


def test_latency_per_hop_from_the_fit() -> None:
    # a fitted alpha of 70 us per collective at 8 workers: 70 / (2 x 7) = 5 us a hop; at 16
    # workers 4 collectives x 2 x 15 hops x 5 us = 0.6 ms on top of the volume
    m = _model(link=Link(8, 70e-6, 10.0, (60e-6, 80e-6), (8.0, 12.5)))
    assert m.comm_s(16) == pytest.approx(2 * 15 / 16 * 0.1 + 4 * 2 * 15 * 5e-6)


def test_a_fixed_batch_per_worker_keeps_compute_per_step() -> None:
    m = _model(fixed_global_batch=False)
    assert m.compute_at(64) == 1.0
    # the ring's volume tends to 2 S / beta = 0.2 s, never 1 s: no crossing
    n, low, high = m.crossing()
    assert math.isnan(n) and math.isnan(low) and math.isnan(high)
    slow = _model(fixed_global_batch=False, compute_s=0.15, compute_ci=(0.1, 0.2))
    # 0.2 (n - 1) / n = 0.15 at n = 4: below the base, crossed already
    assert slow.crossing()[0] == pytest.approx(4.0, rel=1e-6)


def test_emulated_model_holds_the_truth_at_its_configuration(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = EmulationOptions(
        strategies=("torch-ddp",), workers=(4, 8), repeats=2, traces=str(tmp_path / "traces")
    )
    run_emulation(options, uri)
    args = ["generate-scalability-report", "--tracking-uri", uri, "-q", "--no-plots"]
    args += ["--traces", str(tmp_path / "traces"), "--predict", "16,32", "--format", "json"]
    result = cli_runner().invoke(main, args)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    (m,) = doc["communication_model"]
    truth = expected_truth(options)["configurations"][1]["communication"]
    # from the traces of 8 GPUs on two nodes: the link fit of the inter-node link, the 102 MB
    # gradient in 5 buckets and 2 small all-reduces a step, as the emulator sends them
    assert (m["base_workers"], m["inter_node"], m["link"]) == (8, True, "fit")
    assert truth["link"] == "inter"
    assert m["beta_gbps"] == pytest.approx(truth["link_beta_gbps"], rel=0.02)
    assert m["gradient_bytes_per_step"] == pytest.approx(truth["bytes_per_step"], rel=1e-6)
    assert m["collectives_per_step"] == pytest.approx(truth["collectives_per_step"])
    p = ModelParams()
    assert m["compute_s_per_step"] == pytest.approx(model.step(p, "torch-ddp", 8).compute, rel=0.01)
    at = {r["workers"]: r for r in m["predictions"]}
    # the batch per worker is fixed (itwinai's batch_size): compute per step stays
    assert at[32]["compute_s_per_step"] == pytest.approx(m["compute_s_per_step"])
    # the ring's volume at 32 GPUs with the emulator's own link: 2 x 31/32 x S / 25 GB/s; the
    # model adds its latency, 7 collectives x 2 x 31 hops x the fitted alpha spread over 2 x 7
    volume = 2 * 31 / 32 * truth["bytes_per_step"] / (truth["link_beta_gbps"] * 1e9)
    latency = 7 * 2 * 31 * m["alpha_s"] / (2 * 7)
    assert at[32]["comm_s_per_step"] == pytest.approx(volume + latency, rel=0.02)
    # each prediction row carries the model's numbers at its count
    for row in doc["predictions"]:
        assert row["comm_s_per_step"] == pytest.approx(at[row["workers"]]["comm_s_per_step"])
        assert row["compute_s_per_step"] == pytest.approx(at[row["workers"]]["compute_s_per_step"])
