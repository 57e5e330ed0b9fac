"""Files appear whole or not at all: written to a temporary sibling, then renamed.

An error or an interruption (Ctrl-C, SIGTERM turned into
:class:`~itwin_report.util.errors.Interrupted`) removes the temporary file, so no partial
output or ``.tmp`` file is ever left behind.
The outputs of one run are published as a set (:func:`output_set`): every file is complete
before the first is moved into place.

Only a regular file (or a new path) is replaced so. Anything else an output names is written
where it is, never renamed over nor removed (:func:`in_place`): a device (``/dev/null``), a
FIFO or a process substitution, a socket, or a link to an open file descriptor
(``/dev/stdout``, ``/proc/self/fd/N``), which is appended to. A link to a regular file stays
a link: the file it points at is replaced.

Light module: standard library only.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FD_FOLDER = re.compile(r"/proc/[^/]+/fd|/dev/fd")
_MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup


def _through_fd_link(path: Path) -> bool:
    """Whether ``path``, or a link on the way to its file, lies in a folder of open file
    descriptors (``/proc/<pid>/fd``, ``/dev/fd``)."""
    current = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        if _FD_FOLDER.fullmatch(os.path.realpath(os.path.dirname(current))):
            return True
        if not os.path.islink(current):
            return False
        current = os.path.abspath(os.path.join(os.path.dirname(current), os.readlink(current)))
    return False


def in_place(path: Path) -> bool:
    """Whether ``path`` is written where it is rather than replaced: it exists and is no
    regular file, or it leads to an open file descriptor (``/dev/stdout``)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return _through_fd_link(path)  # a new path (or one the write will report)
    return not stat.S_ISREG(mode) or _through_fd_link(path)


def write_in_place(path: Path, text: str) -> None:
    """Write ``text`` into what ``path`` names, as it is: a device or a FIFO is opened for
    writing, a file behind a descriptor link is appended to (as the shell left it); nothing is
    created, renamed or removed."""
    write_bytes_in_place(path, text.encode("utf-8"))


def write_bytes_in_place(path: Path, data: bytes) -> None:
    """:func:`write_in_place` for bytes (a plot)."""
    flags = os.O_WRONLY | (os.O_APPEND if os.path.isfile(path) else 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def target(path: Path) -> Path:
    """The file a regular output replaces: ``path`` itself, or the file a link points at (the
    link stays)."""
    return Path(os.path.realpath(path)) if os.path.islink(path) else path


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8, the mode a new file would get); in place
    when :func:`in_place` says so."""
    if in_place(path):
        write_in_place(path, text)
        return
    path = target(path)
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
        self._in_place: list[tuple[Path, str]] = []

    def text(self, path: Path, text: str) -> None:
        """Stage ``text`` for ``path`` (UTF-8, the mode a new file would get); a ``path``
        written in place (:func:`in_place`) is kept in memory and written at :meth:`commit`."""
        if in_place(path):
            self._in_place.append((path, text))
            return
        path = target(path)
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
        """Write the outputs written in place, move every staged file into place, then delete
        the files given to :meth:`remove`."""
        for path, text in self._in_place:
            write_in_place(path, text)
        self._in_place.clear()
        for tmp, path in self._moves:
            if in_place(path):  # a plot's name taken by a FIFO or a device: written into
                write_bytes_in_place(path, tmp.read_bytes())
            else:
                os.replace(tmp, target(path))
        self._moves.clear()
        for path in self._removals:
            if in_place(path):
                continue  # only regular files are ever removed
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
        self._in_place.clear()


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
