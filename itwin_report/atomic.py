"""Files appear whole or not at all: written to a temporary sibling, then renamed.

An error or an interruption (Ctrl-C, SIGTERM turned into :class:`~itwin_report.errors.Interrupted`)
removes the temporary file, so no partial output or ``.tmp`` file is ever left behind.

Light module: standard library only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8, the mode a new file would get)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def staging_dir(target: Path) -> Iterator[Path]:
    """A temporary directory inside ``target`` (created if needed), removed on exit.

    Files moved out of it with :func:`publish` before the end survive; the rest goes.
    """
    target.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target, prefix=".staging-"))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def publish(paths: list[Path], target: Path) -> list[Path]:
    """Move finished files into ``target`` (same file system: one rename each)."""
    out = []
    for path in paths:
        os.replace(path, target / path.name)
        out.append(target / path.name)
    return out
