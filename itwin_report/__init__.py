"""itwin-report: scalability reports for distributed deep-learning runs logged to MLflow."""

import os as _os
import sys as _sys

__version__ = "0.1.0"

from itwin_report.api import build, compare, load

__all__ = ["__version__", "build", "compare", "load"]

# The console script imports the CLI through this package: Ctrl-C while it still imports ends
# it with one line (see itwin_report.interrupt), never a traceback. Library users are left alone.
if _os.path.basename(str(getattr(_sys.modules.get("__main__"), "__file__", None) or "")) in (
    "itwin-report",
    "itwin-report.exe",
):
    from itwin_report.interrupt import exit_at_once_on_sigint

    exit_at_once_on_sigint()
