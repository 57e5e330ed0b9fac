"""The report: the model (``Report``, ``Analysis``), the table specs, and how tables are built.

Light on import (the table specs are read by ``--help``-time code): ``Report``, ``Analysis``,
and ``build_report`` load pandas on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from itwin_report.util.lazy import exports

if TYPE_CHECKING:
    from itwin_report.report.build import build_report
    from itwin_report.report.model import Analysis, Report

_EXPORTS = {
    "Report": "itwin_report.report.model",
    "Analysis": "itwin_report.report.model",
    "build_report": "itwin_report.report.build",
}


__getattr__ = exports(_EXPORTS)


__all__ = ["Analysis", "Report", "build_report"]
