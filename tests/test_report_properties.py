"""Property tests of the arithmetic: baseline speedup, efficiency, row order, linear scaling."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_report_builders import make_data, metric, perf, profile, run

from itwin_report.report import build_report
from itwin_report.report.epoch_time import epoch_time_table

WORKERS = [4, 6, 8, 12, 16, 32]
times = st.floats(min_value=0.5, max_value=500, allow_nan=False)


@st.composite
def datasets(draw, max_counts: int = 4, max_runs: int = 2):
    """1-2 strategies, 2-4 worker counts, 1-2 runs each, epochs, power, profiles, perf."""
    runs, metrics, profs, perfs = [], [], [], []
    for strategy in draw(
        st.lists(st.sampled_from(["ddp", "ds"]), min_size=1, max_size=2, unique=True)
    ):
        counts = draw(
            st.lists(st.sampled_from(WORKERS), min_size=2, max_size=max_counts, unique=True)
        )
        for w in counts:
            for r in range(draw(st.integers(1, max_runs))):
                job = f"{strategy}-{w}-{r}"
                runs.append(run(job, job, strategy, w, samples_per_epoch=1000))
                metrics += metric(
                    job, "epoch_time_s", draw(st.lists(times, min_size=2, max_size=4))
                )
                metrics += metric(job, "gpu_power_W", draw(st.lists(times, min_size=1, max_size=4)))
                profs += profile(job, [("aten::mm", draw(times)), ("nccl", draw(times))])
                perfs.append(perf(job, draw(times) * 100, draw(times), est=1000.0, records=w))
    return make_data(runs, metrics, profs, perfs)


@settings(max_examples=12, deadline=None)
@given(datasets())
def test_speedup_one_at_base_and_efficiency_formula(data) -> None:
    """Every row names its base; the base row's speedup is 1; efficiency = speedup x base
    workers / workers; without a 1-GPU run the base is the strategy's smallest count."""
    report = build_report(data)
    for table in (report.epoch_time, report.throughput):
        for strategy, group in table.groupby("strategy"):
            known = group[group["speedup"].notna()]
            if known.empty:
                continue
            (base_strategy,) = set(known["base_strategy"])
            (base_workers,) = set(known["base_workers"])
            if 1 not in set(table["workers"]):
                assert (base_strategy, base_workers) == (strategy, known["workers"].min())
            if base_strategy == strategy:
                base_row = known[known["workers"] == base_workers]
                assert base_row["speedup"].iloc[0] == 1.0
            expected = known["speedup"] * base_workers / known["workers"]
            assert list(known["efficiency"]) == pytest.approx(list(expected))


# small data sets (row order is what varies) and few examples: two reports per example
@settings(max_examples=8, deadline=None)
@given(datasets(max_counts=3, max_runs=2), st.randoms(use_true_random=False))
def test_shuffling_rows_never_changes_a_table(data, rnd) -> None:
    def shuffled(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.sample(frac=1, random_state=rnd.randint(0, 10_000))

    other = type(data)(
        data.experiment,
        data.tracking_uri,
        shuffled(data.runs),
        shuffled(data.metrics),
        shuffled(data.profiles),
        shuffled(data.performance),
    )
    a, b = build_report(data), build_report(other)
    for name in ("epoch_time", "gpu", "computation", "throughput"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))
    assert sorted(a.warnings) == sorted(b.warnings)


@settings(max_examples=25, deadline=None)
@given(
    st.floats(min_value=1, max_value=1e4),
    st.lists(st.sampled_from(WORKERS), min_size=2, unique=True),
)
def test_linear_cluster_has_efficiency_one(c, counts) -> None:
    # epoch time = c / workers for every epoch -> speedup = workers/base, efficiency = 1
    runs = [run(f"r{w}", f"j{w}", "ddp", w) for w in counts]
    metrics = [p for w in counts for p in metric(f"r{w}", "epoch_time_s", [c / w] * 3)]
    table, _, _ = epoch_time_table(make_data(runs, metrics))
    assert list(table["efficiency"]) == pytest.approx([1.0] * len(counts))
    assert list(table["speedup"]) == pytest.approx([w / min(counts) for w in sorted(counts)])


@settings(max_examples=25, deadline=None)
@given(
    st.floats(min_value=1, max_value=1e4),
    st.lists(st.sampled_from(WORKERS), min_size=1, unique=True),
    st.lists(st.sampled_from(WORKERS), min_size=1, unique=True),
)
def test_linear_cluster_against_one_gpu(c, ddp, ds) -> None:
    # a 1-worker run takes c; every strategy scales linearly -> speedup = workers, efficiency 1
    runs = [run("one", "one", "non-distributed", 1)]
    runs += [
        run(f"{s}{w}", f"{s}{w}", s, w) for s, counts in (("ddp", ddp), ("ds", ds)) for w in counts
    ]
    metrics = [p for r in runs for p in metric(r["run_id"], "epoch_time_s", [c / r["workers"]] * 3)]
    table, _, used = epoch_time_table(make_data(runs, metrics))
    assert used.reference == ("non-distributed", 1)
    assert list(table["speedup"]) == pytest.approx([float(w) for w in table["workers"]])
    assert list(table["efficiency"]) == pytest.approx([1.0] * len(table))
