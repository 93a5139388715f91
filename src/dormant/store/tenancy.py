"""Tenant scope of thread ids: the one rule that keeps tenants of ``dormant serve`` apart.

A tenant's thread ``abc`` is stored as ``<tenant id>/abc``. Tenant ids have a fixed
shape (``t`` + 12 hex digits), so no tenant's prefix is a prefix of another's, and a
child thread (``<parent>/<call id>``) stays inside its parent's tenant. Every id a
client sends is taken as its own and prefixed; an id of another tenant's thread
therefore names a thread that does not exist, and the answer is 404, the same as for
a thread that was never created. Thread listings page by id, so a tenant's threads
are one contiguous range starting at its prefix.

The store derives each thread's ``tenant`` column from the same prefix (see the
threads table), which per-tenant status counts by. The library API uses no scope
(the default tenant: ids are stored as given).
"""

from __future__ import annotations

import re

from ..errors import NotFound
from ..records import Page, Thread

#: Client thread ids: 1-128 of ``A-Z a-z 0-9 . _ : @ -``.
THREAD_ID_PATTERN = r"^[A-Za-z0-9._:@-]{1,128}$"
_THREAD_ID_RE = re.compile(THREAD_ID_PATTERN)


def tenant_of(stored_id: str) -> str:
    """The tenant id of a stored thread id, '' for the default tenant (the rule of the
    threads table's ``tenant`` column)."""
    if len(stored_id) > 13 and stored_id[13] == "/" and stored_id[0] == "t":
        return stored_id[:13]
    return ""


class Scope:
    """One tenant's view of thread ids."""

    def __init__(self, tenant_id: str) -> None:
        self.tenant_id = tenant_id
        self.prefix = f"{tenant_id}/"

    def inner(self, thread_id: str) -> str:
        """The stored id of the tenant's thread ``thread_id``; NotFound for a malformed id."""
        if not _THREAD_ID_RE.match(thread_id):
            raise NotFound(f"no thread {thread_id!r}")
        return self.prefix + thread_id

    def outer(self, stored_id: str) -> str:
        """The id the tenant knows a stored thread by (the stored id must be in scope)."""
        if not stored_id.startswith(self.prefix):
            raise NotFound("no such thread")  # never leak an id of another scope
        return stored_id[len(self.prefix) :]

    def owns(self, stored_id: str) -> bool:
        """Whether a stored thread id belongs to this tenant."""
        return stored_id.startswith(self.prefix)

    def list_cursor(self, cursor: str | None) -> str:
        """The store cursor for a tenant's listing cursor (a thread id of its own, or none)."""
        if not cursor:
            return self.prefix
        return self.prefix + cursor

    def page(self, page: Page[Thread]) -> tuple[list[Thread], str | None]:
        """The tenant's threads of a store page and the tenant's next cursor.

        The page ends at the first thread outside the prefix: ids are ordered, so
        nothing of this tenant's follows it.
        """
        mine: list[Thread] = []
        for thread in page.items:
            if not self.owns(thread.id):
                return mine, None
            mine.append(thread)
        if page.next_cursor is None or not mine:
            return mine, None
        return mine, self.outer(mine[-1].id)
