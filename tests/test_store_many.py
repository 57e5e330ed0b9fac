"""More than 1,000 runs: nothing is truncated, on the direct path or through the API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import bulk_worker_runs, new_sqlite_store

from itwin_report.store import _load, load_experiment, mlflow_api
from itwin_report.store.api_reader import ApiReader

N_RUNS = 1005  # past MLflow's usual 1,000-run page and itwinai's cut-off


@pytest.fixture(scope="module")
def many_runs(tmp_path_factory: pytest.TempPathFactory, sqlite_store_template: Path) -> str:
    """N_RUNS flat worker runs; every 100th logs one epoch_time_s point (value = index)."""
    uri = new_sqlite_store(sqlite_store_template, tmp_path_factory.mktemp("many") / "many.db")
    params = {"strategy": "torch-ddp", "global_rank": 0, "global_world_size": 1}
    runs = [
        {
            "name": f"run-{i:04d}",
            "start": i,
            "params": params,
            "metrics": [("epoch_time_s", float(i), i, 0)] if i % 100 == 0 else [],
        }
        for i in range(N_RUNS)
    ]
    bulk_worker_runs(uri, "many", runs)
    return uri


def test_direct_reader_reads_all(many_runs: str) -> None:
    data = load_experiment(many_runs, "many", include_unfinished=True, show_progress=False)
    assert len(data.runs) == N_RUNS
    assert data.runs["run_name"].nunique() == N_RUNS
    # runs 0, 100, ..., 1000 logged one point each: 11 points summing to 0+100+...+1000 = 5500
    assert len(data.metrics) == 11 and data.metrics["value"].sum() == 5500.0


def test_api_reader_pages_through_all(many_runs: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pages: list[int] = []
    real = mlflow_api.client

    def counting_client(uri: str) -> Any:
        c = real(uri)
        search = c.search_runs

        def search_runs(*args: Any, **kwargs: Any) -> Any:
            page = search(*args, **kwargs)
            pages.append(len(page))
            return page

        c.search_runs = search_runs  # type: ignore[method-assign]
        return c

    monkeypatch.setattr(mlflow_api, "client", counting_client)
    data = _load(ApiReader(many_runs), many_runs, "many", (), True, False)
    assert len(data.runs) == N_RUNS
    assert pages[-2:] == [1000, 5]  # two pages of search_runs
    assert len(data.metrics) == 11 and data.metrics["value"].sum() == 5500.0
    assert Path(many_runs.removeprefix("sqlite:///")).is_file()
