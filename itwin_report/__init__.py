"""itwin-report: scalability reports for distributed deep-learning runs logged to MLflow."""

import os as _os
import sys as _sys

__version__ = "0.3.0"

from itwin_report.api import build, compare, load


def __getattr__(name: str) -> object:
    """``itwin_report.Report`` (the API's report class) without importing pandas up front."""
    if name == "Report":
        from itwin_report.render.notebook import Report

        return Report
    raise AttributeError(name)


__all__ = ["Report", "__version__", "build", "compare", "load"]

# The console script imports the CLI through this package: Ctrl-C while it still imports ends
# it with one line (see itwin_report.util.interrupt), never a traceback. Library users are
# left alone.
if _os.path.basename(str(getattr(_sys.modules.get("__main__"), "__file__", None) or "")) in (
    "itwin-report",
    "itwin-report.exe",
):
    from itwin_report.util.interrupt import exit_at_once_on_sigint

    exit_at_once_on_sigint()
