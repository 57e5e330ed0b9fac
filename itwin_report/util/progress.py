"""Progress reporting on stderr, so stdout stays clean for pipes.

On a terminal a rich progress bar is drawn; otherwise (CI logs, pipes) one plain line is
printed when a task starts and one when it ends, never a stream of carriage returns.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from itwin_report.util.masking import mask_text

Advance = Callable[[int], None]


def _ignore(n: int = 1) -> None:
    """Progress sink when progress is off."""


@contextmanager
def progress(description: str, total: int, enabled: bool = True) -> Iterator[Advance]:
    """Yield ``advance(n)``; show a bar (terminal) or start/end lines (pipe) on stderr.

    ``description`` is masked: it may name a store.
    """
    description = mask_text(description)
    if not enabled:
        yield _ignore
        return
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        bar = Progress(
            "[progress.description]{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        with bar:
            task = bar.add_task(escape(description), total=total)

            def advance_bar(n: int = 1) -> None:
                bar.advance(task, n)

            yield advance_bar
        return
    start = time.perf_counter()
    done = [0]
    print(f"{description} ({total}) ...", file=sys.stderr, flush=True)

    def advance(n: int = 1) -> None:
        done[0] += n

    yield advance
    elapsed = time.perf_counter() - start
    print(f"{description}: {done[0]}/{total} done in {elapsed:.1f} s", file=sys.stderr, flush=True)
