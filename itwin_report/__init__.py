"""itwin-report: scalability reports for distributed deep-learning runs logged to MLflow."""

# Ctrl-C from the first line of the package on, when it runs as the command (the console
# script, or ``python -m itwin_report``): one line and exit 130, never a traceback from the
# middle of an import. Only built-in modules are touched until the handler is in place (no
# Python code runs that Ctrl-C could interrupt). Library users are left alone.
# (see itwin_report.util.interrupt, which hands Ctrl-C to a running command)
import _signal
import os as _os
import sys as _sys

_MESSAGE = b"Error: interrupted by SIGINT\n"


def _exit_at_once(_signum: int, _frame: object) -> None:
    try:  # noqa: SIM105 (contextlib is Python code: not before the handler is in place)
        _os.write(2, _MESSAGE)
    except OSError:
        pass
    _os._exit(130)


def _runs_as_command() -> bool:
    main_file = str(getattr(_sys.modules.get("__main__"), "__file__", None) or "")
    if _os.path.basename(main_file) in ("itwin-report", "itwin-report.exe"):
        return True
    argv = list(getattr(_sys, "orig_argv", ()))  # python -m itwin_report: being imported by runpy
    return any(a == "-m" and b == "itwin_report" for a, b in zip(argv, argv[1:], strict=False))  # noqa: RUF007


if _runs_as_command() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    try:  # noqa: SIM105
        _signal.signal(_signal.SIGINT, _exit_at_once)
    except ValueError:  # imported outside the main thread: leave signals alone
        pass

__version__ = "0.3.0"

from itwin_report.api import build, compare, load  # noqa: E402


def __getattr__(name: str) -> object:
    """``itwin_report.Report`` (the API's report class) without importing pandas up front."""
    if name == "Report":
        from itwin_report.render.notebook import Report

        return Report
    raise AttributeError(name)


__all__ = ["Report", "__version__", "build", "compare", "load"]
