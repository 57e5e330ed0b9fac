"""GPU energy, coverage, utilization and peak memory from MLflow's own system metrics.

Stores are real MLflow SQLite stores under tmp_path. Two are written by MLflow's own
``SystemMetricsMonitor`` (its GPU monitor reading a table of NVML answers instead of a device,
the clock of its metric batches set by the test: nothing sleeps); the others hold points with
exactly the keys, steps and timestamps that monitor logs, at 1 s, 10 s and irregular intervals.
Every expected number is worked out by hand in the comments.

The integration rule checked: each point stands for the time since the previous point of its
GPU's series, the first one for the series' median spacing.
"""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import T0, bulk_worker_runs, cli_runner, new_sqlite_store

import itwin_report as ir
from itwin_report.cli import main

TOTAL_BYTES = 80e9  # the GPUs' memory (NVML's total): 80,000 MB


def sys_points(
    node: str, gpus: dict[int, tuple[float, float, float]], times_s: list[float], start: int = 0
) -> list[tuple[str, float, int, int]]:
    """Points as MLflow's monitor logs them: per sample time (s after T0), for each GPU index
    ``i`` with (watts, utilization %, memory MB), the four keys, step = sample index."""
    prefix = f"system/{node}/" if node else "system/"
    out = []
    for step, t in enumerate(times_s, start=start):
        ts = T0 + round(t * 1000)
        for i, (watts, util, mb) in gpus.items():
            out.append((f"{prefix}gpu_{i}_power_usage_watts", watts, ts, step))
            out.append((f"{prefix}gpu_{i}_utilization_percentage", util, ts, step))
            out.append((f"{prefix}gpu_{i}_memory_usage_megabytes", mb + step, ts, step))
            pct = round((mb + step) * 1e6 / TOTAL_BYTES * 100, 1)
            out.append((f"{prefix}gpu_{i}_memory_usage_percentage", pct, ts, step))
    return out


def every(seconds: float, duration: float) -> list[float]:
    """Sample times of a monitor with this interval: the first one interval after the start."""
    return [seconds * (k + 1) for k in range(round(duration / seconds))]


IRREGULAR = [3, 1, 7, 2, 10, 4, 1, 6, 2, 9, 5, 3]  # seconds between samples; sum 53
IRREGULAR_TIMES = [float(sum(IRREGULAR[: k + 1])) for k in range(len(IRREGULAR))]


def flat(name: str, workers: int, points: list[Any], **params: Any) -> dict[str, Any]:
    """A one-run job (plain MLflow logging from rank 0): params, an epoch time, the points."""
    base = {"strategy": name, "global_world_size": workers, "global_rank": 0, **params}
    epochs = [("epoch_time_s", 50.0, T0, 0), ("epoch_time_s", 50.0, T0, 1)]
    return {"name": name, "start": T0, "params": base, "metrics": epochs + points}


def job(runs: list[dict[str, Any]], name: str, workers: list[list[Any]], **params: Any) -> None:
    """An itwinai-style job: a parent run, then one worker run per rank with ``workers[rank]``."""
    parent = len(runs)
    runs.append({"name": name, "start": T0, "params": {}, "metrics": []})
    for rank, points in enumerate(workers):
        base = {"strategy": name, "global_world_size": len(workers), "global_rank": rank}
        epochs = [("epoch_time_s", 50.0, T0, 0), ("epoch_time_s", 50.0, T0, 1)] if not rank else []
        runs.append(
            {
                "name": f"worker_{rank}",
                "start": T0,
                "params": {**base, **params},
                "metrics": epochs + points,
                "parent": parent,
            }
        )


def logged_store(template: Path, root: Path) -> str:
    runs = [
        # 2 GPUs x 300 W x 200 s / 3600 = 33.33 Wh; every 10 s
        flat(
            "flat-10s", 2, sys_points("", {0: (300, 50, 1000), 1: (300, 70, 2000)}, every(10, 200))
        ),
        # (200 + 220 + 240 + 260) W x 120 s / 3600 = 30.67 Wh; every 1 s
        flat(
            "flat-1s",
            4,
            sys_points(
                "",
                {0: (200, 40, 1000), 1: (220, 60, 2000), 2: (240, 80, 3000), 3: (260, 100, 4000)},
                every(1, 120),
            ),
        ),
        # 2 GPUs x 250 W over 53 s since the run's start = 7.36 Wh; irregular samples
        flat(
            "flat-irregular",
            2,
            sys_points("", {0: (250, 10, 500), 1: (250, 30, 500)}, IRREGULAR_TIMES),
        ),
    ]
    # itwinai-style: each of 4 ranks logs all 4 GPUs of the node (its monitor starting r/2 s
    # later); (300 + 325 + 350 + 375) W x 200 s / 3600 = 75 Wh
    node = {i: (300.0 + 25 * i, 20.0 + 20 * i, 1000.0 * (i + 1)) for i in range(4)}
    job(
        runs,
        "itwinai-style",
        [sys_points("", node, [t + r / 2 for t in every(10, 200)]) for r in range(4)],
    )
    # two nodes with node ids, every rank logging its node's 4 GPUs every 1 s for 60 s:
    # 4 x 300 W x 60 s + 4 x 200 W x 60 s = 20 + 13.33 = 33.33 Wh
    hot = {i: (300.0, 90.0, 5000.0) for i in range(4)}
    cool = {i: (200.0, 50.0, 3000.0) for i in range(4)}
    ranks = [
        sys_points("nid001" if r < 4 else "nid002", hot if r < 4 else cool, every(1, 60))
        for r in range(8)
    ]
    job(runs, "two-nodes", ranks)
    # the same, only each node's first rank logging
    job(runs, "two-nodes-local0", [ranks[0], [], [], [], ranks[4], [], [], []])
    uri = new_sqlite_store(template, root / "logged.db")
    bulk_worker_runs(uri, "system", runs)
    return uri


@pytest.fixture(scope="module")
def logged(sqlite_store_template: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    uri = logged_store(sqlite_store_template, tmp_path_factory.mktemp("system"))
    report = ir.build(ir.load(uri, "system"))
    return {"uri": uri, "report": report, "rows": report.gpu.set_index("strategy")}


@pytest.mark.parametrize(
    ("name", "hand_wh", "rule_wh"),
    [
        ("flat-10s", 2 * 300 * 200 / 3600, 2 * 300 * 200 / 3600),
        ("flat-1s", (200 + 220 + 240 + 260) * 120 / 3600, (200 + 220 + 240 + 260) * 120 / 3600),
        # the rule: the first point stands for the median spacing (4 s), not the 3 s it had:
        # 2 x 250 W x (50 + 4) s / 3600 = 7.5 Wh, 1.9 % above the 7.36 Wh of the hand sum
        ("flat-irregular", 2 * 250 * 53 / 3600, 2 * 250 * 54 / 3600),
        (
            "itwinai-style",
            (300 + 325 + 350 + 375) * 200 / 3600,
            (300 + 325 + 350 + 375) * 200 / 3600,
        ),
        ("two-nodes", (4 * 300 + 4 * 200) * 60 / 3600, (4 * 300 + 4 * 200) * 60 / 3600),
        ("two-nodes-local0", (4 * 300 + 4 * 200) * 60 / 3600, (4 * 300 + 4 * 200) * 60 / 3600),
    ],
)
def test_energy_is_power_over_the_timestamps_of_every_gpu(
    logged: dict[str, Any], name: str, hand_wh: float, rule_wh: float
) -> None:
    row = logged["rows"].loc[name]
    assert row["energy_wh"] == pytest.approx(hand_wh, rel=0.10)
    assert row["energy_wh"] == pytest.approx(rule_wh, rel=1e-9)
    assert row["energy_coverage"] == 1.0  # every GPU of the job measured: no estimate
    assert row["energy_source"] == "power samples"
    assert row["energy_wh_per_epoch"] == pytest.approx(rule_wh / 2)  # 2 epochs


@pytest.mark.parametrize(
    ("name", "utilization", "power", "peak_mb"),
    [
        ("flat-10s", (50 + 70) / 2, 300.0, 2000 + 19),  # 20 samples: the last step is 19
        ("flat-1s", (40 + 60 + 80 + 100) / 4, (200 + 220 + 240 + 260) / 4, 4000 + 119),
        ("flat-irregular", (10 + 30) / 2, 250.0, 500 + 11),
        ("itwinai-style", (20 + 40 + 60 + 80) / 4, (300 + 325 + 350 + 375) / 4, 4000 + 19),
        ("two-nodes", (4 * 90 + 4 * 50) / 8, (4 * 300 + 4 * 200) / 8, 5000 + 59),
    ],
)
def test_utilization_power_and_peak_memory_of_all_gpus(
    logged: dict[str, Any], name: str, utilization: float, power: float, peak_mb: float
) -> None:
    row = logged["rows"].loc[name]
    assert row["utilization_pct"] == pytest.approx(utilization)
    assert row["avg_power_w"] == pytest.approx(power)
    assert row["peak_gpu_memory_mb"] == pytest.approx(peak_mb)
    # of 80,000 MB, as MLflow rounds it (one decimal)
    assert row["peak_gpu_memory_pct"] == pytest.approx(round(peak_mb / 80_000 * 100, 1))


def test_no_guess_and_no_estimate_in_the_warnings(logged: dict[str, Any]) -> None:
    text = "\n".join(str(w) for w in logged["report"].warnings)
    assert "probing_interval" not in text
    assert "estimated" not in text
    assert "no GPU data" not in text


def test_json_table_and_page_carry_peak_memory(logged: dict[str, Any], tmp_path: Path) -> None:
    args = ["generate-scalability-report", "--tracking-uri", logged["uri"], "-e", "system"]
    args += ["--no-plots", "-q", "-r", "two-nodes"]
    result = cli_runner().invoke(main, [*args, "--format", "json"])
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)["gpu"]
    assert row["peak_gpu_memory_mb"] == 5059.0
    assert row["peak_gpu_memory_pct"] == round(5059 / 80_000 * 100, 1) == 6.3
    assert row["energy_coverage"] == 1.0
    result = cli_runner().invoke(main, [*args, "--format", "table"])
    assert result.exit_code == 0, result.stderr
    gpu = result.stdout.split("GPU energy and utilization")[1]
    assert "Peak memory" in gpu and "5059 MB" in gpu and "6.3 %" in gpu
    page = tmp_path / "report.html"
    result = cli_runner().invoke(main, [*args, "--format", "html", "-o", str(page)])
    assert result.exit_code == 0, result.stderr
    html = page.read_text(encoding="utf-8")
    table = html.split('<table id="table-gpu">')[1].split("</table>")[0]
    assert '<th class="num">Peak memory</th>' in table
    assert '<td class="num">5059 MB</td>' in table and '<td class="num">6.3 %</td>' in table


# ---------------------------------------------------------------- MLflow's own monitor


class FakeNvml(types.ModuleType):
    """The part of NVML that MLflow's GPU monitor calls (NVML's names), answering from a table.

    ``readings[i]`` is GPU ``i``'s (watts, utilization %, memory MB) now; the test changes it.
    """

    class NVMLError(Exception):
        pass

    def __init__(self, readings: dict[int, tuple[float, float, float]]) -> None:
        super().__init__("pynvml")
        self.readings = readings

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.readings)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetMemoryInfo(self, i: int) -> Any:
        return types.SimpleNamespace(used=self.readings[i][2] * 1e6, total=TOTAL_BYTES)

    def nvmlDeviceGetUtilizationRates(self, i: int) -> Any:
        return types.SimpleNamespace(gpu=self.readings[i][1])

    def nvmlDeviceGetPowerUsage(self, i: int) -> float:
        return self.readings[i][0] * 1000  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, i: int) -> float:
        return 700_000.0


def monitored_run(
    monkeypatch: pytest.MonkeyPatch,
    uri: str,
    run_id: str,
    readings: Callable[[int], dict[int, tuple[float, float, float]]],
    times_s: list[float],
    node_id: str | None = None,
) -> None:
    """Log ``run_id``'s system metrics with MLflow's own monitor: at each sample time (s after
    T0) its GPU monitor reads ``readings(sample)``, and it logs as its loop does (one sample
    per logged point, MLflow's default)."""
    import mlflow.utils.autologging_utils as batching
    from mlflow.system_metrics.metrics import gpu_monitor
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    nvml = FakeNvml(readings(0))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(gpu_monitor, "pynvml", nvml, raising=False)
    clock = types.SimpleNamespace(now=T0 / 1000)
    monkeypatch.setattr(batching, "time", types.SimpleNamespace(time=lambda: clock.now))
    monitor = SystemMetricsMonitor(run_id, sampling_interval=10, node_id=node_id, tracking_uri=uri)
    assert isinstance(monitor.monitors[-1], gpu_monitor.GPUMonitor)
    for sample, t in enumerate(times_s):
        nvml.readings = readings(sample)
        clock.now = T0 / 1000 + t
        monitor.collect_metrics()
        monitor.publish_metrics(monitor.aggregate_metrics())
    monitor.mlflow_logger.flush()


def _monitor_takes_a_store() -> bool:
    """Whether this MLflow's SystemMetricsMonitor takes ``tracking_uri`` and holds NVML in its
    GPU monitor module: the two hooks this test drives it through (older MLflow logs to the
    active tracking URI and imports NVML elsewhere; the other tests log the same keys directly)."""
    import inspect

    from mlflow.system_metrics.metrics import gpu_monitor
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    params = inspect.signature(SystemMetricsMonitor.__init__).parameters
    # the GPU monitor reads NVML through its module's global ``pynvml`` (set by the test
    # whether or not nvidia-ml-py is installed)
    return (
        "tracking_uri" in params and "pynvml" in gpu_monitor.GPUMonitor.__init__.__code__.co_names
    )


@pytest.mark.skipif(
    not _monitor_takes_a_store(), reason="this MLflow's monitor has no tracking_uri/NVML hooks"
)
def test_stores_written_by_mlflows_own_monitor(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'monitor.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("monitored")

    def run(name: str, params: dict[str, Any], parent: str | None = None) -> str:
        tags = {"mlflow.parentRunId": parent} if parent else None
        run_id = client.create_run(exp, start_time=T0, run_name=name, tags=tags).info.run_id
        for key, value in params.items():
            client.log_param(run_id, key, value)
        client.log_metric(run_id, "epoch_time_s", 100.0, timestamp=T0, step=0)
        return str(run_id)

    # a flat job on 4 GPUs, every 10 s for 200 s, GPU i at 300 + 10 i W (i-th sample adds
    # nothing); (300 + 310 + 320 + 330) W x 200 s / 3600 = 70 Wh; utilization 10 i + 50
    flat_id = run("flat", {"strategy": "flat", "global_world_size": 4, "global_rank": 0})
    monitored_run(
        monkeypatch,
        uri,
        flat_id,
        lambda s: {i: (300.0 + 10 * i, 50.0 + 10 * i, 1000.0 + s) for i in range(4)},
        every(10, 200),
    )
    client.set_terminated(flat_id, end_time=T0 + 200_000)
    # two nodes, 2 GPUs each, one run per node (each node's first rank) with the node id:
    # 2 x 400 W x 100 s + 2 x 100 W x 100 s = 27.78 Wh
    top = run("nodes", {})
    for rank, node, watts in ((0, "n0", 400.0), (2, "n1", 100.0)):
        params = {"strategy": "nodes", "global_world_size": 4, "global_rank": rank}
        worker = run(f"worker_{rank}", params, top)
        monitored_run(
            monkeypatch,
            uri,
            worker,
            lambda s, w=watts: {i: (w, 75.0, 2000.0 * (i + 1)) for i in range(2)},
            every(10, 100),
            node_id=node,
        )
        client.set_terminated(worker, end_time=T0 + 100_000)
    client.set_terminated(top, end_time=T0 + 100_000)
    keys = {m.key for m in client.get_metric_history(worker, "system/n1/gpu_1_power_usage_watts")}
    assert keys == {"system/n1/gpu_1_power_usage_watts"}
    history = client.get_metric_history(flat_id, "system/gpu_3_power_usage_watts")
    assert [m.step for m in history] == list(range(20))  # step = sample index, not seconds
    assert [m.timestamp for m in history][:2] == [T0 + 10_000, T0 + 20_000]

    rows = ir.build(ir.load(uri, "monitored")).gpu.set_index("strategy")
    assert rows.loc["flat", "energy_wh"] == pytest.approx((300 + 310 + 320 + 330) * 200 / 3600)
    assert rows.loc["flat", "energy_coverage"] == 1.0
    assert rows.loc["flat", "utilization_pct"] == pytest.approx((50 + 60 + 70 + 80) / 4)
    assert rows.loc["flat", "peak_gpu_memory_mb"] == pytest.approx(1019.0)
    assert rows.loc["flat", "peak_gpu_memory_pct"] == pytest.approx(1.3)  # 1019 / 80,000
    assert rows.loc["nodes", "energy_wh"] == pytest.approx((2 * 400 + 2 * 100) * 100 / 3600)
    assert rows.loc["nodes", "energy_coverage"] == 1.0
    assert rows.loc["nodes", "utilization_pct"] == pytest.approx(75.0)
    assert rows.loc["nodes", "peak_gpu_memory_mb"] == pytest.approx(4000.0)


# ---------------------------------------------------------------- both kinds, and bad timing


def test_itwinai_keys_win_and_a_store_may_hold_both_kinds(
    sqlite_store_template: Path, tmp_path: Path
) -> None:
    own = [("gpu_power_W", 100.0, T0 + 1000 * s, s) for s in range(36)]  # 1 s each (param)
    runs = [
        # itwinai's power (36 x 100 W x 1 s = 1 Wh) beside system metrics of its 2 GPUs: the
        # system power is left out, the system memory still gives the peak
        flat(
            "both",
            1,
            own + sys_points("", {0: (300, 50, 700), 1: (300, 50, 800)}, every(10, 100)),
            probing_interval=1,
        ),
        # a job of system metrics only, in the same store: 2 x 300 W x 100 s = 16.67 Wh
        flat(
            "system-only", 2, sys_points("", {0: (300, 50, 700), 1: (300, 50, 800)}, every(10, 100))
        ),
    ]
    uri = new_sqlite_store(sqlite_store_template, tmp_path / "both.db")
    bulk_worker_runs(uri, "both", runs)
    rows = ir.build(ir.load(uri, "both")).gpu.set_index("strategy")
    assert rows.loc["both", "energy_wh"] == pytest.approx(1.0)
    assert rows.loc["both", "avg_power_w"] == pytest.approx(100.0)
    assert rows.loc["both", "utilization_pct"] == pytest.approx(50.0)  # no itwinai utilization
    assert rows.loc["both", "peak_gpu_memory_mb"] == pytest.approx(809.0)
    assert rows.loc["system-only", "energy_wh"] == pytest.approx(2 * 300 * 100 / 3600)


BAD = [("system/gpu_0_power_usage_watts", -5.0), ("system/gpu_0_utilization_percentage", 150.0)]


def test_a_pause_counts_as_one_interval_and_no_spacing_is_unknown(
    sqlite_store_template: Path, tmp_path: Path
) -> None:
    gpu = {0: (360.0, 50.0, 100.0)}
    # a resumed run: 10 points every 10 s, an hour's pause, 10 more (steps go on): the pause
    # counts as one 10 s interval, so 20 x 360 W x 10 s / 3600 = 20 Wh (not 380 Wh)
    first = sys_points("", gpu, every(10, 100))
    second = sys_points("", gpu, [3700 + t for t in every(10, 100)], start=10)
    runs = [
        flat("resumed", 1, first + second),
        flat("one-point", 1, sys_points("", gpu, [10.0])),
        flat("same-time", 1, sys_points("", gpu, [5.0, 5.0, 5.0])),  # all at one time
        # out of range: -5 W and 150 % at an 11th sample are dropped: 10 x 360 W x 10 s = 10 Wh
        flat("bad-values", 1, first + [(key, value, T0 + 110_000, 10) for key, value in BAD]),
    ]
    uri = new_sqlite_store(sqlite_store_template, tmp_path / "gaps.db")
    bulk_worker_runs(uri, "gaps", runs)
    report = ir.build(ir.load(uri, "gaps"))
    rows = report.gpu.set_index("strategy")
    assert rows.loc["resumed", "energy_wh"] == pytest.approx(20 * 360 * 10 / 3600)
    assert rows.loc["one-point"].isna()["energy_wh"]
    assert rows.loc["same-time"].isna()["energy_wh"]
    text = "\n".join(str(w) for w in report.warnings)
    assert "1 gap in the GPU system metrics of resumed" in text
    assert "GPU energy of one-point; same-time is unknown" in text
    assert rows.loc["bad-values", "energy_wh"] == pytest.approx(10 * 360 * 10 / 3600)
    assert rows.loc["bad-values", "utilization_pct"] == pytest.approx(50.0)
    assert "dropped 1 system/gpu_0_power_usage_watts point(s) of 'bad-values'" in text
    assert "dropped 1 system/gpu_0_utilization_percentage point(s) of 'bad-values'" in text


def test_node_ids_through_an_http_server(mlflow_server: tuple[str, str]) -> None:
    """Keys with a node id (a slash, a space) come back through the REST API alike."""
    url, backend = mlflow_server
    # two nodes, each node's first rank logging its 2 GPUs every 10 s for 100 s:
    # 2 x 300 W x 100 s + 2 x 200 W x 100 s = 27.78 Wh
    hot, cool = {0: (300.0, 80.0, 900.0), 1: (300.0, 80.0, 900.0)}, {0: (200.0, 40.0, 700.0)}
    cool[1] = cool[0]
    runs: list[dict[str, Any]] = []
    ranks = [
        sys_points("rack 1/n1", hot, every(10, 100)),
        [],
        sys_points("n2", cool, every(10, 100)),
        [],
    ]
    job(runs, "http-nodes", ranks)
    bulk_worker_runs(backend, "http-system", runs, client_uri=url)
    rows = ir.build(ir.load(url, "http-system")).gpu.set_index("strategy")
    assert rows.loc["http-nodes", "energy_wh"] == pytest.approx((2 * 300 + 2 * 200) * 100 / 3600)
    assert rows.loc["http-nodes", "energy_coverage"] == 1.0
    assert rows.loc["http-nodes", "utilization_pct"] == pytest.approx((80 + 40) / 2)
    assert rows.loc["http-nodes", "peak_gpu_memory_mb"] == pytest.approx(909.0)
