"""Waits for a person on PostgreSQL: the ``approvals`` part of
:class:`~dormant.store.postgres.backend.PostgresBackend` (see
:class:`~dormant.store.parts.ApprovalRows`). A decision is one call of
``dormant_decide_approval`` (the row's update and the outbox entry or tool result it
makes, one transaction; a concurrent decision waits for the row lock, then finds the
wait decided). Requests come with ``dormant_commit_slice_v2``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from ... import inbox
from ...records import Approval
from ..core import result_input
from .reads import PgReads
from .writer import NOTIFY_OUTBOX, NOTIFY_THREADS, Job

_COLS = (
    "id, thread_id, tenant, call_id, kind, tool, arguments, status, role, deadline, escalate_role, "
    "escalate_s, decision_key, decided_by, note, decided_arguments, requested_at, decided_at"
)
PAGE = f"""
SELECT {_COLS} FROM approvals
WHERE id > %(after)s AND requested_at <= %(before)s
  AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
  AND (%(thread)s::text IS NULL OR thread_id = %(thread)s::text)
  AND (%(tool)s::text IS NULL OR tool = %(tool)s::text)
  AND (%(status)s::text IS NULL OR status = %(status)s::text)
  AND (NOT %(open)s OR status IN ('requested', 'escalated'))
ORDER BY id LIMIT %(limit)s
"""
GET = f"SELECT {_COLS} FROM approvals WHERE thread_id = %s AND call_id = %s"
DUE = f"""
SELECT {_COLS} FROM approvals
WHERE status IN ('requested', 'escalated') AND deadline > 0 AND deadline <= %s
ORDER BY deadline LIMIT %s
"""
OPEN = """
SELECT count(*), min(requested_at) FROM approvals
WHERE status IN ('requested', 'escalated') AND (%(tenant)s::text IS NULL OR tenant = %(tenant)s::text)
"""
DECIDE = (
    "SELECT dormant_decide_approval(%s, %s, %s, %s, %s, %s, %s, %s, %s::float8, %s, %s::float8, %s::float8)"
)
_FIELDS = Approval.__struct_fields__
_decided = msgspec.json.Decoder(dict[str, Any])


def row_approval(r: Any) -> Approval:
    """An ``approvals`` row as its record."""
    return Approval(**dict(zip(_FIELDS, r, strict=True)))


class PgApprovals:
    """Approval rows."""

    def __init__(
        self, reads: PgReads, write: Callable[..., Awaitable[Any]], clock: Callable[[], float]
    ) -> None:
        self.reads = reads
        self._write = write
        self.clock = clock

    async def approval_rows(
        self,
        *,
        tenant: str | None,
        thread_id: str | None,
        tool: str | None,
        status: str | None,
        open_only: bool,
        requested_before: float,
        after: int,
        limit: int,
    ) -> list[Approval]:
        """A page of waits (see :class:`~dormant.store.parts.ApprovalRows`)."""
        params = {
            "after": after,
            "before": requested_before,
            "tenant": tenant,
            "thread": thread_id,
            "tool": tool,
            "status": status,
            "open": open_only,
            "limit": limit,
        }
        return [row_approval(r) for r in await self.reads.rows(PAGE, params)]

    async def get_approval(self, thread_id: str, call_id: str) -> Approval | None:
        """One wait, None if none."""
        rows = await self.reads.rows(GET, (thread_id, call_id))
        return row_approval(rows[0]) if rows else None

    async def due_approvals(self, now: float, limit: int) -> list[Approval]:
        """Open waits past their deadline, earliest first."""
        return [row_approval(r) for r in await self.reads.rows(DUE, (now, limit))]

    async def open_approvals(self, tenant: str | None) -> tuple[int, float | None]:
        """How many waits are open and the oldest's request time."""
        count, oldest = (await self.reads.rows(OPEN, {"tenant": tenant}))[0]
        return int(count), oldest

    async def decide_approval(
        self,
        thread_id: str,
        call_id: str,
        *,
        status: str,
        key: str | None,
        by: str | None,
        note: str | None,
        arguments: str | None,
        role: str | None,
        deadline: float,
        result: str,
    ) -> tuple[bool, Approval] | None:
        """Act on an open wait (``dormant_decide_approval``)."""
        now = self.clock()
        sort_key = inbox.sort_key(result_input(thread_id, call_id, None, result, False), now)
        params = (thread_id, call_id, status, key, by, note, arguments, role, deadline, result, now, sort_key)

        def decode(rows: Any, count: int) -> tuple[bool, Approval] | None:
            answer = rows[0][0] if rows else None
            if answer is None:
                return None
            if isinstance(answer, str | bytes):
                answer = _decided.decode(answer)
            row = {name: answer["row"].get(name) for name in _FIELDS}
            return bool(answer["fresh"]), Approval(**row)

        job = Job(DECIDE, params, decode, threads=(thread_id,), notify=NOTIFY_THREADS | NOTIFY_OUTBOX)
        result_: tuple[bool, Approval] | None = await self._write(job, len(result) + len(note or "") + 512)
        return result_
