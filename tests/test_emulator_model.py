"""The noise-free performance model and the calibrated presets."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from itwin_report.emulator import model, profile
from itwin_report.emulator.options import EmulationOptions
from itwin_report.emulator.params import PRESETS, ModelParams, with_overrides
from itwin_report.emulator.truth import expected_truth
from itwin_report.util.errors import ReportError

EXAMPLE = json.loads(
    (
        Path(__file__).resolve().parents[1] / "fixtures" / "itwinai-published-example.json"
    ).read_text()
)
WORKERS = tuple(EXAMPLE["workers"])
PUBLISHED_EPOCH = {name: EXAMPLE[name]["avg_epoch_time_s"] for name in ("mnist", "virgo")}
PUBLISHED_FRACTION = {name: EXAMPLE[name]["computation_pct"] for name in ("mnist", "virgo")}


def test_ring_allreduce_small_case() -> None:
    # G = 100 MB, N = 4, B = 100 GB/s, alpha = 5 us:
    # 2*3/4 * 1e8/1e11 = 1.5e-3 s; 2*3*5e-6 = 3e-5 s; total 1.53e-3 s
    assert model.ring_allreduce_s(100e6, 4, 100e9, 5e-6) == pytest.approx(1.53e-3, rel=1e-12)
    assert model.ring_allreduce_s(100e6, 1, 100e9, 5e-6) == 0.0


def test_steps_per_epoch_and_nodes() -> None:
    assert model.steps_per_epoch(25_000, 4, 32) == 196  # 25000/128 = 195.3 -> 196
    assert model.steps_per_epoch(25_000, 32, 32) == 25  # 25000/1024 = 24.4 -> 25
    assert model.steps_per_epoch(1_000, 10, 100) == 1  # exactly 1
    assert [model.nodes(n, 4) for n in (1, 4, 5, 32)] == [1, 1, 2, 8]


def test_link_switches_to_inter_node() -> None:
    p = ModelParams()
    assert model.link(p, 4) == pytest.approx((150e9, 5e-6))  # one node: NVLink-like
    assert model.link(p, 5) == pytest.approx((200e9 / 8, 12e-6))  # two nodes: 200 Gb/s = 25 GB/s


def _single(loader: float) -> ModelParams:
    return replace(
        ModelParams(),
        gpu_samples_per_sec=250.0,
        batch_size=32,
        optimizer_s=0.004,
        ddp_compute_factor=1.0,
        loader_samples_per_sec_per_node=loader,
        storage_samples_per_sec=1e9,
    )


def test_input_bound_switch() -> None:
    # one GPU: compute = 32/250 + 0.004 = 0.132 s, no communication
    fast = model.step(_single(300.0), "torch-ddp", 1)  # input 32/300 = 0.1067 s
    assert fast.busy == pytest.approx(0.132)
    assert not fast.input_bound
    assert fast.time == pytest.approx(0.132)
    slow = model.step(_single(200.0), "torch-ddp", 1)  # input 32/200 = 0.16 s
    assert slow.input_bound
    assert slow.time == pytest.approx(0.16)
    assert slow.loader_wait == pytest.approx(0.028)


def test_storage_caps_the_whole_job() -> None:
    p = replace(
        ModelParams(), loader_samples_per_sec_per_node=4000.0, storage_samples_per_sec=7000.0
    )
    # 8 GPUs on 2 nodes: node share 4000/4 = 1000, storage 7000/8 = 875 -> 875
    assert model.input_rate(p, 8) == pytest.approx(875.0)
    # 4 GPUs: node share 1000, storage 1750 -> 1000
    assert model.input_rate(p, 4) == pytest.approx(1000.0)


def test_ddp_buckets_and_overlap() -> None:
    p = ModelParams()
    st = model.step(p, "torch-ddp", 8)
    # G = 102 MB, bucket 25 MB -> 5 collectives; 2 nodes: B = 25e9 B/s, alpha = 12 us
    comm = 2 * 7 / 8 * 102e6 / 25e9 + 5 * (2 * 7 * 12e-6 + 30e-6)
    assert st.collectives == 5
    assert st.comm == pytest.approx(comm)
    assert st.hidden == pytest.approx(min(0.8 * comm, st.backward))


def test_horovod_negotiation_and_copies() -> None:
    p = ModelParams()
    st = model.step(p, "horovod", 16)
    # 2 fused buffers (102/64); negotiation 2 * 150 us * log2(16) = 1.2 ms; copies 2*102e6/300e9
    assert st.collectives == 2
    assert st.extra == pytest.approx(2 * 150e-6 * 4 + 2 * 102e6 / 300e9)
    assert st.hidden == 0.0


def test_deepspeed_partitions_optimizer() -> None:
    p = ModelParams()
    assert model.step(p, "deepspeed", 8).optimizer == pytest.approx(p.optimizer_s / 8)
    assert model.step(p, "torch-ddp", 8).optimizer == pytest.approx(p.optimizer_s)


def test_epoch_times_warmup_and_checkpoints() -> None:
    p = ModelParams()  # 5 epochs, warm-up 8 s, checkpoint 4 s after epochs 1 and 3
    t = model.epoch_times(p, "horovod", 4)
    base = t[2]
    assert t[0] == pytest.approx(base + 8.0)
    assert t[1] == pytest.approx(base + 4.0)
    assert t[3] == pytest.approx(base + 4.0)
    assert t[4] == pytest.approx(base)


def test_default_preset_input_bound_only_at_32() -> None:
    truth = expected_truth(EmulationOptions(preset="default"))
    for c in truth["configurations"]:
        assert c["input_bound"] is (c["workers"] == 32), (c["strategy"], c["workers"])
        if c["workers"] == 4:
            assert 30.0 <= c["mean_epoch_time_s"] <= 60.0


def test_input_bound_preset_everywhere() -> None:
    truth = expected_truth(EmulationOptions(preset="input-bound"))
    assert all(c["input_bound"] for c in truth["configurations"])


@pytest.mark.parametrize("name", ["mnist", "virgo"])
def test_presets_match_published_epoch_times(name: str) -> None:
    truth = expected_truth(EmulationOptions(preset=name))
    assert truth["params"]["warmup_s"] == 0.0
    for c in truth["configurations"]:
        published = PUBLISHED_EPOCH[name][c["strategy"]][WORKERS.index(c["workers"])]
        assert c["mean_epoch_time_s"] == pytest.approx(published, rel=0.05)


@pytest.mark.parametrize("name", ["mnist", "virgo"])
def test_presets_follow_published_fraction_trend(name: str) -> None:
    truth = expected_truth(EmulationOptions(preset=name))
    frac = {
        (c["strategy"], c["workers"]): 100 * c["computation_fraction"]
        for c in truth["configurations"]
    }
    for s in ("deepspeed", "horovod", "torch-ddp"):
        series = [frac[(s, n)] for n in WORKERS]
        assert series == sorted(series, reverse=True), (s, series)
        for got, pub in zip(series, PUBLISHED_FRACTION[name][s], strict=True):
            assert got == pytest.approx(pub, rel=0.25)  # "roughly the published magnitudes"
    assert frac[("deepspeed", 4)] > frac[("horovod", 4)] > frac[("torch-ddp", 4)]


def test_profile_rows_regex_and_fraction() -> None:
    regex = re.compile(r"\b(aten|at|c10|autograd)::")
    p = PRESETS["default"]
    for s in ("deepspeed", "horovod", "torch-ddp"):
        rows = profile.rows(p, s, 8)
        for r in rows:
            assert bool(regex.search(r.name)) is r.computation, r.name
        step_row = [r for r in rows if r.name == profile.PROFILER_STEP]
        assert len(step_row) == 1 and step_row[0].self_us > 0
        body = [r for r in rows if r.name != profile.PROFILER_STEP]
        by_regex = sum(r.self_us for r in body if regex.search(r.name)) / sum(
            r.self_us for r in body
        )
        assert profile.fractions(rows)[0] == pytest.approx(by_regex)
    names = {r.name for r in profile.rows(p, "deepspeed", 8)}
    assert {"nccl:reduce_scatter", "nccl:all_gather"} <= names


def test_overrides_and_errors() -> None:
    p = with_overrides(ModelParams(), ["sigma_run=0", "epochs=3", "ddp_overlap=0.5"])
    assert (p.sigma_run, p.epochs, p.ddp_overlap) == (0.0, 3, 0.5)
    for bad in (["nope=1"], ["epochs=x"], ["epochs=1.5"], ["sigma_run"], ["ddp_overlap=2"]):
        with pytest.raises(ReportError):
            with_overrides(ModelParams(), bad)
    with pytest.raises(ReportError, match="unknown preset"):
        EmulationOptions(preset="huge").params()
    with pytest.raises(ReportError, match="unknown strategy"):
        EmulationOptions(strategies=("mpi",)).params()
    with pytest.raises(ReportError, match="between 1 and 4096"):
        EmulationOptions(workers=(0,)).params()


@settings(max_examples=60, deadline=None)
@given(workers=st.integers(1, 256), strategy=st.sampled_from(["deepspeed", "horovod", "torch-ddp"]))
def test_step_time_is_the_slower_of_busy_and_input(workers: int, strategy: str) -> None:
    s = model.step(PRESETS["default"], strategy, workers)
    assert s.time == max(s.busy, s.input)
    assert 0.0 < s.gpu_busy_share <= 1.0
    assert 0.0 <= s.hidden <= s.comm
    assert math.isfinite(model.est_samples_per_sec(PRESETS["default"], strategy, workers))
