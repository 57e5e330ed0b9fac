"""Per-rank time series: determinism, consistency with the truth, hand-computed rates."""

from __future__ import annotations

import csv
import io
import re

import numpy as np
import pytest

from itwin_report.emulator import model, timeline
from itwin_report.emulator.options import EmulationOptions
from itwin_report.emulator.params import PRESETS, with_overrides
from itwin_report.emulator.truth import expected_truth
from itwin_report.emulator.writer import job_rng

REGEX = re.compile(r"\b(aten|at|c10|autograd)::")


def _job(seed: int = 0, preset: str = "default", overrides=(), ranks=(0, 1, 2)):
    p = with_overrides(PRESETS[preset], list(overrides))
    return p, timeline.build_job(
        p, "torch-ddp", 4, 0, 1_000, job_rng(seed, "torch-ddp", 4, 0), list(ranks)
    )


def _series(job: timeline.Job, rank_index: int, key: str) -> list[tuple[float, int, int]]:
    return [(v, t, s) for k, v, t, s in job.ranks[rank_index].points if k == key]


def test_same_seed_same_data_different_seed_different() -> None:
    _, a = _job(seed=3)
    _, b = _job(seed=3)
    _, c = _job(seed=4)
    for x, y in zip(a.ranks, b.ranks, strict=True):
        assert x.points == y.points
        assert x.profile_csv == y.profile_csv
    assert a.ranks[0].points != c.ranks[0].points
    assert list(a.epoch_times) != list(c.epoch_times)


def test_noise_free_timeline_equals_truth() -> None:
    opts = EmulationOptions(strategies=("torch-ddp",), workers=(4,), overrides=("noise=0",))
    truth = expected_truth(opts)["configurations"][0]
    p, job = _job(overrides=["noise=0"], ranks=(0, 1, 2, 3))
    assert job.epoch_times == pytest.approx(truth["epoch_times_s"], rel=1e-12)
    assert [v for v, _, _ in _series(job, 0, "epoch_time_s")] == pytest.approx(
        truth["epoch_times_s"], rel=1e-12
    )
    watts = [v for r in range(4) for v, _, _ in _series(job, r, "gpu_power_W")]
    assert sum(watts) * p.probing_interval / 3600 == pytest.approx(truth["energy_wh"], rel=1e-12)
    util = [v for v, _, _ in _series(job, 0, "gpu_utilization_percent")]
    assert np.mean(util) == pytest.approx(truth["utilization_pct"], rel=1e-12)
    perf = job.ranks[0].performance
    assert 4 * perf["samples_per_sec"] == pytest.approx(truth["samples_per_sec"], rel=1e-12)
    rows = list(csv.DictReader(io.StringIO(job.ranks[1].profile_csv)))
    body = [r for r in rows if r["name"] != "ProfilerStep*"]
    compute = sum(float(r["self_cuda_time_total"]) for r in body if REGEX.search(r["name"]))
    total = sum(float(r["self_cuda_time_total"]) for r in body)
    assert compute / total == pytest.approx(truth["computation_fraction"], rel=1e-6)


def test_gpu_sample_steps_and_timestamps() -> None:
    p, job = _job(overrides=["noise=0"])
    pts = _series(job, 0, "gpu_power_W")
    total_train = float(sum(job.epoch_times))
    assert len(pts) == int(total_train // p.probing_interval)
    assert [s for _, _, s in pts[:3]] == [1, 2, 3]  # seconds since monitoring started
    # the sample at step 1 is taken setup_s + 1 s after the job's start (1,000 ms)
    assert pts[0][1] == 1_000 + round((p.setup_s + 1) * 1000)
    assert all(p.idle_w <= v <= p.board_w for v, _, _ in pts)


def test_utilization_from_cumulative_busy_time() -> None:
    # segments 1.5 s at 20 %, 2 s at 100 %, 0.5 s at 0 %; 1 s samples:
    # [0,1): 20; [1,2): 0.5*0.2 + 0.5*1 = 0.6 -> 60; [2,3): 100; [3,4): 0.5*1 + 0 = 50
    lay = timeline.Layout(
        durations=np.array([1.5, 2.0, 0.5]),
        busy=np.array([0.2, 1.0, 0.0]),
        epoch_times=np.array([4.0]),
        train_starts=np.array([0.0]),
        step_times=np.array([1.0]),
    )
    assert timeline.utilization(lay, 1.0) == pytest.approx([20.0, 60.0, 100.0, 50.0])


def test_rate_and_global_rate_by_hand() -> None:
    # steps complete at 3..8 s (clock started 2 s before the first step), 10 samples each,
    # logged every 2 steps: points at steps 2, 4, 6, times 4, 6, 8 s, received 20, 40, 60
    # r = 20/4, 20/2, 20/2 = 5, 10, 10; Rate = 5, 0.6*10 + 0.4*5 = 8, 0.6*10 + 0.4*8 = 9.2
    # GlobalRate = 20/4, 40/6, 60/8
    tp = timeline.throughput(np.arange(3.0, 9.0), 10, 2, 0.4)
    assert list(tp.steps) == [2, 4, 6]
    assert tp.rate == pytest.approx([5.0, 8.0, 9.2])
    assert tp.global_rate == pytest.approx([5.0, 40 / 6, 7.5])


def test_checkpoint_backlog_by_hand() -> None:
    # as above with a checkpoint ending at 5.5 s holding 1 step (10 samples): the point at 6 s
    # sees 10 samples, the one at 8 s 30. r = 5, 5, 15; Rate = 5, 5, 0.6*15 + 0.4*5 = 11
    tp = timeline.throughput(np.arange(3.0, 9.0), 10, 2, 0.4, [(4.5, 5.5)], backlog_steps=1)
    assert list(tp.received) == [20.0, 30.0, 60.0]
    assert tp.rate == pytest.approx([5.0, 5.0, 11.0])
    assert tp.global_rate == pytest.approx([5.0, 5.0, 7.5])


def test_spike_after_checkpoint_and_samples_conserved() -> None:
    p, job = _job(overrides=["noise=0"])
    rate = _series(job, 0, "local_samples_per_sec")
    glob = _series(job, 0, "avg_samples_per_sec")
    steps = np.array([s for _, _, s in rate])
    values = np.array([v for v, _, _ in rate])
    per_epoch = model.steps_per_epoch(p.samples_per_epoch, 4, p.batch_size)
    first_ckpt_epoch = p.checkpoint_every - 1
    after = np.nonzero(steps > per_epoch * (first_ckpt_epoch + 1))[0][0]
    steady = values[after - 1]
    assert values[after] < steady  # held outputs
    assert values[after + 1] > 1.15 * steady  # the backlog arrives: a spike
    assert values[after + 3] < values[after + 1]  # that decays
    # conserved: samples over the points add up to steps * batch at the last point
    times = np.array([t for _, t, _ in rate], dtype=float) / 1000
    clock0 = 1.0  # the job (and its clock) started at 1,000 ms
    g = np.array([v for v, _, _ in glob])
    received = g * (times - clock0)
    assert received[-1] == pytest.approx(steps[-1] * p.batch_size, rel=1e-5)  # ms timestamps
    assert received[after] < steps[after] * p.batch_size - 1  # held at the checkpoint
    # without the backlog GlobalRate would be nearly the same: it barely moves
    _, plain = _job(overrides=["noise=0", "backlog_steps=0"])
    g0 = np.array([v for v, _, _ in _series(plain, 0, "avg_samples_per_sec")])
    assert abs(g[after] / g0[after] - 1) < 0.05
    assert g[after + 1] == pytest.approx(g0[after + 1], rel=1e-12)
    r0 = np.array([v for v, _, _ in _series(plain, 0, "local_samples_per_sec")])
    assert values[after + 1] > 1.15 * r0[after + 1]


def test_performance_json_fields_consistent() -> None:
    p, job = _job()
    recs = [r.performance for r in job.ranks]
    for rec in recs:
        assert rec["samples_per_sec"] == pytest.approx(rec["total_samples"] / rec["total_time"])
        assert rec["total_time"] == pytest.approx(p.setup_s + float(sum(job.epoch_times)))
        assert rec["programming_time"] == p.setup_s
    assert len({r["est_samples_per_sec"] for r in recs}) == 1
    # est = N * b / t_compute, DDP compute = 32/250 + 0.004 = 0.132 s -> 4*32/0.132
    assert recs[0]["est_samples_per_sec"] == pytest.approx(4 * 32 / 0.132)
    assert recs[0]["suspected_input_bottleneck"] is False


def test_input_bound_suspected_by_trainer() -> None:
    p = PRESETS["input-bound"]
    rec = timeline.performance_record(p, "torch-ddp", 4, 100.0)
    st = model.step(p, "torch-ddp", 4)
    assert st.loader_wait / st.time > 0.1
    assert rec["suspected_input_bottleneck"] is True


def test_epoch_time_only_on_rank_zero() -> None:
    _, job = _job()
    assert len(_series(job, 0, "epoch_time_s")) == 5
    assert _series(job, 1, "epoch_time_s") == []
