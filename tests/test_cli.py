"""The command line through its real entry points: CliRunner, the console script, python -m."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli_runner, start_from_terminal

from itwin_report.cli import main
from itwin_report.emulator import EmulationOptions, run_emulation

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
REPORT = "generate-scalability-report"
ANSI = re.compile(r"\x1b\[")


@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A small emulated experiment: 2 strategies x 2 and 4 workers, 2 repeats."""
    db = tmp_path_factory.mktemp("cli") / "mlflow.db"
    uri = f"sqlite:///{db}"
    options = EmulationOptions(
        strategies=("deepspeed", "torch-ddp"),
        workers=(2, 4),
        epochs=3,
        repeats=2,
        experiment_name="cli",
    )
    run_emulation(options, uri)
    return uri


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = cli_runner().invoke(main, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def report(store: str, *args: str) -> tuple[int, str, str]:
    return invoke(REPORT, "--tracking-uri", store, "-e", "cli", "-q", *args)


def test_every_command_has_help_and_is_documented() -> None:
    code, out, _ = invoke("--help")
    assert code == 0 and "Exit codes" in out
    for name, command in main.commands.items():
        assert command.help and len(command.help) > 40, name
        assert f"itwin-report {name}" in README, name
        code, out, _ = invoke(name, "--help")
        assert code == 0 and "Example" in out, name
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("--") and opt != "--help":
                    assert f"`{opt}" in README, f"{name} {opt} is not in the README"


def test_table_is_plain_text_when_piped(store: str, tmp_path: Path) -> None:
    code, out, err = report(store, "--plot-dir", str(tmp_path / "p"))
    assert code == 0, err
    assert not ANSI.search(out)
    for heading in ("Epoch time", "GPU energy and utilization", "Computation vs other"):
        assert heading in out
    assert "Throughput" in out and "First 1 epoch(s)" in out
    rows = [
        line.split() for line in out.splitlines() if line.startswith(("deepspeed ", "torch-ddp "))
    ]
    # 4 configurations in each of the 4 tables, the GPU table's cost columns, the time
    # breakdown and the 95 % interval table (2 runs each), one Karp–Flatt row per strategy
    # (4 workers against 2), and the 3 configurations on the time–energy front
    assert len(rows) == 16 + 4 + 4 + 4 + 2 + 3
    assert err == ""  # -q: nothing on stderr


def test_json_report_schema(store: str) -> None:
    code, out, _ = report(store, "--format", "json", "--no-plots")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {
        "tool",
        "schema_version",
        "gate",
        "efficiency_note",
        "warning_records",
        "experiment",
        "tracking_uri",
        "warmup_epochs",
        "epoch_time",
        "gpu",
        "computation",
        "throughput",
        "time_breakdown",
        "communication",
        "stragglers",
        "trace_ranks",
        "baseline",
        "warnings",
        *("scaling", "scaling_note", "runs", "fastest", "scaling_models", "karp_flatt"),
        *("model_summary", "predictions", "prediction_notes", "node_steps"),
        "communication_model",
        *("cost_factors", "pareto", "pareto_gpu_hours", "recommendation", "summary"),
    }
    assert doc["experiment"] == "cli" and doc["warmup_epochs"] == 1
    epoch = doc["epoch_time"]
    assert [(r["strategy"], r["workers"]) for r in epoch] == [
        ("deepspeed", 2),
        ("deepspeed", 4),
        ("torch-ddp", 2),
        ("torch-ddp", 4),
    ]
    for row in epoch:
        assert isinstance(row["workers"], int) and row["runs"] == 2 and row["epochs"] == 4
        assert row["epoch_time_efficiency"] == pytest.approx(
            row["epoch_time_speedup"] * 2 / row["workers"]
        )
    assert {"energy_wh", "energy_wh_per_epoch", "utilization_pct", "avg_power_w"} <= set(
        doc["gpu"][0]
    )
    assert all(0 < r["computation_fraction"] <= 1 for r in doc["computation"])
    assert {"samples_per_sec", "input_bound", "source", "achieved_fraction"} <= set(
        doc["throughput"][0]
    )


def test_warmup_zero_and_run_name_filter(store: str) -> None:
    code, out, _ = report(store, "--format", "json", "--no-plots", "--warmup-epochs", "0")
    assert code == 0
    doc = json.loads(out)
    assert doc["warmup_epochs"] == 0 and all(r["epochs"] == 6 for r in doc["epoch_time"])
    code, out, _ = report(
        store, "--format", "json", "--no-plots", "-r", "deepspeed-2", "--run-names", "torch-ddp-4"
    )
    assert code == 0
    rows = [(r["strategy"], r["workers"]) for r in json.loads(out)["epoch_time"]]
    assert rows == [("deepspeed", 2), ("torch-ddp", 4)]


def test_markdown_and_csv_and_output_file(store: str, tmp_path: Path) -> None:
    code, out, _ = report(store, "--format", "markdown", "--no-plots")
    assert code == 0 and "## Epoch time" in out and "| --- |" in out.replace("|---|", "| --- |")
    target = tmp_path / "report.csv"
    code, out, _ = report(store, "--format", "csv", "--no-plots", "-o", str(target))
    assert code == 0 and out == ""
    lines = target.read_text().splitlines()
    assert lines[0].startswith("table,strategy,workers")
    assert sum(line.startswith("epoch_time,") for line in lines) == 4


def test_plots_are_written_in_the_chosen_format(store: str, tmp_path: Path) -> None:
    plot_dir = tmp_path / "plots"
    code, _, err = invoke(
        REPORT,
        "--tracking-uri",
        store,
        "-e",
        "cli",
        "--plot-dir",
        str(plot_dir),
        "--plot-format",
        "svg",
    )
    assert code == 0
    names = sorted(p.name for p in plot_dir.iterdir())
    assert "speedup.svg" in names and "gpu_energy.svg" in names and "rates.svg" in names
    assert all(p.read_bytes().lstrip()[:5] in (b"<?xml", b"<svg ") for p in plot_dir.iterdir())
    assert f"Wrote {len(names)} plots" in err


def test_efficiency_gate(store: str) -> None:
    code, out, err = report(store, "--no-plots", "--fail-under-efficiency", "1.0")
    assert code == 3  # every row below 100 % but the bases (2 workers here)
    assert "Epoch time" in out and "Efficiency gate" in out  # the report, with the verdict
    assert err.startswith("Error: Gate failed: epoch-time efficiency below 1:")
    assert "deepspeed-4 (0.90)" in err and "deepspeed-2" not in err
    code, _, _ = report(store, "--no-plots", "--fail-under-efficiency", "0.01")
    assert code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-e", "nope"), "no experiment named 'nope'; experiments: Default, cli"),
        (("-e", "cli", "-r", "ddp-99"), "ddp-99"),
    ],
)
def test_user_errors_are_one_line(store: str, args: tuple[str, ...], message: str) -> None:
    code, out, err = invoke(REPORT, "--tracking-uri", store, "--no-plots", "-q", *args)
    assert code == 1 and out == ""
    assert err.startswith("Error: ") and message in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_missing_store_and_itwinai_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code, _, err = invoke(REPORT, "-e", "x", "--no-plots")
    assert code == 1 and err.startswith("Error: ") and "mllogs/mlflow.db" in err
    assert not (tmp_path / "mllogs").exists()  # nothing created
    (tmp_path / "mllogs" / "mlflow").mkdir(parents=True)
    code, _, err = invoke(REPORT, "-e", "x", "--no-plots")
    assert code == 1 and "--tracking-uri mllogs/mlflow" in err


def test_bad_usage_exits_2(store: str) -> None:
    assert report(store, "--warmup-epochs", "-1")[0] == 2
    assert report(store, "--format", "xml")[0] == 2
    code, _, err = report(store, "--rate-config", "horovod")
    assert code == 2 and "STRATEGY:WORKERS" in err


def test_report_never_writes_to_the_store(store: str) -> None:
    db = Path(store.removeprefix("sqlite:///"))
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    assert report(store, "--no-plots")[0] == 0
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before


def _perf(path: Path, samples: float, time: float, est: float, **extra: float) -> Path:
    record = {
        "total_samples": samples,
        "total_time": time,
        "samples_per_sec": samples / time,
        "compile_time": 1.0,
        "programming_time": 2.0,
        "est_samples_per_sec": est,
        **extra,
    }
    path.write_text(json.dumps(record))
    return path


def test_merge_performance(tmp_path: Path) -> None:
    a = _perf(tmp_path / "a.json", 1000, 10, 500, compile_time=3.0)
    b = _perf(tmp_path / "b.json", 1200, 12, 500, programming_time=5.0)
    out = tmp_path / "merged.json"
    code, stdout, _ = invoke("merge-performance", str(a), str(b), "-o", str(out))
    assert code == 0 and stdout == ""
    merged = json.loads(out.read_text())
    # samples add up; total_time is the longest worker's; max of compile/programming times
    assert merged["total_samples"] == 2200 and merged["total_time"] == 12
    assert merged["samples_per_sec"] == 2200 / 12 and merged["est_samples_per_sec"] == 500
    assert merged["compile_time"] == 3.0 and merged["programming_time"] == 5.0
    code, stdout, _ = invoke("merge-performance", str(a), str(b))
    assert code == 0 and json.loads(stdout) == merged


def test_merge_performance_errors_write_nothing(tmp_path: Path) -> None:
    a = _perf(tmp_path / "a.json", 1000, 10, 500)
    c = _perf(tmp_path / "c.json", 1000, 10, 600)
    out = tmp_path / "merged.json"
    code, _, err = invoke("merge-performance", str(a), str(c), "-o", str(out))
    assert code == 1 and "a.json" in err and "c.json" in err and not out.exists()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = invoke("merge-performance", str(a), str(bad), "-o", str(out))
    assert code == 1 and "bad.json" in err and not out.exists()
    code, _, err = invoke("merge-performance", str(tmp_path / "missing.json"))
    assert code == 1 and "missing.json" in err


def test_console_script_and_module_entry_points() -> None:
    script = shutil.which("itwin-report", path=str(Path(sys.executable).parent))
    assert script, "the console script is not installed"
    proc = subprocess.run([script, "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "itwin-report" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "itwin_report", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and REPORT in proc.stdout


@pytest.mark.parametrize(
    "module", ["itwin_report.cli", "itwin_report.store", "itwin_report.render"]
)
def test_light_modules_do_not_import_heavy_ones(module: str) -> None:
    # --help and the CLI's imports must stay fast: heavy libraries load only when a command runs
    code = (
        f"import sys, {module}\n"
        "heavy = ('mlflow', 'pandas', 'matplotlib', 'numpy', 'sqlalchemy')\n"
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == ""


def test_bad_usage_is_one_masked_line(store: str) -> None:
    for args in (
        ("--fail-under-efficiency", "nan"),
        ("--fail-under-efficiency", "inf"),
        ("--rate-config", "ddp:0"),
        ("--format", "xml"),
    ):
        code, out, err = report(store, "--no-plots", *args)
        assert code == 2 and out == "", args
        assert err.startswith("Error: ") and len(err.strip().splitlines()) == 1, err
        assert args[0] in err and "--help" in err
    code, _, err = invoke(
        REPORT, "--tracking-uri", "http://bob:pw-123456@127.0.0.1:1", "-e", "x", "--bogus"
    )
    assert code == 2 and "pw-123456" not in err
    for args in (("--bogus",), ("no-such-command",)):
        code, out, err = invoke(*args)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert err.startswith("Error: ") and args[0] in err


def test_no_command_shows_the_help() -> None:
    result = cli_runner().invoke(main, [])
    assert "Usage:" in result.output and "Exit codes" in result.output
    assert "Error" not in result.output


def test_json_keys_are_documented() -> None:
    from itwin_report.report.specs import TABLES

    for spec in TABLES:
        assert f"`{spec.name}[]`" in README, spec.name
        for col in spec.columns:
            assert f"`{col.key}`" in README, col.key


def test_output_and_plot_dir_never_point_into_the_store(store: str, tmp_path: Path) -> None:
    db = Path(store.removeprefix("sqlite:///"))
    before = db.read_bytes()
    code, _, err = report(store, "--no-plots", "-o", str(db))
    assert code == 2 and "--output" in err and "into the tracking store" in err
    code, _, err = report(store, "--no-plots", "-o", f"{db}-wal")
    assert code == 2
    assert db.read_bytes() == before and not Path(f"{db}-wal").exists()


def test_errors_wrapping_server_text_are_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "env-secret-99")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    code, out, err = invoke(
        REPORT, "--tracking-uri", "http://al:pw-777777@127.0.0.1:1/?token=tk-8888", "-e", "x"
    )
    assert code == 1 and out == ""
    assert err.startswith("Error: ") and len(err.strip().splitlines()) == 1
    assert "pw-777777" not in err and "tk-8888" not in err and "env-secret-99" not in err


def test_atomic_write_leaves_nothing_when_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from itwin_report.util import atomic

    target = tmp_path / "report.txt"
    atomic.write_text(target, "complete\n")
    assert target.read_text() == "complete\n" and sorted(tmp_path.iterdir()) == [target]

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text(target, "partial")
    assert target.read_text() == "complete\n"  # the old file stays whole
    assert sorted(tmp_path.iterdir()) == [target]  # and no temporary file is left
    with pytest.raises(KeyboardInterrupt), atomic.staging_dir(tmp_path / "plots") as staging:
        (staging / "half.png").write_bytes(b"\x89PNG")
        raise KeyboardInterrupt
    assert list((tmp_path / "plots").iterdir()) == []


def _hanging_server() -> tuple[socket.socket, int]:
    """A TCP port that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    return server, int(server.getsockname()[1])


@pytest.mark.parametrize(
    ("sig", "code", "name"), [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")]
)
def test_signal_ends_the_report_cleanly(
    tmp_path: Path, sig: signal.Signals, code: int, name: str
) -> None:
    server, port = _hanging_server()
    env = {**os.environ, "MLFLOW_HTTP_REQUEST_TIMEOUT": "120", "MLFLOW_TRACKING_URI": ""}
    cmd = [
        sys.executable, "-m", "itwin_report", REPORT, "-e", "x", "-q",
        "--tracking-uri", f"http://al:pw-4242@127.0.0.1:{port}",
        "-o", str(tmp_path / "out" / "report.txt"), "--plot-dir", str(tmp_path / "out" / "plots"),
    ]  # fmt: skip
    (tmp_path / "out").mkdir()
    proc = start_from_terminal(cmd, env)
    try:
        server.settimeout(120)
        conn, _ = server.accept()  # the report is now waiting on the store
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        conn.close()
    finally:
        server.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert err == f"Error: interrupted by {name}\n" and out == ""
    assert list((tmp_path / "out").iterdir()) == []  # no report, no temporary file


def test_a_secret_in_an_unmasked_message_is_masked_at_the_exit(store: str) -> None:
    """The experiment name is echoed back verbatim by the store's error; the CLI's one exit
    point masks it (no site on the way does)."""
    secret = "Sw0rdfish-77"
    code, out, err = invoke(
        REPORT, "--tracking-uri", store, "-q", "--no-plots", "-e", f"http://u:{secret}@h/x"
    )
    assert code == 1 and out == ""
    assert secret not in err and "***" in err
    assert err.count("\n") == 1


def test_the_environment_decides_styling_and_debugging() -> None:
    from itwin_report.cli.env import Environment

    tty = Environment(stdout_tty=True, variables={})
    assert tty.styled("table", to_file=False)
    assert not tty.styled("markdown", to_file=False) and not tty.styled("table", to_file=True)
    assert not Environment(stdout_tty=True, variables={"NO_COLOR": ""}).styled("table", False)
    assert not Environment(stdout_tty=False).styled("table", to_file=False)
    assert Environment(variables={"ITWIN_REPORT_DEBUG": "1"}).debug
    assert Environment(variables={"SOURCE_DATE_EPOCH": "86400"}).now().day == 2
