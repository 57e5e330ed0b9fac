"""The decision to a quality target: the front, the knee, the deadline and the sentences made on
time and energy to target, on a small store whose numbers are worked out here by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import T0
from test_energy import job, store, worker
from test_pareto import decision_json

from itwin_report.plots.decisions import pareto_figure

TARGET = "val_accuracy>=0.76"
ACC = "val_accuracy"


def _evals(points: list[tuple[float, float, int]]) -> list[tuple[str, float, int, int]]:
    """val_accuracy points (value, seconds after the run's start, step)."""
    return [(ACC, v, T0 + int(t * 1000), s) for v, t, s in points]


@pytest.fixture
def target_store(sqlite_store_template: Path, tmp_path: Path) -> str:
    runs: list[dict[str, Any]] = []
    # 1 GPU: 40 one-second samples of 100 W (4000 J = 1.111 Wh), 3 epochs of 10 s; the target
    # is met at 20.5 s (step 2): the 21 samples at 0..20 s are 21/40 of the energy, 2100 J.
    a = worker("a0", "ddp", 1, 0, {"epoch_time_s": [10.0] * 3, "gpu_power_W": [100.0] * 40})
    a["metrics"] += _evals([(0.5, 10.0, 1), (0.8, 20.5, 2), (0.9, 30.5, 3)])
    job(runs, "ddp-1", [a])
    # 2 GPUs, both logging 10 samples of 300 W (2 x 3000 J = 1.667 Wh over 3 epochs of 6 s);
    # the target is met at 12.5 s, after the last sample (9 s): no power samples cover it, so
    # energy per epoch (0.5556 Wh) x 2 epochs to target = 1.111 Wh
    b = [
        worker(f"b{r}", "ddp", 2, r, {"epoch_time_s": [6.0] * 3, "gpu_power_W": [300.0] * 10})
        for r in (0, 1)
    ]
    b[0]["metrics"] += _evals([(0.5, 6.0, 1), (0.77, 12.5, 2), (0.8, 18.5, 3)])
    job(runs, "ddp-2", b)
    # 4 GPUs: the fastest epochs, but the target is never met: not recommended
    d = worker("d0", "ddp", 4, 0, {"epoch_time_s": [3.0] * 3, "gpu_power_W": [400.0] * 10})
    d["metrics"] += _evals([(0.5, 3.0, 1), (0.7, 6.0, 2), (0.75, 9.0, 3)])
    job(runs, "ddp-4", [d])
    return store(sqlite_store_template, tmp_path, runs)


A_WH = 100.0 * 21 / 3600  # 0.5833 Wh to target, from the power samples
B_WH = 2 * 300.0 * 10 / 3600 / 3 * 2  # 1.111 Wh: per epoch x 2 epochs
A_S, B_S = 20.5, 12.5


def test_front_and_picks_are_made_to_the_target(target_store: str) -> None:
    doc = decision_json(target_store, "--target", TARGET)
    rec = doc["recommendation"]
    assert (rec["basis"], rec["target"]) == ("target", TARGET)
    front = {(r["strategy"], r["workers"]): r for r in doc["pareto"]}
    assert list(front) == [("ddp", 2), ("ddp", 1)]  # fastest first; 4 GPUs never reached it
    one, two = front[("ddp", 1)], front[("ddp", 2)]
    assert one["time_to_target_s"] == pytest.approx(A_S)
    assert one["energy_wh_to_target"] == pytest.approx(A_WH)
    assert one["gpu_hours_to_target"] == pytest.approx(A_S / 3600)
    assert one["energy_to_target_basis"] == "power samples up to the target"
    assert two["time_to_target_s"] == pytest.approx(B_S)
    assert two["energy_wh_to_target"] == pytest.approx(B_WH)
    assert two["gpu_hours_to_target"] == pytest.approx(2 * B_S / 3600)
    assert two["energy_to_target_basis"] == "energy per epoch x epochs to target"
    # the per-epoch values stay beside them: 1 GPU 10 s and 1.111 / 3 Wh per epoch
    assert one["epoch_time_s"] == pytest.approx(10.0)
    assert one["energy_wh_per_epoch"] == pytest.approx(4000 / 3600 / 3)
    # A -> B gains 20.5 / 12.5 - 1 = 64 % speed for 1.111 / 0.5833 - 1 = 90.5 % more energy:
    # over the default 1 % per 1 %, so the knee stays at the most frugal
    assert rec["fastest"] == {"strategy": "ddp", "workers": 2}
    assert rec["most_frugal"] == rec["knee"] == {"strategy": "ddp", "workers": 1}
    sentences = rec["sentences"]
    assert sentences[0].startswith(f"Decided on reaching {TARGET}: time to target")
    assert (
        "Energy to target: the GPU power samples up to the timestamp where the target was "
        "reached for ddp on 1 GPU; energy per epoch x epochs to target (no power samples cover "
        "the span; energy outside the epochs is left out) for ddp on 2 GPUs." in sentences
    )
    assert f"Not recommended: ddp on 4 GPUs (0 of 1 runs) never reached {TARGET}." in sentences
    assert f"Fastest: ddp on 2 GPUs, 12.50 s to {TARGET} for 1.11 Wh." in sentences
    gain, added = A_S / B_S - 1, B_WH / A_WH - 1
    assert any(f"adds {100 * gain:.0f} % speed for {100 * added:.0f} % more energy" in t
               for t in sentences)  # fmt: skip


def test_without_a_target_the_fastest_epochs_win(target_store: str) -> None:
    """The same store decided on epochs: the 4-GPU job, which never reaches the target, is the
    fastest there; to the target it is not even a candidate."""
    rec = decision_json(target_store)["recommendation"]
    assert rec["basis"] == "epoch" and "target" not in rec
    assert rec["fastest"] == {"strategy": "ddp", "workers": 4}


def test_deadline_to_the_target(target_store: str) -> None:
    """18 s: only 2 GPUs reach the target in time (12.5 s; 1 GPU needs 20.5 s): 2 x 12.5 s of
    GPU time; the time to target already holds the set-up."""
    doc = decision_json(
        target_store, "--target", TARGET, "--deadline-hours", str(18 / 3600), "--epochs", "3"
    )
    deadline = doc["recommendation"]["deadline"]
    assert deadline["choice"] == {"strategy": "ddp", "workers": 2}
    said = doc["recommendation"]["sentences"][-1]
    assert said.startswith(f"Cheapest to reach {TARGET} within 0.005 h: ddp on 2 GPUs, ")
    assert f"{2 * B_S / 3600:.2f} GPU-hours" in said and "set-up included" in said
    short = decision_json(
        target_store, "--target", TARGET, "--deadline-hours", str(10 / 3600), "--epochs", "3"
    )
    assert short["recommendation"]["deadline"]["choice"] is None
    assert short["recommendation"]["sentences"][-1].startswith(
        f"No configuration reaches {TARGET} within 0.00277778 h; the fastest, ddp on 2 GPUs"
    )


def test_text_and_plot_show_the_target_front(target_store: str) -> None:
    import itwin_report as ir

    data = ir.load(tracking_uri=target_store, metrics=[ACC], progress=False)
    report = ir.build(data, target=TARGET)
    from itwin_report.render import render

    text = render(report, "table")
    assert f"Time–energy Pareto front (fastest first, to {TARGET})" in text
    assert "Time to target" in text and "Energy to target" in text and "GPU-h to target" in text
    fig = pareto_figure(report)
    assert fig is not None
    ax = fig.axes[0]
    assert ax.get_xlabel() == "Time to target (s)"
    assert ax.get_ylabel().startswith("Energy to target (Wh")
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "time–energy front")
    assert list(line.get_xdata()) == pytest.approx([B_S, A_S])
    assert list(line.get_ydata()) == pytest.approx([B_WH, A_WH])
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_power_samples_cover_the_target_within_one_interval() -> None:
    """Samples at 0..9 s, one a second: a target met at 9.5 s is covered (the last sample
    stands for 9..10 s) and the 10 samples up to it are the whole energy; at 10.5 s it is not."""
    from test_report_builders import make_data, metric, run

    from itwin_report.report.energy_to_target import power_shares

    data = make_data([run("r0", "J", "ddp", 1)], metric("r0", "gpu_power_W", [50.0] * 10))
    shares = power_shares(data, set(), {"J": 9_500.0})
    assert shares == {"J": 1.0}
    assert power_shares(data, set(), {"J": 4_000.0}) == {"J": pytest.approx(5 / 10)}
    assert power_shares(data, set(), {"J": 10_500.0}) == {}
