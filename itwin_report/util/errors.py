"""The project's one exception family; each kind carries its documented exit code.

Exit codes: 0 success, 1 user error or unreachable store (:class:`ReportError`),
2 bad usage (Click's own), 3 the efficiency gate failed (:class:`GateFailed`), 4 ``compare``
found a regression (:class:`RegressionFound`) or CURRENT lacks a configuration of BASELINE,
5 nothing measured (:class:`NothingMeasured`), 130 interrupted by SIGINT (Ctrl-C), 143
terminated by SIGTERM (:class:`Interrupted`). ``EXIT_CODES`` words them for ``--help``.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_GATE = 3
EXIT_REGRESSION = 4
EXIT_EMPTY = 5
EXIT_SIGINT = 130
EXIT_SIGNAL_BASE = 128  # interrupted: 128 + the signal's number (130 SIGINT, 143 SIGTERM)
EXIT_SIGTERM = EXIT_SIGNAL_BASE + 15

# every exit status and what it means: the command line's --help is written from this table
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_ERROR: "error (bad input, unreachable store, unreadable data, full disk)",
    EXIT_USAGE: "bad usage (unknown option, bad option value)",
    EXIT_GATE: "--fail-under-efficiency found a configuration below the threshold",
    EXIT_REGRESSION: "compare found a regression, or CURRENT lacks a configuration of BASELINE",
    EXIT_EMPTY: "nothing measured: no usable run, epoch or configuration to report",
    EXIT_SIGINT: "interrupted (Ctrl-C): no partial file is left",
    EXIT_SIGTERM: "terminated (SIGTERM): no partial file is left",
}


class ReportError(Exception):
    """A problem the user can fix: bad input, a missing store, a name that matches nothing."""

    exit_code = EXIT_ERROR


class StoreError(ReportError):
    """The tracking store is missing, unreachable or not in a layout we can read."""


class DataError(ReportError):
    """The data read is unusable (malformed file, disagreeing records, ...)."""


class BadOption(ReportError):
    """An option's value that its rule refuses (:mod:`itwin_report.options`): bad usage.
    ``problem`` is the message without the option's name (what Click prints after it)."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, problem: str = "") -> None:
        super().__init__(message)
        self.problem = problem or message


class GateFailed(ReportError):
    """``--fail-under-efficiency`` found a configuration below the threshold."""

    exit_code = EXIT_GATE


class RegressionFound(ReportError):
    """``compare`` found a change for the worse beyond the threshold and beyond noise."""

    exit_code = EXIT_REGRESSION


class BadCacheOption(ReportError):
    """A cache option out of its range (``--cache-size``): bad usage."""

    exit_code = EXIT_USAGE


class NothingMeasured(ReportError):
    """The report would be empty: no usable runs, every run failed, every epoch in the warm-up."""

    exit_code = EXIT_EMPTY


class Interrupted(BaseException):
    """SIGTERM (or SIGINT) received: unwinds like Ctrl-C so temporary files are removed.

    A ``BaseException``, like ``KeyboardInterrupt``, so no ``except Exception`` swallows it.
    """

    def __init__(self, signum: int, name: str) -> None:
        super().__init__(name)
        self.name = name
        self.exit_code = EXIT_SIGNAL_BASE + signum
