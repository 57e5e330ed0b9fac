"""The API is a good citizen in its host process (a notebook, a training script): no call of
``ir.load``, ``ir.build``, ``ir.compare``, ``read_traces`` or a report's methods leaves the
environment, the SIGINT and SIGTERM handlers, the logging configuration, matplotlib's rcParams
and backend, the warning filters or the working folder changed, on success or on any error path.

Run in a fresh interpreter (tests/host_process_probe.py), so first imports count too, with a
host that chose its own matplotlib backend, rcParams, logging and warning filters. Over HTTP a
failed load with a token in its URI leaves no MLFLOW_TRACKING_TOKEN (nor MLFLOW_HTTP_REQUEST_*)
behind, which the next load of another server would send.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from itwin_report.emulator import kineto

PROBE = Path(__file__).with_name("host_process_probe.py")
SIDE = {
    "epoch_time": [
        {"strategy": "ddp", "workers": 1, "avg_epoch_time_s": 100.0, "efficiency": 1.0},
        {"strategy": "ddp", "workers": 2, "avg_epoch_time_s": 60.0, "efficiency": 0.83},
    ],
    "throughput": [],
    "gpu": [],
    "runs": [],
}


def _probe(args: list[str], cwd: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent.parent), *sys.path[1:2]])
    done = subprocess.run(
        [sys.executable, str(PROBE), *args], capture_output=True, text=True, cwd=cwd, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr == ""  # nothing logged through the host's own handlers either
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_every_entry_point_leaves_the_host_as_it_found_it(
    scaling_sqlite: tuple[str, dict[str, Any]],
    scaling_file_store: tuple[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    traces = tmp_path / "traces" / "ddp-2" / "torch-traces"
    for rank in (0, 1):
        kineto.write(kineto.RankSpec(rank=rank, world_size=2, steps=3), traces)
    side = tmp_path / "side.json"
    side.write_text(json.dumps(SIDE))
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    with socket.socket() as sock:  # closed when the block ends: nobody listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # a token in the URI of a server that fails: it must not stay in the environment
    server = f"http://127.0.0.1:{port}/?token=s3cr3t-token"
    args = [scaling_sqlite[0], "scaling", scaling_file_store[0], str(tmp_path / "traces"),
            str(side), missing, server]  # fmt: skip
    got = _probe(args, tmp_path)
    outcomes = {name: call["outcome"].split(":")[0] for name, call in got.items()}
    assert outcomes == {
        "import": "ok",
        "load": "ok",
        "load a file store": "ok",
        "load a missing store": "StoreError",
        "load an unknown experiment": "StoreError",
        "load with a bad argument": "BadOption",
        "build": "ok",
        "build with a bad argument": "BadOption",
        "build from nothing": "BadOption",
        "build with a missing trace folder": "ReportError",
        "read_traces from the store": "ok",
        "figures": "ok",
        "to_html": "ok",
        "to_text": "ok",
        "to_json": "ok",
        "compare": "ok",
        "compare with a bad argument": "BadOption",
        "compare a missing file": "DataError",
        "load a failing server 0": "StoreError",
    }
    changed = {name: call["changed"] for name, call in got.items() if call["changed"]}
    assert changed == {}
