"""A trace file's bytes and its top-level metadata: the file opened (decompressed when gzipped,
refused when it is not a regular file), and the keys around the event list
(``distributedInfo``, ``deviceProperties``, ``baseTimeNanoseconds``) read from the bytes before
the events and after them, so a well-formed file is read once.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from itwin_report.util.errors import DataError

HEAD_LIMIT = 8 << 20  # metadata before the events is read from at most this many bytes
TAIL_KEEP = 1 << 16  # and after them from the last this many bytes


class TraceReadError(DataError):
    """A trace that cannot be read (the message names the file and why)."""


def open_trace(path: Path) -> Any:
    """The file, decompressed when gzipped (by its magic bytes, not its name); refuses what is
    not a regular file (a FIFO would block, a device never end)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise TraceReadError(f"{path}: not a regular file")
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed by the caller
        magic = raw.read(2)
        raw.seek(0)
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return gzip.GzipFile(fileobj=raw, mode="rb") if magic == b"\x1f\x8b" else raw


class Edges:
    """The first bytes (up to the events) and the last bytes of the stream, for the metadata."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.head_done = False
        self.tail = b""

    def feed(self, chunk: bytes) -> None:
        if not self.head_done:
            self.head += chunk
            at = self.head.find(b'"traceEvents"')
            if at >= 0:
                del self.head[at:]
                self.head_done = True
            elif len(self.head) > HEAD_LIMIT:
                self.head_done = True
                self.head.clear()
        if len(chunk) >= TAIL_KEEP:
            self.tail = chunk[-TAIL_KEEP:]
        else:
            self.tail = (self.tail + chunk)[-TAIL_KEEP:]

    def head_reads(self, at: int) -> bool:
        """Whether the event list's key is the first ``"traceEvents"`` of the file, at ``at``,
        and what precedes it reads as the start of a JSON object."""
        if not self.head_done or len(self.head) != at:
            return False
        try:
            head = self.head.decode("utf-8").strip().rstrip(",")
            return isinstance(json.loads(head + "}", parse_constant=not_json), dict)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return False

    def meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        head = self.head.decode("utf-8", "replace").strip().rstrip(",")
        if head.startswith("{"):
            try:
                value = json.loads(head + "}")
                out.update(value if isinstance(value, dict) else {})
            except (ValueError, RecursionError):
                pass
        out.update(_tail_meta(self.tail.decode("utf-8", "replace")))
        return out


def _tail_meta(tail: str) -> dict[str, Any]:
    """The top-level keys after the events: the first ``]`` closing the event list whose rest
    reads as the end of an object."""
    for match in re.finditer(r"\]\s*,\s*\"", tail):
        try:
            value = json.loads("{" + tail[match.end() - 1 :])
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return {}


def not_json(name: str) -> Any:
    """``parse_constant`` for :func:`json.loads` refusing ``NaN`` and ``Infinity``."""
    raise ValueError(f"{name} is not JSON")


def object_end(rest: bytes) -> bool:
    """Whether ``rest`` (what follows the event list) closes the top-level object."""
    text = rest.strip()
    if text == b"}":
        return True
    if not text.startswith(b","):
        return False
    try:
        return isinstance(json.loads(b"{" + text[1:], parse_constant=not_json), dict)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
