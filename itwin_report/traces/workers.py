"""The processes that read traces in parallel, and what Ctrl-C does to them.

Workers are forked from a fork server (on Linux; spawned elsewhere). A terminal sends Ctrl-C
to every process of its foreground group, the fork server and the workers included: they
ignore it (the fork server from the first module it preloads, :mod:`~itwin_report.traces.
ignore_sigint`, and each worker from its start), so only the command prints its one line. The
command, on Ctrl-C or SIGTERM, tells the workers to stop (SIGTERM, then waits for them) and
stops a fork server it started, so nothing is left running when it exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

# what the fork server imports before the workers are forked from it: first the module that
# makes it ignore Ctrl-C; the caller's main module (as a spawned worker would), the reader,
# and pandas, which pyarrow imports on its first conversion (0.2 s in each worker otherwise)
PRELOAD = (
    "itwin_report.traces.ignore_sigint",
    "__main__",
    "itwin_report.traces.analyze",
    "itwin_report.traces.pieces",
    "pyarrow.json",
    "pyarrow.compute",
    "pandas",
    "ijson",
)


def pool_context() -> Any:
    """How the workers start: on Linux, forked from a fork server, a fresh process (started
    once per process, so nothing of the caller's threads or state) that has imported
    ``PRELOAD``, so a worker costs a fork; elsewhere spawned, each a new interpreter."""
    import multiprocessing

    if not sys.platform.startswith("linux"):
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


def ignore_sigint() -> None:
    """A worker's start: Ctrl-C is for the command, which tells the worker when to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _fork_server_pid() -> int | None:
    from multiprocessing import forkserver

    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


def map_in_workers(fn: Callable[[Any], Any], items: Sequence[Any], workers: int) -> list[Any]:
    """``[fn(item) for item in items]`` in ``workers`` processes, in order.

    On any exception in this process (Ctrl-C, SIGTERM's, an error) the workers are
    terminated and waited for, and a fork server this call started is stopped, before the
    exception goes on.
    """
    context = pool_context()
    server_before = _fork_server_pid()
    pool = context.Pool(processes=workers, initializer=ignore_sigint)
    try:
        results = pool.map(fn, items, chunksize=1)
        pool.close()
    except BaseException:
        pool.terminate()
        if server_before is None:
            _stop_fork_server()
        raise
    finally:
        pool.join()
    return results


def _stop_fork_server() -> None:
    """Stop the fork server (it would otherwise finish its imports, seconds, before it sees
    this process gone); a later pool starts a new one."""
    pid = _fork_server_pid()
    if pid is None:
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(OSError):
        os.waitpid(pid, 0)
