"""The loader against a real ``mlflow server``: search pagination, bulk histories, downloads."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
import requests
from conftest import build_scaling_store, bulk_worker_runs

from itwin_report.store import api_reader, load_experiment, mlflow_api
from itwin_report.store.sql_open import open_sql_reader

pytestmark = pytest.mark.server

BIG_POINTS = 30_000  # one run's key alone overflows the 25,000-point page
MID_RUNS, MID_POINTS = 40, 700  # 40 x 700 = 28,000 points: a batch that must be split
N_BULK = 150  # more runs than the 100 a bulk request may name


@pytest.fixture(scope="module")
def http_scaling(mlflow_server: tuple[str, str]) -> dict[str, Any]:
    url, _ = mlflow_server
    return build_scaling_store(url, "http-scaling")


@pytest.fixture(scope="module")
def bulk_store(mlflow_server: tuple[str, str]) -> dict[str, Any]:
    """N_BULK flat runs written straight into the server's backend (fast), read over HTTP."""
    url, backend = mlflow_server
    runs = []
    for i in range(N_BULK):
        points = [("epoch_time_s", float(i + 1), i, s) for s in range(3)]
        if i < MID_RUNS:
            points += [("gpu_power_W", float(s), s, s) for s in range(MID_POINTS)]
        if i == N_BULK - 1:
            points += [("gpu_power_W", float(s), s, s) for s in range(BIG_POINTS)]
        params = {"strategy": "deepspeed", "global_rank": 0, "global_world_size": 1}
        runs.append({"name": f"bulk-{i:03d}", "start": i, "params": params, "metrics": points})
    return {"ids": bulk_worker_runs(backend, "http-bulk", runs, client_uri=url)}


def test_http_matches_direct_sql(mlflow_server: tuple[str, str], http_scaling: dict) -> None:
    url, backend = mlflow_server
    over_http = load_experiment(url, "http-scaling", show_progress=False)
    direct = load_experiment(backend, "http-scaling", show_progress=False)
    assert open_sql_reader(backend) is not None
    assert len(over_http.runs) == 10
    pd.testing.assert_frame_equal(over_http.runs, direct.runs)
    pd.testing.assert_frame_equal(over_http.metrics, direct.metrics)
    # the NaN point survives JSON and is then dropped as invalid, on both paths alike
    nan_dropped = (
        "dropped 1 gpu_utilization_percent point(s) of 'ddp-8': not >= 0 and <= 100 (1 NaN)"
    )
    assert nan_dropped in over_http.warnings and nan_dropped in direct.warnings


def test_http_artifacts_are_downloaded(mlflow_server: tuple[str, str], http_scaling: dict) -> None:
    url, _ = mlflow_server
    data = load_experiment(url, "http-scaling", show_progress=False)
    # artifacts live behind mlflow-artifacts:/ and come through the server
    assert data.profiles["self_cuda_time_total"].sum() == 900.5  # 600 + 300.5 + 0
    assert sorted(data.performance["records"]) == [1, 3]
    assert sum("malformed" in w for w in data.warnings) == 2
    assert data.tracking_uri == url


def test_bulk_histories_are_complete(
    mlflow_server: tuple[str, str], bulk_store: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = mlflow_server
    bulk_sizes: list[tuple[str, int]] = []
    request_lines: list[int] = []
    fallback: list[tuple[str, str]] = []
    real_get, real_history = api_reader.HttpSession.get, mlflow_api.metric_history

    def get(self: api_reader.HttpSession, path: str, params: Any, timeout: Any) -> Any:
        if path == api_reader.BULK_PATH:
            bulk_sizes.append((params["metric_key"], len(params["run_id"])))
            prepared = requests.Request("GET", self.base + path, params=params).prepare()
            request_lines.append(len(f"GET {prepared.path_url} HTTP/1.1"))
        return real_get(self, path, params, timeout)

    def history(uri: str, run_id: str, key: str) -> Any:
        fallback.append((run_id, key))
        return real_history(uri, run_id, key)

    monkeypatch.setattr(api_reader.HttpSession, "get", get)
    monkeypatch.setattr(mlflow_api, "metric_history", history)
    data = load_experiment(url, "http-bulk", show_progress=False)

    ids = bulk_store["ids"]
    assert len(data.runs) == N_BULK
    m = data.metrics
    counts = m.groupby(["run_id", "key"]).size()
    # epoch_time_s: 3 points for each of the 150 runs, in batches whose request line fits
    # gunicorn's 4,094 bytes: 40 bytes per run ("run_id=" + 32 hex + "&") -> 47 a request
    assert (counts.xs("epoch_time_s", level="key") == 3).all()
    assert len(counts.xs("epoch_time_s", level="key")) == N_BULK
    assert sorted(n for k, n in bulk_sizes if k == "epoch_time_s") == [9, 47, 47, 47]
    assert max(request_lines) <= api_reader.MAX_REQUEST_LINE < 4094
    power = m[m["key"] == "gpu_power_W"]
    per_run = power.groupby("run_id")["value"].agg(["size", "sum"])
    assert len(per_run) == MID_RUNS + 1
    for run in ids[:MID_RUNS]:  # 0 + 1 + ... + 699 = 699 * 700 / 2 = 244,650
        assert tuple(per_run.loc[run]) == (MID_POINTS, 244_650.0)
    # 0 + 1 + ... + 29,999 = 29,999 * 30,000 / 2 = 449,985,000
    assert tuple(per_run.loc[ids[-1]]) == (BIG_POINTS, 449_985_000.0)
    assert fallback == [(ids[-1], "gpu_power_W")]  # only the run that alone fills a page
    # the 41-run gpu_power_W batch (58,000 points) filled a page and was asked for again
    power_requests = [n for k, n in bulk_sizes if k == "gpu_power_W"]
    assert power_requests[0] == MID_RUNS + 1 and len(power_requests) >= 2


def test_split_token_keeps_the_rest_of_the_uri() -> None:
    split = api_reader.split_token
    assert split("http://h:5000/?token=abc") == ("http://h:5000/", "abc")
    assert split("https://h/mlflow?x=1&access_token=t&y=2") == ("https://h/mlflow?x=1&y=2", "t")
    assert split("http://h:5000") == ("http://h:5000", None)


def test_a_token_in_the_query_reads_the_store_and_is_never_shown(
    mlflow_server: tuple[str, str], http_scaling: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    url, _ = mlflow_server
    secret = "T0ken-in-the-query"
    monkeypatch.delenv("MLFLOW_TRACKING_TOKEN", raising=False)
    data = load_experiment(f"{url}/?token={secret}", "http-scaling", show_progress=False)
    direct = load_experiment(url, "http-scaling", show_progress=False)
    assert len(data.runs) == len(direct.runs) > 0
    assert len(data.metrics) == len(direct.metrics)
    assert secret not in data.tracking_uri and secret not in " ".join(data.warnings)
    assert "MLFLOW_TRACKING_TOKEN" not in os.environ  # given back when the reader closed
