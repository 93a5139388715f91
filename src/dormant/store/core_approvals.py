"""The rules of waits for a person, in :class:`~dormant.store.core.StoreCore` (a mixin
of it), over the backend's ``approvals`` part: tenant scope, paging, which transitions
are allowed, idempotency by decision key, and what an expiry does. The texts the model
sees and the checks of a decision's fields are :mod:`dormant.approvals`'."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import approvals as rules
from ..errors import DecisionConflict, NotFound, UsageError
from ..records import Approval, Page
from ..tenants import scope as tenancy
from .base import clamp_limit, seq_cursor

if TYPE_CHECKING:
    from .backend import Backend

#: What ``status=`` of a listing takes besides one status.
LISTINGS = ("open", "all")
STATUSES = ("requested", "escalated", "approved", "edited", "denied", "expired", "answered")
#: Most due waits one expiry round acts on.
EXPIRY_BATCH = 500


class ApprovalRules:
    """Waits for a person: listing, deciding, expiring."""

    if TYPE_CHECKING:
        backend: Backend

    async def approvals(
        self,
        *,
        tenant: str | None = None,
        thread_id: str | None = None,
        tool: str | None = None,
        status: str = "open",
        older_than_s: float = 0.0,
        cursor: str | None = None,
        limit: int = 100,
    ) -> Page[Approval]:
        """A page of waits, oldest request first: the open ones (``status="open"``, the
        default), every one (``"all"``: the whole history) or those of one status; of
        ``tenant`` (None: every tenant), one thread, one tool, requested at least
        ``older_than_s`` seconds ago. ``cursor`` is the previous page's ``next_cursor``."""
        if status not in LISTINGS and status not in STATUSES:
            raise UsageError(f"status is one of {', '.join(LISTINGS + STATUSES)}, not {status!r}")
        if not older_than_s >= 0:
            raise UsageError(f"older_than_s is seconds >= 0, not {older_than_s!r}")
        if thread_id is not None:
            tenancy.check([thread_id], tenant)
        limit = clamp_limit(limit)
        rows = await self.backend.approvals.approval_rows(
            tenant=tenant,
            thread_id=thread_id,
            tool=tool,
            status=status if status in STATUSES else None,
            open_only=status == "open",
            requested_before=self.backend.clock() - older_than_s,
            after=seq_cursor(cursor, default=0),
            limit=limit + 1,
        )
        more = len(rows) > limit
        items = tuple(rows[:limit])
        return Page(items=items, next_cursor=str(items[-1].id) if more else None)

    async def approval(self, thread_id: str, call_id: str, *, tenant: str | None = None) -> Approval:
        """The wait of call (or question) ``call_id`` of a thread; NotFound if none (or
        the thread is another tenant's)."""
        tenancy.check([thread_id], tenant)
        found = await self.backend.approvals.get_approval(thread_id, call_id)
        if found is None:
            raise NotFound(f"thread {thread_id!r} has no approval or question {call_id!r}")
        return found

    async def open_approvals(self, *, tenant: str | None = None) -> tuple[int, float | None]:
        """How many waits are open, and when the oldest of them was requested (None: none)."""
        return await self.backend.approvals.open_approvals(tenant)

    async def decide_approval(
        self,
        thread_id: str,
        call_id: str,
        *,
        status: str,
        result: str = "",
        arguments: str | None = None,
        key: str | None = None,
        by: str | None = None,
        note: str | None = None,
        tenant: str | None = None,
    ) -> tuple[bool, Approval]:
        """Record a decision on an open wait and do what it means, one transaction:
        ``approved``/``edited`` put the call in the outbox with ``arguments``, ``denied``,
        ``expired`` and ``answered`` admit ``result`` as its tool result. Idempotent by
        ``key`` (default: made from the decision): the same decision again answers the
        first; a different one raises DecisionConflict carrying the first. Whether this
        call acted, and the wait as it stands."""
        if status not in ("approved", "edited", "denied", "expired", "answered"):
            raise UsageError(f"no decision {status!r}")
        rules.check_texts(note=note, by=by, key=key)
        key = key or rules.decision_key(status, arguments, by, note)
        await self.approval(thread_id, call_id, tenant=tenant)  # NotFound before any write
        acted = await self.backend.approvals.decide_approval(
            thread_id,
            call_id,
            status=status,
            key=key,
            by=by,
            note=note,
            arguments=arguments,
            role=None,
            deadline=0.0,
            result=result,
        )
        if acted is None:
            raise NotFound(f"thread {thread_id!r} has no approval or question {call_id!r}")
        fresh, row = acted
        if fresh or (row.status == status and row.decision_key == key):
            return fresh, row
        who = f" by {row.decided_by}" if row.decided_by else ""
        raise DecisionConflict(f"call {call_id!r} of {thread_id!r} was already {row.status}{who}", first=row)

    async def expire_approvals(self, limit: int = EXPIRY_BATCH) -> tuple[int, int]:
        """One round of the expiry sweep: open waits past their deadline expire (the model
        sees an "expired" result, the row says ``expired``, never ``denied``), or, when
        their tool escalates and they were not escalated yet, go to the escalation role
        with a new deadline. (expired, escalated); a wait decided meanwhile is left."""
        now = self.backend.clock()
        expired = escalated = 0
        for due in await self.backend.approvals.due_approvals(now, clamp_limit(limit)):
            if due.status == "requested" and due.escalate_role:
                acted = await self.backend.approvals.decide_approval(
                    due.thread_id,
                    due.call_id,
                    status="escalated",
                    key=None,
                    by=None,
                    note=None,
                    arguments=None,
                    role=due.escalate_role,
                    deadline=now + max(due.escalate_s, 1.0),
                    result="",
                )
                escalated += bool(acted and acted[0])
                continue
            try:
                fresh, _ = await self.decide_approval(
                    due.thread_id, due.call_id, status="expired", result=rules.expired_text(due), key="expiry"
                )
            except (DecisionConflict, NotFound):
                continue  # decided (or deleted) meanwhile: that outcome stands
            expired += fresh
        return expired, escalated
