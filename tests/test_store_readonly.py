"""A report never writes to the store it reads: old schemas, foreign files, WAL, read-only media."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from itwin_report.cli import main
from itwin_report.errors import StoreError
from itwin_report.store import load_experiment
from itwin_report.store.sql_reader import sqlite_open_mode

Store = tuple[str, dict[str, Any]]


def _listing(folder: Path) -> list[tuple[str, str]]:
    """Every file below ``folder`` with the sha256 of its bytes (directories with "")."""
    out = []
    for path in sorted(folder.rglob("*")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        out.append((str(path.relative_to(folder)), digest))
    return out


def _copy_db(scaling_sqlite: Store, into: Path) -> Path:
    """A private copy of the sample database (its artifacts stay where they are)."""
    into.mkdir(parents=True, exist_ok=True)
    db = into / "mlflow.db"
    shutil.copyfile(scaling_sqlite[0].removeprefix("sqlite:///"), db)
    return db


def _load(db: Path, **options: Any) -> Any:
    return load_experiment(f"sqlite:///{db}", "scaling", show_progress=False, **options)


@pytest.fixture(scope="module")
def reference(scaling_sqlite: Store) -> Any:
    return load_experiment(scaling_sqlite[0], "scaling", show_progress=False)


def test_older_schema_without_is_nan_is_read_as_it_is(
    scaling_sqlite: Store, reference: Any, tmp_path: Path
) -> None:
    db = _copy_db(scaling_sqlite, tmp_path / "old")
    with sqlite3.connect(db) as conn:  # the metrics table as MLflow wrote it before is_nan
        conn.execute(
            "CREATE TABLE metrics_old AS SELECT key, value, timestamp, run_uuid, step "
            "FROM metrics WHERE is_nan = 0"
        )
        conn.execute("DROP TABLE metrics")
        conn.execute("ALTER TABLE metrics_old RENAME TO metrics")
        conn.execute("UPDATE alembic_version SET version_num = '90e64c465722'")
    conn.close()
    before = _listing(db.parent)
    data = _load(db)
    assert _listing(db.parent) == before  # not migrated, nothing added beside it
    assert sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute(
        "SELECT version_num FROM alembic_version"
    ).fetchall() == [("90e64c465722",)]
    keys = ["epoch_time_s", "gpu_power_W"]
    old = data.metrics[data.metrics["key"].isin(keys)].reset_index(drop=True)
    new = reference.metrics[reference.metrics["key"].isin(keys)].reset_index(drop=True)
    pd.testing.assert_frame_equal(old, new)
    pd.testing.assert_frame_equal(data.runs, reference.runs)


def test_other_apps_database_with_alembic_is_refused_unchanged(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE alembic_version (version_num TEXT)")
        conn.execute("INSERT INTO alembic_version VALUES ('0001_app')")
        conn.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    conn.close()
    before = _listing(tmp_path)
    with pytest.raises(StoreError) as err:
        load_experiment(f"sqlite:///{db}", None, show_progress=False)
    assert str(err.value) == (
        f"sqlite:///{db} is not an MLflow tracking database (no table experiments, runs, "
        "tags, params, metrics; alembic revision 0001_app)"
    )
    assert _listing(tmp_path) == before


@pytest.fixture
def wal_db(scaling_sqlite: Store, tmp_path: Path) -> Path:
    db = _copy_db(scaling_sqlite, tmp_path / "wal")
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    conn.close()  # the last connection checkpoints and removes -wal and -shm
    assert sorted(p.name for p in db.parent.iterdir()) == ["mlflow.db"]
    return db


def test_wal_store_leaves_no_file_behind(wal_db: Path, reference: Any) -> None:
    before = _listing(wal_db.parent)
    assert sqlite_open_mode(wal_db) == "immutable"
    data = _load(wal_db)
    assert _listing(wal_db.parent) == before  # no -wal, no -shm, same bytes
    pd.testing.assert_frame_equal(data.metrics, reference.metrics)


def test_wal_store_with_a_live_writer_reads_its_latest_data(wal_db: Path, reference: Any) -> None:
    writer = sqlite3.connect(wal_db)  # keeps -wal and -shm open, as a running server does
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("UPDATE metrics SET value = value + 1000 WHERE key = 'epoch_time_s'")
        writer.commit()
        assert sqlite_open_mode(wal_db) == "ro"
        before = _listing(wal_db.parent)
        data = _load(wal_db)
        after = _listing(wal_db.parent)
        # the same files; only the readers' marks in the writer's shared-memory index move
        assert [name for name, _ in after] == [name for name, _ in before]
        assert [f for f in after if not f[0].endswith("-shm")] == [
            f for f in before if not f[0].endswith("-shm")
        ]
    finally:
        writer.close()
    epochs = data.metrics[data.metrics["key"] == "epoch_time_s"]["value"].reset_index(drop=True)
    expected = reference.metrics[reference.metrics["key"] == "epoch_time_s"]["value"] + 1000
    assert epochs.tolist() == expected.tolist()


@pytest.fixture
def read_only_dir(wal_db: Path) -> Iterator[Path]:
    folder = wal_db.parent
    wal_db.chmod(0o444)
    folder.chmod(0o555)
    try:
        yield folder
    finally:
        folder.chmod(0o755)
        wal_db.chmod(0o644)


def test_store_in_a_read_only_directory(read_only_dir: Path, reference: Any) -> None:
    db = read_only_dir / "mlflow.db"
    assert stat.S_IMODE(read_only_dir.stat().st_mode) == 0o555
    assert sqlite_open_mode(db) == "immutable"
    before = _listing(read_only_dir)
    data = _load(db)
    assert _listing(read_only_dir) == before
    pd.testing.assert_frame_equal(data.runs, reference.runs)


def _report(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["generate-scalability-report", *args])
    return result.exit_code, result.stdout, result.stderr


def test_outputs_can_never_point_into_the_store(scaling_sqlite: Store, tmp_path: Path) -> None:
    uri, _ = scaling_sqlite
    db = Path(uri.removeprefix("sqlite:///"))
    artifacts = db.parent / "artifacts" / "scaling"
    assert artifacts.is_dir()
    link = tmp_path / "link.db"
    link.symlink_to(db)
    before = _listing(db.parent)
    cases = [
        ("--output", str(db), db),
        ("--output", str(link), db),
        ("--output", f"{db}-wal", Path(f"{db}-wal")),
        ("--plot-dir", str(artifacts / "plots"), artifacts),
        ("--output", str(artifacts / "x" / "r.txt"), artifacts),
    ]
    for option, value, guarded in cases:
        code, out, err = _report("--tracking-uri", uri, "-e", "scaling", option, value, "-q")
        assert code == 2, (option, value, err)
        assert out == ""
        assert err == (
            f"Error: {option} {value} would write into the tracking store ({guarded}); "
            "choose a path outside it\n"
        )
    assert _listing(db.parent) == before
    # a file store: its directory is guarded too
    code, _, err = _report("--tracking-uri", str(tmp_path), "--output", str(tmp_path / "r.md"))
    assert code == 2 and "would write into the tracking store" in err


def test_outputs_outside_the_store_are_written(scaling_sqlite: Store, tmp_path: Path) -> None:
    uri, _ = scaling_sqlite
    out = tmp_path / "report.csv"
    code, _, err = _report(
        "--tracking-uri", uri, "-e", "scaling", "-o", str(out), "--format", "csv", "--no-plots"
    )
    assert code == 0, err
    assert "torch-ddp" in out.read_text()
