"""Files appear whole or not at all: written to a temporary sibling, then renamed.

An error or an interruption (Ctrl-C, SIGTERM turned into
:class:`~itwin_report.util.errors.Interrupted`) removes the temporary file, so no partial
output or ``.tmp`` file is ever left behind.
The outputs of one run are published as a set (:func:`output_set`): every file is complete
before the first is moved into place.

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


class OutputSet:
    """The files of one run published together: each is written to a temporary sibling of its
    target, and only :meth:`commit` moves them into place (one rename each, after every file
    is complete). Until then the old files stay as they were; :meth:`discard` removes what was
    staged. Use it through :func:`output_set`.
    """

    def __init__(self) -> None:
        self._moves: list[tuple[Path, Path]] = []
        self._temps: list[Path] = []
        self._removals: list[Path] = []

    def text(self, path: Path, text: str) -> None:
        """Stage ``text`` for ``path`` (UTF-8, the mode a new file would get)."""
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        self._temps.append(Path(tmp))
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_umask())
        self._moves.append((Path(tmp), path))

    def folder(self, target: Path) -> Path:
        """A new staging folder inside ``target`` (created if needed) for :meth:`files`."""
        target.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=target, prefix=".staging-"))
        self._temps.append(staging)
        return staging

    def files(self, paths: list[Path], target: Path) -> list[Path]:
        """Stage finished files (in a :meth:`folder` of ``target``) for ``target``."""
        out = [target / path.name for path in paths]
        self._moves += [(path, dest) for path, dest in zip(paths, out, strict=True)]
        return out

    def remove(self, paths: list[Path]) -> None:
        """Files to delete once the new ones are in place (outputs of an earlier run)."""
        self._removals += paths

    def commit(self) -> None:
        """Move every staged file into place, then delete the files given to :meth:`remove`."""
        for tmp, path in self._moves:
            os.replace(tmp, path)
        self._moves.clear()
        for path in self._removals:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._removals.clear()

    def discard(self) -> None:
        """Remove every temporary file and staging folder left."""
        for tmp in self._temps:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    tmp.unlink()
        self._temps.clear()
        self._moves.clear()


@contextlib.contextmanager
def output_set() -> Iterator[OutputSet]:
    """An :class:`OutputSet` whose leftovers (all of it unless committed) go on exit."""
    outputs = OutputSet()
    try:
        yield outputs
    finally:
        outputs.discard()


def write_stdout(text: str) -> None:
    """Print ``text``; a stdout that cannot take it (a full disk, a closed pipe) is an error
    of one line, and stdout is pointed at ``/dev/null`` so the exit flush cannot fail again."""
    import sys

    from itwin_report.util.errors import ReportError

    try:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except OSError as exc:
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        raise ReportError(f"cannot write to stdout: {exc.strerror or exc}") from None
