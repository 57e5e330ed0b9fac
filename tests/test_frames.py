"""Sorting, de-duplicating and joining on codes gives what pandas gives on the strings."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from itwin_report.data.frames import METRIC_ORDER, join_runs, last_of_each, sort_rows
from itwin_report.store.artifacts import filesystem_type


def _points(seed: int, n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    runs = np.array([f"run-{i:02d}" for i in rng.integers(0, 12, n)], dtype=object)
    keys = np.array(["b", "a", "c"], dtype=object)[rng.integers(0, 3, n)]
    values = rng.choice([1.5, 2.5, np.nan, np.inf, -1.0], n)
    return pd.DataFrame(
        {
            "run_id": pd.Series(runs, dtype="str"),
            "key": pd.Series(keys, dtype="str"),
            "step": rng.integers(0, 5, n),
            "value": values,
            "timestamp": rng.integers(0, 3, n),
        }
    )


@pytest.mark.parametrize("seed", range(5))
def test_sort_and_last_of_each_match_pandas(seed: int) -> None:
    frame = _points(seed)
    for order in (list(METRIC_ORDER), ["value", "step"]):  # NaN and inf among the values
        mine = sort_rows(frame, order)
        theirs = frame.sort_values(order, kind="stable").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, theirs)
    columns = ["run_id", "key", "step", "timestamp"]
    mine = sort_rows(frame, columns)
    theirs = frame.sort_values(columns, kind="stable")
    assert mine.index.tolist() == list(range(len(frame)))
    pd.testing.assert_frame_equal(mine, theirs.reset_index(drop=True))
    repeated = last_of_each(mine, ["run_id", "key", "step"])
    expected = mine.duplicated(["run_id", "key", "step"], keep="last").to_numpy()
    assert repeated.tolist() == expected.tolist()
    assert 0 < repeated.sum() < len(frame)  # the draw has both kinds of rows


def test_a_sorted_frame_is_returned_as_it_is() -> None:
    frame = _points(7).sort_values(["run_id", "key"], kind="stable")
    assert sort_rows(frame, ["run_id", "key"]) is frame


@pytest.mark.parametrize("seed", range(3))
def test_join_runs_matches_an_inner_merge(seed: int) -> None:
    points = _points(seed)
    runs = pd.DataFrame(
        {
            "run_id": pd.Series([f"run-{i:02d}" for i in range(0, 12, 2)], dtype="str"),
            "job_id": pd.Series([f"job-{i % 3}" for i in range(6)], dtype="str"),
            "workers": np.arange(6, dtype="int64") * 4,
        }
    )
    points["position"] = np.arange(len(points))
    mine = join_runs(points, runs, ["run_id", "job_id", "workers"])
    # pandas 2.0 groups an inner merge's rows by key: put them back in the points' order
    theirs = points.merge(runs, on="run_id", how="inner").sort_values("position")
    assert 0 < len(mine) < len(points)  # runs with odd numbers have no row in ``runs``
    assert mine["position"].is_monotonic_increasing
    pd.testing.assert_frame_equal(mine, theirs.reset_index(drop=True))


MOUNTS = """\
overlay / overlay rw,relatime 0 0
proc /proc proc rw,nosuid 0 0
server:/export /work nfs4 rw,relatime 0 0
/dev/sda1 /work/local ext4 rw 0 0
gpfs1 /p/project gpfs rw 0 0
/dev/sdb1 /mnt/my\\040disk xfs rw 0 0
"""


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/home/user/mllogs", "overlay"),
        ("/work/mllogs/artifacts", "nfs4"),
        ("/work/local/mllogs", "ext4"),  # the longest mount point wins
        ("/work/localized", "nfs4"),  # a prefix of a name is not a mount point of it
        ("/p/project/itwinai/mllogs", "gpfs"),
        ("/mnt/my disk/runs", "xfs"),  # spaces are escaped as \\040
    ],
)
def test_filesystem_type(path: str, kind: str) -> None:
    assert filesystem_type(path, MOUNTS) == kind


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("categorical_runs", [False, True])
def test_code_sums_match_a_pandas_group_by(seed: int, categorical_runs: bool) -> None:
    """Points, sums and counts of numbers per (run, key) as pandas' group-by gives them:
    missing keys left out, NaN counted as a point but neither summed nor counted as a
    number; with few possible groups (bins per group) and with many (bins of present ones)."""
    from itwin_report.data.frames import code_sums, coded

    frame = _points(seed)
    frame.loc[frame.index % 17 == 3, "key"] = None  # missing: a group-by leaves them out
    frame["value"] = frame["value"].replace(np.inf, 4.0)
    if categorical_runs:
        frame["run_id"] = frame["run_id"].astype("category")
    (run, runs), (key, keys) = coded(frame["run_id"]), coded(frame["key"])
    expected = frame.groupby(["run_id", "key"], observed=True)["value"].agg(
        ["size", "sum", "count"]
    )
    for spread in (1, 10_000):  # 10,000 possible keys per run: more groups than points
        found, points, sums, counts = code_sums(
            [(run, len(runs)), (key, len(keys) * spread)], frame["value"].to_numpy()
        )
        got = pd.DataFrame(
            {"size": points, "sum": sums, "count": counts},
            index=pd.MultiIndex.from_arrays([runs[found[0]], keys[found[1]]]),
        )
        assert len(got) == len(expected)
        for (r, k), row in expected.iterrows():
            assert tuple(got.loc[(str(r), k)]) == pytest.approx(tuple(row)), (r, k)
