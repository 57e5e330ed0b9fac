"""The loader against a real ``mlflow server``: search pagination, bulk histories, downloads."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pandas as pd
import pytest
import requests
from conftest import build_scaling_store, bulk_worker_runs

from itwin_report.store import _load, api_reader, load_experiment, rest
from itwin_report.store.sql_open import open_sql_reader

pytestmark = pytest.mark.server

BIG_POINTS = 30_000  # one run's key alone overflows the 25,000-point page
MID_RUNS, MID_POINTS = 40, 700  # 40 x 700 = 28,000 points: a batch that must be split
N_BULK = 150  # more runs than the 100 a bulk request may name


@pytest.fixture(autouse=True)
def patient_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test server has one worker and the machine may be busy: a request that timed out
    would be asked again and change the counts these tests assert."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")


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


def _bulk_requests(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str], int]]:
    """(key, run ids, request line length) of every bulk request the reader sends from now."""
    sent: list[tuple[str, list[str], int]] = []
    real_send = rest.HttpSession.send

    def send(self: rest.HttpSession, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        if path == api_reader.BULK_PATH:
            params = kwargs["params"]
            prepared = requests.Request(method, self.base + path, params=params).prepare()
            line = len(f"{method} {prepared.path_url} HTTP/1.1")
            sent.append((params["metric_key"], list(params["run_id"]), line))
        return real_send(self, method, path, *args, **kwargs)

    monkeypatch.setattr(rest.HttpSession, "send", send)
    return sent


def test_bulk_histories_are_complete(
    mlflow_server: tuple[str, str], bulk_store: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = mlflow_server
    fallback: list[tuple[str, str]] = []
    real_history = api_reader.ApiReader._history

    def history(self: api_reader.ApiReader, run_id: str, key: str) -> Any:
        fallback.append((run_id, key))
        return real_history(self, run_id, key)

    sent = _bulk_requests(monkeypatch)
    monkeypatch.setattr(api_reader.ApiReader, "_history", history)
    data = load_experiment(url, "http-bulk", show_progress=False)

    ids = bulk_store["ids"]
    assert len(data.runs) == N_BULK
    m = data.metrics
    counts = m.groupby(["run_id", "key"], observed=True).size()  # run_id, key: categoricals
    # epoch_time_s: 3 points for each of the 150 runs, in batches whose request line fits
    # within 2,000 bytes: 40 bytes per run ("run_id=" + 32 hex + "&") -> 47 a request
    assert (counts.xs("epoch_time_s", level="key") == 3).all()
    assert len(counts.xs("epoch_time_s", level="key")) == N_BULK
    assert sorted(len(run_ids) for k, run_ids, _ in sent if k == "epoch_time_s") == [9, 47, 47, 47]
    assert max(line for *_, line in sent) <= api_reader.MAX_REQUEST_LINE < 4094
    power = m[m["key"] == "gpu_power_W"]
    per_run = power.groupby("run_id", observed=True)["value"].agg(["size", "sum"])
    assert len(per_run) == MID_RUNS + 1
    for run in ids[:MID_RUNS]:  # 0 + 1 + ... + 699 = 699 * 700 / 2 = 244,650
        assert tuple(per_run.loc[run]) == (MID_POINTS, 244_650.0)
    # 0 + 1 + ... + 29,999 = 29,999 * 30,000 / 2 = 449,985,000
    assert tuple(per_run.loc[ids[-1]]) == (BIG_POINTS, 449_985_000.0)
    assert fallback == [(ids[-1], "gpu_power_W")]  # only the run that alone fills a page
    # 41 runs (58,000 points): the page holds 35 whole runs (24,500 points) and 500 points of
    # the 36th; the 36th and the 5 after it are asked for once more, in one request (3,500 +
    # 21,500 points of the big run: full again); then the big run alone (a full page), and
    # it is read page by page
    power_requests = [run_ids for k, run_ids, _ in sent if k == "gpu_power_W"]
    assert [len(r) for r in power_requests] == [MID_RUNS + 1, 6, 1]
    assert power_requests[1] == [*ids[35:MID_RUNS], ids[-1]]


def test_each_request_once_and_counted(mlflow_server: tuple[str, str], http_scaling: dict) -> None:
    """A report reads each bulk history and artifact once; the server logged what it counts."""
    url, backend = mlflow_server
    log = Path(backend.removeprefix("sqlite:///")).parent / "server.log"
    logged_before = _logged_paths(log)
    reader = api_reader.ApiReader(url)
    try:
        experiments = len(reader.experiments())
        data = _load(reader, url, "http-scaling", (), False, False)
        sent = reader.requests
    finally:
        reader.close()
    workers = len(data.runs)
    assert workers == 10
    # the probe, the listing twice (once above); one page of runs, and a run looked for in
    # each experiment when there are several to choose from (twice: once above)
    assert sent[rest.EXPERIMENTS_PATH] == 3
    assert sent[rest.RUNS_PATH] == 1 + (2 * experiments if experiments > 1 else 0)
    # every worker's histories fit one request per key (10 runs, a few hundred points)
    assert sent[api_reader.BULK_PATH] == data.metrics["key"].nunique() == 3
    # the experiment's folder in the server's artifact store is listed once; a worker whose
    # own folder is not in it logged no artifact and is not asked; the others are asked once
    # per artifact (MLflow 3 answers 404 for a missing one: no other listing)
    exp_id = str(http_scaling["experiment_id"])
    folder = Path(backend.removeprefix("sqlite:///")).parent / "artifacts" / exp_id
    logged_some = {p.name for p in folder.iterdir()} & set(data.runs["run_id"])
    assert 0 < len(logged_some) < workers
    downloads = {p: n for p, n in sent.items() if p.startswith(rest.ARTIFACTS_PATH + "/")}
    asked = {re.sub(rf"^{rest.ARTIFACTS_PATH}/{exp_id}/([^/]+)/.*", r"\1", p) for p in downloads}
    assert asked == logged_some and set(downloads.values()) == {1}
    assert len(downloads) == 2 * len(logged_some)
    # MLflow 3 answers 404 for a missing file; 2.x answers 500, told apart from a failure by one
    # listing of the file's folder
    on_disk = folder.parent
    missing = sum(
        not (on_disk / unquote(p.removeprefix(rest.ARTIFACTS_PATH + "/"))).is_file()
        for p in downloads
    )
    old_server = int(metadata.version("mlflow").split(".")[0]) < 3
    assert sent[rest.ARTIFACTS_PATH] == 1 + (missing if old_server else 0)
    if old_server:
        return  # MLflow 2.x's gunicorn keeps no access log unless asked: nothing to compare
    # the server logged the same requests (its access log is written as it answers)
    deadline = time.monotonic() + 10
    while True:
        logged = _logged_paths(log) - logged_before
        if logged == Counter(sent) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert {p: n for p, n in logged.items() if p in sent} == sent


def _logged_paths(log: Path) -> Counter[str]:
    """How many requests ``mlflow server``'s access log holds for each path (query left out)."""
    lines = log.read_text(encoding="utf-8", errors="replace")
    return Counter(unquote(m) for m in re.findall(r'"(?:GET|POST) ([^? ]+)\S* HTTP/1\.1"', lines))


def test_reading_a_server_needs_no_mlflow_client(
    mlflow_server: tuple[str, str], http_scaling: dict
) -> None:
    """Runs, metrics and artifacts of a server come without importing MLflow (2.5 s)."""
    url, _ = mlflow_server
    script = (
        "import sys\n"
        "from itwin_report.store.api_reader import ApiReader\n"
        "from itwin_report.store import _load\n"
        f"reader = ApiReader({url!r})\n"
        f"data = _load(reader, {url!r}, 'http-scaling', (), False, False)\n"
        "print(len(data.runs), len(data.profiles) > 0, 'mlflow' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["10", "True", "False"]


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
    before = dict(os.environ)
    data = load_experiment(f"{url}/?token={secret}", "http-scaling", show_progress=False)
    assert dict(os.environ) == before  # no token, timeout or retry setting left behind
    direct = load_experiment(url, "http-scaling", show_progress=False)
    assert len(data.runs) == len(direct.runs) > 0
    assert len(data.metrics) == len(direct.metrics)
    assert secret not in data.tracking_uri and secret not in " ".join(data.warnings)
    assert dict(os.environ) == before


def test_artifact_folders_are_listed_in_one_request_each(
    mlflow_server: tuple[str, str], http_scaling: dict
) -> None:
    url, _ = mlflow_server
    ddp4 = http_scaling["jobs"][0][2][0]  # the worker run that logged the profile
    reader = api_reader.ApiReader(url)
    try:
        runs, _ = reader.runs(http_scaling["experiment_id"], [])
        root = runs.set_index("run_id").loc[ddp4, "artifact_uri"]
        before = reader.requests.get(rest.ARTIFACTS_PATH, 0)
        top = reader.list_artifacts(root)
        inside = reader.list_artifacts(root, "torch_profiling_averages/")
        nothing = reader.list_artifacts(root, "no-such-folder")
        listings = reader.requests[rest.ARTIFACTS_PATH] - before
        elsewhere = reader.list_artifacts("s3://bucket/1/run/artifacts")
    finally:
        reader.close()
    assert top == [("torch_profiling_averages", True)]
    assert inside == [("torch_profiling_averages/torch_profiling_averages.csv", False)]
    assert nothing == [] and elsewhere is None
    assert listings == 3


def test_a_folder_is_listed_only_when_runs_share_it() -> None:
    runs = [f"mlflow-artifacts:/1/run{i}/artifacts" for i in range(4)]
    few = ["mlflow-artifacts:/2/lone/artifacts", "mlflow-artifacts:/2/other/artifacts"]
    elsewhere = ["s3://bucket/1/x/artifacts", "mlflow-artifacts://host:5000/1/y/artifacts"]
    shared = api_reader.shared_folders([*runs, *few, *elsewhere], at_least=4)
    assert {uri: shared[uri] for uri in runs} == {uri: ("1", uri.split("/")[2]) for uri in runs}
    # experiment 2's two runs share only the store's top folder with the others: 6 roots
    assert shared[few[0]] == ("", "2")
    assert not set(elsewhere) & set(shared)  # not behind this server's proxy
    assert api_reader.shared_folders(few, at_least=4) == {}


def test_run_pages_asked_ahead_are_the_pages_asked_in_turn(
    mlflow_server: tuple[str, str], bulk_store: dict
) -> None:
    """MLflow's page tokens are offsets: the pages after the first are asked for together,
    and the runs come back as one page after the other gives them, each once, in order."""
    import threading

    from itwin_report.store.http import HttpSession
    from itwin_report.store.paging import offset_token, search_pages

    url, _ = mlflow_server
    http = HttpSession(url)
    try:
        found = http.json("POST", rest.EXPERIMENTS_PATH, None, body={"max_results": 100})
        (experiment,) = [
            e["experiment_id"] for e in found["experiments"] if e["name"] == "http-bulk"
        ]
        body = {"experiment_ids": [experiment], "max_results": 40}  # 150 runs: 4 pages
        asked: list[tuple[str | None, str]] = []
        plain_json = http.json

        def json(method: str, path: str, what: Any, **kwargs: Any) -> dict[str, Any]:
            token = (kwargs.get("body") or {}).get("page_token")
            asked.append((token, threading.current_thread().name))
            return plain_json(method, path, what, **kwargs)

        http.json = json  # type: ignore[method-assign]
        in_turn = [
            r["info"]["run_id"] for r in search_pages(http, rest.RUNS_PATH, body, "runs", "s")
        ]
        assert len(asked) == 4 and all(name == threading.current_thread().name for _, name in asked)
        asked.clear()
        ahead = search_pages(http, rest.RUNS_PATH, body, "runs", "search runs", ahead=4)
        assert [r["info"]["run_id"] for r in ahead] == in_turn
        ahead_asked = list(asked)
        asked.clear()  # a first page of 10 runs, then pages of 40 from offset 10
        short = search_pages(http, rest.RUNS_PATH, body, "runs", "s", ahead=4, first=10)
        assert [r["info"]["run_id"] for r in short] == in_turn
    finally:
        http.close()
    assert sorted(in_turn) == sorted(bulk_store["ids"]) and len(set(in_turn)) == 150
    # the first page alone, then pages 2 to 4 (and beyond the end) from the helper threads
    assert ahead_asked[0] == (None, threading.current_thread().name)
    helpers = {token for token, name in ahead_asked if name.startswith("itwin-report-pages")}
    assert {offset_token(40), offset_token(80), offset_token(120)} <= helpers
    assert len(ahead_asked) <= 1 + 4 + 3  # at most the pages ahead past the end are spent
    helpers = {token for token, name in asked if name.startswith("itwin-report-pages")}
    assert asked[0][0] is None
    assert {offset_token(10), offset_token(50), offset_token(90), offset_token(130)} <= helpers
