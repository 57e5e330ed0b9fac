"""`emulate` writes only where asked: bad options and foreign files are refused untouched."""

from __future__ import annotations

import hashlib
import socket
import sqlite3
from pathlib import Path

import pytest
from conftest import cli_runner

from itwin_report.cli import main

TINY = ["--strategies", "horovod", "--workers", "2", "--epochs", "1", "--repeats", "1",
        "--set", "samples_per_epoch=500"]  # fmt: skip


def _listing(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        for p in sorted(root.rglob("*"))
    }


def _invoke(*args: str) -> tuple[int, str]:
    res = cli_runner().invoke(main, ["emulate", *args])
    return res.exit_code, res.stderr


BAD_USAGE = [
    (["--workers", "0"], "--workers must be between 1 and 4096, got 0"),
    (["--workers", "4097"], "--workers must be between 1 and 4096, got 4097"),
    (["--workers", "2,x"], "--workers expects comma-separated integers"),
    (["--workers", ","], "--workers must list at least one value"),
    (["--workers", "4096,2048"], "worker runs asked for; the limit is 20000"),
    (["--epochs", "0"], "--epochs must be between 1 and 1000, got 0"),
    (["--repeats", "101"], "--repeats must be between 1 and 100, got 101"),
    (["--seed", "-1"], "--seed must be between 0 and 4294967295, got -1"),
    (["--gpus-per-node", "0"], "--gpus-per-node must be between 1 and 1024"),
    (["--strategies", "mpi"], "unknown strategy 'mpi'"),
    (["--strategies", "horovod,horovod"], "lists a strategy twice"),
    (["--experiment-name", " "], "--experiment-name must be 1 to 250 printable characters"),
    (["--experiment-name", "a\x1b[31m"], "printable characters"),
    (["--set", "nope=1"], "--set nope: unknown parameter"),
    (["--set", "epochs=abc"], "--set epochs=abc: not a number"),
    (["--set", "epochs=1.5"], "must be a whole number"),
    (["--set", "noise=nan"], "must be a finite value >= 0"),
    (["--set", "noise=inf"], "must be a finite value >= 0"),
    (["--set", "epochs=1e400"], "must be a finite value >= 0"),
    (["--set", "sigma_run=-1"], "must be a finite value >= 0"),
    (["--set", "ddp_overlap=2"], "parameter ddp_overlap must be between 0 and 1"),
    (["--set", "epochs=5000"], "epochs must be between 1 and 1000"),
    (["--set", "probing_interval=0"], "parameter probing_interval must be > 0"),
    (["--set", "probing_interval=0.0001"], "metric points asked for; the limit is 5000000"),
    (["--set", "samples_per_epoch=1e12"], "training steps; the limit is 10000000"),
    (["--set", "novalue"], "--set expects NAME=VALUE"),
]


@pytest.mark.parametrize(("args", "message"), BAD_USAGE, ids=[" ".join(a) for a, _ in BAD_USAGE])
def test_bad_options_exit_2_before_anything_is_written(
    tmp_path: Path, args: list[str], message: str
) -> None:
    db = tmp_path / "store" / "mlflow.db"
    code, err = _invoke(*args, "--tracking-uri", f"sqlite:///{db}")
    assert code == 2, err
    assert err.startswith("Error: ") and message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err and "unexpected" not in err
    assert list(tmp_path.iterdir()) == []  # no store, no folder


def _foreign_sqlite(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE alembic_version (version_num TEXT)")
    db.execute("INSERT INTO alembic_version VALUES ('abc123')")
    db.execute("CREATE TABLE notes (body TEXT)")
    db.commit()
    db.close()


def _old_mlflow_sqlite(path: Path) -> None:
    db = sqlite3.connect(path)
    for table in ("experiments", "runs", "metrics", "params", "tags"):
        db.execute(f"CREATE TABLE {table} (x TEXT)")
    db.execute("CREATE TABLE alembic_version (version_num TEXT)")
    db.execute("INSERT INTO alembic_version VALUES ('90e64c465722')")
    db.commit()
    db.close()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_text("just some notes\n"), "is not an SQLite database"),
        (_foreign_sqlite, "is not an MLflow store (no experiments, runs, metrics, params, tags"),
        (_old_mlflow_sqlite, "has MLflow schema 90e64c465722"),
    ],
    ids=["text-file", "other-app-with-alembic", "older-mlflow"],
)
def test_foreign_or_old_files_are_refused_unchanged(tmp_path: Path, make, message: str) -> None:
    db = tmp_path / "app.db"
    make(db)
    before = _listing(tmp_path)
    code, err = _invoke(*TINY, "--tracking-uri", f"sqlite:///{db}")
    assert code == 1, err
    assert err.startswith("Error: ") and message in err and err.count("\n") == 1, err
    assert _listing(tmp_path) == before


def test_old_schema_is_named_with_the_option_that_upgrades_it(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    _old_mlflow_sqlite(db)
    _, err = _invoke(*TINY, "--tracking-uri", f"sqlite:///{db}")
    assert "--migrate" in err


def test_a_file_where_a_file_store_should_be_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    before = _listing(tmp_path)
    code, err = _invoke(*TINY, "--tracking-uri", str(tmp_path / "notes"))
    assert code == 1 and "is a non-empty folder that is not an MLflow file store" in err
    code, err = _invoke(*TINY, "--tracking-uri", str(tmp_path / "notes" / "todo.txt"))
    assert code == 1 and "is a file, not an MLflow file store" in err
    assert _listing(tmp_path) == before


@pytest.mark.parametrize(
    "truth", ["store/mlflow.db", "store/mlflow.db-journal", "store/artifacts/x/t.json"]
)
def test_truth_can_never_be_the_store_or_its_artifacts(tmp_path: Path, truth: str) -> None:
    db = tmp_path / "store" / "mlflow.db"
    code, err = _invoke(
        *TINY, "--tracking-uri", f"sqlite:///{db}", "--truth", str(tmp_path / truth)
    )
    assert code == 2 and "would write into the tracking store" in err, err
    assert not db.exists()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    "scheme", ["http://user:s3cret@127.0.0.1", "postgresql://u:s3cret@127.0.0.1"]
)
def test_unreachable_target_fails_fast_and_masked(scheme: str) -> None:
    uri = f"{scheme}:{_closed_port()}/mlflow"
    code, err = _invoke(*TINY, "--tracking-uri", uri)  # its seconds: bench/bench_limits.py
    assert code == 1 and err.startswith("Error: cannot reach ") and err.count("\n") == 1, err
    assert "s3cret" not in err and "***" in err


def test_summary_masks_the_password(mlflow_server: tuple[str, str]) -> None:
    url, _ = mlflow_server
    secret = url.replace("http://", "http://alice:s3cret@")
    res = cli_runner().invoke(main, ["emulate", *TINY, "--experiment-name", "masked",
                                    "--tracking-uri", secret])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "s3cret" not in res.stdout + res.stderr
    assert "alice:***@" in res.stdout
    assert "--tracking-uri 'http://alice:***@127.0.0.1:" in res.stdout  # quoted for the shell


def test_older_mlflow_store_is_upgraded_only_with_migrate(tmp_path: Path) -> None:
    from alembic import command
    from mlflow.store.db.utils import _get_alembic_config

    db = tmp_path / "old.db"
    uri = f"sqlite:///{db}"
    code, err = _invoke(*TINY, "--tracking-uri", uri, "--experiment-name", "first")
    assert code == 0, err
    command.downgrade(_get_alembic_config(uri), "-1")  # the schema of the previous MLflow
    old = sqlite3.connect(db).execute("SELECT version_num FROM alembic_version").fetchone()[0]
    before = _listing(tmp_path)
    code, err = _invoke(*TINY, "--tracking-uri", uri, "--experiment-name", "second")
    assert code == 1 and f"has MLflow schema {old}" in err and "--migrate" in err, err
    assert _listing(tmp_path) == before
    code, err = _invoke(*TINY, "--tracking-uri", uri, "--experiment-name", "second", "--migrate")
    assert code == 0, err
    new = sqlite3.connect(db).execute("SELECT version_num FROM alembic_version").fetchone()[0]
    assert new != old
    from itwin_report.store import mlflow_api

    client = mlflow_api.client(uri)
    exp = client.get_experiment_by_name("second")
    assert len(client.search_runs([exp.experiment_id])) == 3
