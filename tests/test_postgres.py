"""PostgreSQL as the shared store: emulate into it, report from it directly and through a server.

A real PostgreSQL server is started once (``postgres`` fixture). The same seeded emulation is
written to SQLite and to PostgreSQL; every way of reading PostgreSQL must give the tables read
from SQLite.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import mlflow
import pytest
from conftest import assert_billed_on_epochs_alone, cli_runner, running_mlflow_server

from itwin_report.cli import main
from itwin_report.emulator import EmulationOptions, expected_truth, run_emulation

pytestmark = [pytest.mark.postgres, pytest.mark.server]

OPTIONS = EmulationOptions(
    strategies=("horovod", "torch-ddp"),
    workers=(2, 4),
    epochs=3,
    repeats=1,
    seed=11,
    overrides=("noise=0",),
    experiment_name="pg",
)
TABLES = ("epoch_time", "gpu")  # tables that need no artifacts


def report_json(uri: str, *extra: str) -> dict[str, Any]:
    args = ["generate-scalability-report", "-e", "pg", "--format", "json", "-q", "--no-plots"]
    result = cli_runner().invoke(main, [*args, "--tracking-uri", uri, *extra])
    assert result.exit_code == 0, result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


@pytest.fixture(scope="module")
def from_sqlite(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The report of the emulation written to a SQLite store."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('pg-sqlite') / 'mlflow.db'}"
    run_emulation(OPTIONS, uri)
    return report_json(uri)


def test_sqlite_reference_matches_the_truth(from_sqlite: dict[str, Any]) -> None:
    truth = {(c["strategy"], c["workers"]): c for c in expected_truth(OPTIONS)["configurations"]}
    assert len(from_sqlite["epoch_time"]) == len(truth) == 4
    for row in from_sqlite["epoch_time"]:
        expected = truth[(row["strategy"], row["workers"])]["mean_epoch_time_after_warmup_s"]
        assert row["avg_epoch_time_s"] == pytest.approx(expected)


def test_emulate_into_postgres_and_read_it_directly(
    postgres: Any, from_sqlite: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = postgres("direct")
    monkeypatch.chdir(tmp_path)  # where a store without an artifact root may put artifacts
    run_emulation(OPTIONS, uri)
    doc = report_json(uri)
    for table in TABLES:
        assert doc[table] == from_sqlite[table], table


def test_report_through_a_server_backed_by_postgres(
    postgres: Any, from_sqlite: dict[str, Any], tmp_path: Path
) -> None:
    backend = postgres("served")
    # the server is told its driver, as its users do: MLflow 2.x servers query PostgreSQL
    # correctly only through psycopg2 (through psycopg 3 run searches fail on a type cast)
    driver = "psycopg" if mlflow.__version__.startswith("3.") else "psycopg2"
    server_backend = backend.replace("postgresql://", f"postgresql+{driver}://", 1)
    mlflow_bin = Path(sys.executable).parent / "mlflow"
    with running_mlflow_server(mlflow_bin, server_backend, tmp_path) as url:
        run_emulation(OPTIONS, url)  # through the server's REST API into PostgreSQL
        over_http = report_json(url)
    for table in TABLES:
        assert over_http[table] == from_sqlite[table], table
    # artifacts came back through the server's proxy as they do from SQLite's local folder
    assert over_http["computation"] == from_sqlite["computation"]
    assert len(over_http["computation"]) == 4
    # the server's PostgreSQL read directly, the driver named: the same runs
    direct = report_json(server_backend)
    assert direct["epoch_time"] == from_sqlite["epoch_time"]
    # its artifacts sit behind the server, so GPU-hours per run are billed on the epochs alone
    # (performance.json's wall time, with set-up, is out of reach): every other GPU column agrees
    assert_billed_on_epochs_alone(direct["gpu"], from_sqlite["gpu"])


def test_postgres_is_read_on_one_adbc_connection_without_sqlalchemy(
    postgres: Any, from_sqlite: dict[str, Any], tmp_path: Path
) -> None:
    """With the ``postgres`` extra, runs, params, tags and points come through the ADBC driver:
    neither SQLAlchemy, MLflow nor a DB-API driver is imported, one session is opened, and the
    tables are SQLite's."""
    import subprocess

    uri = postgres("adbc")
    run_emulation(OPTIONS, uri, artifact_root=str(tmp_path / "artifacts"))
    script = (
        "import json, sys\n"
        "from itwin_report import store\n"
        f"data = store.load_experiment({uri!r}, 'pg', show_progress=False)\n"
        "mods = [m for m in ('sqlalchemy', 'mlflow', 'psycopg', 'psycopg2') if m in sys.modules]\n"
        "print(json.dumps({'runs': len(data.runs), 'points': len(data.metrics), 'mods': mods}))\n"
    )
    own = sessions(uri) - sessions(uri)  # minus what one look at the counter adds by itself
    before = sessions(uri)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # one connection; the ADBC driver opens one short session of its own before it, to read
    # PostgreSQL's type catalog (SQLAlchemy's connection plus the points' read opened three)
    assert sessions(uri) - before + own == 2
    seen = json.loads(done.stdout)
    assert seen["mods"] == [] and seen["runs"] == 2 * (2 + 4)  # every rank logs a run
    assert seen["points"] > 0
    doc = report_json(uri)
    for table in TABLES:
        assert doc[table] == from_sqlite[table], table


def test_a_key_with_quotes_and_backslashes_is_read_as_stored(postgres: Any) -> None:
    """The columnar read names each key in its query's text (a query with parameters would not
    be streamed): a key holding a quote and backslashes is read exactly, with its points only,
    whatever the server's ``standard_conforming_strings``."""
    import psycopg

    from itwin_report import store
    from itwin_report.store.points import PointParts
    from itwin_report.store.postgres import libpq_uri, read_points

    uri = postgres("quoted")
    run_emulation(OPTIONS, uri)
    odd = "it's \\ a \\' key"
    similar = "it's \\\\ a \\' key"  # the same, one backslash doubled
    worker = str(store.load_experiment(uri, "pg", show_progress=False).runs["run_id"].iloc[0])
    with psycopg.connect(uri, autocommit=True) as conn:
        rows = [(odd, 1.5, 7, worker, 3), (similar, 9.0, 7, worker, 3)]
        conn.cursor().executemany(
            "INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan) "
            "VALUES (%s, %s, %s, %s, %s, false)",
            rows,
        )
    for conforming in ("on", "off"):
        with psycopg.connect(uri, autocommit=True) as conn:
            conn.execute(f"ALTER DATABASE quoted SET standard_conforming_strings = {conforming}")
            (experiment,) = conn.execute(
                "SELECT experiment_id FROM experiments WHERE name = 'pg'"
            ).fetchone()
        # the columnar read itself (a refused query would leave it to the generic read)
        parts = PointParts([worker], [odd, similar])
        assert read_points(libpq_uri(uri), experiment, parts, has_is_nan=True), conforming
        frame, bad = parts.frame()
        assert not bad.any()
        assert list(zip(frame["key"], frame["value"], strict=True)) == [(odd, 1.5), (similar, 9.0)]
        data = store.load_experiment(uri, "pg", show_progress=False, extra_metrics=[odd])
        points = data.metrics[data.metrics["key"] == odd]
        assert len(points) == 1, conforming
        assert str(points["run_id"].iloc[0]) == worker
        assert (points["value"].iloc[0], points["step"].iloc[0]) == (1.5, 3)


def sessions(uri: str) -> int:
    """Sessions PostgreSQL counted for the database of ``uri`` so far (its own included)."""
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])
