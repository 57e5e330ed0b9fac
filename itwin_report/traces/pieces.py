"""The fast read of a trace: its event list a few MiB at a time, each piece cut between two
events where PyTorch's layout puts a line break and parsed by pyarrow's JSON reader, which
converts only the fields the timelines use (two to three times as fast as parsing every event
into Python objects; like Python's own JSON reader, and HTA, it takes a ``NaN``).

It reads only what it can be sure of: a file laid out otherwise (all events on one line), a
piece with no cut in it, text that is not plain, well-formed JSON, or an end that does not close
the object, and :func:`read_pieces` declines (None) so that the caller reads the file again with
:mod:`itwin_report.traces.streaming`, which keeps the same columns.
"""

from __future__ import annotations

import re
from typing import Any

from itwin_report.traces.columns import Columns
from itwin_report.traces.source import HEAD_LIMIT, Edges, object_end

PIECE = 4 << 20  # bytes of events parsed at once by pyarrow
MAX_PIECE = 64 << 20  # a piece with no cut in it is left to the streaming parser
EVENTS_START = re.compile(rb'"traceEvents"\s*:\s*\[')
# between two events as PyTorch writes them: "},", a line break, the indentation, "{" (a line
# break cannot be inside a JSON string, so this is structure; the first one in the list is
# between its first two events, and the same text is looked for after that)
EVENT_BREAK = re.compile(rb"\},\r?\n[ \t]*\{")
FLOAT_TS = re.compile(rb'"ts"\s*:\s*-?[0-9]+[.eE]')
ARROW_SCHEMA: Any = None  # the fields converted (built on first use: pyarrow loads lazily)


def read_pieces(fh: Any, columns: Columns, edges: Edges) -> int | None:
    """The events parsed a piece of about ``PIECE`` bytes at a time, each piece cut between two
    events (the bytes read); None when the file is not laid out as PyTorch writes it (an event
    list with a line break between events) or anything in it is not plain, well-formed JSON."""
    read, buf = 0, b""
    while True:  # up to the event list's opening bracket
        chunk = fh.read(PIECE)
        read += len(chunk)
        edges.feed(chunk)
        buf += chunk
        start = EVENTS_START.search(buf)
        if start:
            if not edges.head_reads(start.start()):  # buf holds the file from its start
                return None
            buf = buf[start.end() :]
            break
        if not chunk or len(buf) > HEAD_LIMIT:
            return None
    sep = None
    while chunk:
        chunk = fh.read(PIECE)
        read += len(chunk)
        edges.feed(chunk)
        buf += chunk
        if not chunk:
            break
        if sep is None:
            found = EVENT_BREAK.search(buf)
            if found is None:
                if len(buf) > MAX_PIECE:
                    return None
                continue
            sep = found.group()
        cut = buf.rfind(sep)
        if cut < 0:
            if len(buf) > MAX_PIECE:
                return None
            continue
        if not add_piece(columns, buf[: cut + 1], sep):
            return None
        buf = buf[cut + 2 :]
    close = len(buf)
    for _ in range(8):  # the list's closing bracket: the last "]" that the object's end follows
        close = buf.rfind(b"]", 0, close)
        if close < 0:
            break
        if object_end(buf[close + 1 :]):
            last = buf[:close].strip()
            if sep is None:
                found = EVENT_BREAK.search(last)
                sep = found.group() if found else b"},\n{"
            return read if not last or add_piece(columns, last, sep) else None
    return None


def add_piece(columns: Columns, piece: bytes, sep: bytes) -> bool:
    """Keep what the timelines need of a piece of the event list (events separated by
    ``sep``), parsed by pyarrow; False, and nothing kept, when pyarrow cannot read it all."""
    import pyarrow as pa

    text = piece.replace(sep, b"}" + sep[2:])  # the commas between events out
    try:
        table = arrow_events(text)
    except (pa.ArrowException, ValueError):
        return False
    if columns.whole_ts and (table.column("ts").null_count or FLOAT_TS.search(piece)):
        columns.whole_ts = False  # as Columns.add_many decides it
    try:
        columns.add_table(table)
    except UnicodeDecodeError:  # pyarrow took text that is not UTF-8: the careful reader words it
        return False
    columns.add_ops_text(piece, sep)
    return True


def arrow_events(text: bytes) -> Any:
    """The events of ``text`` (objects separated by white space, one block) as a pyarrow
    table of the fields the timelines use; every other field is skipped unconverted."""
    import pyarrow as pa
    import pyarrow.json as pj

    global ARROW_SCHEMA
    if ARROW_SCHEMA is None:
        args = pa.struct(
            [
                ("stream", pa.int64()),
                ("correlation", pa.int64()),
                # a communication kernel's message (PyTorch 2.x; traces/collectives.py)
                ("Collective name", pa.string()),
                ("In msg nelems", pa.int64()),
                ("Out msg nelems", pa.int64()),
                ("dtype", pa.string()),
                ("Group size", pa.int64()),
            ]
        )
        ARROW_SCHEMA = pa.schema(
            [
                ("ts", pa.float64()),
                ("dur", pa.float64()),
                ("cat", pa.string()),
                ("name", pa.string()),
                ("args", args),
            ]
        )
    return pj.read_json(
        pa.BufferReader(text),
        read_options=pj.ReadOptions(block_size=len(text) + 1, use_threads=False),
        parse_options=pj.ParseOptions(
            explicit_schema=ARROW_SCHEMA,
            unexpected_field_behavior="ignore",
            newlines_in_values=True,
        ),
    )


def scan_ops(fh: Any, columns: Columns) -> None:
    """The comms operators the fast read left in the text (``columns.op_names``), found by
    name in a second read of the file, a piece at a time, nothing else parsed: for a trace
    whose kernels need the sizes their ops recorded (an older trace)."""
    names = dict.fromkeys(sorted(columns.op_names), -1)
    buf, sep, started = b"", None, False
    while True:
        chunk = fh.read(PIECE)
        buf += chunk
        if not started:
            found = EVENTS_START.search(buf)
            if found is None:
                if not chunk or len(buf) > HEAD_LIMIT:
                    return
                continue
            buf, started = buf[found.end() :], True
        if sep is None:
            match = EVENT_BREAK.search(buf)
            if match is None and chunk and len(buf) <= MAX_PIECE:
                continue
            sep = match.group() if match else b"},\n{"
        if not chunk:  # the last events: up to the list's closing bracket
            close = len(buf)
            for _ in range(8):
                close = buf.rfind(b"]", 0, close)
                if close < 0 or object_end(buf[close + 1 :]):
                    break
            buf = buf[: max(close, 0)].rstrip() + b"\n"
        cut = buf.rfind(sep) if chunk else len(buf) - 2
        if cut >= 0:
            columns.add_ops_named(buf[: cut + 1], sep, names)
            buf = buf[cut + 2 :]
        if not chunk:
            return
