"""The emulated cluster: a documented performance model and a writer of realistic MLflow runs.

Light on import; ``run_emulation``, ``expected_truth``, ``EmulationOptions`` and
``emulate_command`` are loaded on first access.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "EmulationOptions": "itwin_report.emulator.options",
    "EmulationResult": "itwin_report.emulator.writer",
    "run_emulation": "itwin_report.emulator.writer",
    "expected_truth": "itwin_report.emulator.truth",
    "emulate_command": "itwin_report.cli.emulate_cmd",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(name)


__all__ = sorted(_EXPORTS)
