"""Run in a fresh interpreter by tests/test_host_process.py: call every entry point of the API,
on success and on its error paths, as a notebook would, and print (JSON) what each call left
changed in the host process: environment, signal handlers, logging, matplotlib, working folder.

    python host_process_probe.py SQLITE_URI EXPERIMENT FILE_STORE TRACE_FOLDER SIDE MISSING [HTTP]
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import warnings
from collections.abc import Callable
from typing import Any

import matplotlib

matplotlib.use("svg")  # the host's choice, not the report's Agg
import matplotlib.pyplot as plt

plt.rcParams["font.size"] = 13.0
logging.basicConfig(level=logging.INFO, format="host %(message)s")
logging.getLogger("mlflow").setLevel(logging.DEBUG)  # the host asked MLflow to say everything
warnings.simplefilter("default")
# urllib3 and requests add warning filters of their own when first imported, in any program; a
# host that talks to MLflow has imported them already (what they do on import is theirs)
import requests  # noqa: E402, F401


def _loggers() -> dict[str, Any]:
    """Every logger's level, handlers, propagation and whether it was disabled."""
    manager = logging.Logger.manager
    out = {"": _one(logging.getLogger())}
    for name, logger in sorted(manager.loggerDict.items()):
        if isinstance(logger, logging.Logger):
            out[name] = _one(logger)
    return out


def _one(logger: logging.Logger) -> list[Any]:
    handlers = [f"{type(h).__name__}:{h.level}:{id(h)}" for h in logger.handlers]
    return [logger.level, handlers, logger.propagate, logger.disabled]


def snapshot() -> dict[str, Any]:
    return {
        "environ": dict(os.environ),
        "signals": {s.name: repr(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM)},
        "logging": _loggers(),
        "rcParams": {k: repr(v) for k, v in matplotlib.rcParams.items()},
        "backend": matplotlib.get_backend(),
        "cwd": os.getcwd(),
        "warnings": repr(warnings.filters),
    }


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What ``after`` differs in, one text per changed item (new loggers do not count: a
    module's own logger is created on import, as every library's is)."""
    out = []
    for part in before:
        old, new = before[part], after[part]
        if isinstance(old, dict):
            keys = set(old) | set(new) if part != "logging" else set(old)
            out += [f"{part}[{k}]: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(keys)
                    if old.get(k) != new.get(k)]  # fmt: skip
        elif old != new:
            out.append(f"{part}: {old!r} -> {new!r}")
    return out


def main(argv: list[str]) -> None:
    before = snapshot()
    import itwin_report as ir
    from itwin_report.api import read_traces
    from itwin_report.util.errors import ReportError

    result: dict[str, Any] = {"import": {"outcome": "ok", "changed": changes(before, snapshot())}}
    uri, experiment, file_store, traces, side, missing, *http = argv
    report_box: dict[str, Any] = {}

    def load() -> None:
        report_box["data"] = ir.load(uri, experiment)

    def build() -> None:
        report_box["report"] = ir.build(report_box["data"], predict=[64], traces=traces)

    calls: dict[str, Callable[[], Any]] = {
        "load": load,
        "load a file store": lambda: ir.load(file_store),
        "load a missing store": lambda: ir.load(missing, experiment),
        "load an unknown experiment": lambda: ir.load(uri, "no-such-experiment"),
        "load with a bad argument": lambda: ir.load(uri, experiment, include_unfinished="no"),
        "build": build,
        "build with a bad argument": lambda: ir.build(report_box["data"], predict="x"),
        "build from nothing": lambda: ir.build(None),  # type: ignore[arg-type]
        "build with a missing trace folder": lambda: ir.build(
            report_box["data"], traces=traces + "-missing"
        ),
        "read_traces from the store": lambda: read_traces(
            report_box["data"], traces, tracking_uri=uri
        ),
        "figures": lambda: [plt.close(f) for f in report_box["report"].figures().values()],
        "to_html": lambda: report_box["report"].to_html(),
        "to_text": lambda: report_box["report"].to_text(),
        "to_json": lambda: report_box["report"].to_json(),
        "compare": lambda: ir.compare(report_box["report"], side),
        "compare with a bad argument": lambda: ir.compare(side, side, max_regression=-1),
        "compare a missing file": lambda: ir.compare(side, side + "-missing"),
    }
    for i, server in enumerate(http):
        calls[f"load a failing server {i}"] = lambda server=server: ir.load(server)
    for name, call in calls.items():
        before = snapshot()
        try:
            call()
            outcome = "ok"
        except ReportError as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        result[name] = {"outcome": outcome, "changed": changes(before, snapshot())}
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
