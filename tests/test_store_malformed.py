"""Malformed data is a warning naming the run, never a crash, a hang or a memory blow-up."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from itwin_report.data.rundata import PERFORMANCE_ARTIFACT, PROFILE_ARTIFACT
from itwin_report.emulator import mlflow_writer
from itwin_report.store import load_experiment, mlflow_api
from itwin_report.store.artifacts import MAX_ARTIFACT_BYTES
from itwin_report.store.uri import local_artifact_dir

Store = tuple[str, dict[str, Any]]
DEEP = 100_000  # nesting far past Python's recursion limit

BAD_PERFORMANCE = {
    "perf-infinity": '{"total_samples": Infinity, "total_time": 10}',
    "perf-1e400": '{"total_samples": 1e400, "total_time": 10}',
    "perf-400-digits": '{"total_samples": 1' + "0" * 399 + ', "total_time": 10}',
    "perf-deep": "[" * DEEP + "]" * DEEP,
}
# run name -> (artifact, what is put there, words of the warning)
ODD_FILES = {
    "fifo": (PERFORMANCE_ARTIFACT, "fifo", "(not a regular file)"),
    "dev-zero": (PROFILE_ARTIFACT, "dev-zero", "(not a regular file)"),
    "huge": (PROFILE_ARTIFACT, "huge", f"than the {MAX_ARTIFACT_BYTES:,}-byte cap)"),
    "loop": (PROFILE_ARTIFACT, "loop", "(Too many levels of symbolic links)"),
}
MISSING = {
    PROFILE_ARTIFACT: "their profiler data is missing from the report, not absent",
    PERFORMANCE_ARTIFACT: "their performance.json data is missing from the report, not absent",
}


@pytest.fixture(scope="module")
def bad_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """Flat 1-worker runs, each with one malformed or odd artifact; a good one to compare."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('malformed') / 'mlflow.db'}"
    w = mlflow_writer.RunWriter(uri)
    exp = w.experiment_id("bad", mlflow_writer.artifact_location(uri, "bad"))
    ids = {}
    params = {"strategy": "torch-ddp", "global_rank": 0, "global_world_size": 1}
    for name in ["good", *BAD_PERFORMANCE, *ODD_FILES]:
        run = w.create_run(exp, name, 0)
        w.log_batch(run, [("epoch_time_s", 5.0, 0, 0)], params)
        if name in BAD_PERFORMANCE:
            w.log_text(run, BAD_PERFORMANCE[name], PERFORMANCE_ARTIFACT)
        if name == "good":
            w.log_text(run, '{"total_samples": 100, "total_time": 10}', PERFORMANCE_ARTIFACT)
        w.end_run(run, 1)
        ids[name] = run
    client = mlflow_api.client(uri)
    for name, (artifact, kind, _) in ODD_FILES.items():
        root = local_artifact_dir(client.get_run(ids[name]).info.artifact_uri)
        assert root is not None
        target = root / artifact
        target.parent.mkdir(parents=True, exist_ok=True)
        if kind == "fifo":
            os.mkfifo(target)  # nobody ever writes to it: reading it would block forever
        elif kind == "dev-zero":
            target.symlink_to("/dev/zero")  # reading it would never end
        elif kind == "loop":
            target.symlink_to(target.name)  # a link to itself: an OSError of its own
        else:
            with target.open("wb") as handle:  # sparse: costs no disk
                handle.truncate(MAX_ARTIFACT_BYTES + 1)
    return uri, ids


def test_malformed_artifacts_are_warnings_naming_the_run(bad_store: tuple[str, Any]) -> None:
    uri, ids = bad_store
    data = load_experiment(uri, "bad", show_progress=False)
    assert sorted(data.runs["run_name"]) == sorted(ids)  # every run kept
    assert list(data.performance["run_id"]) == [ids["good"]]
    assert data.performance["total_samples"].tolist() == [100.0]
    assert data.profiles.empty
    for name in BAD_PERFORMANCE:
        mine = [w for w in data.warnings if f"of {name}:" in w]
        assert len(mine) == 1, (name, data.warnings)
        assert mine[0].startswith(f"worker run {ids[name][:8]} (rank 0) of {name}: malformed ")
        assert mine[0].endswith("; ignored") and "\n" not in mine[0]
    for name, (artifact, _, words) in ODD_FILES.items():
        mine = [w for w in data.warnings if f"of '{name}' (" in w]
        assert len(mine) == 1, (name, data.warnings)
        assert mine[0].startswith(f"could not read {artifact} of 1 worker run(s) of '{name}' ")
        assert mine[0].endswith(f"{words}: {MISSING[artifact]}"), mine[0]
    assert len(data.warnings) == len(BAD_PERFORMANCE) + len(ODD_FILES)


def test_non_finite_reasons(bad_store: tuple[str, Any]) -> None:
    uri, _ = bad_store
    data = load_experiment(uri, "bad", show_progress=False)
    text = "\n".join(data.warnings)
    assert "(Infinity is not a number JSON allows)" in text
    for name in ("perf-1e400", "perf-400-digits"):  # inf, and an int no float holds
        (mine,) = [w for w in data.warnings if f"of {name}:" in w]
        assert "total_samples is not a finite number" in mine


def test_text_in_a_metric_column(scaling_sqlite: Store, tmp_path: Path) -> None:
    uri, ids = scaling_sqlite
    db = tmp_path / "mlflow.db"
    shutil.copyfile(uri.removeprefix("sqlite:///"), db)
    ddp8 = ids["jobs"][2][2][0]
    with sqlite3.connect(db) as conn:
        changed = conn.execute(
            "UPDATE metrics SET value = 'fast' WHERE run_uuid = ? AND key = 'epoch_time_s' "
            "AND step = 0",
            (ddp8,),
        ).rowcount
    conn.close()
    assert changed == 1
    data = load_experiment(f"sqlite:///{db}", "scaling", show_progress=False)
    m = data.metrics
    epochs = m[(m["run_id"] == ddp8) & (m["key"] == "epoch_time_s")]
    assert epochs["step"].tolist() == [1, 2]
    assert epochs["value"].tolist() == [100 / 8 + 1, 100 / 8 + 2]
    assert (
        "1 metric points whose value, step or timestamp is not a number were left out "
        f"(runs '{ddp8[:8]}')"
    ) in data.warnings


def test_garbage_in_a_file_store(scaling_file_store: Store, tmp_path: Path) -> None:
    path, ids = scaling_file_store
    copy = tmp_path / "mlflow"
    shutil.copytree(path, copy, ignore=shutil.ignore_patterns(".trash"))
    ddp8 = ids["jobs"][2][2][0]
    ddp4 = ids["jobs"][0][2][1]  # rank 1 of the first ddp-4 job
    exp_dir = next(d for d in copy.iterdir() if (d / ddp8).is_dir())
    with (exp_dir / ddp8 / "metrics" / "epoch_time_s").open("ab") as handle:
        handle.write(b"garbage line here\n\xff\xfe\xfd 1 2\n17 x 3\n")
    (exp_dir / ddp4 / "params" / "strategy").write_bytes(b"torch-ddp\xff")
    data = load_experiment(str(copy), "scaling", show_progress=False)
    m = data.metrics
    epochs = m[(m["run_id"] == ddp8) & (m["key"] == "epoch_time_s")]
    assert epochs["value"].tolist() == [100 / 8, 100 / 8 + 1, 100 / 8 + 2]
    assert any(
        w.startswith("3 metric lines of the file store that do not read as") and ddp8[:8] in w
        for w in data.warnings
    ), data.warnings
    assert (
        f"run 'worker_1' ({ddp4[:8]}): params/strategy not UTF-8 text; "
        "read with replacement characters"
    ) in data.warnings
    strategy = data.runs.loc[data.runs["run_id"] == ddp4, "strategy"].item()
    assert strategy == "torch-ddp\ufffd"
