"""``compare``'s noise tests and their family: every p-value and Holm threshold worked out by
hand here (closed forms of Student's t for 1, 2 and 4 degrees of freedom), then the gate on
emulated runs: the same model with other noise passes, a model 10 % slower per GPU fails.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_runner

from itwin_report import api
from itwin_report.analysis.comparison import (
    compare_sides,
    gate_error,
    regressions,
    side_from_dict,
)
from itwin_report.analysis.significance import holm, t_sf
from itwin_report.cli import main
from itwin_report.render.comparison import render_comparison
from itwin_report.util.errors import BadOption

T975_1 = 12.706204736174707  # t(0.975, 1), from tables


def sf1(t: float) -> float:
    """P(T > t), 1 degree of freedom (Cauchy)."""
    return 0.5 - math.atan(t) / math.pi


def sf2(t: float) -> float:
    return 0.5 * (1 - t / math.sqrt(t * t + 2))


def sf4(t: float) -> float:
    u = 1 + t * t / 4
    return 0.5 - 0.375 * t / math.sqrt(u) * (1 - t * t / (12 * u))


def _epoch(strategy: str, workers: int, runs: list[float], base: tuple[str, int] | None = None):
    mean = sum(runs) / len(runs)
    row: dict[str, Any] = {
        "strategy": strategy,
        "workers": workers,
        "runs": len(runs),
        "avg_epoch_time_s": mean,
    }
    if base is not None:
        row["base_strategy"], row["base_workers"] = base
    return row


def _report(configs: dict[tuple[str, int], list[float]], **extra: Any) -> dict[str, Any]:
    """A JSON report whose configurations have these per-run mean epoch times."""
    return {
        "epoch_time": [_epoch(s, w, runs) for (s, w), runs in configs.items()],
        "runs": [
            {"strategy": s, "workers": w, "job_id": f"{s}{w}-{i}", "avg_epoch_time_s": v}
            for (s, w), runs in configs.items()
            for i, v in enumerate(runs)
        ],
        **extra,
    }


def _row(result: Any, strategy: str, workers: int, metric: str) -> dict[str, Any]:
    t = result.table
    mine = t[(t["strategy"] == strategy) & (t["workers"] == workers) & (t["metric"] == metric)]
    assert len(mine) == 1
    return dict(mine.iloc[0])


def _pair(mean: float, rel_var: float) -> list[float]:
    """Two runs with this mean whose squared relative standard error of the mean is rel_var:
    var(runs) / (2 mean²) = rel_var, and var of two values m ± d is 2 d²."""
    d = mean * math.sqrt(rel_var)
    return [mean - d, mean + d]


def test_student_t_tail_matches_closed_forms() -> None:
    for t in (-3.0, -0.4, 0.0, 0.7, 2.5, 6.7, 40.0):
        assert t_sf(t, 1) == pytest.approx(sf1(t), rel=1e-10, abs=1e-14)
        assert t_sf(t, 2) == pytest.approx(sf2(t), rel=1e-10, abs=1e-14)
        assert t_sf(t, 4) == pytest.approx(sf4(t), rel=1e-10, abs=1e-14)
    assert t_sf(1.959963984540054, 1e8) == pytest.approx(0.025, rel=1e-9)


def test_holm_steps_down_and_stops_at_the_first_that_stands() -> None:
    # sorted: 0.005 <= 0.05/4, 0.01 <= 0.05/3, 0.03 > 0.05/2 stops: 0.03 and 0.04 stand
    assert holm([0.01, 0.04, 0.03, 0.005]) == [
        (0.05 / 3, True),
        (0.05 / 1, False),
        (0.05 / 2, False),
        (0.05 / 4, True),
    ]
    assert holm([0.02, 0.02], alpha=0.05) == [(0.025, True), (0.05, True)]


BASE = {("ddp", 8): _pair(10.0, 1e-4), ("ddp", 16): _pair(6.0, 1e-4)}


def test_a_change_within_the_familys_noise_is_no_regression() -> None:
    """+6 % on one of two configurations, two runs a side: p = 0.027 alone, but the family of
    three tests (two rows and their mean) does not reject it."""
    current = {("ddp", 8): _pair(10.6, 1e-4), ("ddp", 16): _pair(6.0, 1e-4)}
    result = compare_sides(
        side_from_dict(_report(BASE), "b"),
        side_from_dict(_report(current), "c"),
        metrics="epoch-time",
    )
    # each row: var(log mean) 1e-4 a side, so se = sqrt(2e-4), df = 2 (Welch-Satterthwaite)
    t8 = math.log(1.06) / math.sqrt(2e-4)
    p8 = sf2(t8)
    assert 0.05 / 2 < p8 < 0.05  # beyond noise alone, not in the family
    row = _row(result, "ddp", 8, "epoch_time")
    assert row["p_value"] == pytest.approx(p8, rel=1e-9)
    assert row["noise_test"] == "welch" and row["worse"]
    assert row["beyond_noise"] is not None and not row["beyond_noise"]
    assert not row["regression"]
    # the mean of the two log changes: var = 4 * 1e-4 / 2**2, df = 4
    mean = dict(result.overall.iloc[0])
    t_mean = math.log(1.06) / 2 / math.sqrt(1e-4)
    assert mean["p_value"] == pytest.approx(sf4(t_mean), rel=1e-9)
    assert mean["change"] == pytest.approx(math.sqrt(1.06) - 1)
    # Holm: mean p (0.022) is the smallest and exceeds 0.05/3: nothing is rejected
    assert sf4(t_mean) > 0.05 / 3
    assert mean["holm_alpha"] == pytest.approx(0.05 / 3)
    assert row["holm_alpha"] == pytest.approx(0.05 / 2)
    assert _row(result, "ddp", 16, "epoch_time")["holm_alpha"] == pytest.approx(0.05)
    assert result.family_size == 3
    assert regressions(result) == [] and gate_error(result) is None
    text = render_comparison(result, "table")
    assert "Holm–Bonferroni over 3 tests holds the false-alarm rate at 5%" in text
    assert f"welch p={p8:.2g} > 0.025: within noise" in text


def test_a_change_beyond_the_familys_noise_is_a_regression() -> None:
    current = {("ddp", 8): _pair(11.0, 1e-4), ("ddp", 16): _pair(6.0, 1e-4)}
    result = compare_sides(
        side_from_dict(_report(BASE), "b"),
        side_from_dict(_report(current), "c"),
        metrics="epoch-time",
    )
    p8 = sf2(math.log(1.1) / math.sqrt(2e-4))
    p_mean = sf4(math.log(1.1) / 2 / 0.01)
    assert p_mean <= 0.05 / 3 and p8 <= 0.05 / 2  # both rejected by Holm
    row = _row(result, "ddp", 8, "epoch_time")
    assert row["beyond_noise"] and row["regression"]
    mean = dict(result.overall.iloc[0])
    assert mean["beyond_noise"] and not mean["regression"]  # +4.9 %: within 5 %
    assert regressions(result) == [f"ddp-8 epoch time (+10.0%, welch p={p8:.2g} <= 0.025)"]
    error = gate_error(result)
    assert error is not None and str(error).startswith("regression beyond 5%: ddp-8 epoch time")


def test_throughput_and_energy_are_tested_from_their_intervals() -> None:
    """One configuration, two runs a side: the interval's half width is t(0.975, 1) * se."""

    def rows(throughput: float, energy: float) -> dict[str, Any]:
        half_t, half_e = T975_1 * 0.01 * throughput, T975_1 * 0.01 * energy  # se 1 %
        return {
            "throughput": [
                {"strategy": "ddp", "workers": 8, "runs": 2, "samples_per_sec": throughput}
                | {"samples_per_sec_ci": [throughput - half_t, throughput + half_t]}
            ],
            "gpu": [
                {"strategy": "ddp", "workers": 8, "runs": 2, "energy_wh_per_epoch": energy}
                | {"energy_wh_per_epoch_ci": [energy - half_e, energy + half_e]}
            ],
        }

    one = {("ddp", 8): _pair(10.0, 1e-4)}
    base = side_from_dict(_report(one, **rows(500.0, 2.0)), "b")
    cur = side_from_dict(_report(one, **rows(450.0, 2.3)), "c")
    result = compare_sides(base, cur, metrics=["throughput", "energy"])
    p_thr = sf2(math.log(500 / 450) / math.sqrt(2e-4))
    p_energy = sf2(math.log(2.3 / 2.0) / math.sqrt(2e-4))
    thr, energy = _row(result, "ddp", 8, "throughput"), _row(result, "ddp", 8, "energy_per_epoch")
    assert thr["noise_test"] == energy["noise_test"] == "welch-intervals"
    assert thr["p_value"] == pytest.approx(p_thr, rel=1e-6)
    assert energy["p_value"] == pytest.approx(p_energy, rel=1e-6)
    assert p_energy < p_thr  # the smaller is weighed against 0.05/2, the other against 0.05
    assert energy["holm_alpha"] == pytest.approx(0.025) and thr["holm_alpha"] == 0.05
    assert thr["regression"] and energy["regression"]
    assert result.overall.empty  # one configuration: no mean test
    assert set(result.table["metric"]) == {"throughput", "energy_per_epoch"}


def test_efficiency_is_tested_on_the_runs_of_the_configuration_and_its_base() -> None:
    def doc(own: float, base_of_8: tuple[str, int]) -> dict[str, Any]:
        runs = {("ddp", 4): _pair(20.0, 1e-4), ("ddp", 8): _pair(own, 1e-4)}
        out = _report(runs)
        out["epoch_time"] = [
            _epoch("ddp", 4, runs[("ddp", 4)], ("ddp", 4)) | {"efficiency": 1.0},
            _epoch("ddp", 8, runs[("ddp", 8)], base_of_8) | {"efficiency": 20.0 / own / 2},
        ]
        return out

    base = side_from_dict(doc(10.0, ("ddp", 4)), "b")
    cur = side_from_dict(doc(11.0, ("ddp", 4)), "c")
    result = compare_sides(base, cur, metrics="efficiency")
    # log E = log T(ddp-4) - log T(ddp-8): four cells of var 1e-4, df 4
    row = _row(result, "ddp", 8, "epoch_time_efficiency")
    assert row["p_value"] == pytest.approx(sf4(math.log(1.1) / 0.02), rel=1e-9)
    assert row["noise_test"] == "welch" and row["regression"]
    own_base = _row(result, "ddp", 4, "epoch_time_efficiency")
    assert own_base["noise_test"] == "base" and own_base["change"] == 0
    assert result.family_size == 1 and row["holm_alpha"] == 0.05
    assert result.warnings == []
    other = side_from_dict(doc(11.0, ("ddp", 2)), "c")
    warned = compare_sides(base, other, metrics="efficiency")
    assert warned.warnings == [
        "the two sides measure speedup against different bases for 1 configuration(s): "
        "ddp-8 (ddp-4 vs ddp-2); their efficiency changes compare different ratios "
        "(generate both reports with the same --baseline)"
    ]


def test_without_runs_the_threshold_alone_decides_and_says_so() -> None:
    base = side_from_dict(_report({("ddp", 8): [10.0]}), "b")
    cur = side_from_dict(_report({("ddp", 8): [11.0]}), "c")
    result = compare_sides(base, cur)
    assert result.family_size == 0
    assert regressions(result) == ["ddp-8 epoch time (+10.0%, threshold alone: one run on a side)"]
    text = render_comparison(result, "markdown")
    assert "beyond noise" not in text and "Holm" not in text
    assert "| ddp-8 | Epoch time | 10.00 s | 11.00 s | +10.0% | none | REGRESSION |" in text


def test_metrics_option_picks_what_gates(tmp_path: Path) -> None:
    import json

    base, cur = tmp_path / "b.json", tmp_path / "c.json"
    base.write_text(json.dumps(_report({("ddp", 8): [10.0]})))
    cur.write_text(json.dumps(_report({("ddp", 8): [11.0]})))
    runner = cli_runner()
    bad = runner.invoke(main, ["compare", str(base), str(cur), "--metrics", "epoch-time,speed"])
    assert bad.exit_code == 2
    assert bad.stderr.startswith("Error: unknown metric 'speed' in --metrics; use some of ")
    picked = runner.invoke(
        main, ["compare", str(base), str(cur), "--metrics", "throughput", "--format", "json"]
    )
    assert picked.exit_code == 5, picked.output  # no throughput on either side
    gated = runner.invoke(main, ["compare", str(base), str(cur), "--metrics", "epoch-time"])
    assert gated.exit_code == 4 and "Scaling comparison of epoch time:" in gated.stdout
    result = api.compare(base, cur, metrics=["energy"])
    assert result.metrics == ("energy_per_epoch",) and result.table.empty
    with pytest.raises(BadOption, match="unknown metric 'time'") as bad_api:
        api.compare(base, cur, metrics="time")
    assert bad_api.value.exit_code == 2


# ---------------------------------------------------------------- on emulated runs

SLOWER = "gpu_samples_per_sec=227.2727"  # the default preset's 250 / 1.1: 10 % slower per GPU


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The default preset's three strategies on 4 and 8 GPUs, two runs each (the default
    emulation's situation, smaller): the base at seed 0; at seed 3 the same model (the old
    gate failed it: deepspeed-8 throughput -5.4 %, energy +6.1 %) and one 10 % slower per GPU."""
    from itwin_report.emulator import EmulationOptions, run_emulation
    from itwin_report.render.comparison import side_from_report

    uri = f"sqlite:///{tmp_path_factory.mktemp('gate') / 'mlflow.db'}"
    sides = {}
    for name, seed, overrides in (("base", 0, ()), ("same", 3, ()), ("slower", 3, (SLOWER,))):
        options = EmulationOptions(
            workers=(4, 8),
            epochs=4,
            seed=seed,
            overrides=overrides,
            experiment_name=name,
            log_on_workers="0",
        )
        run_emulation(options, uri)
        sides[name] = side_from_report(api.build(api.load(uri, name)), name)
    return sides


def test_the_same_model_with_other_noise_passes(emulated: dict[str, Any]) -> None:
    result = compare_sides(emulated["base"], emulated["same"])
    assert gate_error(result) is None
    table = result.table
    # every row has a noise test but the bases' own efficiencies (1 on both sides)
    assert set(table["noise_test"]) == {"welch", "welch-intervals", "base"}
    assert set(table[table["noise_test"] == "welch-intervals"]["metric"]) == {
        "throughput", "energy_per_epoch",
    }  # fmt: skip
    assert (table[table["noise_test"] == "base"]["workers"] == 4).all()
    # 6 configurations x 4 metrics, less the 3 bases' efficiencies, and 4 mean tests
    assert result.family_size == 6 * 4 - 3 + 4
    worse = table[table["worse"]]
    assert len(worse) and not worse["regression"].any()  # beyond 5 %, within the noise


def test_a_model_ten_percent_slower_per_gpu_fails(emulated: dict[str, Any]) -> None:
    result = compare_sides(emulated["base"], emulated["slower"])
    error = gate_error(result)
    assert error is not None and error.exit_code == 4
    overall = result.overall.set_index("metric")
    # every configuration's compute is 10 % slower: the energy per epoch of all of them grows
    assert overall.loc["energy_per_epoch", "regression"]
    assert 0.05 < overall.loc["energy_per_epoch", "change"] < 0.10
    assert "energy per epoch, mean of 6 configurations (+" in str(error)
    assert "welch-mean p=" in str(error)
