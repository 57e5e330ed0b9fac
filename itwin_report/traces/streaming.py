"""The streaming read of a trace, by ijson: every event parsed into Python objects, a batch at a
time. Slower than :mod:`itwin_report.traces.pieces`, but it takes any layout of well-formed
JSON and decides what a file that is not one holds (empty, not JSON, cut short), so it reads
whatever the fast read declines and words every error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from itwin_report.traces.columns import Columns
from itwin_report.traces.shape import ShapeError, ShapeGuard
from itwin_report.traces.source import Edges, TraceReadError

CHUNK = 1 << 20  # bytes handed to the parser at once
BATCH = 10_000  # events handed over at once by the parser


def read_streaming(path: Path, fh: Any, columns: Columns, edges: Edges) -> int:
    """Every event of ``fh`` through ijson into ``columns`` (the bytes read), the metadata into
    ``edges``; ``TraceReadError`` naming ``path`` and saying what is wrong."""
    import ijson

    tee = _Tee(fh, edges)
    batch: list[Any] = []
    try:
        for event in ijson.items(tee, "traceEvents.item", use_float=True, buf_size=CHUNK):
            batch.append(event)
            if len(batch) >= BATCH:
                columns.add_many(batch)
                batch.clear()
        columns.add_many(batch)
    except ijson.JSONError as exc:
        columns.add_many(batch)
        read = tee.read_bytes
        what = "not JSON" if read and not columns.events else "truncated or malformed JSON"
        if not read:
            what = "empty file"
        raise TraceReadError(f"{path}: {what} ({_short(exc)})") from None
    except UnicodeDecodeError:
        raise TraceReadError(f"{path}: not JSON (not UTF-8 text)") from None
    except ShapeError as exc:  # before the parser builds it
        raise TraceReadError(f"{path}: not a trace ({exc})") from None
    return tee.read_bytes


class _Tee:
    """The file as ijson reads it, every chunk also shown to the metadata reader and checked
    for its shape (:mod:`~itwin_report.traces.shape`) before ijson parses it."""

    def __init__(self, fh: Any, edges: Edges) -> None:
        self.fh, self.edges, self.read_bytes = fh, edges, 0
        self.shape = ShapeGuard()

    def read(self, size: int = -1) -> bytes:
        chunk = self.fh.read(size)
        self.read_bytes += len(chunk)
        self.shape.feed(chunk)
        self.edges.feed(chunk)
        return chunk


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:120]
