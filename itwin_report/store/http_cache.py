"""A local cache of the metric histories of finished runs read from an MLflow server.

A run that has ended (FINISHED, FAILED or KILLED) rarely changes again, yet every report over
HTTP reads its points anew, one bulk request per key and batch, each costing the server an ORM
query and a JSON encoding per point. The cache keeps those points in one Parquet file per
server origin and experiment, beside a *signature* of each run taken from the run listing the
reader fetches anyway: its status, its end time, and each key's latest step and timestamp (the
run's latest metrics). A cached (run, key) is used only while the listing shows the same
signature; anything else is read from the server again, and a run still RUNNING is never kept.

Where: ``$XDG_CACHE_HOME/itwin-report``, else ``~/.cache/itwin-report`` (or ``--cache-dir``),
a folder per origin (scheme, host, port and path: never credentials or query) named by its
hash, a file per experiment. Folders are created 0700 and files 0600; a file is replaced
atomically (written beside it, then renamed), so concurrent reports share it safely: the last
writer wins and a reader sees a whole file. Files used least recently go first when the
folder outgrows its size bound. A file that cannot be read, or that belongs to another origin,
experiment or format, is a warning and a read from the server: never an error, never a number.
Local stores never use it (reading them is faster than reading the cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from itwin_report.util.errors import BadCacheOption

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "TERMINAL",
    "CacheSettings",
    "HttpCache",
    "default_cache_dir",
    "origin_of",
    "parse_size",
    "run_signature",
]

FORMAT = 1
META_KEY = b"itwin-report-cache"
DEFAULT_CACHE_BYTES = 1 << 30  # 1 GiB
TERMINAL = frozenset({"FINISHED", "FAILED", "KILLED"})
SUFFIX = ".parquet"
_UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "KIB": 1024, "M": 1e6, "MB": 1e6, "MIB": 1024**2}
_UNITS |= {"G": 1e9, "GB": 1e9, "GIB": 1024**3, "T": 1e12, "TB": 1e12, "TIB": 1024**4}


@dataclass(frozen=True)
class CacheSettings:
    """Where the cache lives and how large it may grow; ``directory`` None turns it off."""

    directory: Path | None
    max_bytes: int = DEFAULT_CACHE_BYTES

    @classmethod
    def from_options(
        cls,
        enabled: bool = True,
        directory: str | Path | None = None,
        size: str | int | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> CacheSettings:
        """Settings from the command's (or the API's) options; ``environ`` for the default
        folder (``os.environ`` when None)."""
        max_bytes = DEFAULT_CACHE_BYTES if size is None else parse_size(size)
        if not enabled:
            return cls(None, max_bytes)
        if directory is None:
            directory = default_cache_dir(os.environ if environ is None else environ)
        return cls(Path(directory).expanduser(), max_bytes)


def default_cache_dir(environ: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/itwin-report``, else ``~/.cache/itwin-report``."""
    base = environ.get("XDG_CACHE_HOME", "")
    if not base or not os.path.isabs(base):  # the XDG rule: a relative value is ignored
        base = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".cache")
    return Path(base) / "itwin-report"


def parse_size(value: str | int) -> int:
    """Bytes from ``500MB``, ``2GiB``, ``1.5G`` or a plain number of bytes (at least 0)."""
    if isinstance(value, int) and not isinstance(value, bool):
        number, unit = float(value), ""
    else:
        found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", str(value))
        if found is None or found.group(2).upper() not in _UNITS:
            raise BadCacheOption(
                f"cache size {value!r} is not a size: give bytes or a number with KB, MB, GB "
                "(or KiB, MiB, GiB), e.g. 2GB"
            )
        number, unit = float(found.group(1)), found.group(2).upper()
    if number < 0:
        raise BadCacheOption(f"cache size {value!r} is negative")
    return int(number * _UNITS[unit])


def origin_of(base_url: str) -> str:
    """``scheme://host:port/path`` of a server URL: no user, password, query or fragment."""
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = (parts.hostname or "").lower()
    return f"{parts.scheme.lower()}://{host}:{port}{parts.path.rstrip('/')}"


def run_signature(run: Mapping[str, Any]) -> str | None:
    """What must stay the same for a cached run to be used: status, end time and each key's
    latest step and timestamp, from one run of a ``runs/search`` answer. None for a run that
    has not ended (never cached)."""
    info = run.get("info") or {}
    status = str(info.get("status") or "")
    if status not in TERMINAL:
        return None
    latest = sorted(
        (str(m.get("key")), str(m.get("step", 0)), str(m.get("timestamp", 0)))
        for m in (run.get("data") or {}).get("metrics") or []
    )
    return json.dumps([status, str(info.get("end_time") or ""), latest], separators=(",", ":"))


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]


class HttpCache:
    """The cache of one server origin; ``warnings`` collects what could not be used."""

    def __init__(self, settings: CacheSettings, base_url: str) -> None:
        assert settings.directory is not None
        self.root = settings.directory
        self.max_bytes = settings.max_bytes
        self.origin = origin_of(base_url)
        self.folder = self.root / _digest(self.origin, 32)
        self.warnings: list[str] = []
        self._entries: dict[str, tuple[str, list[str]]] = {}  # run -> (signature, keys)
        self._points: pd.DataFrame | None = None

    def path(self, experiment_id: str) -> Path:
        """The file of one experiment."""
        return self.folder / f"{_digest(str(experiment_id), 24)}{SUFFIX}"

    def lookup(
        self, experiment_id: str, wanted: Mapping[str, Sequence[str]], signatures: Mapping[str, Any]
    ) -> tuple[pd.DataFrame | None, set[tuple[str, str]]]:
        """(the cached points of ``wanted`` {run: keys} still valid, the (run, key) pairs they
        cover). Runs whose signature changed, or that have not ended, are not covered."""

        self._entries, self._points = self._read(experiment_id)
        covered: set[tuple[str, str]] = set()
        for run_id, keys in wanted.items():
            entry = self._entries.get(run_id)
            signature = signatures.get(run_id)
            if entry is None or signature is None or entry[0] != signature:
                continue
            cached_keys = set(entry[1])
            covered.update((run_id, k) for k in keys if k in cached_keys)
        if not covered or self._points is None:
            return None, set()
        return _rows_of(self._points, covered), covered

    def store(
        self,
        experiment_id: str,
        fetched: pd.DataFrame,
        read: Mapping[str, Sequence[str]],
        signatures: Mapping[str, Any],
    ) -> None:
        """Write back the experiment's file: the entries still valid, plus the points just
        ``fetched`` for the (run, keys) ``read`` of runs that have ended. Best effort: a cache
        that cannot be written is a warning."""

        entries = {
            run: entry
            for run, entry in self._entries.items()
            if run in signatures and signatures[run] == entry[0]
        }
        added = {run: keys for run, keys in read.items() if signatures.get(run) is not None}
        if not added and len(entries) == len(self._entries):
            self._touch(self.path(experiment_id))
            return
        frames = []
        if self._points is not None and entries:
            old = self._points
            frames.append(old[old["run_id"].astype(str).isin(list(entries))])
        for run, keys in added.items():
            previous = entries.get(run)
            if previous is not None and previous[0] == signatures[run]:
                keys = sorted(set(previous[1]) | set(keys))
            elif frames:  # a changed run: its old points go
                frames[0] = frames[0][frames[0]["run_id"].astype(str) != run]
            entries[run] = (str(signatures[run]), sorted(keys))
        if not fetched.empty:
            mine = fetched["run_id"].astype(str).isin(list(added))
            frames.append(fetched[mine])
        self._write(experiment_id, entries, frames)

    # -- files ---------------------------------------------------------------------------

    def _read(
        self, experiment_id: str
    ) -> tuple[dict[str, tuple[str, list[str]]], pd.DataFrame | None]:
        path = self.path(experiment_id)
        try:
            if not path.is_file():
                return {}, None
            import pyarrow.parquet as pq

            table = pq.read_table(path)
            meta = json.loads((table.schema.metadata or {}).get(META_KEY, b"null"))
            if not isinstance(meta, dict) or (
                meta.get("format"),
                meta.get("origin"),
                meta.get("experiment"),
            ) != (FORMAT, self.origin, str(experiment_id)):
                raise ValueError("it belongs to another server, experiment or format")
            runs = meta.get("runs")
            if not isinstance(runs, dict):
                raise ValueError("it lists no runs")
            entries = {str(r): (str(e[0]), [str(k) for k in e[1]]) for r, e in runs.items()}
            points = table.to_pandas()
            if list(points.columns) != ["run_id", "key", "step", "value", "timestamp"]:
                raise ValueError("its columns are not a metric history's")
        except Exception as exc:  # any damage: read from the server instead
            self.warnings.append(
                f"ignored the cache file {path}: {_short(exc)}; the runs were read from the server"
            )
            return {}, None
        self._touch(path)
        return entries, points

    def _write(
        self,
        experiment_id: str,
        entries: Mapping[str, tuple[str, list[str]]],
        frames: list[pd.DataFrame],
    ) -> None:
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = self.path(experiment_id)
        columns = ["run_id", "key", "step", "value", "timestamp"]
        frames = [f[columns] for f in frames if not f.empty]
        if frames:
            points = pd.concat(
                [f.astype({"run_id": str, "key": str}) for f in frames], ignore_index=True
            )
        else:
            points = pd.DataFrame({c: pd.Series(dtype=object) for c in columns[:2]})
            points = points.assign(
                step=pd.Series(dtype="int64"),
                value=pd.Series(dtype="float64"),
                timestamp=pd.Series(dtype="int64"),
            )
        meta = {
            "format": FORMAT,
            "origin": self.origin,
            "experiment": str(experiment_id),
            "runs": {run: [sig, keys] for run, (sig, keys) in entries.items()},
        }
        table = pa.Table.from_pandas(
            points.astype({"run_id": "category", "key": "category"}), preserve_index=False
        )
        table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
        try:
            _private_dir(self.root)
            _private_dir(self.folder)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=SUFFIX, dir=self.folder)
            try:
                with os.fdopen(fd, "wb") as out:
                    pq.write_table(table, out, compression="lz4")
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            self.warnings.append(f"could not write the cache under {self.root}: {_short(exc)}")
            return
        self._evict(keep=path)

    def _touch(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            os.utime(path)

    def _evict(self, keep: Path) -> None:
        """Remove the least recently used files until the cache fits its bound (``keep``,
        just written, goes last)."""
        try:
            files = [
                (p.stat().st_mtime, p.stat().st_size, p)
                for p in self.root.glob(f"*/*{SUFFIX}")
                if p.is_file() and not p.name.startswith(".tmp-")
            ]
        except OSError:
            return
        total = sum(size for _, size, _ in files)
        for _, size, p in sorted(files, key=lambda f: (f[2] == keep, f[0])):
            if total <= self.max_bytes:
                break
            try:
                p.unlink()
            except OSError:
                continue
            total -= size


def _private_dir(path: Path) -> None:
    """Create ``path`` 0700 (an existing folder keeps its mode but must not be a symlink)."""
    if path.is_symlink():
        raise OSError(f"{path} is a symbolic link")
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def _rows_of(points: pd.DataFrame, pairs: set[tuple[str, str]]) -> pd.DataFrame:
    """The points whose (run, key) is one of ``pairs`` (``points`` itself when all are): a
    table of pairs looked up by the columns' codes, never a tuple per point."""
    import numpy as np

    from itwin_report.data.frames import coded

    (run, runs), (key, keys) = coded(points["run_id"]), coded(points["key"])
    run_at = {str(r): i for i, r in enumerate(runs)}
    key_at = {str(k): i for i, k in enumerate(keys)}
    table = np.zeros((len(runs) + 1, len(keys) + 1), dtype=bool)  # the last: a missing code
    for r, k in pairs:
        if r in run_at and k in key_at:
            table[run_at[r], key_at[k]] = True
    keep = table[run, key]
    return points if keep.all() else points[keep]
