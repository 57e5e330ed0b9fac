"""The loader's edge: odd params and points are warnings naming the runs, and the rest is read.

Every store is a real MLflow SQLite store (``bulk_worker_runs`` writes the rows MLflow's own
``log_batch`` writes); values no MLflow client would log are then put in with sqlite3.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import bulk_worker_runs, cli_runner, new_sqlite_store

from itwin_report.cli import main
from itwin_report.data.validate import named
from itwin_report.store import load_experiment
from itwin_report.store.columnar import ENV

T0 = 1_700_000_000_000
EPOCHS = [12.0, 10.0, 10.0]  # after the one-epoch warm-up: 10 s


def _flat(name: str, params: dict[str, Any], epochs: list[float] = EPOCHS) -> dict[str, Any]:
    """A top-level run with no parent and no children: a job of its own."""
    points = [("epoch_time_s", v, T0 + s * 1000, s) for s, v in enumerate(epochs)]
    return {"name": name, "start": T0, "params": params, "metrics": points}


def _report(uri: str, *args: str) -> dict[str, Any]:
    result = cli_runner().invoke(
        main,
        ["generate-scalability-report", "--tracking-uri", uri, "-e", "x", "-q", "--no-plots",
         "--format", "json", *args],
        env={"MLFLOW_TRACKING_URI": ""},
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def _epochs(doc: dict[str, Any]) -> dict[tuple[str, int], tuple[float, int]]:
    return {
        (r["strategy"], r["workers"]): (r["avg_epoch_time_s"], r["runs"]) for r in doc["epoch_time"]
    }


@pytest.mark.parametrize(
    ("strategy", "workers", "extra"),
    [
        ("strategy", "global_world_size", ()),
        ("backend", "world_size", ("--strategy-param", "backend", "--workers-param", "world_size")),
    ],
    ids=["itwinai-names", "renamed-params"],
)
def test_flat_runs_without_a_rank_are_rank_0(
    sqlite_store_template: Path, tmp_path: Path, strategy: str, workers: str, extra: tuple[str, ...]
) -> None:
    uri = new_sqlite_store(sqlite_store_template, tmp_path / "mlflow.db")
    runs = [_flat(f"ddp-{n}", {strategy: "ddp", workers: n}) for n in (2, 4)]
    runs.append(_flat("ddp-4b", {strategy: "ddp", workers: "4.0"}, [30.0, 20.0, 20.0]))
    bulk_worker_runs(uri, "x", runs)
    doc = _report(uri, *extra)
    # ddp-4: two jobs, 10 s and 20 s a run: 15 s; ddp-2: 10 s
    assert _epochs(doc) == {("ddp", 2): (10.0, 1), ("ddp", 4): (15.0, 2)}
    assert not [w for w in doc["warnings"] if "skipped" in w]


def test_bad_world_sizes_are_one_warning_naming_the_param_and_five_runs(
    sqlite_store_template: Path, tmp_path: Path
) -> None:
    uri = new_sqlite_store(sqlite_store_template, tmp_path / "mlflow.db")
    bad = {
        "inf": "inf",
        "digits": "9" * 400,
        "neg-inf": "-inf",
        "huge": "1e30",
        "zero": "0",
        "big": "1000001",
    }
    runs = [_flat("good-2", {"backend": "ddp", "world_size": 2})]
    runs += [_flat(f"bad-{k}", {"backend": "ddp", "world_size": v}) for k, v in bad.items()]
    runs += [_flat(f"text-{i}", {"backend": "ddp", "world_size": "four"}) for i in range(2)]
    bulk_worker_runs(uri, "x", runs)
    doc = _report(uri, "--strategy-param", "backend", "--workers-param", "world_size")
    assert _epochs(doc) == {("ddp", 2): (10.0, 1)}
    skipped = [w for w in doc["warnings"] if w.startswith("skipped")]
    assert skipped == [
        "skipped 2 worker run(s) of 'text-0', 'text-1': world_size is not an integer",
        "skipped 6 worker run(s) of 'bad-big', 'bad-digits', 'bad-huge', 'bad-inf', 'bad-neg-inf'"
        " and 1 more: world_size is outside 1..1,000,000",
    ]


def _poke(uri: str, sql: str, *params: Any) -> None:
    """Change the store with sqlite3, as no MLflow client would."""
    conn = sqlite3.connect(uri.removeprefix("sqlite:///"))
    with conn:
        assert conn.execute(sql, params).rowcount >= 1
    conn.close()


@pytest.mark.parametrize("columnar", ["1", "0"], ids=["columnar", "sqlite3"])
def test_odd_bytes_and_integers_are_warnings_with_either_reader(
    sqlite_store_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columnar: str
) -> None:
    uri = new_sqlite_store(sqlite_store_template, tmp_path / "mlflow.db")
    runs = [_flat(name, {"strategy": "ddp", "global_world_size": n}) for name, n in
            [("ddp-2", 2), ("ddp-4", 4), ("ddp-8", 8), ("latin-16", 16)]]  # fmt: skip
    ids = bulk_worker_runs(uri, "x", runs)
    # a step of -2**63 in ddp-4, a timestamp of 2**63 - 1 in ddp-8: those points go
    _poke(uri, "UPDATE metrics SET step = ? WHERE run_uuid = ? AND step = 2", -(2**63), ids[1])
    _poke(
        uri, "UPDATE metrics SET timestamp = ? WHERE run_uuid = ? AND step = 2", 2**63 - 1, ids[2]
    )
    # a strategy logged in Latin-1 by some other tool: not UTF-8
    _poke(uri, "UPDATE params SET value = CAST(? AS TEXT) WHERE run_uuid = ? AND key = 'strategy'",
          "dd\xe9".encode("latin-1"), ids[3])  # fmt: skip
    monkeypatch.setenv(ENV, columnar)
    data = load_experiment(uri, "x", show_progress=False)
    assert sorted(data.runs["strategy"]) == ["ddp", "ddp", "ddp", "dd\ufffd"]
    m = data.metrics
    steps = {r: m.loc[m["run_id"] == r, "step"].tolist() for r in ids}
    assert steps == {ids[0]: [0, 1, 2], ids[1]: [0, 1], ids[2]: [0, 1], ids[3]: [0, 1, 2]}
    assert data.warnings == [
        f"text that is not UTF-8 in the name or params of 1 run(s) ('latin-16 ({ids[3][:8]})') "
        "was read with replacement characters",
        "2 metric points whose step or timestamp is not within -2**53..2**53 were left out "
        f"(runs {named([ids[1][:8], ids[2][:8]])})",
    ]
    # through the CLI: the other runs are reported
    monkeypatch.setenv(ENV, columnar)
    assert set(_epochs(_report(uri))) == {("ddp", 2), ("ddp", 4), ("ddp", 8), ("dd\ufffd", 16)}


def test_every_rank_logging_its_own_run_of_one_name_is_said_once(
    sqlite_store_template: Path, tmp_path: Path
) -> None:
    uri = new_sqlite_store(sqlite_store_template, tmp_path / "mlflow.db")
    params = {"strategy": "ddp", "global_world_size": 4}
    runs = [_flat("ddp-4", {**params, "global_rank": r}) for r in range(4)]
    # one name repeated by separate single-worker jobs is a repetition, not ranks
    runs += [_flat("solo", {"strategy": "ddp", "global_world_size": 1}) for _ in range(2)]
    bulk_worker_runs(uri, "x", runs)
    data = load_experiment(uri, "x", show_progress=False)
    assert data.warnings == [
        "top-level runs named 'ddp-4' log different global_rank values: each rank's run is "
        "counted as a job of its own; log a job's ranks as child runs of one parent run to "
        "count them as one job"
    ]
