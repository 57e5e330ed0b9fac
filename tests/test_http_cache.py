"""The local cache of a server's finished runs: used only while the run listing shows a run
unchanged, per origin, never holding credentials, safe when damaged or shared."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import T0, cli_runner

from itwin_report.cli import main
from itwin_report.store import _load, load_experiment
from itwin_report.store.api_reader import BULK_PATH, ApiReader
from itwin_report.store.http_cache import (
    CacheSettings,
    HttpCache,
    default_cache_dir,
    origin_of,
    parse_size,
)

pytestmark = pytest.mark.server


@pytest.fixture(autouse=True)
def patient_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """One server worker on a busy machine: a retried request would change the counts."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")


def write_experiment(url: str, name: str) -> dict[str, Any]:
    """Three flat jobs (one run each, FINISHED) and one still RUNNING; every point's value is
    known to the test: epoch_time_s = 10 * workers + step, gpu_power_W = 100 + step. The RUNNING
    run logs only gpu_utilization_percent: a bulk request for that key is for it alone."""
    from itwin_report.emulator.mlflow_writer import ClientWriter

    w = ClientWriter(url)
    exp = w.experiment_id(name)
    runs = {}
    for i, (strategy, size) in enumerate([("ddp", 1), ("ddp", 2), ("deepspeed", 2), ("ddp", 4)]):
        t = T0 + i * 100_000
        run = w.create_run(exp, f"{strategy}-{size}", t)
        points = [("epoch_time_s", 10.0 * size + s, t + s * 1000, s) for s in range(3)]
        points += [("gpu_power_W", 100.0 + s, t + s * 1000, s) for s in range(4)]
        if size == 4:
            points = [("gpu_utilization_percent", 50.0 + s, t + s * 1000, s) for s in range(4)]
        params = {"strategy": strategy, "global_rank": 0, "global_world_size": size}
        w.log_batch(run, points, params)
        if size != 4:
            w.end_run(run, t + 60_000)
        runs[f"{strategy}-{size}"] = run
    return {"experiment_id": exp, "runs": runs, "writer": w}


def read(url: str, name: str, cache: Path | None) -> tuple[Any, dict[str, int], list[str]]:
    """(loaded data, requests per path, reader warnings) of one load through a fresh reader."""
    settings = CacheSettings(cache) if cache is not None else None
    reader = ApiReader(url, settings)
    try:
        data = _load(reader, url, name, (), True, False)
        return data, reader.requests, list(data.warnings)
    finally:
        reader.close()


def raw_points(
    url: str, exp: Any, ids: list[str], cache: Path
) -> tuple[pd.DataFrame, set[tuple[str, str]]]:
    """(points of ``ids`` as the reader returns them, the (run, key) pairs asked of the server),
    below the worker selection, so that a run of any status can be asked for."""
    asked: set[tuple[str, str]] = set()

    class Spy(ApiReader):
        def _bulk(self, ids: list[str], key: str) -> pd.DataFrame:
            asked.update((i, key) for i in ids)
            return super()._bulk(ids, key)

    reader = Spy(url, CacheSettings(cache))
    try:
        reader.runs(exp, ["strategy"])
        points = reader.metrics(exp, ids, lambda n: None)
        assert reader.requests.get(BULK_PATH, 0) == len({k for _, k in asked})
        return points, asked
    finally:
        reader.close()


def sorted_points(points: pd.DataFrame) -> pd.DataFrame:
    frame = points.astype({"run_id": str, "key": str})
    return frame.sort_values(["run_id", "key", "step"]).reset_index(drop=True)


def test_the_second_report_reads_no_history_and_matches_the_direct_read(
    mlflow_server: tuple[str, str], tmp_path: Path
) -> None:
    url, backend = mlflow_server
    write_experiment(url, "cache-second")
    first, sent1, _ = read(url, "cache-second", tmp_path)
    second, sent2, warnings2 = read(url, "cache-second", tmp_path)
    direct = load_experiment(backend, "cache-second", include_unfinished=True, show_progress=False)
    # three keys: one bulk request each the first time; the second time only the RUNNING run's
    # key is asked for (never cached), the three finished runs' are not
    assert sent1[BULK_PATH] == 3
    assert sent2[BULK_PATH] == 1
    ended = set(direct.runs.loc[direct.runs["run_name"] != "ddp-4", "run_id"])
    assert len(ended) == 3
    for data in (first, second):
        pd.testing.assert_frame_equal(data.runs, direct.runs)
        pd.testing.assert_frame_equal(data.metrics, direct.metrics)
    assert not [w for w in warnings2 if "cache" in w]
    # every finished run alone: nothing is asked of the server
    only_ended = read_ended(url, "cache-second", tmp_path, sorted(ended))
    assert only_ended == 0


def read_ended(url: str, name: str, cache: Path, ids: list[str]) -> int:
    reader = ApiReader(url, CacheSettings(cache))
    try:
        exp = next(i for i, n, _ in reader.experiments() if n == name)
        reader.runs(exp, ["strategy"])
        reader.metrics(exp, ids, lambda n: None)
        return reader.requests.get(BULK_PATH, 0)
    finally:
        reader.close()


def test_a_run_changed_on_the_server_is_read_again(
    mlflow_server: tuple[str, str], tmp_path: Path
) -> None:
    url, _ = mlflow_server
    made = write_experiment(url, "cache-changed")
    exp, runs, w = made["experiment_id"], made["runs"], made["writer"]
    ids = sorted(runs[k] for k in ("ddp-1", "ddp-2", "deepspeed-2"))
    keys = ("epoch_time_s", "gpu_power_W")
    first, asked = raw_points(url, exp, ids, tmp_path)
    assert asked == {(i, k) for i in ids for k in keys} and len(first) == 3 * 7
    assert raw_points(url, exp, ids, tmp_path)[1] == set()
    # a point appended to one run: that run's keys are asked again, and the point is there
    w.log_batch(runs["ddp-2"], [("gpu_power_W", 555.0, T0 + 10**6, 9)])
    points, asked = raw_points(url, exp, ids, tmp_path)
    assert asked == {(runs["ddp-2"], k) for k in keys}  # the others come from the cache
    mine = points[points["run_id"].astype(str) == runs["ddp-2"]]
    assert sorted(mine.loc[mine["key"] == "gpu_power_W", "value"]) == [100, 101, 102, 103, 555]
    assert len(points) == 3 * 7 + 1
    assert raw_points(url, exp, ids, tmp_path)[1] == set()
    # a status changed: read again
    w.end_run(runs["deepspeed-2"], T0 + 10**6, status="FAILED")
    points, asked = raw_points(url, exp, ids, tmp_path)
    assert asked == {(runs["deepspeed-2"], k) for k in keys}
    expected = sorted([10.0 * 2 + s for s in range(3)] + [100.0 + s for s in range(4)])
    again = points[points["run_id"].astype(str) == runs["deepspeed-2"]]
    assert sorted(again["value"]) == expected


def test_origins_never_share_entries(mlflow_server: tuple[str, str], tmp_path: Path) -> None:
    url, _ = mlflow_server
    write_experiment(url, "cache-origins")
    read(url, "cache-origins", tmp_path)
    other = url.replace("127.0.0.1", "localhost")
    _, sent, _ = read(other, "cache-origins", tmp_path)
    assert sent[BULK_PATH] == 3  # another host name is another origin: read from the server
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2
    # port, path and scheme make an origin; credentials, query and fragment do not
    assert origin_of("http://h:5000/a") != origin_of("http://h:5000/b")
    assert origin_of("http://h:5000/a") != origin_of("http://h:5001/a")
    assert origin_of("http://h/a") != origin_of("https://h/a")
    assert origin_of("http://u:pw@H:5000/a/?token=x#f") == origin_of("http://h:5000/a")
    assert origin_of("http://h/a") == "http://h:80/a"


def test_credentials_appear_in_no_cache_path_or_file(
    mlflow_server: tuple[str, str], tmp_path: Path
) -> None:
    url, _ = mlflow_server
    write_experiment(url, "cache-secret")
    host = url.removeprefix("http://")
    secret_url = f"http://alice:pw-S3CRET-1@{host}/?token=tok-S3CRET-2"
    data, sent, _ = read(secret_url, "cache-secret", tmp_path)
    assert sent[BULK_PATH] == 3 and len(data.runs) == 4
    files = [p for p in tmp_path.rglob("*")]
    assert any(p.is_file() for p in files)
    for p in files:
        assert "S3CRET" not in str(p) and "alice" not in str(p)
        if p.is_file():
            body = p.read_bytes()
            assert b"S3CRET" not in body and b"alice" not in body
    # the same server without credentials is the same origin: served from the cache
    assert read(url, "cache-secret", tmp_path)[1][BULK_PATH] == 1  # the RUNNING run only


def test_a_truncated_or_foreign_cache_file_is_a_warning(
    mlflow_server: tuple[str, str], tmp_path: Path
) -> None:
    url, backend = mlflow_server
    write_experiment(url, "cache-damaged")
    write_experiment(url, "cache-foreign")
    read(url, "cache-damaged", tmp_path)
    read(url, "cache-foreign", tmp_path)
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    files = sorted(folder.glob("*.parquet"), key=lambda p: p.stat().st_mtime)
    assert len(files) == 2
    damaged, foreign = files
    direct = load_experiment(backend, "cache-damaged", include_unfinished=True, show_progress=False)

    damaged.write_bytes(damaged.read_bytes()[:100])  # cut short
    data, sent, warnings = read(url, "cache-damaged", tmp_path)
    assert sent[BULK_PATH] == 3
    assert [w for w in warnings if w.startswith("ignored the cache file")]
    pd.testing.assert_frame_equal(data.metrics, direct.metrics)
    assert read(url, "cache-damaged", tmp_path)[1][BULK_PATH] == 1  # rewritten whole

    damaged.write_bytes(foreign.read_bytes())  # another experiment's file in its place
    data, sent, warnings = read(url, "cache-damaged", tmp_path)
    assert sent[BULK_PATH] == 3
    assert [w for w in warnings if "another server, experiment or format" in w]
    pd.testing.assert_frame_equal(data.metrics, direct.metrics)

    damaged.write_bytes(b"PAR1 not a parquet file at all PAR1")
    data, _, warnings = read(url, "cache-damaged", tmp_path)
    assert [w for w in warnings if w.startswith("ignored the cache file")]
    pd.testing.assert_frame_equal(data.metrics, direct.metrics)


def test_two_reports_at_once_share_the_cache(
    mlflow_server: tuple[str, str], tmp_path: Path
) -> None:
    url, _ = mlflow_server
    write_experiment(url, "cache-together")
    cache = tmp_path / "cache"
    cmd = [
        sys.executable,
        "-m",
        "itwin_report",
        "generate-scalability-report",
        "-e",
        "cache-together",
        "--tracking-uri",
        url,
        "--include-unfinished",
        "--format",
        "json",
        "--no-plots",
        "-q",
        "--cache-dir",
        str(cache),
    ]
    env = {**os.environ, "MLFLOW_HTTP_REQUEST_TIMEOUT": "120"}
    procs = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert outs[0][0] == outs[1][0] and '"epoch_time"' in outs[0][0]
    assert "cache" not in outs[0][1] + outs[1][1]
    # the file one of them left is whole: the next report uses it and prints the same
    _, sent, warnings = read(url, "cache-together", cache)
    assert sent[BULK_PATH] == 1 and not [w for w in warnings if "cache" in w]
    third = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert third.returncode == 0 and third.stdout == outs[0][0]


def test_cache_folders_and_files_are_private(
    mlflow_server: tuple[str, str], tmp_path: Path
) -> None:
    url, _ = mlflow_server
    write_experiment(url, "cache-private")
    cache = tmp_path / "deep" / "cache"
    old = os.umask(0)
    try:
        read(url, "cache-private", cache)
    finally:
        os.umask(old)
    (folder,) = [p for p in cache.iterdir()]
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    (file,) = list(folder.iterdir())
    assert stat.S_IMODE(file.stat().st_mode) == 0o600


def frame(run: str, n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "run_id": [run] * n,
            "key": ["epoch_time_s"] * n,
            "step": list(range(n)),
            "value": [float(i) for i in range(n)],
            "timestamp": list(range(n)),
        }
    )


def test_the_least_recently_used_file_goes_first(tmp_path: Path) -> None:
    """No server needed: the cache's own bookkeeping, with a bound that fits two files."""
    one = HttpCache(CacheSettings(tmp_path, 10**9), "http://h:1")
    sig = {"r": '["FINISHED"]'}
    for exp in ("a", "b", "c"):
        one.lookup(exp, {"r": ["epoch_time_s"]}, sig)
        one.store(exp, frame("r", 50), {"r": ["epoch_time_s"]}, sig)
    sizes = {p.name: p.stat().st_size for p in one.folder.iterdir()}
    assert len(sizes) == 3
    # "a" is used again (its mtime touched), so "b" is now the least recently used
    for exp, when in (("a", 3), ("b", 1), ("c", 2)):
        os.utime(one.path(exp), (when, when))
    cached, covered = one.lookup("a", {"r": ["epoch_time_s"]}, sig)
    assert cached is not None and covered == {("r", "epoch_time_s")}
    assert one.path("a").stat().st_mtime > 3
    bound = sum(sizes.values()) - min(sizes.values()) + 1  # two files fit, not three
    small = HttpCache(CacheSettings(tmp_path, bound), "http://h:1")
    small.lookup("d", {"r": ["epoch_time_s"]}, sig)
    small.store("d", frame("r", 50), {"r": ["epoch_time_s"]}, sig)
    left = {p for p in ("a", "b", "c", "d") if small.path(p).exists()}
    assert left == {"a", "d"}


def test_a_run_not_ended_is_never_cached(tmp_path: Path) -> None:
    cache = HttpCache(CacheSettings(tmp_path), "http://h:1")
    cache.lookup("e", {"r": ["k"], "s": ["k"]}, {"r": None, "s": "x"})
    both = pd.concat([frame("r", 3), frame("s", 3)]).assign(key="k")
    cache.store("e", both, {"r": ["k"], "s": ["k"]}, {"r": None, "s": "x"})
    again = HttpCache(CacheSettings(tmp_path), "http://h:1")
    cached, covered = again.lookup("e", {"r": ["k"], "s": ["k"]}, {"r": "x", "s": "x"})
    assert covered == {("s", "k")}
    assert cached is not None and set(cached["run_id"].astype(str)) == {"s"}
    assert list(cached["value"]) == [0.0, 1.0, 2.0]


def test_sizes_and_default_folder() -> None:
    assert parse_size("2GB") == 2 * 10**9
    assert parse_size("1.5 MiB") == int(1.5 * 2**20)
    assert parse_size(1234) == 1234
    assert parse_size("0") == 0
    for bad in ("-1", "2 parsecs", "", "GB"):
        with pytest.raises(Exception, match="cache size"):
            parse_size(bad)
    assert default_cache_dir({"XDG_CACHE_HOME": "/x/c", "HOME": "/h"}) == Path("/x/c/itwin-report")
    assert default_cache_dir({"XDG_CACHE_HOME": "rel", "HOME": "/h"}) == Path(
        "/h/.cache/itwin-report"
    )
    assert default_cache_dir({"HOME": "/h"}) == Path("/h/.cache/itwin-report")


def test_cache_options_on_the_command_line(tmp_path: Path, scaling_sqlite: Any) -> None:
    uri, _ = scaling_sqlite
    runner = cli_runner()
    bad = runner.invoke(
        main, ["generate-scalability-report", "--tracking-uri", uri, "--cache-size", "lots"]
    )
    assert bad.exit_code == 2 and "cache size 'lots' is not a size" in bad.stderr
    # a local store never uses the cache: nothing is created
    cache = tmp_path / "c"
    args = ["generate-scalability-report", "-e", "scaling", "--tracking-uri", uri, "--no-plots"]
    ok = runner.invoke(main, [*args, "--cache-dir", str(cache), "-q"])
    assert ok.exit_code == 0, ok.stderr
    assert not cache.exists()
    bad = runner.invoke(main, ["compare", "a.json", "b.json", "--cache-size", "-3"])
    assert bad.exit_code == 2


def test_only_the_pairs_still_valid_come_back(tmp_path: Path) -> None:
    """Three runs and two keys cached; one run changed and one key not asked: the points
    that come back are those of the valid (run, key) pairs, each once, as they were stored."""
    sig = {"r": "1", "s": "1", "t": "1"}
    cache = HttpCache(CacheSettings(tmp_path), "http://h:1")
    cache.lookup("e", {}, sig)
    points = pd.concat(
        [
            frame(run, 4).assign(key=key, value=lambda f, o=o: f["value"] + o)
            for o, (run, key) in enumerate([(r, k) for r in "rst" for k in ("a", "b")])
        ]
    )
    cache.store("e", points, {r: ["a", "b"] for r in "rst"}, sig)
    again = HttpCache(CacheSettings(tmp_path), "http://h:1")
    wanted = {"r": ["a", "b"], "s": ["a"], "t": ["a", "b"]}
    cached, covered = again.lookup("e", wanted, {**sig, "t": "2"})  # t changed since
    assert covered == {("r", "a"), ("r", "b"), ("s", "a")}
    assert cached is not None
    columns = (cached["run_id"].astype(str), cached["key"].astype(str), cached["value"])
    got = sorted(zip(*columns, strict=True))
    expected = sorted(
        (r, k, float(step + o))
        for o, (r, k) in enumerate([(r, k) for r in "rst" for k in ("a", "b")])
        if (r, k) in covered
        for step in range(4)
    )
    assert got == expected
