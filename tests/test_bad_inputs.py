"""The bad-input matrix: every case through the real CLI, every promise checked every time.

Each case asserts its exit code; at most one line on stderr, never a traceback nor an
"unexpected" error; the stores' bytes and directory listing unchanged; and no secret (URI
passwords, credential variables) in stdout, stderr or any file written. The stores are built
once for the module: one SQLite store holding one experiment per kind of bad data, a file store
with a corrupted metric file, and files that are not MLflow stores.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import socket
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_runner

from itwin_report.cli import main

SECRET = "Hunter2-s3cret"
ENV = {
    "MLFLOW_TRACKING_PASSWORD": SECRET,
    "MLFLOW_TRACKING_TOKEN": SECRET + "-token",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
    "MLFLOW_TRACKING_URI": "",
    "NO_COLOR": "1",
}
REPORT = "generate-scalability-report"
T0 = 1_700_000_000_000
HOSTILE = [
    "\x1b[31mred",
    "[link=https://evil.example]deepspeed[/link]",
    "[/bold]",
    "evil\nddp 99 1 3",
    "=1+2",
    "-2",
    "@SUM(A1)",
    "x\u202egnp.exe",
    "<script>a|b</script>",
    f"ddp http://u:{SECRET}@h",
    # render, plots, emulate: mathtext and a terminal title sequence (ESC ] 0 ; ... BEL)
    "$\\notacommand{x}$",
    "$x^{2}$",
    "\x1b]0;owned\x07ddp",
]
GOOD_PERF = {
    "total_samples": 1000,
    "total_time": 20.0,
    "samples_per_sec": 50.0,
    "compile_time": 1.0,
    "programming_time": 1.0,
    "est_samples_per_sec": 60.0,
}


# ---------------------------------------------------------------- stores


def _job(
    w: Any,
    exp: str,
    strategy: str,
    size: int,
    t: int,
    epochs: list[float] | None = None,
    power: float = 200.0,
    util: float = 80.0,
    params: dict[str, Any] | None = None,
    steps: list[int] | None = None,
    perf: str | None = None,
) -> None:
    """One job: a top-level run and its rank-0 worker run."""
    epochs = [12.0, 10.0, 10.0] if epochs is None else epochs
    steps = list(range(len(epochs))) if steps is None else steps
    top = w.create_run(exp, f"{strategy}-{size}"[:200], t)
    run = w.create_run(exp, "worker_0 (main)", t, parent_run_id=top)
    points = [
        ("epoch_time_s", v, t + i, s) for i, (v, s) in enumerate(zip(epochs, steps, strict=False))
    ]
    points += [("gpu_power_W", power, t + s, s) for s in range(3)]
    points += [("gpu_utilization_percent", util, t + s, s) for s in range(3)]
    values = {"strategy": strategy, "global_rank": 0, "global_world_size": size}
    values["probing_interval"] = 1
    values.update(params or {})
    w.log_batch(run, points, values)
    if perf is not None:
        w.log_text(run, perf, "performance/performance.json")
    w.end_run(run, t + 60_000)
    w.end_run(top, t + 61_000)


def _experiment(w: Any, uri: str, name: str) -> str:
    from itwin_report.emulator import mlflow_writer

    return str(w.experiment_id(name, mlflow_writer.artifact_location(uri, name)))


# experiment name -> list of job keyword arguments (strategy, size and the bad part)
BAD_DATA: dict[str, list[dict[str, Any]]] = {
    "negative-epoch": [{"size": 2, "epochs": [12.0, -5.0, 10.0]}, {"size": 4}],
    "infinite-epoch": [{"size": 2, "epochs": [12.0, math.inf, 10.0]}, {"size": 4}],
    "zero-epoch": [{"size": 2, "epochs": [0.0, 0.0, 0.0]}, {"size": 4}],
    "duplicated-steps": [
        {"size": 2, "epochs": [12.0, 10.0, 10.0, 10.0], "steps": [0, 1, 1, 2]},
        {"size": 4},
    ],
    "nan-base": [{"size": 2, "epochs": [12.0, math.nan, math.nan]}, {"size": 4}],
    "negative-power": [{"size": 2, "power": -100.0}],
    "probing-zero": [{"size": 2, "params": {"probing_interval": 0}}],
    "probing-negative": [{"size": 2, "params": {"probing_interval": -1}}],
    "probing-infinite": [{"size": 2, "params": {"probing_interval": "inf"}}],
    "huge-world-size": [{"size": 2, "params": {"global_world_size": "1e30"}}],
    "utilization-1e6": [{"size": 2, "util": 1e6}],
    "trailing-space": [{"size": 2, "strategy": "ddp "}, {"size": 2, "strategy": "ddp"}],
    "perf-infinity": [{"size": 2, "perf": '{"total_samples": Infinity, "total_time": 2}'}],
    "perf-1e400": [{"size": 2, "perf": json.dumps(GOOD_PERF).replace("1000", "1e400")}],
    "perf-400-digits": [{"size": 2, "perf": json.dumps(GOOD_PERF).replace("1000", "9" * 400)}],
    "perf-deep": [{"size": 2, "perf": "[" * 100_000 + "]" * 100_000}],
}


@dataclass
class Stores:
    root: Path
    sqlite: str
    file_store: Path
    foreign_db: Path
    not_a_db: Path
    old_schema: Path
    values: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Stores:
    from itwin_report.emulator import mlflow_writer

    root = tmp_path_factory.mktemp("bad-inputs")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    w = mlflow_writer.RunWriter(uri)
    t = T0
    exp = _experiment(w, uri, "good")
    for size in (2, 4):
        _job(w, exp, "ddp", size, t, perf=json.dumps(GOOD_PERF))
        t += 100_000
    exp = _experiment(w, uri, "hostile")
    for name in HOSTILE:
        _job(w, exp, name, 2, t, params={"note": f"http://u:{SECRET}@h"})
        t += 100_000
    for name, jobs in BAD_DATA.items():
        exp = _experiment(w, uri, name)
        for job in jobs:
            _job(w, exp, **{"strategy": "ddp", **job}, t=t)
            t += 100_000

    file_store = root / "filestore"
    fw = mlflow_writer.RunWriter(str(file_store))
    exp = _experiment(fw, str(file_store), "good")
    _job(fw, exp, "ddp", 2, T0)
    _job(fw, exp, "ddp", 4, T0 + 100_000)
    metric_file = next(file_store.rglob("metrics/epoch_time_s"))
    with metric_file.open("ab") as handle:
        handle.write(b"garbage line\n\xff\xfe 1 2\n")

    foreign = root / "other-app.db"
    with sqlite3.connect(foreign) as con:
        con.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        con.execute("INSERT INTO alembic_version VALUES ('abc123')")
        con.execute("CREATE TABLE notes (body TEXT)")
    con.close()
    not_a_db = root / "notes.db"
    not_a_db.write_text("these are not the tables you are looking for\n")

    old = root / "old-schema.db"
    shutil.copyfile(root / "mlflow.db", old)
    with sqlite3.connect(old) as con:  # a metrics table from before is_nan existed
        con.executescript(
            "CREATE TABLE m2 AS SELECT key, value, timestamp, run_uuid, step FROM metrics;"
            "DROP TABLE metrics; ALTER TABLE m2 RENAME TO metrics;"
        )
    con.close()
    return Stores(root, uri, file_store, foreign, not_a_db, old)


def _snapshot(*dirs: Path) -> dict[str, str]:
    """Relative path -> sha256 of every file (and 'dir' for folders) under ``dirs``."""
    out = {}
    for base in dirs:
        for path in sorted(base.rglob("*")):
            key = f"{base.name}/{path.relative_to(base)}"
            out[key] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------- checks on outputs


def _json_tables(out: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(out)
    return doc


def sane_numbers(out: str, _work: Path) -> None:
    """No table cell negative, infinite or impossible, and the dropped data was warned about."""
    doc = _json_tables(out)
    for table in ("epoch_time", "gpu", "computation", "throughput"):
        for row in doc[table]:
            assert 0 < row["workers"] < 1_000_000, row
            for key, value in row.items():
                if isinstance(value, float):
                    assert math.isfinite(value) and 0 <= value < 1e9, (table, key, value)
            if row.get("utilization_pct") is not None:
                assert row["utilization_pct"] <= 100
            if row.get("avg_epoch_time_s") is not None:
                assert row["avg_epoch_time_s"] > 0
    assert doc["warnings"], "bad data was dropped without a warning"


def _row(doc: dict[str, Any], table: str, workers: int) -> dict[str, Any] | None:
    rows = [r for r in doc[table] if r["workers"] == workers]
    return rows[0] if rows else None


def bad_epoch_dropped(out: str, work: Path) -> None:
    """[12, bad, 10] after a 1-epoch warm-up: only the 10 s epoch is left."""
    sane_numbers(out, work)
    row = _row(_json_tables(out), "epoch_time", 2)
    assert row is not None and row["avg_epoch_time_s"] == 10.0 and row["epochs"] == 1


def zero_epochs_dropped(out: str, work: Path) -> None:
    sane_numbers(out, work)
    doc = _json_tables(out)
    assert _row(doc, "epoch_time", 2) is None
    assert any("epoch" in w for w in doc["warnings"])


def epochs_counted_once(out: str, work: Path) -> None:
    sane_numbers(out, work)
    row = _row(_json_tables(out), "epoch_time", 2)
    assert row is not None and row["epochs"] == 2  # steps 1 and 2 after warm-up, step 1 once


def nan_points_warned(out: str, work: Path) -> None:
    sane_numbers(out, work)
    assert any("nan" in w.lower() for w in _json_tables(out)["warnings"])


def interval_from_steps(out: str, work: Path) -> None:
    """A bad probing_interval is replaced by the step spacing (1 s): 3 x 200 W x 1 s on the one
    GPU that logged, scaled to the job's 2 GPUs."""
    sane_numbers(out, work)
    doc = _json_tables(out)
    row = _row(doc, "gpu", 2)
    assert row is not None and row["energy_wh"] == pytest.approx(2 * 3 * 200 / 3600)
    assert row["energy_coverage"] == pytest.approx(0.5)
    assert any("probing_interval" in w for w in doc["warnings"])


def distinct_rows(out: str, _work: Path) -> None:
    rows = [line for line in out.splitlines() if line.startswith("ddp")]
    assert len(rows) == len(set(rows)), "two rows look identical"


def plain_text_safe(out: str, _work: Path) -> None:
    assert "\x1b" not in out and "\u202e" not in out
    assert "\\x1b[31mred" in out and "[link=https://evil.example]" in out
    assert not any(line.startswith("ddp 99") for line in out.splitlines())


def markdown_safe(out: str, _work: Path) -> None:
    assert "<script>" not in out and "&lt;script&gt;" in out
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    epoch = rows[: 1 + len(HOSTILE)]
    assert len({line.count(" | ") for line in epoch}) == 1  # no cell adds a column


def csv_safe(out: str, _work: Path) -> None:
    import csv
    import io

    cells = {r["strategy"] for r in csv.DictReader(io.StringIO(out))}
    assert {"'=1+2", "'-2", "'@SUM(A1)"} <= cells and "=1+2" not in cells


def json_raw(out: str, _work: Path) -> None:
    strategies = {r["strategy"] for r in _json_tables(out)["epoch_time"]}
    assert "\x1b[31mred" in strategies and "evil\nddp 99 1 3" in strategies


def fixed_plot_names(_out: str, work: Path) -> None:
    names = sorted(p.name for p in (work / "plots").iterdir())
    assert names and all(n.isascii() and "\\" not in n and "[" not in n for n in names), names
    assert not any(p.name.startswith(".") for p in (work / "plots").iterdir())


def svg_text_safe(_out: str, work: Path) -> None:
    for path in (work / "plots").iterdir():
        text = path.read_text(encoding="utf-8")
        assert "\x1b" not in text and "\u202e" not in text, path.name


def nothing_written(_out: str, work: Path) -> None:
    assert sorted(p.name for p in work.iterdir()) == ["inputs"]


# loader edge
def uri_shape_kept(out: str, _work: Path) -> None:
    """The secret of a sqlite URI's query is masked; the URI keeps its four slashes."""
    uri = _json_tables(out)["tracking_uri"]
    assert uri.startswith("sqlite:////") and uri.endswith("/mlflow.db?password=***"), uri


def one_worker_rows(out: str, _work: Path) -> None:
    """``--workers-param probing_interval`` (1 everywhere): every job has 1 worker."""
    rows = _json_tables(out)["epoch_time"]
    assert rows and {r["workers"] for r in rows} == {1}, rows


# ---------------------------------------------------------------- the matrix


# render, plots, emulate
def csv_no_control_characters(out: str, _work: Path) -> None:
    assert not any(c in out for c in "\x1b\x07\u202e"), "a control character reached the CSV"
    assert "\\x1b]0;owned\\x07ddp" in out and "$\\notacommand{x}$" in out


def page_and_plots_literal(_out: str, work: Path) -> None:
    page = (work / "p.html").read_text(encoding="utf-8")
    assert "$x^{2}$" in page and "\x1b" not in page
    names = {p.name for p in (work / "plots").iterdir()}
    assert {"epoch_time.svg", "speedup.svg"} <= names, names
    for path in (work / "plots").iterdir():
        text = path.read_text(encoding="utf-8")
        assert "\x1b" not in text and "\x07" not in text, path.name


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    code: int
    check: Callable[[str, Path], None] | None = None
    needs: str = ""  # the area whose fix the case waits for (xfail until merged)
    run: bool = True


def R(exp: str, *args: str, store: str = "{sqlite}") -> tuple[str, ...]:
    return (REPORT, "--tracking-uri", store, "-e", exp, "-q", "--no-plots", *args)


def M(*args: str) -> tuple[str, ...]:
    return ("merge-performance", *args)


def E(*args: str, store: str = "sqlite:///{work}/emu.db") -> tuple[str, ...]:
    return ("emulate", "--tracking-uri", store, "--workers", "2", "--repeats", "1", *args)


# ---------------------------------------------------------------- compare and outputs: helpers


def C(*args: str) -> tuple[str, ...]:
    return ("compare", *args)


def CB(current: str, *args: str) -> tuple[str, ...]:
    """compare base.json with the saved report ``current``.json of the inputs."""
    return C("{work}/inputs/base.json", f"{{work}}/inputs/{current}.json", *args)


IN_SQLITE = ("--tracking-uri", "{sqlite}")
ARTIFACT_FILE = "{root}/artifacts/good/x.md"  # inside the experiment "good"'s artifact folder
AS_JSON = ("--format", "json", "--allow-missing")


def _side_doc(**epoch_8: Any) -> dict[str, Any]:
    """A saved JSON report: ddp-4 (20 s) and ddp-8 (10 s, or the given epoch-time fields)."""
    rows = [
        {"strategy": "ddp", "workers": 4, "avg_epoch_time_s": 20.0, "efficiency": 1.0},
        {"strategy": "ddp", "workers": 8, "avg_epoch_time_s": 10.0, "efficiency": 1.0, **epoch_8},
    ]
    return {"epoch_time": rows, "throughput": [], "gpu": [], "runs": []}


def _compare_inputs(folder: Path) -> None:
    """compare's saved reports, good and bad, beside merge-performance's inputs."""
    sides: dict[str, Any] = {
        "base": _side_doc(),
        "only-4": {**_side_doc(), "epoch_time": _side_doc()["epoch_time"][:1]},
        "empty": {"epoch_time": []},
        "negative-epoch": _side_doc(avg_epoch_time_s=-5.0),
        "tiny-epoch": _side_doc(avg_epoch_time_s=1e-310),
        "negative-workers": _side_doc(workers=-4),
    }
    for name, doc in sides.items():
        (folder / f"{name}.json").write_text(json.dumps(doc))
    huge = json.dumps(_side_doc()).replace('"avg_epoch_time_s": 10.0', '"avg_epoch_time_s": 1e400')
    (folder / "huge-epoch.json").write_text(huge)
    (folder / "huge-workers.json").write_text(json.dumps(_side_doc()).replace(": 8,", ": 1e400,"))
    (folder / "deep-side.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "latin1.json").write_bytes(
        '{"epoch_time": [], "x": "Gr\u00fc\u00dfe"}'.encode("latin-1")
    )


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"{name} in the output: not strict JSON")


def strict_comparison(out: str, _work: Path) -> None:
    """Strict JSON, every change finite, no configuration named after a bad value, warned."""
    doc = json.loads(out, parse_constant=_refuse_constant)
    assert doc["comparison"], "nothing was compared"
    for row in doc["comparison"]:
        assert math.isfinite(row["change"]) and row["baseline"] > 0 and row["current"] > 0, row
        assert 1 <= row["workers"] <= 1_000_000, row
    assert not any(r["workers"] == 8 and r["metric"] == "epoch_time" for r in doc["comparison"])
    assert len(doc["warnings"]) == 1 and "ddp-8" not in doc["missing"], doc


CASES = [
    # --- loader: stores that are missing, foreign, unreachable, old or damaged
    Case("missing-sqlite", R("good", store="sqlite:///{work}/nope.db"), 1, nothing_written),
    Case("missing-file-store", R("good", store="{work}/no-store"), 1, nothing_written),
    Case("foreign-sqlite", R("good", store="sqlite:///{own}/other-app.db"), 1),
    Case("text-file-as-db", R("good", store="sqlite:///{own}/notes.db"), 1),
    Case(
        "old-schema-read-as-is",
        R("good", "--format", "json", store="sqlite:///{own}/old-schema.db"),
        0,
        sane_numbers,
    ),
    Case("unknown-scheme", R("good", store=f"ftp://u:{SECRET}@h/x"), 1),
    Case("http-closed-port", R("good", store=f"http://u:{SECRET}@127.0.0.1:{{port}}"), 1),
    Case("https-secret-query", R("good", store="http://127.0.0.1:{port}/?token=" + SECRET), 1),
    Case(
        "postgres-closed-port", R("good", store=f"postgresql://u:{SECRET}@127.0.0.1:{{port}}/d"), 1
    ),
    Case(
        "file-store-garbage-line",
        R("good", "--format", "json", store="{filestore}"),
        0,
        sane_numbers,
    ),
    Case("no-experiment", R("nope"), 1),
    Case("no-matching-run", R("good", "-r", "nothing-99"), 1),
    Case("experiment-with-secret", R(f"http://u:{SECRET}@h"), 1),
    # --- report: bad data is a warning and never a wrong number
    *[
        Case(
            f"data-{name}",
            R(name, "--format", "json"),
            5 if name == "huge-world-size" else 0,  # its only job is skipped: nothing measured
            {
                "negative-epoch": bad_epoch_dropped,
                "infinite-epoch": bad_epoch_dropped,
                "zero-epoch": zero_epochs_dropped,
                "duplicated-steps": epochs_counted_once,
                "nan-base": nan_points_warned,
                "probing-zero": interval_from_steps,
                "probing-negative": interval_from_steps,
                "probing-infinite": interval_from_steps,
                "huge-world-size": nothing_written,
            }.get(name, sane_numbers),
            needs="",
        )
        for name in BAD_DATA
        if name != "trailing-space"
    ],
    Case("data-trailing-space", R("trailing-space"), 0, distinct_rows),
    # --- report: bad usage exits 2
    Case("usage-warmup-negative", R("good", "--warmup-epochs", "-1"), 2),
    Case("usage-warmup-text", R("good", "--warmup-epochs", "two"), 2),
    Case("usage-format", R("good", "--format", "xml"), 2),
    Case("usage-plot-format", R("good", "--plot-format", "gif"), 2),
    Case("usage-gate-nan", R("good", "--fail-under-efficiency", "nan"), 2),
    Case("usage-gate-inf", R("good", "--fail-under-efficiency", "inf"), 2),
    Case("usage-gate-negative", R("good", "--fail-under-efficiency", "-0.5"), 2),
    Case("usage-gate-text", R("good", "--fail-under-efficiency", "high"), 2),
    Case("usage-rate-config", R("good", "--rate-config", "bad"), 2),
    Case("usage-rate-config-zero", R("good", "--rate-config", "ddp:0"), 2),
    Case("usage-rate-config-no-strategy", R("good", "--rate-config", ":4"), 2),
    Case("usage-throughput-source", R("good", "--throughput-source", "guess"), 2),
    Case("usage-unknown-option", R("good", "--colour"), 2),
    Case("usage-output-is-store", R("good", "-o", "{root}/mlflow.db"), 2),
    Case(
        "usage-output-in-file-store", R("good", "-o", "{filestore}/r.txt", store="{filestore}"), 2
    ),
    Case(
        "usage-plot-dir-in-file-store",
        (REPORT, "--tracking-uri", "{filestore}", "-e", "good", "-q", "--plot-dir", "{filestore}"),
        2,
    ),
    Case("output-dir-missing", R("good", "-o", "{work}/no/such/dir/r.txt"), 1),
    Case("output-is-directory", R("good", "-o", "{work}"), 2),
    Case(
        "plot-dir-is-file",
        (
            REPORT,
            "--tracking-uri",
            "{sqlite}",
            "-e",
            "good",
            "-q",
            "--plot-dir",
            "{work}/inputs/a.json",
        ),
        2,
    ),
    Case("gate-fails", R("good", "--fail-under-efficiency", "0.99"), 3),
    Case("usage-gate-percentage", R("good", "--fail-under-efficiency", "70"), 2),
    Case(
        # every epoch in the warm-up: no epoch-time efficiency to check, so the gate cannot pass
        "gate-on-nothing",
        R("good", "--warmup-epochs", "50", "--fail-under-efficiency", "0.5"),
        3,
    ),
    # --- render: store values are text in every format
    Case("render-table", R("hostile"), 0, plain_text_safe),
    Case("render-markdown", R("hostile", "--format", "markdown"), 0, markdown_safe),
    Case("render-csv", R("hostile", "--format", "csv"), 0, csv_safe),
    Case("render-json", R("hostile", "--format", "json"), 0, json_raw),
    Case("render-to-file", R("hostile", "-o", "{work}/report.txt"), 0),
    Case(
        "render-plots",
        (REPORT, "--tracking-uri", "{sqlite}", "-e", "hostile", "-q", "--plot-dir", "{work}/plots"),
        0,
        fixed_plot_names,
    ),
    Case(
        "render-plot-labels",
        (*R("hostile")[:-1], "--plot-dir", "{work}/plots", "--plot-format", "svg"),
        0,
        svg_text_safe,
    ),
    # --- merge-performance
    Case("merge-no-files", M(), 2),
    Case("merge-missing-file", M("{work}/inputs/missing.json", "-o", "{work}/m.json"), 1),
    Case(
        "merge-not-json",
        M("{work}/inputs/a.json", "{work}/inputs/bad.json", "-o", "{work}/m.json"),
        1,
        nothing_written,
    ),
    Case("merge-empty-file", M("{work}/inputs/empty.json"), 1),
    Case("merge-directory", M("{work}/inputs"), 1),
    Case(
        "merge-estimates-disagree",
        M("{work}/inputs/a.json", "{work}/inputs/other-est.json", "-o", "{work}/m.json"),
        1,
        nothing_written,
    ),
    Case("merge-infinity", M("{work}/inputs/infinity.json"), 1),
    Case("merge-1e400", M("{work}/inputs/1e400.json"), 1),
    Case("merge-deep", M("{work}/inputs/deep.json"), 1),
    Case(
        "merge-text-ordinals",
        M("{work}/inputs/a.json", "{work}/inputs/text-ordinals.json"),
        1,
    ),
    Case("merge-list", M("{work}/inputs/list.json"), 1),
    Case("merge-output-dir-missing", M("{work}/inputs/a.json", "-o", "{work}/x/y/m.json"), 1),
    # --- emulate: checks every option before touching anything
    Case(
        "emulate-workers-huge",
        E("--workers", "100000000"),
        2,
        nothing_written,
    ),
    Case("emulate-workers-zero", E("--workers", "0"), 2, nothing_written),
    Case("emulate-seed-negative", E("--seed", "-1"), 2, nothing_written),
    Case("emulate-repeats-zero", E("--repeats", "0"), 2, nothing_written),
    Case("emulate-epochs-zero", E("--epochs", "0"), 2, nothing_written),
    Case("emulate-unknown-strategy", E("--strategies", "mpi"), 2, nothing_written),
    Case("emulate-bad-set", E("--set", "nonsense"), 2, nothing_written),
    Case("emulate-empty-name", E("--experiment-name", " "), 2, nothing_written),
    Case("emulate-foreign-db", E(store="sqlite:///{own}/other-app.db"), 1),
    Case("emulate-text-file-db", E(store="sqlite:///{own}/notes.db"), 1),
    Case("emulate-old-schema", E(store="sqlite:///{own}/old-schema.db"), 1),
    Case("emulate-closed-port", E(store=f"http://u:{SECRET}@127.0.0.1:{{port}}"), 1),
    # compare and outputs
    Case("compare-output-is-store", CB("base", *IN_SQLITE, "-o", "{root}/mlflow.db"), 2),
    Case("compare-output-is-wal", CB("base", *IN_SQLITE, "-o", "{root}/mlflow.db-wal"), 2),
    Case("compare-output-in-artifacts", CB("base", *IN_SQLITE, "-o", ARTIFACT_FILE), 2),
    Case(
        "compare-output-in-file-store",
        CB("base", "--tracking-uri", "{filestore}", "-o", "{filestore}/x.md"),
        2,
    ),
    Case("compare-output-is-a-side", CB("only-4", "-o", "{work}/inputs/only-4.json"), 2),
    Case("merge-output-is-an-input", M("{work}/inputs/a.json", "-o", "{work}/inputs/a.json"), 2),
    Case("merge-output-is-store", M("{work}/inputs/a.json", "-o", "mllogs/mlflow.db"), 2),
    Case("report-html-is-shm", R("good", "--html", "{root}/mlflow.db-shm"), 2),
    Case("emulate-truth-is-store", E("--truth", "{work}/emu.db"), 2, nothing_written),
    Case("emulate-truth-is-journal", E("--truth", "{work}/emu.db-journal"), 2, nothing_written),
    Case("emulate-truth-in-artifacts", E("--truth", "{work}/artifacts/x/t.json"), 2),
    Case("compare-max-regression-nan", CB("base", "--max-regression", "nan"), 2),
    Case("compare-max-regression-inf", CB("base", "--max-regression", "inf"), 2),
    Case("compare-negative-epoch", CB("negative-epoch", *AS_JSON), 0, strict_comparison),
    Case("compare-1e400-epoch", CB("huge-epoch", *AS_JSON), 0, strict_comparison),
    Case(
        "compare-1e-310-baseline",
        C("{work}/inputs/tiny-epoch.json", "{work}/inputs/base.json", *AS_JSON),
        0,
        strict_comparison,
    ),
    Case("compare-negative-workers", CB("negative-workers"), 4),
    Case("compare-workers-1e400", CB("huge-workers"), 1),
    Case("compare-deep", CB("deep-side"), 1),
    Case("compare-latin1", CB("latin1"), 1),
    Case("compare-db-as-side", C("{work}/inputs/base.json", "{root}/mlflow.db"), 1),
    Case("compare-missing-config", CB("only-4"), 4),
    Case("compare-empty-current", CB("empty"), 4),
    Case("compare-empty-current-allowed", CB("empty", "--allow-missing"), 5),
    # loader edge
    Case(
        "sqlite-uri-query-keeps-shape",
        R("good", "--format", "json", store="sqlite:///{root}/mlflow.db?password=" + SECRET),
        0,
        uri_shape_kept,
    ),
    Case(
        "workers-param-renamed",
        R("good", "--format", "json", "--workers-param", "probing_interval"),
        0,
        one_worker_rows,
    ),
    Case("workers-param-secret-text", R("hostile", "--workers-param", "note"), 5),
    Case("strategy-param-missing", R("good", "--strategy-param", "nope"), 5),
    Case(
        "world-size-1e30-warned-by-its-name",
        R("huge-world-size", "--format", "json", "--workers-param", "global_world_size"),
        5,
    ),
    Case("databricks-profile-one-line", R("good", store="databricks://no-such-profile"), 1),
    # render, plots, emulate
    Case("usage-predict-billion", R("good", "--predict", "1000000000"), 2),
    Case("usage-predict-40-digits", R("good", "--predict", "1" * 40), 2),
    Case("usage-predict-superscript", R("good", "--predict", "\u00b2"), 2),
    Case("usage-predict-zero", R("good", "--predict", "8,0"), 2),
    Case(
        "render-csv-control-characters",
        R("hostile", "--format", "csv"),
        0,
        csv_no_control_characters,
    ),
    Case(
        "render-mathtext-names-page-and-plots",
        (
            REPORT,
            "--tracking-uri",
            "{sqlite}",
            "-e",
            "hostile",
            "-q",
            "--predict",
            "8",
            "--html",
            "{work}/p.html",
            "--plot-dir",
            "{work}/plots",
            "--plot-format",
            "svg",
        ),
        0,
        page_and_plots_literal,
    ),
    Case("emulate-quiet", E("-q", "--epochs", "1", "--strategies", "horovod"), 0),
    Case("emulate-list-params", ("emulate", "--list-params", "--preset", "virgo"), 0),
    Case("emulate-unknown-param", E("--set", "no_such_param=1"), 2, nothing_written),
]


def _inputs(folder: Path) -> None:
    """merge-performance input files."""
    folder.mkdir()
    good = {**GOOD_PERF}
    (folder / "a.json").write_text(json.dumps(good))
    (folder / "other-est.json").write_text(json.dumps({**good, "est_samples_per_sec": 99.0}))
    (folder / "bad.json").write_text("{not json")
    (folder / "empty.json").write_text("")
    (folder / "infinity.json").write_text(json.dumps(good).replace("1000", "Infinity"))
    (folder / "1e400.json").write_text(json.dumps(good).replace("1000", "1e400"))
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "text-ordinals.json").write_text(json.dumps({**good, "ordinals": ["a", "b"]}))
    (folder / "list.json").write_text("[1, 2, 3]")
    _compare_inputs(folder)


def _params() -> list[Any]:
    out = []
    for case in CASES:
        marks = []
        if case.needs:
            reason = f"needs {case.needs} fix"
            marks.append(pytest.mark.xfail(strict=True, reason=reason, run=case.run))
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


def test_matrix_is_large_enough() -> None:
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", _params())
def test_bad_input(
    case: Case, stores: Stores, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    _inputs(work / "inputs")
    monkeypatch.chdir(work)
    values = {
        "sqlite": stores.sqlite,
        "root": str(stores.root),
        "filestore": str(stores.file_store),
        "work": str(work),
        "port": str(_closed_port()),
    }
    own = tmp_path / "own"
    own.mkdir()
    for name in ("other-app.db", "notes.db", "old-schema.db"):
        shutil.copyfile(stores.root / name, own / name)
    values["own"] = str(own)
    args = [a.format(**values) for a in case.args]
    before = _snapshot(stores.root, own)
    inputs_before = _snapshot(work / "inputs")
    result = cli_runner().invoke(main, args, env=ENV)
    out, err = result.stdout, result.stderr

    assert result.exit_code == case.code, (out[-500:], err)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert len(err.strip().splitlines()) <= 1, err
    assert "Traceback" not in err and "unexpected" not in err.lower()
    if case.code:
        assert err.startswith("Error: "), err
    assert _snapshot(stores.root, own) == before, "the store changed"
    assert _snapshot(work / "inputs") == inputs_before
    written = [p.read_bytes() for p in work.rglob("*") if p.is_file()]
    for text in (out, err, *(b.decode("utf-8", "replace") for b in written)):
        assert SECRET not in text
    if case.check is not None:
        case.check(out, work)
