"""Intervals from per-run means: t quantiles, ratio intervals, Welch's test, table columns."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from itwin_report.analysis.intervals import (
    add_intervals,
    fastest_lines,
    mean_interval,
    ratio_interval,
    t_quantile,
    welch_test,
)

# printed tables of t(0.975, df)
TEXTBOOK = {1: 12.706, 2: 4.303, 3: 3.182, 5: 2.571, 10: 2.228, 30: 2.042, 120: 1.980}


@pytest.mark.parametrize(("df", "expected"), sorted(TEXTBOOK.items()))
def test_t_quantile_matches_printed_tables(df: int, expected: float) -> None:
    assert t_quantile(df) == pytest.approx(expected, abs=6e-4)


def test_t_quantile_limits_and_other_levels() -> None:
    assert t_quantile(1e12) == pytest.approx(1.95996, abs=1e-4)  # normal limit
    assert t_quantile(10, level=0.90) == pytest.approx(1.812, abs=6e-4)
    # fractional df (Welch) sit between their integer neighbours
    assert t_quantile(3) > t_quantile(3.5) > t_quantile(4)
    with pytest.raises(ValueError):
        t_quantile(0.5)


def test_t_quantile_fractional_df_by_simulation() -> None:
    # a t variate with df = 2.5 is Z / sqrt(chi2(2.5)/2.5); 95 % of |T| fall under the quantile
    rng = np.random.default_rng(7)
    df = 2.5
    z = rng.standard_normal(400_000)
    chi2 = rng.gamma(df / 2, 2.0, size=z.size)
    share = float(np.mean(np.abs(z / np.sqrt(chi2 / df)) <= t_quantile(df)))
    assert share == pytest.approx(0.95, abs=0.002)


def test_mean_interval_by_hand() -> None:
    mean, low, high = mean_interval([1.0, 2.0, 3.0])  # s = 1, n = 3
    half = 4.3027 / math.sqrt(3)
    assert (mean, low, high) == pytest.approx((2.0, 2.0 - half, 2.0 + half), abs=1e-3)
    assert math.isnan(mean_interval([5.0])[1])


def test_ratio_interval_by_hand() -> None:
    a, b = [9.0, 11.0], [4.0, 6.0]  # means 10 and 5, s = sqrt(2) on both
    va, vb = 2 / (2 * 100), 2 / (2 * 25)  # squared relative standard errors
    df = (va + vb) ** 2 / (va**2 + vb**2)  # Welch–Satterthwaite with n - 1 = 1
    half = t_quantile(df) * math.sqrt(va + vb)
    r, low, high = ratio_interval(a, b)
    assert r == pytest.approx(2.0)
    assert low == pytest.approx(2.0 * math.exp(-half))
    assert high == pytest.approx(2.0 * math.exp(half))
    assert math.isnan(ratio_interval([10.0], [4.0, 6.0])[1])


@pytest.mark.parametrize("runs", [2, 3, 5])
def test_speedup_interval_covers_the_truth_at_its_rate(runs: int) -> None:
    """Per-run means with 3 % noise around 120 s and 20 s: the true speedup is 6."""
    rng = np.random.default_rng(runs)
    trials = 3000
    base = 120.0 * (1 + 0.03 * rng.standard_normal((trials, runs)))
    mine = 20.0 * (1 + 0.03 * rng.standard_normal((trials, runs)))
    hits = 0
    for a, b in zip(base, mine, strict=True):
        _, low, high = ratio_interval(a, b)
        hits += low <= 6.0 <= high
    assert 0.93 <= hits / trials <= 0.985


def test_welch_test_by_hand_and_noise() -> None:
    a, b = [10.0, 12.0, 11.0], [14.0, 15.0, 13.0]
    va, vb = 1.0 / 3, 1.0 / 3
    t, df, differ = welch_test(a, b)
    assert t == pytest.approx(3.0 / math.sqrt(va + vb))
    assert df == pytest.approx(4.0)  # equal variances and sizes: n_a + n_b - 2
    assert differ  # 3.67 > t(0.975, 4) = 2.776
    assert not welch_test(a, [10.5, 12.5, 11.5])[2]
    assert welch_test([5.0, 5.0], [5.0, 5.0])[:3] == (0.0, math.inf, False)
    assert welch_test([5.0], [6.0, 7.0])[2]  # no noise estimate: the threshold alone decides


def _table(
    rows: list[tuple[str, int, float, float, float]], base: tuple[str, int] = ("ddp", 4)
) -> pd.DataFrame:
    frame = pd.DataFrame(
        rows, columns=["strategy", "workers", "avg_epoch_time_s", "speedup", "efficiency"]
    )
    frame["base_strategy"], frame["base_workers"] = base[0], float(base[1])
    return frame


def test_add_intervals_against_another_strategys_single_gpu_runs() -> None:
    """The base's runs come from the base configuration, whatever its strategy."""
    runs = pd.DataFrame(
        {
            "strategy": ["non-distributed"] * 2 + ["ddp"] * 2,
            "workers": [1, 1, 4, 4],
            "job_id": list("abcd"),
            "avg_epoch_time_s": [39.0, 41.0, 9.0, 11.0],
        }
    )
    table = _table(
        [("ddp", 4, 10.0, 4.0, 1.0), ("non-distributed", 1, 40.0, 1.0, 1.0)],
        base=("non-distributed", 1),
    )
    out = add_intervals(table, runs)
    r, low, high = ratio_interval([39.0, 41.0], [9.0, 11.0])
    assert r == pytest.approx(4.0)
    assert out.loc[0, ["speedup_ci_low", "speedup_ci_high"]].tolist() == pytest.approx([low, high])
    assert out.loc[0, "efficiency_ci_low"] == pytest.approx(low / 4)
    assert out.loc[1, ["speedup_ci_low", "speedup_ci_high"]].tolist() == [1.0, 1.0]


def test_add_intervals_columns() -> None:
    runs = pd.DataFrame(
        {
            "strategy": ["ddp"] * 5,
            "workers": [4, 4, 8, 8, 16],
            "job_id": list("abcde"),
            "avg_epoch_time_s": [9.0, 11.0, 4.0, 6.0, 3.0],
        }
    )
    table = _table(
        [("ddp", 4, 10.0, 1.0, 1.0), ("ddp", 8, 5.0, 2.0, 1.0), ("ddp", 16, 3.0, 10 / 3, 10 / 12)]
    )
    out = add_intervals(table, runs)
    _, low, high = ratio_interval([9.0, 11.0], [4.0, 6.0])
    assert out.loc[0, ["speedup_ci_low", "speedup_ci_high"]].tolist() == [1.0, 1.0]
    assert out.loc[1, "speedup_ci_low"] == pytest.approx(low)
    assert out.loc[1, "efficiency_ci_high"] == pytest.approx(high * 4 / 8)
    assert out.loc[1, "speedup_ci_low"] < 2.0 < out.loc[1, "speedup_ci_high"]
    assert out.loc[2, ["speedup_ci_low", "efficiency_ci_high"]].isna().all()  # one run


def test_fastest_only_when_intervals_separate() -> None:
    runs = pd.DataFrame(
        {
            "strategy": ["a", "a", "b", "b", "a", "a", "b", "b", "a", "b"],
            "workers": [4, 4, 4, 4, 8, 8, 8, 8, 16, 16],
            "avg_epoch_time_s": [10.0, 10.2, 12.0, 12.1, 5.0, 6.0, 5.5, 6.2, 3.0, 2.0],
        }
    )
    lines = fastest_lines(runs)
    assert lines[0] == "Fastest strategy at 4 GPUs: a"
    assert lines[1].startswith("Fastest strategy at 8 GPUs: within noise (a has the lowest")
    assert lines[2].startswith("Fastest strategy at 16 GPUs: cannot tell")


def test_welch_false_alarm_rate_on_equal_means() -> None:
    """Two sets of 3 runs from the same distribution differ 'beyond noise' about 5 % of the time."""
    rng = np.random.default_rng(3)
    trials = 3000
    a = 50.0 * (1 + 0.03 * rng.standard_normal((trials, 3)))
    b = 50.0 * (1 + 0.03 * rng.standard_normal((trials, 3)))
    alarms = sum(welch_test(x, y)[2] for x, y in zip(a, b, strict=True))
    assert 0.025 <= alarms / trials <= 0.07


@given(
    st.lists(st.floats(1.0, 1000.0), min_size=2, max_size=6),
    st.lists(st.floats(1.0, 1000.0), min_size=2, max_size=6),
    st.floats(0.01, 100.0),
)
@settings(max_examples=60, deadline=None)
def test_ratio_interval_properties(a: list[float], b: list[float], scale: float) -> None:
    r, low, high = ratio_interval(a, b)
    assert low <= r <= high
    assert r == pytest.approx(np.mean(a) / np.mean(b))
    # units do not matter: both sides in ms instead of s give the same interval
    assert ratio_interval([x * scale for x in a], [x * scale for x in b]) == pytest.approx(
        (r, low, high)
    )
    # the inverse ratio's interval is the inverse interval
    r2, low2, high2 = ratio_interval(b, a)
    assert (r2, low2, high2) == pytest.approx((1 / r, 1 / high, 1 / low))
