"""Every item of a paged MLflow search, the pages after the first asked for several at a time
where the server's page tokens are offsets.

MLflow's own stores (SQL and file) page a search by offset: the token of the page that starts
after ``n`` items is the base64 text of ``{"offset": n}``. When the first page's token is exactly
that for the items it held, the next pages are asked for together (``ahead`` requests in flight,
their tokens made here), and each answer is used only when the page before it handed out the
very token it was asked with: a server whose tokens are anything else, or change, is read one
page after the other, as before, with the tokens it gave. A page asked ahead that fails is asked
again in turn, where its error is the search's.
"""

from __future__ import annotations

import base64
import itertools
import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from itwin_report.util.errors import StoreError

if TYPE_CHECKING:
    from itwin_report.store.http import HttpSession


def offset_token(offset: int) -> str:
    """The page token MLflow's stores give the page that starts after ``offset`` items."""
    return base64.b64encode(json.dumps({"offset": offset}).encode("utf-8")).decode("ascii")


def search_pages(
    http: HttpSession,
    path: str,
    query: dict[str, Any],
    field: str,
    what: str,
    method: str = "POST",
    ahead: int = 0,
    first: int | None = None,
) -> Iterator[Any]:
    """Every item of ``field`` over all pages of a search (POSTed, or GET with ``query`` as
    parameters), at most ``http.limits.max_pages`` pages; ``ahead``: pages asked for at once
    after the first, where the tokens are offsets (0: one after the other). ``first``: the
    first page's ``max_results``, smaller than ``query``'s so that the pages asked ahead start
    sooner; the pages after it ask ``query``'s own where the tokens are offsets, else
    ``first``'s too (the size the server's tokens were given for)."""
    first_size: dict[str, Any] = {"max_results": first} if first else {}

    def ask(token: str | None, sized: dict[str, Any]) -> dict[str, Any]:
        asked = {**query, **sized, **({"page_token": token} if token else {})}
        if method == "POST":
            return http.json("POST", path, what, body=asked)
        return http.json("GET", path, what, params=asked)

    def ask_ahead(token: str) -> dict[str, Any] | None:
        try:
            return ask(token, {})
        except StoreError:  # asked again in turn, where the error is the search's own
            return None

    token: str | None = None
    sized = first_size  # the size the request that gave ``token`` asked for
    seen: set[str] = set()
    offset = 0  # items so far
    step = 0  # items per page asked ahead, once the first page showed offset tokens
    pending: dict[str, Future[dict[str, Any] | None]] = {}
    pool = ThreadPoolExecutor(ahead, thread_name_prefix="itwin-report-pages") if ahead else None
    try:
        for number in itertools.count(1):
            if number > http.limits.max_pages:
                raise StoreError(
                    f"MLflow server at {http.where} kept sending pages to {what} "
                    f"(more than {http.limits.max_pages:,}): stopped"
                )
            page: dict[str, Any] | None = None
            if pool is not None and step and token == offset_token(offset):
                for k in range(ahead):  # this page and the next ones, as their tokens will be
                    guess = offset_token(offset + k * step)
                    if guess not in pending:
                        pending[guess] = pool.submit(ask_ahead, guess)
                page = pending.pop(token).result()
                sized = {}  # whole pages, as asked ahead
            if page is None:
                page = ask(token, sized)
            items = page.get(field)
            if items is not None and not isinstance(items, list):
                raise http.malformed(what, f"'{field}' is not a list")
            items = items or []
            yield from items
            offset += len(items)
            token = page.get("next_page_token")
            if not token:
                return
            if not isinstance(token, str) or token in seen:
                raise http.malformed(what, "a next_page_token that is not new text")
            seen.add(token)
            if number == 1 and items and token == offset_token(offset):
                step = int(query.get("max_results", len(items))) if first else len(items)
    finally:
        for future in pending.values():
            future.cancel()
        if pool is not None:
            pool.shutdown(wait=True)
