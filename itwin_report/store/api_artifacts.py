"""An MLflow server's artifacts for :class:`~itwin_report.store.api_reader.ApiReader`: behind
its artifact proxy one request a file or folder, elsewhere through MLflow's client.

Runs whose artifact roots share a folder (MLflow's ``<experiment id>/``) are checked against
one listing of that folder first: a run absent from it has no artifacts, and costs no request.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, unquote

from itwin_report.store.rest import (
    ARTIFACTS_PATH,
    RETRIED_STATUS,
    HttpSession,
    Malformed,
    http_detail,
    objects,
    proxied_path,
    text,
)
from itwin_report.store.uri import mask_uri
from itwin_report.util.errors import StoreError

SHARED_BY = 4  # runs whose artifact roots share a folder before it is listed instead of asked


def shared_folders(artifact_uris: Sequence[str], at_least: int) -> dict[str, tuple[str, str]]:
    """``{artifact URI: (folder, name)}`` for runs whose artifacts sit behind the server's proxy.

    ``folder`` is the deepest folder above the run's artifact root that holds the roots of
    ``at_least`` runs or more (MLflow's ``<experiment id>``), ``name`` the entry of that folder
    on the way to the root (the run's id): when the folder lacks it, the run has no artifacts.
    """
    locations = {}
    for uri in dict.fromkeys(artifact_uris):
        proxied = proxied_path(uri, "")
        if proxied is not None:
            locations[uri] = unquote(proxied.removeprefix(ARTIFACTS_PATH)).strip("/").split("/")
    counts = Counter(
        "/".join(parts[:depth]) for parts in locations.values() for depth in range(len(parts))
    )
    out = {}
    for uri, parts in locations.items():
        for depth in range(len(parts) - 1, -1, -1):
            folder = "/".join(parts[:depth])
            if counts[folder] >= at_least:
                out[uri] = (folder, parts[depth])
                break
    return out


class ApiArtifacts:
    """Reading and listing artifacts; the reader sets the attributes below."""

    uri: str
    http: HttpSession | None
    _shared: dict[str, tuple[str, str]]  # artifact root -> shared folder, child
    _listings: dict[str, set[str] | None]  # shared folder -> names it holds
    _listing_lock: threading.Lock

    @contextmanager
    def _shape(self, what: str) -> Iterator[None]:
        """A :class:`Malformed` answer as one line naming the server."""
        try:
            yield
        except Malformed as exc:
            assert self.http is not None
            raise self.http.malformed(what, str(exc)) from None

    def remote_artifact(self, artifact_uri: str, path: str) -> bytes | None:
        """One artifact's bytes, None when the run has none.

        Artifacts behind the server's artifact proxy come in one request each; any other
        location (a bucket, another server) through MLflow's client.
        """
        from itwin_report.store.artifacts import MAX_ARTIFACT_BYTES, SkippedArtifact, read_capped

        proxied = proxied_path(artifact_uri, path) if self.http is not None else None
        if proxied is None:
            import tempfile

            from itwin_report.store import mlflow_api

            with tempfile.TemporaryDirectory(prefix="itwin-report-") as tmp:
                local = mlflow_api.download_artifact(self.uri, artifact_uri, path, tmp)
                return read_capped(Path(local)) if local is not None else None
        assert self.http is not None
        if not self._may_exist(artifact_uri):
            return None
        what = f"download {path}"
        retried = [s for s in RETRIED_STATUS if s != 500]  # MLflow 2.x: 500 for a missing file
        answer = self.http.send("GET", proxied, what, ok=(200, 404, 500), retried=retried)
        if answer.status_code == 404:
            answer.close()
            return None
        if answer.status_code == 500:
            said = self.http.text(answer, what)
            if not self._listed(proxied):
                return None
            detail = http_detail(500, answer.reason or "", "application/json", said)
            raise StoreError(f"cannot {what} in {mask_uri(self.http.base)}: {detail}")
        data = self.http.body(answer, what, MAX_ARTIFACT_BYTES, cut=True)
        if len(data) > MAX_ARTIFACT_BYTES:
            raise SkippedArtifact(f"more than the {MAX_ARTIFACT_BYTES:,}-byte cap")
        return bytes(data)

    def expect_artifacts(self, artifact_uris: Sequence[str]) -> None:
        """Runs known without asking the server for them (their artifact roots, as loaded):
        :meth:`traces_under` then skips those whose folder the shared one lacks."""
        if self.http is not None:
            self._shared = shared_folders(list(artifact_uris), SHARED_BY)

    def traces_under(
        self, artifact_uri: str, wanted: Callable[[str], bool], max_depth: int
    ) -> list[str] | None:
        """Paths under ``artifact_uri`` of the files ``wanted`` accepts, at most ``max_depth``
        folders down, listed through the server (a request per folder; none for a run whose
        folder is absent from the shared one); None when its artifacts are not behind this
        server's proxy."""
        if self.http is None or proxied_path(artifact_uri, "") is None:
            return None
        if not self._may_exist(artifact_uri):
            return []
        found: list[str] = []
        folders = [("", 0)]
        while folders:
            folder, depth = folders.pop()
            for path, is_dir in self.list_artifacts(artifact_uri, folder) or []:
                if is_dir:
                    if depth + 1 < max_depth:
                        folders.append((path, depth + 1))
                elif wanted(path.rsplit("/", 1)[-1]):
                    found.append(path)
        return sorted(found)

    def _may_exist(self, artifact_uri: str) -> bool:
        """False when the folder many runs' artifacts share lacks this run's: nothing to ask.

        That folder (MLflow's ``<experiment>/``) is listed once, when first needed; a folder
        that cannot be listed tells nothing.
        """
        shared = self._shared.get(artifact_uri)
        if shared is None:
            return True
        folder, child = shared
        with self._listing_lock:
            if folder not in self._listings:
                try:
                    proxied = f"{ARTIFACTS_PATH}/{quote(folder)}".rstrip("/")
                    names = {n for n, _ in self._listing(proxied, "list artifacts")}
                except StoreError:
                    names = None
                self._listings[folder] = names
            names = self._listings[folder]
        return names is None or child in names

    def list_artifacts(self, artifact_uri: str, folder: str = "") -> list[tuple[str, bool]] | None:
        """``(path under artifact_uri, is a folder)`` of what ``folder`` holds, in one request.

        None when the artifacts are not behind this server's proxy; an empty list when the
        folder does not exist.
        """
        proxied = proxied_path(artifact_uri, folder) if self.http is not None else None
        if proxied is None:
            return None
        inside = folder.strip("/")
        return [
            ("/".join(p for p in (inside, name) if p), is_dir)
            for name, is_dir in self._listing(proxied, f"list {inside or 'artifacts'}")
        ]

    def _listed(self, proxied: str) -> bool:
        """Whether the server's listing of the artifact's folder names it."""
        folder, _, name = proxied.rpartition("/")
        return any(n == unquote(name) for n, _ in self._listing(folder, "list artifacts"))

    def _listing(self, proxied: str, what: str) -> list[tuple[str, bool]]:
        """(name, is a folder) of the entries of the proxied folder ``proxied``."""
        assert self.http is not None
        location = unquote(proxied.removeprefix(ARTIFACTS_PATH).lstrip("/"))
        listing = self.http.get(ARTIFACTS_PATH, {"path": location}, what)
        with self._shape(what):
            files = objects(listing.get("files"), "files")
            entries = [(text(f.get("path"), "path"), f.get("is_dir")) for f in files]
        return [(path.rpartition("/")[2], bool(is_dir)) for path, is_dir in entries if path]
