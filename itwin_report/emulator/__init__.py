"""The emulated cluster: a documented performance model and a writer of realistic MLflow runs.

Light on import; ``run_emulation``, ``expected_truth``, ``EmulationOptions`` and
``emulate_command`` are loaded on first access.
"""

from __future__ import annotations

from itwin_report.util.lazy import exports

_EXPORTS = {
    "EmulationOptions": "itwin_report.emulator.options",
    "EmulationResult": "itwin_report.emulator.writer",
    "run_emulation": "itwin_report.emulator.writer",
    "expected_truth": "itwin_report.emulator.truth",
    "emulate_command": "itwin_report.cli.emulate_cmd",
}


__getattr__ = exports(_EXPORTS)


__all__ = sorted(_EXPORTS)
