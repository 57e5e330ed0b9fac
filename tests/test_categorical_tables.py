"""Tables over categorical ``run_id``/``key``/``job_id``/``strategy``: no row, group or warning
for a category that holds no point.

Pandas before 3.0 groups a categorical by every category: a grouping that forgets
``observed=True`` gives NaN rows for runs, jobs and configurations that have no point of a key.
Here validation drops a whole key and a whole run, and most runs lack the GPU keys, so every
per-key slice carries categories with no point.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from test_report_builders import make_data, metric, run

from itwin_report.data.frames import as_text, categorical, join_runs, last_of_each, sort_rows
from itwin_report.data.validate import validate
from itwin_report.report import build_report
from itwin_report.report.common import points
from itwin_report.report.epoch_time import run_means_table

E, P, U, J = "epoch_time_s", "gpu_power_W", "gpu_utilization_percent", "gpu_energy_J"


def _data() -> object:
    runs = [run(f"a{r}", "A", "ddp", 4, rank=r) for r in range(4)]
    runs += [run(f"a{4 + r}", "A2", "ddp", 4, rank=r) for r in range(4)]
    runs += [run("b0", "B", "ddp", 2), run("b1", "B", "ddp", 2, rank=1)]
    runs += [run("c0", "C", "deepspeed", 2), run("c1", "C", "deepspeed", 2, rank=1)]
    runs += [run(f"d{r}", "D", "deepspeed", 3, rank=r) for r in range(3)]
    runs += [run("x0", "X", "ddp", 0)]  # world size 0: validation drops the run
    points_ = metric("a0", E, [10, 8, 8, 8]) + metric("a4", E, [10, 9, 9, 9])
    points_ += metric("b0", E, [6, 5, 5]) + metric("c0", E, [7, 6, 6]) + metric("x0", E, [1, 1])
    for r in range(4):  # only job A logs power; its rank 3 lags in utilization
        points_ += metric(f"a{r}", P, [100] * 36)
        points_ += metric(f"a{r}", U, [50, 50] if r == 3 else [90, 90])
    for r in range(3):  # job A2: utilization of ranks 0-2 only (rank 3 has no mean, not NaN)
        points_ += metric(f"a{4 + r}", U, [90, 90])
    # job D: two of its three ranks log utilization: too few to compare, none is named
    points_ += metric("d0", U, [90, 90]) + metric("d1", U, [50, 50])
    points_ += metric("c0", J, [-5, -6])  # all invalid: the key goes
    points_ += metric("ghost", E, [3, 3])  # a run the runs frame does not hold
    return make_data(runs, points_)


@pytest.fixture(scope="module")
def data() -> object:
    return validate(_data())  # type: ignore[arg-type]


def test_validation_leaves_no_category_without_a_point(data: object) -> None:
    metrics = data.metrics  # type: ignore[attr-defined]
    assert "ghost" not in metrics["run_id"].cat.categories
    assert "x0" not in metrics["run_id"].cat.categories
    assert J not in metrics["key"].cat.categories
    assert list(metrics["key"].cat.categories) == [E, P, U]
    for column in ("run_id", "key"):
        assert np.bincount(metrics[column].cat.codes).all()


def test_per_key_slices_carry_categories_without_points(data: object) -> None:
    """The premise of the tests below: groupings over these slices meet empty categories."""
    power = points(data, P)  # type: ignore[arg-type]
    assert set(power["run_id"].astype(str)) == {"a0", "a1", "a2", "a3"}
    assert len(power["run_id"].cat.categories) > 4
    assert set(power["job_id"].cat.categories) > {"A"}
    assert set(power["strategy"].cat.categories) == {"ddp", "deepspeed"}


def test_tables_have_rows_only_for_what_has_points(data: object) -> None:
    report = build_report(data, warmup_epochs=1)  # type: ignore[arg-type]
    epoch = report.epoch_time.set_index(["strategy", "workers"])
    assert sorted(epoch.index) == [("ddp", 2), ("ddp", 4), ("deepspeed", 2)]
    assert epoch.loc[("ddp", 4), "runs"] == 2
    assert epoch.loc[("ddp", 4), "epochs"] == 6
    assert epoch.loc[("ddp", 4), "avg_epoch_time_s"] == pytest.approx(8.5)
    assert epoch.loc[("ddp", 4), "std_epoch_time_s"] == pytest.approx(math.sqrt(0.5))
    assert epoch.loc[("deepspeed", 2), "avg_epoch_time_s"] == pytest.approx(6.0)
    assert not epoch["avg_epoch_time_s"].isna().any()

    gpu = report.gpu
    assert list(zip(gpu["strategy"], gpu["workers"], strict=True)) == [
        ("ddp", 4),
        ("deepspeed", 3),
    ]
    assert gpu["utilization_pct"].iloc[1] == pytest.approx(70.0)
    row = gpu.iloc[0]
    assert row["runs"] == 2  # A (power, utilization), A2 (utilization)
    assert row["energy_wh"] == pytest.approx(4.0)  # 4 ranks x 36 s x 100 W, job A only
    assert row["avg_power_w"] == pytest.approx(100.0)
    assert row["utilization_pct"] == pytest.approx((6 * 90 + 2 * 50 + 6 * 90) / 14)
    assert not any("probing_interval" in str(w) for w in report.warnings)

    slow = report.stragglers
    assert len(slow) == 1
    assert (slow["job_id"].iloc[0], list(slow["ranks"].iloc[0])) == ("A", [3])
    for table in (report.epoch_time, report.gpu, report.throughput, report.time_breakdown):
        for column in table.columns:
            assert not isinstance(table[column].dtype, pd.CategoricalDtype), column
        assert not table[["strategy", "workers"]].isna().any().any()
    breakdown = report.time_breakdown.set_index(["strategy", "workers"])
    assert breakdown.loc[("ddp", 4), "epochs_s"] == pytest.approx((34 + 37) / 2)


def test_run_means_have_one_text_row_per_job(data: object) -> None:
    means = run_means_table(data, 1)  # type: ignore[arg-type]
    assert list(means["job_id"]) == ["B", "A", "A2", "C"]
    assert means["job_id"].dtype == means["strategy"].dtype
    assert not isinstance(means["job_id"].dtype, pd.CategoricalDtype)
    assert means["avg_epoch_time_s"].tolist() == pytest.approx([5.0, 8.0, 9.0, 6.0])


def test_codes_sort_and_join_as_the_strings_do() -> None:
    rng = np.random.default_rng(3)
    names = np.array(["run-b", "run-a", "run-c", "run-d"], dtype=object)
    text = pd.DataFrame(
        {
            "run_id": names[rng.integers(0, 3, 200)],
            "key": np.array(["k2", "k1"], dtype=object)[rng.integers(0, 2, 200)],
            "step": rng.integers(0, 4, 200),
        }
    )
    # categories unsorted and one ("run-d", "zz") unused: sorting and joining see the values
    coded = text.assign(
        run_id=pd.Categorical(text["run_id"], categories=["run-c", "zz", "run-a", "run-b"]),
        key=pd.Categorical(text["key"], categories=["k2", "k1"]),
    )
    columns = ["run_id", "key", "step"]
    mine = as_text(sort_rows(coded, columns)).astype({"run_id": object, "key": object})
    theirs = text.sort_values(columns, kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, theirs, check_dtype=False)
    assert (
        last_of_each(sort_rows(coded, columns), columns).tolist()
        == theirs.duplicated(columns, keep="last").tolist()
    )
    runs = pd.DataFrame({"run_id": ["run-a", "run-b"], "job_id": ["j1", "j2"]})
    runs = runs.assign(job_id=categorical(runs["job_id"]))
    joined = join_runs(coded, runs, ["run_id", "job_id"])
    assert isinstance(joined["job_id"].dtype, pd.CategoricalDtype)
    expected = text[text["run_id"] != "run-c"]["run_id"].map({"run-a": "j1", "run-b": "j2"})
    assert joined["job_id"].astype(str).tolist() == expected.tolist()
    assert joined["run_id"].astype(str).tolist() == text["run_id"][expected.index].tolist()
