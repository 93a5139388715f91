"""Tenant scope of thread ids: the one rule that keeps tenants of ``dormant serve`` apart.

A tenant's thread ``abc`` is stored as ``<tenant id>/abc``. Tenant ids have a fixed
shape (``t`` + 12 hex digits), so no tenant's prefix is a prefix of another's, and a
child thread (``<parent>/<call id>``) stays inside its parent's tenant. Every id a
client sends is taken as its own and prefixed; an id of another tenant's thread
therefore names a thread that does not exist, and the answer is 404, the same as for
a thread that was never created. Thread listings page by id, so a tenant's threads
are one contiguous range starting at its prefix.

The store derives each thread's ``tenant`` column from the same prefix (see the
threads table), which per-tenant status counts and fair claims go by. The library API
uses no scope (ids are stored as given: the default tenant '').

The rule is enforced twice. The server maps every id a client sends through a
:class:`Scope`; and :class:`~dormant.store.core.StoreCore` takes the tenant with every
thread, input and blob operation (``tenant=``) and refuses, as NotFound and before any
row is read, an id outside it (:func:`check`), so no caller reaches another tenant's
rows by a wrong id, whatever path it took. A slice's plan may only touch threads of its
own thread's tenant (:func:`check_plan_scope`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ..errors import InvalidInput, NotFound, StoreError, UsageError
from ..records import CommitPlan, Thread

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
        """The stored id of the tenant's thread ``thread_id``; InvalidInput (422, as for a
        malformed id in a request body) for an id outside the rule."""
        if not _THREAD_ID_RE.match(thread_id):
            raise InvalidInput(
                f"bad thread id {thread_id[:200]!r}: 1-128 characters of A-Z a-z 0-9 . _ : @ -"
            )
        return self.prefix + thread_id

    def outer(self, stored_id: str) -> str:
        """The id the tenant knows a stored thread by (the stored id must be in scope)."""
        if not stored_id.startswith(self.prefix):
            raise NotFound("no such thread")  # never leak an id of another scope
        return stored_id[len(self.prefix) :]

    def owns(self, stored_id: str) -> bool:
        """Whether a stored thread id belongs to this tenant."""
        return stored_id.startswith(self.prefix)

    def list_cursor(self, cursor: str | None) -> str | None:
        """The store cursor for a tenant's listing cursor (a thread id of its own, or none)."""
        return self.prefix + cursor if cursor else None

    def page(self, threads: Sequence[Thread]) -> list[Thread]:
        """The threads of a page the store listed for this tenant (``tenant=``), checked to
        be its own (NotFound otherwise: never shown)."""
        for thread in threads:
            self.outer(thread.id)
        return list(threads)


def check(thread_ids: Iterable[str], tenant: str | None) -> None:
    """NotFound unless every stored id belongs to ``tenant`` (None: no scope, any id)."""
    if tenant is None:
        return
    for thread_id in thread_ids:
        if tenant_of(thread_id) != tenant:
            raise NotFound(f"no thread {thread_id!r}")


def list_after(tenant: str | None, cursor: str | None) -> str:
    """Where a listing of ``tenant``'s threads starts: after ``cursor`` (a stored id of
    its own; NotFound for another's), else at the tenant's prefix."""
    if tenant is None:
        return cursor or ""
    if tenant == "":
        raise UsageError("the default tenant's threads are listed without a tenant (tenant=None)")
    if not cursor:
        return tenant + "/"
    check([cursor], tenant)
    return cursor


def own_rows(rows: Sequence[Thread], tenant: str | None) -> Sequence[Thread]:
    """The rows of a listing up to the first one outside ``tenant`` (ids are ordered, so
    nothing of the tenant follows it)."""
    if tenant is None:
        return rows
    for n, thread in enumerate(rows):
        if tenant_of(thread.id) != tenant:
            return rows[:n]
    return rows


def check_plan_scope(plan: CommitPlan) -> None:
    """StoreError unless every thread a slice's plan creates or admits to is in the tenant
    of the slice's own thread, when that thread has one (a slice never writes into
    another tenant)."""
    tenant = tenant_of(plan.thread_id)
    if not tenant:
        return  # the library's threads are unscoped
    touched = [t.id for t in plan.threads] + [t.parent_id for t in plan.threads]
    touched += [a.thread_id for a in plan.admissions]
    for thread_id in touched:
        if tenant_of(thread_id) != tenant:
            raise StoreError(f"a slice of {plan.thread_id!r} may not write to thread {thread_id!r}")
