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
from conftest import cli_runner

from itwin_report.cli import main
from itwin_report.store import load_experiment
from itwin_report.store.sql_open import sqlite_open_mode
from itwin_report.util.errors import StoreError

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
    result = cli_runner().invoke(main, ["generate-scalability-report", *args])
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


def test_damaged_database_is_one_line_and_unchanged(scaling_sqlite: Store, tmp_path: Path) -> None:
    db = _copy_db(scaling_sqlite, tmp_path / "damaged")
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])  # a copy cut short: pages the schema points at are gone
    before = _listing(db.parent)
    with pytest.raises(StoreError) as err:
        _load(db)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith((f"cannot read sqlite:///{db}: ", f"cannot open {db} as a database"))
    assert "malformed" in message
    assert _listing(db.parent) == before


KILLED_WRITER = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=" + sys.argv[2])
conn.execute("PRAGMA wal_autocheckpoint=0")
conn.execute("PRAGMA cache_size=1")  # a rollback journal's pages reach the database early
conn.execute("BEGIN")
conn.execute("UPDATE metrics SET value = value + 1000 WHERE key = 'epoch_time_s'")
if sys.argv[2] == "DELETE":  # a transaction too large for the cache, cut off mid-way
    conn.execute("INSERT INTO tags (key, value, run_uuid) "
                 "SELECT 'x' || rowid, randomblob(4000), run_uuid FROM metrics")
else:
    conn.execute("COMMIT")
os.kill(os.getpid(), 9)
"""


def _killed_writer(db: Path, journal_mode: str) -> None:
    """A writer SIGKILLed as `emulate` can be: WAL pages left in -wal, or a hot -journal."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(db), journal_mode])
    assert done.returncode == -9


@pytest.mark.parametrize("with_shm", [True, False], ids=["with-shm", "without-shm"])
def test_wal_pages_in_a_read_only_folder_are_read_or_warned(
    scaling_sqlite: Store, reference: Any, tmp_path: Path, with_shm: bool
) -> None:
    db = _copy_db(scaling_sqlite, tmp_path / "walro")
    _killed_writer(db, "WAL")
    if not with_shm:
        Path(f"{db}-shm").unlink()
    assert Path(f"{db}-wal").stat().st_size > 32
    db.parent.chmod(0o555)
    try:
        before = _listing(db.parent)
        data = _load(db)
        assert _listing(db.parent) == before  # -shm included: read, never written
    finally:
        db.parent.chmod(0o755)
    epochs = data.metrics[data.metrics["key"] == "epoch_time_s"]["value"].reset_index(drop=True)
    logged = reference.metrics[reference.metrics["key"] == "epoch_time_s"]["value"]
    stale = [w for w in data.warnings if "-wal may hold changes" in w]
    if with_shm:  # the committed change is read through the -shm as it is
        assert epochs.tolist() == (logged + 1000).tolist() and stale == []
    else:  # it cannot be read without creating a -shm: the report says so
        assert epochs.tolist() == logged.tolist()
        assert stale == [
            f"{db}-wal may hold changes that are not in mlflow.db yet; reading them needs a -shm "
            "file beside it, which this report never creates: the report may miss the latest "
            f"runs and points; open the store once with write access (e.g. sqlite3 {db} "
            "'PRAGMA wal_checkpoint') to move them into the database"
        ]


@pytest.mark.parametrize("read_only_folder", [False, True], ids=["writable", "read-only"])
def test_a_hot_journal_says_how_to_recover(
    scaling_sqlite: Store, tmp_path: Path, read_only_folder: bool
) -> None:
    db = _copy_db(scaling_sqlite, tmp_path / "hot")
    _killed_writer(db, "DELETE")
    assert Path(f"{db}-journal").read_bytes()[:8] == bytes.fromhex("d9d505f920a163d7")
    if read_only_folder:
        db.parent.chmod(0o555)
    try:
        before = _listing(db.parent)
        code, out, err = _report("--tracking-uri", f"sqlite:///{db}", "-e", "scaling", "-q")
        assert _listing(db.parent) == before
    finally:
        db.parent.chmod(0o755)
    assert (code, out) == (1, "")
    assert err == (
        f"Error: {db} has an unfinished transaction in mlflow.db-journal (a writer was killed "
        "while writing); it must be rolled back before it can be read: open the store once "
        f"with write access, e.g. sqlite3 {db} 'PRAGMA integrity_check', then run the report "
        "again\n"
    )
    # the advice works: once rolled back, the store reads as before the killed transaction
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    data = _load(db)
    assert not Path(f"{db}-journal").exists() and not data.runs.empty
