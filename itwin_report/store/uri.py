"""Tracking URIs: which kind of store a URI names, where it lives, and how to show it safely.

Light module: standard library only.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from itwin_report.util.errors import StoreError
from itwin_report.util.masking import mask_uri

DEFAULT_TRACKING_URI = "sqlite:///mllogs/mlflow.db"
TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"

SQLITE = "sqlite"
SQL = "sql"  # postgresql, mysql, mssql through sqlalchemy
HTTP = "http"
FILE = "file"
OTHER = "other"  # databricks, read through the MLflow client

_SQL_SCHEMES = ("postgresql", "postgres", "mysql", "mssql")
_OTHER_SCHEMES = ("databricks", "databricks-uc", "uc")


def resolve_tracking_uri(uri: str | None) -> str:
    """``--tracking-uri`` if given, else ``$MLFLOW_TRACKING_URI``, else the default sqlite store."""
    if uri:
        return uri
    return os.environ.get(TRACKING_URI_ENV) or DEFAULT_TRACKING_URI


def store_kind(uri: str) -> str:
    """One of SQLITE, SQL, HTTP, FILE, OTHER: the one place a URI's kind is decided.

    An unknown scheme (``ftp://``) is a StoreError.
    """
    scheme = uri.split(":", 1)[0].lower()
    if scheme in _OTHER_SCHEMES:
        return OTHER
    if "://" not in uri or scheme == "file":
        return FILE
    if scheme == "sqlite":
        return SQLITE
    if scheme.split("+", 1)[0] in _SQL_SCHEMES:
        return SQL
    if scheme in ("http", "https"):
        return HTTP
    raise StoreError(
        f"unsupported tracking URI scheme {scheme!r} in {mask_uri(uri)}; use sqlite:///FILE, "
        "postgresql://, mysql://, mssql://, http(s)://, databricks, or a file-store path"
    )


def sqlite_path(uri: str) -> Path:
    """The database file of a ``sqlite:///rel.db`` or ``sqlite:////abs.db`` URI."""
    rest = uri.split("://", 1)[1]
    if not rest.startswith("/"):
        raise StoreError(f"unsupported sqlite URI {uri!r}; use sqlite:///relative.db")
    path = unquote(rest[1:].split("?", 1)[0])
    if not path or path == ":memory:":
        raise StoreError(f"sqlite URI {uri!r} names no database file")
    return Path(path)


def file_store_path(uri: str) -> Path:
    """The directory of an MLflow file store given as a path or a ``file:`` URI."""
    if uri.startswith("file:"):
        return Path(unquote(urlsplit(uri).path))
    return Path(uri)


@functools.lru_cache(maxsize=1 << 16)  # asked several times per worker run
def local_artifact_dir(artifact_uri: str) -> Path | None:
    """The local directory of an artifact URI (``file:`` or a plain path), else None."""
    if not artifact_uri:
        return None
    if artifact_uri.startswith("file:"):
        return Path(unquote(urlsplit(artifact_uri).path))
    if "://" in artifact_uri or re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:/", artifact_uri):
        return None
    return Path(artifact_uri)


def require_sqlite_file(uri: str) -> Path:
    """The existing database file of a sqlite URI; a StoreError (with a hint) when missing."""
    path = sqlite_path(uri)
    if path.is_file():
        return path
    message = f"no MLflow database at {path} (tracking URI {mask_uri(uri)})"
    itwinai = path.parent / "mlflow"
    if itwinai.is_dir():
        message += (
            f"; {itwinai} looks like itwinai's MLflow file store: "
            f"use --tracking-uri {itwinai.as_posix()}"
        )
    else:
        message += "; pass --tracking-uri, or create sample runs there with `itwin-report emulate`"
    raise StoreError(message)


def require_file_store(uri: str) -> Path:
    """The existing directory of a file store; a StoreError when missing."""
    path = file_store_path(uri)
    if not path.is_dir():
        raise StoreError(f"no MLflow file store at {path} (tracking URI {mask_uri(uri)})")
    return path


# the files SQLite may keep beside a database while it is open or after a crash
SQLITE_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")


def sqlite_files(db: Path) -> list[Path]:
    """The database file and its side files (``-wal``, ``-shm``, ``-journal``)."""
    return [db, *(Path(f"{db}{suffix}") for suffix in SQLITE_SIDE_SUFFIXES)]


def store_paths(uri: str) -> list[Path]:
    """Local files and directories that make up the store itself (none for a server)."""
    kind = store_kind(uri)
    if kind == FILE:
        return [file_store_path(uri)]
    if kind == SQLITE:
        return sqlite_files(sqlite_path(uri))
    return []


def _same_or_inside(path: Path, protected: Path) -> bool:
    """True when ``path`` is ``protected`` (also through links) or lies below it."""
    try:
        if path.exists() and protected.exists() and path.samefile(protected):
            return True
    except OSError:
        pass
    return path.expanduser().resolve().is_relative_to(protected.expanduser().resolve())


def _same_file(path: Path, other: Path) -> bool:
    """True when both name one file (also through links or another spelling)."""
    try:
        if path.exists() and other.exists():
            return path.samefile(other)
    except OSError:
        pass
    return path.expanduser().resolve() == other.expanduser().resolve()


def output_conflict(
    outputs: dict[str, Path], protected: Sequence[Path], inputs: Sequence[Path] = ()
) -> str | None:
    """A message when an output (``{option: path}``) would write into the store, over an input
    file of the command or into an input folder (also through links or hard links), else None."""
    for option, path in outputs.items():
        for guarded in protected:
            if _same_or_inside(path, guarded):
                return (
                    f"{option} {path} would write into the tracking store ({guarded}); "
                    "choose a path outside it"
                )
        for source in inputs:
            if _same_file(path, source):
                return f"{option} {path} would overwrite the input {source}; choose another path"
            if source.is_dir() and _same_or_inside(path, source):
                return (
                    f"{option} {path} would write into the input folder {source}; "
                    "choose a path outside it"
                )
    return None
