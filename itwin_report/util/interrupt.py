"""Ctrl-C from the process's first millisecond: ``Error: interrupted by SIGINT``, exit 130.

Until a command runs there is nothing to clean up, so SIGINT ends the process at once (no
KeyboardInterrupt traceback from the middle of an import). While a command runs, SIGINT raises
KeyboardInterrupt as usual, so the stack unwinds and temporary files are removed; the command
group turns it into the same line and exit code.

Light module: standard library only (it runs before anything else is imported).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from itwin_report.util.errors import EXIT_SIGINT

MESSAGE = b"Error: interrupted by SIGINT\n"


def _exit_at_once(_signum: int, _frame: FrameType | None) -> None:
    with contextlib.suppress(OSError):
        os.write(2, MESSAGE)
    os._exit(EXIT_SIGINT)


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


@contextmanager
def sigint_unwinds() -> Iterator[None]:
    """While a command runs, Ctrl-C raises KeyboardInterrupt (temporary files go)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not _exit_at_once:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
