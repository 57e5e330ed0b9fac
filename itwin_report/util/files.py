"""Facts about files the tool meets, known in one place, and the one way a small input file is
read: only a regular file, looked at before it is opened (a FIFO would block, ``/dev/zero``
never end), opened without blocking, and read up to a size that bounds memory.

Light module: standard library only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from itwin_report.util.errors import DataError

SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database


def read_regular(path: Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; else a one-line
    DataError naming it (``what`` words the kind of file in the size error)."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise DataError(f"{path}: not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())  # the file opened, should it have been swapped
        if not stat.S_ISREG(info.st_mode):
            raise DataError(f"{path}: not a regular file")
        if info.st_size > limit:
            raise DataError(
                f"{path}: {info.st_size:,} bytes, more than a {what} can be ({limit:,})"
            )
        try:
            data = handle.read(limit + 1)
        except OSError as exc:
            raise DataError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(data) > limit:
        raise DataError(f"{path}: more than a {what} can be ({limit:,} bytes)")
    return data
