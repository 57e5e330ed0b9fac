"""Ctrl-C from the process's first millisecond: ``Error: interrupted by SIGINT``, exit 130.

Until a command runs there is nothing to clean up, so SIGINT ends the process at once (no
KeyboardInterrupt traceback from the middle of an import). While a command runs, SIGINT raises
KeyboardInterrupt as usual, so the stack unwinds and temporary files are removed; the command
group turns it into the same line and exit code.

Light module: standard library only (it runs before anything else is imported).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

# the handler the package installs on its first line when it runs as the command (the same
# function, so that a command knows it finds it)
from itwin_report import _exit_at_once


def exit_at_once_on_sigint() -> None:
    """Make Ctrl-C end the process at once (the main thread, and only over Python's default).

    A SIGINT that is ignored (``nohup``, a background job) or handled by someone else stays so.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _exit_at_once)


@contextmanager
def sigint_exits_at_once() -> Iterator[None]:
    """:func:`exit_at_once_on_sigint` for a while (the command line's parsing), then as before."""
    previous = signal.getsignal(signal.SIGINT)
    exit_at_once_on_sigint()
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is not previous and previous is not None:
            signal.signal(signal.SIGINT, previous)


class _Interrupts:
    """Whether Ctrl-C came while a command ran, even if some code swallowed the
    KeyboardInterrupt (a finalizer, a library's ``except BaseException``)."""

    def __init__(self) -> None:
        self.seen = False

    def handler(self, _signum: int, _frame: FrameType | None) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def quiet_hook(self, previous: Any) -> Any:
        """``sys.unraisablehook`` that drops a KeyboardInterrupt raised where Python cannot
        raise it (``Exception ignored in ...``): the command reports it, in one line."""

        def hook(unraisable: Any) -> None:
            if not isinstance(unraisable.exc_value, KeyboardInterrupt):
                previous(unraisable)

        return hook


@contextmanager
def sigint_unwinds() -> Iterator[None]:
    """While a command runs, Ctrl-C raises KeyboardInterrupt (temporary files go); a Ctrl-C
    that some code swallowed still ends the command with KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not _exit_at_once:
        yield
        return
    interrupts, hook = _Interrupts(), sys.unraisablehook
    sys.unraisablehook = interrupts.quiet_hook(hook)
    signal.signal(signal.SIGINT, interrupts.handler)
    try:
        yield
    except BaseException:
        if interrupts.seen:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = hook
    if interrupts.seen:
        raise KeyboardInterrupt
