"""The command group: the one place the project's errors become one-line messages and exit codes.

Every message is masked and kept to one line; usage errors exit 2, a signal unwinds the stack
(130 for SIGINT, 143 for SIGTERM) so no temporary file is left; a SIGINT before the command
runs ends the process at once (:mod:`itwin_report.util.interrupt`). Light module: click only.
"""

from __future__ import annotations

import signal
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from itwin_report.cli.env import DEBUG_ENV, Environment
from itwin_report.util.errors import EXIT_ERROR, EXIT_SIGINT, Interrupted, ReportError
from itwin_report.util.escape import terminal
from itwin_report.util.interrupt import sigint_exits_at_once, sigint_unwinds
from itwin_report.util.masking import mask_text


class _NeverRaised(Exception):
    """Stands in for click 8.2's NoArgsIsHelpError on click 8.1 (which exits with the help)."""


_HELP_ON_NO_ARGS: type[Exception] = getattr(click.exceptions, "NoArgsIsHelpError", _NeverRaised)


class Failure(click.ClickException):
    """A ReportError on its way out: ``Error: <message>`` on stderr and the error's exit code.

    The message is masked and kept to one line.
    """

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(_one_line(message))
        self.exit_code = exit_code  # type: ignore[misc]


def _one_line(message: str) -> str:
    """A masked message on one line (line breaks of wrapped errors joined with ' / '), its
    control characters escaped as store text is (a server's or a file's text among them)."""
    lines = [line.strip() for line in mask_text(message).splitlines() if line.strip()]
    return terminal(" / ".join(lines))


def _on_sigterm(signum: int, _frame: Any) -> None:
    raise Interrupted(signum, "SIGTERM")


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """While a command runs, SIGTERM unwinds the stack like Ctrl-C (temporary files go)."""
    try:
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _usage_failure(exc: click.UsageError, ctx: click.Context) -> Failure:
    """A usage error as one line (not usage + hint + error), exit code 2."""
    where = exc.ctx.command_path if exc.ctx else ctx.command_path
    return Failure(f"{exc.format_message()} (see '{where} --help')", exc.exit_code)


class ReportGroup(click.Group):
    """Turns the project's exceptions into one-line masked errors with documented exit codes.

    Ctrl-C before the command runs (while parsing, or while still importing) exits 130 at once
    with the same one line: nothing needs cleaning up yet.
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        with sigint_exits_at_once():
            return super().main(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except _HELP_ON_NO_ARGS:  # no command given: the help text, as usual
            raise
        except click.UsageError as exc:
            raise _usage_failure(exc, ctx) from None

    def invoke(self, ctx: click.Context) -> Any:
        if not isinstance(ctx.obj, Environment):
            ctx.obj = Environment.from_process()
        try:
            with _sigterm_unwinds(), sigint_unwinds():
                return super().invoke(ctx)
        except ReportError as exc:
            raise Failure(str(exc), exc.exit_code) from None
        except KeyboardInterrupt:
            raise Failure("interrupted by SIGINT", EXIT_SIGINT) from None
        except Interrupted as exc:
            raise Failure(f"interrupted by {exc.name}", exc.exit_code) from None
        except click.UsageError as exc:
            raise _usage_failure(exc, ctx) from None
        except click.ClickException as exc:
            exc.message = _one_line(exc.message)  # type: ignore[misc]
            raise
        except (click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:  # a bug, not user input: keep it to one line unless debugging
            if ctx.obj.debug:
                traceback.print_exc()
            hint = f" (set {DEBUG_ENV}=1 for the traceback)"
            raise Failure(f"unexpected {type(exc).__name__}: {exc}{hint}", EXIT_ERROR) from None
