"""The decisions of a report, each made once: per sample under weak scaling, costs on the wall
time a job is billed for, every configuration within noise named, ``~`` kept with an estimated
energy, every section in CSV.

Expected numbers come from the emulator's noise-free truth file or are worked out by hand.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import cli_runner
from test_energy import store
from test_pareto import decision_json, flat_job

from itwin_report.analysis.intervals import best_of
from itwin_report.analysis.scaling_mode import constant, per_sample
from itwin_report.cli import main

REPORT = "generate-scalability-report"
NOISE_FREE = ["--set", "noise=0", "--set", "sigma_run=0"]
Config = tuple[str, int]


@pytest.fixture(scope="module")
def weak(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[Config, Any]]:
    """Weak scaling, noise-free: two strategies at 2, 4 and 8 GPUs, two jobs each."""
    d = tmp_path_factory.mktemp("weak")
    uri, truth = f"sqlite:///{d}/mlflow.db", d / "truth.json"
    args = ["emulate", "-q", "--tracking-uri", uri, "--truth", str(truth), "--scaling", "weak"]
    args += ["--strategies", "torch-ddp,deepspeed", "--workers", "2,4,8", "--epochs", "3"]
    result = cli_runner().invoke(main, [*args, "--repeats", "2", *NOISE_FREE])
    assert result.exit_code == 0, result.output
    configs = json.loads(truth.read_text())["configurations"]
    return uri, {(c["strategy"], c["workers"]): c for c in configs}


def _report(uri: str, *args: str) -> dict[str, Any]:
    base = [REPORT, "--tracking-uri", uri, "-e", "emulated-cluster", "-q", "--no-plots"]
    result = cli_runner().invoke(main, [*base, "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _per_1k(c: dict[str, Any]) -> tuple[float, float]:
    """(time, energy) per 1,000 samples of a truth configuration, by hand."""
    spe = c["samples_per_epoch"]
    return 1000 * c["mean_epoch_time_after_warmup_s"] / spe, 1000 * c["energy_wh_per_epoch"] / spe


def _named(config: Config) -> dict[str, Any]:
    return {"strategy": config[0], "workers": config[1]}


def test_weak_scaling_decides_per_sample(weak: tuple[str, dict[Config, Any]]) -> None:
    uri, truth = weak
    doc = _report(uri)
    rec = doc["recommendation"]
    assert rec["basis"] == "1k samples"
    per_1k = {c: _per_1k(v) for c, v in truth.items()}
    # every front row per 1k samples as the truth gives it, and no configuration off the front
    # is faster and more frugal than one on it
    front = {(r["strategy"], r["workers"]): r for r in doc["pareto"]}
    assert front
    for config, row in front.items():
        t, e = per_1k[config]
        assert row["time_s_per_1k_samples"] == pytest.approx(t, rel=1e-6)
        assert row["energy_wh_per_1k_samples"] == pytest.approx(e, rel=1e-3)
        assert not any(t2 < t and e2 < e for t2, e2 in per_1k.values())
    fastest = min(per_1k, key=lambda c: per_1k[c][0])
    frugal = min(per_1k, key=lambda c: per_1k[c][1])
    assert fastest[1] == 8  # the highest throughput: the most GPUs
    assert rec["fastest"] == _named(fastest) and rec["most_frugal"] == _named(frugal)
    # per epoch the decision would differ: an epoch at 8 GPUs holds 4x the samples of one at 2
    by_epoch = min(truth, key=lambda c: truth[c]["mean_epoch_time_after_warmup_s"])
    assert by_epoch != fastest
    t = per_1k[fastest][0]
    assert any(f"{1000 / t:,.0f} samples/s" in s for s in rec["sentences"])
    assert any("compared per 1k samples" in s for s in rec["sentences"])


def test_costs_and_the_deadline_count_the_set_up(weak: tuple[str, dict[Config, Any]]) -> None:
    uri, truth = weak
    doc = _report(uri, "--deadline-hours", "0.5", "--epochs", "20")
    for row in doc["gpu"]:
        c = truth[(row["strategy"], row["workers"])]
        wall = c["time_breakdown"]["wall_s"]  # set-up and teardown included
        assert row["gpu_hours_per_run"] == pytest.approx(row["workers"] * wall / 3600, rel=1e-6)
        assert wall > sum(c["epoch_times_s"])
    # the deadline's epochs hold the samples of the smallest configuration's epoch; each job
    # pays its set-up once: needed = outside_s + 20 x samples / 1000 x time per 1k samples
    first = min(truth, key=lambda c: (c[1], c[0]))
    units = 20 * truth[first]["samples_per_epoch"] / 1000
    needed = {c: v["time_breakdown"]["outside_s"] + units * _per_1k(v)[0] for c, v in truth.items()}
    fits = [c for c in needed if needed[c] <= 0.5 * 3600]
    choice = min(fits, key=lambda c: (c[1] * needed[c], c[1]))
    deadline = doc["recommendation"]["deadline"]
    assert deadline["choice"] == _named(choice)
    assert deadline["samples_per_epoch"] == truth[first]["samples_per_epoch"]
    words = f"{choice[1] * needed[choice] / 3600:.2f} GPU-hours in {needed[choice] / 3600:.2f} h"
    assert any(
        words in s and "set-up 12 s included" in s for s in doc["recommendation"]["sentences"]
    )


def test_every_configuration_within_noise_is_named(
    sqlite_store_template: Path, tmp_path: Path
) -> None:
    runs: list[dict[str, Any]] = []
    # two jobs each; energy per epoch = workers x watts / 300 Wh (see flat_job)
    for strategy, workers, pairs in (
        ("c", 2, ((50.0, 150.0), (52.0, 156.0))),  # 51 s, 1.02 Wh (1.00, 1.04)
        ("d", 2, ((51.0, 153.0), (53.0, 159.0))),  # 52 s, 1.04 Wh
        ("e", 2, ((50.5, 151.5), (52.5, 157.5))),  # 51.5 s, 1.03 Wh
        ("f", 4, ((20.0, 300.0), (20.2, 303.0))),  # 20.1 s, 4.02 Wh: fastest, far from the rest
        ("g", 1, ((100.0, 312.0), (102.0, 318.0))),  # 101 s, 1.05 Wh
    ):
        for t, watts in pairs:
            flat_job(runs, strategy, workers, t, watts, name=f"{strategy}-{t:g}")
    rec = decision_json(store(sqlite_store_template, tmp_path, runs))["recommendation"]
    # time: f's interval 20.1 +- 12.706 x 0.1 = [18.8, 21.4] is below every other's
    assert rec["fastest"] == _named(("f", 4)) and rec["fastest_within_noise_of"] == []
    # energy: c has the lowest mean, 1.02 +- 12.706 x 0.02 = [0.77, 1.27]; e, d and g overlap
    # it (f: [3.84, 4.20] does not). Noise cannot rank them: the fewest GPUs, g, is named
    assert rec["most_frugal"] == _named(("g", 1))
    assert rec["most_frugal_within_noise_of"] == [_named(c) for c in (("c", 2), ("e", 2), ("d", 2))]
    said = (
        "g on 1 GPU and c on 2 GPUs (~1.02 Wh), e on 2 GPUs (~1.03 Wh) and d on 2 GPUs "
        "(~1.04 Wh) are within noise on energy per epoch"
    )
    assert any(s.startswith(said) and "fewest GPUs" in s for s in rec["sentences"])


def test_best_of_by_hand() -> None:
    nan = np.nan
    v = best_of(
        {
            "a": (10.0, 9.0, 11.0),
            "b": (10.5, 10.8, 10.9),
            "c": (12.0, 11.0, 13.0),
            "d": (30.0, 29.0, 31.0),
            "e": (11.0, nan, nan),
            "f": (nan, nan, nan),
        }
    )
    assert v is not None and v.best == "a"
    assert v.within_noise == ("b", "c")  # touching at 11.0 counts as overlapping
    assert v.untested == ("e",) and not v.decided
    single = best_of({"a": (1.0, np.nan, np.nan), "b": (2.0, 1.5, 2.5)})
    assert single is not None and single.untested == ("b",)
    assert best_of({"a": (np.nan, np.nan, np.nan)}) is None
    clear = best_of({"a": (1.0, 0.9, 1.1), "b": (2.0, 1.9, 2.1)})
    assert clear is not None and clear.decided


def test_samples_per_epoch_constant_once() -> None:
    assert constant([1000.0, 1009.0]) and not constant([1000.0, 1011.0])  # 1 % of the mean
    assert constant([5.0, np.nan]) and not constant([]) and not constant([np.nan])
    assert per_sample("weak", []) and per_sample("strong", [1000.0, 2000.0])
    assert not per_sample("strong", [1000.0, 1000.0, np.nan]) and not per_sample("auto", [7.0])


def test_estimated_energy_keeps_its_mark_and_csv_carries_every_section(
    sqlite_store_template: Path, tmp_path: Path
) -> None:
    runs: list[dict[str, Any]] = []
    flat_job(runs, "b", 1, 100.0, 300.0)  # 1.00 Wh per epoch, measured on its one GPU
    flat_job(runs, "b", 2, 55.0, 165.0)  # ~1.10 Wh: rank 0 of 2 GPUs logged
    flat_job(runs, "b", 4, 50.0, 150.0)  # ~2.00 Wh: rank 0 of 4
    uri = store(sqlite_store_template, tmp_path, runs)
    base = [REPORT, "--tracking-uri", uri, "-q", "--no-plots", "--fail-under-efficiency", "0.5"]
    plain = cli_runner().invoke(main, [*base, "--format", "table"]).stdout
    front = plain.split("Time–energy Pareto front (fastest first)")[1].split("\n\n")[0]
    rows = [line.split() for line in front.splitlines()[4:]]
    assert [(r[1], " ".join(r[4:6])) for r in rows] == [
        ("4", "~2.00 Wh"),
        ("2", "~1.10 Wh"),
        ("1", "1.00 Wh"),
    ]
    text = cli_runner().invoke(main, [*base, "--format", "csv", "--predict", "8"]).stdout
    doc = json.loads(
        cli_runner().invoke(main, [*base, "--format", "json", "--predict", "8"]).stdout
    )
    table = list(csv.DictReader(io.StringIO(text)))
    sections = [r["table"] for r in table]
    for name in ("predictions", "scaling_models", "pareto", "recommendation", "gate", "summary"):
        assert name in sections, name
    preds = [r for r in table if r["table"] == "predictions"]
    assert len(preds) == len(doc["predictions"]) > 0
    for row, pred in zip(preds, doc["predictions"], strict=True):
        assert (row["strategy"], int(row["workers"])) == (pred["strategy"], pred["workers"])
        value = pred["avg_epoch_time_s"]
        assert (
            (row["avg_epoch_time_s"] == "")
            if value is None
            else (float(row["avg_epoch_time_s"]) == pytest.approx(value))
        )
    pareto = [(r["strategy"], int(r["workers"])) for r in table if r["table"] == "pareto"]
    assert pareto == [("b", 4), ("b", 2), ("b", 1)]
    recommendation = [r for r in table if r["table"] == "recommendation"]
    picks = {r["role"]: (r["strategy"], r["workers"]) for r in recommendation if r["strategy"]}
    assert picks == {"fastest": ("b", "4"), "most_frugal": ("b", "1"), "knee": ("b", "2")}
    sentences = [r["text"] for r in table if r["role"] == "sentence"]
    assert sentences == doc["recommendation"]["sentences"]
    (gate,) = [r for r in table if r["table"] == "gate"]
    assert gate["passed"] == str(doc["gate"]["passed"]) and gate["text"] == doc["gate"]["text"]
    summary = [(r["kind"], r["section"], r["text"]) for r in table if r["table"] == "summary"]
    assert summary == [(s["kind"], s["table"], s["text"]) for s in doc["summary"]]
