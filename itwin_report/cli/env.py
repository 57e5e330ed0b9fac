"""The outside world as the commands see it, read once: terminals, environment variables, time.

The CLI builds one :class:`Environment` per invocation (``Environment.from_process()``); the
commands decide styling, the page's date and debugging from it instead of reading ``os.environ``
or ``isatty`` in the middle of the work, so tests drive every branch by building one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import click

DEBUG_ENV = "ITWIN_REPORT_DEBUG"


@dataclass(frozen=True)
class Environment:
    """Whether stdout/stderr are terminals, the variables that change output, and the clock."""

    stdout_tty: bool = False
    stderr_tty: bool = False
    variables: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_process(cls) -> Environment:
        return cls(sys.stdout.isatty(), sys.stderr.isatty(), dict(os.environ))

    @property
    def no_color(self) -> bool:
        """``NO_COLOR`` set (to anything): no styling (https://no-color.org)."""
        return "NO_COLOR" in self.variables

    @property
    def debug(self) -> bool:
        """``ITWIN_REPORT_DEBUG`` set: an unexpected error prints its traceback."""
        return bool(self.variables.get(DEBUG_ENV))

    def styled(self, fmt: str, to_file: bool) -> bool:
        """Rich styling only for a table printed on a terminal, never with ``NO_COLOR``."""
        return fmt == "table" and not to_file and self.stdout_tty and not self.no_color

    def now(self) -> datetime:
        """``SOURCE_DATE_EPOCH`` when set (reproducible pages), else the current time, in UTC."""
        from itwin_report.render.html import page_time

        return page_time(self.variables)


def current() -> Environment:
    """The invocation's environment (built by the group), or the process's outside a command."""
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if isinstance(ctx.obj, Environment):
            return ctx.obj
        ctx = ctx.parent
    return Environment.from_process()
